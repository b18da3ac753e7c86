"""The trivial rows say what their names say: every factor, no class, the class prior, an off-typical factor."""

from __future__ import annotations

import torch

from datamodules.shifts_render import FACTS
from nemo_train.nemo.components.trivial_specs import mined_prior, most_frequent_cause
from nemo_train.nemo.methods.trivial import (
    ClassFreeExplainer,
    ClassPriorExplainer,
    EverythingExplainer,
    OddOneOutExplainer,
    class_prior,
    off_typical,
)
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.scoring.grounding import ClaimParser

PARSER = ClaimParser(FACTS)
TYPICAL = {"color": 0, "style": 0, "angle": 0, "background": 0, "scale": 0, "position": 3}
NAMES = [str(d) for d in range(10)]


def _sample(i: int, label: int, prediction: int, cause: str | None = None, **shifted) -> ErrorSample:
    attrs = {"digit": label, **TYPICAL, "exemplar": i, **shifted}
    return ErrorSample(f"s{i}", torch.zeros(3, 32, 32), label, prediction, attrs, cause=cause)


def _bench(errors, counts=None) -> NemoBenchmark:
    empty = torch.zeros(0, dtype=torch.long)
    reference = ReferenceSet(torch.zeros(0, 3, 32, 32), empty, empty, torch.zeros(0, 2))
    cause = {"attribute": None, "editable": [f.name for f in FACTS.factors], "object": "digit"}
    return NemoBenchmark("shifts", NAMES, "shifts", errors, reference, None, FACTS.vocabulary, cause, FACTS, counts)


def _read(sample: ErrorSample, text: str):
    return PARSER.read(text, FACTS.value_names(sample.attrs), NAMES[sample.label], NAMES[sample.prediction])


def test_everything_names_every_factor_of_the_sheet():
    sample = _sample(0, 3, 8, "color", color=2)
    text = EverythingExplainer().explain(sample, _bench([sample])).text
    assert set(_read(sample, text).blamed) == set(FACTS.factor_names)


def test_the_class_free_constant_blames_the_most_frequent_cause_and_no_class():
    sample = _sample(0, 3, 8, "color", color=2)
    bench = _bench([sample], {"background": 7, "color": 4, "several": 12, "none": 9})
    assert most_frequent_cause(bench) == "background"  # "several" / "none" are not a cause
    text = ClassFreeExplainer(most_frequent_cause(bench)).explain(sample, bench).text
    reading = _read(sample, text)
    assert reading.blamed == ("background",)
    assert not [c for c in reading.claims if c.subject in ("true class", "predicted class")]
    assert not any(name in text.split() for name in NAMES)


def test_the_class_prior_is_the_most_frequent_cause_per_predicted_class():
    mined = [(8, "color"), (8, "style"), (8, "color"), (1, "angle"), (1, "none"), (1, "scale"), (1, "scale")]
    mined += [(5, "several"), (2, "background")]
    prior, overall = class_prior(mined)
    # worked by hand: 8 -> colour 2 of 3; 1 -> size 2 (the "none" is no cause); 5 has no single cause
    assert prior == {8: "color", 1: "scale", 2: "background"} and overall == "color"  # colour 2, size 2: colour first
    explainer = ClassPriorExplainer(prior, overall)
    bench = _bench([])
    for prediction, blamed in ((8, "color"), (1, "scale"), (5, "color")):
        sample = _sample(prediction, 3, prediction, "style", style=1)
        text = explainer.explain(sample, bench).text
        assert _read(sample, text).blamed == (blamed,), text
        assert f"Edit: {blamed} -> {FACTS.factor(blamed).typical}" in text  # back to the typical value


def test_odd_one_out_names_one_of_the_images_off_typical_factors_seeded():
    samples = [_sample(i, 3, 8, "color", color=2, background=1 + i % 3, angle=45) for i in range(12)]
    bench = _bench(samples)
    picked = set()
    for sample in samples:
        odd = off_typical(sample, bench)
        assert odd == ["color", "angle", "background"]  # position is a distractor: never unusual
        text = OddOneOutExplainer(seed=1).explain(sample, bench).text
        blamed = _read(sample, text).blamed
        assert len(blamed) == 1 and blamed[0] in odd, text
        assert OddOneOutExplainer(seed=1).explain(sample, bench).text == text  # the seed fixes the draw
        picked.add(blamed[0])
    assert len(picked) > 1  # drawn, not always the first


def test_a_planted_bias_gives_its_cause_to_every_class():
    from datamodules.cmnist import FACTS as CMNIST

    empty = torch.zeros(0, dtype=torch.long)
    reference = ReferenceSet(torch.zeros(0, 3, 8, 8), empty, empty, torch.zeros(0, 2))
    bench = NemoBenchmark("cmnist", NAMES, "cmnist", [], reference, None, CMNIST.vocabulary, {}, CMNIST)
    prior, fallback = mined_prior(bench, None, "gaps_a", 0, None, 10)
    assert set(prior.values()) == {"color"} and len(prior) == 10 and fallback == "color"


def test_the_distill_rows_build_the_same_explainers_with_the_text_scorer():
    import pytest

    from nemo_train.errors import UserInputError
    from nemo_train.nemo.distill import trivial_rows
    from nemo_train.nemo.distill.rows import DistillContext

    sample = _sample(0, 3, 8, "color", color=2)
    bench, scorer = _bench([sample], {"style": 5, "color": 2}), object()
    ctx = DistillContext(bench, None, None, structured=scorer, keyword=scorer)
    method, used = trivial_rows.Everything().build(ctx)
    assert isinstance(method, EverythingExplainer) and used is scorer
    method, _ = trivial_rows.ClassFreeConstant().build(ctx)
    assert isinstance(method, ClassFreeExplainer) and method.cause == "style"
    assert isinstance(trivial_rows.OddOneOut().build(ctx)[0], OddOneOutExplainer)
    with pytest.raises(UserInputError):  # folder data: no fact sheet, no text scorer
        trivial_rows.Everything().build(DistillContext(bench, None, None, structured=scorer, keyword=None))
