"""The demo recap names every stand-in next to its numbers (labels only: the values pass through unchanged)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from nemo_train.demo_steps import (
    DemoContext,
    FitResult,
    read_counterfactuals,
    read_differences,
    read_distill_eval,
    read_distilled,
    read_explainer,
    read_grpo,
    read_lbee,
    read_nemo,
    read_teacher,
    read_zoo,
)
from nemo_train.differences.report import DifferencesResult, MethodScore
from nemo_train.lbee.search import MethodScores
from nemo_train.nemo.report import CellScore, NemoEvalSummary

CTX = DemoContext(Path("out"), Path("configs"))
GROUNDED = "grounded-judge (attribute parser, not a model)"
RULE_MATCH = f"rule_match [{GROUNDED}]"


def test_nemo_rows_name_the_judge_and_the_global_stand_in():
    cells = [
        CellScore("KnownCause", "a", 1.0, 80.0, 3, per_judge={GROUNDED: 1.0}),
        CellScore("Global", "a", 0.4, 0.0, 3, per_judge={GROUNDED: 0.4}, stand_in="counting rule, not a model"),
        CellScore("SciTX", "a", 0.5, 10.0, 3, per_judge={"llm:gpt-5-mini": 0.5}),
    ]
    rows = read_nemo(CTX, NemoEvalSummary("cmnist", cells))
    assert ("KnownCause", RULE_MATCH, 1.0, None, None) in rows  # a cell built without records has no interval
    assert ("Global (counting rule, not a model)", RULE_MATCH, 0.4, None, None) in rows
    assert ("SciTX", "llm_match", 0.5, None, None) in rows


def test_nemo_rows_carry_each_cell_interval():
    cell = CellScore("SciTX", "a", 0.5, 10.0, 3, per_judge={"llm:gpt-5-mini": 0.5}, intervals={"cei": (2.0, 18.0)})
    rows = read_nemo(
        CTX, NemoEvalSummary("cmnist", [cell], known_cause_win_rate=0.9, known_cause_win_rate_ci=(0.8, 1.0))
    )
    assert ("SciTX", "cei", 10.0, 2.0, 18.0) in rows and ("SciTX", "llm_match", 0.5, None, None) in rows
    assert ("KnownCause", "beats_distractor_cei", 0.9, 0.8, 1.0) in rows


def test_student_and_distill_eval_rows_name_the_judge():
    metrics = {"nemo/cei": 70.0, "nemo/rule_match": 0.8, f"nemo/rule_match/{GROUNDED}": 0.8}
    assert read_distilled(CTX, FitResult(metrics, None, None)) == [
        ("Student", "cei", 70.0),
        ("Student", RULE_MATCH, 0.8),
    ]
    cell = {"llm_match": 0.9, "llm_match_ci_low": 0.7, "llm_match_ci_high": 1.0, "cei": 80.0}
    result = {"summary": {"Teacher (exhaustive search, not a model)|a": cell}, "judges": [GROUNDED]}
    assert read_distill_eval(CTX, result) == [
        ("Teacher (exhaustive search, not a model) @ a", RULE_MATCH, 0.9, 0.7, 1.0),
        ("Teacher (exhaustive search, not a model) @ a", "cei", 80.0, None, None),
    ]
    assert read_teacher(CTX, {"labels": 10})[0][0] == "Teacher (exhaustive search, not a model)"


def test_a_zoo_evaluation_recaps_only_its_pooled_rows_with_intervals_and_edits():
    pooled = {
        "Teacher (exhaustive search, not a model)": {
            "cei": 24.0,
            "cei_ci_low": 20.0,
            "cei_ci_high": 27.0,
            "edits": 21.0,
        },
        "Student (0 edits)": {"llm_match": 0.5, "llm_match_ci_low": 0.25, "llm_match_ci_high": 0.75, "edits": 0.0},
    }
    per_target = {"Student (0 edits)|a": {"llm_match": 0.4}, "Student (0 edits)|b": {"llm_match": 0.6}}
    result = {"summary": per_target, "judges": [GROUNDED], "pooled": pooled, "pooled_targets": ["a", "b"]}
    assert read_distill_eval(CTX, result) == [
        ("Teacher (exhaustive search, not a model) (pooled over 2 classifiers)", "cei", 24.0, 20.0, 27.0),
        ("Teacher (exhaustive search, not a model) (pooled over 2 classifiers)", "edits/error", 21.0),
        ("Student (0 edits) (pooled over 2 classifiers)", RULE_MATCH, 0.5, 0.25, 0.75),
    ]


def test_zoo_and_student_answer_rows():
    members = [{"split": "train", "val_acc": 0.6, "test_acc": 0.2}, {"split": "train", "val_acc": 0.8, "test_acc": 0.4}]
    members.append({"split": "heldout", "val_acc": 0.5, "test_acc": 0.1})
    rows = read_zoo(CTX, {"members": members, "test_shift": "multi3"})
    assert [(m, k) for m, k, _ in rows] == [
        ("training zoo (2 classifiers, mean)", "val_acc"),
        ("training zoo (2 classifiers, mean)", "test_acc (multi3 shift)"),
        ("held-out zoo (1 classifiers, mean)", "val_acc"),
        ("held-out zoo (1 classifiers, mean)", "test_acc (multi3 shift)"),
    ]
    assert rows[0][2] == pytest.approx(0.7) and rows[3][2] == 0.1
    metrics = {"val/answer_acc": 0.25, "val/answer_acc/factor": 0.5, "train/loss": 1.0}
    assert read_distilled(CTX, FitResult(metrics, None, None)) == [
        ("Student", "answer_acc", 0.25),
        ("Student", "answer_acc/factor", 0.5),
    ]


def test_differences_rows_name_the_rule_parts():
    row = MethodScore("summarization", 0.9, 0.6, 67, 100, "Model A ...")
    stand_ins = DifferencesResult(
        [row], "keyword reader (closed-vocabulary stand-in, not an LLM)", "decision-tree rules", "sampler", 300
    )
    assert read_differences(CTX, stand_ins)[0] == (
        "summarization (evaluator, summarizer, explorer: rules, not LLMs)",
        "completeness",
        0.9,
        None,
        None,
    )
    models = DifferencesResult([row], "LLM gpt-5-mini", "LLM meta-llama/Llama-3.1-8B-Instruct", "sampler", 300)
    assert read_differences(CTX, models)[0] == (
        "summarization (explorer: rules, not LLMs)",
        "completeness",
        0.9,
        None,
        None,
    )


def test_explanation_accuracy_row_names_its_grader():
    rows = read_explainer(CTX, FitResult({"val/explanation_acc": 0.9}, None, None))
    assert rows == [("tiny explainer", "explanation_acc (keyword rule, not manual grading)", 0.9)]


def test_stored_intervals_reach_the_recap_rows_and_set_level_numbers_have_none():
    row = MethodScore("summarization", 0.9, 0.6, 67, 100, "Model A ...", completeness_ci_low=0.8)
    row.completeness_ci_high = 0.95
    result = DifferencesResult([row], "LLM gpt-5-mini", "LLM x", "LLM y", 300)
    assert read_differences(CTX, result)[:3] == [
        ("summarization", "completeness", 0.9, 0.8, 0.95),
        ("summarization", "density", 0.6, None, None),
        ("summarization", "token_length", 67, None, None),
    ]
    lbee = SimpleNamespace(scores=[MethodScores("TopS", 0.4, 0.5, 0.25, 0.2, 3, [], 0.3, 0.5, 0.2, 0.9)])
    assert read_lbee(CTX, lbee) == [
        ("TopS", "acr", 0.4, 0.3, 0.5),
        ("TopS", "ahr", 0.5, 0.2, 0.9),
        ("TopS", "tpr", 0.25, None, None),
        ("TopS", "ji", 0.2, None, None),
    ]
    table = {"Orig": {"success": 0.0}, "LGD": {"success": 0.75, "success_ci_low": 0.5, "success_ci_high": 1.0}}
    assert read_counterfactuals(CTX, SimpleNamespace(table=table)) == [("LGD", "success", 0.75, 0.5, 1.0)]
    teacher = {"labels": 10, "kept": 8, "mean_cei": 40.0, "mean_cei_ci_low": 30.0, "mean_cei_ci_high": 50.0}
    assert read_teacher(CTX, teacher)[2] == ("Teacher (exhaustive search, not a model)", "mean_cei", 40.0, 30.0, 50.0)
    assert read_teacher(CTX, teacher)[0][3:] == (None, None)  # a count has no interval


def test_grpo_rows_are_its_rewards_and_kl():
    metrics = {"train/reward": 0.4, "val/reward": 0.3, "val/reward/cei": 12.0, "train/kl": 0.02, "train/loss": 1.0}
    assert read_grpo(CTX, FitResult(metrics, None, None)) == [
        ("GRPO from the distilled student", "train/reward", 0.4),
        ("GRPO from the distilled student", "val/reward", 0.3),
        ("GRPO from the distilled student", "val/reward/cei", 12.0),
        ("GRPO from the distilled student", "train/kl", 0.02),
    ]
