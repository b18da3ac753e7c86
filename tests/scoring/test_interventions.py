"""Interventions: keyword deriver, exact editor, CEI by hand, batched == one-at-a-time, prompt swap."""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.backends import ScriptedBackend  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.zero_shot import tiny_random_clip  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample  # noqa: E402
from nemo_train.scoring.interventions import (  # noqa: E402
    CounterfactualScorer,
    ExactAttributeEditor,
    KeywordAttributeDeriver,
    LLMAttributeDeriver,
    LLMInstructionDeriver,
    Trial,
)
from tests.nemo.nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid  # noqa: E402
from tests.nemo.tiny_recipe import tiny_instruct_pix2pix  # noqa: E402


def green_sample(angle: int = 10) -> ErrorSample:
    image = solid(1)
    return ErrorSample("s0", image, label=0, prediction=1, attrs={"digit": 3, "color": 1, "angle": angle, "style": 0})


def softmax2(a: float, b: float) -> float:
    """P(class 0) for logits (a, b)."""
    return math.exp(a) / (math.exp(a) + math.exp(b))


# ------------------------------------------------------------------ keyword deriver
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The digit is drawn in green, while correct 3s are mostly red.", {"attribute": "color", "value": 0}),
        ("Its colour is green; the model expects blue strokes.", {"attribute": "color", "value": 2}),
        ("The digit is rotated 10 degrees; upright it would be read correctly.", {"attribute": "angle", "value": 0}),
        (
            "The digit is rotated 10 degrees whereas correct 3s sit at -20 degrees.",
            {"attribute": "angle", "value": -20},
        ),
        ("The handwriting is unusual.", None),
        ("The colour is green.", None),  # names the attribute but no other value: no derivable edit
    ],
)
def test_keyword_deriver(text, expected):
    deriver = KeywordAttributeDeriver(VOCAB)
    assert deriver.derive_one(text, green_sample().attrs) == expected


def test_keyword_deriver_ignores_class_numbers():
    # "3s" is a class name, not an angle: only "<n> degrees" counts as a rotation value
    deriver = KeywordAttributeDeriver(VOCAB)
    assert deriver.derive_one("The tilt of 10 degrees makes it unlike upright 3s", {"color": 1, "angle": 10}) == {
        "attribute": "angle",
        "value": 0,
    }


def test_keyword_deriver_rejects_unknown_attribute():
    with pytest.raises(UserInputError, match="shape"):
        KeywordAttributeDeriver(VOCAB, editable=("shape",))


# ------------------------------------------------------------------ exact editor
def test_exact_editor_changes_only_the_named_attribute():
    renderer = SolidRenderer()
    sample = green_sample()
    edited = ExactAttributeEditor(renderer).edit(
        sample, [{"attribute": "color", "value": 2}, None, {"attribute": "angle", "value": 0}]
    )
    assert renderer.calls == 1  # all edits rendered in one call
    assert torch.equal(edited[0], solid(2))
    assert torch.equal(edited[1], sample.image)  # None leaves the image as is
    assert torch.equal(edited[2], sample.image)  # angle is ignored by the toy renderer


def test_exact_editor_on_cmnist_matches_a_rerender():
    from datamodules.cmnist import CMNISTRenderer, load_digits

    digits, labels = load_digits(None, "test")
    renderer = CMNISTRenderer(digits, labels)
    image = renderer.render(3, "green", 15, 1)
    sample = ErrorSample("c", image, 3, 8, {"digit": 3, "color": 1, "angle": 15, "style": 1})
    edited = ExactAttributeEditor(renderer).edit(
        sample, [{"attribute": "color", "value": 0}, {"attribute": "angle", "value": 0}]
    )
    quantized = lambda image: image.mul(255).round().div(255)  # noqa: E731  (edits are stored like uint8 data)
    assert torch.equal(edited[0], quantized(renderer.render(3, "red", 15, 1)))
    assert torch.equal(edited[1], quantized(renderer.render(3, "green", 0, 1)))


