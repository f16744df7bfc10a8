"""Every command the docs show (README.md, BENCHMARKS.md, REPRODUCTION.md, docs/*.md) works as written.

Commands are taken from the fenced ```bash blocks and the inline `vitkit ...` spans. Each one is parsed by vitkit's
own command line (a flag or choice that no longer exists fails here). Those that need only what a sandbox can hold
(the demo's model, digits runs, a few image files, a small `.npz`) are also run there, in smoke form: the same
command with small step counts appended as `--set` overrides (a later --set wins), so a command that fails as
written (a recipe without data, a renamed option) fails the test. Commands that need data or machines the tests do
not have (/data/..., torchrun on several nodes, `bench` of full-size models) are parsed only.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tests.helpers import digits_model, figures_drawn_not_encoded
from tests.hub_endpoint import folder_files, hub_cache
from tests.hub_folders import hub_folder
from vitkit.cli import build_parser, main
from vitkit.data.digits import load_digits_split
from vitkit.utils.hardware import cpu_has_native_bf16

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "REPRODUCTION.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"\b(PATH|CKPT|CHECKPOINT|SRC|OUT|DIR|HOST|N|K|R|P|B)\b|\.\.\.|\[|\|")
# appended to a command that trains, so it finishes in seconds (a later --set overrides the recipe and the flags)
SMOKE_SET = ["--set", "schedule.steps=2", "--set", "schedule.warmup_steps=1", "--set", "train.batch_size=8",
             "--set", "data.num_workers=0", "--set", "train.tensorboard=false", "--set", "train.eval_every=0",
             "--no-progress"]
# appended to a documented dry run of a paper recipe: the recipe's every other key (optimizer, schedule, head,
# 18,291 classes) is read and run, on a 2-block width-32 ViT at 32 px instead of a B/16 step at 224 px (the same code
# path; a B/16 step took 40 s of the suite on one core)
TINY_ARCH = ["--set", "model.img_size=32", "--set", "model.width=32", "--set", "model.depth=2",
             "--set", "model.num_heads=2", "--set", "model.mlp_dim=64", "--set", "model.representation_size=32"]
# what runs, beside parsing: subcommand -> extra arguments for its smoke form (None: parse only)
RUN = {"train": SMOKE_SET, "finetune": SMOKE_SET, "predict": ["--no-progress"], "eval": [], "fewshot": [],
       "embed": ["--no-progress", "--overwrite"],
       "inspect": ["--no-progress", "--num-images", "2", "--components", "4"],  # 4 of E's principal components, not 28
       "convert": [], "demo": ["--steps", "1", "--no-progress"],  # one step (bf16 emulated on AVX2: ~1.4 CPU s each)
       "data": ["--no-progress"], "sweep": None, "bench": None, "export": None, "reproduce": None}


def documented_commands() -> list[tuple[str, str, bool]]:
    """(where, command, whole) for every `vitkit` / `torchrun ... vitkit.cli` / `python benchmarks/...` line of the
    docs; `whole` for a fenced block's line (a command as typed), not for an inline span (which may name a flag)."""
    found: list[tuple[str, str, bool]] = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and not line.startswith("#"):
                    found.append((doc.name, line, True))
        for span in re.findall(r"`((?:vitkit|python benchmarks/)[^`]*)`", text):
            found.append((doc.name, span, False))
    return found


def _argv(command: str) -> list[str] | None:
    """The vitkit arguments of a documented command (None for make / pip / a script)."""
    words = shlex.split(command)
    if words[0] == "vitkit":
        return words[1:]
    if words[0] == "torchrun" and "vitkit.cli" in words:
        return words[words.index("vitkit.cli") + 1:]
    return None


COMMANDS = documented_commands()
PARSER = build_parser()  # one for every check (argparse reads a parser, it never changes it): 14 ms to build each


def test_the_docs_show_commands() -> None:
    """The extraction itself works (a docs rewrite that hides every command would make the checks vacuous)."""
    subs = {a[0] for _, c, _ in COMMANDS if (a := _argv(c)) and a and not a[0].startswith("-")}
    assert {"predict", "eval", "inspect", "train", "finetune", "fewshot", "export", "bench", "reproduce",
            "data", "convert", "demo", "sweep"} <= subs, subs


