"""The evidence view: references of the true class that share one unusual trait of the error each, read by the
classifier in front of the explainer; its pairs and its question; the distill-eval title names only classifiers
the student's training pairs record."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch import nn

os.environ.setdefault("WANDB_MODE", "disabled")

from datamodules.explanations import ExplanationRecord, read_records, write_records  # noqa: E402
from datamodules.fact_sheets import SHEETS  # noqa: E402
from datamodules.shifts import FACTS, ShiftsDataModule  # noqa: E402
from nemo_train.backends.scripted import ScriptedBackend  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.vlm import EXPLAINER_META  # noqa: E402
from nemo_train.nemo.distill.evidence import ClassifierEvidence  # noqa: E402
from nemo_train.nemo.distill.lineage import distilled_classifiers  # noqa: E402
from nemo_train.nemo.distill.pairs import LabelledErrors, pairs_from_labels  # noqa: E402
from nemo_train.nemo.distill.rows import (  # noqa: E402
    DistillContext,
    EvidenceHypothesizer,
    EvidenceQuestions,
    ExhaustiveTeacher,
    StudentGreedy,
    StudentSciTX,
)
from nemo_train.nemo.distill.student_eval import distill_eval  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402

TRUE, MISREAD = 3, 8
TYPICAL = {f.name: f.typical_stored for f in FACTS.factors if f.typical is not None}


class ColourBlind(nn.Module):
    """Reads every image as a 3, except a digit painted in a colour (channels differ), which it reads as an 8."""

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        coloured = (images.amax(1) - images.amin(1)).flatten(1).amax(1) > 0.2
        return torch.where(coloured, torch.tensor(MISREAD), torch.tensor(TRUE))


class BackgroundBlind(nn.Module):
    """Reads every image as a 3, except one on a textured background (its outer pixel ring is lit): an 8."""

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        ring = torch.cat([images[..., 0, :], images[..., -1, :], images[..., :, 0], images[..., :, -1]], -1)
        return torch.where(ring.mean((1, 2)) > 0.05, torch.tensor(MISREAD), torch.tensor(TRUE))


@pytest.fixture(scope="module")
def shifts():
    dm = ShiftsDataModule(train_size=200, test_size=10, test_shift="multi")
    dm.setup("fit")
    return dm


def _error(dm, sample_id="e1", **unusual) -> ErrorSample:
    """A 3 read as an 8, with the given factors off their typical values (a test-pool exemplar)."""
    attrs = {**TYPICAL, **unusual, "digit": TRUE, "position": 0, "exemplar": int(dm.test_set.attrs["exemplar"][0])}
    image = dm.renderer.render(**attrs).mul(255).round().div(255)
    return ErrorSample(sample_id, image, TRUE, MISREAD, attrs)


def _bench(dm, errors, renderer=True, facts=FACTS) -> NemoBenchmark:
    data = dm.val_set
    attrs = [{k: int(v[i]) for k, v in data.attrs.items()} for i in range(len(data.labels))]
    reference = ReferenceSet(data.images, data.labels, data.labels, torch.zeros(len(data.labels), 2), attrs=attrs)
    renderer = dm.renderer if renderer else None
    return NemoBenchmark("shifts", list(dm.class_names), "shifts", errors, reference, renderer, None, None, facts=facts)


def _unusual(attrs) -> set[str]:
    return {name for name, value in TYPICAL.items() if attrs[name] != value}


RED, STRIPES, SMALL = FACTS.factor("color").stored("red"), FACTS.factor("background").stored("stripes"), 1


@pytest.mark.parametrize("target, blind", [(ColourBlind(), "color"), (BackgroundBlind(), "background")])
def test_the_reference_sharing_the_factor_the_classifier_cannot_read_is_the_one_misread(shifts, target, blind):
    error = _error(shifts, color=RED, background=STRIPES, scale=SMALL)
    bench = _bench(shifts, [error])
    evidence = ClassifierEvidence(seed=0).gather(error, bench, target)
    assert sorted(evidence.shared, key=str) == sorted([None, "color", "background", "scale"], key=str)
    for attrs, shared, prediction in zip(evidence.attrs, evidence.shared, evidence.predictions):
        assert attrs["digit"] == TRUE  # the true class, drawn with a training-like (validation pool) exemplar
        assert attrs["exemplar"] in shifts.val_set.attrs["exemplar"].tolist()
        assert _unusual(attrs) == (set() if shared is None else {shared})  # exactly one unusual factor, or none
        if shared is not None:
            assert attrs[shared] == error.attrs[shared]  # the error's own unusual value
        assert (prediction != TRUE) == (shared == blind)  # misread exactly when it shares the blind factor
    images = torch.stack([shifts.renderer.render(**a) for a in evidence.attrs]).mul(255).round().div(255)
    assert torch.equal(evidence.images, images)
    assert evidence.montage.shape == (3, 32, 32 * 4)
    assert torch.equal(evidence.montage[:, :, 32:64], images[1])
    position = evidence.shared.index(blind) + 1
    question = evidence.question(error, bench.class_names)
    readings = [f'read {i} as a "8"' if i == position else f"got {i} right" for i in range(1, 5)]
    assert ", ".join(readings) in question
    again = ClassifierEvidence(seed=0).gather(error, bench, target)  # seeded: the same references and order
    assert again.shared == evidence.shared and torch.equal(again.images, evidence.images)


def test_the_question_names_no_factor(shifts):
    error = _error(shifts, color=RED, background=STRIPES, scale=SMALL)
    bench = _bench(shifts, [error])
    questions = [
        ClassifierEvidence(seed).gather(error, bench, target).question(error, bench.class_names)
        for seed in (0, 1)
        for target in (ColourBlind(), BackgroundBlind())
    ]
    words = set()
    for factor in FACTS.factors:
        if factor.distractor:  # position: its values are left / right, the question's layout words
            continue
        values = [factor.value_name(factor.stored(v)) for v in factor.values if str(v).isalpha()]
        words |= {factor.name, factor.word, *factor.synonyms, *values, *factor.phrases.values()}
    for question in questions:
        found = set(re.findall(r"[a-z-]+", question.lower()))
        assert not found & {w.lower() for w in words}, question
    assert len(set(questions)) > 1  # the readings follow the classifier


def test_order_and_exemplar_follow_the_seed_not_the_batch(shifts):
    errors = [_error(shifts, f"e{i}", color=RED, scale=SMALL) for i in range(6)]
    bench = _bench(shifts, errors)
    alone = [ClassifierEvidence(3).gather(e, bench, ColourBlind()) for e in errors]
    together = ClassifierEvidence(3).gather_many(errors, bench, ColourBlind())
    assert [a.shared for a in alone] == [t.shared for t in together]
    assert len({tuple(map(str, a.shared)) for a in alone}) > 1  # the misread reference is not always in one place


def test_benchmarks_without_typical_values_or_renderer_are_refused_in_one_line(shifts):
    error = _error(shifts, color=RED, background=STRIPES)
    with pytest.raises(UserInputError, match="typical values") as info:
        ClassifierEvidence().gather(error, _bench(shifts, [error], facts=SHEETS["cmnist"]), ColourBlind())
    assert "\n" not in str(info.value)
    with pytest.raises(UserInputError, match="renderer"):
        EvidenceQuestions(ColourBlind(), _bench(shifts, [error], renderer=False))


def _label(error: ErrorSample) -> dict:
    """A kept teacher label of ``error`` as ``pairs_from_labels`` reads it (its answer restores the colour)."""
    answer = '{"cause_of_error": "x. Edit: color -> white"}'
    return {"sample_id": error.sample_id, "label": TRUE, "prediction": MISREAD, "cei": 60.0, "teacher": "exhaustive",
            "answer": answer}  # fmt: skip


def test_evidence_pairs_carry_the_montage_and_each_classifiers_readings(shifts, tmp_path):
    error = _error(shifts, color=RED, background=STRIPES)
    label = _label(error)
    groups = [
        LabelledErrors("colour_blind", [label], _bench(shifts, [error]), ColourBlind()),
        LabelledErrors("background_blind", [label], _bench(shifts, [error]), BackgroundBlind()),
    ]
    paths = pairs_from_labels(groups, tmp_path / "pairs", ["error", "evidence"], 0.0, seed=0)
    records = read_records(paths["train"])
    evidence = [r for r in records if r.provenance["view"] == "evidence"]
    assert len(records) == 4 and len(evidence) == 2
    assert all(r.counterfactual is None for r in records if r.provenance["view"] == "error")
    for record, group in zip(evidence, groups):
        expected = ClassifierEvidence(0).gather(error, group.benchmark, group.target)
        assert record.provenance["classifier"] == group.name
        assert record.prompt == expected.question(error, group.benchmark.class_names)
        assert record.provenance["references"] == [name or "typical" for name in expected.shared]
        assert record.provenance["readings"] == expected.predictions
        with Image.open(record.counterfactual) as montage:
            assert montage.size == (32 * 3, 32)
    assert evidence[0].prompt != evidence[1].prompt  # one error, two classifiers, two readings


def test_factor_claims_name_the_cause_without_its_value_and_keep_the_edit(shifts, tmp_path):
    error = _error(shifts, color=RED, background=STRIPES)
    label = {**_label(error), "edit": {"attribute": "color", "value": FACTS.factor("color").stored("white")}}
    bench = dataclasses.replace(_bench(shifts, [error]), vocabulary=dict(shifts.renderer.attributes))
    group = [LabelledErrors("colour_blind", [label], bench, ColourBlind())]
    as_written = read_records(pairs_from_labels(group, tmp_path / "a", ["error"], 0.0, seed=0)["train"])
    factor = read_records(pairs_from_labels(group, tmp_path / "b", ["error"], 0.0, 0, claims="factor")["train"])
    assert json.loads(as_written[0].explanation)["cause_of_error"] == "x. Edit: color -> white"
    assert json.loads(factor[0].explanation) == {
        "cause_of_error": "The classifier read this 3 as a 8 because of its colour. Edit: color -> white"
    }
    assert factor[0].prompt == as_written[0].prompt  # only the answer changes
    cause = read_records(pairs_from_labels(group, tmp_path / "d", ["error"], 0.0, 0, claims="cause")["train"])
    assert json.loads(cause[0].explanation) == {  # no classes to copy wrongly
        "cause_of_error": "The classifier erred because of its colour. Edit: color -> white"
    }
    assert cause[0].prompt == as_written[0].prompt
    scitx = [{**label, "edit": "make the digit white"}]  # an instruction, not an attribute edit: no factor to name
    for claims in ("factor", "cause"):
        with pytest.raises(UserInputError, match=f"claims: {claims} needs attribute edits"):
            pairs_from_labels([LabelledErrors("c", scitx, group[0].benchmark, ColourBlind())], tmp_path / "c",
                              ["error"], 0.0, 0, claims=claims)  # fmt: skip


def _adapter(folder: Path, pairs: Path | None) -> Path:
    folder.mkdir(parents=True)
    meta = {"model_name_or_path": "embedded:tiny-qwen2-vl"}
    if pairs is not None:
        meta["training_data"] = {"train_jsonl": str(pairs)}
    (folder / EXPLAINER_META).write_text(json.dumps(meta))
    return folder


def test_distilled_classifiers_come_from_the_pairs_provenance(tmp_path):
    pairs = write_records(
        [
            ExplanationRecord(image=str(tmp_path / "a.png"), explanation="x", provenance={"classifier": name})
            for name in ("gaps_a", "gaps_c", "gaps_a")
        ],
        tmp_path / "train.jsonl",
    )
    assert distilled_classifiers(_adapter(tmp_path / "known", pairs)) == ["gaps_a", "gaps_c"]
    assert distilled_classifiers(_adapter(tmp_path / "unrecorded", None)) is None
    captions = write_records(
        [ExplanationRecord(image=str(tmp_path / "a.png"), explanation="x")], tmp_path / "captions.jsonl"
    )
    assert distilled_classifiers(_adapter(tmp_path / "captions", captions)) is None
    assert distilled_classifiers(tmp_path / "missing") is None


def test_distill_eval_title_names_no_classifier_the_student_never_saw(model_a_checkpoint, tmp_path, capsys):
    kwargs = dict(targets=[model_a_checkpoint], methods=[ExhaustiveTeacher()], n=2, test_styles=1)
    distill_eval(student=str(_adapter(tmp_path / "unknown", None)), out_dir=str(tmp_path / "e1"), **kwargs)
    out = capsys.readouterr().out
    assert "Distilled explainer on held-out cmnist errors" in out and "distilled on" not in out
    assert Path(model_a_checkpoint).parent.name not in out.split("Distilled explainer")[1].splitlines()[0]
    pairs = write_records(
        [ExplanationRecord(image=str(tmp_path / "a.png"), explanation="x", provenance={"classifier": "pool_b"})],
        tmp_path / "p.jsonl",
    )
    distill_eval(student=str(_adapter(tmp_path / "known", pairs)), out_dir=str(tmp_path / "e2"), **kwargs)
    assert "(distilled on pool_b)" in capsys.readouterr().out


def test_rows_of_the_error_view_keep_their_settings_and_the_evidence_view_is_one_option():
    """Stored results of the error-view rows resume (their settings are unchanged); the evidence view changes them."""
    assert StudentGreedy().settings() == {"class": "StudentGreedy"}
    assert StudentSciTX().settings() == {"class": "StudentSciTX", "k": 8, "m": 4, "temperature": 0.7}
    assert StudentGreedy("evidence").settings() == {"class": "StudentGreedy", "view": "evidence"}
    assert StudentSciTX(view="evidence").settings()["view"] == "evidence"


def test_student_rows_ask_the_evidence_view_with_the_classifier_under_evaluation(shifts):
    """The greedy row and SciTX's hypothesis source send the error, the montage and the question the pairs train on."""
    errors = [_error(shifts, "e1", color=RED, background=STRIPES), _error(shifts, "e2", background=STRIPES)]
    bench = _bench(shifts, errors)
    answer = '{"cause_of_error": "x. Edit: color -> white"}'
    backend = ScriptedBackend(lambda messages: answer)
    ctx = DistillContext(bench, BackgroundBlind(), backend, structured=None, keyword=None)
    method, _ = StudentGreedy("evidence").build(ctx)
    cause = "x. Edit: color -> white"  # the cause_of_error the methods read from the JSON
    assert [e.text for e in method.explain_batch(errors, bench)] == [cause, cause]
    for call, error in zip(backend.calls, errors):
        expected = ClassifierEvidence().gather(error, bench, BackgroundBlind())
        images = [p["image"] for p in call["messages"][0]["content"] if p["type"] == "image"]
        text = [p["text"] for p in call["messages"][0]["content"] if p["type"] == "text"]
        assert text == [expected.question(error, bench.class_names)]
        assert torch.equal(images[0], error.image) and torch.equal(images[1], expected.montage)
    backend.calls.clear()
    questions = EvidenceQuestions(BackgroundBlind(), bench)
    found = EvidenceHypothesizer(backend, questions).hypothesize_batch(errors, [[], []], bench.class_names, 3)
    assert found == [[cause]] * 2  # three samples each, the same answer kept once
    assert [c["n"] for c in backend.calls] == [3, 3] and all(c["temperature"] > 0 for c in backend.calls)
