"""Markdown tables of ``distill-eval`` runs over a held-out zoo: every row pooled, with both intervals, and the bars.

Reads ``<run>/summary.json`` (its ``pooled`` rows) and ``<run>/results.jsonl`` (per error: the established cause
and what each row blamed) of each run given, and prints, per run:

* the pooled table: LLM Match ``[errors] [classifiers]``, exact-match share, CEI ``[errors] [classifiers]``, the
  share of errors whose blamed factor is the established cause;
* the causes of the pooled errors (share of each factor);
* with ``--per_classifier``, LLM Match / CEI of every row on every classifier.

    python scripts/zoo_bars_table.py /tmp/hz/eval_balanced_multi3 /tmp/hz/eval_gaps_a_multi
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def _cell(row: dict, metric: str, digits: int) -> str:
    mean = row.get(metric)
    if mean is None:
        return "-"
    out = f"{mean:.{digits}f}"
    for suffix in ("ci", "clf_ci"):
        low, high = row.get(f"{metric}_{suffix}_low"), row.get(f"{metric}_{suffix}_high")
        if low is not None and high is not None:
            out += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return out


def run_table(folder: Path) -> str:
    summary = json.loads((folder / "summary.json").read_text())
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    targets = summary.get("pooled_targets") or sorted({r["target"] for r in records})
    records = [r for r in records if r["target"] in targets and not r.get("failed")]
    right: dict[str, list[bool]] = {}
    exact: dict[str, list[bool]] = {}
    for r in records:
        right.setdefault(r["method"], []).append(list(r.get("blamed") or []) == [r.get("cause")])
        exact.setdefault(r["method"], []).append((r.get("llm_match") or 0.0) >= 1.0)
    lines = [
        f"{folder}: {len(targets)} classifiers",
        "",
        "| row | errors | LLM Match [errors] [classifiers] | exact | CEI [errors] [classifiers] | right factor |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for method, row in (summary.get("pooled") or {}).items():
        n = len(right.get(method, []))
        share = sum(right.get(method, [])) / n if n else float("nan")
        exact_share = sum(exact.get(method, [])) / n if n else float("nan")
        lines.append(
            f"| {method} | {n} | {_cell(row, 'llm_match', 3)} | {exact_share:.3f} | {_cell(row, 'cei', 2)} "
            f"| {share:.3f} |"
        )
    causes = Counter({r["sample_id"] + r["target"]: r.get("cause") for r in records}.values())
    total = sum(causes.values())
    shown = ", ".join(f"{c} {n / total:.1%}" for c, n in causes.most_common())
    lines += ["", f"causes of the {total} pooled errors: {shown}", ""]
    return "\n".join(lines)


def per_classifier(folder: Path) -> str:
    """LLM Match / CEI of every row on every classifier (one column per row)."""
    summary = json.loads((folder / "summary.json").read_text())
    cells = {tuple(key.split("|", 1)): cell for key, cell in summary["summary"].items()}
    methods = list(dict.fromkeys(m for m, _ in cells))
    targets = summary.get("pooled_targets") or list(dict.fromkeys(t for _, t in cells))
    lines = ["| classifier | " + " | ".join(methods) + " |", "| --- |" + " --- |" * len(methods)]
    for target in targets:
        shown = []
        for method in methods:
            cell = cells.get((method, target)) or {}
            match, cei = cell.get("llm_match"), cell.get("cei")
            shown.append("-" if match is None else f"{match:.3f} / {cei:.1f}")
        lines.append(f"| {target} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="distill-eval out_dir folders")
    parser.add_argument("--per_classifier", action="store_true", help="also every row on every classifier")
    args = parser.parse_args()
    for folder in args.runs:
        print(run_table(folder))
        if args.per_classifier:
            print(per_classifier(folder))


if __name__ == "__main__":
    main()
