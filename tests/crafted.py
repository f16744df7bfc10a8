"""Crafted bad inputs through the command line, one subprocess each, and the verdict of each run: refused by name
(exit 2, one error line), skipped and named (exit 1, a `skipped:` line), ran (exit 0), hung (killed at the timeout),
or crashed (any other ending). Covers issue #39's classes: silently wrong answers, hangs and memory, data loss,
errors, the exit rule.

    python benchmarks/crafted_inputs.py [--code PATH] [--timeout 60] [--memory 4096] [--markdown] [--json F]

Each case runs as its own `python -m vitkit` process, under a timeout and an address-space limit (`ulimit -v`,
--memory MiB; tighter where the issue measured a peak), with $HOME pointed at an empty folder that must stay empty;
`--in-process` runs them in this process instead (seconds in all, no memory bound). `--code`: another checkout (to
compare with the code before a fix). A case whose output must also say something (the EMA copy it took, the capped
workers) is *unsaid* without it; a user file changed is *data lost*; a blow-up under the limit is *memory*. Prints one
line per case and the counts per verdict (BENCHMARKS.md "Round 3").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from vitkit.utils.files import scratch_dir

Case = tuple[str, str, Callable[[Path], list[str]], str]  # (name, class, argv builder, the verdict wanted)


def _model(root: Path, fmt: str = "vitkit", **kw: object) -> Path:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", **{"width": 16, "depth": 1, "num_heads": 2, "mlp_dim": 32, "img_size": 32,
                                      "patch_size": 8, "num_classes": 3, **kw})
    m.preprocess = PreprocessConfig(img_size=m.config.img_size, mean=(0.5,) * 3, std=(0.5,) * 3,
                                    labels=["a", "b", "c"][: m.config.num_classes] if m.config.num_classes == 3 else [])
    return vitkit.save_pretrained(m, root, format=fmt)


def _png(path: Path, shape: tuple[int, int] = (12, 12)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full(shape, 100, np.uint8)).save(path)
    return path


def _spoil_safetensors(f: Path, dtype: torch.dtype | None = None, value: float | None = None) -> None:
    state = load_file(f)
    key = sorted(k for k in state if "bias" in k)[-1]
    t = state[key].clone()
    if value is not None:
        t.view(-1)[0] = value
    state[key] = t.to(dtype) if dtype is not None else t
    save_file(state, str(f), metadata={"format": "pt"})


def c_int_hf(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    _spoil_safetensors(m / "model.safetensors", torch.int32)
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_bool_timm(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    _spoil_safetensors(f, torch.bool)
    return ["convert", str(f), str(d / "out"), "--to", "vitkit", "--num-heads", "2"]


def c_complex_npz(d: Path) -> list[str]:
    f = _model(d / "m.npz", "npz")
    with np.load(f) as z:
        a = {k: z[k] for k in z.files}
    a["head/bias"] = a["head/bias"].astype(np.complex64)
    np.savez(f, **a)
    (d / "m.vitkit.json").unlink()  # (a bare .npz: its sidecar would name the rewrite first)
    return ["predict", str(_png(d / "x.png")), "--model", str(f)]


def c_nan_pth(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    state = load_file(f)
    state["head.bias"][0] = float("nan")
    torch.save({"state_dict": state}, d / "m.pth")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_one_class(d: Path) -> list[str]:
    for i in range(4):
        _png(d / "data" / "cat" / f"{i}.png")
    return ["fewshot", "--model", str(_model(d / "m")), "--data", str(d / "data")]


def _gray(root: Path) -> Path:  # a 1-channel model, for the digits fewshot defaults to
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=4, in_chans=1,
                            num_classes=10)
    m.preprocess = PreprocessConfig(img_size=(16, 16), mean=(0.5,), std=(0.5,))
    return vitkit.save_pretrained(m, root)


def c_shots(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--shots", "-5"]


def c_l2(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--l2", "nan"]


def c_negative_head(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--num-classes", "-1"]


def c_three_sides(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--img-size", "32", "32", "32"]


def c_labels(d: Path) -> list[str]:
    m = _model(d / "m", num_classes=10)
    doc = json.loads((m / "config.json").read_text())
    doc["preprocess"]["labels"] = ["a", "b", "c"]
    (m / "config.json").write_text(json.dumps(doc))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_resample(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    p = m / "preprocessor_config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "resample": 99}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_sidecar(d: Path) -> list[str]:
    f = _model(d / "m.npz", "npz")
    side = json.loads((d / "m.vitkit.json").read_text())
    _model(d / "m.npz", "npz", width=32)  # another model's weights ...
    (d / "m.vitkit.json").write_text(json.dumps(side))  # ... beside the first one's sidecar (a kill between writes)
    return ["predict", str(_png(d / "x.png")), "--model", str(f)]


def c_fifo_config(d: Path) -> list[str]:
    (d / "m").mkdir()
    (d / "m" / "model.safetensors").write_bytes(b"")
    os.mkfifo(d / "m" / "config.json")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m")]


def c_zero_config(d: Path) -> list[str]:
    (d / "m").mkdir()
    (d / "m" / "model.safetensors").write_bytes(b"")
    os.symlink("/dev/zero", d / "m" / "config.json")
    return ["convert", str(d / "m"), str(d / "out"), "--to", "vitkit"]


def _hf_config(d: Path, **changes: object) -> list[str]:
    """`predict` with an HF folder whose config.json has `changes`."""
    m = _model(d / "hf", "hf")
    doc = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps({**doc, **changes}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_string_number(d: Path) -> list[str]:
    return _hf_config(d, layer_norm_eps="tiny")


def c_wide_png(d: Path) -> list[str]:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=224, patch_size=16,
                            num_classes=3)
    m.preprocess = PreprocessConfig(img_size=(224, 224), crop_pct=0.875)
    vitkit.save_pretrained(m, d / "m")
    return ["predict", str(_png(d / "wide.png", (1, 100_000))), "--model", str(d / "m"), "--runtime", "torch"]


def c_shard_range(d: Path) -> list[str]:
    return ["eval", "--model", str(_model(d / "m")), "--data", str(d / "train-{000000..099999999}.tar")]


def c_stride0(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    state = load_file(f)
    state["pos_embed"] = torch.zeros(1, 1, 1).expand(1, 10**7, 16)
    torch.save(state, d / "m.pth")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_zip_bomb(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    torch.save(load_file(f), d / "m.pth")
    with zipfile.ZipFile(d / "m.pth", "a") as z:
        z.writestr(zipfile.ZipInfo("m/data/999"), b"\0" * (512 << 20), compress_type=zipfile.ZIP_DEFLATED)
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_huge_config(d: Path) -> list[str]:
    m = _model(d / "m")
    doc = json.loads((m / "config.json").read_text())
    doc["model"]["num_classes"] = 16_000_000
    (m / "config.json").write_text(json.dumps(doc))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_lock_link(d: Path) -> list[str]:
    (d / "notes.txt").write_text("mine")
    (d / "out").mkdir()
    os.symlink(d / "notes.txt", d / "out" / ".vitkit.lock")
    for i in range(4):
        _png(d / "src" / f"c{i % 2}" / f"{i}.png")
    return ["data", "pack", str(d / "src"), str(d / "out"), "--no-progress"]


def c_export_over(d: Path) -> list[str]:
    (d / "notes.onnx").write_text("mine")
    return ["export", str(_model(d / "m")), "--out", str(d / "notes.onnx"), "--no-check"]


def c_inspect_over(d: Path) -> list[str]:
    (d / "figs").mkdir()
    (d / "figs" / "mine.txt").write_text("mine")
    return ["inspect", "--model", str(_model(d / "m")), "--images", str(_png(d / "x.png")), "--out", str(d / "figs"),
            "--no-progress"]


def c_link_out(d: Path) -> list[str]:
    _png(d / "photos" / "a.png")
    os.symlink(_png(d / "private.png"), d / "photos" / "b.png")
    return ["predict", str(d / "photos"), "--model", str(_model(d / "m"))]


def c_sharded_hf(d: Path) -> list[str]:
    import transformers

    transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8,
        num_labels=3)).save_pretrained(d / "hf", max_shard_size="20KB")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "hf")]


def c_weightless(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    (m / "model.safetensors").unlink()
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]



# -- round 3, second pass (the list walked item by item on the fixed code) ------------------------------

TINY_RUN = ["--no-progress", "--set", "model.width=16", "--set", "model.depth=1", "--set", "model.num_heads=2",
            "--set", "model.mlp_dim=32", "--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1",
            "--set", "train.batch_size=8", "--set", "train.tensorboard=false", "--set", "data.num_workers=0"]


def _folder(root: Path, classes: tuple[str, ...], n: int = 8, shape: tuple[int, int] = (12, 12)) -> Path:
    for c in classes:
        for i in range(n):
            path = root / c / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full(shape, 20 * i + 60 * classes.index(c), np.uint8)).save(path)
    return root


def _folder_data(root: Path) -> list[str]:
    return ["--set", "data.name=\"folder\"", "--set", f"data.path=\"{root}\"", "--set", "data.holdout=0.25",
            "--set", "data.dev_fraction=0"]


def c_one_class_train(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN,
            *_folder_data(_folder(d / "data", ("cat",)))]


def c_one_class_finetune(d: Path) -> list[str]:
    return ["finetune", "--model", str(_model(d / "m")), "--data", str(_folder(d / "data", ("cat",))), "--out",
            str(d / "run"), "--steps", "2", "--no-progress"]


def c_seeds0(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--seeds", "0"]


def c_resample_str(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    p = m / "preprocessor_config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "resample": "bilinear"}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_size_list(d: Path) -> list[str]:  # transformers' get_size_dict reads [h, w]: so does vitkit
    m = _model(d / "hf", "hf")
    p = m / "preprocessor_config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "size": [32, 32]}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_shortest_edge_0(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    p = m / "preprocessor_config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "size": {"shortest_edge": 0}}))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_hf_size_disagrees(d: Path) -> list[str]:
    return _hf_config(d, image_size=64)  # the weights hold a 4x4 grid of 32 px


def c_heads_two(d: Path) -> list[str]:
    return _hf_config(d, num_attention_heads="two")


def c_deep_config(d: Path) -> list[str]:
    m = _model(d / "hf", "hf")
    doc = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps(doc)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_ema_pth(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    state = load_file(f)
    torch.save({"state_dict": {k: v + 1 for k, v in state.items()}, "state_dict_ema": state}, d / "m.pth")
    return ["predict", str(_png(d / "x.png")), "--model", str(d / "m.pth"), "--num-heads", "2"]


def c_bare_timm(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "t.safetensors"), "--to", "timm"]


def c_img_size_huge(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--img-size", "65536"]


def c_classes_huge(d: Path) -> list[str]:
    return ["convert", str(_model(d / "m")), str(d / "out"), "--to", "vitkit", "--num-classes", "1000000000"]


def c_width_huge(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN, "--set",
            "model.width=1000000"]


def c_workers_200(d: Path) -> list[str]:
    return ["eval", "--model", str(_gray(d / "m")), "--data", "digits", "--workers", "200"]


def c_tall_png_eval(d: Path) -> list[str]:
    import vitkit
    from vitkit.models.preprocess import PreprocessConfig

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=224, patch_size=16,
                            num_classes=2)
    m.preprocess = PreprocessConfig(img_size=(224, 224), crop_pct=0.875, labels=["a", "b"])
    vitkit.save_pretrained(m, d / "m")
    data = _folder(d / "data", ("a", "b"), n=2)
    _png(data / "b" / "tall.png", (1_000_000, 1))
    return ["eval", "--model", str(d / "m"), "--data", str(data)]


def c_deep_png(d: Path) -> list[str]:  # 16-bit grey 9400^2, under the pixel limit: 2.2 GB before
    side = 9400
    a = np.tile((np.arange(side, dtype=np.uint32) * 7 % 65536).astype(np.uint16), (side, 1))
    Image.fromarray(a).save(d / "deep.png", compress_level=1)
    return ["predict", str(d / "deep.png"), "--model", str(_model(d / "m")), "--runtime", "torch"]


def c_pack_backup(d: Path) -> list[str]:
    (d / "out").mkdir()
    (d / "out" / "backup.tar").write_bytes(b"mine")
    for i in range(4):
        _png(d / "src" / f"c{i % 2}" / f"{i}.png")
    return ["data", "pack", str(d / "src"), str(d / "out"), "--overwrite", "--no-progress"]


def c_export_shipped_onnx(d: Path) -> list[str]:
    m = _model(d / "m")
    (m / "model.onnx").write_bytes(b"mine")
    return ["export", str(m), "--no-check"]


def c_inspect_out_file(d: Path) -> list[str]:
    (d / "notes.txt").write_text("mine")
    return ["inspect", "--model", str(_model(d / "m")), "--images", str(_png(d / "x.png")), "--out",
            str(d / "notes.txt"), "--no-progress"]


def c_export_out_folder(d: Path) -> list[str]:
    (d / "figs").mkdir()
    (d / "figs" / "mine.txt").write_text("mine")
    return ["export", str(_model(d / "m")), "--out", str(d / "figs"), "--no-check"]


def c_embed_out_folder(d: Path) -> list[str]:
    (d / "figs").mkdir()
    (d / "figs" / "mine.txt").write_text("mine")
    return ["embed", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "-o", str(d / "figs")]


def c_openvino_home(d: Path) -> list[str]:  # the run's $HOME is checked after every case (nothing may appear)
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--runtime", "auto"]


def c_resume_fifo(d: Path) -> list[str]:
    import contextlib
    import io

    from vitkit.cli import main as cli

    args = ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli(args)  # a finished 2-step run, resumed below for 4 steps
    (d / "run" / "metrics.jsonl").unlink()
    os.mkfifo(d / "run" / "metrics.jsonl")
    return args + ["--set", "schedule.steps=4", "--resume", "--force"]


def c_proc_mem(d: Path) -> list[str]:
    return ["predict", "/proc/self/mem", str(_png(d / "x.png")), "--model", str(_model(d / "m"))]


def c_utf16_recipe(d: Path) -> list[str]:
    (d / "r.toml").write_text('description = "x"\n[schedule]\nsteps = 2\n', encoding="utf-16")
    return ["train", "--config", str(d / "r.toml"), "--out", str(d / "run"), "--no-progress"]


def c_binary_list(d: Path) -> list[str]:
    (d / "list.txt").write_bytes(bytes(range(256)) * 4)
    return ["eval", "--model", str(_model(d / "m")), "--data", str(d / "list.txt")]


def c_convert_onto_folder(d: Path) -> list[str]:
    (d / "t.safetensors").mkdir()
    return ["convert", str(_model(d / "m")), str(d / "t.safetensors"), "--to", "timm"]


def c_skimage(d: Path) -> list[str]:
    return ["inspect", "--model", str(_model(d / "m")), "--images", "skimage:download_all", "--out",
            str(d / "figs"), "--no-progress"]


def c_typo(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN[:-2],
            "--set", "model.name=\"vit_base_patch16_2244\""]


def c_opset(d: Path) -> list[str]:
    return ["export", str(_model(d / "m")), "--out", str(d / "m.onnx"), "--opset", "99"]


def c_batch0(d: Path) -> list[str]:
    return ["export", str(_model(d / "m")), "--out", str(d / "m.onnx"), "--batch", "0"]


def c_bad_choice(d: Path) -> list[str]:
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--runtime", "fast"]


def c_readme_finetune(d: Path) -> list[str]:  # README: batch 512 on 12 images shrinks, workers follow the cores
    return ["finetune", "--model", str(_model(d / "m")), "--data", str(_folder(d / "data", ("a", "b"), n=6)),
            "--img-size", "32", "--num-classes", "2", "--steps", "2", "--out", str(d / "run"), "--no-progress"]


def c_sweep_skips(d: Path) -> list[str]:
    data = _folder(d / "data", ("a", "b"))
    (data / "b" / "zz_broken.png").write_bytes(b"\x89PNG broken")
    return ["sweep", "--config", "digits_pretrain", "--lrs", "0.01", "--out", str(d / "sw"), *TINY_RUN,
            *_folder_data(data)[:-2], "--set", "data.dev_fraction=0.25"]


def c_bench_merge(d: Path) -> list[str]:
    return ["bench", "--models", "vit_ti16", "--img-size", "32", "--batch", "1", "--repeats", "1", "--warmup", "0",
            "--peers", "none", "--no-memory", "--merge", "2"]


# -- round 4 (issue #50): the door every tensor and config passes, sizes before allocation, the new surfaces --------

API = ("import sys\nfrom vitkit.cli import _user_message\ntry:\n{body}\nexcept Exception as e:\n    msg, code = "
       "_user_message(e)\n    print(f'vitkit api: error: {{msg}}', file=sys.stderr)\n    sys.exit(code)\n")


def _api(code: str) -> list[str]:
    """A case run through the Python API (`python -c`): an error reaches the command line's one error boundary
    (`vitkit.cli._user_message`), so its verdict reads as a command's."""
    return ["--api", API.format(body="\n".join("    " + ln for ln in code.strip().splitlines()))]


