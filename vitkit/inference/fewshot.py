"""Few-shot linear evaluation (paper §4.1 "Metrics"): a closed-form regularised least-squares fit of
a frozen representation to {-1, 1}^K targets.

As big_vision does: features are whitened per dimension with the mean / std of the few-shot
training examples (std + 1e-5), a constant bias feature is appended (a large constant, so the
bias is almost unregularised), and the ridge solution W = (X^T X + l2 I)^-1 X^T Y uses a fixed L2
(2^10 by default, settable). Protocol: 1/5/10/25 examples per class, several seeds, mean +- std of
the test accuracy.

Beside it, the weighted k-NN classifier used for self-supervised backbones (DINO, Caron et al. 2021, and DINOv2):
L2-normalised features, the k = 20 training examples of highest cosine similarity, each voting for its class with
weight exp(similarity / 0.07).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from vitkit.inference.evaluate import check_finite
from vitkit.models.resnet import ResNetV2

DEFAULT_L2 = 2.0**10
KNN_K, KNN_TEMPERATURE = 20, 0.07  # DINO's eval_knn defaults
# bounds before any work: more shots than any class holds are capped (and said), but a count past a C long
# crashed numpy (OverflowError); 10^9 seeds ran for days (each seed is a fit)
MAX_SHOTS, MAX_SEEDS = 10**9, 10_000
METHODS = ("ridge", "knn")
BIAS_CONSTANT = 100.0
REPRESENTATIONS = ("pre_logits", "token")


@torch.no_grad()
def extract_features(model: nn.Module, loader, representation: str = "pre_logits",
                     skipped: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of every readable example of a sequential StepLoader; the unreadable ones are named
    in `skipped` (when given).

    `pre_logits`: the input of the classification head (after the pre-training tanh layer when the
    model has one); `token`: the pooled final tokens, as `pooled_words` says (class token, GAP or MAP). Both are
    the model's features of those names (vitkit/models/features.py, as `vitkit embed` computes them; under token
    merging the merged tokens weighted by their sizes)."""
    if representation not in REPRESENTATIONS:
        raise ValueError(f"unknown representation {representation!r}; choose {REPRESENTATIONS}")
    model.eval()
    device = next(model.parameters()).device  # batches come from the loader on the CPU
    feats, labels = [], []
    for b in loader.iterate(0, len(loader)):
        if skipped is not None:
            skipped.extend(b.skipped)
        if not len(b.y):
            continue
        f = model.intermediates(b.x.to(device), blocks=False)["pre_logits" if representation == "pre_logits" else "pooled"]
        feats.append(check_finite(f.float(), "features").cpu().numpy())
        labels.append(b.y.numpy())
    return np.concatenate(feats).astype(np.float64), np.concatenate(labels)


def describe_representation(model: nn.Module, representation: str) -> str:
    """What `extract_features` returns for this model, in words (a model without a pre-training
    representation layer has no separate pre_logits: the head's input is the pooled token)."""
    if isinstance(model, ResNetV2):  # the BiT ResNet: its head sees the averaged final feature map
        return "globally average-pooled final feature map features (the head's input)"
    pooled, left = pooled_words(model.config)
    if representation == "pre_logits" and model.config.distill_token and not model.config.representation_size:
        return ("the mean of the final class and distillation tokens (a distilled DeiT's head input, timm's "
                f"pre_logits; models/features.py){left}")
    if representation == "pre_logits" and model.config.representation_size:
        return f"pre_logits features (the {model.config.representation_size}-d tanh layer on the {pooled}){left}"
    if representation == "pre_logits":
        return f"{pooled} features (the head's input; this model has no pre_logits layer){left}"
    return f"{pooled} features{left}"


def pooled_words(c) -> tuple[str, str]:  # noqa: ANN001 - a ViTConfig
    """How a ViT pools its final tokens (eq. 4's y), in words: the class token (§3.1), the mean of the patch tokens
    (GAP, appendix D.3) or their attention pooling (MAP, big_vision's MAPHead); and a note naming the tokens
    left out of the pooling ("" when none)."""
    if c.pooling == "token":
        what = "final class token LN(z_L^0)" if not c.fc_norm else "final class token z_L^0 (LN after pooling)"
    else:
        how = "mean (GAP)" if c.pooling == "gap" else "attention pooling (MAP, a learned query)"
        what = f"{how} of the final patch tokens" + (" (LN after pooling)" if c.fc_norm else " (after the final LN)")
    left = [n for n, on in (("class token", c.pooling != "token" and c.class_token),
                            (f"{c.num_registers} register tokens", c.num_registers)) if on]
    return what, (f"; the {' and '.join(left)} are not pooled" if left else "")


