"""The shifts benchmark: fact sheet, renderer, gap spec, the two distributions and the exact cause labels."""

from __future__ import annotations

import pytest
import torch

from datamodules.base import to_uint8
from datamodules.shifts import (
    CAUSE_FACTORS,
    FACTS,
    GapSpec,
    ShiftsDataModule,
    ShiftsRenderer,
    exemplar_of,
    label_causes,
)
from nemo_train.errors import UserInputError

TYPICAL = {name: FACTS.factor(name).typical_stored for name in CAUSE_FACTORS}


@pytest.fixture(scope="module")
def datamodule():
    dm = ShiftsDataModule(train_size=1200, test_size=400, seed=3)
    dm.setup("fit")
    return dm


def shifted_factors(attrs: dict[str, torch.Tensor]) -> torch.Tensor:
    """``bool[N, len(CAUSE_FACTORS)]``: which cause-able factors of each image are off their typical value."""
    return torch.stack([attrs[name] != TYPICAL[name] for name in CAUSE_FACTORS], 1)


def test_fact_sheet_names_the_factors_and_reads_well():
    assert FACTS.classes == tuple(str(d) for d in range(10)) and FACTS.class_attribute == "digit"
    assert CAUSE_FACTORS == ("color", "style", "angle", "background", "scale")
    assert FACTS.distractors == ["position"] and "position" not in FACTS.editable
    assert FACTS.factor("color").values[0] == "white" and FACTS.factor("angle").typical_stored == 0
    assert ShiftsRenderer.attributes == FACTS.vocabulary
    attrs = {"digit": 3, "color": 1, "style": 2, "angle": 45, "background": 2, "scale": 1, "position": 1}
    assert FACTS.caption(attrs) == (
        "a small dotted red digit 3, rotated 45 degrees anticlockwise, on a striped background, at the left"
    )
    typical = {"digit": 7, "color": 0, "style": 0, "angle": 0, "background": 0, "scale": 0, "position": 0}
    assert (
        FACTS.caption(typical)
        == "a normal-sized solid white digit 7, upright, on a plain black background, at the centre"
    )
    assert FACTS.value_names(attrs) == {
        "digit": "3",
        "color": "red",
        "style": "dotted",
        "angle": "45",
        "background": "stripes",
        "scale": "small",
        "position": "left",
    }


def test_renderer_is_deterministic_and_every_value_looks_different(datamodule):
    renderer = datamodule.renderer
    exemplar = exemplar_of("test", 5)
    base = renderer.render(4, exemplar=exemplar)
    assert base.shape == (3, 32, 32) and 0 <= base.min() and base.max() <= 1
    assert torch.equal(base, renderer.render(4, exemplar=exemplar))
    assert torch.allclose(base[0], base[1]) and torch.allclose(base[1], base[2])  # white on black: grey
    for factor in FACTS.factors:
        values = factor.values if not factor.named else range(len(factor.values))
        images = [to_uint8(renderer.render(4, exemplar=exemplar, **{factor.name: v})) for v in values]
        for i in range(len(images)):
            for j in range(i):
                assert not torch.equal(images[i], images[j]), f"{factor.name}: values {i} and {j} look alike"
    red = renderer.render(4, color="red", exemplar=exemplar)
    assert torch.equal(red.amax(0) > 0.05, base.amax(0) > 0.05)  # a colour edit keeps the strokes where they are


def test_every_split_re_renders_bit_for_bit(datamodule):
    for split in ("train_set", "val_set", "test_set"):
        data = getattr(datamodule, split)
        assert torch.equal(to_uint8(datamodule.renderer.render_batch(**data.attrs)), data.images), split
        item = data[7]
        single = datamodule.renderer.render(**{k: int(v) for k, v in item["attrs"].items()})
        assert torch.equal(to_uint8(single), data.images[7])


def test_training_data_respects_the_gaps(datamodule):
    gaps = datamodule.gaps.matrix()
    for split in ("train_set", "val_set"):
        data = getattr(datamodule, split)
        shifted = shifted_factors(data.attrs)
        assert (data.groups == 0).all()
        assert (shifted.sum(1) <= 1).all()  # at most one factor off its typical value
        assert not (shifted & gaps[:, data.attrs["digit"]].T).any(), f"{split}: a gap digit shows an atypical value"
    train = datamodule.train_set
    for k, name in enumerate(CAUSE_FACTORS):
        open_digits = ~gaps[k, train.attrs["digit"]]
        seen = set(train.attrs[name][open_digits].tolist())
        assert len(seen) == len(FACTS.factor(name).values), f"{name}: digits without a gap miss a value"
    assert len(train.attrs["position"].unique()) == len(FACTS.factor("position").values)
    pools = {
        split: set((getattr(datamodule, split).attrs["exemplar"] >> 30).tolist())
        for split in ("train_set", "val_set", "test_set")
    }
    assert pools == {"train_set": {0}, "val_set": {1}, "test_set": {2}}


