"""Hub folders as the hub ships them: each family's base or small checkpoint's `config.json` and
`preprocessor_config.json` contents (copied from the hub's files: sizes, crops, interpolation, mean/std, and the
legacy `feature_extractor_type` files with a bare-number `size`), with random weights written by transformers' own
classes. `small=True` keeps every preprocessing field and the patch size / image size, and shrinks width and depth
only (the tests about preprocessing and resampling need not run a 22M-parameter model)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
OPENAI = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}

# facebook/dinov2-small
DINOV2_CONFIG = {
    "architectures": ["Dinov2Model"], "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "hidden_size": 384, "image_size": 518, "initializer_range": 0.02,
    "layer_norm_eps": 1e-06, "layerscale_value": 1.0, "mlp_ratio": 4, "model_type": "dinov2",
    "num_attention_heads": 6, "num_channels": 3, "num_hidden_layers": 12, "patch_size": 14, "qkv_bias": True,
    "torch_dtype": "float32", "transformers_version": "4.31.0.dev0", "use_swiglu_ffn": False}
DINOV2_PROCESSOR = {
    "crop_size": {"height": 224, "width": 224}, "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True,
    "do_rescale": True, "do_resize": True, **IMAGENET, "image_processor_type": "BitImageProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 256}}
# facebook/dinov2-with-registers-small
DINOV2_REG_CONFIG = {**DINOV2_CONFIG, "architectures": ["Dinov2WithRegistersModel"],
                     "model_type": "dinov2_with_registers", "num_register_tokens": 4,
                     "out_features": ["stage12"], "out_indices": [12]}
# openai/clip-vit-base-patch32 (CLIPModel; its vision_config as CLIPVisionConfig fills it)
CLIP_VISION = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
               "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-05,
               "projection_dim": 512, "model_type": "clip_vision_model"}
CLIP_PROCESSOR = {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                  "feature_extractor_type": "CLIPFeatureExtractor", **OPENAI, "resample": 3, "size": 224}
# google/siglip-base-patch16-224
SIGLIP_VISION = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
                 "image_size": 224, "patch_size": 16, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-06,
                 "model_type": "siglip_vision_model"}
SIGLIP_PROCESSOR = {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                    "image_processor_type": "SiglipImageProcessor", "image_std": [0.5, 0.5, 0.5],
                    "processor_class": "SiglipProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
                    "size": {"height": 224, "width": 224}}
# facebook/deit-base-distilled-patch16-224 (a bare 256: DeiT's processor resizes to 256 x 256, then crops 224)
DEIT_CONFIG = {"architectures": ["DeiTForImageClassificationWithTeacher"], "model_type": "deit", "hidden_size": 768,
               "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
               "image_size": 224, "patch_size": 16, "layer_norm_eps": 1e-12, "qkv_bias": True}
DEIT_PROCESSOR = {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                  "feature_extractor_type": "DeiTFeatureExtractor", **IMAGENET, "resample": 3, "size": 256}
# google/vit-base-patch16-224-in21k (ViTModel with its pooler; a bare 224: a square resize)
VIT_CONFIG = {"architectures": ["ViTModel"], "model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12,
              "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu", "image_size": 224,
              "patch_size": 16, "layer_norm_eps": 1e-12, "qkv_bias": True}
VIT_PROCESSOR = {"do_normalize": True, "do_resize": True, "feature_extractor_type": "ViTFeatureExtractor",
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2, "size": 224}
# facebook/vit-mae-base (the encoder; mask_ratio 0 so that transformers' pipeline does not drop patches)
MAE_CONFIG = {"architectures": ["ViTMAEForPreTraining"], "model_type": "vit_mae", "hidden_size": 768,
              "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
              "image_size": 224, "patch_size": 16, "layer_norm_eps": 1e-12, "qkv_bias": True, "mask_ratio": 0.0,
              "decoder_hidden_size": 512, "decoder_num_hidden_layers": 8, "decoder_num_attention_heads": 16,
              "decoder_intermediate_size": 2048, "norm_pix_loss": False}
MAE_PROCESSOR = {"do_normalize": True, "do_resize": True, "feature_extractor_type": "ViTFeatureExtractor",
                 **IMAGENET, "resample": 3, "size": 224}

# family -> (transformers class name, config class name, config, processor)
HUB: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "dinov2": ("Dinov2Model", "Dinov2Config", DINOV2_CONFIG, DINOV2_PROCESSOR),
    "dinov2_reg": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", DINOV2_REG_CONFIG, DINOV2_PROCESSOR),
    "clip": ("CLIPVisionModelWithProjection", "CLIPVisionConfig", CLIP_VISION, CLIP_PROCESSOR),
    "siglip": ("SiglipVisionModel", "SiglipVisionConfig", SIGLIP_VISION, SIGLIP_PROCESSOR),
    "deit": ("DeiTModel", "DeiTConfig", DEIT_CONFIG, DEIT_PROCESSOR),
    "vit": ("ViTModel", "ViTConfig", VIT_CONFIG, VIT_PROCESSOR),
    "mae": ("ViTMAEModel", "ViTMAEConfig", MAE_CONFIG, MAE_PROCESSOR),
}
SMALL = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 96,
         "projection_dim": 32}


def hub_folder(root: Path, family: str, small: bool = True, seed: int = 0, layers: int | None = None) -> Path:
    """`root`/`family`: the family's hub config.json and preprocessor_config.json as shipped (sizes shrunk when
    `small`; only the depth, to `layers` blocks, when given), random weights from transformers' class; returns the
    folder."""
    transformers = pytest.importorskip("transformers")
    cls_name, cfg_name, config, processor = HUB[family]
    config = dict(config)
    if small:
        config.update({k: v for k, v in SMALL.items() if k != "projection_dim" or k in config})
    if layers is not None:
        config["num_hidden_layers"] = layers
    if small or layers is not None:
        config.pop("out_features", None), config.pop("out_indices", None)  # the 12-layer backbone's stage names
    keep = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype",
                                                          "transformers_version")}
    torch.manual_seed(seed)
    hf = getattr(transformers, cls_name)(getattr(transformers, cfg_name)(**keep)).eval()
    with torch.no_grad():  # LayerScale's 1.0 init and zero biases hide mistakes: move every tensor off its init
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    out = root / family
    hf.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    return out


@functools.cache
def _loaded(path: str) -> Any:
    """transformers' `load_image` of a file, once per process: the session's photos are the reference's input for
    every family (decoding them, the 2048 x 2048 PNG among them, took 0.17 CPU s each time); its processors copy,
    never change, the PIL image."""
    from transformers.image_utils import load_image

    return load_image(path)


def transformers_features(folder: Path, files: list[Path], family: str) -> torch.Tensor:
    """transformers' own pipeline on image files: `load_image` (EXIF transpose, RGB), `AutoImageProcessor` as the
    folder's processor file says, the model's pooled output (`image_embeds` for CLIP with its projection)."""
    transformers = pytest.importorskip("transformers")
    proc = transformers.AutoImageProcessor.from_pretrained(folder)
    cls_name = HUB[family][0]
    model = getattr(transformers, cls_name).from_pretrained(folder).eval()
    x = proc([_loaded(str(f)) for f in files], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(pixel_values=x)
    if family == "clip":
        return out.image_embeds
    if family == "mae":  # no pooler: the class token
        return out.last_hidden_state[:, 0]
    return out.pooler_output
