"""big_vision `.npz` files: its ViT (class token after E_pos, average pooling with fixed sin-cos E_pos that the file
does not store, a SigLIP-style MAP head under `params/img/`) loads with big_vision's own outputs. The fixtures were
written by big_vision's models/vit.py itself (tests/reference/make_big_vision_reference.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from vitkit.cli import main
from vitkit.formats.npz import read_npz

pytestmark = pytest.mark.usefixtures("figures_not_encoded")  # its commands' figures drawn, not encoded: none read

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "big_vision"
REF = np.load(FIX / "outputs.npz", allow_pickle=False)
X = torch.from_numpy(REF["x_nchw"])
HINTS = {"tok_learn": {}, "gap_sincos": {"posemb": "sincos2d_big_vision", "img_size": 32}, "map_learn_img": {}}


def close(a: torch.Tensor, key: str) -> None:
    torch.testing.assert_close(a, torch.from_numpy(REF[key]), rtol=2e-5, atol=2e-5, msg=key)


@pytest.mark.parametrize("name", list(HINTS))
def test_big_vision_files_load_with_big_visions_outputs(name: str) -> None:
    m = vitkit.load_pretrained(FIX / f"{name}.npz", **HINTS[name])
    expected = {"tok_learn": ("token", "learn1d"), "gap_sincos": ("gap", "sincos2d_big_vision"),
                "map_learn_img": ("map", "learn1d")}[name]
    assert (m.config.pooling, m.config.posemb, m.config.img_size) == (*expected, (32, 32))
    with torch.no_grad():
        out = m.intermediates(X, blocks=False)
        close(out["pre_logits"], f"{name}_pre_logits")
        close(out["encoded"], f"{name}_encoded")  # every token after the final LayerNorm, class token first
        if f"{name}_logits" in REF:
            close(m(X), f"{name}_logits")
    if name == "tok_learn":  # E_pos covers the patches only: the class token's row of vitkit's table is zero
        assert read_npz(FIX / f"{name}.npz")["pos_embedding"].shape[1] == 16
        assert m.pos_embed.shape[1] == 17 and not m.pos_embed[0, 0].any()


def test_what_the_file_does_not_store_is_asked_for_never_guessed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"posemb cannot be read from this file .*sincos2d_big_vision"):
        vitkit.load_pretrained(FIX / "gap_sincos.npz")
    with pytest.raises(ValueError, match="img_size cannot be read from this file"):
        vitkit.load_pretrained(FIX / "gap_sincos.npz", posemb="sincos2d_big_vision")
    with pytest.raises(ValueError, match="the file says posemb='learn1d', but posemb='sincos2d_big_vision' was given"):
        vitkit.load_pretrained(FIX / "tok_learn.npz", posemb="sincos2d_big_vision")
    # big_vision's formula divides by width / 4 - 1: a config too narrow for it is refused when built, not run
    with pytest.raises(ValueError, match=r"width divisible by 4 \(>= 8 for big_vision's formula\), got 4"):
        vitkit.models.ViTConfig(width=4, num_heads=1, mlp_dim=8, posemb="sincos2d_big_vision")
    # vitkit's own sin-cos table has other frequencies and channel order: that hint would be a different model
    # (0.05+ off in the logits), so it is refused, naming the right one
    with pytest.raises(ValueError, match=r"posemb='sincos2d' is vitkit's own .* give posemb='sincos2d_big_vision'"):
        vitkit.load_pretrained(FIX / "gap_sincos.npz", posemb="sincos2d", img_size=32)
    right = vitkit.load_pretrained(FIX / "gap_sincos.npz", posemb="sincos2d_big_vision", img_size=32)
    other = vitkit.VisionTransformer(right.config.replace(posemb="sincos2d")).eval()
    other.load_state_dict(right.state_dict())
    with torch.no_grad():
        assert (other(X) - torch.from_numpy(REF["gap_sincos_logits"])).abs().max() > 0.05
    # from the command line: converted once with the two values, then a self-describing vitkit file
    assert main(["convert", str(FIX / "gap_sincos.npz"), str(tmp_path / "own"), "--to", "vitkit", "--posemb",
                 "sincos2d_big_vision", "--img-size", "32"]) == 0
    with torch.no_grad():
        close(vitkit.load_pretrained(tmp_path / "own")(X), "gap_sincos_logits")


def test_a_big_vision_file_saves_in_the_released_layout(tmp_path: Path) -> None:
    m = vitkit.load_pretrained(FIX / "tok_learn.npz")
    vitkit.save_pretrained(m, tmp_path / "tok.npz", format="npz")
    saved = read_npz(tmp_path / "tok.npz")
    assert saved["Transformer/posembed_input/pos_embedding"].shape[1] == 17
    with torch.no_grad():
        close(vitkit.load_pretrained(tmp_path / "tok.npz")(X), "tok_learn_logits")
    for name, what in (("gap_sincos", "posemb='sincos2d_big_vision'"), ("map_learn_img", "pooling='map'")):
        with pytest.raises(ValueError, match=what):
            vitkit.save_pretrained(vitkit.load_pretrained(FIX / f"{name}.npz", **HINTS[name]), tmp_path / "x.npz",
                                   format="npz")


def test_a_sincos_file_runs_through_the_commands_with_its_two_values(tmp_path: Path) -> None:
    """predict, eval, fewshot and inspect take --posemb and --img-size, so a big_vision sin-cos file needs no
    conversion first; without the size it is refused by name (exit 2), never guessed."""
    from tests.inputs import noise_folder

    data = noise_folder(tmp_path / "data", n=20, classes=5)  # the file's 5 classes
    model, hints = str(FIX / "gap_sincos.npz"), ["--posemb", "sincos2d_big_vision", "--img-size", "32"]
    image = str(data / "c0" / "000.png")
    assert main(["predict", "--model", model, "--posemb", "sincos2d_big_vision", image]) == 2
    assert main(["predict", "--model", model, *hints, image]) == 0
    assert main(["eval", "--model", model, *hints, "--data", str(data)]) == 0
    assert main(["fewshot", "--model", model, *hints, "--data", str(data), "--shots", "2"]) == 0
    assert main(["inspect", "--model", model, *hints, "--images", image, "--out", str(tmp_path / "insp"),
                 "--no-progress"]) == 0
    assert any((tmp_path / "insp").iterdir())
