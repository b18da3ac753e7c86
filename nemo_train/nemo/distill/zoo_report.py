"""``distill-eval`` over a zoo: every row pooled over the classifiers, with two intervals, and the budget plot.

Per classifier, each row's means carry a bootstrap 95 % interval over that classifier's errors
(:mod:`nemo_train.nemo.distill.summary`). Pooled over the zoo's classifiers, a row's mean is the mean over all
their errors, with two intervals:

* over the errors (``<metric>_ci_low`` / ``_ci_high``): the pooled errors resampled, as if they came from one
  classifier: how sure the number is for *these* classifiers;
* over the classifiers (``<metric>_clf_ci_low`` / ``_clf_ci_high``): a cluster bootstrap
  (:func:`~nemo_train.metrics.bootstrap.grouped_mean_interval`, ``scipy.stats.bootstrap``): the classifiers are
  resampled with replacement and each drawn classifier brings all its errors; how sure the number is for *another*
  zoo drawn the same way. With few classifiers it is wide, and with two it spans the two classifiers' means.

A row's ``edits`` is its mean number of counterfactual tests per error (the CEIs its records keep in
``candidate_cei``: 0 for a single answer, the candidate edits for the exhaustive teacher). :func:`plot_budget`
draws LLM Match and CEI against edits per error: the student rows with a budget as a curve, the teacher as a point.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

from nemo_train.console import print_table
from nemo_train.metrics.bootstrap import format_with_interval, grouped_mean_interval, interval_fields, mean_interval
from nemo_train.metrics.nemo import score_mean
from nemo_train.nemo.distill.summary import HEADERS, METRICS

#: The pooled column's name in ``summary.json``.
POOLED = "pooled"


def classifier_interval(groups: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """Bootstrap 95 % interval of the pooled mean with the classifiers resampled (each a group of its errors'
    values; ``scipy.stats.bootstrap`` through :func:`~nemo_train.metrics.bootstrap.grouped_mean_interval`)."""
    return grouped_mean_interval(groups)


def pooled_scores(records: Iterable[dict], targets: Sequence[str]) -> dict[str, dict[str, float | None]]:
    """Per method, over the errors of ``targets``: each metric's pooled mean with its interval over the errors and
    over the classifiers, the classifiers it covers, and ``edits`` (mean tests per error). Failed records (a
    rerun retries them) are left out."""
    by_method: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        if r.get("target") in targets and not r.get("failed"):
            by_method.setdefault(r["method"], {}).setdefault(r["target"], []).append(r)
    out: dict[str, dict[str, float | None]] = {}
    for method, per_target in by_method.items():
        rows = [r for t in targets for r in per_target.get(t, [])]
        cell: dict[str, float | None] = {"classifiers": len(per_target), "errors": len(rows)}
        for metric in METRICS:
            groups = [[r[metric] for r in per_target.get(t, []) if r.get(metric) is not None] for t in targets]
            values = [v for group in groups for v in group]
            cell[metric] = score_mean(values) if values else None
            cell.update(interval_fields(metric, mean_interval(values)))
            cell.update(interval_fields(f"{metric}_clf", classifier_interval(groups)))
        cell["edits"] = score_mean([len(r.get("candidate_cei") or []) for r in rows]) if rows else None
        out[method] = cell
    return out


def print_pooled(pooled: dict[str, dict], title: str) -> str:
    """The pooled table: per row, each metric with its interval over the errors and over the classifiers."""
    columns = ["method", "classifiers", "errors", "edits / error"]
    for metric in METRICS:
        columns += [HEADERS[metric], f"{HEADERS[metric]} [classifiers]"]
    rows = []
    for method, cell in pooled.items():
        row: list = [method, cell["classifiers"], cell["errors"], cell["edits"]]
        for metric, digits in METRICS.items():
            if cell.get(metric) is None:
                row += [None, None]
                continue
            row.append(format_with_interval(cell[metric], cell[f"{metric}_ci_low"], cell[f"{metric}_ci_high"], digits))
            low, high = cell[f"{metric}_clf_ci_low"], cell[f"{metric}_clf_ci_high"]
            row.append("-" if low is None else f"[{low:.{digits}f}, {high:.{digits}f}]")
        rows.append(row)
    caption = "mean [bootstrap 95 % interval over the errors]; [classifiers]: the classifiers resampled"
    return print_table(columns, rows, title=title, caption=caption, digits=1)


def budget_points(
    pooled: dict[str, dict], budget_rows: Sequence[str], teacher: str | None, rule_rows: Sequence[str] = ()
) -> dict[str, list]:
    """``{"student": [(edits, llm_match, cei), ...] (by edits), "rule": [...] (the evidence's order with no
    explainer, by edits), "teacher": [(edits, llm_match, cei)]}``."""
    points: dict[str, list] = {"student": [], "rule": [], "teacher": []}
    for key, methods in (("student", budget_rows), ("rule", rule_rows)):
        for method in methods:
            cell = pooled.get(method)
            if cell is not None and cell.get("edits") is not None:
                points[key].append((cell["edits"], cell["llm_match"], cell["cei"]))
        points[key].sort(key=lambda p: p[0])
    if teacher is not None and teacher in pooled and pooled[teacher].get("edits") is not None:
        cell = pooled[teacher]
        points["teacher"].append((cell["edits"], cell["llm_match"], cell["cei"]))
    return points


def plot_budget(points: dict[str, list], path: str | Path, title: str) -> Path | None:
    """A PNG of LLM Match and CEI against edits per error (the student's budget curve, the evidence rule's curve
    beside it where measured, the teacher's point); ``None`` without a student point."""
    if not points["student"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for axis, index, label in ((axes[0], 1, "LLM Match"), (axes[1], 2, "CEI (points)")):
        student = [p for p in points["student"] if p[index] is not None]
        axis.plot([p[0] for p in student], [p[index] for p in student], "o-", label="student (edits budget)")
        rule = [p for p in points.get("rule", []) if p[index] is not None]
        if rule:
            xs, ys = [p[0] for p in rule], [p[index] for p in rule]
            axis.plot(xs, ys, "x--", color="grey", label="evidence's order, no explainer (a rule)")
        for p in points["teacher"]:
            if p[index] is not None:
                axis.plot([p[0]], [p[index]], "s", color="black", label="exhaustive teacher")
        axis.set_xscale("symlog", linthresh=1.0)
        axis.set_xlabel("edits per error (mean)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path.with_suffix(".tmp.png"), dpi=110)
    plt.close(fig)
    path.with_suffix(".tmp.png").replace(path)
    return path
