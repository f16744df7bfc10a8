"""What every vitkit image model declares besides its weights: the preprocessing its inputs need.

`preprocess` (resize, normalisation, class names; vitkit.models.preprocess) is saved with the model so
`predict` needs no flags to match training. Its `img_size` is always the model's own (`config.img_size`),
also after `set_img_size`. The default is the original code's input pipeline: [-1, 1] scaling, no crop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from vitkit.models.preprocess import PreprocessConfig

# torch's random fills as a torch function mode sees them: nn.init's uniform_, normal_ and kaiming_uniform_ (a
# layer's default init: nn.Linear's, nn.Conv2d's) hand themselves to the mode; the other nn.init draws
# (xavier_uniform_, trunc_normal_, kaiming_normal_) reach it as the Tensor.uniform_ / Tensor.normal_ they fill by
_RANDOM_FILLS = frozenset({torch.Tensor.uniform_, torch.Tensor.normal_, nn.init.uniform_, nn.init.normal_,
                           nn.init.kaiming_uniform_})
_SKIPPING = threading.local()


class _NoRandomFill(TorchFunctionMode):
    """A torch function mode (this thread only) under which torch's random fills return their tensor as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _RANDOM_FILLS:
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_random_init() -> Iterator[None]:
    """Build models without drawing their random initial values, for a checkpoint's weights to overwrite next (as
    transformers and timm do at load): torch's layers' default random fills and vitkit's own init
    (`random_init_skipped`) are skipped, in this thread; the global random generator is left as it was. Every
    parameter and buffer must then be loaded: the loaders' `load_state_checked` refuses a missing tensor by name."""
    before = getattr(_SKIPPING, "on", False)
    _SKIPPING.on = True
    try:
        with _NoRandomFill():
            yield
    finally:
        _SKIPPING.on = before


def random_init_skipped() -> bool:
    """Whether this thread builds models without their random initial values (`no_random_init`)."""
    return getattr(_SKIPPING, "on", False)


class PreprocessDeclared:
    """Mixin for a model with a `config` that has `img_size` and `in_chans`."""

    config: object
    _preprocess: PreprocessConfig

    def init_preprocess(self, img_size: tuple[int, int], in_chans: int) -> None:
        self._preprocess = PreprocessConfig(img_size=img_size, mean=(0.5,) * in_chans, std=(0.5,) * in_chans)

    @property
    def preprocess(self) -> PreprocessConfig:
        """How an image becomes this model's input; its size is always the model's own."""
        self._preprocess.img_size = self.config.img_size  # type: ignore[attr-defined]
        return self._preprocess

    @preprocess.setter
    def preprocess(self, pp: PreprocessConfig) -> None:
        chans = self.config.in_chans  # type: ignore[attr-defined]
        if pp.channels != chans:
            raise ValueError(f"a preprocessing for {pp.channels}-channel images does not fit a model that takes "
                             f"{chans} channels")
        self._preprocess = dataclasses.replace(pp, img_size=self.config.img_size)  # type: ignore[attr-defined]
