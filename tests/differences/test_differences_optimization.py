"""Optimization (Alg. 3) with the embedded stand-ins on a model pair of known difference."""

from __future__ import annotations

import numpy as np
from rule_pair import AttributeEchoGenerator, rule_pair

from nemo_train.differences.conditions import sample_conditions
from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.evaluators import KeywordEvaluator
from nemo_train.differences.explorers import NeighbourhoodExplorer
from nemo_train.differences.generators import CMNIST_SPACE
from nemo_train.differences.methods import Optimization, OptimizationArgs, raw_differences
from nemo_train.differences.metrics import score
from nemo_train.differences.summarizers import TreeSummarizer


def parts():
    evaluator, summarizer, explorer = KeywordEvaluator(), TreeSummarizer(max_leaves=4), NeighbourhoodExplorer()
    for p in (evaluator, summarizer, explorer):
        p.bind(CMNIST_SPACE, "digit classifiers")
    return evaluator, summarizer, explorer


def test_embedded_optimization_keeps_n_best_and_never_explores_the_test_set():
    generator = AttributeEchoGenerator()
    diff = DiffModel(*rule_pair(0.9), generator, n=10)
    rng = np.random.default_rng(0)
    test = sample_conditions(CMNIST_SPACE.grid(), 200, rng)
    observed = sample_conditions(CMNIST_SPACE.grid(), 100, rng, exclude=test)
    evaluator, summarizer, explorer = parts()
    args = OptimizationArgs(iterations=4, conditions_per_iteration=10, candidates=3, initial_conditions=10)
    result = Optimization(diff, summarizer, explorer, evaluator, args, held_out=test).run(observed[:10])

    explored = [CMNIST_SPACE.parse(e["condition"]) for e in result.explored]
    assert len(explored) == len(set(explored)) == 10 + 4 * 10 == len(result.observations)
    assert not set(explored) & set(test)
    assert {e["strategy"] for e in result.explored if e["iteration"]} <= {"exploration", "exploitation", "fill"}
    for t in range(1, 5):
        round_ = [h for h in result.history if h["iteration"] == t]
        kept = sorted((h for h in round_ if h["kept"]), key=lambda h: -(h["completeness"] + h["density"]))
        assert len(kept) == min(3, len(round_)) and len(round_) <= 6  # n kept out of at most 2n
        worst_kept = kept[-1]["completeness"] + kept[-1]["density"]
        assert all(h["completeness"] + h["density"] <= worst_kept + 1e-12 for h in round_ if not h["kept"])

    diffs = diff(test)
    raw_text, _ = raw_differences(diff, observed)
    raw = score(evaluator, raw_text, test, diffs)
    best = score(evaluator, result.best.text, test, diffs)
    assert raw.token_length > 1000
    assert best.completeness + best.density > raw.completeness + raw.density
    assert best.token_length < raw.token_length / 10
    assert "digits 0, 1, 2, 3 and 4" in result.best.text