# ------------------------------------------------------------------ CEI by hand
def test_cei_by_hand_on_toy_classifier_and_editor():
    target = RedGreenTarget()
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    hypotheses = [
        "The digit is green, but correct ones are red.",  # -> red image
        "The digit is green, but correct ones are blue.",  # -> blue image
        "The digit is rotated 10 degrees.",  # -> angle 0, same colour
        "The handwriting is odd.",  # underivable
    ]
    trials = scorer.score(green_sample(), hypotheses, target.class_names)
    p_green = softmax2(0.0, 3.0)  # green image: logits (0, 3)
    p_red = softmax2(3.0, 0.0)
    p_blue = softmax2(0.0, 0.0)
    assert [t.p_original for t in trials] == pytest.approx([p_green] * 4)
    assert [t.p_edited for t in trials] == pytest.approx([p_red, p_blue, p_green, p_green])
    assert [t.cei for t in trials] == pytest.approx([100 * (p_red - p_green), 100 * (p_blue - p_green), 0.0, 0.0])
    assert trials[3].instruction is None
    assert target.batch_sizes == [5]  # original + 4 counterfactuals in ONE forward pass


def test_trial_cei_by_hand():
    # P(y|s_o) = 1/4, P(y|s_e) = 7/8 -> 100 * 5/8 = 62.5 points; the reverse edit -62.5 (exact in binary)
    assert Trial("h", {"attribute": "color", "value": 0}, 0.25, 0.875).cei == 62.5
    assert Trial("h", {"attribute": "color", "value": 0}, 0.875, 0.25).cei == -62.5
    assert Trial("h", None, 0.5, 0.5).cei == 0.0


def test_batched_equals_one_at_a_time():
    hypotheses = ["green, correct ones are red", "green, correct ones are blue", "rotated 10 degrees"]
    results = []
    for batched in (True, False):
        target = RedGreenTarget()
        scorer = CounterfactualScorer(
            target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()), batched=batched
        )
        results.append([t.cei for t in scorer.score(green_sample(), hypotheses, target.class_names)])
        assert target.batch_sizes == ([4] if batched else [1, 1, 1, 1])
    assert results[0] == pytest.approx(results[1])


# ------------------------------------------------------------------ LLM derivers
def test_llm_attribute_deriver_validates_against_vocabulary():
    replies = iter(
        [
            '{"attribute": "color", "value": "red"}',
            '{"attribute": "color", "value": "mauve"}',
            '{"attribute": "angle", "value": 3}',
            '{"attribute": "digit", "value": 8}',
        ]
    )
    backend = ScriptedBackend(lambda messages: next(replies))
    deriver = LLMAttributeDeriver(backend, VOCAB)
    out = deriver.derive(green_sample(), ["a", "b", "c", "d"], ["0", "1"])
    assert out == [{"attribute": "color", "value": 0}, None, {"attribute": "angle", "value": 5}, None]
    prompt = backend.calls[0]["messages"][0]["content"][-1]["text"]
    assert "color: red, green, blue" in prompt and "Suspected reason for the mistake: a" in prompt


def test_llm_instruction_deriver_sees_only_the_explanation():
    backend = ScriptedBackend(
        ['{"reasoning": "r", "solution": "Make the background a plain wall"}', "no json here", "still none", "nope"]
    )
    deriver = LLMInstructionDeriver(backend, "image")
    sample = green_sample()
    out = deriver.derive(sample, ["sandy background", "second"], ["vase", "confectionery"])
    assert out == ["Make the background a plain wall", None]  # malformed after re-asks -> None, run goes on
    first = backend.calls[0]["messages"][0]["content"]
    assert all(part["type"] == "text" for part in first)  # no image is sent for derivation
    assert '"vase"' in first[-1]["text"] and "sandy background" in first[-1]["text"]


