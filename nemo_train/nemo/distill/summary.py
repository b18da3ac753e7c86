"""The table of ``distill-eval``: each row's mean LLM Match, grounding and CEI per target, with intervals.

Every mean comes with a bootstrap 95 % interval over the row's errors (:mod:`nemo_train.metrics.bootstrap`),
computed from the stored per-error records, printed as ``mean [low, high]`` and kept beside the mean as
``<metric>_ci_low`` / ``<metric>_ci_high``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nemo_train.console import print_table
from nemo_train.metrics.bootstrap import format_with_interval, interval_fields, mean_interval
from nemo_train.metrics.nemo import score_mean

#: The means of a row, in table order, with the decimals they print with.
METRICS = {"llm_match": 3, "grounding": 3, "cei": 2}
HEADERS = {"llm_match": "LLM Match", "grounding": "grounding", "cei": "CEI"}


def mean_scores(records: Iterable[dict]) -> dict[tuple[str, str], dict[str, float | None]]:
    """Per (method, target): mean LLM Match (judged rows only), mean grounding (rows with checkable claims) and
    mean CEI, each with ``<metric>_ci_low`` / ``<metric>_ci_high`` (``None`` without values); failed rows (a
    request that failed for good; a rerun retries them) are left out. Errors are taken in sample-id order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["method"], r["target"]), []).append(r)
    out = {}
    for key, rows in groups.items():
        done = sorted((r for r in rows if not r.get("failed")), key=lambda r: str(r.get("sample_id", "")))
        cell: dict[str, float | None] = {}
        for metric in METRICS:
            values = [r.get(metric) for r in done if r.get(metric) is not None]
            cell[metric] = score_mean(values) if values else None
            cell.update(interval_fields(metric, mean_interval(values)))
        out[key] = cell
    return out


def table_rows(summary: dict[tuple[str, str], dict]) -> tuple[list[str], list[list]]:
    """Columns and rows: one row per method; LLM Match, grounding and CEI (``mean [low, high]``) per target."""
    targets = list(dict.fromkeys(t for _, t in summary))
    columns = ["method"] + [f"{t} {HEADERS[m]}" for t in targets for m in METRICS]
    rows = []
    for method in dict.fromkeys(m for m, _ in summary):
        row: list = [method]
        for t in targets:
            cell = summary.get((method, t))
            for metric, digits in METRICS.items():
                if cell is None or cell.get(metric) is None:
                    row.append(None)
                else:
                    low, high = cell.get(f"{metric}_ci_low"), cell.get(f"{metric}_ci_high")
                    row.append(format_with_interval(cell[metric], low, high, digits=digits))
        rows.append(row)
    return columns, rows


def print_summary(summary: dict[tuple[str, str], dict], title: str, judges: Sequence[str]) -> str:
    """Print the table (see :func:`table_rows`) and return it as text."""
    columns, rows = table_rows(summary)
    caption = f"LLM Match: {', '.join(judges)}; CEI in percentage points; [bootstrap 95 % interval over the errors]"
    return print_table(columns, rows, title=title, caption=caption)
