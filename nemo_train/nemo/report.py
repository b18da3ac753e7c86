"""The report of a NEMO evaluation: per-(method, target) scores, the printed table, W&B tables."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from nemo_train.console import print_table
from nemo_train.metrics.bootstrap import format_with_interval, interval_fields, mean_interval
from nemo_train.metrics.nemo import score_mean


@dataclass
class CellScore:
    """Scores of one method on one target's errors.

    ``llm_match`` is the mean judge-panel score over samples that were judged (NaN if none), ``cei``
    the mean CEI in percentage points over the samples that did not fail, ``n`` the samples scored,
    ``failed`` those whose language-model calls failed for good, ``empty`` the scored samples whose
    explanation came back empty (they count with CEI 0 and the judges' score), ``per_judge`` each judge's mean.
    ``stand_in`` says what wrote the explanations when the method's language model was replaced by a rule
    (e.g. ``"attribute template, not a model"``); tables show it after the method's name.
    """

    method: str
    target: str
    llm_match: float
    cei: float
    n: int
    failed: int = 0
    empty: int = 0
    per_judge: dict[str, float] = field(default_factory=dict)
    stand_in: str = ""
    #: mean share of the explanations' checkable claims that are true of the image (NaN: no claims judged)
    grounding: float = math.nan
    #: bootstrap 95 % interval of each mean (``llm_match``, ``grounding``, ``cei``) over the cell's errors
    #: (:mod:`nemo_train.metrics.bootstrap`); a mean without values has none
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: share of the explanations whose ``Edit:`` line and applied edit change a factor their sentence blames
    #: (:mod:`~nemo_train.scoring.text_edits`; NaN: no fact sheet to read them against)
    consistent: float = math.nan

    @property
    def label(self) -> str:
        """The method's name as tables show it (with its stand-in, if any)."""
        return f"{self.method} ({self.stand_in})" if self.stand_in else self.method

    def with_interval(self, metric: str, digits: int = 3) -> str:
        """``metric``'s mean and interval as a table cell, e.g. ``"0.750 [0.500, 1.000]"``."""
        return format_with_interval(getattr(self, metric), *self.intervals.get(metric, (None, None)), digits=digits)

    def to_json(self) -> dict:
        """The cell for a results json: every mean with ``<metric>_ci_low`` / ``<metric>_ci_high`` beside it."""
        out = {k: v for k, v in asdict(self).items() if k != "intervals"}
        for metric in ("llm_match", "grounding", "cei"):
            out.update(interval_fields(metric, self.intervals.get(metric)))
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in out.items()}


@dataclass
class NemoEvalSummary:
    """What ``nemo-eval`` returns (and prints): the table, the run's counts and where results are.

    Attributes:
        benchmark: the benchmark's name.
        cells: one :class:`CellScore` per (method, target), in table order.
        computed / resumed / failed: samples computed now, taken from an earlier run, failed for good now.
        failed_per_method: samples recorded as failed, per method (over the whole table).
        recomputed_because: settings that differed from an earlier run -> records recomputed for it.
        global_explanations: the global explanation of each target (``global_explanation`` runs).
        known_cause_win_rate: share of errors where the known-cause explanation beats the distractor on CEI
            (``None`` unless both reference explainers ran).
        results: the ``results.jsonl`` path.
    """

    benchmark: str
    cells: list[CellScore]
    computed: int = 0
    resumed: int = 0
    failed: int = 0
    failed_per_method: dict[str, int] = field(default_factory=dict)
    recomputed_because: dict[str, int] = field(default_factory=dict)
    global_explanations: dict[str, str] = field(default_factory=dict)
    known_cause_win_rate: float | None = None
    #: its bootstrap 95 % interval over the errors (``None`` with the rate)
    known_cause_win_rate_ci: tuple[float, float] | None = None
    results: str = ""
    #: per target, errors per established cause (benchmarks whose errors have their own cause)
    cause_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def cell(self, method: str, target: str) -> CellScore:
        """The scores of ``method`` on ``target``."""
        for c in self.cells:
            if c.method == method and c.target == target:
                return c
        raise KeyError((method, target))

    def to_json(self) -> dict:
        """What ``summary.json`` holds: the run's counts and every cell, each mean with its interval beside it."""
        out = {k: v for k, v in asdict(self).items() if k not in ("cells", "known_cause_win_rate_ci")}
        out.update(interval_fields("known_cause_win_rate", self.known_cause_win_rate_ci))
        return {**out, "cells": [c.to_json() for c in self.cells]}


def _mean(values: list[float | None]) -> float:
    """Mean of the scored values (``None`` skipped; ``math.nan`` if none): the functional core of
    :class:`~nemo_train.metrics.nemo.ScoreMean`."""
    return score_mean(values)


