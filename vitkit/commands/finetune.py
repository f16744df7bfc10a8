"""Fine-tune a pretrained ViT (any format vitkit reads) with the paper's recipe and save it in vitkit's format.

The head is replaced by a zero-initialised K-way layer and the position embeddings are resampled in
2D for --img-size (paper §3.2). The default recipe is the paper's general one (finetune_base: SGD,
384 px); the image channels and normalisation come from the checkpoint. On the bundled digits:
`vitkit finetune --model runs/train/model --config digits_finetune`. `--lora R` trains LoRA adapters on the frozen
encoder instead of every weight (vitkit.models.lora); `--grad-checkpoint` trades a forward pass for activations.
`--native --max-patches N` fine-tunes at native resolution (NaViT): each image at its own aspect ratio under N patches,
packed, the checkpoint's position embeddings resampled to each image's grid (§3.2).
"""

from __future__ import annotations

import argparse

from vitkit.commands._load_args import add_load_arguments, load_hints
from vitkit.commands._run_args import add_run_arguments, native_values, prepare, report
from vitkit.utils.options import TRAIN_PRECISIONS, add_img_size_argument, add_native_arguments, precision_help

HELP = "fine-tune a pretrained model (new head, resampled position embeddings) with the paper's recipe"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="pretrained checkpoint (vitkit folder, HF folder, .npz, timm)")
    p.add_argument("--data", default=None,
                   help="digits | lfw | a folder (root/class/*.jpg) | a CIFAR folder | a list file (default: the recipe's)")
    add_img_size_argument(p, "fine-tuning resolution (default: the recipe's, else the checkpoint's)")
    p.add_argument("--num-classes", type=int, default=None, help="K of the new head (default: the data's classes)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the recipe's)")
    p.add_argument("--layer-decay", type=float, default=None,
                   help="layer-wise lr decay, e.g. 0.75: block i of L at lr x decay^(L - i), embeddings lowest, "
                   "head full (default: the recipe's, off)")
    p.add_argument("--train-blocks", type=int, default=None,
                   help="train only the last K blocks, the final norm and the head; 0: the head alone (a linear "
                   "probe); default: everything")
    p.add_argument("--lora", type=int, default=None, metavar="R",
                   help="LoRA (Hu et al. 2022): train rank-R adapters on the frozen encoder (and the new head); the run "
                   "saves OUT/adapter (the adapters alone, small) and OUT/model (merged); 0: full fine-tuning "
                   "(default: the recipe's lora.rank, 0)")
    p.add_argument("--lora-alpha", type=float, default=None, help="LoRA scale alpha (update x alpha / R; default 16)")
    p.add_argument("--lora-targets", default=None,
                   help="comma-separated projections to adapt: q, k, v (slices of the fused qkv), proj, fc1, fc2 "
                   "(default: q,v)")
    p.add_argument("--lora-train", default=None,
                   help="comma-separated parts trained beside the adapters: head, norm, bias (default: head)")
    p.add_argument("--grad-checkpoint", action="store_true",
                   help="gradient checkpointing: recompute each block's activations in the backward pass, and fix glibc's "
                   "mmap threshold so that freed activations leave the process (less memory, more time "
                   "per step; what it saves and costs: docs/finetuning.md)")
    p.add_argument("--precision", choices=("auto", *TRAIN_PRECISIONS), default=None,
                   help=precision_help(("auto", *TRAIN_PRECISIONS), "the recipe's train.precision"))
    p.add_argument("--resume", action="store_true", help="continue from OUT/train_state.pt (bitwise exact)")
    p.add_argument("--force", action="store_true", help="with --resume: accept a recipe that differs from the saved one")
    add_native_arguments(p, training=True)
    add_run_arguments(p, "finetune_base", "finetune")
    add_load_arguments(p)


def run(args: argparse.Namespace) -> int:
    from vitkit import distributed as dist
    from vitkit.formats import load_pretrained
    from vitkit.train.run import run_experiment

    native = native_values(args)  # checked before the checkpoint is read
    hints = {k: v for k, v in load_hints(args).items() if v is not None}
    source = load_pretrained(args.model, **hints)  # read once: its channels decide the data's, then it is trained
    values = {**native, "model.pretrained": args.model, "data.channels": source.config.in_chans,
              **{f"model.{k}": v for k, v in hints.items() if k != "allow_pickle"}}  # model.revision: a hub id's
    if args.data:
        named = args.data in ("digits", "lfw")
        values.update({"data.name": args.data if named else "auto", "data.path": "" if named else args.data})
    listed = {k: v.replace(",", " ").split() if v is not None else None
              for k, v in (("lora.targets", args.lora_targets), ("lora.train", args.lora_train))}
    for k, val in (("model.img_size", args.img_size), ("model.num_classes", args.num_classes),
                   ("schedule.steps", args.steps), ("optim.lr", args.lr), ("optim.layer_decay", args.layer_decay),
                   ("optim.train_blocks", args.train_blocks), ("lora.rank", args.lora), ("lora.alpha", args.lora_alpha),
                   *listed.items(), ("model.grad_checkpointing", args.grad_checkpoint or None)):
        if val is not None:
            values[k] = val
    if args.precision is not None:
        from vitkit.utils.precision import resolve

        name, why = resolve(args.precision, native="bf16-autocast", allowed=TRAIN_PRECISIONS)
        print(f"precision: {name} ({why})", flush=True)
        values["train.precision"] = name
    cfg = prepare(args, values)
    if cfg.model.pretrained != args.model:  # a --set named another checkpoint: that one is read instead
        source = None
    code = 0
    try:
        res = run_experiment(cfg, args.out, resume=args.resume, progress=not args.no_progress, force=args.force,
                             overwrite=args.overwrite, header=True, source=source)
        if dist.rank() == 0:
            code = report(res)
    finally:
        dist.shutdown()
    return code
