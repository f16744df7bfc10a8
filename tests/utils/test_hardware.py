"""vitkit.utils.hardware: choices made from what this machine has."""

from __future__ import annotations

import traceback

import torch

from vitkit.utils.hardware import manual_seed


def test_manual_seed_draws_torchs_stream_and_formats_no_stack_without_an_accelerator(monkeypatch) -> None:  # noqa: ANN001
    """The same CPU random stream as torch.manual_seed for each seed; where no accelerator backend is initialised no
    lazy accelerator seed is queued (no stack formatted) and CUDA is not asked about (no driver started); once CUDA is
    initialised, torch.manual_seed itself is called."""
    for seed in (0, 7, 2**40 + 3):
        torch.manual_seed(seed)
        want = torch.rand(5), torch.randn(3), torch.randint(0, 10**6, (4,))
        manual_seed(seed)
        got = torch.rand(5), torch.randn(3), torch.randint(0, 10**6, (4,))
        assert all(torch.equal(a, b) for a, b in zip(want, got)), seed
    formatted: list[int] = []
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: formatted.append(1) or [])
    calls: list[int] = []
    monkeypatch.setattr(torch, "manual_seed", lambda s: calls.append(s))
    asked: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or False)
    in_use = torch.cuda.is_initialized() or torch.backends.mps.is_available()
    manual_seed(11)
    assert calls == ([11] if in_use else []) and formatted == [] and asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    manual_seed(12)
    assert calls[-1:] == [12]
