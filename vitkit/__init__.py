"""vitkit: the Vision Transformer of "An Image is Worth 16x16 Words" (Dosovitskiy et al., 2021)."""

from vitkit.formats import load_pretrained, push_to_hub, save_pretrained
from vitkit.inference.features import embed
from vitkit.inference.runtime import Predictor, build_predictor
from vitkit.models import (
    VisionTransformer,
    ViTConfig,
    create_model,
    list_models,
    list_pretrained,
    register_model,
    resample_posemb,
)
from vitkit.models.preprocess import PreprocessConfig

__version__ = "0.1.0"

__all__ = [
    "Predictor",
    "PreprocessConfig",
    "ViTConfig",
    "VisionTransformer",
    "build_predictor",
    "create_model",
    "embed",
    "list_models",
    "list_pretrained",
    "load_pretrained",
    "push_to_hub",
    "register_model",
    "resample_posemb",
    "save_pretrained",
    "__version__",
]
