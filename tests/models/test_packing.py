"""Packed images at their own sizes (NaViT, vitkit/models/packing.py): the packing contract -- each image of a packed
batch gets the output it gets alone -- on the model's one forward path, and the packing primitives."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from vitkit.models.layers import Tokens
from vitkit.models.packing import PackedBatch, first_fit, native_grid, patchify, raster_coords
from vitkit.models.vit import VisionTransformer, ViTConfig

TINY = dict(img_size=32, patch_size=8, in_chans=3, width=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5)
# different sizes and aspects (4:1, 1:5, 1:1 of one patch, ...), all in 8 px patches
SIZES = [(32, 32), (16, 48), (40, 8), (8, 8), (24, 32), (8, 32)]
VARIANTS = {
    "cls_registers": dict(num_registers=2),
    "gap_registers": dict(pooling="gap", num_registers=2),
    "map_registers": dict(pooling="map", num_registers=2),
    "distilled": dict(distill_token=True),
    "gap_fc_norm_sincos": dict(pooling="gap", fc_norm=True, posemb="sincos2d"),
    "learn2d_layerscale": dict(posemb="learn2d", layer_scale=0.1),
    "factorized_gap": dict(posemb="factorized", pooling="gap", num_registers=1),  # NaViT's E_pos
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Any:
    """One intra-op thread: these models' ops take microseconds (see tests/test_vitkit_composition.py's same fixture)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(**kw: Any) -> VisionTransformer:
    """A tiny ViT, every parameter random (no zero-initialised token or head hides a wrong wiring); its reference
    runs an image alone at its own size (dynamic_img_size: E_pos resampled on the fly, the same §3.2 resampling)."""
    m = VisionTransformer(ViTConfig(**{**TINY, "dynamic_img_size": True, **kw}))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return m.eval()


