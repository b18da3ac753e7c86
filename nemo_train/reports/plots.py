"""The plots of an explanation run's page (matplotlib ``Figure`` objects, no pyplot state): the share of each
factor among the errors' true causes and among the factors each method named, and each method's CEI."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure


def share_rows(counts: Mapping[str, Counter]) -> tuple[list[str], list[str], list[list[float]]]:
    """Rows, factors (in order of first appearance) and per row the share of each factor among its counts."""
    rows = list(counts)
    factors = list(dict.fromkeys(f for row in rows for f in counts[row]))
    shares = []
    for row in rows:
        total = sum(counts[row].values())
        shares.append([counts[row][f] / total if total else 0.0 for f in factors])
    return rows, factors, shares


def cause_shares_figure(counts: Mapping[str, Counter]) -> Figure:
    """One stacked horizontal bar per row (``true cause`` and each method): the share of the errors per factor."""
    rows, factors, shares = share_rows(counts)
    figure = Figure(figsize=(8, 0.5 * len(rows) + 1.6))
    axes = figure.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(factors))]
    left = [0.0] * len(rows)
    for j, factor in enumerate(factors):
        widths = [s[j] for s in shares]
        axes.barh(range(len(rows)), widths, left=left, color=colours[j], label=factor)
        left = [a + b for a, b in zip(left, widths)]
    axes.set_yticks(range(len(rows)), rows)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of the errors")
    axes.set_title("True cause and the factor each method named")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(len(factors), 6), fontsize="small")
    return figure


def cei_figure(values: Mapping[str, Sequence[float]]) -> Figure:
    """A box per method of its CEI values (percentage points), with each value as a dot."""
    methods = [m for m, v in values.items() if len(v)]
    figure = Figure(figsize=(8, 0.45 * len(methods) + 1.4))
    axes = figure.add_subplot()
    if methods:
        data = [list(values[m]) for m in methods]
        axes.boxplot(data, vert=False, widths=0.6, showfliers=False)
        for i, row in enumerate(data, start=1):
            axes.plot(row, [i] * len(row), "o", color="C0", alpha=0.35, markersize=3)
        axes.set_yticks(range(1, len(methods) + 1), methods)
        axes.invert_yaxis()
    axes.axvline(0, color="#888", linewidth=0.8)
    axes.set_xlabel("CEI (percentage points)")
    axes.set_title("CEI per error")
    return figure
