"""The shared scoring entry point gives what the evaluation records store, for one text or a group of them."""

from __future__ import annotations

import pytest

from nemo_train.nemo.evaluation import score_explanation
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.editors import ExactEdit
from nemo_train.scoring.explanations import ExplanationScorer, judge_panel
from nemo_train.scoring.judges import GroundedJudge
from tests.nemo.nemo_toys import RedGreenTarget
from tests.scoring.test_text_edits import ERROR, RIGHT, TOY, WRONG, _benchmark

TEXTS = [RIGHT, WRONG, f"{RIGHT} Edit: angle -> 0", f"{WRONG} Edit: color -> red", ""]


def _scoring() -> ExplanationScorer:
    return ExplanationScorer.build(_benchmark(), RedGreenTarget(), ExactEdit("keyword"), [GroundedJudge(TOY)])


def test_scores_are_the_fields_of_an_evaluation_record():
    scoring = _scoring()
    scores = scoring.score([ERROR] * len(TEXTS), TEXTS)  # one group: the texts of one error tested together
    for text, score in zip(TEXTS, scores):
        record, _ = score_explanation(
            "m", Explanation(text), ERROR, scoring.benchmark, scoring.scorer, scoring.panel, "t", scoring.reader
        )
        fields = score.record_fields()
        assert {k: record[k] for k in fields} == fields
    right, wrong, contradicted, _, empty = scores
    assert right.llm_match == 1.0 and right.cei > 50 and right.grounding == 1.0 and right.consistent
    assert right.edit == {"attribute": "color", "value": 0} and right.trial is not None
    assert wrong.llm_match == 0.0 and wrong.cei == pytest.approx(0.0)
    assert contradicted.edit_cei > 50 and contradicted.cei == 0.0 and contradicted.llm_match == 0.0
    assert empty.trial is None and empty.cei == 0.0 and empty.llm_match == 0.0


def test_a_group_scores_as_its_members_alone():
    scoring = _scoring()
    together = scoring.score([ERROR] * len(TEXTS), TEXTS)
    alone = [scoring.score([ERROR], [text])[0] for text in TEXTS]
    numbers = ("cei", "edit_cei", "p_original", "p_edited")
    for a, b in zip(together, alone):
        kept = {k: v for k, v in a.record_fields().items() if k not in numbers}
        assert kept == {k: v for k, v in b.record_fields().items() if k not in numbers}
        assert [getattr(a, k) for k in numbers] == pytest.approx([getattr(b, k) for k in numbers], abs=1e-5)


def test_one_explanation_per_error_is_required():
    with pytest.raises(ValueError, match="one per error"):
        _scoring().score([ERROR], [RIGHT, WRONG])


def test_the_default_panel_is_the_grounded_judge_with_the_benchmarks_sheet():
    panel = judge_panel("shifts")
    assert panel.names == [GroundedJudge().name] and panel.judges[0].facts is not None
