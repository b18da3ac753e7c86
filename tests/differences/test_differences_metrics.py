"""Completeness, Density, Token Length and attribution checked by hand and against references."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources

import numpy as np
import pytest
import tiktoken
from scipy.stats import pearsonr

from nemo_train.differences.conditions import Condition
from nemo_train.differences.evaluators import Evaluator
from nemo_train.differences.metrics import (
    THRESHOLDS,
    attribution,
    completeness,
    curve_auc,
    density,
    density_from_answers,
    effective_token_ratio,
    normalise_attributions,
    pearson,
    score,
    score_intervals,
    token_classes,
)
from nemo_train.differences.tokens import O200K_SHA256, O200K_URL, drop_tokens, install_o200k, token_length, tokenize


class TableEvaluator(Evaluator):
    """Answers from a fixed table (condition index -> answer)."""

    def __init__(self, answers):
        super().__init__()
        self.table = answers

    def answer(self, pairs):
        return [self.table[c.label] for _, c in pairs]


class KeyTokenEvaluator(Evaluator):
    """Answers the true sign when the text holds " KEY", the opposite when it also holds " NOT", else 0."""

    def __init__(self, signs):
        super().__init__()
        self.signs, self.seen = signs, []

    def answer(self, pairs):
        out = []
        for text, c in pairs:
            self.seen.append(text)
            s = self.signs[c.label]
            out.append(0 if "KEY" not in text else (-s if "NOT" in text else s))
        return out


def conds(k):
    return [Condition(text=f"c{i}", label=i) for i in range(k)]


def test_pearson_by_hand_and_scipy():
    x, y = [0.9, -0.8, 0.0, 0.5], [1, -1, 0, 0]
    # by hand: means 0.15 and 0; deviations x: .75 -.95 -.15 .35; y: 1 -1 0 0
    cov = 0.75 * 1 + (-0.95) * (-1)
    expected = cov / np.sqrt((0.75**2 + 0.95**2 + 0.15**2 + 0.35**2) * 2)
    assert pearson(x, y) == pytest.approx(expected)
    assert pearson(x, y) == pytest.approx(pearsonr(x, y).statistic)
    assert pearson(x, [0, 0, 0, 0]) == 0.0  # an evaluator that never commits explains nothing


def test_completeness_on_crafted_table():
    diffs = [0.9, -0.7, 0.0, 0.2, -0.1]
    answers = [1, -1, 0, 0, 1]
    value, got = completeness(TableEvaluator(answers), "any", conds(5), diffs)
    assert got == answers
    assert value == pytest.approx(pearsonr(diffs, answers).statistic)


def test_density_informative_redundant_and_misleading_tokens():
    rng = np.random.default_rng(0)
    diffs = rng.normal(size=40)
    signs = np.sign(diffs).astype(int)
    c = conds(40)
    assert len(tokenize(" KEY filler filler filler")) == 4
    # one informative token among four; a quarter dropped per question
    ev = KeyTokenEvaluator(signs)
    result = density(ev, " KEY filler filler filler", c, diffs, drop_ratio=0.25, seed=3)
    lost = [np.random.default_rng([3, 0, i]).choice(4, 1, replace=False)[0] == 0 for i in range(40)]
    by_hand = pearson(diffs, signs) - pearson(diffs, [0 if gone else s for gone, s in zip(lost, signs)])
    assert result.density == pytest.approx(by_hand)
    assert result.density > 0
    # the key token four times: dropping one never loses it -> every token unnecessary on its own
    assert density(KeyTokenEvaluator(signs), " KEY KEY KEY KEY", c, diffs, seed=3).density == 0.0
    # everything dropped -> Density equals Completeness
    full = density(KeyTokenEvaluator(signs), " KEY filler", c, diffs, drop_ratio=1.0)
    assert full.density == pytest.approx(full.completeness)
    # a misleading token: removing " NOT" helps
    assert density(KeyTokenEvaluator(signs), " KEY NOT", c, diffs, drop_ratio=0.5).density < 0
    assert density_from_answers(np.array(diffs), signs, np.array([signs])) == 0.0


def test_attribution_token_classes_and_token_ratio_curve():
    signs = np.array([1, -1] * 15)
    diffs = signs.astype(float)  # Completeness of a perfect reader is exactly 1
    item = attribution(KeyTokenEvaluator(signs), " KEY filler", conds(30), diffs)
    assert item.tokens == [" KEY", " filler"]
    assert item.delta == pytest.approx([1.0, 0.0])  # C(e) = 1; without KEY 0; without filler 1
    assert token_classes(item.delta) == {"informative": 1, "misleading": 0, "unnecessary": 1}
    other = attribution(KeyTokenEvaluator(signs), " KEY NOT", conds(30), diffs)
    assert other.delta == pytest.approx([-1.0, -2.0])  # C(e) = -1; without KEY 0; without NOT +1
    assert token_classes(other.delta)["misleading"] == 2
    normalise_attributions([item, other])  # one shared factor: the largest positive change (1.0 here)
    assert item.scores == pytest.approx([1.0, 0.0]) and other.scores == pytest.approx([0.0, 0.0])
    ratios = effective_token_ratio(np.array([0.0, 0.5, 1.0, 0.2]))
    assert ratios[0] == 0.75 and ratios[THRESHOLDS.tolist().index(0.5)] == 0.25 and ratios[-1] == 0.0
    # a token scored 1.0 exceeds every threshold below 1: area 0.95 of the unit square
    assert curve_auc(THRESHOLDS, effective_token_ratio(np.array([1.0]))) == pytest.approx(0.975)


def test_token_length_offline_matches_tiktoken(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path = install_o200k(tmp_path)
    assert path.name == hashlib.sha1(O200K_URL.encode()).hexdigest()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == O200K_SHA256
    packed = resources.files("bpe_openai").joinpath("data", "o200k_base.tiktoken.gz").read_bytes()
    assert gzip.decompress(packed) == path.read_bytes()
    path.write_bytes(b"corrupted")  # a bad cached file is replaced, never trusted
    assert hashlib.sha256(install_o200k(tmp_path).read_bytes()).hexdigest() == O200K_SHA256
    sentence = "Model A is worse than model B when the digits of 0, 1, 2, 3, and 4 are not colored in red."
    reference = tiktoken.get_encoding("o200k_base").encode(sentence)
    # 17 word tokens, 4 commas, the full stop, and each of the five digits with its own space token: 32
    assert token_length(sentence) == len(reference) == 32


def test_drop_tokens_removes_a_quarter():
    kept, mask = drop_tokens(list(range(20)), 0.25, np.random.default_rng(0))
    assert mask.sum() == 5 and len(kept) == 15 and kept == [i for i in range(20) if not mask[i]]


def test_score_intervals_resample_conditions_with_their_answers():
    """Completeness / Density intervals from the stored answers, against a numpy paired bootstrap of the same
    conditions (same seed and draws as scipy's percentile bootstrap)."""
    signs = [1, -1, 1, 1, -1, 1, -1, -1, 1, 1, -1, 1]
    diffs = [0.8, -0.5, 0.3, 0.9, -0.7, 0.2, -0.4, -0.6, 0.5, 0.1, -0.2, 0.7]
    evaluator = KeyTokenEvaluator(signs)
    text = "Model A is better on KEY shapes and worse on thin strokes of every digit seen"
    s = score(evaluator, text, conds(12), diffs, repeats=2)
    assert s.completeness == pytest.approx(pearson(diffs, s.answers)) and s.dropped.shape == (2, 12)
    intervals = score_intervals(diffs, s.answers, s.dropped)
    index = np.random.default_rng(0).integers(0, 12, (2000, 12))
    d, full, dropped = np.asarray(diffs), np.asarray(s.answers, float), s.dropped
    comp = [pearson(d[i], full[i]) for i in index]
    dens = [density_from_answers(d[i], full[i], dropped[:, i]) for i in index]
    assert intervals["completeness_ci_low"] == pytest.approx(np.percentile(comp, 2.5))
    assert intervals["completeness_ci_high"] == pytest.approx(np.percentile(comp, 97.5))
    assert intervals["density_ci_low"] == pytest.approx(np.percentile(dens, 2.5))
    assert intervals["density_ci_high"] == pytest.approx(np.percentile(dens, 97.5))
