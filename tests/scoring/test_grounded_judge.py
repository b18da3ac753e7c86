"""Grounded judging: an explanation is graded against its own error's cause and checked against the image."""

from __future__ import annotations

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest

from datamodules.fact_sheets import SHEETS
from datamodules.facts import DatasetFacts, Factor
from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError
from nemo_train.scoring.grounding import ClaimParser, tokenize
from nemo_train.scoring.judges import (
    GroundedJudge,
    JudgeItem,
    JudgePanel,
    KeywordJudge,
    LLMJudge,
    PanelJudgement,
    snap_grounding,
)

FACTS = DatasetFacts(
    name="toy-digits",
    classes=tuple(str(d) for d in range(10)),
    class_attribute="digit",
    object_word="digit",
    factors=(
        Factor("color", ("red", "green", "blue", "cyan", "yellow", "magenta"), "colour", ("color", "hue")),
        Factor("style", ("solid", "dotted", "outline"), "style", ("stroke style", "outlined")),
        Factor("angle", (-45, -30, -15, 0, 15, 30, 45), "rotation", ("rotated", "angle", "tilted")),
        Factor("background", ("plain", "noise", "stripes"), "background", ("backdrop",)),
        Factor("scale", ("small", "normal", "large"), "scale", ("size",)),
        Factor("position", ("left", "center", "right"), "position", ("placed", "location"), distractor=True),
    ),
)
#: a green, dotted 0 at -45 degrees on a plain background, normal size, on the left
ATTRS = {
    "digit": "0",
    "color": "green",
    "style": "dotted",
    "angle": "-45",
    "background": "plain",
    "scale": "normal",
    "position": "left",
}
CONSTANT = "The cyan colour makes the classifier read this 1 as a 6. Edit: color -> red"
TEACHER = "The green colour makes the classifier read this 0 as a 8. Edit: color -> red"


def item(text: str, cause: str | None = "color", attributes: dict | None = ATTRS) -> JudgeItem:
    """An error: a 0 read as an 8 (with ``ATTRS``), caused by ``cause``."""
    return JudgeItem(text, "0", "8", attributes=None if attributes is None else dict(attributes), cause=cause)


def grade(text: str, cause: str | None = "color", attributes: dict | None = ATTRS) -> tuple[float | None, float | None]:
    verdict = GroundedJudge(FACTS).judge([item(text, cause, attributes)])[0]
    return verdict.score, verdict.grounding


def test_constant_sentence_is_wrong_about_this_image_and_the_teacher_is_right():
    judge = GroundedJudge(FACTS)
    constant, teacher = judge.judge([item(CONSTANT), item(TEACHER)])
    # three checkable claims, all false: colour cyan (is green), true class 1 (is 0), predicted 6 (is 8)
    assert constant.score == 0.0 and constant.grounding == 0.0
    assert "'cyan'" in constant.reason and "'1'" in constant.reason and "'6'" in constant.reason
    assert "0/3" in constant.reason
    # the same claims, all true, and the colour is this error's cause
    assert teacher.score == 1.0 and teacher.grounding == 1.0
    assert "blames the cause color" in teacher.reason and "3/3" in teacher.reason