def _adapter(d: Path, fmt: str = "vitkit") -> Path:
    """A tiny base (`d/base`) and LoRA adapters on it (`d/ad`), in vitkit's or peft's layout."""
    import vitkit
    from vitkit.formats.adapters import save_adapters
    from vitkit.models.lora import LoraConfig, apply_lora

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=8,
                            num_classes=3)
    vitkit.save_pretrained(m, d / "base")
    m = vitkit.load_pretrained(d / "base")
    apply_lora(m, LoraConfig(rank=2))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)  # a trained B: the adapters change the output
    return save_adapters(m, d / "ad", base=str(d / "base"), format=fmt, **({"layout": "classic"} if fmt == "peft"
                                                                             else {}))


def _load_adapters(d: Path) -> list[str]:
    return _api(f"""
import torch
from vitkit.formats.adapters import load_adapters
m = load_adapters({str(d / 'ad')!r}, base={str(d / 'base')!r})
y = m(torch.rand(1, 3, 16, 16))
print('finite' if torch.isfinite(y).all() else 'NON-FINITE logits')
""")


def _spoil_adapter(d: Path, fmt: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> list[str]:
    w = _adapter(d, fmt) / "adapter_model.safetensors"
    state = load_file(w)
    key = sorted(k for k in state if "lora_B" in k)[0]
    state[key] = fn(state[key])
    save_file(state, str(w))
    return _load_adapters(d)


def _adapter_config(d: Path, fmt: str, key: str, value: object) -> list[str]:
    c = _adapter(d, fmt) / "adapter_config.json"
    doc = json.loads(c.read_text())
    (doc["lora"] if fmt == "vitkit" else doc)[key] = value
    c.write_text(json.dumps(doc))
    return _load_adapters(d)


def c_ad_nan(d: Path) -> list[str]:
    return _spoil_adapter(d, "vitkit", lambda t: t.fill_(float("nan")))


def c_ad_inf_peft(d: Path) -> list[str]:
    return _spoil_adapter(d, "peft", lambda t: t.fill_(float("inf")))


def c_ad_int(d: Path) -> list[str]:
    return _spoil_adapter(d, "vitkit", lambda t: (t * 100).to(torch.int32))


def c_ad_bool_peft(d: Path) -> list[str]:
    return _spoil_adapter(d, "peft", lambda t: t.to(torch.bool))


def c_ad_float_rank(d: Path) -> list[str]:
    return _adapter_config(d, "peft", "r", 2.5)


def c_ad_rank_huge(d: Path) -> list[str]:
    return _adapter_config(d, "vitkit", "rank", 10**9)


def c_ad_alpha(d: Path) -> list[str]:
    return _adapter_config(d, "vitkit", "alpha", 1e300)


def c_ad_alpha_peft(d: Path) -> list[str]:
    return _adapter_config(d, "peft", "lora_alpha", 1e30)


def c_ad_fifo_config(d: Path) -> list[str]:
    c = _adapter(d) / "adapter_config.json"
    c.unlink()
    os.mkfifo(c)
    return _load_adapters(d)


def c_ad_fifo_weights(d: Path) -> list[str]:
    w = _adapter(d, "peft") / "adapter_model.safetensors"
    w.unlink()
    os.mkfifo(w)
    return _load_adapters(d)


def c_ad_zero_config(d: Path) -> list[str]:
    c = _adapter(d, "peft") / "adapter_config.json"
    c.unlink()
    os.symlink("/dev/zero", c)
    return _load_adapters(d)


def c_ad_huge_config(d: Path) -> list[str]:
    c = _adapter(d, "peft") / "adapter_config.json"
    c.write_text(c.read_text().rstrip()[:-1] + ', "x": "' + "a" * (80 << 20) + '"}')
    return _load_adapters(d)


def c_ad_deep_config(d: Path) -> list[str]:
    c = _adapter(d) / "adapter_config.json"
    c.write_text(c.read_text().rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return _load_adapters(d)


def c_lora_alpha_finetune(d: Path) -> list[str]:
    return ["finetune", "--model", str(_model(d / "m")), "--data", str(_folder(d / "data", ("a", "b"), n=4)),
            "--lora", "2", "--lora-alpha", "1e30", "--steps", "2", "--out", str(d / "run"), "--no-progress"]


def c_hf_intermediate(d: Path) -> list[str]:
    return _hf_config(d, intermediate_size=262144)


def c_timm_metadata(d: Path) -> list[str]:
    from safetensors import safe_open

    f = _model(d / "m.safetensors", "timm")
    with safe_open(str(f), "pt") as fh:
        meta = fh.metadata()
    cfg = {**json.loads(meta["vitkit_config"]), "depth": 64, "mlp_dim": 262144}  # the file's own config, grown
    save_file(load_file(f), str(f), metadata={**meta, "vitkit_config": json.dumps(cfg)})
    return ["predict", str(_png(d / "x.png")), "--model", str(f)]


def c_width_set(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN, "--set",
            "model.width=65536"]


def c_glyph_classes(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN, "--set",
            "data.name=\"glyphs\"", "--set", "data.glyph_classes=1000000", "--set", "data.glyph_images=1000"]


def c_glyph_1024(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN, "--set",
            "data.name=\"glyphs\"", "--set", "data.glyph_stream=true", "--set", "data.glyph_size=1024",
            "--set", "data.glyph_images=100000"]


def c_shots_1e6(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--shots", "1000000", "--seeds", "1", "--method", "ridge"]


def c_batch_1e9(d: Path) -> list[str]:
    return ["train", "--config", "digits_pretrain", "--out", str(d / "run"), *TINY_RUN,
            *_folder_data(_folder(d / "data", ("a", "b"))), "--set", "train.batch_size=1000000000"]


def c_save_symlinked(d: Path) -> list[str]:
    (d / "real").mkdir()
    os.symlink(d / "real", d / "link")
    return _api(f"""
import vitkit
m = vitkit.create_model('vit', width=16, depth=1, num_heads=2, mlp_dim=32, img_size=16, patch_size=8)
vitkit.save_pretrained(m, {str(d / 'link')!r}, format='hf')
vitkit.save_pretrained(m, {str(d / 'link')!r}, format='hf')
""")


def c_skimage_unbundled(d: Path) -> list[str]:
    return ["inspect", "--model", str(_model(d / "m")), "--images", "skimage:lfw_subset", "--out", str(d / "figs"),
            "--no-progress"]



# round 4, second pass (issue #50): the allocator's, Python's and torch's words the first pass left
def c_max_pixels_huge(d: Path) -> list[str]:
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--max-pixels", str(2**62)]


def c_max_pixels_1e15(d: Path) -> list[str]:
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--max-pixels", str(10**15)]


def c_max_patches_1e6(d: Path) -> list[str]:
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--native", "--max-patches",
            str(10**6)]


def c_max_patches_1e9(d: Path) -> list[str]:
    return ["predict", str(_png(d / "x.png")), "--model", str(_model(d / "m")), "--native", "--max-patches",
            str(10**9)]


def c_shots_1e20(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--shots", str(10**20), "--seeds", "1"]


def c_seeds_1e20(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--seeds", str(10**20)]


def c_seeds_1e9(d: Path) -> list[str]:
    return ["fewshot", "--model", str(_gray(d / "m")), "--seeds", str(10**9)]


def _interpolation(d: Path, mode: object) -> list[str]:
    m = _model(d / "m")
    doc = json.loads((m / "config.json").read_text())
    doc["preprocess"]["interpolation"] = mode
    (m / "config.json").write_text(json.dumps(doc))
    return ["predict", str(_png(d / "x.png")), "--model", str(m)]


def c_interp_linear(d: Path) -> list[str]:
    return _interpolation(d, "linear")


def c_interp_area(d: Path) -> list[str]:
    return _interpolation(d, "area")


def c_embed_api_typo(d: Path) -> list[str]:
    _png(d / "imgs" / "a.png")
    return _api(f"""
import vitkit
vitkit.embed({str(_model(d / 'm'))!r}, [{str(d / 'imgs')!r}, {str(d / 'imgs' / 'typo.png')!r}])
""")


def c_embed_api_torn(d: Path) -> list[str]:
    _png(d / "imgs" / "a.png")
    (d / "imgs" / "torn.png").write_bytes(b"\x89PNG\r\n")
    return _api(f"""
import vitkit
vitkit.embed({str(_model(d / 'm'))!r}, [{str(d / 'imgs')!r}])
""")


def c_bare_timm_other_size(d: Path) -> list[str]:
    f = _model(d / "m.safetensors", "timm")
    save_file(load_file(f), str(f))  # the tensors alone: no metadata names the model
    return ["predict", str(_png(d / "x.png")), "--model", str(f), "--num-heads", "2", "--img-size", "48"]



def c_bench_batch(d: Path) -> list[str]:
    return ["export", str(_model(d / "m")), "--out", str(d / "m.onnx"), "--bench", "--batch", str(10**6)]


def c_bench_repeats(d: Path) -> list[str]:
    return ["export", str(_model(d / "m")), "--out", str(d / "m.onnx"), "--bench", "--repeats", str(10**9)]


def c_vitkit_bench_batch(d: Path) -> list[str]:
    return ["bench", "--models", "vit_ti16", "--img-size", "32", "--peers", "none", "--no-memory", "--batch",
            str(10**7)]

CASES: list[Case] = [
    ("int32 tensor, HF folder", "silently wrong", c_int_hf, "refused"),
    ("bool tensor, bare timm .safetensors", "silently wrong", c_bool_timm, "refused"),
    ("complex tensor, .npz", "silently wrong", c_complex_npz, "refused"),
    ("NaN tensor, timm .pth", "silently wrong", c_nan_pth, "refused"),
    ("one-class folder, fewshot", "silently wrong", c_one_class, "refused"),
    ("fewshot --shots -5", "silently wrong", c_shots, "refused"),
    ("fewshot --l2 nan", "silently wrong", c_l2, "refused"),
    ("convert --num-classes -1", "silently wrong", c_negative_head, "refused"),
    ("convert --img-size 32 32 32", "silently wrong", c_three_sides, "refused"),
    ("3 labels for a 10-way head", "silently wrong", c_labels, "refused"),
    ("preprocessor resample 99", "silently wrong", c_resample, "refused"),
    (".npz beside another model's sidecar", "silently wrong", c_sidecar, "refused"),
    ("FIFO as config.json", "hangs and memory", c_fifo_config, "refused"),
    ("/dev/zero as config.json", "hangs and memory", c_zero_config, "refused"),
    ("100000x1 PNG, centre-crop model", "hangs and memory", c_wide_png, "skipped"),
    ("shard range of 10^8", "hangs and memory", c_shard_range, "refused"),
    ("10 KB .pth of stride-0 views", "hangs and memory", c_stride0, "refused"),
    ("zip-bomb .pth", "hangs and memory", c_zip_bomb, "refused"),
    ("config.json asking for 16M classes", "hangs and memory", c_huge_config, "refused"),
    ("lock file symlinked to a user's file", "data loss", c_lock_link, "refused"),
    ("export onto a user's notes.onnx", "data loss", c_export_over, "refused"),
    ("inspect into a non-empty folder", "data loss", c_inspect_over, "refused"),
    ("predict folder with a link outside", "data loss", c_link_out, "refused"),
    ("layer_norm_eps: \"tiny\"", "errors", c_string_number, "refused"),
    ("HF folder without weights", "errors", c_weightless, "refused"),
    ("sharded HF save", "held checkpoints", c_sharded_hf, "ran"),
    # second pass: the rest of the list
    ("one-class folder, train", "silently wrong", c_one_class_train, "refused"),
    ("one-class folder, finetune", "silently wrong", c_one_class_finetune, "refused"),
    ("fewshot --seeds 0", "silently wrong", c_seeds0, "refused"),
    ("preprocessor resample \"bilinear\"", "silently wrong", c_resample_str, "refused"),
    ("preprocessor size [32, 32]", "silently wrong", c_size_list, "ran"),
    ("config.json image_size 64 on 32-px weights", "silently wrong", c_hf_size_disagrees, "refused"),
    ("timm .pth with state_dict_ema", "silently wrong", c_ema_pth, "ran"),
    ("convert --to timm bare .safetensors", "silently wrong", c_bare_timm, "ran"),
    ("convert --img-size 65536", "hangs and memory", c_img_size_huge, "refused"),
    ("convert --num-classes 10^9", "hangs and memory", c_classes_huge, "refused"),
    ("recipe model.width = 10^6", "hangs and memory", c_width_huge, "refused"),
    ("eval --workers 200", "hangs and memory", c_workers_200, "ran"),
    ("1x10^6 PNG in eval, centre-crop model", "hangs and memory", c_tall_png_eval, "skipped"),
    ("16-bit 9400^2 PNG, predict", "hangs and memory", c_deep_png, "ran"),
    ("config.json nested 10^5 deep", "hangs and memory", c_deep_config, "refused"),
    ("train --resume, FIFO metrics.jsonl", "hangs and memory", c_resume_fifo, "refused"),
    ("data pack --overwrite beside backup.tar", "data loss", c_pack_backup, "ran"),
    ("export onto a shipped model.onnx", "data loss", c_export_shipped_onnx, "refused"),
    ("inspect --out a file", "data loss", c_inspect_out_file, "refused"),
    ("predict --runtime auto ($HOME untouched)", "data loss", c_openvino_home, "ran"),
    ("num_attention_heads: \"two\"", "errors", c_heads_two, "refused"),
    ("preprocessor shortest_edge 0", "errors", c_shortest_edge_0, "refused"),
    ("/proc/self/mem as an image", "errors", c_proc_mem, "skipped"),
    ("UTF-16 recipe", "errors", c_utf16_recipe, "refused"),
    ("binary list file", "errors", c_binary_list, "refused"),
    ("export --out a folder", "errors", c_export_out_folder, "refused"),
    ("embed -o a folder", "errors", c_embed_out_folder, "refused"),
    ("convert --to timm onto a folder", "errors", c_convert_onto_folder, "refused"),
    ("skimage:download_all", "errors", c_skimage, "refused"),
    ("model name vit_base_patch16_2244", "errors", c_typo, "refused"),
    ("export --opset 99", "errors", c_opset, "refused"),
    ("export --batch 0", "errors", c_batch0, "refused"),
    ("predict --runtime fast", "errors", c_bad_choice, "refused"),
    ("README finetune on 12 images", "exit rule and docs", c_readme_finetune, "ran"),
    ("sweep over a folder with a broken image", "exit rule and docs", c_sweep_skips, "skipped"),
    ("bench --merge 2 (deprecated spelling)", "exit rule and docs", c_bench_merge, "ran"),
    # round 4 (issue #50)
    ("vitkit adapter: NaN lora_B", "silently wrong", c_ad_nan, "refused"),
    ("peft adapter: Inf lora_B", "silently wrong", c_ad_inf_peft, "refused"),
    ("vitkit adapter: int32 lora_B", "silently wrong", c_ad_int, "refused"),
    ("peft adapter: bool lora_B", "silently wrong", c_ad_bool_peft, "refused"),
    ("peft adapter: r = 2.5", "silently wrong", c_ad_float_rank, "refused"),
    ("vitkit adapter: alpha = 1e300", "silently wrong", c_ad_alpha, "refused"),
    ("peft adapter: lora_alpha = 1e30", "silently wrong", c_ad_alpha_peft, "refused"),
    ("finetune --lora-alpha 1e30", "silently wrong", c_lora_alpha_finetune, "refused"),
    ("fewshot --shots 10^6", "silently wrong", c_shots_1e6, "ran"),
    ("train.batch_size = 10^9", "silently wrong", c_batch_1e9, "ran"),
    ("vitkit adapter: rank 10^9", "hangs and memory", c_ad_rank_huge, "refused"),
    ("adapter: FIFO adapter_config.json", "hangs and memory", c_ad_fifo_config, "refused"),
    ("peft adapter: FIFO weights", "hangs and memory", c_ad_fifo_weights, "refused"),
    ("peft adapter: /dev/zero config", "hangs and memory", c_ad_zero_config, "refused"),
    ("peft adapter: 80 MB config", "hangs and memory", c_ad_huge_config, "refused"),
    ("vitkit adapter: config nested 10^5 deep", "hangs and memory", c_ad_deep_config, "refused"),
    ("HF config intermediate_size 262144", "hangs and memory", c_hf_intermediate, "refused"),
    ("timm metadata: 64 x 262144 MLP", "hangs and memory", c_timm_metadata, "refused"),
    ("model.width = 65536 (the bound)", "hangs and memory", c_width_set, "refused"),
    ("10^6 glyph classes", "hangs and memory", c_glyph_classes, "refused"),
    ("glyph stream at 1024 px", "hangs and memory", c_glyph_1024, "refused"),
    ("save_pretrained onto a symlinked folder", "errors", c_save_symlinked, "ran"),
    ("skimage:lfw_subset (not bundled)", "errors", c_skimage_unbundled, "refused"),
    # round 4, second pass (issue #50)
    ("predict --max-pixels 2^62", "hangs and memory", c_max_pixels_huge, "ran"),
    ("predict --max-pixels 10^15", "hangs and memory", c_max_pixels_1e15, "ran"),
    ("predict --native --max-patches 10^6", "hangs and memory", c_max_patches_1e6, "refused"),
    ("predict --native --max-patches 10^9", "hangs and memory", c_max_patches_1e9, "refused"),
    ("fewshot --shots 10^20", "errors", c_shots_1e20, "refused"),
    ("fewshot --seeds 10^20", "errors", c_seeds_1e20, "refused"),
    ("fewshot --seeds 10^9", "hangs and memory", c_seeds_1e9, "refused"),
    ("config.json interpolation \"linear\"", "errors", c_interp_linear, "refused"),
    ("config.json interpolation \"area\"", "silently wrong", c_interp_area, "refused"),
    ("vitkit.embed: a typo beside a folder", "silently wrong", c_embed_api_typo, "refused"),
    ("vitkit.embed: a torn PNG in the folder", "silently wrong", c_embed_api_torn, "refused"),
    ("bare timm file at --img-size 48", "silently wrong", c_bare_timm_other_size, "ran"),
    ("export --bench --batch 10^6", "hangs and memory", c_bench_batch, "refused"),
    ("export --bench --repeats 10^9", "hangs and memory", c_bench_repeats, "refused"),
    ("bench --batch 10^7", "hangs and memory", c_vitkit_bench_batch, "refused"),
]

_AT = {fn: i for i, (_, _, fn, _) in enumerate(CASES)}
ROUND4 = {name for name, *_ in CASES[_AT[c_ad_nan]:_AT[c_max_pixels_huge]]}
ROUND4B = {name for name, *_ in CASES[_AT[c_max_pixels_huge]:]}
# what a case's output must also say (the answer is right only if it is said)
SAYS = {"timm .pth with state_dict_ema": "state_dict_ema", "convert --to timm bare .safetensors": "metadata",
        "eval --workers 200": "200 data-loading workers asked for on", "bench --merge 2 (deprecated spelling)": "write --merge-rows 2",
        "1x10^6 PNG in eval, centre-crop model": "tall.png", "train --resume, FIFO metrics.jsonl": "metrics.jsonl",
        "/proc/self/mem as an image": "/proc/self/mem", "UTF-16 recipe": "r.toml", "binary list file": "list.txt",
        "convert --to timm onto a folder": "t.safetensors: is a folder",
        "fewshot --shots 10^6": "the 1000000-shot row uses", "train.batch_size = 10^9": "using batch",
        "bare timm file at --img-size 48": "posemb_grid is not in the file"}
# what may appear under $HOME: matplotlib's font cache (any program that draws a figure writes it)
HOME_ALLOWED = (".cache/matplotlib", ".config/matplotlib")
# address-space limit of a case's process (MiB), tighter than --memory where the issue measured a peak
MEMORY = {"16-bit 9400^2 PNG, predict": 2560, "timm metadata: 64 x 262144 MLP": 2048}  # (2.1 GB of weights asked)


def _in_process(argv: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess | None:
    """`vitkit ARGV` in this process (no torch import per case: seconds for the whole set), stderr captured; None
    when it ran past `timeout` (SIGALRM interrupts a blocking open of a FIFO)."""
    import contextlib
    import io
    import signal

    from vitkit.cli import main as cli

    class Hung(BaseException):  # not an Exception: no error boundary may catch it as the case's own error
        pass

    def hung(*_: object) -> None:
        raise Hung

    err, out = io.StringIO(), io.StringIO()
    old, here = signal.signal(signal.SIGALRM, hung), os.getcwd()
    signal.alarm(max(1, int(timeout)))
    try:
        os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                if argv[0] == "--api":
                    try:
                        exec(compile(argv[1], "<case>", "exec"), {})  # noqa: S102 - the case's own API call
                        rc = 0
                    except SystemExit as e:
                        rc = e.code if isinstance(e.code, int) else 1
                else:
                    rc = cli(argv)
            except Hung:
                return None
            except SystemExit as e:  # argparse's refusal (a process would exit with it)
                rc = e.code if isinstance(e.code, int) else 2
            except BaseException as e:  # noqa: BLE001 - a crash is a verdict here
                print(f"crash: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 3
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(here)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def verdict(r: subprocess.CompletedProcess | None) -> str:
    if r is None:
        return "hung"
    errors = [ln for ln in r.stderr.splitlines() if " error: " in ln]
    if any(m in r.stderr for m in ("MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc")) \
            or r.returncode in (-9, 137):
        return "memory"
    if r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr:
        return "refused"
    if r.returncode == 1 and "skipped" in r.stderr + r.stdout and "own failure" not in r.stderr:
        return "skipped"
    if r.returncode == 0:
        return "ran"
    return "crashed"


# a message that is Python's or a library's, not vitkit's words naming the input
RAW = ("enforce fail", "alloc_cpu", "OverflowError", "NotImplementedError", "RecursionError", "[Errno", "Traceback",
       "own failure", "none of the 1 images could be read")
CLASSES = ("OK", "clear error", "unclear", "silent wrong", "data lost", "memory", "hang", "traceback", "code executed")


def outcome(want: str, v: str, r: subprocess.CompletedProcess | None) -> str:
    """The issue's class of a run (its table's columns): OK (ran as wanted), clear error (refused or skipped as
    wanted, in vitkit's words), unclear (refused in raw words, or the right ending unsaid), silent wrong (ran
    where it must refuse), data lost, memory, hang, traceback (a crash)."""
    text = (r.stdout + r.stderr) if r is not None else ""
    if v in ("data lost", "memory"):
        return v
    if v == "hung":
        return "hang"
    if v == "crashed":
        return "traceback" if "Traceback" in text else "unclear"
    if v == "unsaid" or (v in ("refused", "skipped") and any(m in text for m in RAW)):
        return "unclear"
    if v == want:
        return "OK" if v == "ran" else "clear error"
    return "silent wrong" if v == "ran" else "unclear"


USER_FILES = ("notes.txt", "notes.onnx", "mine.txt", "backup.tar", "model.onnx")  # written b"mine" by the cases


def kept(d: Path) -> bool:
    """Every user file a case planted still holds b"mine"."""
    return all(p.read_bytes() == b"mine" for p in d.rglob("*")
               if p.name in USER_FILES and p.is_file() and not p.is_symlink())


def _limit_memory(mib: int) -> Callable[[], None]:
    def set_limit() -> None:  # `ulimit -v` of the case's process: a blow-up fails there, not on the machine
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    return set_limit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", default=None, help="a vitkit checkout to run instead of this one")
    ap.add_argument("--in-process", action="store_true", help="run the cases in this process (seconds in all, no "
                    "memory limit); default: one `python -m vitkit` process a case (~3 s each) under --memory")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as hung")
    ap.add_argument("--memory", type=int, default=4096, help="address-space limit of each case's process, MiB "
                    "(`ulimit -v`; default 4096)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--only", nargs="+", default=None, help="run only these classes (e.g. 'silently wrong')")
    ap.add_argument("--names", nargs="+", default=None, help="run only the cases whose name holds one of these")
    ap.add_argument("--round4", action="store_true", help="run only round 4's cases (issue #50)")
    ap.add_argument("--round4b", action="store_true", help="run only round 4's second pass (issue #50)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    code = str(Path(args.code).resolve()) if args.code else here
    home = scratch_dir("vitkit-home-")
    env = {**os.environ, "PYTHONPATH": code, "HOME": str(home)}
    rows, counts, classes = [], Counter(), Counter()
    for name, group, build, want in CASES:
        if (args.only and group not in args.only) or (args.names and not any(n in name for n in args.names)) or \
                (args.round4 and name not in ROUND4) or (args.round4b and name not in ROUND4B):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            argv = build(d)
            t0 = time.perf_counter()
            if not args.in_process:
                try:
                    cmd = ["-c", argv[1]] if argv[0] == "--api" else ["-m", "vitkit", *argv]
                    r = subprocess.run([sys.executable, *cmd], capture_output=True, text=True,
                                       timeout=args.timeout, env=env, cwd=d,
                                       preexec_fn=_limit_memory(MEMORY.get(name, args.memory)))
                except subprocess.TimeoutExpired:
                    r = None
            else:
                r = _in_process(argv, args.timeout, d)
            v, took = verdict(r), time.perf_counter() - t0
            if v == want and name in SAYS and SAYS[name] not in (r.stdout + r.stderr):
                v = "unsaid"  # the right ending without the words that make it right
            if not kept(d):
                v = "data lost"
            written = [str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() or not any(p.iterdir())]
            if any(not w.startswith(HOME_ALLOWED) for w in written):
                v = "wrote $HOME"
                print(f"    under $HOME: {written}")
                for p in home.iterdir():  # (the next case starts clean)
                    subprocess.run(["rm", "-rf", str(p)], check=False)
        counts[v] += 1
        o = outcome(want, v, r)
        classes[o] += 1
        line = ([ln for ln in (r.stderr if r else "").splitlines() if "error:" in ln or "skipped" in ln] or [""])[0]
        rows.append((group, name, want, v, took, line[:150], o))
        print(f"{'ok ' if o in ('OK', 'clear error') else 'BAD'} {group:17s} {name:40s} {v:9s} {o:12s} {took:5.1f}s  "
              f"{line[:110]}", flush=True)
    print(f"verdicts: {dict(counts)}; as wanted: {sum(r[2] == r[3] for r in rows)}/{len(rows)}")
    print("classes: " + ", ".join(f"{c} {classes[c]}" for c in CLASSES))
    if args.json:
        args.json.write_text(json.dumps([dict(zip(("class", "input", "wanted", "verdict", "seconds", "line",
                                                   "outcome"), r)) for r in rows], indent=1) + "\n")
    if args.markdown:
        print("\n| class | input | wanted | verdict |\n|---|---|---|---|")
        for group, name, want, v, *_ in rows:
            print(f"| {group} | {name} | {want} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
