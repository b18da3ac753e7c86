"""The labelled set shipped for measuring judges: its size and coverage, and the grounded judge's agreement with
it (Cohen's kappa from sklearn on the three levels; no adversarial item, labelled 0, may score 1)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from sklearn.metrics import cohen_kappa_score

from datamodules.fact_sheets import SHEETS
from nemo_train.nemo.judge_command import SHIPPED_LABELS
from nemo_train.scoring.judges import GroundedJudge, JudgeItem

GROUPS = {"sheet_words", "paraphrase", "synonym", "mllm_paragraph", "hedge", "negation", "several_causes",
          "false_claim", "contradiction", "everything", "class_free", "no_factor", "wrong_factor", "clockwise",
          "tolerance", "reference_contrast"}  # fmt: skip


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in SHIPPED_LABELS.read_text().splitlines()]


@pytest.fixture(scope="module")
def scores(rows) -> list[float]:
    judges = {name: GroundedJudge(SHEETS[name]) for name in ("shifts", "cmnist", "clevr")}
    out = []
    for r in rows:
        item = JudgeItem(r["text"], r["true_class"], r["predicted_class"], r["attributes"], r["cause"])
        out.append(judges[r["benchmark"]].judge([item])[0].score)
    return out


def test_the_set_is_large_covers_every_group_and_every_benchmark_with_a_sheet(rows):
    assert len(rows) >= 300
    assert set(Counter(r["group"] for r in rows)) == GROUPS
    assert {r["benchmark"] for r in rows} == {"shifts", "cmnist", "clevr"}
    assert {r["label"] for r in rows} == {0.0, 0.5, 1.0}
    for r in rows:
        sheet = SHEETS[r["benchmark"]]
        assert r["cause"] in sheet.factor_names and set(r["attributes"]) == {sheet.class_attribute, *sheet.factor_names}
    assert len({r["text"] for r in rows}) > 0.7 * len(rows)  # mostly distinct sentences (a few recur across images)


def test_adversarial_groups_are_labelled_zero(rows):
    """Every false claim, contradiction and every-factor answer is worth 0 by the rubric (docs/GRADING.md)."""
    for r in rows:
        if r["group"] in ("contradiction", "everything", "false_claim", "no_factor", "wrong_factor"):
            assert r["label"] == 0.0, r["text"]


def test_the_grounded_judge_agrees_with_the_labels(rows, scores):
    codes = {0.0: 0, 0.5: 1, 1.0: 2}
    kappa = cohen_kappa_score([codes[r["label"]] for r in rows], [codes[s] for s in scores])
    assert kappa >= 0.8
    raised = [r["text"] for r, s in zip(rows, scores) if r["label"] == 0.0 and s == 1.0]
    assert raised == []