@pytest.mark.parametrize(
    "text, cause, expected",
    [
        # right about the image (dotted, 0, 8) but blames style, not this error's cause
        ("The dotted style makes the classifier read this 0 as an 8.", "color", (0.0, 1.0)),
        ("The dotted style makes the classifier read this 0 as an 8.", "style", (1.0, 1.0)),
        # two blamed factors, the cause among them, 4 true claims
        ("The green colour and the dotted style make the classifier read this 0 as an 8.", "color", (0.5, 1.0)),
        # anticlockwise 45 is +45, not the image's -45: a false claim (the predicted 8 is true) -> 0 even though
        # rotation is the cause; clockwise 45 is -45 (the renderers turn positive angles anticlockwise)
        ("The digit is rotated 45 degrees anticlockwise, so it was read as an 8.", "angle", (0.0, 0.5)),
        ("The digit is rotated 45 degrees clockwise, so it was read as an 8.", "angle", (1.0, 1.0)),
        ("The digit is rotated -45 degrees, so it was read as an 8.", "angle", (1.0, 1.0)),
        # an angle without a direction claims only its size (before 27 Nov 2026 it was read as +45, false)
        ("The digit is rotated 45 degrees, so it was read as an 8.", "angle", (1.0, 1.0)),
        ("A 45 degree rotation makes it look odd.", "angle", (1.0, 1.0)),
        # names the factor, asserts nothing checkable
        ("The colour confuses the classifier.", "color", (1.0, None)),
        ("The colour confuses the classifier.", "style", (0.0, None)),
        # the factor-alone answer of distillation (claims: cause): blames its factor, nothing checkable
        ("The classifier erred because of its colour. Edit: color -> red", "color", (1.0, None)),
        ("The classifier erred because of its size. Edit: scale -> normal", "color", (0.0, None)),
        # only the edit names a factor
        ("The classifier got it wrong. Edit: style -> solid", "style", (1.0, None)),
        ("The classifier got it wrong. Edit: style -> solid", "color", (0.0, None)),
        # the position is a distractor: blaming it alone scores 0 unless it is the cause
        ("The digit is placed on the left, so it was read as an 8.", "color", (0.0, 1.0)),
        ("The digit is placed on the left, so it was read as an 8.", "position", (1.0, 1.0)),
        ("The green digit placed on the right was read as an 8.", "color", (0.0, 2 / 3)),
    ],
)
def test_grounded_scores(text, cause, expected):
    assert grade(text, cause) == expected


@pytest.mark.parametrize(
    "text, claims",
    [
        ("Because the digit is green, the model mistook this 0 for an 8.", 3),
        ("A green 0 classified as an 8: the classifier keys on colour.", 3),
        ("Its hue is green, and so the classifier calls this 0 an eight-like shape.", 2),
        ("In training every 0 was red, and this one is green, so it was read as an 8.", 2),
        ("If it were red it would be read correctly as a 0, but it is green.", 1),
        ('{"cause_of_error": "The green colour makes the classifier read this 0 as a 8. Edit: color -> red"}', 3),
        ("The green colour of this 0 was read as an 8 by a model with 45 layers.", 3),
        ("In plain words, the green colour made the classifier read this 0 as an 8.", 3),
        ("The green hue left the classifier reading this 0 as an 8.", 3),
        ("The green colour gives it an 8-like loop, so the 8s won; it has a 6 too.", 1),
        ("Compared with a correctly classified 0, its colour is green where the reference is red.", 1),
    ],
)
def test_paraphrases_that_blame_the_colour_truthfully(text, claims):
    reading = ClaimParser(FACTS).read(text, ATTRS, "0", "8")
    assert reading.blamed == ("color",)
    assert len(reading.claims) == claims and all(c.holds for c in reading.claims)
    assert grade(text) == (1.0, 1.0)


@pytest.mark.parametrize(
    "text, claim",
    [
        ("The classifier missed it because the background is noise.", ("background", "noise")),
        ("The digit sits on a plain backdrop.", ("background", "plain")),
        ("A solid 0 confuses it.", ("style", "solid")),
        ("The small digit confuses it.", ("scale", "small")),
        ("The digit has normal size.", ("scale", "normal")),
        ("The digit is tilted by 30 degrees.", ("angle", "30")),
        ("It shows an angle of -45.", ("angle", "-45")),
    ],
)
def test_common_word_values_count_in_their_factor_context(text, claim):
    reading = ClaimParser(FACTS).read(text, ATTRS, "0", "8")
    assert [(c.subject, c.said) for c in reading.claims] == [claim]
    assert reading.blamed == (claim[0],)


@pytest.mark.parametrize(
    "text",
    [
        "It left the classifier unsure in plain terms, and the normal reading failed.",
        "The right answer was solid.",
        "The 0 is rotated, which the classifier misreads.",  # '0' is the digit, not an angle
        "The classifier has 45x less confidence and 3D features.",
    ],
)
def test_ordinary_words_and_stray_numbers_are_no_claims(text):
    reading = ClaimParser(FACTS).read(text, ATTRS, "0", "8")
    assert reading.claims == ()
    assert reading.blamed in ((), ("angle",))


