"""Model definitions: the ViT (vit.py; its config in config.py, its layers in layers.py, its features in
features.py), packed images of their own sizes (packing.py, NaViT), position-embedding resampling (posemb.py), the
registry, the BiT ResNets and hybrid stem (resnet.py)."""

from vitkit.models.packing import PackedBatch
from vitkit.models.posemb import resample_posemb
from vitkit.models.pretrained_tags import list_pretrained
from vitkit.models.registry import create_model, list_models, register_model
from vitkit.models.resnet import BiTConfig, ResNetStem, ResNetV2
from vitkit.models.vit import Attention, Block, VisionTransformer, ViTConfig

__all__ = [
    "Attention",
    "BiTConfig",
    "Block",
    "ResNetStem",
    "ResNetV2",
    "PackedBatch",
    "ViTConfig",
    "VisionTransformer",
    "create_model",
    "list_models",
    "list_pretrained",
    "register_model",
    "resample_posemb",
]
