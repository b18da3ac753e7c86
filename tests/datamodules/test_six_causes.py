"""Tests of the six causes of low competency and their datamodule."""

import os

import pytest
import torch

from datamodules.six_causes import CAUSES, SixCausesDataModule, apply_cause
from nemo_train.errors import UserInputError

os.environ.setdefault("WANDB_MODE", "disabled")


def _images(b=4, size=16, seed=0):
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cause", CAUSES)
def test_every_cause_changes_images_keeps_shape_and_range(cause):
    images = _images()
    out = apply_cause(images, cause, 1.0, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.float32
    assert out.min() >= 0 and out.max() <= 1
    assert (out - images).abs().mean() > 0.02
    assert torch.equal(images, _images())  # input untouched


@pytest.mark.parametrize("cause", ["spatial", "noise"])
def test_random_causes_are_reproducible_with_a_seeded_generator(cause):
    images = _images()
    a = apply_cause(images, cause, 0.7, torch.Generator().manual_seed(3))
    b = apply_cause(images, cause, 0.7, torch.Generator().manual_seed(3))
    c = apply_cause(images, cause, 0.7, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_photometric_causes_match_hand_computed_values():
    pixel = torch.full((1, 3, 2, 2), 0.2)
    pixel[:, 0] = 0.6
    # brightness up at severity 1: blend with white by 0.75 -> 0.6*0.25+0.75 = 0.9, 0.2*0.25+0.75 = 0.8
    out = apply_cause(pixel, "brightness", 1.0)
    assert torch.allclose(out[0, :, 0, 0], torch.tensor([0.9, 0.8, 0.8]))
    # contrast down at severity 1: blend with mid-grey by 0.85
    out = apply_cause(pixel, "contrast", 1.0)
    assert torch.allclose(out[0, :, 0, 0], torch.tensor([0.6 * 0.15 + 0.425, 0.2 * 0.15 + 0.425, 0.2 * 0.15 + 0.425]))
    # saturation down at severity 1: luminance + 0.1 * (x - luminance)
    luma = 0.299 * 0.6 + 0.587 * 0.2 + 0.114 * 0.2
    out = apply_cause(pixel, "saturation", 1.0)
    assert torch.allclose(out[0, 0, 0, 0], torch.tensor(luma + 0.1 * (0.6 - luma)))
    # saturation up pushes colours apart; brightness down darkens
    assert apply_cause(pixel, "saturation", 0.5, direction="up")[0, 0, 0, 0] > 0.6
    assert torch.allclose(apply_cause(pixel, "brightness", 1.0, direction="down"), pixel * 0.15)


def test_noise_is_bounded_by_severity_and_pixelation_makes_blocks():
    images = torch.full((2, 3, 20, 20), 0.5)
    noisy = apply_cause(images, "noise", 0.5, torch.Generator().manual_seed(0))
    assert (noisy - images).abs().max() <= 0.3 + 1e-6 and (noisy - images).abs().max() > 0.2
    ramp = torch.linspace(0, 1, 20).view(1, 1, 1, 20).expand(1, 3, 20, 20).contiguous()
    pix = apply_cause(ramp, "pixelation", 1.0)  # keep 15 % of 20 -> 3 distinct columns
    assert len(pix[0, 0, 0].unique()) == 3


def test_spatial_pastes_one_square_patch():
    images = torch.zeros(3, 3, 20, 20)
    out = apply_cause(images, "spatial", 1.0, torch.Generator().manual_seed(1))
    for i in range(3):
        changed = (out[i] != 0).any(0)
        rows, cols = torch.nonzero(changed, as_tuple=True)
        side = 12  # round(20 * 0.6)
        assert rows.max() - rows.min() + 1 <= side and cols.max() - cols.min() + 1 <= side
        assert changed.sum() > side * side // 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"cause": "blur", "severity": 0.5}, "unknown cause"),
        ({"cause": "noise", "severity": 0.0}, "severity"),
        ({"cause": "noise", "severity": 1.5}, "severity"),
        ({"cause": "noise", "severity": 0.5, "direction": "up"}, "direction"),
        ({"cause": "contrast", "severity": 0.5, "direction": "sideways"}, "direction"),
    ],
)
def test_bad_arguments_raise_user_input_error(kwargs, match):
    with pytest.raises(UserInputError, match=match):
        apply_cause(_images(), **kwargs)


