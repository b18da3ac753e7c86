"""LLM judge (scripted replies), keyword judge, judge panel."""

from __future__ import annotations

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest

from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError
from nemo_train.scoring.judges import (
    CRITERIA,
    Judge,
    JudgeItem,
    Judgement,
    JudgePanel,
    KeywordJudge,
    LLMJudge,
    get_criterion,
    snap_score,
)


def test_every_nemo_and_synthetic_benchmark_has_a_criterion():
    assert set(CRITERIA) == {"imagenet_r", "objectnet", "imagenet_d", "cmnist", "clevr"}
    assert get_criterion("ImageNet-R") is CRITERIA["imagenet_r"]
    assert "rotation" in CRITERIA["objectnet"].description and "material" in CRITERIA["imagenet_d"].description
    with pytest.raises(UserInputError, match="unknown judge criterion 'mnist'"):
        get_criterion("mnist")


@pytest.mark.parametrize(
    "raw, expected",
    [
        (1, 1.0),
        (0, 0.0),
        (0.5, 0.5),
        ("1.0", 1.0),
        ("0.5", 0.5),
        ("partial", 0.5),
        ("Full", 1.0),
        (0.7, None),
        (2, None),
        ("maybe", None),
        (None, None),
        (True, None),
        (float("nan"), None),
    ],
)
def test_snap_score(raw, expected):
    assert snap_score(raw) == expected


def test_llm_judge_prompt_and_parsing():
    replies = [
        '{"reasoning": "it names the painting style", "score": 1}',
        '```json\n{"reasoning": "mentions art vaguely", "score": "0.5"}\n```',
        '{"reasoning": "off topic", "score": 0.8}',  # not a valid grade: asked again twice, still off the scale
        '{"reasoning": "off topic", "score": 0.8}',
        '{"reasoning": "off topic", "score": 0.8}',
    ]
    backend = ScriptedBackend(replies, model="judge-model")
    judge = LLMJudge(backend, "imagenet_r")
    items = [
        JudgeItem("The goldfish is drawn as a cartoon.", "goldfish", "clownfish"),
        JudgeItem("Something about art.", "goldfish", "clownfish"),
        JudgeItem("The lighting is dim.", "goldfish", "clownfish"),
    ]
    verdicts = judge.judge(items)
    assert [v.score for v in verdicts] == [1.0, 0.5, None]
    assert verdicts[2].reason == "off-scale reply: score 0.8 is not 1, 0.5 or 0"
    assert verdicts[0] == Judgement("llm:judge-model", 1.0, "it names the painting style")
    assert isinstance(judge, Judge)
    call = backend.calls[0]
    assert call["temperature"] == 0.0
    prompt = call["messages"][-1]["content"][-1]["text"]
    assert "The goldfish is drawn as a cartoon." in prompt
    assert '"goldfish"' in prompt and '"clownfish"' in prompt
    assert CRITERIA["imagenet_r"].description in prompt
    assert '"score"' in prompt and "0.5" in prompt


def test_llm_judge_failure_is_recorded_and_the_rest_still_scored():
    # first replies for both items come first, then the first item's two re-asks: all malformed -> None
    backend = ScriptedBackend(["nope", json.dumps({"reasoning": "colour", "score": 1}), "still nope", "no"])
    verdicts = LLMJudge(backend, "cmnist", name="j").judge([JudgeItem("?"), JudgeItem("red digit")])
    assert [v.score for v in verdicts] == [None, 1.0]
    assert verdicts[0].reason == "no JSON reply"
    assert backend.stats.json_failures == 1


@pytest.mark.parametrize(
    "colour", ["red", "green", "blue", "yellow", "magenta", "cyan", "orange", "pink", "purple", "grey"]
)
def test_keyword_judge_on_every_cmnist_colour(colour):
    judge = KeywordJudge("cmnist")
    assert judge.score_text(f"The model relies on the {colour} strokes of the digit.").score == 1.0
    assert judge.score_text(f"The {colour.upper()} digit was taken for another class.").score == 1.0


