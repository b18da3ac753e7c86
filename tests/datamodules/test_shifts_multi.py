"""The multi-factor shift distribution: two or three factors off-typical per image, and the cause search on
classifiers built by hand to fail on known factors while other factors are off too."""

from __future__ import annotations

import pytest
import torch

from datamodules.base import to_uint8
from datamodules.shifts import CAUSE_FACTORS, FACTS, ShiftsDataModule, label_causes
from nemo_train.errors import UserInputError
from tests.shift_oracles import AttributeOracle, off_typical, restorations

TYPICAL = {name: FACTS.factor(name).typical_stored for name in CAUSE_FACTORS}


@pytest.fixture(scope="module")
def multi():
    dm = ShiftsDataModule(train_size=200, test_size=300, seed=5, test_shift="multi")
    dm.setup("fit")
    return dm


def test_every_multi_shift_image_has_two_or_three_factors_off(multi):
    test = multi.test_set
    off = off_typical(test.attrs)
    assert set(off.sum(1).tolist()) == {2, 3}
    assert off.any(0).all()  # every factor is shifted somewhere
    pairs = {(i, j) for row in off.tolist() for i in range(5) for j in range(i) if row[i] and row[j]}
    assert len(pairs) == 10  # every pair of factors occurs together
    expected = (off & multi.gaps.matrix()[:, test.attrs["digit"]].T).any(1).long()
    assert torch.equal(test.groups, expected)
    assert torch.equal(to_uint8(multi.renderer.render_batch(**test.attrs)), test.images)
    mining = multi.shifted_split("train", 200, seed=11)  # the mining split follows the module's test_shift
    assert set(off_typical(mining.attrs).sum(1).tolist()) == {2, 3}
    single = multi.shifted_split("train", 200, seed=11, shift="single")
    assert (off_typical(single.attrs).sum(1) == 1).all()


def test_the_single_shift_split_is_unchanged_by_the_option():
    """``single`` (the datamodule's default) draws exactly the images it drew before the option existed."""
    default = ShiftsDataModule(train_size=40, test_size=50, seed=2)
    default.setup("fit")
    assert (off_typical(default.test_set.attrs).sum(1) == 1).all()
    again = default.shifted_split("test", 50, seed=3, shift="single")
    assert torch.equal(again.images, default.test_set.images)
    with pytest.raises(UserInputError, match="test_shift='double'"):
        ShiftsDataModule(test_shift="double")
    with pytest.raises(UserInputError, match="shift='double'"):
        default.shifted_split("test", 10, seed=0, shift="double")


def causes_with(dm: ShiftsDataModule, fails) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The multi-shift test images an oracle failing on ``fails`` misclassifies (their attributes) and the causes
    ``label_causes`` finds for them."""
    test = dm.test_set
    oracle = AttributeOracle(dm.renderer, restorations(test.attrs), fails)
    wrong = oracle.predict(test.images.float() / 255.0) != test.labels
    expected = torch.tensor([bool(fails({k: int(v[i]) for k, v in test.attrs.items()})) for i in range(len(wrong))])
    assert torch.equal(wrong, expected)  # the oracle errs exactly where it is built to
    attrs = {k: v[wrong] for k, v in test.attrs.items()}
    return attrs, label_causes(dm.renderer, FACTS, attrs, test.labels[wrong], oracle.predict, batch_size=64)


def test_the_cause_search_finds_the_factor_the_classifier_fails_on_among_others(multi):
    for factor in CAUSE_FACTORS:
        attrs, causes = causes_with(multi, lambda a, f=factor: a[f] != TYPICAL[f])
        off = off_typical(attrs)
        assert len(causes) > 20 and off[:, CAUSE_FACTORS.index(factor)].all()
        assert off.sum(1).min() >= 2  # every error has another factor off besides the one that causes it
        assert causes == [factor] * len(causes)


def test_several_when_two_single_restorations_each_fix_it_and_none_when_neither_does(multi):
    def both_off(a):
        return a["color"] != TYPICAL["color"] and a["background"] != TYPICAL["background"]

    def either_off(a):
        return a["color"] != TYPICAL["color"] or a["background"] != TYPICAL["background"]

    color, background = CAUSE_FACTORS.index("color"), CAUSE_FACTORS.index("background")
    _, causes = causes_with(multi, both_off)  # its errors: both off; restoring either one fixes it
    assert len(causes) > 10 and causes == ["several"] * len(causes)
    attrs, causes = causes_with(multi, either_off)
    off = off_typical(attrs)
    expected = [
        "none" if c and b else "color" if c else "background"  # with both off, one restoration leaves the other
        for c, b in zip(off[:, color].tolist(), off[:, background].tolist())
    ]
    assert causes == expected and {"none", "color", "background"} <= set(causes)


@pytest.mark.parametrize("shift, count", [("multi3", 3), ("multi4", 4)])
def test_exactly_three_or_four_factors_off_and_causes_still_established_by_one_restoration(shift, count):
    dm = ShiftsDataModule(train_size=100, test_size=200, seed=6, test_shift=shift)
    dm.setup("fit")
    off = off_typical(dm.test_set.attrs)
    assert (off.sum(1) == count).all() and off.any(0).all()
    assert (off_typical(dm.shifted_split("train", 100, seed=11).attrs).sum(1) == count).all()  # the mining split
    # a classifier failing when style is off: every error is a style error although 2-3 other factors are off
    attrs, causes = causes_with(dm, lambda a: a["style"] != TYPICAL["style"])
    assert len(causes) > 20 and causes == ["style"] * len(causes)
    assert off_typical(attrs).sum(1).min() == count
    # failing when colour and size are both off: restoring either fixes it (several); failing when either is
    # off: with both off one restoration leaves the other (none), with one off that one is the cause
    _, causes = causes_with(dm, lambda a: a["color"] != TYPICAL["color"] and a["scale"] != TYPICAL["scale"])
    assert len(causes) > 5 and causes == ["several"] * len(causes)
    attrs, causes = causes_with(dm, lambda a: a["color"] != TYPICAL["color"] or a["scale"] != TYPICAL["scale"])
    color, scale = (
        off_typical(attrs)[:, CAUSE_FACTORS.index("color")],
        off_typical(attrs)[:, CAUSE_FACTORS.index("scale")],
    )
    expected = ["none" if c and s else "color" if c else "scale" for c, s in zip(color.tolist(), scale.tolist())]
    assert causes == expected and {"none", "color", "scale"} <= set(causes)