def _options(argv: list[str]) -> tuple[argparse.ArgumentParser, set[str]]:
    """The (sub)parser a command line reaches and the option strings it takes."""
    parser = PARSER
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser, {o for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("where,command,whole", COMMANDS, ids=[f"{w}:{c[:60]}" for w, c, _ in COMMANDS])
def test_every_documented_command_parses(where: str, command: str, whole: bool) -> None:
    """A whole command line parses; every --flag a span or a form names exists on its subcommand."""
    if command.startswith("python benchmarks/"):
        assert (ROOT / command.split()[1]).is_file(), f"{where}: {command}: no such script"
        return
    argv = _argv(command.replace("...", "X").replace("[", " ").replace("]", " ").replace("|", " "))
    if argv is None or not argv:
        return
    _, known = _options(argv)
    unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{where}: `{command}` names options its command does not have: {unknown}"
    if whole and not PLACEHOLDER.search(command):  # placeholders (PATH, [--flag], a | b) name a form
        try:
            PARSER.parse_args(_argv(command))
        except SystemExit as e:
            assert e.code == 0, f"{where}: `{command}` does not parse"  # (--help / --version exit 0)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder with what the documented commands name: the demo's model and other digits runs, image
    files and folders, a list, a small ViT as ViT-B_16.npz."""
    root = tmp_path_factory.mktemp("docs")
    model = digits_model(width=16, depth=1, num_heads=2, mlp_dim=32)
    for run in ("demo", "train", "pre", "mpp"):
        vitkit.save_pretrained(model, root / "runs" / run / "model")
    _, test = load_digits_split()
    for i, name in enumerate(["my_digit.png", "other.jpg"]):
        Image.fromarray((test.images[i, 0].numpy() * 255).astype(np.uint8)).save(root / name)
    for folder in ("photos", "my_folder/0", "my_folder/1"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for i in range(8):
        img = Image.fromarray((test.images[i, 0].numpy() * 255).astype(np.uint8))
        img.save(root / "photos" / f"{i}.png")
        img.save(root / "my_folder" / str(i % 2) / f"{i}.png")
    (root / "list.txt").write_text("photos/0.png\nphotos/1.png\n")
    torch.manual_seed(0)
    rgb = vitkit.create_model("vit", img_size=32, patch_size=8, width=32, depth=1, num_heads=2, mlp_dim=64,
                              num_classes=5)
    vitkit.save_pretrained(rgb, root / "ViT-B_16.npz", format="npz")
    Image.fromarray(np.zeros((40, 50, 3), np.uint8)).save(root / "cat.jpg")
    hub_folder(root, "dinov2").rename(root / "dinov2-small")  # as downloaded: hub config + processor, small width
    hub_cache(root / "hf-cache", "facebook/dinov2-small", folder_files(root / "dinov2-small"))  # and as a hub id
    return root


def _complete(argv: list[str]) -> bool:
    """Whether an (inline) command is a whole command line, not a form that names a flag."""
    try:
        PARSER.parse_args(argv)
    except SystemExit:
        return False
    return True


# each command once, under the first page that shows it (README and a docs page may show the same line)
RUNNABLE = sorted({c: (w, c) for w, c, whole in reversed(COMMANDS) if (a := _argv(c)) and a
                   and RUN.get(a[0]) is not None and not PLACEHOLDER.search(c) and c.startswith("vitkit")
                   and "/data/" not in c and "/shared/" not in c and (whole or _complete(a))}.values())


@pytest.mark.parametrize("where,command", RUNNABLE, ids=[f"{w}:{c[:60]}" for w, c in RUNNABLE])
def test_documented_commands_run_in_smoke_form(where: str, command: str, sandbox: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(sandbox)
    constants = pytest.importorskip("huggingface_hub.constants")  # hub ids: read offline from the sandbox's cache
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(sandbox / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    argv = _argv(command)
    extra = list(RUN[argv[0]])
    if argv[0] in ("train", "finetune") and not cpu_has_native_bf16():
        # a recipe's bf16 on a CPU that emulates it: a ViT-B/16 step takes minutes, not seconds (the smoke form
        # checks the command line; bf16 training itself is tested on small models)
        extra += ["--set", "train.precision=fp32"]
    if argv[0] == "train" and "--dry-run" in argv:
        extra += TINY_ARCH  # a paper recipe (ViT-B/16, 224 px): parsed and run as written, on a tiny model
    if argv[0] in ("train", "finetune") and "--out" not in argv:
        extra += ["--out", f"runs/smoke-{abs(hash(command))}"]
    if argv[0] == "inspect" and "--out" not in argv:
        extra += ["--out", f"runs/inspect-{abs(hash(command))}"]
    if argv[0] in ("train", "finetune", "demo", "convert", "inspect", "export") and "--overwrite" not in argv:
        extra.append("--overwrite")  # the sandbox is shared: a second command may write the same folder
    if argv[0] == "inspect" and "--images" not in argv:
        # two images, not the default 32 (the figures' rows): a later --num-images wins over the page's own
        extra = [e for e in extra if e not in ("--num-images", "2")] + ["--num-images", "2"]
    figures_drawn_not_encoded(monkeypatch, laid_out=False)  # curves.png, inspect's: drawn, not laid out nor encoded
    # (these checks read exit codes)
    rc = main(argv + extra)
    assert rc == 0, f"{where}: `{command}` exited {rc} in its smoke form"
    assert os.getcwd() == str(sandbox)
