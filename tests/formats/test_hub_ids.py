"""Hub ids wherever a checkpoint path is accepted (issue #52): through huggingface_hub's own cache and client, against
a hub cache built on disk and a hub endpoint on 127.0.0.1 (tests/hub_endpoint.py); never the internet."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import vitkit
from tests.hub_endpoint import FakeHub, folder_files, hub_cache, hub_fixture  # noqa: F401 - the `hub` fixture
from tests.inputs import png_file, run_cli
from vitkit.models import VisionTransformer

pytest.importorskip("huggingface_hub")
X = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def tiny(tmp_path: Path, seed: int = 0, name: str = "src") -> tuple[VisionTransformer, dict[str, bytes]]:
    """A 32-px ViT (width 32, depth 2) and the files of its Hugging Face folder (vitkit's hf saver)."""
    torch.manual_seed(seed)
    m = vitkit.create_model("vit", img_size=32, patch_size=8, width=32, depth=2, num_heads=2, mlp_dim=64,
                            num_classes=3).eval()
    return m, folder_files(m.save_pretrained(tmp_path / name, format="hf"))


def logits(m: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return m(X)


def test_a_built_cache_is_read_offline_as_its_snapshot_folder(hub: FakeHub, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    from huggingface_hub import constants

    m, files = tiny(tmp_path)
    snap = hub_cache(Path(constants.HF_HUB_CACHE), "org/tiny", files, refs=("main", "v1"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    direct = logits(vitkit.load_pretrained(snap))
    torch.testing.assert_close(direct, logits(m))
    for load in (vitkit.load_pretrained, VisionTransformer.from_pretrained):
        torch.testing.assert_close(logits(load("org/tiny")), direct, rtol=0, atol=0)
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny", revision="v1")), direct, rtol=0, atol=0)
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny", revision=snap.name)), direct, rtol=0, atol=0)
    assert hub.count() == 0  # offline: not one request
    # offline and not cached: one line with the repo, the revision, the cache folder and HF_HUB_OFFLINE
    for repo, rev in (("org/other", None), ("org/tiny", "v2")):
        with pytest.raises(FileNotFoundError) as e:
            vitkit.load_pretrained(repo, revision=rev)
        msg = str(e.value)
        assert "\n" not in msg
        for part in (repo, f"revision {rev or 'main'}", constants.HF_HUB_CACHE, "HF_HUB_OFFLINE=1"):
            assert part in msg, (part, msg)
    # the command line: the same line, exit code 2, no traceback
    from vitkit.cli import main

    capsys.readouterr()
    assert main(["inspect", "--model", "org/other", "--revision", "v3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vitkit inspect: error: org/other (revision v3): not a local path, not in the Hugging Face "
                          f"cache {constants.HF_HUB_CACHE}, and HF_HUB_OFFLINE=1") and "\n" not in err


def test_a_tampered_cache_fails_as_the_tampered_folder_does(hub: FakeHub, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    _, files = tiny(tmp_path)
    state = load_file(tmp_path / "src" / "model.safetensors")
    key = next(k for k in state if k.endswith("query.weight"))
    state[key][0, 0] = float("nan")
    from safetensors.torch import save

    files["model.safetensors"] = save(state)
    snap = hub_cache(Path(constants.HF_HUB_CACHE), "org/tampered", files)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError) as folder_err:
        vitkit.load_pretrained(snap)
    with pytest.raises(ValueError) as hub_err:
        vitkit.load_pretrained("org/tampered")
    assert str(hub_err.value) == str(folder_err.value) and key in str(hub_err.value)


def test_first_call_downloads_only_the_loaders_files_then_the_cache_answers(hub: FakeHub, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    m, files = tiny(tmp_path)
    extra = {"README.md": b"# card\n", "pytorch_model.bin": b"not read", "open_clip_model.safetensors": b"x" * 64,
             "flax_model.msgpack": b"y"}
    commit = hub.add("org/tiny", {**files, **extra})
    caplog.set_level(logging.INFO, logger="vitkit")
    first = vitkit.load_pretrained("org/tiny")
    torch.testing.assert_close(logits(first), logits(m))
    fetched = {path.rsplit("/", 1)[1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert fetched == {"config.json", "preprocessor_config.json"} and hub.count("/cdn/") == 1  # + the weights blob
    snap = next(Path(tmp_path / "hf-cache").glob("models--org--tiny/snapshots/*"))
    assert snap.name == commit and sorted(p.name for p in snap.iterdir()) == sorted(set(files) - {"README.md"})
    assert f"org/tiny (revision main): the Hugging Face hub repo, snapshot {snap}" in caplog.text
    # again: no file is downloaded; a branch is looked up once (its commit may have moved), as huggingface_hub does
    n = len(hub.requests)
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny")), logits(m), rtol=0, atol=0)
    assert [path for _, path in hub.requests[n:]] == ["/api/models/org/tiny/revision/main"]
    # a commit pins it: not one request
    n = len(hub.requests)
    vitkit.load_pretrained("org/tiny", revision=commit)
    assert hub.requests[n:] == []


def test_revision_pins_a_branch_a_tag_or_a_commit(hub: FakeHub, tmp_path: Path) -> None:
    a, files_a = tiny(tmp_path, seed=0, name="a")
    b, files_b = tiny(tmp_path, seed=1, name="b")
    first = hub.add("org/tiny", files_a, ref="main")
    hub.refs["org/tiny"]["v1"] = first
    second = hub.add("org/tiny", files_b, ref="main")  # main moves on
    assert first != second
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny")), logits(b), rtol=0, atol=0)
    for rev in ("v1", first):
        torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny", revision=rev)), logits(a), rtol=0, atol=0)
    with pytest.raises(FileNotFoundError, match=r"^org/tiny: no revision 'nope' \(branch, tag or commit\) on http"):
        vitkit.load_pretrained("org/tiny", revision="nope")


def test_404_and_401_name_the_repo_and_whether_a_token_is_set(hub: FakeHub, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _, files = tiny(tmp_path)
    hub.add("org/private", files)
    hub.private["org/private"] = "hf_right"
    cases = [("org/missing", None, "HTTP 404", "no token is set"), ("org/private", None, "HTTP 401", "no token is set"),
             ("org/private", "hf_wrong", "HTTP 401", "a token is set")]
    for repo, token, code, note in cases:
        if token:
            monkeypatch.setenv("HF_TOKEN", token)
        with pytest.raises(FileNotFoundError) as e:
            vitkit.load_pretrained(repo)
        msg = str(e.value)
        assert msg.startswith(f"{repo} (revision main): not a local path") and code in msg and note in msg, msg
        assert "\n" not in msg
    monkeypatch.setenv("HF_TOKEN", "hf_right")  # the user's token reaches the hub
    assert isinstance(vitkit.load_pretrained("org/private"), VisionTransformer)


def test_a_dropped_connection_is_named_and_the_next_call_completes_it(hub: FakeHub, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.file_download as fd

    m, files = tiny(tmp_path)
    hub.add("org/tiny", files)
    hub.drop.add("model.safetensors")
    monkeypatch.setattr(fd.time, "sleep", lambda s: None)  # huggingface_hub's own retries, without their pauses
    with pytest.raises(ConnectionError) as e:
        vitkit.load_pretrained("org/tiny")
    msg = str(e.value)
    assert msg.startswith("org/tiny (revision main): the download from http://127.0.0.1:") and "\n" not in msg
    assert "broke off" in msg and "run again" in msg and str(tmp_path / "hf-cache") in msg
    # offline now: the half-downloaded snapshot is named as incomplete, not read
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"^org/tiny \(revision main\): the cached snapshot in .* is incomplete "
                       r"\(missing model.safetensors\) and HF_HUB_OFFLINE=1 forbids downloading it"):
        vitkit.load_pretrained("org/tiny")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.drop.clear()
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny")), logits(m), rtol=0, atol=0)


def test_an_unreachable_endpoint_and_no_cache_say_so(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    dead = FakeHub()  # bound, then closed: its port refuses connections
    dead.server.server_close()
    monkeypatch.setattr(constants, "ENDPOINT", dead.url)
    template = dead.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    with pytest.raises(FileNotFoundError) as e:
        vitkit.load_pretrained("org/tiny")
    msg = str(e.value)
    assert msg.startswith("org/tiny (revision main): not a local path, not in the Hugging Face cache")
    assert f"{dead.url} could not be reached" in msg and "HF_HUB_OFFLINE is not set" in msg and "\n" not in msg


def test_a_local_path_wins_over_the_hub_id_of_the_same_spelling(hub: FakeHub, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    _, files = tiny(tmp_path, seed=0)
    hub.add("org/tiny", files)
    local, _ = tiny(tmp_path, seed=1, name="work/org/tiny")
    monkeypatch.chdir(tmp_path / "work")
    caplog.set_level(logging.INFO, logger="vitkit")
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/tiny")), logits(local), rtol=0, atol=0)
    assert hub.count() == 0 and "org/tiny: the local path (not the Hugging Face hub id" in caplog.text
    with pytest.raises(ValueError, match=r"org/tiny: revision='v1' names a version of a hub repo, and org/tiny is a "
                                         "local path"):
        vitkit.load_pretrained("org/tiny", revision="v1")
    # a typo beside a local folder, or a file name, is never sent to the hub
    for path in ("org/tnyi", "ckpt/model.npz", "runs/model.safetensors"):
        with pytest.raises(FileNotFoundError, match=f"^no checkpoint at {path}$"):
            vitkit.load_pretrained(path)
    assert hub.count() == 0


def test_pickled_weights_only_with_the_flag(hub: FakeHub, tmp_path: Path) -> None:
    m, files = tiny(tmp_path)
    buf = io.BytesIO()
    torch.save(load_file(tmp_path / "src" / "model.safetensors"), buf)
    hub.add("org/bin", {"config.json": files["config.json"], "pytorch_model.bin": buf.getvalue()})
    with pytest.raises(FileNotFoundError) as e:
        vitkit.load_pretrained("org/bin")
    assert "no safetensors weights in the repo (fetched: config.json)" in str(e.value)
    assert "allow_pickle=True" in str(e.value) and "weights_only=True" in str(e.value)
    assert not any("pytorch_model.bin" in path for _, path in hub.requests)
    torch.testing.assert_close(logits(vitkit.load_pretrained("org/bin", allow_pickle=True)), logits(m),
                               rtol=0, atol=0)


def test_convert_with_revision_on_the_command_line(hub: FakeHub, tmp_path: Path) -> None:
    from vitkit.cli import main

    a, files_a = tiny(tmp_path, seed=0, name="a")
    _, files_b = tiny(tmp_path, seed=1, name="b")
    hub.add("org/tiny", files_a, ref="v1")
    hub.add("org/tiny", files_b, ref="main")
    assert main(["convert", "org/tiny", str(tmp_path / "out"), "--to", "timm", "--revision", "v1"]) == 0
    torch.testing.assert_close(logits(vitkit.load_pretrained(tmp_path / "out")), logits(a), rtol=0, atol=0)


def test_embed_a_hub_id_offline_from_the_cache_in_a_fresh_process(tmp_path: Path) -> None:
    """The issue's "done when": `vitkit embed --model facebook/dinov2-small` with HF_HUB_OFFLINE=1 and a populated
    cache (HF_HUB_CACHE, read by huggingface_hub at import) gives the features of the snapshot folder."""
    from tests.hub_folders import hub_folder

    folder = hub_folder(tmp_path / "made", "dinov2")
    snap = hub_cache(tmp_path / "cache", "facebook/dinov2-small", folder_files(folder))
    images = tmp_path / "photos"
    images.mkdir()
    for i in range(2):
        png_file(images / f"{i}.png", value=60 + 90 * i, size=(40, 30), mode="RGB")
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "home")}
    r = run_cli("embed", "--model", "facebook/dinov2-small", str(images), "--output", str(tmp_path / "hub.npz"),
                env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    direct = vitkit.embed(snap, images)
    got = np.load(tmp_path / "hub.npz", allow_pickle=False)
    assert list(got["paths"]) == list(direct.paths) and len(direct.paths) == 2
    np.testing.assert_allclose(got["features"], direct.features, rtol=1e-4, atol=1e-5)



def test_a_run_may_name_a_hub_id_as_its_pretrained_weights_or_teacher() -> None:
    """finetune / train check the checkpoints a recipe names before anything runs: a hub id passes (it is fetched when
    the run loads it, through load_pretrained), a missing local path is still refused."""
    from vitkit.train.config import load_config
    from vitkit.train.run import check_config

    check_config(load_config("digits_demo", ["model.pretrained=org/tiny"]))
    check_config(load_config("digits_demo", ["train.distill=hard", "train.teacher=org/teacher"]))
    with pytest.raises(FileNotFoundError, match="model.pretrained: no checkpoint at /no/such/model"):
        check_config(load_config("digits_demo", ["model.pretrained=/no/such/model"]))


def _tuned_lora(base: torch.nn.Module) -> torch.nn.Module:
    """LoRA on `base`, every trainable tensor drawn (a stand-in for a fine-tune: B is zero at init)."""
    from vitkit.models.lora import LoraConfig, apply_lora

    apply_lora(base, LoraConfig(rank=2, alpha=4.0, targets=("q", "v"), train=("head",)))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in base.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return base.eval()


def test_adapters_record_a_hub_base_by_id_and_commit_and_load_it_back(hub: FakeHub, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter folder (vitkit's and peft's layout) whose base came from the hub names the repo and the commit it
    was loaded at, not a cache path; loading it fetches that commit even after the branch moved on."""
    import json

    from huggingface_hub import constants

    from vitkit.formats.adapters import load_adapters, save_adapters

    _, files = tiny(tmp_path, seed=0)
    commit = hub.add("org/base", files, ref="v1")
    hub.refs["org/base"]["main"] = commit
    model = _tuned_lora(vitkit.load_pretrained("org/base", revision="v1"))
    want = logits(model)
    vit = save_adapters(model, tmp_path / "vitkit", base="org/base")
    peft = save_adapters(model, tmp_path / "peft", format="peft", layout="classic")  # base: the model's record
    doc = json.loads((vit / "adapter_config.json").read_text())
    assert (doc["base_model"], doc["base_revision"]) == ("org/base", commit)
    doc = json.loads((peft / "adapter_config.json").read_text())
    assert (doc["base_model_name_or_path"], doc["revision"]) == ("org/base", commit)
    _, other = tiny(tmp_path, seed=1, name="other")
    hub.add("org/base", other, ref="main")  # main moves on: the adapters still get their own base
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "fresh-cache"))
    for folder in (vit, peft):
        got = load_adapters(folder)
        torch.testing.assert_close(logits(got), want, rtol=1e-5, atol=1e-5)
    assert {p for _, p in hub.requests if "/resolve/" in p} <= {f"/org/base/resolve/{commit}/{n}" for n in files}
    # the base named by a hub id the model was not loaded from, or a path that is not there: refused by name
    with pytest.raises(ValueError, match=r"base 'org/else': a hub id, but this model's weights are not recorded as "
                                         r"loaded from it \(they came from org/base\)"):
        save_adapters(model, tmp_path / "x", base="org/else")
    with pytest.raises(FileNotFoundError, match="base 'gone/base.npz': no checkpoint at that path"):
        save_adapters(model, tmp_path / "x", base="gone/base.npz")


def test_adapters_record_a_local_base_by_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from vitkit.formats.adapters import load_adapters, save_adapters

    tiny(tmp_path, seed=0, name="work/base")
    monkeypatch.chdir(tmp_path / "work")
    model = _tuned_lora(vitkit.load_pretrained("base"))  # typed relative to the working folder
    folder = save_adapters(model, tmp_path / "adapter", base="base")
    assert json.loads((folder / "adapter_config.json").read_text())["base_model"] == str(tmp_path / "work" / "base")
    monkeypatch.chdir(tmp_path)  # elsewhere: the recorded path still finds it
    torch.testing.assert_close(logits(load_adapters(folder)), logits(model), rtol=1e-5, atol=1e-5)
