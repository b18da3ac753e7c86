"""The held-out answer accuracy callback on answers that name a value and on answers that name the factor alone."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from datamodules.explanations import ExplanationRecord
from nemo_train.explainer.accuracy import AnswerAccuracyCallback


def _record(text: str) -> ExplanationRecord:
    return ExplanationRecord(image="e.png", explanation=json.dumps({"cause_of_error": text}))


VALUE = _record("The classifier read this 3 as a 8 because of the dotted style. Edit: style -> solid")
CAUSE = _record("The classifier erred because of its style. Edit: style -> solid")


def test_an_answer_that_names_the_factor_alone_is_graded_on_its_factor():
    callback = AnswerAccuracyCallback()
    assert callback.usable([VALUE, CAUSE, _record("no edit line")]) == [VALUE, CAUSE]
    right = '{"cause_of_error": "The classifier erred because of its style. Edit: style -> solid"}'
    wrong = '{"cause_of_error": "The classifier erred because of its size. Edit: scale -> normal"}'
    assert callback.grade(CAUSE, right) == {"factor": True, "exact": True}
    assert callback.grade(CAUSE, wrong) == {"factor": False, "exact": False}
    # a value-stating reference keeps every grade: the factor right, the value and the classes missing
    assert callback.grade(VALUE, right) == {"factor": True, "value": False, "classes": False, "all": False,
                                            "exact": False}  # fmt: skip


def test_over_factor_only_pairs_the_headline_is_the_factor_accuracy():
    callback = AnswerAccuracyCallback()
    for hit in (True, False, True, True):  # three of four factors right; no value or class grade seen
        for name, value in {"factor": hit, "exact": False}.items():
            callback.accuracy[name].update(torch.tensor(float(hit and name == "factor")))
    result = callback.computed()
    assert result == {"factor": 0.75, "exact": 0.0}  # the grades no answer had are left out, not NaN
    assert callback.headline(result) == 0.75
    assert callback.computed() == {}  # reset after computing
    full = {"factor": 1.0, "value": 0.5, "classes": 1.0, "all": 0.5, "exact": 0.25}
    assert callback.headline(dict(full)) == 0.5  # value-stating pairs: all of factor, value and classes


def test_held_out_pairs_are_asked_with_the_montage_the_explainer_was_trained_with(monkeypatch):
    import nemo_train.explainer.lockstep as lockstep

    asked = {}

    def fake_lockstep(trainer, pl_module, images, prompts, counterfactuals=None, max_new_tokens=48, batch_size=8):
        asked.update(images=images, prompts=prompts, counterfactuals=counterfactuals)
        return ['{"cause_of_error": "The classifier erred because of its style. Edit: style -> solid"}'] * len(images)

    monkeypatch.setattr(lockstep, "explain_in_lockstep", fake_lockstep)
    pair = ExplanationRecord(image="e.png", counterfactual="refs.png", prompt="Left: ... Right: ...",
                             explanation=CAUSE.explanation)  # fmt: skip
    trainer = SimpleNamespace(sanity_checking=False, current_epoch=0, global_rank=0, world_size=1,
                              datamodule=SimpleNamespace(val_records=[pair, pair]))  # fmt: skip
    logged = {}
    module = SimpleNamespace(prompting={"use_counterfactual": True}, device=torch.device("cpu"),
                             log=lambda name, value, **kwargs: logged.__setitem__(name, value))  # fmt: skip
    callback = AnswerAccuracyCallback()
    callback.on_validation_epoch_end(trainer, module)
    assert asked["counterfactuals"] == ["refs.png", "refs.png"] and asked["prompts"] == ["Left: ... Right: ..."] * 2
    assert logged["val/answer_acc"] == 1.0 and logged["val/answer_acc/factor"] == 1.0
    module.prompting = {"use_counterfactual": False}  # trained on the error image alone: asked so
    callback.on_validation_epoch_end(trainer, module)
    assert asked["counterfactuals"] is None
