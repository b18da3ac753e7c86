"""Counterfactual prompt intervention on generated benchmarks: the caption prompt rule's rewrites (a rule,
not a model), a prompt CEI worked out by hand on a CLIP whose similarities the test sets, and how
``PromptEdit`` picks the rule or the explainer."""

from __future__ import annotations

import math

import pytest
import torch

from datamodules import clevr, cmnist
from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError
from nemo_train.models.zero_shot import ZeroShotTarget
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.scoring.editors import PromptEdit
from nemo_train.scoring.interventions import CounterfactualScorer, LLMInstructionDeriver
from nemo_train.scoring.prompt_rule import CaptionPromptRule
from tests.nemo.nemo_toys import RedGreenTarget

CMNIST_VOCAB = {"digit": list(range(10)), "color": list(cmnist.COLOR_NAMES), "angle": list(cmnist.ANGLES)}
GREEN, RED = cmnist.COLOR_NAMES.index("green"), cmnist.COLOR_NAMES.index("red")


def cmnist_rule() -> CaptionPromptRule:
    return CaptionPromptRule("cmnist", CMNIST_VOCAB)


# ------------------------------------------------------------------ the caption rule's rewrites
@pytest.mark.parametrize(
    ("hypothesis", "expected"),
    [
        # the image's colour among the named ones is the cue; the other colour is the contrast
        ("The digit is green, while the correctly classified 3s it resembles are mostly red.", "a green digit three"),
        ("In training every 3 was red, and this one is green, so it was read as an 8.", "a green digit three"),
        # a colour the image does not have, named alone: the prompt describes the image wrongly
        ("The digit is drawn in red ink.", "a red digit three"),
        # rotations: "<n> degrees" binned like the training captions (>= 10 left, <= -10 right), "upright"
        (
            "The digit is rotated 15 degrees, whereas the 3s it resembles are upright (0 degrees).",
            "a digit three tilted left",
        ),
        ("The digit is rotated −25 degrees.", "a digit three tilted right"),
        ("The digit stands upright.", "a digit three upright"),
        # two attributes, in the word order of the captions
        ("A green digit rotated 20 degrees.", "a green digit three tilted left"),
        # an attribute named without a value, or nothing at all: no rewrite
        ("The colour of the digit misleads the classifier.", None),
        ("The stroke is thin.", None),
    ],
)
def test_cmnist_rewrites(hypothesis, expected):
    # the error: a green 3 rotated 20 degrees (tilted left)
    assert cmnist_rule().rewrite(hypothesis, 3, {"digit": 3, "color": GREEN, "angle": 20}) == expected


def test_named_values_in_order_and_binned():
    rule = cmnist_rule()
    text = "rotated -20 degrees, not upright; tilted left like the 7s"
    assert rule.named_values(text, "angle") == [0, 1, 2]  # right (<= -10), upright, left
    assert rule.named_values("red then green then red", "color") == [RED, GREEN]
    # a rotation the image does not have, named alone, is written as named
    assert (
        rule.rewrite("rotated -20 degrees", 3, {"digit": 3, "color": GREEN, "angle": 0}) == "a digit three tilted right"
    )


def test_clevr_rewrites_in_caption_words():
    vocab = dict(clevr.ATTRIBUTES)
    rule = CaptionPromptRule("clevr", vocab)
    metal, rubber = clevr.MATERIALS.index("metal"), clevr.MATERIALS.index("rubber")
    attrs = {"shape": 0, "material": metal, "color": clevr.COLOR_NAMES.index("red"), "size": 0}
    known = "The classifier relies on material: in training every cube was rubber, and this one is metal."
    assert rule.rewrite(known, 0, attrs) == "a cube made of shiny metal"
    assert rule.rewrite("A small red object.", 0, attrs) == "a small red cube"
    assert (
        rule.rewrite("It looks like matte rubber.", 0, {**attrs, "material": rubber}) == "a cube made of matte rubber"
    )


def test_rule_refuses_other_generators_and_attributeless_samples():
    with pytest.raises(UserInputError, match="caption prompt rule"):
        CaptionPromptRule("nico", {})
    sample = ErrorSample("e", torch.zeros(3, 8, 8), label=3, prediction=8)
    with pytest.raises(UserInputError, match="generator attributes"):
        cmnist_rule().derive(sample, ["green"], [str(d) for d in range(10)])


# ------------------------------------------------------------------ prompt CEI on a controlled CLIP
TEXT_EMBEDDINGS = {  # unnormalised; ZeroShotTarget normalises
    "the digit zero": [1.0, 0.0],
    "the digit one": [0.0, 1.0],
    "a green digit one": [1.0, 1.0],
    "a red digit one": [0.0, -1.0],
}
SCALE = 10.0


