"""Today's training ingredients (issue: AugReg, DeiT): Mixup / CutMix with soft targets, RandAugment, random
erasing, the AugReg presets; each checked on real computation (PIL as the independent reference for the
pixel operations) and reproducible from (seed, step)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from tests.helpers import digits_loader, digits_model
from vitkit.data.augment import mix_images
from vitkit.data.loader import step_generator
from vitkit.data.randaugment import OPS, equalize, posterize, rand_augment, random_erasing, solarize
from vitkit.data.transforms import TrainTransform
from vitkit.train.config import AUGREG, TrainConfig, load_config
from vitkit.train.engine import Trainer


def _batch(b: int = 6, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.rand(b, 1, 8, 8, generator=g), torch.randint(0, k, (b,), generator=g)


def test_mixup_blends_each_image_with_its_partner_and_targets_sum_to_one() -> None:
    x, y = _batch()
    out, mix = mix_images(x, step_generator(0, 7), mixup_alpha=0.4)
    assert mix.kind == "mixup" and 0.0 < mix.lam < 1.0
    torch.testing.assert_close(out, mix.lam * x + (1 - mix.lam) * x.flip(0))
    t = mix.targets(y, 5)
    torch.testing.assert_close(t.sum(1), torch.ones(6))
    for i in range(6):  # image i keeps lam of its own label and takes 1 - lam of image 5 - i's
        want = torch.zeros(5)
        want[y[i]] += mix.lam
        want[y[5 - i]] += 1 - mix.lam
        torch.testing.assert_close(t[i], want)
    again, mix2 = mix_images(x, step_generator(0, 7), mixup_alpha=0.4)  # a function of (seed, step)
    assert torch.equal(again, out) and mix2 == mix
    assert mix_images(x, step_generator(0, 8), mixup_alpha=0.4)[1].lam != mix.lam


def test_cutmix_pastes_one_box_and_weights_targets_by_its_area() -> None:
    x, y = _batch()
    out, mix = mix_images(x, step_generator(1, 3), cutmix_alpha=1.0)
    assert mix.kind == "cutmix"
    pasted = (out != x).any(0).any(0)  # (H, W): where any image changed
    partner = out == x.flip(0)
    assert partner[:, :, pasted].all()  # inside the box every pixel is the partner's
    assert torch.equal(out[:, :, ~pasted], x[:, :, ~pasted])  # outside it nothing moved
    rows, cols = pasted.any(1).nonzero(), pasted.any(0).nonzero()
    box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1) if len(rows) else 0
    assert mix.lam == pytest.approx(1 - float(box) / 64)
    torch.testing.assert_close(mix.targets(y, 5).sum(1), torch.ones(6))
    # with both on, the switch probability picks: 0 -> always Mixup, 1 -> always CutMix; prob 0 -> untouched
    assert mix_images(x, step_generator(1, 3), 0.2, 1.0, switch_prob=0.0)[1].kind == "mixup"
    assert mix_images(x, step_generator(1, 3), 0.2, 1.0, switch_prob=1.0)[1].kind == "cutmix"
    unmixed, none = mix_images(x, step_generator(1, 3), 0.2, 1.0, prob=0.0)
    assert none.kind == "none" and unmixed is x and torch.equal(none.targets(y, 5), F.one_hot(y, 5).float())


def test_mixup_loss_in_the_engine_equals_the_soft_target_cross_entropy_by_hand(tmp_path) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = digits_model(width=32, depth=1, num_heads=2, mlp_dim=64)
    cfg = TrainConfig(steps=3, batch_size=16, lr=1e-3, warmup_steps=0, mixup=0.8, cutmix=1.0, label_smoothing=0.1,
                      clip_norm=None, log_every=1, tensorboard=False, seed=5)
    before = copy.deepcopy(model)
    trainer = Trainer(model, cfg, digits_loader(model, cfg), tmp_path, progress=False)
    b = trainer.data.load(2)
    loss, _, _ = trainer.train_step(2, b.x, b.y)
    x, mix = mix_images(b.x, step_generator(5, 2, -1), 0.8, 1.0, 0.5, 1.0)
    assert mix.kind != "none"
    soft = mix.targets(b.y, 10) * 0.9 + 0.1 / 10  # label smoothing applied to the mixed targets
    with torch.no_grad():
        logp = before(x).log_softmax(-1)
    assert loss == pytest.approx(float(-(soft * logp).sum(-1).mean()), rel=1e-5)


def _pil(x: torch.Tensor) -> Image.Image:
    return Image.fromarray((x[0] * 255).round().byte().numpy(), mode="L")


def _from_pil(im: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(im, dtype=np.float32) / 255)[None]


def test_pixel_operations_match_pil() -> None:
    g = torch.Generator().manual_seed(3)
    img = (torch.rand(1, 12, 12, generator=g) * 0.6 + 0.2)  # a narrow range, so equalize has work to do
    img = (img * 255).round() / 255
    torch.testing.assert_close(equalize(img, 0, g), _from_pil(ImageOps.equalize(_pil(img))))
    torch.testing.assert_close(posterize(img, 10, g), _from_pil(ImageOps.posterize(_pil(img), 4)))
    thr = 1.0 - 0.1 * 4  # magnitude 4: pixels at or above 0.6 inverted
    torch.testing.assert_close(solarize(img, 4, g), _from_pil(ImageOps.solarize(_pil(img), round(thr * 255))),
                               atol=1 / 255 + 1e-6, rtol=0)
    torch.testing.assert_close(OPS["Invert"](img, 0, g), _from_pil(ImageOps.invert(_pil(img))))
    torch.testing.assert_close(OPS["AutoContrast"](img, 0, g), _from_pil(ImageOps.autocontrast(_pil(img))),
                               atol=1 / 255 + 1e-6, rtol=0)


def test_randaugment_is_a_function_of_the_generator_and_magnitude_zero_changes_little() -> None:
    img = torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(0))
    a = rand_augment(img, step_generator(0, 11, 4), 2, 15)
    b = rand_augment(img, step_generator(0, 11, 4), 2, 15)
    assert torch.equal(a, b)
    outs = [rand_augment(img, step_generator(0, s, 4), 2, 15) for s in range(12)]
    assert sum(not torch.equal(o, img) for o in outs) >= 6  # most draws change the image
    for name, op in OPS.items():  # magnitude 0: the identity for every operation that has a magnitude
        if name in ("AutoContrast", "Equalize", "Invert"):
            continue
        torch.testing.assert_close(op(img, 0.0, torch.Generator().manual_seed(1)), img, atol=2e-6, rtol=0,
                                   msg=f"{name} at magnitude 0")


def test_random_erasing_replaces_one_rectangle_with_noise() -> None:
    x = torch.zeros(1, 20, 20)
    assert torch.equal(random_erasing(x, torch.Generator().manual_seed(0), prob=0.0), x)
    out = random_erasing(x, torch.Generator().manual_seed(0), prob=1.0)
    changed = out[0] != 0
    rows, cols = changed.any(1).nonzero(), changed.any(0).nonzero()
    h, w = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
    assert 0.02 * 400 * 0.5 <= h * w <= 400 / 3 * 1.5 and changed.sum() == h * w  # one solid rectangle


def test_batched_transform_with_randaugment_and_erasing_equals_one_by_one() -> None:
    model = digits_model()
    tf = TrainTransform(model.preprocess, "affine", flip=True, randaugment=(2, 10), erasing=0.5)
    imgs = [torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    one = torch.stack([tf(im, step_generator(0, 4, 2 + i)) for i, im in enumerate(imgs)])
    many = tf.batch(imgs, [step_generator(0, 4, 2 + i) for i in range(5)])
    assert torch.equal(one, many)


def test_augreg_presets_fill_randaugment_and_mixup_and_refuse_a_contradiction() -> None:
    cfg = load_config("digits_demo", ["data.augreg=medium2"])
    assert cfg.data.randaugment == [2, 15] and cfg.train.mixup == 0.5
    assert set(AUGREG) == {"none", "light1", "light2", "medium1", "medium2", "strong1", "strong2"}
    with pytest.raises(ValueError, match="train.mixup = 0.3 disagrees with data.augreg = 'light2'"):
        load_config("digits_demo", ["data.augreg=light2", "train.mixup=0.3"])
    with pytest.raises(ValueError, match="data.augreg must be one of"):
        load_config("digits_demo", ["data.augreg=heavy"])
    with pytest.raises(ValueError, match="masked patch prediction"):
        from vitkit.train.run import check_config

        check_config(load_config("digits_mpp", ["train.mixup=0.2"]))