@pytest.mark.parametrize(
    "dataset, text, score",
    [
        ("cmnist", "The digit is rotated by 30 degrees, so its loop looks like an 8.", 0.0),
        ("cmnist", "It was predicted as 7 because the stroke is thin.", 0.0),  # 'predicted' contains 'red'
        ("cmnist", "The colour of the strokes is unusual for a three.", 1.0),
        ("cmnist", "A darker shade of the strokes confused it.", 0.5),
        ("clevr", "The metallic sheen made the cylinder look like a cube.", 1.0),
        ("clevr", "A matte rubber sphere is rare for this class.", 1.0),
        ("clevr", "The surface looks different.", 0.5),
        ("clevr", "The object is large and near the camera.", 0.0),
        ("objectnet", "The chair is upside down.", 1.0),
        ("imagenet_d", "The bottle is made of wood.", 1.0),
        ("imagenet_r", "The photograph is blurry.", 0.0),
    ],
)
def test_keyword_judge_scores(dataset, text, score):
    assert KeywordJudge(dataset).score_text(text).score == score


def test_keyword_judge_names_its_limits():
    judge = KeywordJudge("cmnist")
    assert "closed-vocabulary" in judge.name and "synthetic" in judge.name
    assert "CLOSED-VOCABULARY SYNTHETIC" in KeywordJudge.__doc__


def test_panel_keeps_per_judge_scores_and_skips_failures():
    failing = LLMJudge(ScriptedBackend(["x", "y", "z", "w", "v", "u"]), "cmnist", name="broken", max_reasks=0)
    half = LLMJudge(ScriptedBackend(['{"score": 0.5}', '{"score": 0}']), "cmnist", name="half")
    panel = JudgePanel([KeywordJudge("cmnist"), half, failing])
    verdicts = panel.judge([JudgeItem("blue digit"), JudgeItem("rotated digit")])
    keyword = panel.names[0]
    assert verdicts[0].scores == {keyword: 1.0, "half": 0.5, "broken": None}
    assert verdicts[0].mean == pytest.approx(0.75)
    assert verdicts[1].mean == 0.0
    assert verdicts[0].reasons["broken"] == "no JSON reply"
    with pytest.raises(UserInputError, match="repeat"):
        JudgePanel([KeywordJudge("cmnist"), KeywordJudge("clevr")])
    with pytest.raises(UserInputError, match="empty"):
        JudgePanel([])


def test_panel_scores_an_empty_explanation_zero_without_asking():
    backend = ScriptedBackend([json.dumps({"reasoning": "names the colour", "score": 1})])
    panel = JudgePanel([LLMJudge(backend, "cmnist"), KeywordJudge("cmnist")])
    empty, named = panel.judge([JudgeItem("  ", "3", "8"), JudgeItem("The green colour.", "3", "8")])
    assert len(backend.calls) == 1 and "The green colour." in json.dumps(backend.calls[0]["messages"])
    assert empty.scores == {"llm:scripted": 0.0, KeywordJudge().name: 0.0} and empty.mean == 0.0
    assert named.scores == {"llm:scripted": 1.0, KeywordJudge().name: 1.0}
    assert panel.judge([JudgeItem("")])[0].mean == 0.0 and len(backend.calls) == 1


def test_llm_judges_read_the_rubric_and_the_whole_explanation():
    from nemo_train.scoring.criteria import RUBRIC

    backend = ScriptedBackend([json.dumps({"reasoning": "r", "score": 0})] * 2)
    judge = LLMJudge(backend, "cmnist")
    text = "The red colour caused it. Edit: angle -> 0"
    judge.judge([JudgeItem(text, "3", "8")])
    judge.judge([JudgeItem(text, "3", "8", attributes={"color": "red", "angle": "0"}, cause="color")])
    for call in backend.calls:
        prompt = call["messages"][-1]["content"][-1]["text"]
        assert RUBRIC in prompt and text in prompt  # the Edit line is shown and graded, not ignored
        assert "three or more factors" in prompt and "not the colour but the rotation" in prompt
        assert "changes a different factor than the one its text blames" in prompt
