"""Native resolution and aspect ratio by sequence packing (NaViT: Dehghani et al., "Patch n' Pack", 2023).

Each image keeps its own resolution and aspect ratio: it is cut into its own (gh, gw) grid of patches, and the patch
sequences of several images are packed into one row of a batch. Here is what the model needs for that:

- `native_grid`: the largest patch grid of an image's aspect ratio that holds at most `max_patches` patches (timm's
  NaFlex `get_image_size_for_seq`: sides rounded up to whole patches);
- `patchify`: an image (C, H, W) as its patches (gh * gw, C * P * P) in raster order, each flattened as the patch
  embedding's convolution kernel is (channel, row, column), so that eq. 1's x_p E is one matrix product;
- `first_fit`: NaViT's greedy packing of sequences into rows of a token budget (§2.3 "Example packing");
- `PackedBatch`: rows of patches with each patch's image and (row, column) in its image's grid (timm NaFlexViT's
  `patch_coord`), and each image's grid; `PackedBatch.from_images` packs a list of images;
- `Layout`: where every token of every image sits in the model's rows once the prefix tokens (class, distillation,
  registers: one set per image) are placed before each image's patches; its boolean attention `mask` keeps images
  apart (NaViT §2.2 "Self attention"): a token attends only to the tokens of its own image, padding to itself.

The model (`VisionTransformer.tokens_packed`) embeds the rows, adds each image's position embedding (the learned
table resampled to the image's grid in 2-D, §3.2), runs the one encoder with the mask in its `EncodeState`, and
gathers each image's tokens back (`Layout.unpack`) so that pooling and the heads see one image per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def native_grid(height: int, width: int, patch: int, max_patches: int) -> tuple[int, int]:
    """The (gh, gw) patch grid an image of `height` x `width` pixels is resized to: the largest scale s for which
    ceil(s * height / patch) * ceil(s * width / patch) <= `max_patches` (the aspect ratio kept up to rounding to
    whole patches; at least one patch a side), the size timm's NaFlex `get_image_size_for_seq` searches for, found here
    exactly in integers."""
    for name, v in (("height", height), ("width", width), ("patch", patch), ("max_patches", max_patches)):
        if int(v) != v or v < 1:
            raise ValueError(f"native_grid: {name} must be a positive integer, got {v!r}")

    # ceil(s h / P) and ceil(s w / P) change only where s h / P or s w / P is a whole number k, so the largest
    # feasible s is one of those breakpoints: there one side is exactly k patches, the other ceil(k w / h) (integers)
    best: tuple[int, int, int, int] | None = None  # (gh, gw, k, side): s = P k / side
    for k in range(1, max_patches + 1):
        for gh, gw, side in ((k, -(-k * width // height), height), (-(-k * height // width), k, width)):
            if gh * gw <= max_patches and (best is None or k * best[3] > best[2] * side):
                best = (gh, gw, k, side)
    if best is None:  # a side of one patch and the other longer than max_patches (an extreme strip)
        raise ValueError(f"an image of {height}x{width} px does not fit {max_patches} patches of {patch} px at its "
                         "aspect ratio (one side would be under one patch); raise --max-patches")
    return best[0], best[1]


def patchify(image: torch.Tensor, patch: int) -> torch.Tensor:
    """The patches (gh * gw, C * patch * patch) of `image` (C, H, W), raster order, each flattened as (C, P, P)."""
    if image.ndim != 3:
        raise ValueError(f"patchify: expected one image (C, H, W), got shape {tuple(image.shape)}")
    C, H, W = image.shape
    if H % patch or W % patch:
        raise ValueError(f"patchify: an image of {H}x{W} px is not a whole number of {patch} px patches")
    gh, gw = H // patch, W // patch
    return image.reshape(C, gh, patch, gw, patch).permute(1, 3, 0, 2, 4).reshape(gh * gw, C * patch * patch)


def raster_coords(grid: tuple[int, int]) -> torch.Tensor:
    """Every (row, column) of a (gh, gw) grid in raster order, (gh * gw, 2)."""
    gh, gw = grid
    return torch.stack(torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij"), -1).reshape(-1, 2)


def first_fit(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Greedy first-fit packing (NaViT §2.3): each sequence, in the order given, goes into the first row whose
    tokens so far leave room for it, or opens a new row. Returns the indices of each row's sequences; a sequence
    longer than `budget` is refused by its index."""
    if budget < 1:
        raise ValueError(f"a row's token budget must be >= 1, got {budget}")
    rows: list[list[int]] = []
    used: list[int] = []
    for i, n in enumerate(lengths):
        if n < 1 or n > budget:
            raise ValueError(f"sequence {i} has {n} tokens; a row holds 1 to {budget}")
        for r, u in enumerate(used):
            if u + n <= budget:
                rows[r].append(i)
                used[r] += n
                break
        else:
            rows.append([i])
            used.append(n)
    return rows