def images(sizes: list[tuple[int, int]] = SIZES, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3, h, w, generator=g) for h, w in sizes]


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_packed_images_get_their_own_outputs(variant: str) -> None:
    """The contract (issue 54 item 1): logits and pooled features of each packed image equal the image run alone,
    to 1e-5 in fp32, whether all images share one row or first-fit spreads them over rows of 12 patches."""
    m = tiny(**VARIANTS[variant])
    ims = images()
    with torch.no_grad():
        alone_logits = torch.cat([m(im[None]) for im in ims])
        alone_pooled = torch.cat([m.pool(m.tokens(im[None])) for im in ims])
        lengths = [(h // 8) * (w // 8) for h, w in SIZES]
        for rows in (None, first_fit(lengths, 16)):
            batch = m.pack(ims, rows)
            t = m.tokens_packed(batch)
            assert rel(m.forward_head(t), alone_logits) <= 1e-5, rows
            assert rel(m.pool(t), alone_pooled) <= 1e-5, rows
            assert rel(m.forward_packed(batch), alone_logits) <= 1e-5


def test_the_mask_keeps_images_apart() -> None:
    """The gradient of one image's logits with respect to another image's pixels in the same row is exactly zero,
    and without the mask the outputs change (the mask is what the contract rests on)."""
    m = tiny(pooling="map", num_registers=2)
    ims = [im.requires_grad_() for im in images(SIZES[:3])]
    batch = m.pack(ims)
    logits = m.forward_packed(batch)
    grads = torch.autograd.grad(logits[0].sum(), ims)
    assert grads[0].abs().sum() > 0 and grads[1].abs().sum() == 0 and grads[2].abs().sum() == 0
    with torch.no_grad():
        z, lay = m.embed_packed(batch)
        per_image, counts = lay.unpack(m.encode(z).z)  # no mask: images see each other
        unmasked = m.forward_head(Tokens(per_image, counts, None, m.config.num_prefix_tokens, packed=True))
    assert rel(unmasked, logits.detach()) > 1e-3


def test_packed_training_step_with_gradient_checkpointing() -> None:
    """In training (dropout off, gradient checkpointing on: the mask survives the replay) the packed batch's loss
    gives the same gradients as the images' losses summed one by one."""
    m = tiny(pooling="gap", num_registers=1).train()
    ims = images(SIZES[:4])
    labels = torch.tensor([0, 1, 2, 3])
    m.set_grad_checkpointing(True)
    F.cross_entropy(m.forward_packed(ims), labels, reduction="sum").backward()
    packed = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    m.set_grad_checkpointing(False)
    for im, y in zip(ims, labels):
        F.cross_entropy(m(im[None]), y[None], reduction="sum").backward()
    for n, p in m.named_parameters():
        assert rel(packed[n], p.grad) <= 1e-4, n


def test_dropped_tokens_are_the_same_in_any_company() -> None:
    """Token dropping keeps a subset of an image's patches at their coordinates: the image's output is the same
    packed alone or with others, and differs from the full image."""
    m = tiny(pooling="map", num_registers=2)
    ims = images(SIZES[:3])
    g = torch.Generator().manual_seed(3)
    patches, coords, grids = [], [], []
    for im in ims:
        grid = (im.shape[1] // 8, im.shape[2] // 8)
        keep = torch.randperm(grid[0] * grid[1], generator=g)[: max(1, grid[0] * grid[1] // 2)].sort().values
        patches.append(patchify(im, 8)[keep])
        coords.append(raster_coords(grid)[keep])
        grids.append(grid)
    with torch.no_grad():
        together = m.forward_packed(PackedBatch.from_patches(patches, coords, grids, length=40))
        alone = torch.cat([m.forward_packed(PackedBatch.from_patches([p], [c], [g])) for p, c, g in
                           zip(patches, coords, grids)])
        full = m.forward_packed(ims)
    assert rel(together, alone) <= 1e-5
    assert rel(together, full) > 1e-3


def test_recorded_attention_stays_inside_each_image() -> None:
    """Recording attention (the explicit softmax) on packed rows: the same logits, and no weight across images."""
    m = tiny()
    ims = images(SIZES[:3])
    with torch.no_grad():
        batch = m.pack(ims)
        t = m.tokens_packed(batch, attention=True)
        assert rel(m.forward_head(t), m.forward_packed(batch)) <= 1e-5
    ids = batch.layout(m.config.num_prefix_tokens).token_image[0]
    across = ids[:, None] != ids[None, :]
    for a in t.attention:
        assert a[0][:, across].abs().max() == 0
        assert torch.allclose(a.sum(-1), torch.ones(()))


@pytest.mark.parametrize(("kw", "merge", "pattern"), [
    ({}, 2, "token merging"),
    ({"block": "axial", "pooling": "gap", "class_token": False}, 0, "Axial"),
    ({"posemb": "relative"}, 0, "posemb='relative'"),
    ({"posemb_placement": "every_layer"}, 0, "every_layer"),
    ({"resnet_layers": (1,), "resnet_width": 0.5, "patch_size": 2}, 0, "ResNet stem"),
])
def test_what_cannot_pack_is_refused_by_name(kw: dict, merge: int, pattern: str) -> None:
    m = tiny(**kw)
    if merge:
        m.set_token_merging(merge)
    with pytest.raises(ValueError, match=pattern):
        m.forward_packed([torch.randn(3, 32, 32)])


def test_packed_input_to_the_per_block_record_is_refused_by_name() -> None:
    """intermediates (inspect's attention maps, fewshot), timm's forward_intermediates / forward_features and tokens
    read one batch of equal images: a PackedBatch is refused naming the packed paths and the per-image way."""
    m = tiny()
    b = m.pack(images(SIZES[:2]))
    calls = (m.intermediates, m.forward_intermediates, m.forward_features, m.tokens,
             lambda x: m.intermediates(x, attention=True))
    for call in calls:
        with pytest.raises(ValueError, match=r"packed images \(a PackedBatch, native resolution\) run through forward, "
                                             r"forward_packed and tokens_packed only.*model.intermediates\(image\[None\]\)"):
            call(b)


def test_bad_packed_batches_are_refused() -> None:
    m = tiny()
    ims = images(SIZES[:2])
    b = m.pack(ims)
    split = PackedBatch(b.patches, b.image_ids.clone(), b.coords, b.grids)
    split.image_ids[0, 1] = 1  # image 0's patches interrupted by image 1's
    out = PackedBatch(b.patches, b.image_ids, b.coords.clone(), b.grids)
    out.coords[0, 0] = torch.tensor([7, 0])
    twice = PackedBatch(b.patches, b.image_ids, b.coords.clone(), b.grids)
    twice.coords[0, 1] = twice.coords[0, 0]
    for bad, pattern in ((split, "contiguous"), (out, "outside its image's grid"), (twice, "same \\(row, col\\)")):
        with pytest.raises(ValueError, match=pattern):
            m.forward_packed(bad)
    with pytest.raises(ValueError, match="multiples of the 8 px patch"):
        m.pack([torch.randn(3, 30, 32)])
    with pytest.raises(ValueError, match="192 values; this model's patches are 3 x 4 x 4 = 48"):
        tiny(patch_size=4).forward_packed(b)


def test_patchify_is_the_patch_embedding() -> None:
    """`patchify` flattens patches as the convolution's kernel: one matrix product is eq. 1's x_p E."""
    m = tiny()
    im = torch.randn(3, 16, 40)
    conv = m.patch_embed.proj(im[None]).flatten(2).transpose(1, 2)[0]
    lin = F.linear(patchify(im, 8), m.patch_embed.proj.weight.flatten(1), m.patch_embed.proj.bias)
    assert rel(lin, conv) <= 1e-6


@pytest.mark.parametrize(("h", "w", "n"), [(100, 400, 64), (400, 100, 64), (50, 50, 64), (37, 211, 30), (8, 8, 256),
                                           (1000, 10, 16)])
def test_native_grid_keeps_the_aspect_under_the_budget(h: int, w: int, n: int) -> None:
    gh, gw = native_grid(h, w, 8, n)
    assert gh * gw <= n
    s_top = min(gh / h, gw / w) * (1 + 1e-9)  # just past the largest scale (in patches per px) giving this grid
    assert math.ceil(s_top * h) * math.ceil(s_top * w) > n  # any larger scale exceeds the budget
    # one scale s gives both sides, each rounded up to whole patches: s h / 8 in (gh - 1, gh], s w / 8 in (gw - 1, gw]
    assert (gw - 1) / gh < w / h < (gw / (gh - 1) if gh > 1 else math.inf)
    with pytest.raises(ValueError, match="max_patches"):
        native_grid(h, w, 8, 0)


def test_first_fit_packs_greedily() -> None:
    assert first_fit([5, 4, 3, 2, 1], 6) == [[0, 4], [1, 3], [2]]
    with pytest.raises(ValueError, match="sequence 1 has 7 tokens"):
        first_fit([3, 7], 6)