def test_bad_images_raise_user_input_error():
    with pytest.raises(UserInputError, match=r"\[B, 3, H, W\]"):
        apply_cause(torch.rand(2, 1, 8, 8), "noise", 0.5)
    with pytest.raises(UserInputError, match="dtype"):
        apply_cause(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), "noise", 0.5)


class _TinySource:
    """A source datamodule with a fixed test set."""

    num_classes, class_names = 2, ["a", "b"]

    def __init__(self, n=40):
        from datamodules.base import AttributeImageDataset

        gen = torch.Generator().manual_seed(0)
        images = torch.rand(n, 3, 12, 12, generator=gen) * 0.5
        self.test_set = AttributeImageDataset(images, torch.arange(n) % 2, torch.zeros(n), {"style": torch.arange(n)})

    def setup(self, stage=None):
        pass


def test_datamodule_without_estimator_keeps_pairs_and_cause_labels():
    dm = SixCausesDataModule(_TinySource(), per_cause=5, batch_size=8)
    dm.setup()
    assert dm.counts() == {c: 5 for c in CAUSES}
    batch = next(iter(dm.test_dataloader()))
    assert set(batch) == {"image", "clean", "label", "group", "severity", "attrs"}
    assert batch["image"].shape == batch["clean"].shape == (8, 3, 12, 12)
    assert torch.equal(batch["group"], batch["attrs"]["cause"])
    # the clean image is the uint8 round trip of the source image, and the label follows it
    src = dm.source.test_set
    style = batch["attrs"]["style"]
    assert torch.equal(batch["clean"], torch.stack([src[int(s)]["image"] for s in style]))
    assert torch.equal(batch["label"], style % 2)


def test_datamodule_with_a_competency_function_selects_high_then_low():
    # a toy competency: high for dark images (mean < 0.3), low otherwise
    def competency(x):
        return (x.mean((1, 2, 3)) < 0.3).float() * 0.95

    dm = SixCausesDataModule(_TinySource(), competency=competency, per_cause=4)
    dm.setup()
    ds = dm.dataset
    assert (competency(ds.clean) >= 0.9).all() and (competency(ds.images) < 0.9).all()
    counts = dm.counts()
    assert counts["brightness"] == 4 and counts["contrast"] == 4


def test_an_original_crossing_the_threshold_changes_one_pick_not_the_whole_draw():
    def dark_is_competent(x):
        return (x.mean((1, 2, 3)) < 0.3).float() * 0.95

    brightness = CAUSES.index("brightness")

    def picks(dm):
        dm.setup()
        return dm.dataset.attrs["style"][dm.dataset.causes == brightness].tolist()

    source = _TinySource()
    before = picks(SixCausesDataModule(source, competency=dark_is_competent, per_cause=4))
    dropped = source.test_set[before[0]]["image"]

    def without_one(x):  # the same competency, except that one original now falls below the threshold
        return dark_is_competent(x) * ~(x == dropped).flatten(1).all(1)

    after = picks(SixCausesDataModule(source, competency=without_one, per_cause=4))
    assert before[0] not in after and after[:3] == before[1:]


def test_directions_choose_how_brightness_and_saturation_are_corrupted():
    def built(directions):
        dm = SixCausesDataModule(_TinySource(), per_cause=5, directions=directions)
        dm.setup()
        ds = dm.dataset
        return {cause: (ds.images[ds.causes == i], ds.clean[ds.causes == i]) for i, cause in enumerate(CAUSES)}

    default, changed = built(None), built({"brightness": "down", "saturation": "up"})
    for cause in CAUSES:  # the same originals are drawn either way, and causes not named keep the default
        assert torch.equal(default[cause][1], changed[cause][1]), cause
        if cause not in ("brightness", "saturation"):
            assert torch.equal(default[cause][0], changed[cause][0]), cause
    images, clean = default["brightness"]
    assert (images > clean).all()  # up: blended towards white
    images, clean = changed["brightness"]
    assert (images <= clean).all() and (images < clean).any()  # down: darkened


def test_datamodule_rejects_bad_settings():
    with pytest.raises(UserInputError, match="threshold"):
        SixCausesDataModule(_TinySource(), threshold=1.0)
    with pytest.raises(UserInputError, match="directions"):
        SixCausesDataModule(_TinySource(), directions={"noise": "up"})
    with pytest.raises(UserInputError, match="directions"):
        SixCausesDataModule(_TinySource(), directions={"brightness": "left"})
    with pytest.raises(UserInputError, match="severity_range"):
        SixCausesDataModule(_TinySource(), severity_range=(0.0, 0.5))
