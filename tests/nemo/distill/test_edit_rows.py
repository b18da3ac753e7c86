"""The student's budget of tests with ``fill: evidence``: tests its own answers leave unspent go to the error's other
unusual traits in the order the evidence ranks them, on a real shifts error, its evidence and its exact edits."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn

os.environ.setdefault("WANDB_MODE", "disabled")

from datamodules.shifts import FACTS, ShiftsDataModule  # noqa: E402
from nemo_train.backends.scripted import ScriptedBackend  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.nemo.distill.edit_rows import BudgetExplainer, StudentEdits, evidence_order  # noqa: E402
from nemo_train.nemo.distill.evidence import ClassifierEvidence, EvidenceView  # noqa: E402
from nemo_train.nemo.distill.evidence_rule import EvidenceRule  # noqa: E402
from nemo_train.nemo.distill.rows import DistillContext, EvidenceQuestions  # noqa: E402
from nemo_train.nemo.distill.student_eval import edit_scorers  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402

TRUE, PREDICTED = 3, 8
TYPICAL = {f.name: f.typical_stored for f in FACTS.factors if f.typical is not None}
RED, STRIPES = FACTS.factor("color").stored("red"), FACTS.factor("background").stored("stripes")
VIEW = EvidenceView(exemplars=2, references="paired", named=True, ranked=True)


class BackgroundBlind(nn.Module):
    """Reads every image as a 3, except one on a textured background (its outer pixel ring is lit): an 8."""

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        ring = torch.cat([images[..., 0, :], images[..., -1, :], images[..., :, 0], images[..., :, -1]], -1)
        return torch.where(ring.mean((1, 2)) > 0.05, torch.tensor(PREDICTED), torch.tensor(TRUE))

    def predict_proba(self, images: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(self.predict(images), 10).float()


@pytest.fixture(scope="module")
def case():
    dm = ShiftsDataModule(train_size=200, test_size=10, test_shift="multi3")
    dm.setup("fit")
    unusual = {"color": RED, "background": STRIPES, "scale": 1}
    attrs = {**TYPICAL, **unusual, "digit": TRUE, "position": 0, "exemplar": int(dm.test_set.attrs["exemplar"][0])}
    error = ErrorSample("e1", dm.renderer.render(**attrs).mul(255).round().div(255), TRUE, PREDICTED, attrs)
    data = dm.val_set
    refs = [{k: int(v[i]) for k, v in data.attrs.items()} for i in range(len(data.labels))]
    reference = ReferenceSet(data.images, data.labels, data.labels, torch.zeros(len(data.labels), 2), attrs=refs)
    cause = {"attribute": None, "editable": [f.name for f in FACTS.factors], "distractor": FACTS.distractors[0],
             "object": FACTS.object_word, "typical": dict(TYPICAL)}  # fmt: skip
    bench = NemoBenchmark("shifts", list(dm.class_names), "shifts", [error], reference, dm.renderer,
                          dict(dm.renderer.attributes), cause, facts=FACTS)  # fmt: skip
    return error, bench


def _blamed(scorer, error, bench, texts) -> list[str]:
    return [edit["attribute"] for edit in scorer.deriver.derive(error, texts, bench.class_names)]


def test_the_evidence_order_puts_the_trait_the_classifier_cannot_read_first(case):
    error, bench = case
    evidence = ClassifierEvidence(view=VIEW).gather(error, bench, BackgroundBlind())
    order = evidence_order(error, evidence, bench)
    scorer, _ = edit_scorers(bench, BackgroundBlind(), None, 0)
    blamed = _blamed(scorer, error, bench, order)
    assert blamed[0] == "background" and sorted(blamed) == ["background", "color", "scale"]
    assert all("Edit:" in text for text in order)  # each with the edit back to the trait's typical value


@pytest.mark.parametrize(("fill", "tested", "samples"), [
    ("none", ["scale"], 4),  # one distinct hypothesis: one test, refuted, and the budget's second test unspent
    # the second test goes to the trait the evidence ranks first (the image's unusual traits in factor order would
    # give colour)
    ("evidence", ["scale", "background"], 4),
    ("evidence", ["scale", "background"], 0),  # no sampled answer: the greedy one, then the evidence's order
])  # fmt: skip
def test_unspent_tests_go_to_the_traits_the_evidence_ranks(case, fill, tested, samples):
    error, bench = case
    size = '{"cause_of_error": "The classifier read this 3 as an 8 because of its size."}'
    backend = ScriptedBackend(lambda messages: size)  # every answer, greedy or sampled, blames size
    scorer, _ = edit_scorers(bench, BackgroundBlind(), None, 0)
    questions = EvidenceQuestions(BackgroundBlind(), bench, ClassifierEvidence(view=VIEW))
    explainer = BudgetExplainer(backend, questions, scorer, 2, samples, 1.0, 20.0, "s", accept="true_class",
                                target=BackgroundBlind(), fill=fill)  # fmt: skip
    (found,) = explainer.explain_batch([error], bench)
    assert len(backend.calls) == (1 if samples == 0 else 2)  # the greedy request, and the sampled one if any
    assert _blamed(scorer, error, bench, [t.hypothesis for t in found.trials]) == tested
    answered = _blamed(scorer, error, bench, [found.text])
    if fill == "none":  # the refuted size test is all there is
        assert answered == ["scale"] and found.trial.cei == pytest.approx(0.0)
    else:  # the confirmed test is the answer: restoring the background makes the classifier right
        assert answered == ["background"] and found.trial.cei == pytest.approx(100.0)


def test_fill_needs_the_evidence_view_and_names_the_row():
    row = StudentEdits(edits=2, accept="true_class", fill="evidence")
    assert row.name == "Student (2 edits, evidence, true-class test, then the evidence's order)"
    assert row.settings()["fill"] == "evidence" and "fill" not in StudentEdits(edits=2).settings()
    assert "fill" not in StudentEdits(edits=0, fill="evidence").settings()  # nothing to fill at 0 edits
    greedy = StudentEdits(edits=2, accept="true_class", fill="evidence", samples=0)
    assert (
        greedy.name
        == "Student (2 edits, evidence, true-class test, its greedy answer alone, then the evidence's order)"
    )
    assert greedy.settings()["samples"] == 0
    with pytest.raises(UserInputError, match="view: evidence"):
        StudentEdits(edits=2, view="error", fill="evidence")
    with pytest.raises(ValueError, match="evidence view"):
        BudgetExplainer(None, SimpleNamespace(conversations=list), None, 2, 1, 1.0, 20.0, "s", fill="evidence")
    with pytest.raises(ValueError, match="no student"):  # without a student the hypotheses come from the evidence
        BudgetExplainer(None, SimpleNamespace(gather=list), None, 2, 0, 1.0, 20.0, "s")


class ColourAndBackgroundBlind(BackgroundBlind):
    """Reads an image as an 8 when its background is textured or its digit is not the typical colour: restoring
    either trait alone leaves the other, so neither is a single cause and every test is refuted."""

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        centre = images[..., 8:20, 8:20]
        tinted = (centre.amax(1) - centre.amin(1)).amax((1, 2)) > 0.3  # a coloured stroke: channels disagree
        return torch.where(tinted, torch.tensor(PREDICTED), super().predict(images))


@pytest.mark.parametrize(("target", "edits", "tested", "answered"), [
    # the evidence ranks the background first and its test confirms it: one test is enough
    (BackgroundBlind(), 1, ["background"], "background"),
    # a budget's tests are all spent (the confirmed one with the highest CEI is the answer)
    (BackgroundBlind(), 2, ["background", "scale"], "background"),
    # refuted tests: the next trait in the evidence's order, untested, is the answer
    (ColourAndBackgroundBlind(), 1, ["background"], "color"),
])  # fmt: skip
def test_the_evidence_order_with_tests_and_no_student(case, target, edits, tested, answered):
    error, bench = case
    structured, keyword = edit_scorers(bench, target, None, 0)
    ctx = DistillContext(bench, target, None, structured, keyword)  # no student at all
    row = EvidenceRule(evidence=VIEW, edits=edits)
    method, scorer = row.build(ctx)
    (found,) = method.explain_batch([error], bench)
    assert _blamed(scorer, error, bench, [t.hypothesis for t in found.trials]) == tested
    assert _blamed(scorer, error, bench, [found.text]) == [answered]
    assert (
        method.name
        == row.name
        == f"Evidence rule (not a model; its order with {edits} true-class test"
        + ("" if edits == 1 else "s")
        + f", {VIEW.label})"
    )


def test_the_evidence_rule_row_settings_name_its_tests():
    assert EvidenceRule().settings() == {"class": "EvidenceRule"}  # stored rows of before resume
    assert EvidenceRule(edits=2).settings() == {"class": "EvidenceRule", "edits": 2, "accept": "true_class"}
    assert EvidenceRule(edits=1, accept="cei", accept_cei=30).settings()["accept_cei"] == 30
    assert EvidenceRule(edits=1, accept="cei", accept_cei=30).name == (
        "Evidence rule (not a model; its order with 1 CEI ≥ 30 test)"
    )
    assert EvidenceRule.uses_student is False


def test_restated_hypotheses_test_the_blamed_factor_back_to_its_typical_value(case):
    error, bench = case
    # the student blames the right factor with a wrong value: the edit it states leaves the background textured
    wrong = '{"cause_of_error": "The classifier read this 3 as an 8 because of its background. Edit: background -> checker"}'
    scorer, _ = edit_scorers(bench, BackgroundBlind(), None, 0)
    questions = EvidenceQuestions(BackgroundBlind(), bench, ClassifierEvidence(view=VIEW))
    found = {}
    for hypotheses in ("as_written", "restated"):
        explainer = BudgetExplainer(ScriptedBackend(lambda messages: wrong), questions, scorer, 1, 0, 1.0, 20.0, "s",
                                    accept="true_class", target=BackgroundBlind(), hypotheses=hypotheses)  # fmt: skip
        (found[hypotheses],) = explainer.explain_batch([error], bench)
    assert found["as_written"].trial.cei == pytest.approx(0.0)  # the stated edit: still an 8
    restated = found["restated"]
    assert restated.trial.cei == pytest.approx(100.0) and "Edit: background -> plain" in restated.text
    row = StudentEdits(edits=1, accept="true_class", hypotheses="restated")
    assert row.name.endswith(", factors restated)") and row.settings()["hypotheses"] == "restated"
    assert "hypotheses" not in StudentEdits(edits=1).settings()