class TableTokenizer:
    """Tokenizes a known prompt as its row in :data:`TEXT_EMBEDDINGS`."""

    def __call__(self, texts, **kwargs):
        ids = torch.tensor([[list(TEXT_EMBEDDINGS).index(t)] for t in texts])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class ControlledClip(torch.nn.Module):
    """A CLIP whose similarities the test sets: a text embeds as its table row, an image as the mean of
    its first two channels; logit scale 10."""

    def __init__(self) -> None:
        super().__init__()
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(SCALE)))
        self.table = torch.tensor(list(TEXT_EMBEDDINGS.values()))
        self.config = type("Config", (), {"vision_config": type("Vision", (), {"image_size": 8})})()

    def get_text_features(self, input_ids, attention_mask=None):
        return self.table[input_ids[:, 0]]

    def get_image_features(self, pixel_values):
        return pixel_values.mean((2, 3))[:, :2]


def controlled_target() -> ZeroShotTarget:
    return ZeroShotTarget(
        ControlledClip(),
        ["zero", "one"],
        tokenizer=TableTokenizer(),
        template="{}",
        class_prompts=["the digit zero", "the digit one"],
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
    )


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_prompt_cei_by_hand():
    target = controlled_target()
    # a green "1" the CLIP reads as a 0: image embedding (0.8, 0.6)
    image = torch.tensor([0.8, 0.6, 0.0])[:, None, None].expand(3, 8, 8).clone()
    sample = ErrorSample("e", image, label=1, prediction=0, attrs={"digit": 1, "color": GREEN, "angle": 0})
    hypotheses = [
        "The digit is green, while the 1s it resembles are mostly red.",  # -> "a green digit one"
        "In training every 1 was red.",  # -> "a red digit one": a wrong description
        "The stroke is thin.",  # no value named: no rewrite
    ]
    trials = CounterfactualScorer(target, cmnist_rule(), mode="prompt").score(sample, hypotheses, ["0", "1"])
    assert [t.instruction for t in trials] == ["a green digit one", "a red digit one", None]
    # s_o: logits 10 * (0.8, 0.6) = (8, 6), so P(1) = sigmoid(6 - 8)
    p_o = sigmoid(-2.0)
    # s_e: "a green digit one" = (1, 1)/sqrt 2, logit 10 * 1.4 / sqrt 2; "a red digit one" = (0, -1), logit -6
    p_green, p_red = sigmoid(10 * 1.4 / math.sqrt(2) - 8), sigmoid(-6.0 - 8.0)
    assert [t.p_original for t in trials] == pytest.approx([p_o] * 3, abs=1e-5)
    assert trials[0].cei == pytest.approx(100 * (p_green - p_o), abs=1e-3)  # 75.06
    assert trials[0].cei == pytest.approx(75.06, abs=0.01)
    assert trials[1].cei == pytest.approx(100 * (p_red - p_o), abs=1e-3)  # -11.92
    assert trials[2].cei == 0.0


# ------------------------------------------------------------------ which deriver PromptEdit uses
def toy_benchmark(vocabulary) -> NemoBenchmark:
    reference = ReferenceSet(torch.zeros(1, 3, 8, 8), torch.tensor([0]), torch.tensor([0]), torch.zeros(1, 2))
    return NemoBenchmark("cmnist", [str(d) for d in range(10)], "colour", [], reference, None, vocabulary)


def test_prompt_edit_uses_the_rule_offline_and_the_explainer_when_configured():
    target = controlled_target()
    offline = PromptEdit().build_scorer(toy_benchmark(CMNIST_VOCAB), target, None, 0, True)
    assert isinstance(offline.deriver, CaptionPromptRule) and offline.mode == "prompt"
    assert PromptEdit().offline_note(None) == "class prompts rewritten by the caption rule, not a model"

    backend = ScriptedBackend(['{"reasoning": "r", "solution": "a green digit one on paper"}'])
    online = PromptEdit().build_scorer(toy_benchmark(CMNIST_VOCAB), target, backend, 0, True)
    assert isinstance(online.deriver, LLMInstructionDeriver) and PromptEdit().offline_note(backend) is None
    sample = ErrorSample("e", torch.zeros(3, 8, 8), label=1, prediction=0)
    assert online.deriver.derive(sample, ["green ink"], ["0", "1"]) == ["a green digit one on paper"]
    # the explainer is shown the target's own prompt of the true class, not the template over "1"
    assert '"the digit one"' in backend.calls[0]["messages"][0]["content"][-1]["text"]

    forced = PromptEdit(deriver="caption_rule").build_scorer(toy_benchmark(CMNIST_VOCAB), target, backend, 0, True)
    assert isinstance(forced.deriver, CaptionPromptRule)


def test_prompt_edit_errors_are_one_line():
    target = controlled_target()
    with pytest.raises(UserInputError, match="needs an explainer endpoint"):
        PromptEdit(deriver="llm").build_scorer(toy_benchmark(CMNIST_VOCAB), target, None, 0, True)
    with pytest.raises(UserInputError, match="no generator vocabulary"):
        PromptEdit().build_scorer(toy_benchmark(None), target, None, 0, True)
    with pytest.raises(UserInputError, match="zero-shot"):
        PromptEdit().build_scorer(toy_benchmark(CMNIST_VOCAB), RedGreenTarget(), None, 0, True)
