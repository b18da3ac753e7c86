"""The accuracy of competency explanations per cause, in the layout of the competency-counterfactuals paper's
Tables 3 and 4: one row per condition (no counterfactual, or the counterfactual of one generator), one column per
cause of low competency and their average, for a pre-trained model and a fine-tuned one; each accuracy with a
bootstrap 95 % interval over the explanations (:mod:`nemo_train.metrics.bootstrap`).

A row's grades are ``{cause: [grade per explanation]}`` with grades in [0, 1] (1, 0.5 or 0 from a judge; 1 or 0
from the keyword rule). The average is the mean over every graded explanation, which is the paper's mean of the
six per-cause accuracies when every cause has the same number of images (as the six-cause set is drawn), and its
interval resamples the explanations of all causes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from nemo_train.console import print_table
from nemo_train.metrics.bootstrap import format_with_interval, mean_interval
from nemo_train.vocabulary import CAUSES

#: ``{cause: grades}`` of one row.
Grades = Mapping[str, Sequence[float]]


def cell(values: Sequence[float], seed: int = 0) -> dict[str, float | int | None]:
    """``{"mean", "ci_low", "ci_high", "n"}`` of ``values`` (``None`` for each where there is none)."""
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not values:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    interval = mean_interval(values, seed=seed)
    low, high = interval if interval is not None else (None, None)
    return {"mean": sum(values) / len(values), "ci_low": low, "ci_high": high, "n": len(values)}


def row_summary(grades: Grades, seed: int = 0) -> dict[str, dict]:
    """Every cause's cell and the ``average`` cell of one row."""
    out = {cause: cell(grades.get(cause, ()), seed) for cause in CAUSES}
    out["average"] = cell([g for cause in CAUSES for g in grades.get(cause, ())], seed)
    return out


def _format(summary: dict) -> str:
    return format_with_interval(summary["mean"], summary["ci_low"], summary["ci_high"])


def print_accuracy_tables(tables: Mapping[str, Mapping[str, dict]], title: str, caption: str | None = None) -> str:
    """Print one table per block (``{"pre-trained": {row: summary}, "fine-tuned": ..., "trivial": ...}``), rows
    as :func:`row_summary` gives them; returns the printed text."""
    columns = ["Method", *(c.capitalize() for c in CAUSES), "Average"]
    text = ""
    for block, rows in tables.items():
        body = [[name, *(_format(summary[c]) for c in (*CAUSES, "average"))] for name, summary in rows.items()]
        last = block == list(tables)[-1]
        text += print_table(columns, body, title=f"{title}: {block}", caption=caption if last else None)
    return text
