"""The verified-edit reward pays for the error's own cause and for nothing a metric-gaming answer says.

Each constructed shifts error has every cause factor off its typical value and its own classifier, a hand-made
oracle that fails on exactly one of them (five classifiers, one per factor: a small zoo), so the cause of each error
is known without training anything and no answer that ignores the classifier can name it reliably.
"""

from __future__ import annotations

import json

import pytest
import torch

from datamodules.shifts import CAUSE_FACTORS, FACTS, ShiftsDataModule
from nemo_train.errors import UserInputError
from nemo_train.explainer.rewards import ExplanationReward, checked_output, nan_mean
from nemo_train.nemo.methods.reference import KnownCauseExplainer
from nemo_train.nemo.methods.trivial import ClassFreeExplainer, EverythingExplainer, OddOneOutExplainer
from nemo_train.nemo.reward import RewardWeights, VerifiedEditReward, teacher_settings
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from tests.shift_oracles import TYPICAL, AttributeOracle, restorations

#: every cause factor off its typical value (stored indices; the angle in degrees)
OFF = {"color": 2, "style": 2, "angle": FACTS.factor("angle").stored(45), "background": 1, "scale": 1}
PER_CLASSIFIER = 6


def constructed_zoo(renderer) -> tuple[list[tuple[str, NemoBenchmark, AttributeOracle]], list[dict]]:
    """One classifier per cause factor, each with ``PER_CLASSIFIER`` errors; ``(classifiers, error rows)`` where a
    row is what the data carries about an error."""
    classifiers, rows = [], []
    empty = torch.zeros(0, dtype=torch.long)
    reference = ReferenceSet(torch.zeros(0, 3, 32, 32), empty, empty, torch.zeros(0, 2))
    cause = {"attribute": None, "editable": list(CAUSE_FACTORS), "object": "digit"}
    for i, factor in enumerate(CAUSE_FACTORS):
        samples, known = [], []
        for j in range(PER_CLASSIFIER):
            digit = (PER_CLASSIFIER * i + j) % 10
            attrs = {"digit": digit, **TYPICAL, **OFF, "position": 0, "exemplar": PER_CLASSIFIER * i + j}
            known += restorations({k: torch.tensor([v]) for k, v in attrs.items()})
            image = renderer.render_batch(**{k: torch.tensor([v]) for k, v in attrs.items()})[0].clamp(0, 1)
            samples.append((f"e{i}-{j}", image, digit, attrs))
        oracle = AttributeOracle(renderer, known, lambda a, f=factor: a[f] != TYPICAL[f])
        errors = []
        for sample_id, image, digit, attrs in samples:
            prediction = int(oracle.predict(image[None])[0])
            assert prediction != digit  # an error, caused by this classifier's factor
            errors.append(ErrorSample(sample_id, image, digit, prediction, attrs, cause=factor))
            rows.append(
                {"classifier": f"fails-{factor}", "sample_id": sample_id, "label": digit, "prediction": prediction}
            )
        bench = NemoBenchmark("shifts", list(FACTS.classes), "shifts", errors, reference, renderer, FACTS.vocabulary,
                              cause, FACTS)  # fmt: skip
        classifiers.append((f"fails-{factor}", bench, oracle))
    return classifiers, rows


@pytest.fixture(scope="module")
def zoo():
    dm = ShiftsDataModule(gaps="gaps_a", train_size=40, test_size=10)
    dm.setup("fit")
    classifiers, rows = constructed_zoo(dm.renderer)
    reward = VerifiedEditReward()
    for name, bench, oracle in classifiers:
        reward.add(name, bench, oracle)
    samples = {(name, s.sample_id): (s, bench) for name, bench, _ in classifiers for s in bench.errors}
    return reward, rows, samples


def _texts(method, rows, samples) -> list[str]:
    return [method.explain(*samples[(r["classifier"], r["sample_id"])]).text for r in rows]


def _contradiction(text: str, cause: str) -> str:
    """The known cause's sentence with an Edit line that restores another factor."""
    other = next(f for f in CAUSE_FACTORS if f != cause)
    return f"{text.split('Edit:')[0].strip()} Edit: {other} -> {FACTS.factor(other).typical}"


