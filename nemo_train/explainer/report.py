"""Printing explanation accuracy (per cause and the mean over the causes present) as one rich table."""

from __future__ import annotations

import math

from nemo_train.console import print_table


def print_accuracy_table(rows: dict[str, dict[str, float]], title: str | None = None) -> str:
    """Rows ``{method: per_cause_accuracy(...)}`` as percentages; a cause without pairs shows ``n/a``."""
    columns = list(next(iter(rows.values())))
    return print_table(
        ["method", *(c.capitalize() for c in columns)],
        [
            [name, *(None if math.isnan(values[c]) else round(100 * values[c], 1) for c in columns)]
            for name, values in rows.items()
        ],
        title=title,
        digits=1,
    )
