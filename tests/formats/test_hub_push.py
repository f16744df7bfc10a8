"""Publishing (issue #52 item 5): `model.push_to_hub`, `vitkit.push_to_hub` and `vitkit push` upload through
huggingface_hub's own API to the hub endpoint on 127.0.0.1 (tests/hub_endpoint.py), and what was pushed loads back by
its hub id into a fresh cache with the same logits; never the internet."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import vitkit
from tests.hub_endpoint import FakeHub, hub_fixture  # noqa: F401 - the `hub` fixture
from vitkit.models import VisionTransformer

pytest.importorskip("huggingface_hub")
X = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))


def tiny(seed: int = 0) -> VisionTransformer:
    torch.manual_seed(seed)
    return vitkit.create_model("vit", img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64,
                               num_classes=3).eval()


def logits(m: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return m(X)


def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    from huggingface_hub import constants

    cache = tmp_path / name
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_push_a_model_then_load_it_by_hub_id_from_a_fresh_cache(hub: FakeHub, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_writer")
    m = tiny()
    commit = m.push_to_hub("me/tiny")
    assert hub.refs["me/tiny"]["main"] == commit and len(commit) == 40
    pushed = hub.repos["me/tiny"][commit]
    assert {"config.json", "model.safetensors", "README.md", ".gitattributes"} == set(pushed)
    card = pushed["README.md"].decode()
    assert card.startswith("---\nlibrary_name: \"vitkit\"\n") and "| input | 3 x 32 x 32 |" in card
    assert hub.commits[-1]["summary"] == "Upload tiny with vitkit"
    cache = fresh_cache(tmp_path, monkeypatch, "cache-a")
    back = vitkit.load_pretrained("me/tiny")
    torch.testing.assert_close(logits(back), logits(m), rtol=0, atol=0)
    assert back.config.extra["pretrained"] == {"hf_hub_id": "me/tiny", "revision": commit}
    assert (cache / "models--me--tiny" / "snapshots" / commit / "model.safetensors").is_file()
    copied = back.push_to_hub("me/copy", format="timm")  # weights that came by hub id: the card names their repo
    assert 'base_model: "me/tiny"' in hub.repos["me/copy"][copied]["README.md"].decode()
    # a second push (another model, hf format) is a new commit on main; the first stays loadable by its commit
    other = tiny(seed=1)
    second = vitkit.push_to_hub(other, "me/tiny", format="hf", commit_message="retrain")
    assert second != commit and hub.commits[-1]["summary"] == "retrain"
    fresh_cache(tmp_path, monkeypatch, "cache-b")
    torch.testing.assert_close(logits(vitkit.load_pretrained("me/tiny")), logits(other), rtol=0, atol=0)
    torch.testing.assert_close(logits(vitkit.load_pretrained("me/tiny", revision=commit)), logits(m), rtol=0, atol=0)


def test_vitkit_push_a_folder_to_a_private_branch(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    from vitkit.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_writer")
    m = tiny()
    folder = m.save_pretrained(tmp_path / "save", format="hf")
    (folder / ".config.json.123.tmp").write_text("an interrupted write's leftover")
    card = (folder / "README.md").read_bytes()
    assert main(["push", str(folder), "me/private", "--branch", "dev", "--private", "--commit-message", "first"]) == 0
    commit = hub.refs["me/private"]["dev"]
    assert capsys.readouterr().out.strip() == f"{folder} -> me/private (branch dev), commit {commit}"
    assert hub.private["me/private"] == "hf_writer" and hub.refs["me/private"]["main"] != commit
    assert hub.commits[-1]["summary"] == "first" and hub.commits[-1]["branch"] == "dev"
    files = hub.repos["me/private"][commit]
    assert files["README.md"] == card and not any(n.startswith(".config") for n in files)  # its own card; no tmp
    fresh_cache(tmp_path, monkeypatch, "cache")
    torch.testing.assert_close(logits(vitkit.load_pretrained("me/private", revision="dev")), logits(m),
                               rtol=0, atol=0)
    monkeypatch.delenv("HF_TOKEN")  # private: not readable without the token
    with pytest.raises(FileNotFoundError, match="HTTP 401"):
        vitkit.load_pretrained("me/private", revision="main")


def test_push_refuses_a_bad_repo_id_no_token_and_a_folder_that_is_not_a_save(
        hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from huggingface_hub import constants

    from vitkit.cli import main

    m = tiny()
    folder = m.save_pretrained(tmp_path / "save")
    for bad in ("tiny", "org/na me", "org--x/y", "a/b/c", "org/x."):
        with pytest.raises(ValueError, match=f"^{bad!r}: not a hub repo id; write it org/name"):
            vitkit.push_to_hub(folder, bad)
    assert hub.count() == 0  # refused before any request
    # no token: the endpoint's 401, said in one line with what to do; nothing committed
    with pytest.raises(ValueError) as e:
        vitkit.push_to_hub(folder, "me/tiny")
    msg = str(e.value)
    assert msg == (f"me/tiny (branch main): {hub.url} refused the upload (HTTP 401); no token is set: log in (hf auth "
                   "login) or set HF_TOKEN to a token with write access")
    monkeypatch.setenv("HF_TOKEN", "hf_reader")
    capsys.readouterr()
    assert main(["push", str(folder), "me/tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("refused the upload (HTTP 401); a token is set (HF_TOKEN or hf auth login): check that it "
                        "may write to the repo's namespace") and "\n" not in err
    assert "me/tiny" not in hub.repos and hub.commits == []
    # folders that are not a vitkit / hf / timm save
    monkeypatch.setenv("HF_TOKEN", "hf_writer")
    npz = m.save_pretrained(tmp_path / "npz", format="npz").parent
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not weights")
    linked = m.save_pretrained(tmp_path / "linked", format="hf")
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the folder")
    os.symlink(secret, linked / "notes.txt")
    cases = [(npz, r"a npz checkpoint; push takes a folder in the vitkit, hf, timm format .*vitkit convert --to hf"),
             (junk, "not a checkpoint format vitkit can read"),
             (linked, "notes.txt: a symbolic link; push uploads the folder's own files"),
             (tmp_path / "npz" / "model.npz", r"push takes a checkpoint folder \(save_pretrained.s")]
    for path, why in cases:
        with pytest.raises((ValueError, NotADirectoryError), match=why):
            vitkit.push_to_hub(path, "me/tiny")
    assert hub.commits == []
    dead = FakeHub()  # bound, then closed: its port refuses connections
    dead.server.server_close()
    monkeypatch.setattr(constants, "ENDPOINT", dead.url)
    with pytest.raises(ConnectionError, match=rf"^me/tiny \(branch main\): {dead.url} could not be reached \(.*"
                                              r"nothing was committed$"):
        vitkit.push_to_hub(folder, "me/tiny")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConnectionError, match=r"^me/tiny \(branch main\): HF_HUB_OFFLINE=1 forbids uploading"):
        vitkit.push_to_hub(folder, "me/tiny")
