"""Publish a checkpoint folder (vitkit, hf or timm format, as save_pretrained / convert write it) to the Hugging Face
hub through huggingface_hub: the repo is created when missing, the files go up as one commit with a model card
(README.md with the hub's metadata) unless the folder keeps one. The token is huggingface_hub's (hf auth login, or
HF_TOKEN); HF_ENDPOINT picks another hub. `vitkit predict --model REPO_ID` then loads it back.
"""

from __future__ import annotations

import argparse

HELP = "upload a checkpoint folder to a Hugging Face hub repo (with a model card)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="checkpoint folder to upload (vitkit, hf or timm format)")
    parser.add_argument("repo_id", help="hub repo to upload to, written org/name (created when missing)")
    parser.add_argument("--revision", "--branch", dest="revision", default=None, metavar="BRANCH",
                        help="branch to commit to (default: main); created from main when missing")
    parser.add_argument("--private", action="store_true", help="create the repo private (a repo that exists keeps "
                        "its visibility)")
    parser.add_argument("--commit-message", default=None, help="the commit's summary line (default: 'Upload FOLDER "
                        "with vitkit')")


def run(args: argparse.Namespace) -> int:
    from vitkit.formats import push_to_hub

    commit = push_to_hub(args.folder, args.repo_id, revision=args.revision, private=args.private,
                         commit_message=args.commit_message)
    print(f"{args.folder} -> {args.repo_id} (branch {args.revision or 'main'}), commit {commit}")
    return 0
