"""timm state dicts and the `vitkit convert` command."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import vitkit
from vitkit.cli import main
from vitkit.formats import detect_format
from vitkit.models.vit import VisionTransformer, ViTConfig

RAN: list[str] = []


def _payload() -> None:  # what a malicious pickle would run on load
    RAN.append("ran")


class Evil:
    def __reduce__(self):
        return (_payload, ())


def random_vit(**kw) -> VisionTransformer:
    cfg = dict(img_size=32, patch_size=8, width=128, depth=2, num_heads=2, mlp_dim=64, num_classes=5, gelu="exact")
    m = VisionTransformer(ViTConfig(**dict(cfg, **kw))).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m


def timm_state(m: VisionTransformer) -> dict[str, torch.Tensor]:
    """What timm (<0.9) writes for the same network: our names, `pre_logits.fc` for the representation."""
    return {k.replace("pre_logits.0.", "pre_logits.fc."): v.clone() for k, v in m.state_dict().items()}


def test_pth_with_training_wrapper(tmp_path: Path) -> None:
    m = random_vit(representation_size=16)
    f = tmp_path / "ckpt.pth"
    torch.save({"model": {f"module.{k}": v for k, v in timm_state(m).items()}, "epoch": 3}, f)
    assert detect_format(f) == "timm"
    with pytest.raises(ValueError, match=r"ckpt\.pth: num_heads cannot be read .*width 128 is none of Table 1's"):
        vitkit.load_pretrained(f)  # a bare state dict does not record its head count: never guessed
    ours = vitkit.load_pretrained(f, num_heads=2)
    c = ours.config
    assert (c.width, c.num_heads, c.depth, c.mlp_dim, c.representation_size, c.num_classes) == (128, 2, 2, 64, 16, 5)
    assert (c.gelu, c.ln_eps, c.img_size) == ("exact", 1e-6, (32, 32))
    # timm's defaults, logged and kept; a bare file with a class token does not say it pooled it (timm's default)
    assert set(c.extra["assumed"]) == {"gelu", "ln_eps", "preprocess", "pooling"}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(ours(x), m(x))


def test_safetensors_gap_no_qkv_bias_and_no_embed_class(tmp_path: Path) -> None:
    gap = random_vit(pooling="gap", qkv_bias=False)
    save_file({k: v.contiguous() for k, v in timm_state(gap).items()}, str(tmp_path / "gap.safetensors"))
    ours = vitkit.load_pretrained(tmp_path / "gap.safetensors", num_heads=2)
    assert ours.config.pooling == "gap" and not ours.config.qkv_bias
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(ours(x), gap(x))
    # DeiT-3 style no_embed_class: E_pos for the patches only; the class token gets none.
    tok = random_vit()
    state = timm_state(tok)
    state["pos_embed"] = state["pos_embed"][:, 1:].clone()
    torch.save(state, tmp_path / "deit3.pth")
    ours = vitkit.load_pretrained(tmp_path / "deit3.pth", num_heads=2)
    with torch.no_grad():
        tok.pos_embed[:, 0] = 0
        assert torch.equal(ours(x), tok(x))


def test_save_timm_folder_and_file_round_trip(tmp_path: Path) -> None:
    m = random_vit(gelu="tanh", ln_eps=1e-5, img_size=(16, 32), width=48, num_heads=3)  # nothing guessable
    m.preprocess = vitkit.PreprocessConfig(img_size=(16, 32), mean=(0.1, 0.2, 0.3), labels=list("abcde"))
    folder = vitkit.save_pretrained(m, tmp_path / "timm", format="timm")
    doc = json.loads((folder / "config.json").read_text())
    assert doc["architecture"].startswith("vit_") and doc["model_args"]["num_heads"] == 3
    assert detect_format(folder) == "timm"
    x = torch.randn(1, 3, 16, 32)
    for path in (folder, vitkit.save_pretrained(m, tmp_path / "w.safetensors", format="timm")):
        again = vitkit.load_pretrained(path)
        assert again.config.to_dict() == m.config.to_dict()
        with torch.no_grad():
            assert torch.equal(again(x), m(x))
    assert again.preprocess == m.preprocess  # a bare file carries it in its metadata (for vitkit; timm reads none)
    assert vitkit.load_pretrained(folder).preprocess.labels == list("abcde")


def test_hybrid_uses_timm_names(tmp_path: Path) -> None:
    m = random_vit(resnet_layers=(1, 1), patch_size=1, img_size=16, width=64, num_heads=1)
    keys = set(m.state_dict())
    assert {
        "patch_embed.backbone.stem.conv.weight",
        "patch_embed.backbone.stages.1.blocks.0.downsample.conv.weight",
    } <= keys
    torch.save(m.state_dict(), tmp_path / "hybrid.pth")
    ours = vitkit.load_pretrained(tmp_path / "hybrid.pth", num_heads=1)
    assert ours.config.resnet_layers == (1, 1) and ours.config.img_size == (16, 16)


def test_errors_and_no_pickled_code(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pth"
    evil.write_bytes(pickle.dumps({"patch_embed.proj.weight": Evil()}))
    with pytest.raises(ValueError, match=r"evil\.pth.*weights-only"):
        vitkit.load_pretrained(evil)
    torch.save({"x": Evil()}, tmp_path / "evil2.pth")
    with pytest.raises(ValueError, match=r"evil2\.pth.*weights-only"):
        vitkit.load_pretrained(tmp_path / "evil2.pth")
    assert RAN == []
    state = timm_state(random_vit())
    torch.save(dict(state, **{"blocks.0.attn.q_norm.weight": torch.ones(64)}), tmp_path / "qknorm.pth")
    with pytest.raises(ValueError, match=r"qknorm\.pth.*'blocks\.0\.attn\.q_norm\.weight' \(qk-norm\)"):
        vitkit.load_pretrained(tmp_path / "qknorm.pth", num_heads=2)
    torch.save(dict(state, **{"blocks.1.mlp.fc2.weight": torch.zeros(128, 65)}), tmp_path / "shape.pth")
    with pytest.raises(ValueError, match=r"'blocks\.1\.mlp\.fc2\.weight' has shape \(128, 65\), expected \(128, 64\)"):
        vitkit.load_pretrained(tmp_path / "shape.pth", num_heads=2)
    (tmp_path / "junk.bin").write_bytes(b"\x00not a checkpoint")
    with pytest.raises(ValueError, match=r"junk\.bin"):
        vitkit.load_pretrained(tmp_path / "junk.bin")
    with pytest.raises(ValueError, match=r"w100\.pth: num_heads cannot be read .*width 100"):
        m = random_vit(width=100, num_heads=4)
        torch.save(timm_state(m), tmp_path / "w100.pth")
        vitkit.load_pretrained(tmp_path / "w100.pth")


def test_convert_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = random_vit(gelu="tanh")
    torch.save(timm_state(m), tmp_path / "m.pth")
    # the .pth (exact GELU assumed) cannot become an .npz without changing outputs: refused, no traceback
    assert main(["convert", str(tmp_path / "m.pth"), str(tmp_path / "m.npz"), "--to", "npz", "--num-heads", "2"]) == 2
    assert "tanh GELU" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "m.pth"), str(tmp_path / "hf"), "--to", "hf", "--num-heads", "2"]) == 0
    assert (
        main(["convert", str(tmp_path / "hf"), str(tmp_path / "vk"), "--to", "vitkit", "--img-size", "48", "40"]) == 0
    )
    vk = vitkit.load_pretrained(tmp_path / "vk")
    assert detect_format(tmp_path / "vk") == "vitkit" and vk.config.img_size == (48, 40)
    ref = vitkit.load_pretrained(tmp_path / "m.pth", num_heads=2)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(vitkit.load_pretrained(tmp_path / "hf")(x), ref(x), atol=1e-6)
    assert main(["convert", str(tmp_path / "nothing"), str(tmp_path / "o"), "--to", "hf"]) == 2


def test_a_bare_file_loaded_at_another_size_says_which_table_rule_it_applied(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    """A bare timm state dict names no family, so whether its position table is kept at its own grid (DINOv2's rule,
    resampled from it at every size) or resampled once at load (timm's) cannot be read from it: loaded at another
    size, the rule applied is said and kept in `config.extra["assumed"]` (before: applied silently); at the table's
    own size nothing is assumed (both rules give the same model), and a file that names its family is not asked."""
    from safetensors.torch import load_file

    m = vitkit.create_model("vit", width=16, depth=1, num_heads=2, mlp_dim=32, img_size=32, patch_size=8)
    f = vitkit.save_pretrained(m, tmp_path / "m.safetensors", format="timm")
    save_file(load_file(f), str(f))  # the tensors alone: no vitkit metadata naming the model
    with caplog.at_level("WARNING", logger="vitkit"):
        at48 = vitkit.load_pretrained(f, num_heads=2, img_size=48)
    note = at48.config.extra["assumed"]["posemb_grid"]
    assert "its 4x4 position table is resampled once to img_size=[48, 48] at load (timm's rule)" in note
    assert "DINOv2" in note and "posemb_grid is not in the file" in caplog.text
    assert at48.config.posemb_grid is None and at48.config.img_size == (48, 48)
    assert "posemb_grid" not in vitkit.load_pretrained(f, num_heads=2).config.extra["assumed"]
    assert "posemb_grid" not in vitkit.load_pretrained(f, num_heads=2, img_size=32).config.extra["assumed"]
    hub = vitkit.save_pretrained(m, tmp_path / "hub", format="timm")  # a folder whose config names it
    assert "posemb_grid" not in vitkit.load_pretrained(hub, img_size=48).config.extra.get("assumed", {})
