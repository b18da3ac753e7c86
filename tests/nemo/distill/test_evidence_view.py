"""Evidence views beyond the default: several handwriting exemplars, the leave-one-trait-out references, and the
question that tallies the classifier's readings per named trait; the Evidence rule reads the same tallies."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from PIL import Image

os.environ.setdefault("WANDB_MODE", "disabled")

from datamodules.explanations import read_records  # noqa: E402
from datamodules.sentences import evidence_tallies  # noqa: E402
from datamodules.shifts import FACTS, ShiftsDataModule  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.nemo.distill.edit_rows import StudentEdits  # noqa: E402
from nemo_train.nemo.distill.evidence import ClassifierEvidence, Evidence, EvidenceView  # noqa: E402
from nemo_train.nemo.distill.evidence_rule import EvidenceRule, EvidenceRuleExplainer, evidence_pick  # noqa: E402
from nemo_train.nemo.distill.pairs import LabelledErrors, pairs_from_labels  # noqa: E402
from nemo_train.nemo.distill.rows import StudentGreedy  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample  # noqa: E402
from tests.nemo.distill.test_evidence import (  # noqa: E402
    MISREAD,
    RED,
    SMALL,
    STRIPES,
    TRUE,
    TYPICAL,
    ColourBlind,
    _bench,
    _error,
    _label,
    _unusual,
)
from tests.nemo.distill.test_evidence_rule import _bench as _bench_with_vocabulary  # noqa: E402

PAIRED = EvidenceView(exemplars=2, references="paired", named=True)


@pytest.fixture(scope="module")
def shifts():
    dm = ShiftsDataModule(train_size=200, test_size=10, test_shift="multi")
    dm.setup("fit")
    return dm


def test_the_default_view_is_the_view_of_before_and_leaves_stored_settings_alone():
    assert EvidenceView().settings() == {}
    assert ClassifierEvidence().view == EvidenceView()
    assert StudentEdits(edits=0).settings() == {"class": "StudentEdits", "edits": 0, "view": "evidence"}
    assert StudentGreedy("evidence").settings() == {"class": "StudentGreedy", "view": "evidence"}
    assert EvidenceRule().settings() == {"class": "EvidenceRule"}
    expected = {"exemplars": 2, "references": "paired", "named": True}
    assert StudentEdits(edits=0, evidence=PAIRED).settings()["evidence"] == expected
    assert StudentGreedy("evidence", PAIRED).settings()["evidence"] == expected
    assert EvidenceRule(PAIRED).settings() == {"class": "EvidenceRule", "evidence": expected}
    assert StudentGreedy("error", PAIRED).settings() == {"class": "StudentGreedy"}  # the error view shows none


def test_several_exemplars_without_the_named_question_are_refused_in_one_line():
    with pytest.raises(UserInputError, match="named: true") as info:
        EvidenceView(exemplars=3)
    assert "\n" not in str(info.value)


def test_the_paired_view_adds_one_reference_per_trait_with_every_other_trait_and_that_one_restored(shifts):
    error = _error(shifts, color=RED, background=STRIPES, scale=SMALL)
    bench = _bench(shifts, [error])
    evidence = ClassifierEvidence(seed=0, view=PAIRED).gather(error, bench, ColourBlind())
    unusual = {"color", "background", "scale"}
    assert len(evidence.attrs) == 2 * 7 and evidence.shown == 7
    for block in (slice(0, 7), slice(7, 14)):
        assert Counter(evidence.kinds[block]) == {"typical": 1, "alone": 3, "restored": 3}
        assert len({a["exemplar"] for a in evidence.attrs[block]}) == 1  # one handwriting per block
    for attrs, shared, kind, prediction in zip(evidence.attrs, evidence.shared, evidence.kinds, evidence.predictions):
        assert attrs["digit"] == TRUE
        if kind == "restored":
            assert _unusual(attrs) == unusual - {shared} and attrs[shared] == TYPICAL[shared]
        elif kind == "alone":
            assert _unusual(attrs) == {shared}
        coloured = attrs["color"] != TYPICAL["color"]
        assert (prediction == MISREAD) == coloured  # a colour-blind classifier misreads exactly the coloured ones
    assert evidence.montage.shape == (3, 32, 32 * 7)  # the first exemplar's references
    # misread alone / read right without it, out of 2: only colour points at the classifier
    assert evidence.tallies(TRUE) == {name: (2, 2) if name == "color" else (0, 0) for name in evidence.tallies(TRUE)}
    assert set(evidence.tallies(TRUE)) == unusual
    question = evidence.question(error, bench.class_names, FACTS)
    assert "Misread with the trait alone, read right without it: " in question
    assert "colour 2/2 2/2" in question and "size 0/2 0/2" in question and "background 0/2 0/2" in question
    rule = EvidenceRuleExplainer(ColourBlind(), ClassifierEvidence(view=PAIRED))
    (explanation,) = rule.explain_batch([error], _bench_with_vocabulary(shifts, [error]))
    assert "Edit: color -> white" in explanation.text


def test_tallies_are_written_per_trait_in_the_order_shown():
    tallies = {"colour": (3, 0), "size": (0, 3)}
    assert evidence_tallies(tallies, 3, paired=True) == (
        "Misread with the trait alone, read right without it",
        "colour 3/3 0/3; size 0/3 3/3",
    )
    assert evidence_tallies(tallies, 3, paired=False) == ("Misread with the trait alone", "colour 3/3; size 0/3")


def _evidence(rows, view=PAIRED) -> Evidence:
    """Evidence from ``(shared, kind, prediction)`` rows (images and attributes play no part in the pick)."""
    shared, kinds, predictions = (list(column) for column in zip(*rows))
    return Evidence(torch.zeros(len(rows), 3, 4, 4), [{} for _ in rows], shared, predictions, kinds, view)


def _sample(sample_id="e1") -> ErrorSample:
    return ErrorSample(sample_id, torch.zeros(3, 4, 4), TRUE, MISREAD, {})


def test_the_rule_prefers_a_restoration_that_is_read_right_then_references_misread_alone():
    unusual = ["color", "background", "scale"]
    # colour alone is misread twice, but only the references without the background are read right
    rows = [("color", "alone", MISREAD)] * 2 + [("background", "restored", TRUE), ("scale", "restored", MISREAD)]
    assert evidence_pick(_evidence(rows), _sample(), unusual, seed=0) == "background"
    single = EvidenceView(exemplars=2, named=True)  # single-trait references only: the misread counts decide
    rows = [("color", "alone", MISREAD), ("color", "alone", TRUE), ("scale", "alone", MISREAD)] * 1
    rows += [("scale", "alone", MISREAD)]
    assert evidence_pick(_evidence(rows, single), _sample(), unusual, seed=0) == "scale"
    silent = [("color", "alone", TRUE), ("background", "restored", MISREAD), (None, "typical", TRUE)]
    picks = {evidence_pick(_evidence(silent), _sample(f"e{i}"), unusual, seed=0) for i in range(40)}
    assert picks == set(unusual)  # the evidence says nothing: a seeded pick among the image's unusual traits


def test_paired_pairs_name_the_restored_references_and_carry_the_tally_question(shifts, tmp_path):
    error = _error(shifts, color=RED, background=STRIPES)
    groups = [LabelledErrors("colour_blind", [_label(error)], _bench(shifts, [error]), ColourBlind())]
    paths = pairs_from_labels(groups, tmp_path / "pairs", ["evidence"], 0.0, seed=0, evidence_view=PAIRED)
    (record,) = read_records(paths["train"])
    assert "colour 2/2 2/2" in record.prompt
    assert Counter(record.provenance["references"]) == {
        "typical": 2, "color": 2, "background": 2, "without color": 2, "without background": 2,
    }  # fmt: skip
    with Image.open(record.counterfactual) as montage:
        assert montage.size == (32 * 5, 32)


def test_a_ranked_question_lists_the_strongest_evidence_first_and_the_rule_reads_it_alike():
    ranked = EvidenceView(exemplars=2, references="paired", named=True, ranked=True)
    rows = [(None, "typical", TRUE), ("color", "alone", MISREAD), ("color", "alone", MISREAD)]
    rows += [("scale", "alone", TRUE), ("scale", "restored", TRUE), ("background", "restored", TRUE)]
    rows += [("background", "restored", TRUE), ("background", "alone", MISREAD)]
    shown, ordered = _evidence(rows), _evidence(rows, ranked)
    assert list(shown.tallies(TRUE)) == ["color", "scale", "background"]  # the montage's order
    assert ordered.tallies(TRUE) == {"background": (1, 2), "scale": (0, 1), "color": (2, 0)}
    question = ordered.question(_sample(), [str(d) for d in range(10)], FACTS)
    assert "without it: background 1/2 2/2; size 0/2 1/2; colour 2/2 0/2." in question
    unusual = ["color", "background", "scale"]
    assert evidence_pick(shown, _sample(), unusual, 0) == evidence_pick(ordered, _sample(), unusual, 0) == "background"
    assert ranked.label == "paired x2 ranked" and ranked.settings()["ranked"] is True
    assert "ranked" not in PAIRED.settings()  # rows stored before the option resume
    with pytest.raises(UserInputError, match="named: true"):
        EvidenceView(ranked=True)


def test_the_scitx_template_row_asks_no_student_and_tests_its_template_hypotheses_by_keyword(shifts):
    from nemo_train.nemo.distill.rows import DistillContext, SciTXTemplate
    from nemo_train.nemo.methods.scitx import AttributeContrastHypothesizer

    error = _error(shifts, color=RED, background=STRIPES)
    keyword = object()  # stands for the keyword scorer: the row must hand it to SciTX and to the table
    ctx = DistillContext(_bench_with_vocabulary(shifts, [error]), ColourBlind(), None, structured=None, keyword=keyword)
    method, scorer = SciTXTemplate(k=6, m=2).build(ctx)
    assert not SciTXTemplate.uses_student and scorer is keyword and method.scorer is keyword
    assert isinstance(method.hypothesizer, AttributeContrastHypothesizer)
    assert (method.k, method.m, method.name) == (6, 2, "SciTX (template, not a model; M=2)")
    assert method.hypothesizer.attributes == [f.name for f in FACTS.factors]  # every shifts factor, not CMNIST's two
    assert SciTXTemplate().settings() == {"class": "SciTXTemplate", "k": 8, "m": 3}
    with pytest.raises(UserInputError, match="generated benchmark") as info:
        SciTXTemplate().build(DistillContext(_bench(shifts, [error]), ColourBlind(), None, None, keyword=None))
    assert "\n" not in str(info.value)


def test_the_classifier_blind_control_shows_a_training_members_readings(shifts):
    from types import SimpleNamespace

    from nemo_train.nemo.distill.rows import DistillContext
    from tests.nemo.distill.test_evidence import BackgroundBlind

    error = _error(shifts, color=RED, background=STRIPES)
    bench = _bench(shifts, [error])
    members = [SimpleNamespace(spec=SimpleNamespace(build=BackgroundBlind))]
    ctx = DistillContext(bench, ColourBlind(), None, structured=None, keyword=None, training_zoo=members)
    row = StudentEdits(edits=0, evidence=PAIRED, evidence_reader="training_member")
    method, _ = row.build(ctx)
    (conversation,) = method.questions.conversations([error])
    text = " ".join(part["text"] for part in conversation[0]["content"] if part.get("type") == "text")
    assert "background 2/2 2/2" in text and "colour 0/2 0/2" in text  # the member's blind spot, not the target's
    own, _ = StudentEdits(edits=0, evidence=PAIRED).build(ctx)
    (conversation,) = own.questions.conversations([error])
    assert "colour 2/2 2/2" in " ".join(p["text"] for p in conversation[0]["content"] if p.get("type") == "text")
    assert row.name == "Student (0 edits, evidence paired x2, another classifier's evidence)"
    assert row.settings()["evidence_reader"] == "training_member"
    assert "evidence_reader" not in StudentEdits(edits=0).settings()
    with pytest.raises(UserInputError, match="held-out zoo"):
        row.build(DistillContext(bench, ColourBlind(), None, structured=None, keyword=None))


class ColourBlindProbs(ColourBlind):
    """:class:`ColourBlind` with the probabilities a counterfactual scorer reads (all mass on its reading)."""

    def predict_proba(self, images: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.predict(images), 10).float()

    def features(self, images: torch.Tensor) -> torch.Tensor:  # the references' features are zeros: any k will do
        return torch.ones(len(images), 2)


def test_the_scitx_template_row_blames_the_trait_whose_restoration_the_classifier_reads_right(shifts):
    from nemo_train.nemo.distill.rows import DistillContext, SciTXTemplate
    from nemo_train.nemo.distill.student_eval import edit_scorers

    error = _error(shifts, color=RED, background=STRIPES, scale=SMALL)
    bench = _bench_with_vocabulary(shifts, [error])
    target = ColourBlindProbs()
    structured, keyword = edit_scorers(bench, target, None, seed=0)
    method, _ = SciTXTemplate(m=3).build(DistillContext(bench, target, None, structured, keyword))
    explanation = method.explain(error, bench)
    tested = {trial.instruction["attribute"]: trial.cei for trial in explanation.trials}
    # m template hypotheses, each a factor where the error differs from its true-class references, each tested
    assert len(tested) == 3 and "color" in tested
    assert tested["color"] == pytest.approx(100.0) and all(cei == 0.0 for f, cei in tested.items() if f != "color")
    assert "red" in explanation.text.lower()  # the kept hypothesis names the image's own colour
