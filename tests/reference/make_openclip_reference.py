"""Writes tests/fixtures/openclip/: a small random CLIP written by OpenCLIP itself (the `visual.*` state-dict layout of
OpenAI's and OpenCLIP's checkpoints), with its image embeddings and image tokens on a fixed input, for vitkit's
loader to match (tests/formats/families/test_families.py).

Needs open_clip (and torchvision): run it in the side environment of tests/reference/make_timm_preprocess_reference.py
with `pip install open_clip_torch` added:

    /tmp/side/bin/python tests/reference/make_openclip_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import open_clip
import torch
from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "openclip"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    vision = CLIPVisionCfg(layers=2, width=128, head_width=64, mlp_ratio=2, patch_size=8, image_size=32)  # heads of 64
    text = CLIPTextCfg(context_length=8, vocab_size=50, width=32, heads=2, layers=1)
    model = CLIP(embed_dim=12, vision_cfg=vision, text_cfg=text, quick_gelu=True).eval()  # OpenAI's QuickGELU
    with torch.no_grad():
        for p in model.parameters():  # far from the init, so every tensor matters
            p.normal_(0, 0.2)
    torch.save(model.state_dict(), OUT / "clip_quickgelu.pt")  # the whole CLIP, text tower included, as released
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    model.visual.output_tokens = True
    with torch.no_grad():
        embeds, tokens = model.visual(x)
    np.savez(OUT / "outputs.npz", x=x.numpy(), image_embeds=embeds.numpy(), tokens=tokens.numpy())
    (OUT / "made_by.json").write_text(json.dumps({"open_clip": open_clip.__version__, "torch": torch.__version__}) + "\n")


if __name__ == "__main__":
    main()