def test_tokens_keep_numbers_whole():
    assert [t.text for t in tokenize("read this 8s as a 45° -45 x45 digit's")] == [
        "read", "this", "8s", "as", "a", "45", "°", "-45", "x45", "digit",
    ]  # fmt: skip


def test_without_attributes_only_class_claims_are_checked():
    assert grade(CONSTANT, attributes=None) == (0.0, 0.0)  # 1 and 6 are false; cyan is unchecked
    assert grade(TEACHER, attributes=None) == (1.0, 1.0)
    assert grade("The cyan colour confuses the classifier.", attributes=None) == (1.0, None)


def test_without_a_cause_the_benchmark_criterion_is_the_cause():
    judge = GroundedJudge(FACTS, criterion="cmnist")  # criterion 'colour' is the factor 'color'
    teacher, constant, style = judge.judge(
        [item(TEACHER, None), item(CONSTANT, None), item("The dotted style misleads it.", None)]
    )
    assert (teacher.score, constant.score, style.score) == (1.0, 0.0, 0.0)
    # no fact sheet: KeywordJudge's keywords decide; only the item's own two labels are known class names, so
    # the constant sentence's 1 and 6 go unseen, while swapping the true and predicted class is caught
    bare = GroundedJudge(criterion="cmnist")
    swapped = "The green colour makes the classifier read this 8 as a 0."
    verdicts = bare.judge([item(TEACHER, None), item(CONSTANT, None), item(swapped, None)])
    assert [(v.score, v.grounding) for v in verdicts] == [(1.0, 1.0), (1.0, None), (0.0, 0.0)]


def test_judges_receive_the_fact_sheet_from_the_benchmark():
    judge = GroundedJudge().for_benchmark("toy-digits", facts=FACTS)
    assert judge.facts is FACTS and judge.criterion is None
    assert judge.judge([item(TEACHER)])[0].score == 1.0
    assert GroundedJudge().for_benchmark("cmnist", facts=FACTS).criterion.name == "colour"
    assert GroundedJudge(FACTS).fingerprint()["facts"] == "toy-digits"
    assert "not a model" in GroundedJudge().name
    with pytest.raises(UserInputError, match="no criterion"):
        judge.judge([item(TEACHER, cause=None)])
    with pytest.raises(UserInputError, match="unknown judge criterion"):
        KeywordJudge().for_benchmark("toy-digits", facts=FACTS)
    with pytest.raises(UserInputError, match="not a factor of toy-digits"):
        GroundedJudge(FACTS).judge([item(TEACHER, cause="texture")])
    with pytest.raises(UserInputError, match="no fact sheet"):
        GroundedJudge().judge([item(TEACHER)])


def test_panel_scores_an_empty_explanation_zero_and_averages_grounding():
    backend = ScriptedBackend([json.dumps({"reasoning": "half right", "score": 0, "grounding": 0.5})])
    panel = JudgePanel([GroundedJudge(FACTS), LLMJudge(backend, name="llm")])
    empty, teacher = panel.judge([item("  "), item(TEACHER)])
    assert empty.mean == 0.0 and empty.grounding is None and len(backend.calls) == 1
    assert teacher.scores == {GroundedJudge().name: 1.0, "llm": 0.0}
    assert teacher.grounding == pytest.approx(0.75)
    assert PanelJudgement({"a": 1.0, "b": 0.0, "c": 1.0}, groundings={"a": None, "b": 0.2, "c": 0.6}).grounding == (
        pytest.approx(0.4)
    )
    assert PanelJudgement({"a": 1.0}).grounding is None


