"""A ViT's configuration (`ViTConfig`): plain data that round-trips through JSON, every field checked when it is made.

The fields follow the paper (§3.1, eq. 1-4; Table 1's sizes; appendix D's variants) and then the options later
families added; `models/vit.py` builds the model a config describes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch

from vitkit.models.resnet import hybrid_stride, root_width
from vitkit.utils import check_choice, check_fields, check_int, check_range, to_pair

Pooling = Literal["token", "gap", "map"]  # class token, global average (D.3), attention pooling (MAP)
PosEmb = Literal["learn1d", "learn2d", "factorized", "relative", "none", "sincos2d", "sincos2d_big_vision"]
SINCOS = ("sincos2d", "sincos2d_big_vision")
# appendix D.4's placements of 1-D / 2-D position embeddings: once at the input (the paper's default), a
# table learned per layer and added before each block, or one table added before every block
Placement = Literal["input", "every_layer", "every_layer_shared"]
PosembResample = Literal["bicubic", "bicubic_antialias", "bicubic_dino"]
POSEMB_RESAMPLE: tuple[str, ...] = get_args(PosembResample)
BlockKind = Literal["global", "axial"]  # global self-attention, or Axial-ViT's row + column blocks (D.7)
Gelu = Literal["tanh", "exact", "quick"]
# GELU flavour -> torch's `approximate` argument: the original JAX code's tanh formula, or the exact erf; "quick" is
# OpenAI CLIP's x * sigmoid(1.702 x) (QuickGELU), which torch's GELU does not have
GELU_APPROXIMATE: dict[str, str] = {"tanh": "tanh", "exact": "none"}
GELUS = ("tanh", "exact", "quick")


# Sanity bounds, checked before anything is built (a config of depth 100000 would take minutes and gigabytes
# first); far above every published ViT (ViT-22B: depth 48, width 6144, MLP 24576).
MAX_SIZES = {"img_size": 1 << 16, "patch_size": 1 << 12, "in_chans": 1 << 10, "width": 1 << 16, "depth": 1 << 10,
             "num_heads": 1 << 12, "mlp_dim": 1 << 18, "num_classes": 1 << 24, "num_registers": 1 << 10}
MAX_PARAMETERS = 10**11
MAX_TOKENS = 1 << 18  # patches per image (a 8192 px image in 16 px patches)


@dataclass
class ViTConfig:
    """Plain-data description of a ViT; round-trips through JSON (`to_dict` / `from_dict`).

    The fields come in the order a reader of the paper meets them: the model of §3.1 with Table 1's sizes and the
    original code's numerics, its pooling and head, position embeddings, the hybrid stem, the block (appendix
    D.7), regularisation, and last the options later families added (vitkit/formats/families/ names the family
    each marks). The JSON keys are the field names, in any order.
    `__post_init__` checks each group with its own method, so a bad config fails before any work, naming the field.
    """

    # --- the paper's model (§3.1, eq. 1-4; Table 1's sizes) ----------------------------------------------------
    img_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    width: int = 768  # D, the hidden size
    depth: int = 12  # L, the number of encoder blocks
    num_heads: int = 12
    mlp_dim: int = 3072
    # its numerics: the original code's q, k, v biases, LayerNorm eps 1e-6 and tanh GELU ("exact": the erf form,
    # "quick": CLIP's QuickGELU)
    qkv_bias: bool = True
    ln_eps: float = 1e-6
    gelu: Gelu = "tanh"

    # --- pooling and head (§3.1: the class token, the pre-training head; appendix D.3: global average pooling) ---
    pooling: Pooling = "token"  # class token (paper default), global average pooling (appendix D.3), or "map"
    # (multi-head attention pooling: a learned query attends over the patch tokens, big_vision's MAPHead)
    class_token: bool | None = None  # a class token in the sequence; None: exactly when pooling = "token". With
    # pooling "gap" a class token is carried but not pooled (timm's global_pool="avg" beside a class token)
    fc_norm: bool = False  # the final LayerNorm after pooling instead of before it (timm's fc_norm: MAE, BEiT)
    representation_size: int | None = None  # "pre_logits" Dense + tanh (pre-training head)
    head_bias_init: float = 0.0  # the paper's 21k pre-training used -10 with sigmoid cross-entropy

    # --- position embeddings (§3.1; appendix D.4; other resolutions §3.2) ---------------------------------------
    posemb: PosEmb = "learn1d"  # appendix D.4: none, learned 1D / 2D (absolute), relative (in the attention);
    # "sincos2d": fixed 2-D sine-cosine ("Better plain ViT baselines", Beyer et al. 2022); "sincos2d_big_vision":
    # big_vision's exact formula (other frequencies and channel order, models/posemb.py); "factorized": NaViT's
    # learned X- and Y-embeddings of width D, summed (learn2d concatenates two of D/2)
    posemb_placement: Placement = "input"  # appendix D.4, for learn1d / learn2d
    posemb_resample: PosembResample = "bicubic"  # how a learned 1D E_pos is resampled to another grid (§3.2):
    # "bicubic" to the grid's size (transformers' classes); "bicubic_antialias" (timm's resample_abs_pos_embed, DINOv2's
    # register backbones); "bicubic_dino": scale factors (g + 0.1) / g_old, DINO's and DINOv2's plain backbones
    dynamic_img_size: bool = False  # accept other resolutions by resampling E_pos on the fly (§3.2)
    posemb_grid: tuple[int, int] | None = None  # a learned 1D table kept at a checkpoint's own grid (DINOv2's 37x37
    # beside its 224 px crop): E_pos resampled from it once for every other input grid, the table saved as it came;
    # None: the table is at img_size's grid and `set_img_size` resamples it for good (§3.2)

    # --- the hybrid (§3.1 "Hybrid Architecture"): a BiT ResNet stem whose feature map is the patch grid -----------
    resnet_layers: tuple[int, ...] | None = None
    resnet_width: float = 1  # width factor of the hybrid's ResNet: the root conv has 64 x this channels

    # --- the block (appendix D.7) --------------------------------------------------------------------------------
    block: BlockKind = "global"  # "axial": Axial-ViT, GAP pooling, 2-D patch grid

    # --- regularisation (training; appendix B.1) -----------------------------------------------------------------
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0

    # --- later families' options (vitkit/formats/families/ says which option marks which family) ---------------
    num_registers: int = 0  # register tokens (Darcet et al. 2024): learned, no E_pos, dropped at the output
    distill_token: bool = False  # DeiT's distillation token (Touvron et al. 2021): a second class token with its
    # own head, trained towards a teacher; the two heads' logits are averaged at inference
    layer_scale: float | None = None  # LayerScale (Touvron et al. 2021, "Going deeper"): a learned per-channel
    # scale on each residual branch, initialised to this value (DeiT III, DINOv2); None: none
    pre_norm: bool = False  # a LayerNorm on z_0 before the first block (CLIP's ln_pre, timm's norm_pre)
    patch_bias: bool = True  # the patch embedding's bias (CLIP has none)

    # --- bookkeeping ---------------------------------------------------------------------------------------------
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. "assumed": what a loader took as given (logged)

    def __post_init__(self) -> None:
        """Every value is checked here, group by group, so a bad config fails before any work, naming the field."""
        self._check_model()
        self._check_regularisation()
        self._check_hybrid()
        self._check_pooling()
        self._check_family_options()
        self._check_posemb()
        self._check_block()
        for side in self.img_size:
            if side % self.total_stride:
                raise ValueError(
                    f"image size {self.img_size} is not divisible by the patch stride {self.total_stride}"
                )
        if self.num_patches > MAX_TOKENS:  # checked before a position table or a model of that length is built
            raise ValueError(f"image size {self.img_size} with patch stride {self.total_stride} makes "
                             f"{self.num_patches:,} patches, over vitkit's sanity bound of {MAX_TOKENS:,} tokens "
                             "(attention over them would need terabytes)")

    def _check_model(self) -> None:
        """The paper's model: sizes within vitkit's sanity bounds, heads that divide the width, its numerics."""
        self.img_size = to_pair(self.img_size, "img_size")
        check_int("img_size", min(self.img_size))
        check_int("img_size", max(self.img_size), high=MAX_SIZES["img_size"])
        for key in ("patch_size", "in_chans", "width", "depth", "num_heads", "mlp_dim"):
            check_int(key, getattr(self, key), high=MAX_SIZES[key])
        check_int("num_classes", self.num_classes, low=0, high=MAX_SIZES["num_classes"])
        if self.representation_size is not None:
            check_int("representation_size", self.representation_size, high=MAX_SIZES["width"])
        est = self.depth * (4 * self.width**2 + 2 * self.width * self.mlp_dim)
        if est > MAX_PARAMETERS:
            raise ValueError(f"depth {self.depth} x width {self.width} (MLP {self.mlp_dim}) makes ~{est:.2e} encoder "
                             f"parameters, over vitkit's sanity bound of {MAX_PARAMETERS:.0e} (ViT-22B has 2.2e10)")
        check_range("ln_eps", self.ln_eps, 0.0, 1.0, low_open=True)
        if self.width % self.num_heads:
            raise ValueError(f"width {self.width} is not divisible by num_heads {self.num_heads}")
        if self.gelu not in GELUS:
            raise ValueError(f"gelu must be one of {', '.join(GELUS)}, got {self.gelu!r}")

    def _check_regularisation(self) -> None:
        for key in ("dropout", "attn_dropout", "drop_path"):
            check_range(key, getattr(self, key), 0.0, 1.0)

    def _check_hybrid(self) -> None:
        if self.resnet_layers is not None:
            if not isinstance(self.resnet_layers, (list, tuple)) or not self.resnet_layers:
                raise ValueError(f"resnet_layers must be a list of unit counts per stage, got {self.resnet_layers!r}")
            self.resnet_layers = tuple(check_int("resnet_layers[]", n) for n in self.resnet_layers)
            check_range("resnet_width", self.resnet_width, 0.0, math.inf, low_open=True)
            root_width(self.resnet_width)  # a factor whose root width GroupNorm cannot split is refused here

    def _check_pooling(self) -> None:
        """Pooling and the class token (resolved here when not given); the boolean switches."""
        check_choice("pooling", self.pooling, ("token", "gap", "map"))
        if self.class_token is None:
            self.class_token = self.pooling == "token"
        for key in ("class_token", "fc_norm", "pre_norm", "patch_bias"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be true or false, got {getattr(self, key)!r}")
        if self.pooling == "token" and not self.class_token:
            raise ValueError("pooling='token' pools the class token: it needs class_token=True")
        if self.class_token and self.pooling == "map":
            raise ValueError("attention pooling (pooling='map') pools the patches; a class token beside it is not a "
                             "model vitkit builds")

    def _check_family_options(self) -> None:
        if self.layer_scale is not None:
            check_range("layer_scale", self.layer_scale, 0.0, math.inf, low_open=True)
        check_int("num_registers", self.num_registers, low=0, high=MAX_SIZES["num_registers"])
        # a representation layer on the class token beside it: transformers' DeiTModel's pooler (no heads then)
        if self.distill_token and (self.pooling != "token" or self.fc_norm or (self.representation_size
                                                                                and self.num_classes > 0)):
            raise ValueError("a distillation token sits beside the class token: it needs pooling='token', no "
                             "fc_norm, and no representation_size under heads")

    def _check_posemb(self) -> None:
        check_choice("posemb", self.posemb, ("learn1d", "learn2d", "factorized", "relative", "none", *SINCOS))
        check_choice("posemb_placement", self.posemb_placement, ("input", "every_layer", "every_layer_shared"))
        check_choice("posemb_resample", self.posemb_resample, POSEMB_RESAMPLE)
        if self.posemb_grid is not None:
            self.posemb_grid = to_pair(self.posemb_grid, "posemb_grid")
            check_int("posemb_grid", min(self.posemb_grid))
            if self.posemb != "learn1d" or self.posemb_grid[0] * self.posemb_grid[1] > MAX_TOKENS:
                raise ValueError(f"posemb_grid {list(self.posemb_grid)} keeps a learned 1D table (posemb='learn1d') "
                                 f"of at most {MAX_TOKENS:,} positions; this config has posemb={self.posemb!r}")
        if self.posemb_placement != "input" and self.posemb not in ("learn1d", "learn2d"):
            raise ValueError(f"posemb_placement {self.posemb_placement!r} applies to learned 1D / 2D position "
                             f"embeddings, not posemb={self.posemb!r}")
        if self.posemb in SINCOS and (self.width % 4 or (self.posemb == "sincos2d_big_vision" and self.width < 8)):
            also = " (>= 8 for big_vision's formula)" if self.posemb == "sincos2d_big_vision" else ""
            raise ValueError(f"2-D sin-cos position embeddings need a width divisible by 4{also}, got {self.width}")
        if self.posemb == "learn2d" and self.width % 2:
            raise ValueError("learned 2D position embeddings need an even width")

    def _check_block(self) -> None:
        """Axial-ViT (appendix D.7) keeps the patch grid 2-D: GAP, no class token, no registers, no 1-D biases."""
        check_choice("block", self.block, ("global", "axial"))
        if self.block != "axial":
            return
        if self.pooling != "gap" or self.class_token:
            raise ValueError("Axial-ViT keeps the patch grid 2-D and has no class token: use pooling='gap'")
        if self.num_registers:
            raise ValueError("Axial-ViT's row and column attention sees only the patch grid: it takes no registers")
        if self.posemb == "relative":
            raise ValueError("relative position embeddings are 1-D over the whole sequence; Axial-ViT's row and "
                             "column attention does not take them (use learn1d or learn2d)")

    def grid_of_images(self, x: torch.Tensor) -> tuple[int, int]:
        """The (gh, gw) patch grid of a batch of images `x` (B, C, H, W), or a ValueError naming what does not fit
        this config (type, shape, channels, dtype, stride, size)."""
        cfg = self
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"expected a torch.Tensor of images (B, C, H, W), got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(
                f"expected a 4-D batch of images (B, {cfg.in_chans}, H, W), got a {x.ndim}-D tensor of shape "
                f"{tuple(x.shape)}" + ("; add a batch dimension with x.unsqueeze(0)" if x.ndim == 3 else "")
            )
        if x.shape[1] != cfg.in_chans:
            raise ValueError(f"expected {cfg.in_chans} input channels, got {x.shape[1]} (shape {tuple(x.shape)})")
        if not x.is_floating_point():
            raise ValueError(f"expected normalised float images, got a {x.dtype} tensor; for pixels 0..255 use "
                             "model.preprocess(x.float() / 255)")
        H, W = x.shape[-2:]
        s = cfg.total_stride
        if H % s or W % s:
            raise ValueError(f"image size {H}x{W} is not divisible by the patch stride {s}")
        if (H, W) != cfg.img_size and not cfg.dynamic_img_size:
            raise ValueError(
                f"this model expects {cfg.img_size[0]}x{cfg.img_size[1]} images, got {H}x{W}; "
                "build it with dynamic_img_size=True or call model.set_img_size(...) to resample "
                "the position embeddings (paper §3.2)"
            )
        return H // s, W // s

    @property
    def total_stride(self) -> int:
        """Pixels per token side: the patch size, times 16 for a hybrid's ResNet stem."""
        if self.resnet_layers is None:
            return self.patch_size
        return self.patch_size * hybrid_stride(self.resnet_layers)

    @property
    def grid_size(self) -> tuple[int, int]:
        s = self.total_stride
        return (self.img_size[0] // s, self.img_size[1] // s)

    @property
    def table_grid(self) -> tuple[int, int]:
        """The grid of the learned position table(s): `posemb_grid` where the model keeps a checkpoint's own,
        else the input's (`grid_size`)."""
        return self.posemb_grid or self.grid_size

    @property
    def table_img_size(self) -> tuple[int, int]:
        """The image size the position table belongs to (a saved file's image size): `img_size` unless the model
        keeps a checkpoint's own table at another grid (`posemb_grid`)."""
        gh, gw = self.table_grid
        return (gh * self.total_stride, gw * self.total_stride)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def num_class_tokens(self) -> int:
        """Tokens before the patches that take a position embedding: the class token (and DeiT's
        distillation token)."""
        return (1 + int(self.distill_token)) if self.class_token else 0

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches in the sequence: the class (and distillation) token, then the registers."""
        return self.num_class_tokens + self.num_registers

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["img_size"] = list(self.img_size)
        if self.posemb_grid is not None:
            d["posemb_grid"] = list(self.posemb_grid)
        if self.resnet_layers is not None:
            d["resnet_layers"] = list(self.resnet_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ViTConfig":
        if not isinstance(d, dict):
            raise ValueError(f"a ViT config is a JSON object, got {type(d).__name__}")
        check_fields(cls, d, "ViTConfig fields")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ViTConfig":
        return cls.from_dict(json.loads(text))

    def replace(self, **overrides: Any) -> "ViTConfig":
        return dataclasses.replace(self, **overrides)