def test_every_trivial_answer_earns_little_next_to_the_known_cause(zoo):
    reward, rows, samples = zoo
    assert isinstance(reward, ExplanationReward)
    known_texts = _texts(KnownCauseExplainer(), rows, samples)
    known, known_parts = reward(rows, known_texts)
    assert min(known) > 0.95  # the cause, its edit fixes the error, every claim true
    assert known_parts["llm_match"] == [1.0] * len(rows) and min(known_parts["cei"]) > 99
    causes = [samples[(r["classifier"], r["sample_id"])][0].cause for r in rows]
    trivial = {
        "constant": _texts(ClassFreeExplainer("color"), rows, samples),
        "everything": _texts(EverythingExplainer(), rows, samples),
        "contradiction": [_contradiction(t, c) for t, c in zip(known_texts, causes)],
        "odd-one-out": _texts(OddOneOutExplainer(seed=0), rows, samples),
    }
    base = sum(known) / len(rows)
    for name, texts in trivial.items():
        got, _ = reward(rows, texts)
        assert sum(got) / len(rows) <= 0.3 * base, (name, got)
    odd, _ = reward(rows, trivial["odd-one-out"])  # a blind guess among five unusual factors: paid when it hits
    hits = [c in t.split("Edit:")[1] for t, c in zip(trivial["odd-one-out"], causes)]
    assert [r > 0.9 for r in odd] == hits and [r == 0 for r in odd] == [not h for h in hits]
    contradiction, parts = reward(rows, trivial["contradiction"])
    assert contradiction == [0.0] * len(rows) and parts["consistent"] == [0.0] * len(rows)


def test_length_beyond_the_limit_is_the_only_penalty(zoo):
    reward, rows, samples = zoo
    text = _texts(KnownCauseExplainer(), rows[:1], samples)[0]
    padded = text.split(" Edit:")[0] + " " + "really " * 60 + "Edit:" + text.split("Edit:")[1]
    (short, long), parts = reward(rows[:1] * 2, [text, padded])
    assert parts["cei"][0] == pytest.approx(parts["cei"][1])  # the same edit
    words = len(padded.split())
    assert parts["length_penalty"] == [0.0, pytest.approx(0.5 * (words - 40) / 40)]
    assert long == pytest.approx(short - parts["length_penalty"][1], abs=1e-6)


def test_a_group_of_explanations_of_one_error_is_scored_together_and_parts_line_up(zoo):
    reward, rows, samples = zoo
    known = _texts(KnownCauseExplainer(), rows[:1], samples)[0]
    group = [known, "", "The digit is a digit.", _contradiction(known, "color")]
    rewards, parts = checked_output(reward(rows[:1] * len(group), group), len(group))
    assert rewards[0] > 0.95 and rewards[1:] == [0.0, 0.0, 0.0]
    assert parts["consistent"][3] == 0.0 and nan_mean(parts["grounding"]) <= 1.0


def test_an_unknown_or_changed_error_is_one_line(zoo):
    reward, rows, _ = zoo
    with pytest.raises(UserInputError, match="no classifier"):
        reward([{**rows[0], "classifier": "elsewhere"}], ["x"])
    with pytest.raises(UserInputError, match="no longer matches"):
        reward([{**rows[0], "prediction": rows[0]["label"]}], ["x"])
    with pytest.raises(UserInputError, match="grounding_weight"):
        RewardWeights(grounding_weight=2.0)


def test_a_teacher_folder_without_provenance_is_one_line(tmp_path):
    reward = VerifiedEditReward(teacher=str(tmp_path))  # nothing is read until the first call
    with pytest.raises(UserInputError, match="distill-teacher"):
        reward([{"classifier": "a", "sample_id": "b"}], ["x"])


def test_the_teachers_classifiers_are_read_from_its_provenance(tmp_path):
    record = {"command": "distill-teacher", "settings": {"classifier": str(tmp_path / "gone" / "best.ckpt"),
              "dataset": "shifts", "n": 4}, "run": {"seed": 1}}  # fmt: skip
    (tmp_path / "provenance.json").write_text(json.dumps(record))
    assert teacher_settings(tmp_path)["seed"] == 1  # a run argument, not a setting
    with pytest.raises(UserInputError, match="gone"):  # the classifier it names is checked before any work
        VerifiedEditReward(teacher=str(tmp_path)).load()
    (tmp_path / "provenance.json").write_text(json.dumps({**record, "command": "nemo-eval"}))
    with pytest.raises(UserInputError, match="expected distill-teacher"):
        teacher_settings(tmp_path)