def _whiten_bias(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return np.concatenate([(x - mean) / std, np.full((len(x), 1), BIAS_CONSTANT)], axis=1)


def fit_linear(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float = DEFAULT_L2):
    """The closed-form solve; returns (W, mean, std) with W of shape (D + 1, K)."""
    mean = x.mean(0, keepdims=True)
    std = x.std(0, keepdims=True) + 1e-5
    xb = _whiten_bias(x, mean, std)
    targets = 2.0 * np.eye(num_classes)[y] - 1.0  # {-1, 1}^K
    w = np.linalg.solve(xb.T @ xb + l2 * np.eye(xb.shape[1]), xb.T @ targets)
    return w, mean, std


def fewshot_accuracy(x, y, x_test, y_test, num_classes: int, l2: float = DEFAULT_L2) -> float:
    w, mean, std = fit_linear(x, y, num_classes, l2)
    pred = (_whiten_bias(x_test, mean, std) @ w).argmax(1)
    return float((pred == y_test).mean())


def knn_predict(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, num_classes: int, k: int = KNN_K,
                temperature: float = KNN_TEMPERATURE, chunk: int = 1024) -> np.ndarray:
    """DINO's weighted k-NN: for each test feature, the `k` training features of highest cosine similarity s
    (all of them when fewer) vote for their classes with weight exp(s / temperature); the class of most weight."""
    if temperature <= 0 or k < 1:
        raise ValueError(f"k-NN needs k >= 1 and a temperature > 0, got k={k}, temperature={temperature}")
    xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k = min(k, len(x))
    preds = []
    for lo in range(0, len(x_test), chunk):
        t = x_test[lo : lo + chunk]
        sim = (t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)) @ xn.T
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        s = np.take_along_axis(sim, top, 1)
        # each row's weights divided by its largest, exp(max s / T): the same vote, and no overflow to inf (then NaN
        # and a vote for class 0) at a small temperature; T -> 0 becomes the nearest neighbour's vote
        w = np.exp((s - s.max(axis=1, keepdims=True)) / temperature)
        votes = np.zeros((len(t), num_classes))
        np.add.at(votes, (np.arange(len(t))[:, None], y[top]), w)
        preds.append(votes.argmax(1))
    return np.concatenate(preds) if preds else np.zeros(0, np.int64)


def knn_accuracy(x, y, x_test, y_test, num_classes: int, k: int = KNN_K, temperature: float = KNN_TEMPERATURE) -> float:
    return float((knn_predict(x, y, x_test, num_classes, k, temperature) == y_test).mean())


def sample_shots(labels: np.ndarray, shots: int, seed: int, num_classes: int) -> np.ndarray:
    """`shots` random indices per class (all of a class when it has fewer)."""
    rng = np.random.default_rng(seed)
    idx = [rng.permutation(np.flatnonzero(labels == c))[:shots] for c in range(num_classes)]
    return np.concatenate(idx)


def check_fewshot_args(shots: Sequence[int], seeds: Sequence[int] | int, l2: float) -> None:
    """Shots are whole numbers >= 1, there is at least one seed (at most MAX_SEEDS), and the ridge L2 is a finite
    number >= 0 (a NaN L2 makes every prediction one class: an accuracy that measures nothing). `seeds` as an int
    is a count as typed (`fewshot --seeds N`, seeds 0..N-1), and is named so."""
    bad = [s for s in shots if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1]
    if bad or not len(shots):
        raise ValueError(f"shots must be whole numbers >= 1, got {list(shots)}")
    if max(shots) > MAX_SHOTS:
        raise ValueError(f"shots must be at most {MAX_SHOTS:,} examples per class, got {max(shots)}")
    typed = isinstance(seeds, int) and not isinstance(seeds, bool)
    try:
        n_seeds: int | str = seeds if typed else len(seeds)
    except OverflowError:  # len(range(10**20))
        n_seeds = f"{seeds!r}"
    if not isinstance(n_seeds, str) and n_seeds < 1:
        raise ValueError("seeds: at least one random draw of the shots is needed (--seeds N with N >= 1)")
    if isinstance(n_seeds, str) or n_seeds > MAX_SEEDS:  # a count is named as typed, not as the range it stands for
        raise ValueError(f"--seeds must be at most {MAX_SEEDS:,} random draws of the shots, got {seeds}" if typed
                         else f"seeds: at most {MAX_SEEDS:,} random draws of the shots (--seeds N), got {n_seeds}")
    if not (isinstance(l2, (int, float, np.floating)) and np.isfinite(l2) and l2 >= 0):
        raise ValueError(f"l2 must be a finite number >= 0, got {l2!r}")


def fewshot_table(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    num_classes: int,
    shots: Sequence[int] = (1, 5, 10, 25),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    l2: float = DEFAULT_L2,
    method: str = "ridge",
    k: int = KNN_K,
    temperature: float = KNN_TEMPERATURE,
) -> dict[int, dict[str, float | list[float]]]:
    """{shots: {"mean", "std", "accs"}} of test accuracy over the seeds; `method` "ridge" (the closed-form
    least squares) or "knn" (DINO's weighted k-NN, `knn_accuracy`)."""
    if method not in METHODS:
        raise ValueError(f"unknown few-shot method {method!r}; one of {', '.join(METHODS)}")
    check_fewshot_args(shots, seeds, l2)
    out: dict[int, dict[str, float | list[float]]] = {}
    counts = np.bincount(train[1], minlength=num_classes)[:num_classes]
    for n in shots:
        if n > counts.min():  # the row is named by n, but such a class gives all it has: say what was used
            short = [c for c in range(num_classes) if counts[c] < n]
            warnings.warn(f"{n} shots: {len(short)} of {num_classes} classes have fewer training examples (class "
                          f"{short[0]}: {counts[short[0]]}); they give all they have, so the {n}-shot row uses "
                          f"{int(np.minimum(counts, n).sum())} examples, not {n * num_classes}", UserWarning,
                          stacklevel=2)
        accs = []
        for s in seeds:
            i = sample_shots(train[1], n, s, num_classes)
            args = (train[0][i], train[1][i], test[0], test[1], num_classes)
            accs.append(fewshot_accuracy(*args, l2) if method == "ridge" else knn_accuracy(*args, k, temperature))
        out[int(n)] = {"mean": float(np.mean(accs)), "std": float(np.std(accs)), "accs": accs,
                       "examples": int(np.minimum(counts, n).sum())}
    return out
