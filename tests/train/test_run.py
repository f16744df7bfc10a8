"""Run records (vitkit.train.run): a run whose initial weights are a Hugging Face hub id records the id and the
commit it loaded (run_config.json's model.pretrained / model.revision, the adapter folder's base), not a branch nor a
cache path; against the hub endpoint on 127.0.0.1 (tests/hub_endpoint.py), never the internet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vitkit
from tests.helpers import digits_model
from tests.hub_endpoint import FakeHub, folder_files, hub_fixture  # noqa: F401 - the `hub` fixture
from vitkit.cli import main
from vitkit.train.config import RunConfig, load_config

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

SMALL = ["train.tensorboard=false", "data.num_workers=0", "data.augment='none'", "train.eval_every=0",
         "train.ckpt_every=0", "train.batch_size=16", "schedule.warmup_steps=1"]


def test_a_finetune_from_a_hub_id_records_the_id_and_the_commit(hub: FakeHub, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("huggingface_hub")
    folder = vitkit.save_pretrained(digits_model(width=16, depth=1, num_heads=2, mlp_dim=32), tmp_path / "base")
    commit = hub.add("org/digits", folder_files(folder), ref="v1")
    out = tmp_path / "ft"
    rc = main(["finetune", "--model", "org/digits", "--revision", "v1", "--config", "digits_finetune", "--steps", "2",
               "--lora", "2", "--out", str(out), "--no-progress", *[x for s in SMALL for x in ("--set", s)]])
    assert rc == 0
    assert f"from org/digits (Hugging Face hub, commit {commit})" in capsys.readouterr().out
    record = json.loads((out / "run_config.json").read_text())
    saved = record["model"]
    assert (saved["pretrained"], saved["revision"]) == ("org/digits", commit)  # the commit, not the tag typed
    assert RunConfig.from_sections(record).model.revision == commit  # the record reads back as a config
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert (adapter["base_model"], adapter["base_revision"]) == ("org/digits", commit)
    assert "hf-cache" not in json.dumps(saved) + json.dumps(adapter)
    # model.revision is a hub id's: refused with a local path, and without model.pretrained
    with pytest.raises(ValueError, match="model.revision = 'v1' names a version of model.pretrained's hub repo, and "
                                         "model.pretrained is not set"):
        load_config("digits_demo", ["model.revision=v1"])
    from vitkit.train.run import check_config

    with pytest.raises(ValueError, match=f"model.pretrained {folder} is a local path"):
        check_config(load_config("digits_finetune", [f"model.pretrained={folder}", "model.revision=v1"]))
