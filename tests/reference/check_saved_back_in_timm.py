"""Checks that timm itself loads the timm files vitkit writes, with timm's own outputs: each family of
tests/fixtures/timm_families is loaded by vitkit, saved back (`save_pretrained(format="timm")`), rebuilt by
`timm.create_model(architecture, **model_args)` from the written config.json and compared with the outputs timm
gave on the original (outputs.npz); and transformers' own family folders (DeiT with teacher, DINOv2 with registers,
CLIP and SigLIP towers: random models transformers saves here) converted to timm, against vitkit's outputs of
them (equal to transformers', tests/formats/test_hf_families.py). Two environments, as timm does not load beside
the CPU torch:

    .venv/bin/python tests/reference/check_saved_back_in_timm.py save /tmp/back
    /tmp/side/bin/python tests/reference/check_saved_back_in_timm.py check /tmp/back

Last run (2026-11-24, timm 1.0.31, transformers 5.23.0): max |difference| 0.0 for every family, 1.5e-7 for
transformers' DeiT.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "timm_families"
FAMILIES = ["mae_avg", "avg_nofc", "deit3", "dinov2_reg", "clip", "reg_gap", "siglip", "deit_distilled"]


HF = ["deit", "dinov2_reg", "clip", "siglip"]  # transformers' own folders, converted to timm


def _hf_folders(out: Path) -> dict[str, Path]:
    """Random small models of transformers' family classes, saved by transformers itself."""
    import torch
    import transformers as T

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8)
    models = {"deit": T.DeiTForImageClassificationWithTeacher(T.DeiTConfig(**small, intermediate_size=64, num_labels=5)),
              "dinov2_reg": T.Dinov2WithRegistersModel(T.Dinov2WithRegistersConfig(**small, num_register_tokens=2)),
              "clip": T.CLIPVisionModel(T.CLIPVisionConfig(**small, intermediate_size=64)),
              "siglip": T.SiglipVisionModel(T.SiglipVisionConfig(**small, intermediate_size=64))}
    folders = {}
    for i, (name, model) in enumerate(models.items()):
        torch.manual_seed(i)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.3)
        folders[name] = out / f"hf_{name}_src"
        model.eval().save_pretrained(folders[name])
    return folders


def save(out: Path) -> None:
    import numpy as np
    import torch

    import vitkit

    warnings.simplefilter("ignore")
    for name in FAMILIES:
        vitkit.save_pretrained(vitkit.load_pretrained(FIXTURES / f"{name}_hub"), out / name, format="timm")
    x = torch.from_numpy(np.load(FIXTURES / "outputs.npz")["x"])
    ours = {}
    for name, folder in _hf_folders(out).items():  # vitkit's outputs of transformers' model, which equal its own
        m = vitkit.load_pretrained(folder)
        vitkit.save_pretrained(m, out / f"hf_{name}", format="timm")
        with torch.no_grad():
            ours[name] = m(x).numpy() if m.config.num_classes else m.forward_head(m.forward_features(x),
                                                                                   pre_logits=True).numpy()
    np.savez(out / "hf_outputs.npz", **ours)


def check(out: Path) -> None:
    import numpy as np
    import timm
    import torch
    from safetensors.torch import load_file

    ref = np.load(FIXTURES / "outputs.npz")
    x = torch.from_numpy(ref["x"])
    worst = 0.0
    hf_ref = np.load(out / "hf_outputs.npz")
    for name in FAMILIES + [f"hf_{n}" for n in HF]:
        cfg = json.loads((out / name / "config.json").read_text())
        model = timm.create_model(cfg["architecture"], pretrained=False, num_classes=cfg["num_classes"],
                                  **cfg["model_args"]).eval()
        model.load_state_dict(load_file(out / name / "model.safetensors"), strict=True)
        with torch.no_grad():
            if name.startswith("hf_"):  # transformers' model via vitkit: logits, or a tower's pooled features
                got = model(x) if cfg["num_classes"] else model.forward_head(model.forward_features(x),
                                                                             pre_logits=True)
                d = float((got - torch.from_numpy(hf_ref[name[3:]])).abs().max())
                print(f"{name} (transformers' {name[3:]} as timm): max |difference| against its outputs in vitkit {d:.2e}")
            else:
                d = float((model(x) - torch.from_numpy(ref[f"{name}_logits"])).abs().max())
                print(f"{name}: max |logit difference| against timm's own outputs {d:.2e}")
        worst = max(worst, d)
    sys.exit(0 if worst < 1e-4 else 1)


if __name__ == "__main__":
    (save if sys.argv[1] == "save" else check)(Path(sys.argv[2]))
