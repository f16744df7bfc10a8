"""`vitkit finetune --lora R`: only the adapters and the new head train (every other weight of the saved, merged
model is the base's bit for bit), the adapters are saved alone beside the merged model and load back onto the base
to the same logits; [lora] recipe keys are checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.helpers import digits_model
from vitkit.cli import main
from vitkit.formats.adapters import load_adapters
from vitkit.models.lora import merge_lora
from vitkit.train.config import load_config

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

QUIET = ["train.tensorboard=false", "data.num_workers=0", "data.augment='none'", "train.eval_every=0",
         "train.ckpt_every=0", "train.batch_size=32", "schedule.warmup_steps=1"]


def test_finetune_lora_trains_adapters_only_and_saves_them_alone(tmp_path: Path) -> None:
    torch.manual_seed(0)
    base = digits_model(width=32, depth=2, num_heads=2, mlp_dim=64, img_size=8, patch_size=4)
    vitkit.save_pretrained(base, tmp_path / "base")
    rc = main(["finetune", "--model", str(tmp_path / "base"), "--config", "digits_finetune", "--img-size", "16",
               "--steps", "4", "--lr", "0.05", "--lora", "4", "--lora-targets", "q,k,v,fc1", "--grad-checkpoint",
               "--precision", "fp32", "--out", str(tmp_path / "ft"), "--no-progress",
               *[x for s in QUIET for x in ("--set", s)]])
    assert rc == 0
    res = json.loads((tmp_path / "ft" / "result.json").read_text())
    assert res["adapter_dir"] == str(tmp_path / "ft" / "adapter")
    saved = json.loads((tmp_path / "ft" / "run_config.json").read_text())
    assert saved["lora"]["rank"] == 4 and saved["model"]["grad_checkpointing"] is True
    merged = vitkit.load_pretrained(tmp_path / "ft" / "model")
    base_sd, ft_sd = base.state_dict(), merged.state_dict()
    changed = sorted(k for k in base_sd if not k.startswith(("head.", "pos_embed")) and not torch.equal(
        base_sd[k], ft_sd[k]))
    assert changed == [f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "mlp.fc1")]
    tuned = load_adapters(tmp_path / "ft" / "adapter")  # onto the recorded base
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(merge_lora(tuned)(x), merged(x), rtol=1e-5, atol=1e-5)
        assert merged(x).abs().max() > 0  # the zero head did train


def test_lora_recipe_keys_are_checked() -> None:
    cfg = load_config("digits_finetune", ["lora.rank=8", "lora.targets=['v', 'q']", "lora.train=['head', 'bias']"])
    assert cfg.lora.config().targets == ("q", "v") and cfg.lora.config().scaling == 2.0
    with pytest.raises(ValueError, match="lora.targets: unknown \\['qkv'\\]"):
        load_config("digits_finetune", ["lora.targets=['qkv']"])
    with pytest.raises(ValueError, match="use one or the other"):
        load_config("digits_finetune", ["lora.rank=8", "optim.train_blocks=1"])
