"""The shifts benchmark on the multi-factor distribution: with two or three factors off per image, the cause of
each error is the classifier's, not the image's; checked on hand-made classifiers whose failing factor is known."""

from __future__ import annotations

import pytest

from datamodules.shifts import CAUSE_FACTORS, ShiftsDataModule
from nemo_train.scoring.shift_benchmark import build_shift_benchmark
from tests.shift_oracles import TYPICAL, AttributeOracle, off_typical, restorations

SIZE = 150
KWARGS = {"train_size": 40, "test_shift": "multi"}


@pytest.fixture(scope="module")
def data():
    """The datamodule the benchmark builds (same arguments), for the oracles to know every image it renders."""
    dm = ShiftsDataModule(gaps="gaps_a", test_size=SIZE, **KWARGS)
    dm.setup("fit")
    val = [{k: int(v[i]) for k, v in dm.val_set.attrs.items()} for i in range(len(dm.val_set.labels))]
    return dm, restorations(dm.test_set.attrs) + val


@pytest.mark.parametrize("factor", ["angle", "scale"])
def test_every_error_is_caused_by_the_factor_the_classifier_fails_on(data, factor):
    dm, known = data
    oracle = AttributeOracle(dm.renderer, known, lambda a: a[factor] != TYPICAL[factor])
    bench = build_shift_benchmark(oracle, "gaps_a", n=500, seed=0, size=SIZE, datamodule_kwargs=KWARGS)
    off = off_typical(dm.test_set.attrs)
    failing = int(off[:, CAUSE_FACTORS.index(factor)].sum())
    assert bench.cause_counts == {factor: failing}  # every error, though each image has 2-3 factors off
    assert len(bench.errors) == failing and {e.cause for e in bench.errors} == {factor}
    others = [sum(e.attrs[f] != TYPICAL[f] for f in CAUSE_FACTORS if f != factor) for e in bench.errors]
    assert min(others) >= 1  # naming "the image's unusual factor" would not single out the cause


def test_errors_fixed_by_two_restorations_are_counted_as_several_and_not_sampled(data):
    dm, known = data

    def fails(a):  # errs when the colour is off together with the rotation or the style
        return a["color"] != TYPICAL["color"] and (a["angle"] != TYPICAL["angle"] or a["style"] != TYPICAL["style"])

    oracle = AttributeOracle(dm.renderer, known, fails)
    bench = build_shift_benchmark(oracle, "gaps_a", n=500, seed=0, size=SIZE, datamodule_kwargs=KWARGS)
    off = off_typical(dm.test_set.attrs)
    color, angle, style = (off[:, CAUSE_FACTORS.index(f)] for f in ("color", "angle", "style"))
    several = int((color & (angle ^ style)).sum())  # angle or style off, not both: colour or that one fixes it
    single = int((color & angle & style).sum())  # both off: only restoring the colour fixes it
    assert several and single
    assert bench.cause_counts == {"several": several, "color": single}
    assert len(bench.errors) == single and all(e.cause == "color" for e in bench.errors)
