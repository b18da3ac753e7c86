"""One explanation, one reading: the edit comes from the sentence, an Edit: line is a hint that must agree."""

from __future__ import annotations

import pytest
import torch

from datamodules.facts import DatasetFacts, Factor
from datamodules.shifts_render import FACTS as SHIFTS
from nemo_train.nemo.evaluation import score_explanation
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor
from nemo_train.scoring.judges import GroundedJudge, JudgePanel
from nemo_train.scoring.text_edits import ExplanationReader, TextEditDeriver, reader_for, restore_value
from tests.nemo.nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid

#: a sheet over the toy generator: red is the training-typical colour, upright the typical rotation
TOY = DatasetFacts(
    name="toy",
    classes=("reddish", "greenish"),
    class_attribute="digit",
    object_word="digit",
    factors=(
        Factor("color", ("red", "green", "blue"), "colour", ("color", "colour"), typical="red"),
        Factor("angle", tuple(range(-30, 31, 5)), "rotation", ("rotated", "rotation", "tilted"), typical=0),
        Factor("style", ("solid", "dotted"), "style", ("stroke", "strokes"), typical="solid"),
    ),
)
#: a green "reddish" image read as greenish, tilted 10 degrees: its colour is the cause (the toy classifier
#: reads colour only, so the rotation changes nothing)
ERROR = ErrorSample("e0", solid(1), 0, 1, {"digit": 0, "color": 1, "angle": 10}, cause="color")
RIGHT = "The classifier read this reddish as a greenish because of the green colour."
WRONG = "The classifier read this reddish as a greenish because of the 10 degree rotation."


def _benchmark() -> NemoBenchmark:
    empty = torch.zeros(0, dtype=torch.long)
    reference = ReferenceSet(torch.zeros(0, 3, 8, 8), empty, empty, torch.zeros(0, 2))
    cause = {"attribute": None, "editable": ["color", "angle"]}
    return NemoBenchmark("toy", list(TOY.classes), "toy", [ERROR], reference, SolidRenderer(), VOCAB, cause, TOY)


def _score(text: str) -> dict:
    bench = _benchmark()
    reader = reader_for(bench)
    scorer = CounterfactualScorer(RedGreenTarget(), TextEditDeriver(reader), ExactAttributeEditor(bench.renderer))
    panel = JudgePanel([GroundedJudge().for_benchmark("toy", TOY)])
    record, _ = score_explanation("m", Explanation(text), ERROR, bench, scorer, panel, "t", reader)
    return record


def test_free_text_gets_the_same_cei_as_the_same_text_with_its_edit():
    free, stated = _score(RIGHT), _score(f"{RIGHT} Edit: color -> red")
    assert free["edit"] == stated["edit"] == {"attribute": "color", "value": 0}  # back to the typical red
    assert free["cei"] == pytest.approx(stated["cei"]) and free["cei"] > 50
    assert free["consistent"] and stated["consistent"] and free["llm_match"] == stated["llm_match"] == 1.0


def test_a_sentence_naming_the_cause_with_an_edit_of_another_factor_scores_nothing():
    record = _score(f"{RIGHT} Edit: angle -> 0")
    assert record["blamed"] == ["color"] and record["consistent"] is False
    assert record["edit"] == {"attribute": "color", "value": 0}  # the sentence's edit is the one applied
    assert record["edit_cei"] > 50  # what the applied edit earned, kept for the reader
    assert record["cei"] == 0.0 and record["llm_match"] == 0.0  # the headline


def test_a_sentence_blaming_the_distractor_with_the_causes_edit_scores_nothing():
    record = _score(f"{WRONG} Edit: color -> red")
    assert record["blamed"] == ["angle"] and record["consistent"] is False
    assert record["edit"] == {"attribute": "angle", "value": 0}
    assert record["cei"] == 0.0 and record["llm_match"] == 0.0
    right = _score(f"{RIGHT} Edit: color -> red")
    assert right["cei"] > 50  # the same edit with an agreeing sentence keeps its CEI


def test_every_record_names_what_was_blamed_and_the_edit_applied():
    record = _score("The error may come from the colour or the rotation of the digit. Edit: angle -> -5")
    assert record["blamed"] == ["color", "angle"] and record["consistent"] is True
    assert record["edit"] == {"attribute": "angle", "value": -5}  # an agreeing hint gives the value
    vague = _score("The error may come from the colour, the rotation or the style of the digit. Edit: color -> red")
    assert vague["blamed"] == ["color", "angle", "style"] and vague["edit"] is None  # describes no error
    assert vague["cei"] == 0.0 and vague["llm_match"] == 0.0
    nothing = _score("The classifier got it wrong.")
    assert nothing["blamed"] == [] and nothing["edit"] is None and nothing["cei"] == 0.0


def test_the_reader_checks_an_edit_another_deriver_applied():
    reader = ExplanationReader(TOY, VOCAB, ["color", "angle"])
    reading = reader.read(ERROR, RIGHT, list(TOY.classes), applied={"attribute": "angle", "value": 0})
    assert reading.blamed == ("color",) and reading.consistent is False
    assert reader.read(ERROR, RIGHT, list(TOY.classes), applied={"attribute": "color", "value": 0}).consistent


def test_typical_values_come_from_the_sheet_and_per_class_from_a_planted_bias():
    sample = ErrorSample("s", solid(1), 3, 8, {"digit": 3, "color": 1, "angle": 45, "background": 2})
    assert restore_value(SHIFTS, "background", sample) == SHIFTS.factor("background").values.index("plain")
    assert restore_value(SHIFTS, "angle", sample) == 0
    cause = {"attribute": "color", "values": {3: ["blue", "red"]}}
    assert restore_value(TOY, "color", sample, cause) == 2  # the true class's training colour, not the sheet's
    assert restore_value(TOY, "color", ErrorSample("s", solid(2), 3, 8, {"color": 2}), cause) == 0


def test_the_table_reports_each_methods_consistency_share():
    from nemo_train.nemo.report import print_report, summarize

    def record(i: int, consistent: bool | None) -> dict:
        return {
            "method": "m",
            "target": "t",
            "sample_id": f"s{i}",
            "judges": {},
            "llm_match": 1.0,
            "cei": 1.0,
            "consistent": consistent,
            "explanation": "x",
        }

    cells = summarize([record(0, True), record(1, False), record(2, True), record(3, True)])
    assert cells[0].consistent == pytest.approx(0.75)
    assert "consistent" in print_report(cells, "toy")
    unchecked = summarize([record(0, None)])  # no fact sheet: nothing to check, no column
    assert "consistent" not in print_report(unchecked, "toy")