def test_llm_judge_is_told_the_cause_and_the_attributes_and_reports_grounding():
    replies = [
        json.dumps({"reasoning": "cyan, 1 and 6 are all wrong", "score": 0, "grounding": 0}),
        json.dumps({"reasoning": "all true", "score": 1, "grounding": "1.0"}),
        json.dumps({"reasoning": "odd", "score": 0.5, "grounding": "high"}),  # off the scale: asked again
        json.dumps({"reasoning": "nothing to check", "score": 1, "grounding": None}),
        json.dumps({"reasoning": "odd, but half right", "score": 0.5, "grounding": 0.5}),
    ]
    backend = ScriptedBackend(replies)
    judge = LLMJudge(backend, name="llm").for_benchmark("toy-digits", facts=FACTS)
    items = [item(CONSTANT), item(TEACHER), item("The hue."), item("The colour.")]
    verdicts = judge.judge(items)
    assert [(v.score, v.grounding) for v in verdicts] == [(0.0, 0.0), (1.0, 1.0), (0.5, 0.5), (1.0, None)]
    prompt = backend.calls[0]["messages"][-1]["content"][-1]["text"]
    assert CONSTANT in prompt and '"0"' in prompt and '"8"' in prompt
    assert 'the colour (attribute "color")' in prompt
    assert "- color: green" in prompt and "- angle: -45" in prompt and "- position: left" in prompt
    assert '"grounding"' in prompt and '"score"' in prompt
    # an item without cause or attributes still gets the benchmark-level prompt, which asks no grounding
    old = ScriptedBackend([json.dumps({"score": 1, "grounding": 0.3})])
    verdict = LLMJudge(old, "cmnist").judge([JudgeItem("The green colour.", "0", "8")])[0]
    assert "grounding" not in old.calls[0]["messages"][-1]["content"][-1]["text"]
    assert verdict.score == 1.0


@pytest.mark.parametrize(
    "raw, expected",
    [(0, 0.0), (1, 1.0), (0.25, 0.25), ("0.5", 0.5), (1.7, None), (-0.2, None), (None, None), ("high", None),
     (True, None), (float("nan"), None), ([0.5], None)],
)  # fmt: skip
def test_snap_grounding(raw, expected):
    # off the scale is not clamped (before 27 Nov 2026 1.7 read as 1.0 and -0.2 as 0.0): the judge fails the reply
    assert snap_grounding(raw) == expected


@pytest.mark.parametrize(
    "reply, problem",
    [
        ({"reasoning": "nearly", "score": 0.7, "grounding": 1}, "score 0.7 is not 1, 0.5 or 0"),
        ({"reasoning": "all true", "score": 1, "grounding": 1.4}, "grounding 1.4 is not a number from 0 to 1"),
    ],
)
def test_an_off_scale_grade_is_a_failed_judgement_not_dropped_or_clamped(reply, problem, tmp_path):
    from nemo_train.backends.base import MalformedReplyError, strict_json

    backend = ScriptedBackend(lambda messages: json.dumps(reply))
    backend.attach_cache(tmp_path / "cache")
    judge = LLMJudge(backend, name="llm").for_benchmark("toy-digits", facts=FACTS)
    (verdict,) = judge.judge([item(TEACHER)])
    assert (verdict.score, verdict.grounding) == (None, None) and verdict.reason == f"off-scale reply: {problem}"
    assert len(backend.calls) == 3  # asked, then asked again twice naming the problem
    assert len(backend.cache) == 0  # forgotten, so a rerun asks the model again instead of replaying it
    assert problem in backend.calls[1]["messages"][-1]["content"][-1]["text"]
    # in a panel the judge is named as failed (before: dropped from the mean without a word, grounding clamped)
    panel = JudgePanel([GroundedJudge(FACTS), LLMJudge(ScriptedBackend(lambda m: json.dumps(reply)), name="llm")])
    verdict = panel.judge([item(TEACHER)])[0]
    assert verdict.failed == ["llm"] and verdict.reasons["llm"].startswith("off-scale reply")
    assert verdict.groundings["llm"] is None
    # a stored evaluation (strict_json) fails the sample instead, as for a reply that is not JSON
    with strict_json(), pytest.raises(MalformedReplyError, match="off the scale"):
        LLMJudge(ScriptedBackend(lambda m: json.dumps(reply)), name="llm").for_benchmark("t", FACTS).judge(
            [item(TEACHER)]
        )


