"""Teachers of a distilled explainer: exhaustive search finds the max-CEI edit; structured answers round-trip."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid  # noqa: E402

from nemo_train.nemo.distill.teachers import ExhaustiveAttributeTeacher, SciTXTeacher  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor  # noqa: E402
from nemo_train.scoring.structured import (  # noqa: E402
    StructuredEditDeriver,
    format_answer,
    parse_attribute_edit,
    split_answer,
)


def _bench(sample: ErrorSample) -> NemoBenchmark:
    ref_images = torch.stack([solid(0), solid(1)])
    reference = ReferenceSet(ref_images, torch.tensor([0, 1]), torch.tensor([0, 1]), ref_images.mean((2, 3)))
    cause = {
        "attribute": "color",
        "values": {0: ["red"], 1: ["green"]},
        "editable": ["color", "angle"],
        "object": "digit",
    }
    return NemoBenchmark("toy", ["reddish", "greenish"], "cmnist", [sample], reference, SolidRenderer(), VOCAB, cause)


def test_exhaustive_teacher_finds_the_max_cei_edit_by_brute_force():
    sample = ErrorSample("s", solid(2), 0, 1, {"digit": 0, "color": 2, "angle": 10})  # blue, true "reddish"
    target = RedGreenTarget()
    bench = _bench(sample)
    label = ExhaustiveAttributeTeacher(target).label(sample, bench)
    # every single-attribute edit by hand: 2 other colours + 12 other angles (angles change nothing here)
    p = lambda im: float(torch.softmax(3.0 * im.mean((1, 2))[:2], 0)[0])  # noqa: E731
    p_o = p(solid(2))
    by_hand = {("color", c): 100 * (p(solid(c)) - p_o) for c in (0, 1)}
    by_hand.update({("angle", a): 0.0 for a in VOCAB["angle"] if a != 10})
    best = max(by_hand, key=by_hand.get)
    assert label.candidates == len(by_hand) == 14
    assert (label.edit["attribute"], label.edit["value"]) == best == ("color", 0)
    assert label.cei == pytest.approx(by_hand[best], abs=1e-4)
    # the answer is SciTX's JSON with the edit appended; reading it back gives the same edit and CEI
    answer = json.loads(label.answer)
    assert answer["cause_of_error"].endswith("Edit: color -> red")
    scorer = CounterfactualScorer(target, StructuredEditDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    trial = scorer.score(sample, [label.answer], bench.class_names)[0]
    assert trial.instruction == {"attribute": "color", "value": 0}
    assert trial.cei == pytest.approx(label.cei, abs=1e-4)


def test_structured_answers_parse_exactly_and_reject_invalid_edits():
    assert split_answer('{"cause_of_error": "Too blue. Edit: color -> red"}') == ("Too blue.", "color -> red")
    assert split_answer("Too blue. Edit: make it red.") == ("Too blue.", "make it red")
    assert split_answer("The colour is odd.") == ("The colour is odd.", None)
    assert parse_attribute_edit("color -> green", VOCAB, ["color"]) == {"attribute": "color", "value": 1}
    assert parse_attribute_edit("angle -> -14", VOCAB, ["angle"]) == {"attribute": "angle", "value": -15}
    assert parse_attribute_edit("color -> teal", VOCAB, ["color"]) is None  # not in the vocabulary
    assert parse_attribute_edit("digit -> 3", VOCAB, ["color"]) is None  # not editable
    deriver = StructuredEditDeriver()  # no vocabulary: the edit text is an editor instruction
    assert deriver.derive_one(format_answer("The background is snow.", "Make the background grass")) == (
        "Make the background grass"
    )
    # a keyword-style sentence without the structured edit gives no edit (no guessing)
    assert StructuredEditDeriver(VOCAB).derive_one("The red colour misled it") is None


def test_scitx_teacher_keeps_the_argmax_cei_hypothesis_and_its_edit():
    from nemo_train.nemo.methods.scitx import SciTX

    class Fixed:
        def hypothesize(self, sample, observations, class_names, m):
            return [format_answer("Wrong hue.", {"attribute": "color", "value": v}, VOCAB) for v in (1, 0)]

    sample = ErrorSample("s", solid(2), 0, 1, {"digit": 0, "color": 2, "angle": 0})
    bench = _bench(sample)
    bench.reference.captions = ["a red digit", "a green digit"]
    target = RedGreenTarget()
    scorer = CounterfactualScorer(target, StructuredEditDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    label = SciTXTeacher(SciTX(target, Fixed(), scorer, k=2, m=2)).label(sample, bench)
    assert label.edit == {"attribute": "color", "value": 0}  # red raises P(reddish) most
    assert label.cei > 0 and label.candidates == 2
    assert json.loads(label.answer)["cause_of_error"].endswith("Edit: color -> red")


def test_student_backend_shows_several_images_side_by_side_as_in_training():
    from nemo_train.backends.messages import user_message
    from nemo_train.backends.student import merge_images

    left, right = solid(0), solid(1)
    (merged,) = merge_images([user_message("Compare.", images=[left, right])])
    images = [p for p in merged["content"] if p["type"] == "image"]
    assert len(images) == 1 and merged["content"][-1] == {"type": "text", "text": "Compare."}
    picture = torch.from_numpy(np.asarray(images[0]["image"])).float() / 255
    assert picture.shape == (8, 16, 3)
    assert torch.equal(picture[:, :8], left.permute(1, 2, 0)) and torch.equal(picture[:, 8:], right.permute(1, 2, 0))
    single = user_message("One.", images=[left])
    assert merge_images([single]) == [single]  # one image: unchanged


def test_prototype_reference_is_the_most_confident_correct_one_of_the_true_class():
    from nemo_train.nemo.distill.teachers import view_inputs
    from nemo_train.nemo.methods.change_mllm import ChangeMLLM, prototype_reference

    mix = 0.6 * solid(0) + 0.4 * solid(1)  # reddish, but less sure: P = sigmoid(3 * 0.2)
    images = torch.stack([mix, solid(0), solid(1), solid(1)])
    labels = torch.tensor([0, 0, 0, 1])  # index 2 is a "reddish" the classifier gets wrong
    target = RedGreenTarget()
    predictions = target.predict_proba(images).argmax(1)
    reference = ReferenceSet(images, labels, predictions, target.features(images))
    sample = ErrorSample("s", 0.55 * solid(0) + 0.45 * solid(1), 0, 1, {"digit": 0, "color": 0, "angle": 0})
    bench = NemoBenchmark("toy", ["reddish", "greenish"], "cmnist", [sample], reference, SolidRenderer(), VOCAB)
    # by hand: correct references of class 0 are 0 (P = sigmoid(0.6) = 0.646) and 1 (P = sigmoid(3) = 0.953)
    assert prototype_reference(target, bench, 0) == 1 and prototype_reference(target, bench, 1) == 3
    assert ChangeMLLM(target, reference_class="true").reference(sample, bench) == 0  # nearest: the less typical mix
    assert ChangeMLLM(target, reference_class="prototype").reference(sample, bench) == 1
    image, second, question = view_inputs("change", sample, bench, target, "prototype")
    assert torch.equal(second, solid(0)) and '"reddish" it got right' in question
    wrong_only = ReferenceSet(images[2:3], labels[2:3], predictions[2:3], target.features(images[2:3]))
    bench.reference = wrong_only
    assert prototype_reference(target, bench, 0) is None  # no correct reference of the class
