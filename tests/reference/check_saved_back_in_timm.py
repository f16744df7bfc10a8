"""Checks that timm itself loads the timm files vitkit writes, with timm's own outputs: each family of
tests/fixtures/timm_families is loaded by vitkit, saved back (`save_pretrained(format="timm")`), rebuilt by
`timm.create_model(architecture, **model_args)` from the written config.json and compared with the outputs timm
gave on the original (outputs.npz). Two environments, as timm does not load beside the CPU torch:

    .venv/bin/python tests/reference/check_saved_back_in_timm.py save /tmp/back
    /tmp/side/bin/python tests/reference/check_saved_back_in_timm.py check /tmp/back

Last run (2026-11-24, timm 1.0.31): max |difference| 0.0 for every family.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "timm_families"
FAMILIES = ["mae_avg", "avg_nofc", "deit3", "dinov2_reg", "clip", "reg_gap", "siglip", "deit_distilled"]


def save(out: Path) -> None:
    import vitkit

    warnings.simplefilter("ignore")
    for name in FAMILIES:
        vitkit.save_pretrained(vitkit.load_pretrained(FIXTURES / f"{name}_hub"), out / name, format="timm")


def check(out: Path) -> None:
    import numpy as np
    import timm
    import torch
    from safetensors.torch import load_file

    ref = np.load(FIXTURES / "outputs.npz")
    x = torch.from_numpy(ref["x"])
    worst = 0.0
    for name in FAMILIES:
        cfg = json.loads((out / name / "config.json").read_text())
        model = timm.create_model(cfg["architecture"], pretrained=False, num_classes=cfg["num_classes"],
                                  **cfg["model_args"]).eval()
        model.load_state_dict(load_file(out / name / "model.safetensors"), strict=True)
        with torch.no_grad():
            d = float((model(x) - torch.from_numpy(ref[f"{name}_logits"])).abs().max())
        print(f"{name}: max |logit difference| against timm's own outputs {d:.2e}")
        worst = max(worst, d)
    sys.exit(0 if worst < 1e-4 else 1)


if __name__ == "__main__":
    (save if sys.argv[1] == "save" else check)(Path(sys.argv[2]))
