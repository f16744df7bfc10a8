"""Hugging Face ViT folders: random `transformers` models built offline, logits compared both ways."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import vitkit
from vitkit.formats import detect_format

transformers = pytest.importorskip("transformers")

CASES = [  # hidden, heads, patch, image size, eps, hidden_act
    dict(hidden_size=32, num_attention_heads=4, patch_size=8, image_size=32, layer_norm_eps=1e-12, hidden_act="gelu"),
    dict(
        hidden_size=48, num_attention_heads=3, patch_size=8, image_size=[32, 48], layer_norm_eps=1e-6, hidden_act="gelu"
    ),
    dict(
        hidden_size=64,
        num_attention_heads=2,
        patch_size=4,
        image_size=[24, 16],
        layer_norm_eps=1e-6,
        hidden_act="gelu_pytorch_tanh",
    ),
]


def random_hf(num_labels: int = 5, **kw) -> torch.nn.Module:
    cfg = transformers.ViTConfig(
        num_hidden_layers=2, intermediate_size=2 * kw["hidden_size"], num_labels=num_labels, **kw
    )
    model = transformers.ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # far from the init so every tensor matters
            p.normal_(0, 0.2)
    return model


def image(kw: dict) -> torch.Tensor:
    s = kw["image_size"]
    h, w = (s, s) if isinstance(s, int) else s
    return torch.randn(2, 3, h, w)


def max_rel_delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("kw", CASES)
def test_hf_to_vitkit_and_back(tmp_path: Path, kw: dict) -> None:
    hf = random_hf(**kw)
    hf.config.id2label = {i: f"class{i}" for i in range(5)}
    hf.save_pretrained(tmp_path / "hf")
    assert detect_format(tmp_path / "hf") == "hf"
    x = image(kw)
    with torch.no_grad():
        ref = hf(pixel_values=x).logits
        ours = vitkit.load_pretrained(tmp_path / "hf")
        assert max_rel_delta(ours(x), ref) <= 1e-5
    cfg = ours.config
    assert (cfg.ln_eps, cfg.gelu) == (kw["layer_norm_eps"], "exact" if kw["hidden_act"] == "gelu" else "tanh")
    assert ours.preprocess.labels == [f"class{i}" for i in range(5)]
    # reverse: vitkit -> hf folder -> transformers.from_pretrained, no missing / unexpected weights
    out = vitkit.save_pretrained(ours, tmp_path / "back", format="hf")
    back, info = transformers.ViTForImageClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        assert max_rel_delta(back.eval()(pixel_values=x).logits, ref) <= 1e-5
    assert back.config.id2label[3] == "class3"


def test_current_key_layout_and_bin_weights(tmp_path: Path) -> None:
    """transformers 5's in-memory names (`layers.N.attention.q_proj`), and a pickle-free .bin."""
    kw = CASES[1]
    hf = random_hf(**kw)
    folder = tmp_path / "current"
    folder.mkdir()
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    assert any(".attention.q_proj." in k for k in state)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(hf.config.to_json_string())
    x = image(kw)
    with torch.no_grad():
        assert max_rel_delta(vitkit.load_pretrained(folder)(x), hf(pixel_values=x).logits) <= 1e-5
    binf = tmp_path / "bin"
    binf.mkdir()
    torch.save(state, binf / "pytorch_model.bin")
    (binf / "config.json").write_text(hf.config.to_json_string())
    with torch.no_grad():
        assert max_rel_delta(vitkit.load_pretrained(binf)(x), hf(pixel_values=x).logits) <= 1e-5


def test_vit_model_pooler_is_pre_logits(tmp_path: Path) -> None:
    cfg = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=16,
        patch_size=8,
        pooler_output_size=24,
    )
    hf = transformers.ViTModel(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    hf.save_pretrained(tmp_path / "m")
    ours = vitkit.load_pretrained(tmp_path / "m")
    assert ours.config.num_classes == 0 and ours.config.representation_size == 24
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        o = hf(pixel_values=x)
        feats = ours.forward_features(x)
        assert max_rel_delta(feats, o.last_hidden_state) <= 1e-5
        assert max_rel_delta(ours.forward_head(feats), o.pooler_output) <= 1e-5
    out = vitkit.save_pretrained(ours, tmp_path / "again", format="hf")
    again = transformers.ViTModel.from_pretrained(out).eval()
    with torch.no_grad():
        assert max_rel_delta(again(pixel_values=x).pooler_output, o.pooler_output) <= 1e-5


def test_preprocessor_config_and_new_head(tmp_path: Path) -> None:
    hf = random_hf(**CASES[0])
    hf.save_pretrained(tmp_path / "hf")
    proc = {
        "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225],
        "resample": 3,
        "do_normalize": True,
    }
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(proc))
    m = vitkit.load_pretrained(tmp_path / "hf", num_classes=7, img_size=(48, 40))
    assert m.preprocess.mean == (0.485, 0.456, 0.406) and m.preprocess.interpolation == "bicubic"
    assert m.config.num_classes == 7 and torch.count_nonzero(m.head.weight) == 0
    assert m.pos_embed.shape == (1, 1 + 6 * 5, 32) and m.preprocess.img_size == (48, 40)


def test_errors(tmp_path: Path) -> None:
    hf = random_hf(**CASES[0])
    hf.save_pretrained(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(cfg, intermediate_size=65)))
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors.*encoder\.layer\.0\.intermediate\.dense\.weight.*\(64, 32\), expected \(65, 32\)",
    ):
        vitkit.load_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=3)))
    with pytest.raises(ValueError, match=r"hf.*num_hidden_layers is 3 but the weights hold 2 layers"):
        vitkit.load_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=100_000)))
    with pytest.raises(ValueError, match=r"num_hidden_layers is 100000 but the weights hold 2 layers"):
        vitkit.load_pretrained(tmp_path / "hf")  # refused before a 100000-block model is built
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(cfg, hidden_act="relu")))
    with pytest.raises(ValueError, match="hidden_act 'relu'"):
        vitkit.load_pretrained(tmp_path / "hf")
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "config.json").write_text(json.dumps(cfg))
    (evil / "pytorch_model.bin").write_bytes(pickle.dumps(Exception("not weights")))
    with pytest.raises(ValueError, match=r"pytorch_model\.bin.*weights-only"):
        vitkit.load_pretrained(evil)
    gap = vitkit.VisionTransformer(
        vitkit.ViTConfig(img_size=16, patch_size=8, width=32, depth=1, num_heads=2, mlp_dim=32, pooling="gap")
    )
    with pytest.raises(ValueError, match="GAP pooling"):
        vitkit.save_pretrained(gap, tmp_path / "gap", format="hf")
