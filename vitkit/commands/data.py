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
    from vitkit.data.pack import pack_source
    from vitkit.utils import check_int

    if args.action != "pack":
        raise ValueError("name an action: vitkit data pack SRC OUT")
    check_int("--shard-size", args.shard_size)
    skipped = pack_source(args.src, args.out, args.shard_size, args.channels, args.overwrite, not args.no_progress)
    for msg in skipped:
        print(f"skipped unreadable image: {msg}")
    return 1 if skipped else 0
