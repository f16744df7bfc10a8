"""Masked patch prediction: the paper's self-supervised pre-training (§4.6, appendix B.1.2).

Mimicking BERT's masked language modelling: 50% of the patch embeddings are corrupted -- of those,
80% are replaced by a learned [mask] embedding, 10% by the embedding of a random other patch and
10% are kept -- and the model predicts the 3-bit mean colour of every corrupted patch (8 levels
per channel: 512 classes for RGB, 8 for one channel) from its encoder output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.posemb import init_normal_
from vitkit.models.vit import VisionTransformer


def mean_colour_targets(
    pixels: torch.Tensor, patch: int, bits: int = 3
) -> torch.Tensor:
    """Class index of each patch's mean colour, quantised to `bits` per channel, in raster order.

    `pixels` are (B, C, H, W) in [0, 1]; the result is (B, N) with values in [0, 2**(bits*C)).
    Channel 0 is the most significant digit.
    """
    levels = 2**bits
    mean = F.avg_pool2d(pixels, patch)  # (B, C, gh, gw)
    q = (mean.clamp(0, 1) * levels).floor().clamp_(max=levels - 1).long()
    idx = torch.zeros_like(q[:, 0])
    for c in range(q.shape[1]):
        idx = idx * levels + q[:, c]
    return idx.flatten(1)


class MaskedPatchPrediction(nn.Module):
    """A ViT with the [mask] embedding and the per-patch colour head of §4.6.

    `predict_all(x, gen)` corrupts, encodes and returns (logits (B, N, classes), targets (B, N),
    corrupted (B, N) bool); `forward` keeps the corrupted patches only, and `loss` is their
    cross-entropy. The wrapped
    `vit` is an ordinary `VisionTransformer` to fine-tune afterwards (its own head is unused here).
    `mean` / `std` undo the input normalisation to recover pixel colours for the targets.
    """

    def __init__(
        self,
        vit: VisionTransformer,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        corrupt: float = 0.5,
        replace_mask: float = 0.8,
        replace_random: float = 0.1,
        bits: int = 3,
    ) -> None:
        super().__init__()
        cfg = vit.config
        if cfg.resnet_layers is not None:
            raise ValueError("masked patch prediction needs pixel patches; the hybrid's ResNet stem has none")
        if not 0.0 < corrupt <= 1.0 or replace_mask + replace_random > 1.0:
            raise ValueError(f"bad corruption rates: corrupt {corrupt}, mask {replace_mask}, random {replace_random}")
        if len(mean) != cfg.in_chans or len(std) != cfg.in_chans:
            raise ValueError(f"mean/std need {cfg.in_chans} entries, got {len(mean)} / {len(std)}")
        self.vit = vit
        self.corrupt, self.replace_mask, self.replace_random, self.bits = corrupt, replace_mask, replace_random, bits
        self.num_classes = 2 ** (bits * cfg.in_chans)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, cfg.width))
        init_normal_(self.mask_token, std=0.02)
        self.head = nn.Linear(cfg.width, self.num_classes)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self._eval_gen = torch.Generator().manual_seed(0)
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> "MaskedPatchPrediction":
        """Entering eval mode restarts the evaluation corruption stream: every evaluation sees the same plan."""
        if not mode:
            self._eval_gen = torch.Generator().manual_seed(0)
        return super().train(mode)

    def no_weight_decay(self) -> set[str]:
        """The ViT's undecayed parameters (position embeddings, class token) and the [mask] embedding."""
        return {f"vit.{n}" for n in self.vit.no_weight_decay()} | {"mask_token"}

    def corruption_plan(
        self, B: int, N: int, gen: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(corrupted, use_mask, source) for a batch: which patches, which get [mask], whose embedding replaces.

        Exactly round(corrupt * N) patches of each image are corrupted; each corrupted patch independently
        gets the [mask] embedding (p = replace_mask), another patch's embedding (p = replace_random) or
        stays (the rest). `source[b, i]` is the patch whose embedding position i receives.
        """
        k = max(1, round(self.corrupt * N))
        order = torch.rand(B, N, generator=gen).argsort(dim=1)
        corrupted = torch.zeros(B, N, dtype=torch.bool)
        corrupted.scatter_(1, order[:, :k], True)
        u = torch.rand(B, N, generator=gen)
        use_mask = corrupted & (u < self.replace_mask)
        use_random = corrupted & (u >= self.replace_mask) & (u < self.replace_mask + self.replace_random)
        other = (torch.arange(N) + torch.randint(1, max(N, 2), (B, N), generator=gen)) % N  # never itself
        source = torch.where(use_random, other, torch.arange(N).expand(B, N))
        return corrupted, use_mask, source

    def predict_all(
        self, x: torch.Tensor, gen: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Corrupt, encode, classify: (logits (B, N, classes), targets (B, N), corrupted (B, N) bool).

        Random draws come from `gen`; else, in training, from torch's global generator (seeded per
        step by the engine, which keeps resumed runs exact) and, in eval mode, from a fixed stream
        restarted by `eval()`, so that evaluations are comparable.
        """
        if gen is None and not self.training:
            gen = self._eval_gen
        B = x.shape[0]
        cfg = self.vit.config
        targets = mean_colour_targets(x.float() * self.std + self.mean, cfg.patch_size, self.bits)
        N = targets.shape[1]
        corrupted, use_mask, source = (t.to(x.device) for t in self.corruption_plan(B, N, gen))

        def corrupt(emb: torch.Tensor) -> torch.Tensor:
            emb = torch.gather(emb, 1, source[..., None].expand_as(emb))
            return torch.where(use_mask[..., None], self.mask_token.to(emb.dtype), emb)

        h = self.vit.intermediates(x, patch_fn=corrupt, blocks=False)["encoded"]
        logits = self.head(h[:, cfg.num_prefix_tokens :])
        return logits, targets, corrupted

    def forward(self, x: torch.Tensor, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, targets) of the corrupted patches only, (M, classes) and (M,): what the loss uses.

        A model whose forward returns (logits, targets) is trained by the engine on its own targets.
        """
        logits, targets, corrupted = self.predict_all(x, gen)
        return logits[corrupted], targets[corrupted]

    def loss(self, x: torch.Tensor, gen: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
        """Cross-entropy over corrupted patches, and the accuracy of their colour predictions."""
        logits, targets = self(x, gen)
        loss = F.cross_entropy(logits.float(), targets)
        return loss, (logits.argmax(-1) == targets).float().mean().item()
