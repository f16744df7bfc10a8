"""LoRA adapters saved alone (vitkit.formats.adapters): vitkit's folder back onto its base (any format, a different
base refused), and peft's folder read by peft's own PeftModel onto transformers' ViT / DINOv2 with the same
outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from tests.helpers import random_vit
from vitkit.formats.adapters import default_layout, load_adapters, save_adapters
from vitkit.models.lora import LoraConfig, apply_lora, lora_modules, merge_lora

ALL = ("q", "k", "v", "proj", "fc1", "fc2")
TOL = dict(rtol=2e-5, atol=2e-5)


def _train_a_little(model: torch.nn.Module, seed: int = 1) -> None:
    """Stand-in for a fine-tune: every trainable tensor (B is zero at init) drawn, so each one matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def _x(model: torch.nn.Module) -> torch.Tensor:
    c = model.config
    return torch.randn(2, c.in_chans, *c.img_size, generator=torch.Generator().manual_seed(3))


def _tuned(base_dir: Path, lcfg: LoraConfig, num_classes: int = 3) -> torch.nn.Module:
    model = vitkit.load_pretrained(base_dir, num_classes=num_classes, img_size=24)  # a fine-tune's new head, size
    apply_lora(model, lcfg)
    _train_a_little(model)
    return model.eval()


def test_vitkit_adapters_load_back_onto_their_base_in_any_format(tmp_path: Path) -> None:
    vitkit.save_pretrained(random_vit(), tmp_path / "base")
    model = _tuned(tmp_path / "base", LoraConfig(rank=2, alpha=4.0, targets=ALL, train=("head", "norm")))
    folder = save_adapters(model, tmp_path / "adapter", base=str(tmp_path / "base"))
    doc = json.loads((folder / "adapter_config.json").read_text())
    assert doc["format"] == "vitkit-lora" and doc["base_fingerprint"] == model.lora_base_hash
    adapter_bytes = (folder / "adapter_model.safetensors").stat().st_size
    assert adapter_bytes < (tmp_path / "base" / "model.safetensors").stat().st_size / 2
    x = _x(model)
    with torch.no_grad():
        want = model(x)
        again = load_adapters(folder)  # the base from the recorded path
        torch.testing.assert_close(again(x), want, rtol=0, atol=0)
        # the same base weights written as a transformers folder hash the same, and give the same model
        vitkit.save_pretrained(vitkit.load_pretrained(tmp_path / "base"), tmp_path / "base_hf", format="hf")
        torch.testing.assert_close(load_adapters(folder, base=tmp_path / "base_hf")(x), want, **TOL)
        merged = merge_lora(again)
        assert not lora_modules(merged)
        torch.testing.assert_close(merged(x), want, **TOL)
    with pytest.raises(FileExistsError, match="already holds adapters"):
        save_adapters(model, folder)


def test_adapters_refuse_another_base(tmp_path: Path) -> None:
    base = random_vit()
    vitkit.save_pretrained(base, tmp_path / "base")
    model = _tuned(tmp_path / "base", LoraConfig(rank=2))
    folder = save_adapters(model, tmp_path / "adapter", base=str(tmp_path / "base"))
    with torch.no_grad():
        base.blocks[0].mlp.fc1.weight[0, 0] += 0.01
    vitkit.save_pretrained(base, tmp_path / "other")
    with pytest.raises(ValueError, match="not the base these adapters were trained on"):
        load_adapters(folder, base=tmp_path / "other")
    with pytest.raises(ValueError, match="layout must be one of classic, current, got 'sideways'"):
        save_adapters(model, tmp_path / "p", format="peft", layout="sideways")
    with pytest.raises(ValueError, match="unknown adapter format 'onnx'"):
        save_adapters(model, tmp_path / "p", format="onnx")