def test_an_off_scale_grade_repaired_by_a_reask_counts():
    replies = iter([json.dumps({"score": 0.7}), json.dumps({"reasoning": "names the colour", "score": 1})])
    judge = LLMJudge(ScriptedBackend(lambda messages: next(replies)), "cmnist", name="llm")
    (verdict,) = judge.judge([JudgeItem("The green colour.", "0", "8")])
    assert (verdict.score, verdict.reason) == (1.0, "names the colour")


SHIFTS = SHEETS["shifts"]
#: a red 2 read as a 7, turned 90 degrees clockwise (-90 on the sheet), on a plain background
SHIFT_ATTRS = {"digit": "2", "color": "red", "style": "solid", "angle": "-90", "background": "plain",
               "scale": "normal", "position": "centre"}  # fmt: skip


@pytest.mark.parametrize(
    "text, cause, score",
    [
        # the text and its Edit line blame different factors: a contradiction scores 0 (before: 1, and the
        # mirror image 0 only because the text missed the cause)
        ("The red colour made the classifier read this 2 as a 7. Edit: angle -> 0", "color", 0.0),
        ("The red colour made the classifier read this 2 as a 7. Edit: color -> white", "color", 1.0),
        ("The colour is to blame. Edit: change the background to plain", "color", 0.0),
        # every factor (or three or more) describes no error (before: 0.5)
        ("The error may come from the colour, style, rotation, background, size or position.", "color", 0.0),
        ("The colour, the rotation or the background misled it.", "color", 0.0),
        ("The colour or the rotation misled it.", "color", 0.5),
        # negation: "not the colour but the rotation" blames the rotation only (before: 0.5 for either)
        ("Not the colour but the rotation misled the classifier.", "angle", 1.0),
        ("Not the colour but the rotation misled the classifier.", "color", 0.0),
        ("The background did not matter; the colour did.", "color", 1.0),
        ("Neither the style nor the size matters here; the red colour does.", "color", 1.0),
        # clockwise is negative on the sheets (the renderers turn positive angles anticlockwise)
        ("The digit is turned 90 degrees clockwise, so it looks like a 7.", "angle", 1.0),
        ("The digit is turned 90 degrees anticlockwise, so it looks like a 7.", "angle", 0.0),
        ("The digit leans 90 degrees to the right, so it looks like a 7.", "angle", 1.0),
        # a tolerance of half the step between the sheet's angles (22.5 degrees on shifts)
        ("The 2 is tilted about 80 degrees clockwise, which misled it.", "angle", 1.0),
        ("The 2 is tilted about 45 degrees clockwise, which misled it.", "angle", 0.0),
        # synonyms and other spellings on the sheet
        ("Its red ink and the plain backdrop misled it.", "color", 0.5),
        ("The grainy backdrop misled it.", "background", 0.0),  # grainy is noise: false, the image is plain
        ("The red strokes misled it.", "color", 1.0),  # the strokes carry the colour: no stroke style blamed
        ("Unlike the white digits seen in training, this one is painted red.", "color", 1.0),
    ],
)
def test_the_rubric_by_hand_on_the_shifts_sheet(text, cause, score):
    judge = GroundedJudge(SHIFTS)
    assert judge.judge([JudgeItem(text, "2", "7", dict(SHIFT_ATTRS), cause)])[0].score == score


def test_the_reading_keeps_its_fields_and_adds_the_edit():
    reading = ClaimParser(SHIFTS).read("The red colour misled it. Edit: angle -> 0", SHIFT_ATTRS, "2", "7")
    assert reading.blamed == ("color",) and reading.edit_blamed == ("angle",) and not reading.consistent
    assert not reading.blamed_by_edit and [c.holds for c in reading.claims] == [True]
    by_edit = ClaimParser(SHIFTS).read("It failed. Edit: style -> solid")
    assert by_edit.blamed == ("style",) and by_edit.blamed_by_edit and by_edit.consistent
