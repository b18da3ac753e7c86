"""The Evidence rule row (a rule, not a model): it blames the unusual factor whose single-trait reference the
classifier misread, preferring references read as the error's own predicted class, then a seeded pick; its
sentence states only the image's own values."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

os.environ.setdefault("WANDB_MODE", "disabled")

from datamodules.shifts import FACTS, ShiftsDataModule  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.nemo.distill.evidence import ClassifierEvidence, Evidence  # noqa: E402
from nemo_train.nemo.distill.evidence_rule import EvidenceRule, EvidenceRuleExplainer, evidence_pick  # noqa: E402
from nemo_train.nemo.distill.rows import DistillContext, StudentGreedy  # noqa: E402
from nemo_train.nemo.distill.student_eval import distill_eval  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402

TRUE, PREDICTED, OTHER = 3, 8, 5
TYPICAL = {f.name: f.typical_stored for f in FACTS.factors if f.typical is not None}
RED, STRIPES, SMALL = FACTS.factor("color").stored("red"), FACTS.factor("background").stored("stripes"), 1


def _coloured(images: torch.Tensor) -> torch.Tensor:
    return (images.amax(1) - images.amin(1)).flatten(1).amax(1) > 0.2


def _textured(images: torch.Tensor) -> torch.Tensor:
    ring = torch.cat([images[..., 0, :], images[..., -1, :], images[..., :, 0], images[..., :, -1]], -1)
    return ring.mean((1, 2)) > 0.05


class Reads(nn.Module):
    """Reads every image as a 3, except a coloured digit (read as ``colour_as``) and a digit on a textured
    background (read as ``background_as``); ``None`` leaves that trait read right. Colour wins when both."""

    def __init__(self, colour_as: int | None, background_as: int | None) -> None:
        super().__init__()
        self.colour_as, self.background_as = colour_as, background_as

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        out = torch.full((len(images),), TRUE)
        if self.background_as is not None:
            out[_textured(images)] = self.background_as
        if self.colour_as is not None:
            out[_coloured(images)] = self.colour_as
        return out


@pytest.fixture(scope="module")
def shifts():
    dm = ShiftsDataModule(train_size=200, test_size=10, test_shift="multi3")
    dm.setup("fit")
    return dm


def _error(dm, sample_id="e1", **unusual) -> ErrorSample:
    """A 3 read as an 8, with the given factors off their typical values."""
    attrs = {**TYPICAL, **unusual, "digit": TRUE, "position": 0, "exemplar": int(dm.test_set.attrs["exemplar"][0])}
    image = dm.renderer.render(**attrs).mul(255).round().div(255)
    return ErrorSample(sample_id, image, TRUE, PREDICTED, attrs)


def _bench(dm, errors) -> NemoBenchmark:
    data = dm.val_set
    attrs = [{k: int(v[i]) for k, v in data.attrs.items()} for i in range(len(data.labels))]
    reference = ReferenceSet(data.images, data.labels, data.labels, torch.zeros(len(data.labels), 2), attrs=attrs)
    cause = {  # as the shifts benchmark states it
        "attribute": None,
        "editable": [f.name for f in FACTS.factors],
        "distractor": FACTS.distractors[0],
        "object": FACTS.object_word,
        "typical": dict(TYPICAL),
    }
    return NemoBenchmark("shifts", list(dm.class_names), "shifts", errors, reference, dm.renderer,
                         dict(dm.renderer.attributes), cause, facts=FACTS)  # fmt: skip


def _evidence(shared, predictions) -> Evidence:
    return Evidence(torch.zeros(len(shared), 3, 4, 4), [{} for _ in shared], list(shared), list(predictions))


def _sample(sample_id="e1") -> ErrorSample:
    return ErrorSample(sample_id, torch.zeros(3, 4, 4), TRUE, PREDICTED, {})


def test_the_pick_is_the_misread_reference_and_prefers_the_errors_own_prediction():
    unusual = ["color", "background", "scale"]
    one = _evidence([None, "color", "background", "scale"], [TRUE, TRUE, OTHER, TRUE])
    assert evidence_pick(one, _sample(), unusual, seed=0) == "background"
    # two misread: the one read as the error's predicted class wins, whatever the seed
    two = _evidence([None, "color", "background", "scale"], [TRUE, OTHER, PREDICTED, TRUE])
    assert {evidence_pick(two, _sample(f"e{i}"), unusual, seed=s) for i in range(20) for s in range(3)} == {
        "background"
    }
    # a misread fully typical reference says nothing about a factor
    typical = _evidence([None, "color", "background"], [PREDICTED, TRUE, OTHER])
    assert evidence_pick(typical, _sample(), unusual, seed=0) == "background"


def test_ties_and_no_misread_reference_are_seeded_picks():
    unusual = ["color", "background", "scale"]
    tie = _evidence([None, "color", "background", "scale"], [TRUE, PREDICTED, PREDICTED, TRUE])
    picks = [evidence_pick(tie, _sample(f"e{i}"), unusual, seed=0) for i in range(40)]
    assert set(picks) == {"color", "background"}  # never the reference read right
    assert picks == [evidence_pick(tie, _sample(f"e{i}"), unusual, seed=0) for i in range(40)]  # seeded
    assert picks != [evidence_pick(tie, _sample(f"e{i}"), unusual, seed=1) for i in range(40)]
    silent = _evidence([None, "color", "background", "scale"], [TRUE] * 4)
    assert {evidence_pick(silent, _sample(f"e{i}"), unusual, seed=0) for i in range(40)} == set(unusual)
    assert evidence_pick(_evidence([None], [TRUE]), _sample(), [], seed=0) is None


@pytest.mark.parametrize(
    "target, blamed",
    [
        (Reads(colour_as=PREDICTED, background_as=None), "color"),
        (Reads(colour_as=None, background_as=PREDICTED), "background"),
        (Reads(colour_as=OTHER, background_as=PREDICTED), "background"),  # read as the error's own class first
    ],
)
def test_the_rule_names_the_factor_the_classifier_misreads_in_a_true_sentence(shifts, target, blamed):
    error = _error(shifts, color=RED, background=STRIPES, scale=SMALL)
    bench = _bench(shifts, [error])
    (explanation,) = EvidenceRuleExplainer(target).explain_batch([error], bench)
    evidence = ClassifierEvidence().gather(error, bench, target)  # the references the student's prompt shows
    assert {s for s, p in zip(evidence.shared, evidence.predictions) if p == PREDICTED} == {blamed}
    factor = FACTS.factor(blamed)
    value = factor.value_name(error.attrs[blamed])  # the image's own value, never another
    text = explanation.text.lower()
    assert value in text and "edit:" in text
    assert f"{blamed} -> {factor.value_name(factor.typical_stored)}" in text.split("edit:")[1]
    assert EvidenceRuleExplainer.name == "Evidence rule (not a model)"


def test_the_row_asks_no_student_and_needs_a_fact_sheet(shifts):
    error = _error(shifts, color=RED, background=STRIPES)
    bench = _bench(shifts, [error])
    assert not EvidenceRule.uses_student
    with pytest.raises(UserInputError, match="generated benchmark"):
        EvidenceRule().build(DistillContext(bench, Reads(PREDICTED, None), None, structured=None, keyword=None))
    assert EvidenceRule().settings() == {"class": "EvidenceRule"}


def test_distill_eval_without_a_student_refuses_a_row_that_asks_one(tmp_path):
    with pytest.raises(UserInputError, match="student is null"):
        distill_eval(student=None, targets=[str(tmp_path / "x.ckpt")], dataset="shifts", methods=[StudentGreedy()],
                     out_dir=str(tmp_path / "out"))  # fmt: skip
    assert not (tmp_path / "out").exists()