def summarize(records: Iterable[dict], stand_ins: dict[str, str] | None = None) -> list[CellScore]:
    """One :class:`CellScore` per (method, target), in the order the records first name them.

    ``stand_ins`` maps a method name to what replaced its language model (see :attr:`CellScore.stand_in`).
    """
    stand_ins = stand_ins or {}
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["method"], r["target"])].append(r)
    cells = []
    for (method, target), rows in groups.items():
        ok = sorted((r for r in rows if not r.get("failed")), key=lambda r: r["sample_id"])
        judges: dict[str, list[float]] = defaultdict(list)
        for r in ok:
            for name, score in r["judges"].items():
                if score is not None:
                    judges[name].append(score)
        values = {
            "llm_match": [r["llm_match"] for r in ok],
            "grounding": [r.get("grounding") for r in ok],
            "cei": [r["cei"] for r in ok],
        }
        intervals = {metric: mean_interval(v) for metric, v in values.items()}
        cells.append(
            CellScore(
                method=method,
                target=target,
                llm_match=_mean(values["llm_match"]),
                grounding=_mean(values["grounding"]),
                cei=_mean(values["cei"]),
                n=len(ok),
                failed=len(rows) - len(ok),
                empty=sum(not (r.get("explanation") or "").strip() for r in ok),
                per_judge={k: _mean(v) for k, v in judges.items()},
                stand_in=stand_ins.get(method.removesuffix("+validation"), ""),
                intervals={metric: ci for metric, ci in intervals.items() if ci is not None},
                consistent=_mean([None if r.get("consistent") is None else float(r["consistent"]) for r in ok]),
            )
        )
    return cells


def failures_per_method(cells: list[CellScore]) -> dict[str, int]:
    """Failed samples per method, over all targets (methods without failures left out)."""
    out: dict[str, int] = defaultdict(int)
    for c in cells:
        if c.failed:
            out[c.method] += c.failed
    return dict(out)


def print_report(cells: list[CellScore], benchmark: str, cei_note: str | None = None) -> str:
    """Print the table (one row per method; LLM Match and CEI per target) and return its text.

    ``cei_note`` says what derived the counterfactuals when a rule stood in for the language model.
    """
    methods = list(dict.fromkeys(c.method for c in cells))
    labels = {c.method: c.label for c in cells}
    targets = list(dict.fromkeys(c.target for c in cells))
    by_key = {(c.method, c.target): c for c in cells}
    any_failed = any(c.failed for c in cells)
    any_empty = any(c.empty for c in cells)
    grounded = any(not math.isnan(c.grounding) for c in cells)
    checked = any(not math.isnan(c.consistent) for c in cells)
    columns = ["method"]
    for t in targets:
        columns += [f"{t} LLM Match", f"{t} grounding", f"{t} CEI"] if grounded else [f"{t} LLM Match", f"{t} CEI"]
    if checked:
        columns.append("consistent")
    if any_empty:
        columns.append("empty")
    if any_failed:
        columns.append("failed")
    rows = []
    for m in methods:
        row: list = [labels[m]]
        for t in targets:
            c = by_key.get((m, t))
            scores = (
                [c.with_interval("llm_match"), c.with_interval("grounding"), c.with_interval("cei", digits=2)]
                if c
                else [None, None, None]
            )
            row += scores if grounded else [scores[0], scores[2]]
        if checked:
            mine = [by_key[(m, t)] for t in targets if (m, t) in by_key and not math.isnan(by_key[(m, t)].consistent)]
            n = sum(c.n for c in mine)
            row.append(round(sum(c.consistent * c.n for c in mine) / n, 3) if n else None)
        if any_empty:
            row.append(sum(by_key[(m, t)].empty for t in targets if (m, t) in by_key))
        if any_failed:
            row.append(sum(by_key[(m, t)].failed for t in targets if (m, t) in by_key))
        rows.append(row)
    sizes = sorted({c.n for c in cells})
    caption = f"errors per cell: {', '.join(map(str, sizes))}; [bootstrap 95 % interval over the errors]"
    caption += "; CEI in percentage points"
    if grounded:
        caption += "; grounding = share of the explanation's checkable claims true of the image"
    if cei_note:
        caption += f" ({cei_note})"
    if checked:
        caption += (
            "; consistent = share of explanations whose Edit: line and applied edit change a factor their sentence"
            " blames (an inconsistent one scores CEI 0 and LLM Match 0)"
        )
    if any_empty:
        caption += "; empty = explanations that came back empty (scored as CEI 0)"
    if any_failed:
        caption += "; failed = samples whose language-model calls failed (a rerun retries them)"
    return print_table(columns, rows, title=f"NEMO evaluation on {benchmark}", caption=caption)


def known_cause_wins(records: Iterable[dict], target: str | None = None) -> list[float]:
    """Per error with both reference explainers (in (target, sample) order): 1.0 where the known-cause
    explanation has a higher CEI than the distractor's, else 0.0."""
    by_sample: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in records:
        if (target is None or r["target"] == target) and not r.get("failed"):
            method = "Distractor" if r["method"].startswith("Distractor(") else r["method"]
            by_sample[(r["target"], r["sample_id"])][method] = r["cei"]
    pairs = [by_sample[key] for key in sorted(by_sample)]
    return [float(v["KnownCause"] > v["Distractor"]) for v in pairs if "KnownCause" in v and "Distractor" in v]


def known_cause_win_rate(records: Iterable[dict], target: str | None = None) -> tuple[float, int]:
    """Share of errors where the known-cause explanation has a higher CEI than the distractor's, and how many
    errors have both (``nan``, 0 when none has)."""
    wins = known_cause_wins(records, target)
    return (sum(wins) / len(wins), len(wins)) if wins else (math.nan, 0)
