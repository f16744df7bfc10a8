"""The packing collator (vitkit/data/collate.py, NaViT): lossless first-fit packing into rows of a token budget,
resolution under --max-patches with the aspect ratio kept, token dropping at fixed and resolution-dependent rates."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from vitkit.data.collate import NativePacker
from vitkit.models.packing import native_grid, patchify
from vitkit.models.preprocess import PreprocessConfig

PRE = PreprocessConfig(img_size=(32, 32))
SIZES = [(64, 256), (48, 48), (200, 50), (30, 90), (17, 23), (120, 40), (64, 64), (10, 300)]


def samples(sizes: list[tuple[int, int]] = SIZES) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(3, h, w, generator=g), i) for i, (h, w) in enumerate(sizes)]


def test_packing_is_lossless_and_respects_the_budget() -> None:
    """Every image's patches are in the batch exactly once, in one row, each at its coordinate, equal to the patches
    of the image resized under max_patches (aspect kept); every row holds at most `budget` patches."""
    packer = NativePacker(PRE, patch=8, max_patches=16, budget=40)
    s = samples()
    out = packer(s, train=False)
    b = out.batch
    assert b.patches.shape[1] == 40 and out.labels.tolist() == list(range(len(s)))
    assert ((b.image_ids >= 0).sum(1) <= 40).all()
    assert b.patches.shape[0] < len(s)  # packing put several images in a row
    for i, (img, _) in enumerate(s):
        rows = (b.image_ids == i).any(1).nonzero()[:, 0]
        assert len(rows) == 1, f"image {i} spread over rows {rows.tolist()}"
        where = b.image_ids[rows[0]] == i
        gh, gw = b.grids[i].tolist()
        assert (gh, gw) == native_grid(*img.shape[1:], 8, 16) and gh * gw <= 16
        assert int(where.sum()) == gh * gw == out.kept[i] == out.full[i]
        want = patchify(PRE.native(img[None], 8, 16)[0], 8)
        got = b.patches[rows[0]][where]
        idx = b.coords[rows[0]][where]
        assert torch.equal(got, want[idx[:, 0] * gw + idx[:, 1]])
        assert (idx[:, 0] * gw + idx[:, 1]).unique().numel() == gh * gw
    assert (b.patches[b.image_ids < 0] == 0).all()


def test_resolution_sampling_keeps_the_aspect_under_the_cap() -> None:
    """With min_patches each image's cap is drawn from [min, max]: grids vary between draws, stay within max_patches,
    and keep each image's aspect ratio up to whole patches; the same generator gives the same batch."""
    packer = NativePacker(PRE, patch=8, max_patches=32, budget=64, min_patches=4)
    s = samples()
    a = packer(s, torch.Generator().manual_seed(1))
    again = packer(s, torch.Generator().manual_seed(1))
    other = packer(s, torch.Generator().manual_seed(2))
    assert torch.equal(a.batch.patches, again.batch.patches) and torch.equal(a.batch.grids, again.batch.grids)
    assert not torch.equal(a.batch.grids, other.batch.grids)
    for (img, _), (gh, gw) in zip(s, a.batch.grids.tolist()):
        h, w = img.shape[1:]
        assert 1 <= gh * gw <= 32
        assert (gw - 1) / gh < w / h < (gw / (gh - 1) if gh > 1 else math.inf)


@pytest.mark.parametrize(("kw", "rate_of"), [
    ({"drop_rate": 0.5}, lambda n: 0.5),
    ({"drop_range": (0.0, 0.75)}, lambda n: 0.75 * (n - 1) / 31),
])
def test_token_dropping_keeps_the_rate(kw: dict, rate_of) -> None:  # noqa: ANN001
    """Each image keeps round(n (1 - rate)) of its n patches (at least one), at their own coordinates; the
    resolution-dependent schedule drops more of a larger image."""
    packer = NativePacker(PRE, patch=8, max_patches=32, budget=32, **kw)
    s = samples()
    out = packer(s, torch.Generator().manual_seed(0))
    for i, (n, k) in enumerate(zip(out.full, out.kept)):
        assert k == max(1, round(n * (1 - rate_of(n)))), (i, n, k)
        where = out.batch.image_ids == i
        assert int(where.sum()) == k
        gh, gw = out.batch.grids[i].tolist()
        want = patchify(PRE.native(s[i][0][None], 8, 32)[0], 8)
        c = out.batch.coords[where]
        assert torch.equal(out.batch.patches[where], want[c[:, 0] * gw + c[:, 1]])
    assert sum(out.kept) < sum(out.full)
    assert packer(s, train=False).kept == out.full  # evaluation drops nothing


def test_packer_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="budget must be >= max_patches"):
        NativePacker(PRE, 8, max_patches=64, budget=32)
    with pytest.raises(ValueError, match="drop rates must be in"):
        NativePacker(PRE, 8, 16, drop_rate=1.0)
    with pytest.raises(ValueError, match="pass gen"):
        NativePacker(PRE, 8, 16, drop_rate=0.5)(samples())
    with pytest.raises(ValueError, match=r"sample 0: expected an image \(3, H, W\)"):
        NativePacker(PRE, 8, 16)([(torch.rand(1, 8, 8), 0)], train=False)


def test_navit_accuracy_benchmark_matches_tokens_and_gives_a_verdict(tmp_path: Path) -> None:
    """benchmarks/navit_accuracy.py, a seconds-long slice (2 seeds of 8 steps, a tiny ViT): both arms train through
    run_experiment, the native arm for as many steps as give the square arm's patch tokens, and the paired
    difference is the per-seed differences' mean with a verdict."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "navit_accuracy.py"
    spec = importlib.util.spec_from_file_location("navit_accuracy", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "r.json"
    res = bench.main(["--seeds", "0", "1", "--steps", "8", "--images", "40", "--classes", "4", "--width", "16",
                      "--depth", "1", "--batch", "8", "--json", str(out)])
    assert json.loads(out.read_text())["verdict"] == res["verdict"] in ("helps", "hurts", "no difference")
    tok = res["tokens"]
    assert tok["native_mean_patches_per_image"] < 16  # the long words fit fewer of the 16 patches ...
    assert tok["steps"]["native"] > tok["steps"]["square"]  # ... so the native arm runs more steps
    assert abs(tok["native_patch_tokens_expected"] - tok["square_patch_tokens"]) <= 8 * 16 / 2  # half a step at most
    assert [r["arm"] for r in res["runs"]] == ["square", "native"] * 2
    diff = [n - s for n, s in zip(res["native_top1"], res["square_top1"])]
    assert res["native_minus_square"]["mean"] == pytest.approx(sum(diff) / 2)

