"""The offline keyword evaluator and the decision-tree summariser (closed-vocabulary stand-ins)."""

from __future__ import annotations

import numpy as np
import pytest
from rule_pair import HUMAN, expected_diffs, swap_models, true_sign

from nemo_train.differences.diff_model import Observation
from nemo_train.differences.evaluators import KeywordEvaluator, parse_option
from nemo_train.differences.generators import CLEVR_SPACE, CMNIST_SPACE
from nemo_train.differences.metrics import completeness
from nemo_train.differences.reader import read_explanation
from nemo_train.differences.summarizers import TreeSummarizer, format_observations

GRID = CMNIST_SPACE.grid()


def keyword_evaluator(space=CMNIST_SPACE):
    ev = KeywordEvaluator()
    ev.bind(space, "digit classifiers")
    return ev


def test_human_explanation_is_read_correctly():
    diffs = expected_diffs(GRID) + np.random.default_rng(0).normal(0, 0.05, len(GRID))
    value, answers = completeness(keyword_evaluator(), HUMAN, GRID, diffs)
    assert answers == [true_sign(c) for c in GRID]
    assert value >= 0.8
    swapped, _ = completeness(keyword_evaluator(), swap_models(HUMAN), GRID, diffs)
    assert swapped <= -0.5
    third = (
        "Model B is better than model A for the digits 0, 1, 2, 3, and 4 in any color other than red regardless of "
        "the rotation angle. Model A is better than model B for the digits 5, 6, 7, 8, and 9 in any color other "
        "than blue regardless of the rotation angle."
    )
    assert completeness(keyword_evaluator(), third, GRID, diffs)[0] >= 0.8


def test_reader_clauses_negation_lists_ranges_and_qualifiers():
    (clause,) = read_explanation("Model B struggles with digits 5-9 when not red, green or blue.", CMNIST_SPACE)
    assert clause.direction == 1 and clause.allowed == {"digit": {5, 6, 7, 8, 9}}
    assert clause.excluded == {"color": {"red", "green", "blue"}}
    (mixed,) = read_explanation("Model A is better for shape other than sphere, material rubber.", CLEVR_SPACE)
    assert mixed.excluded == {"shape": {"sphere"}} and mixed.allowed == {"material": {"rubber"}}
    (angle,) = read_explanation("Model A excels on digit 3 at angles from -10 to 5 degrees.", CMNIST_SPACE)
    assert angle.allowed == {"digit": {3}, "angle": {-10, -5, 0, 5}}
    clevr = read_explanation(
        "Model A excels with rubber shapes, especially spheres and small cubes, but struggles with metal shapes. "
        "Both models perform equally on large cylinders.",
        CLEVR_SPACE,
    )
    assert [(c.direction, c.allowed) for c in clevr] == [(1, {"material": {"rubber"}}), (-1, {"material": {"metal"}})]
    # "it" carries the subject; a percentage is not a digit
    (a, b) = read_explanation("While A underperforms with digit 1, it outperforms with digit 7 (+85%).", CMNIST_SPACE)
    assert (a.direction, a.allowed, b.direction, b.allowed) == (-1, {"digit": {1}}, 1, {"digit": {7}})


def test_listed_results_generalise_to_neighbours_only():
    obs = [Observation(CMNIST_SPACE.make(digit=3, color="green", angle=-10), 0.0, 0.85)]
    text = format_observations(obs, CMNIST_SPACE)
    assert text == "digit 3, green, -10 degrees: Model B better (-85%)"
    ev = keyword_evaluator()
    near = CMNIST_SPACE.make(digit=3, color="green", angle=20)
    far = CMNIST_SPACE.make(digit=3, color="red", angle=20)
    assert ev.answer([(text, near), (text, far)]) == [-1, 0]


def test_tree_summarizer_states_the_bias():
    rng = np.random.default_rng(0)
    conditions = [GRID[i] for i in rng.choice(len(GRID), 120, replace=False)]
    diffs = expected_diffs(conditions)
    observations = [Observation(c, max(d, 0.0), max(-d, 0.0)) for c, d in zip(conditions, diffs)]
    summarizer = TreeSummarizer(max_leaves=4)
    summarizer.bind(CMNIST_SPACE, "")
    text = summarizer.summarize(observations)
    assert "Model B is better than Model A for digits 0, 1, 2, 3 and 4, colour other than red." in text
    assert "Model A is better than Model B for digits 5, 6, 7, 8 and 9, colour other than blue." in text
    assert completeness(keyword_evaluator(), text, GRID, expected_diffs(GRID))[0] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "reply, value",
    [("[1] Model A", 1), ("Answer: [2] Model B", -1), ("[3] Cannot be determined", 0), ("model b.", -1), ("hmm", None)],
)
def test_parse_option(reply, value):
    assert parse_option(reply) == value
