"""ExplanationAccuracyCallback: per-cause scores worked out by hand, sanity-check skip, W&B table only with W&B."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

import nemo_train.explainer.lockstep as generation  # noqa: E402  (the callback generates through it)
from datamodules.explanations import ExplanationRecord  # noqa: E402
from nemo_train.callbacks.explanation_accuracy import ExplanationAccuracyCallback  # noqa: E402
from nemo_train.explainer.report import print_accuracy_table  # noqa: E402
from nemo_train.vocabulary import causes_named, is_correct, per_cause_accuracy  # noqa: E402

# (true cause, generated text): hits per cause worked out by hand below
CASES = [
    ("noise", "The image is covered in random noise."),  # hit
    ("noise", "The image is pixelated."),  # miss (wrong cause)
    ("pixelation", "The image is pixelated."),  # hit
    ("pixelation", "The image is pixelated and too bright."),  # miss (two causes named)
    ("pixelation", "It is pixelated."),  # hit
    ("brightness", "No idea."),  # miss (no cause named)
    ("spatial", "A foreign object is pasted in."),  # hit
]
# noise 1/2, pixelation 2/3, brightness 0/1, spatial 1/1; contrast and saturation absent
EXPECTED = {"spatial": 1.0, "brightness": 0.0, "noise": 0.5, "pixelation": 2 / 3}


class _Module:
    def __init__(self):
        self.device = torch.device("cpu")
        self.prompting = {}
        self.logged = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _trainer(records, sanity=False, loggers=()):
    return SimpleNamespace(
        sanity_checking=sanity,
        current_epoch=0,
        datamodule=SimpleNamespace(val_records=records),
        global_rank=0,
        world_size=1,
        loggers=list(loggers),
        is_global_zero=True,
        global_step=7,
    )


@pytest.fixture
def scripted(monkeypatch):
    texts = {f"img{i}.png": text for i, (_, text) in enumerate(CASES)}

    def fake_generate(module, images, prompts=None, counterfactuals=None, **kwargs):
        return [[texts[image]] for image in images]

    monkeypatch.setattr(generation, "generate_explanations", fake_generate)
    return [
        ExplanationRecord(image=f"img{i}.png", explanation="ref", cause=cause) for i, (cause, _) in enumerate(CASES)
    ]


def test_per_cause_accuracy_matches_hand_counts(scripted):
    callback, module = ExplanationAccuracyCallback(), _Module()
    callback.on_validation_epoch_end(_trainer(scripted), module)
    result = callback.last_result
    assert set(result) == {*EXPECTED, "average"}
    for cause, value in EXPECTED.items():
        assert result[cause] == pytest.approx(value)
        assert module.logged[f"val/explanation_acc/{cause}"] == pytest.approx(value)
    assert module.logged["val/explanation_acc"] == pytest.approx(sum(EXPECTED.values()) / 4)
    # the functional helper agrees, with nan for the absent causes
    functional = per_cause_accuracy([c for c, _ in CASES], [t for _, t in CASES])
    assert math.isnan(functional["contrast"]) and functional["average"] == pytest.approx(result["average"])


def test_sanity_check_is_skipped(scripted):
    callback, module = ExplanationAccuracyCallback(), _Module()
    callback.on_validation_epoch_end(_trainer(scripted, sanity=True), module)
    assert module.logged == {} and callback.last_result == {}


def test_wandb_table_only_with_a_wandb_logger(scripted, monkeypatch, tmp_path, table_loggers):
    from datamodules.explanations import to_pil

    for i, record in enumerate(scripted):
        record.image = str(tmp_path / f"img{i}.png")
        to_pil(torch.rand(3, 8, 8)).save(record.image)
    texts = {r.image: t for r, (_, t) in zip(scripted, CASES)}
    monkeypatch.setattr(generation, "generate_explanations", lambda m, images, **kw: [[texts[i]] for i in images])

    other, wandb_logger = table_loggers
    ExplanationAccuracyCallback().on_validation_epoch_end(_trainer(scripted, loggers=[other, wandb_logger]), _Module())
    ((key, columns, rows),) = wandb_logger.tables
    grader = "correct (keyword rule standing in for manual grading)"
    assert key == "val/explanations" and columns == ["image", "cause", "target", "generated", grader]
    assert [row[4] for row in rows] == [True, False, True, False, True, False, True]


def test_scorer_credits_exactly_one_named_cause():
    assert causes_named("Too bright and noisy.") == {"brightness", "noise"}
    assert not is_correct("Too bright and noisy.", "noise")
    assert is_correct("The image is under-saturated.", "saturation")
    assert is_correct("Low contrast.", "contrast")
    table = print_accuracy_table({"none": {"spatial": 0.99, "contrast": math.nan, "average": 0.5}})
    assert "Spatial" in table and "99.0" in table and "n/a" in table