@dataclass
class PackedBatch:
    """Images of different sizes packed into rows (NaViT's packed sequences).

    `patches` (R, L, C * P * P): pixel patches as `patchify` flattens them, zeros at padding; `image_ids` (R, L)
    long: the image each patch belongs to (an index into `grids`), -1 at padding; an image's patches lie in one row,
    one after another; `coords` (R, L, 2) long: each patch's (row, column) in its image's grid (timm NaFlexViT's
    `patch_coord`); `grids` (n_images, 2) long: each image's (gh, gw). Token dropping keeps a subset of an image's
    patches, each with its coordinates."""

    patches: torch.Tensor
    image_ids: torch.Tensor
    coords: torch.Tensor
    grids: torch.Tensor

    @property
    def num_images(self) -> int:
        return int(self.grids.shape[0])

    @classmethod
    def from_patches(cls, patches: Sequence[torch.Tensor], coords: Sequence[torch.Tensor],
                     grids: Sequence[tuple[int, int]], rows: Sequence[Sequence[int]] | None = None,
                     length: int | None = None) -> PackedBatch:
        """Pack each image's `patches[i]` (n_i, K) at `coords[i]` (n_i, 2) of its grid `grids[i]` into rows:
        `rows` lists the images of each row (default: all in one row, in order; `first_fit` makes it for a
        budget); `length` the row length (default: the longest row's tokens)."""
        n = len(patches)
        if len(coords) != n or len(grids) != n:
            raise ValueError(f"{n} images' patches but {len(coords)} coordinate lists and {len(grids)} grids")
        if n == 0:
            raise ValueError("no images to pack")
        rows = [list(range(n))] if rows is None else [list(r) for r in rows]
        placed = sorted(i for r in rows for i in r)
        if placed != list(range(n)):
            raise ValueError(f"rows must hold each of the {n} images exactly once, got {rows}")
        sums = [sum(int(patches[i].shape[0]) for i in r) for r in rows]
        L = max(sums) if length is None else int(length)
        if max(sums) > L:
            raise ValueError(f"a row of {max(sums)} patches exceeds the row length {L}")
        K = patches[0].shape[-1]
        out = patches[0].new_zeros(len(rows), L, K)
        ids = torch.full((len(rows), L), -1, dtype=torch.long)
        xy = torch.zeros(len(rows), L, 2, dtype=torch.long)
        for r, members in enumerate(rows):
            at = 0
            for i in members:
                p, c = patches[i], coords[i]
                if p.ndim != 2 or p.shape[-1] != K or c.shape != (p.shape[0], 2):
                    raise ValueError(f"image {i}: patches {tuple(p.shape)} and coords {tuple(c.shape)} do not match "
                                     f"(expected (n, {K}) and (n, 2))")
                out[r, at : at + len(p)] = p
                ids[r, at : at + len(p)] = i
                xy[r, at : at + len(p)] = c
                at += len(p)
        return cls(out, ids, xy, torch.tensor([list(g) for g in grids], dtype=torch.long).reshape(n, 2))

    @classmethod
    def from_images(cls, images: Sequence[torch.Tensor], patch: int, rows: Sequence[Sequence[int]] | None = None,
                    length: int | None = None) -> PackedBatch:
        """Images (C, H_i, W_i), each a whole number of `patch` px patches, packed with all their patches
        (`from_patches`'s `rows` and `length`)."""
        grids = [(int(im.shape[-2]) // patch, int(im.shape[-1]) // patch) for im in images]
        return cls.from_patches([patchify(im, patch) for im in images], [raster_coords(g) for g in grids], grids,
                                rows, length)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None, non_blocking: bool = False
           ) -> PackedBatch:
        """The batch on `device`, its patches in `dtype` (default: as they are)."""
        return PackedBatch(self.patches.to(device, dtype, non_blocking=non_blocking),
                           *(t.to(device, non_blocking=non_blocking) for t in (self.image_ids, self.coords, self.grids)))

    def pin_memory(self) -> PackedBatch:
        """The batch in page-locked memory (for copies to a GPU that overlap compute)."""
        return PackedBatch(*(t.pin_memory() for t in (self.patches, self.image_ids, self.coords, self.grids)))

    def __len__(self) -> int:
        """The number of images (as a batch of images' len is)."""
        return self.num_images

    def layout(self, num_prefix: int) -> Layout:
        """Where each token goes in the model's rows with `num_prefix` prefix tokens before each image's patches
        (checked: shapes, ids, one contiguous run of patches per image, coordinates inside the grid, no repeats)."""
        return Layout.of(self, num_prefix)


@dataclass
class Layout:
    """The model's rows for a `PackedBatch`: each image's prefix tokens, then its patches, images one after another.

    `length`: tokens per row (the batch's patches per row plus the prefix of its fullest row); `token_image` (R, length):
    each token's image, -1 for padding; `row`, `pos`, `image`, `slot` (each (n_tokens,)): every real token's row and
    position there, its image and its place in that image's own sequence (prefix first, then its patches in the
    packed order); `patch_at` (n_patches,): the position in `pos` order of each packed patch (the batch's valid
    patches, row-major); `per_image`: the longest image sequence (prefix + patches)."""

    num_prefix: int
    length: int
    token_image: torch.Tensor
    row: torch.Tensor
    pos: torch.Tensor
    image: torch.Tensor
    slot: torch.Tensor
    per_image: int
    num_images: int

    @classmethod
    def of(cls, batch: PackedBatch, p: int) -> Layout:
        ids, coords, grids = batch.image_ids, batch.coords, batch.grids
        if batch.patches.ndim != 3:
            raise ValueError(f"packed patches must be (rows, length, C*P*P), got {tuple(batch.patches.shape)}")
        R, Lp = ids.shape
        if tuple(batch.patches.shape[:2]) != (R, Lp) or tuple(coords.shape) != (R, Lp, 2):
            raise ValueError(f"packed batch: patches {tuple(batch.patches.shape)}, image_ids {tuple(ids.shape)} and "
                             f"coords {tuple(coords.shape)} must share (rows, length) (coords: (rows, length, 2))")
        if grids.ndim != 2 or grids.shape[1] != 2 or (grids < 1).any():
            raise ValueError(f"packed batch: grids must be (n_images, 2) of positive sizes, got {grids.tolist()}")
        n = grids.shape[0]
        valid = ids >= 0
        if (ids >= n).any() or (ids < -1).any():
            raise ValueError(f"packed batch: image ids must be -1 (padding) or 0..{n - 1}")
        prev = torch.cat([ids.new_full((R, 1), -1), ids[:, :-1]], 1)
        start = valid & (ids != prev)
        starts = torch.bincount(ids[start], minlength=n)
        if (starts != 1).any():
            bad = (starts != 1).nonzero()[:, 0].tolist()
            raise ValueError(f"packed batch: the patches of image(s) {bad[:5]} are not one contiguous run in one row "
                             "(or the image has no patch)")
        img = ids.clamp_min(0)
        g = grids[img]
        if ((coords < 0) | (coords >= g)).any(-1)[valid].any():
            raise ValueError("packed batch: a patch's (row, col) coordinate lies outside its image's grid")
        key = (img * int(grids.prod(1).max()) + coords[..., 0] * g[..., 1] + coords[..., 1])[valid]
        if key.unique().numel() != key.numel():
            raise ValueError("packed batch: an image has two patches at the same (row, col) coordinate")
        rank = start.cumsum(1) - 1  # each patch's image's place in its row
        ar = torch.arange(Lp, device=ids.device).expand(R, Lp)
        r_idx, j_idx = valid.nonzero(as_tuple=True)  # every patch, row-major
        patch_pos = (ar + p * (rank + 1))[r_idx, j_idx]
        patch_img = ids[r_idx, j_idx]
        first = torch.zeros(n, dtype=torch.long, device=ids.device)
        sr, sj = start.nonzero(as_tuple=True)
        first[ids[sr, sj]] = sj
        patch_slot = p + j_idx - first[patch_img]
        # each image's prefix: p tokens just before its first patch
        ks = torch.arange(p, device=ids.device)
        pre_img = ids[sr, sj].repeat_interleave(p)
        pre_row = sr.repeat_interleave(p)
        pre_pos = ((sj + p * rank[sr, sj])[:, None] + ks).reshape(-1)
        pre_slot = ks.repeat(len(sr))
        row = torch.cat([pre_row, r_idx])
        pos = torch.cat([pre_pos, patch_pos])
        image = torch.cat([pre_img, patch_img])
        slot = torch.cat([pre_slot, patch_slot])
        length = Lp + p * int(start.sum(1).max())
        token_image = torch.full((R, length), -1, dtype=torch.long, device=ids.device)
        token_image[row, pos] = image
        per_image = p + int(torch.bincount(patch_img, minlength=n).max())
        return cls(p, length, token_image, row, pos, image, slot, per_image, n)

    @property
    def num_patch_tokens(self) -> int:
        """The number of real patch tokens (prefix tokens are the first `num_prefix * num_images` entries)."""
        return int(self.row.numel()) - self.num_prefix * self.num_images

    def mask(self) -> torch.Tensor:
        """The boolean attention mask (R, 1, length, length), True where a query may attend to a key: tokens of
        the same image; a padding token attends to itself alone (so no softmax row is empty)."""
        t = self.token_image
        same = (t[:, :, None] == t[:, None, :]) & (t[:, None, :] >= 0)
        eye = torch.eye(self.length, dtype=torch.bool, device=t.device)
        return (same | eye)[:, None]

    def place(self, prefix: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        """The rows (R, length, D): each image's `prefix` (n_images, p, D) tokens, then its `patches` (the packed
        patches' embeddings, (n_patches, D) in the batch's row-major order), zeros at padding."""
        R, D = self.token_image.shape[0], patches.shape[-1]
        z = patches.new_zeros(R, self.length, D)
        src = torch.cat([prefix[self.image[: prefix.shape[0] * self.num_prefix],
                                self.slot[: prefix.shape[0] * self.num_prefix]], patches])
        z[self.row, self.pos] = src
        return z

    def unpack(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each image's tokens from the rows `z` (R, length, D): (n_images, per_image, D), prefix first, zeros after
        an image's last token; and their counts (n_images, per_image, 1): 1 for a token, 0 for padding (what pooling
        weights tokens by: a padding slot stands for no patch)."""
        out = z.new_zeros(self.num_images, self.per_image, z.shape[-1])
        out[self.image, self.slot] = z[self.row, self.pos]
        counts = z.new_zeros(self.num_images, self.per_image, 1)
        counts[self.image, self.slot] = 1
        return out, counts