def test_test_split_shifts_exactly_one_factor(datamodule):
    test = datamodule.test_set
    shifted = shifted_factors(test.attrs)
    assert (shifted.sum(1) == 1).all()
    which = shifted.float().argmax(1)
    assert set(which.tolist()) == set(range(len(CAUSE_FACTORS)))
    expected = datamodule.gaps.matrix()[which, test.attrs["digit"]].long()
    assert torch.equal(test.groups, expected) and 0 < test.groups.float().mean() < 1
    mining = datamodule.shifted_split("train", 300, seed=11)
    assert (shifted_factors(mining.attrs).sum(1) == 1).all()
    assert set((mining.attrs["exemplar"] >> 30).tolist()) == {0}
    again = datamodule.shifted_split("train", 300, seed=11)
    assert torch.equal(again.images, mining.images)


def exact_predict(renderer: ShiftsRenderer, accepted: list[dict[str, int]], label: int, calls: list[int]):
    """A classifier that answers ``label`` for exactly the images rendered from ``accepted`` and a wrong class
    for anything else; it records the size of each call in ``calls``."""
    known = [to_uint8(renderer.render(**attrs)) for attrs in accepted]

    def predict(images: torch.Tensor) -> torch.Tensor:
        calls.append(len(images))
        quantised = to_uint8(images)
        right = torch.tensor([any(torch.equal(image, k) for k in known) for image in quantised], dtype=torch.bool)
        return torch.where(right, torch.tensor(label), torch.tensor((label + 1) % 10))

    return predict


def test_label_causes_restores_one_factor_at_a_time(datamodule):
    renderer = datamodule.renderer
    typical = {"digit": 3, "color": 0, "style": 0, "angle": 0, "background": 0, "scale": 0, "position": 2}
    images = [
        {**typical, "color": 1, "scale": 1, "exemplar": 1},  # only white fixes it: colour
        {**typical, "style": 1, "angle": 45, "exemplar": 2},  # nothing fixes it: none
        {**typical, "color": 1, "background": 1, "exemplar": 3},  # either fix does: several
        {**typical, "exemplar": 4},  # nothing to restore: none
        {**typical, "angle": -90, "exemplar": 5},  # the one shift is the cause
    ]
    accepted = [
        {**images[0], "color": 0},
        {**images[2], "color": 0},
        {**images[2], "background": 0},
        {**images[4], "angle": 0},
    ]
    calls: list[int] = []
    attrs = {k: torch.tensor([image[k] for image in images]) for k in images[0]}
    predict = exact_predict(renderer, accepted, 3, calls)
    causes = label_causes(renderer, FACTS, attrs, torch.full((len(images),), 3), predict, batch_size=2)
    assert causes == ["color", "none", "several", "none", "angle"]
    assert sum(calls) == 7 and max(calls) <= 2  # one re-render per shifted factor, in batches of at most 2


def test_label_causes_names_the_shifted_factor_of_shift_images(datamodule):
    test = datamodule.test_set
    rows = torch.arange(0, 40)
    attrs = {k: v[rows] for k, v in test.attrs.items()}
    clean = [{**{k: int(v[i]) for k, v in attrs.items()}, **TYPICAL} for i in range(len(rows))]
    known = {bytes(to_uint8(datamodule.renderer.render(**a)).flatten().tolist()): a["digit"] for a in clean}

    def predict(images: torch.Tensor) -> torch.Tensor:  # right on the clean image only
        out = [known.get(bytes(image.flatten().tolist()), -1) for image in to_uint8(images)]
        return torch.tensor(out)

    causes = label_causes(datamodule.renderer, FACTS, attrs, test.labels[rows], predict)
    expected = [CAUSE_FACTORS[k] for k in shifted_factors(attrs).float().argmax(1).tolist()]
    assert causes == expected


def test_gap_presets_and_bad_specs(datamodule):
    a, b = GapSpec.parse("gaps_a"), GapSpec.parse("gaps_b")
    assert torch.equal(a.matrix().roll(5, dims=1), b.matrix())
    assert (a.matrix().sum(0) < len(CAUSE_FACTORS)).all()  # every digit may show some shift in training
    assert not GapSpec.parse("none").matrix().any()
    assert GapSpec.parse({"color": [3, 1, 1]}).gaps == {"color": (1, 3)}
    with pytest.raises(UserInputError, match="unknown shifts gap preset"):
        ShiftsDataModule(gaps="gaps_c")
    with pytest.raises(UserInputError, match="factor 'position'"):
        GapSpec.parse({"position": [1]})
    with pytest.raises(UserInputError, match=r"digit\(s\) \[12\]"):
        GapSpec.parse({"color": [12]})
    with pytest.raises(UserInputError, match="test_size"):
        ShiftsDataModule(test_size=0)
    with pytest.raises(UserInputError, match="unknown color 'mauve'"):
        datamodule.renderer.render(3, color="mauve")
