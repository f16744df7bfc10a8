"""What every vitkit image model declares besides its weights: the preprocessing its inputs need.

`preprocess` (resize, normalisation, class names; vitkit.models.preprocess) is saved with the model so
`predict` needs no flags to match training. Its `img_size` is always the model's own (`config.img_size`),
also after `set_img_size`. The default is the original code's input pipeline: [-1, 1] scaling, no crop.
"""

from __future__ import annotations

import dataclasses

from vitkit.models.preprocess import PreprocessConfig


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