def _within(seconds: float, fn, *args):  # noqa: ANN001, ANN202
    """`fn(*args)` in a daemon thread: its result or its exception, or a test failure after `seconds` (a reader
    that blocks on a FIFO fails the test instead of hanging the suite)."""
    import threading

    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} still running after {seconds} s (blocked on a FIFO?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.fixture
def adapter_folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(base, vitkit-layout adapters, peft-layout adapters) of a tiny ViT, each adapter with a trained (non-zero) B."""
    vitkit.save_pretrained(random_vit(in_chans=3, num_classes=3), tmp_path / "base")
    model = _tuned(tmp_path / "base", LoraConfig(rank=2), num_classes=3)
    vk = save_adapters(model, tmp_path / "vk", base=str(tmp_path / "base"))
    model = vitkit.load_pretrained(tmp_path / "base")
    apply_lora(model, LoraConfig(rank=2))
    _train_a_little(model)
    peft = save_adapters(model, tmp_path / "peft", format="peft", layout="classic", base=str(tmp_path / "base"))
    return tmp_path / "base", vk, peft


def _rewrite_weight(folder: Path, fn) -> None:  # noqa: ANN001
    from safetensors.torch import load_file, save_file

    w = folder / "adapter_model.safetensors"
    state = load_file(w)
    key = sorted(k for k in state if "lora_B" in k)[0]
    state[key] = fn(state[key])
    save_file(state, str(w))


def _rewrite_config(folder: Path, **changes: object) -> None:
    c = folder / "adapter_config.json"
    doc = json.loads(c.read_text())
    (doc["lora"] if "lora" in doc else doc).update(changes)
    c.write_text(json.dumps(doc))


@pytest.mark.parametrize("layout", ["vk", "peft"])
@pytest.mark.parametrize("spoil, message", [
    (lambda t: t.fill_(float("nan")), "holds .* non-finite value"),
    (lambda t: t.fill_(float("inf")), "holds .* non-finite value"),
    (lambda t: (t * 100).to(torch.int32), "is torch.int32; weights are floating point"),
    (lambda t: t.to(torch.bool), "is torch.bool; weights are floating point"),
])
def test_adapter_weights_pass_the_checks_base_weights_pass(adapter_folders, layout: str, spoil, message: str
                                                            ) -> None:  # noqa: ANN001
    """Before: NaN / Inf / int32 / bool adapter tensors loaded (the base weights' value check was not applied)."""
    base, vk, peft = adapter_folders
    folder = vk if layout == "vk" else peft
    _rewrite_weight(folder, spoil)
    with pytest.raises(ValueError, match=f"adapter_model.safetensors: tensor '.*lora_B.*' {message}"):
        load_adapters(folder, base=base)


def test_adapter_configs_are_refused_before_anything_is_allocated(adapter_folders) -> None:  # noqa: ANN001
    """A float rank (peft's r = 2.5 was truncated to 2), a rank of 10^9 (reached the allocator: 64 GB asked),
    alpha 1e300 (non-finite logits) and lora_alpha 1e30 (loaded, then a fine-tune ran on)."""
    base, vk, peft = adapter_folders
    _rewrite_config(peft, r=2.5)
    with pytest.raises(ValueError, match=r"adapter_config.json: r must be a positive whole number .* got 2.5"):
        load_adapters(peft, base=base)
    _rewrite_config(peft, r=2, lora_alpha=1e30)
    with pytest.raises(ValueError, match=r"adapter_config.json: lora.alpha / lora.rank = 1e\+30 / 2 .* over 10,000"):
        load_adapters(peft, base=base)
    _rewrite_config(vk, rank=10**9)
    with pytest.raises(ValueError, match=r"lora_A.q has shape \(2, 32\), but adapter_config.json says rank "
                                         r"1,000,000,000"):
        load_adapters(vk, base=base)
    _rewrite_config(vk, rank=2, alpha=1e300)
    with pytest.raises(ValueError, match=r"lora.alpha / lora.rank = 1e\+300 / 2"):
        load_adapters(vk, base=base)
    with pytest.raises(ValueError, match="over 10,000"):
        LoraConfig(rank=1, alpha=1e5)  # the model layer's own rule: a fine-tune's --lora-alpha too


def test_adapter_files_are_read_only_as_bounded_regular_files(adapter_folders) -> None:  # noqa: ANN001
    """Before: a FIFO as adapter_config.json or as the weights hung; /dev/zero and a huge config read until
    MemoryError; a deep config raised RecursionError; peft's FIFO weights were 'no adapter_model.safetensors
    (found ['adapter_model.safetensors'])'."""
    import os

    base, vk, peft = adapter_folders
    w = peft / "adapter_model.safetensors"
    w.unlink()
    os.mkfifo(w)
    with pytest.raises(ValueError, match="cannot read adapter weights .*adapter_model.safetensors: it is a FIFO"):
        _within(10, load_adapters, peft, base)
    c = vk / "adapter_config.json"
    text = c.read_text()
    c.unlink()
    os.mkfifo(c)
    with pytest.raises(ValueError, match="cannot read adapter config .*adapter_config.json: it is a FIFO"):
        _within(10, load_adapters, vk, base)
    c.unlink()
    os.symlink("/dev/zero", c)
    with pytest.raises(ValueError, match="adapter_config.json: it is a device, not a regular file"):
        _within(10, load_adapters, vk, base)
    c.unlink()
    c.write_text(text.rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="adapter_config.json: cannot read the adapter config \\(nested too deep"):
        load_adapters(vk, base=base)
    with open(c, "wb") as f:  # a sparse file: its size is refused before a byte is read
        f.truncate(65 << 20)
    with pytest.raises(ValueError, match="adapter_config.json: 68,157,440 bytes is over the limit of 67,108,864"):
        load_adapters(vk, base=base)


transformers = pytest.importorskip("transformers")


def _peft_model(hf_dir: Path, adapter_dir: Path, cls: type) -> torch.nn.Module:
    peft = pytest.importorskip("peft")
    return peft.PeftModel.from_pretrained(cls.from_pretrained(hf_dir), adapter_dir).eval()


@pytest.mark.parametrize("targets", [("q", "v"), ALL])
def test_peft_reads_the_adapters_of_a_vit_classifier_to_the_same_logits(tmp_path: Path, targets: tuple) -> None:
    """The base written as transformers' ViTForImageClassification, the adapters (and the trained classifier, as a
    modules_to_save) in peft's layout: PeftModel on the transformers model gives vitkit's logits."""
    base = random_vit(in_chans=3, num_classes=3)
    vitkit.save_pretrained(base, tmp_path / "hf", format="hf")
    apply_lora(base, LoraConfig(rank=2, alpha=6.0, targets=targets))
    _train_a_little(base)
    base.eval()
    save_adapters(base, tmp_path / "peft", format="peft")
    doc = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert doc["peft_type"] == "LORA" and doc["modules_to_save"] == ["classifier"]
    pm = _peft_model(tmp_path / "hf", tmp_path / "peft", transformers.ViTForImageClassification)
    x = _x(base)
    with torch.no_grad():
        torch.testing.assert_close(pm(pixel_values=x).logits, base(x), **TOL)


def test_peft_reads_the_adapters_of_a_dinov2_backbone(tmp_path: Path) -> None:
    base = random_vit(in_chans=3, num_classes=0, layer_scale=0.1)
    vitkit.save_pretrained(base, tmp_path / "hf", format="hf")
    apply_lora(base, LoraConfig(rank=2, alpha=2.0, targets=("q", "k", "proj", "fc2"), train=()))
    _train_a_little(base)
    base.eval()
    save_adapters(base, tmp_path / "peft", format="peft")
    pm = _peft_model(tmp_path / "hf", tmp_path / "peft", transformers.Dinov2Model)
    x = _x(base)
    with torch.no_grad():
        torch.testing.assert_close(pm(pixel_values=x).pooler_output, base(x), **TOL)


def test_peft_layout_refuses_what_peft_cannot_hold(tmp_path: Path) -> None:
    gap = apply_lora(random_vit(pooling="gap", class_token=False), LoraConfig(rank=2))
    with pytest.raises(ValueError, match="Hugging Face ViT: GAP pooling"):
        save_adapters(gap, tmp_path / "a", format="peft", layout="current")
    norms = apply_lora(random_vit(), LoraConfig(rank=2, train=("head", "norm")))
    with pytest.raises(ValueError, match="also trained \\['norm'\\]"):
        save_adapters(norms, tmp_path / "b", format="peft", layout="classic")


# ----------------------------------------------------------------------------- peft's folders read by vitkit
def _peft_writes(hf_model: torch.nn.Module, out: Path, **lora: object) -> torch.nn.Module:
    """peft's own LoRA on a transformers model, every adapter tensor (and a modules_to_save copy) drawn, saved by
    peft to `out`; the PeftModel, in eval mode."""
    peft = pytest.importorskip("peft")
    pm = peft.get_peft_model(hf_model, peft.LoraConfig(**lora))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    pm.save_pretrained(out)
    return pm.eval()


@pytest.mark.parametrize("lora", [
    dict(r=2, lora_alpha=5, target_modules=["q_proj", "v_proj", "fc2"], modules_to_save=["classifier"],
         use_rslora=True),
    dict(r=3, lora_alpha=3, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"],
         layers_to_transform=[1]),
])
def test_vitkit_reads_a_folder_peft_wrote_for_a_vit_classifier(tmp_path: Path, lora: dict) -> None:
    """peft's adapters of a transformers ViTForImageClassification (q / k / v as its separate Linears, rsLoRA's
    scaling, adapters on some blocks only, the trained classifier) onto vitkit's model of the same checkpoint: the
    same logits, adapted and merged."""
    vitkit.save_pretrained(random_vit(in_chans=3, num_classes=3), tmp_path / "hf", format="hf")
    pm = _peft_writes(transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf"), tmp_path / "peft",
                      **lora)
    model = load_adapters(tmp_path / "peft", base=tmp_path / "hf")
    assert lora_modules(model) and model.lora_config.rank == lora["r"]
    x = _x(model)
    with torch.no_grad():
        want = pm(pixel_values=x).logits
        torch.testing.assert_close(model(x), want, **TOL)
        torch.testing.assert_close(merge_lora(model)(x), want, **TOL)


def test_vitkit_reads_a_folder_peft_wrote_for_a_dinov2_backbone(tmp_path: Path) -> None:
    dino = random_vit(in_chans=3, num_classes=0, layer_scale=0.1)
    vitkit.save_pretrained(dino, tmp_path / "hf", format="hf")
    # peft's own names of key, attention output and fc1 in the installed transformers' DINOv2 (renamed in 5.x)
    names = {"current": ["k_proj", "o_proj", "fc1"], "classic": ["key", "dense", "fc1"]}[default_layout(dino)]
    pm = _peft_writes(transformers.Dinov2Model.from_pretrained(tmp_path / "hf"), tmp_path / "peft", r=2,
                      lora_alpha=4, target_modules=names)
    model = load_adapters(tmp_path / "peft", base=tmp_path / "hf")
    assert model.lora_config.targets == ("k", "proj", "fc1") and model.lora_config.train == ()
    x = _x(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), pm(pixel_values=x).pooler_output, **TOL)


def test_a_peft_folder_refuses_a_base_or_options_that_do_not_fit(tmp_path: Path) -> None:
    vitkit.save_pretrained(random_vit(in_chans=3, num_classes=3), tmp_path / "hf", format="hf")
    _peft_writes(transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf"), tmp_path / "peft", r=2,
                 lora_alpha=4, target_modules=["q_proj", "v_proj"])
    assert load_adapters(tmp_path / "peft").lora_config.targets == ("q", "v")  # the base peft recorded
    wide = random_vit(in_chans=3, num_classes=3, width=48, num_heads=4, mlp_dim=96)
    with pytest.raises(ValueError, match=r"lora_A is \(2, 32\), the base model given's block 0 q takes \(2, 48\)"):
        load_adapters(tmp_path / "peft", base=wide)
    shallow = random_vit(in_chans=3, num_classes=3, depth=1)
    with pytest.raises(ValueError, match="'vit.layers.1.attention.q_proj'.*has no LoRA target of that name"):
        load_adapters(tmp_path / "peft", base=shallow)
    doc = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    for key, value, message in (("use_dora", True, "use_dora = True; vitkit's LoRA reads only use_dora = False"),
                                ("rank_pattern", {"q_proj": 4}, "rank_pattern .* their own rank"),
                                ("peft_type", "IA3", "peft_type 'IA3'"),
                                ("base_model_name_or_path", "/no/such/vit-base-patch16-224",
                                 "'/no/such/vit-base-patch16-224', not a checkpoint here nor a hub id: pass base=")):
        (tmp_path / "peft" / "adapter_config.json").write_text(json.dumps({**doc, key: value}))
        with pytest.raises(ValueError, match=message):
            load_adapters(tmp_path / "peft", base=None if key == "base_model_name_or_path" else tmp_path / "hf")