# ------------------------------------------------------------------ prompt intervention
def test_prompt_intervention_matches_manual_softmax():
    target = tiny_random_clip(["cat", "dog", "fox"], seed=0)
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    sample = ErrorSample("p", image, label=1, prediction=0)
    backend = ScriptedBackend(['{"solution": "a photo of a dog on a sandy beach"}'])
    scorer = CounterfactualScorer(target, LLMInstructionDeriver(backend, "prompt"), mode="prompt")
    (trial,) = scorer.score(sample, ["the sandy beach"], target.class_names)
    img = target.encode_image(image[None])
    texts = target.encode_text(["a photo of a cat", "a photo of a dog on a sandy beach", "a photo of a fox"])
    expected = (target.model.logit_scale.exp() * img @ texts.T).softmax(-1)[0, 1].detach()
    assert trial.p_edited == pytest.approx(float(expected), abs=1e-5)
    assert trial.p_original == pytest.approx(float(target.predict_proba(image[None])[0, 1]), abs=1e-6)
    assert "a photo of a dog" in backend.calls[0]["messages"][0]["content"][-1]["text"]


def test_prompt_mode_needs_zero_shot_target():
    with pytest.raises(UserInputError, match="zero-shot"):
        CounterfactualScorer(RedGreenTarget(), KeywordAttributeDeriver(VOCAB), mode="prompt")


# ------------------------------------------------------------------ diffusers editor
def test_diffusers_editor_is_batched_seeded_and_keeps_size():
    from nemo_train.scoring.editing import DiffusersEditor

    pipeline = tiny_instruct_pix2pix()
    calls = []
    original_call = type(pipeline).__call__

    def counting_call(self, *args, **kwargs):
        calls.append(len(kwargs["prompt"]))
        return original_call(self, *args, **kwargs)

    editor = DiffusersEditor(pipeline, seed=3, size=32, batch_size=4, call_kwargs={"num_inference_steps": 1})
    sample = ErrorSample("x", torch.rand(3, 28, 28, generator=torch.Generator().manual_seed(1)), 0, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(pipeline), "__call__", counting_call)
        first = editor.edit(sample, ["make it red", None, "turn it upright"])
    second = editor.edit(sample, ["make it red", None, "turn it upright"])
    assert calls == [2]  # the two real instructions in one pipeline call
    assert first.shape == (3, 3, 28, 28) and 0 <= first.min() and first.max() <= 1
    assert torch.equal(first, second)  # seeded
    assert torch.equal(first[1], sample.image)  # no instruction, no edit
    assert not torch.equal(first[0], sample.image)


@pytest.mark.parametrize("name", ["FluxKontextPipeline", "QwenImageEditPipeline"])
def test_diffusers_editor_options_reach_kontext_and_qwen_pipelines(name):
    """Kontext keeps the configured edit size (no 1024^2 rescale); Qwen's true CFG gets its negative prompt."""
    import inspect
    from types import SimpleNamespace

    import diffusers

    from nemo_train.scoring.editing import DiffusersEditor

    calls = []

    def call(self, prompt, image, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace(images=torch.zeros(len(prompt), 3, 64, 64))

    call.__signature__ = inspect.signature(getattr(diffusers, name).__call__)  # the real pipeline's options
    recorder = type(name, (), {"__call__": call, "set_progress_bar_config": lambda self, **kwargs: None})()
    editor = DiffusersEditor(recorder, size=64)
    edited = editor.edit(ErrorSample("x", torch.rand(3, 28, 28), 0, 1), ["make it red", "make it blue"])
    assert edited.shape == (2, 3, 28, 28)
    (kwargs,) = calls
    assert kwargs["height"] == kwargs["width"] == 64
    if name == "FluxKontextPipeline":
        assert kwargs["max_area"] == 64 * 64 and kwargs["_auto_resize"] is False
    else:
        assert kwargs["true_cfg_scale"] == 4.0 and kwargs["negative_prompt"] == [" ", " "]
