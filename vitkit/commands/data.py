"""Data tools. `vitkit data pack SRC OUT --shard-size N` writes any source vitkit reads (an image folder, a list
file, CIFAR batches, digits, lfw, other shards) as WebDataset-style tar shards: OUT/train-000000.tar, ... and
OUT/test-000000.tar, ..., each sample `key.<image ext>` (a file's own bytes, or a lossless PNG) + `key.cls`,
with the class names in OUT/classes.json. Train on them with `--set data.name=shards --set
data.path=OUT/train-{000000..000009}.tar --set data.test_path=...` (or `--data OUT` where a command takes it).
Unreadable images are skipped and named.
"""

from __future__ import annotations

import argparse

HELP = "data tools: pack a data set into tar shards (vitkit data pack SRC OUT)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", help="pack: write a data set as tar shards")
    pk = sub.add_parser("pack", help="write a data set as tar shards", description=__doc__)
    pk.add_argument("src", help="digits | lfw | an image folder | a list file | a CIFAR folder | shards")
    pk.add_argument("out", help="output folder (refused if it already holds shards, unless --overwrite)")
    pk.add_argument("--shard-size", type=int, default=10_000, help="samples per shard (default: 10000)")
    pk.add_argument("--channels", type=int, default=3, choices=[1, 3], help="image channels to read (default: 3)")
    pk.add_argument("--overwrite", action="store_true", help="replace shards already in OUT")
    pk.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm.auto import tqdm

    from vitkit.data.datasets import data_config, open_splits
    from vitkit.data.shards import pack
    from vitkit.utils import check_int

    if args.action != "pack":
        raise ValueError("name an action: vitkit data pack SRC OUT")
    check_int("--shard-size", args.shard_size)
    out = Path(args.out)
    old = sorted(out.glob("*.tar")) if out.is_dir() else []
    if old and not args.overwrite:
        raise FileExistsError(f"{out} already holds {len(old)} shard(s); choose another folder or pass --overwrite")
    for f in old:
        f.unlink()
    splits = open_splits(data_config(args.src, args.channels))
    skipped: list[str] = []
    for split in ("train", "test"):
        ds = splits[split]
        bar = tqdm(range(len(ds)), desc=f"pack {split}", unit="img", disable=args.no_progress)
        before = len(skipped)
        shards = pack(ds, out, split, args.shard_size, bar, skipped)
        names = f"{shards[0].name}" + (f" .. {shards[-1].name}" if len(shards) > 1 else "") if shards else ""
        print(f"{split}: {len(ds) - (len(skipped) - before)} samples -> {len(shards)} shard(s) {names}")
    for msg in skipped:
        print(f"skipped unreadable image: {msg}")
    print(f"classes: {out / 'classes.json'} ({len(splits['train'].classes)} classes)")
    return 1 if skipped else 0
