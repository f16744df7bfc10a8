"""Writes tests/fixtures/dinov2/: small random DINOv2 backbones built and saved by the original DINOv2 code
(facebookresearch/dinov2's `DinoVisionTransformer`, as its torch hub saves `dinov2_*_pretrain.pth`: a plain state
dict with `mask_token` and, for the register models, `register_tokens`), with the code's own tokens at the
model's size and, through its `interpolate_pos_encoding`, at two others.

Two variants, as the hub builds them (dinov2/hub/backbones.py): the plain backbones (`interpolate_offset=0.1`,
no antialias: E_pos resampled with scale factors (g + 0.1) / M) and the register backbones (4 registers here 2,
`interpolate_antialias=True`, `interpolate_offset=0.0`). Needs only torch and a checkout of the repository:

    /tmp/side/bin/python tests/reference/make_dinov2_reference.py --dinov2 CHECKOUT --commit SHA

(CHECKOUT holds the `dinov2` package; its `layers` and `models` are what is imported. xformers is not used.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "dinov2"
SIDES = (32, 48, 24)  # the model's own, then two others (E_pos resampled)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dinov2", required=True, help="a folder holding the dinov2 package")
    ap.add_argument("--commit", default="", help="the repository commit of that package (for made_by.json)")
    args = ap.parse_args()
    os.environ["XFORMERS_DISABLED"] = "1"
    sys.path.insert(0, args.dinov2)
    from dinov2.models.vision_transformer import DinoVisionTransformer

    OUT.mkdir(parents=True, exist_ok=True)
    out: dict[str, np.ndarray] = {}
    for side in SIDES:
        out[f"x_{side}"] = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(side)).numpy()
    variants = {"plain": dict(num_register_tokens=0, interpolate_antialias=False, interpolate_offset=0.1),
                "reg": dict(num_register_tokens=2, interpolate_antialias=True, interpolate_offset=0.0)}
    for i, (name, kw) in enumerate(variants.items()):
        torch.manual_seed(i)
        model = DinoVisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=4,
                                      init_values=1e-5, block_chunks=0, ffn_layer="mlp", **kw).eval()
        with torch.no_grad():
            for p in model.parameters():  # far from the init (LayerScale's gammas too), so every tensor matters
                p.normal_(0, 0.3)
        torch.save(model.state_dict(), OUT / f"dinov2_{name}.pth")
        for side in SIDES:
            with torch.no_grad():
                f = model.forward_features(torch.from_numpy(out[f"x_{side}"]))
            tokens = torch.cat([f["x_norm_clstoken"][:, None], f["x_norm_regtokens"], f["x_norm_patchtokens"]], 1)
            out[f"{name}_tokens_{side}"] = tokens.numpy()
    np.savez(OUT / "outputs.npz", **out)
    made = {"dinov2": args.commit or "unknown commit", "torch": torch.__version__}
    (OUT / "made_by.json").write_text(json.dumps(made) + "\n")


if __name__ == "__main__":
    main()
