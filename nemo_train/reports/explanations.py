"""The sections of an explanation run (``nemo-eval``, ``distill-eval``), drawn from its stored records.

* the table: per method and target, LLM Match, grounding and CEI with their bootstrap 95 % intervals (from
  ``summary.json``; a run killed before writing it gets the same table computed from the stored records by
  the command's own :func:`~nemo_train.nemo.report.summarize`), the consistency share and the failures;
* plots: the share of each factor among the true causes and among the factors each method named; CEI per error;
* the confusion of the factor each method named against the error's established cause;
* the gallery (:mod:`nemo_train.reports.gallery`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from nemo_train.nemo.report import summarize
from nemo_train.reports.folder import RunFolder, read_records
from nemo_train.reports.gallery import cause_of, gallery, named_factor
from nemo_train.reports.html import Markup, Page, Section, esc, figure, table, with_interval
from nemo_train.reports.plots import cause_shares_figure, cei_figure

METRICS = (("llm_match", 3), ("grounding", 3), ("cei", 2))


def stored_cells(folder: RunFolder) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The table the run stored (``summary.json``: ``nemo-eval``'s ``cells``, ``distill-eval``'s ``summary``), per
    (method, target); ``None`` when the run wrote none."""
    summary = folder.json("summary.json")
    if not isinstance(summary, dict):
        return None
    if isinstance(summary.get("cells"), list):
        return {(c["method"], c["target"]): c for c in summary["cells"] if isinstance(c, dict)}
    if isinstance(summary.get("summary"), dict):
        return {tuple(key.split("|", 1)): cell for key, cell in summary["summary"].items() if "|" in key}
    return None


def table_rows(records: list[dict[str, Any]], stored: dict | None) -> tuple[list[list[Any]], dict[str, str]]:
    """One row per (method, target) and the methods' labels (with a stand-in where the run named one)."""
    rows, labels = [], {}
    for cell in summarize(records):
        scores = {**cell.to_json(), **(stored or {}).get((cell.method, cell.target), {})}
        label = f"{cell.method} ({scores['stand_in']})" if scores.get("stand_in") else cell.method
        labels[cell.method] = label
        means = [
            with_interval(scores.get(m), scores.get(f"{m}_ci_low"), scores.get(f"{m}_ci_high"), digits)
            for m, digits in METRICS
        ]
        rows.append([label, cell.target, cell.n, *means, scores.get("consistent"), cell.failed])
    return rows, labels


def confusion(records: list[dict[str, Any]]) -> Markup:
    """Per method: rows the established cause, columns the factor the explanation named, cells error counts."""
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if not r.get("failed"):
            by_method[r["method"]].append(r)
    parts = []
    for method, rows in by_method.items():
        counts = Counter((cause_of(r), named_factor(r)) for r in rows)
        causes = sorted({c for c, _ in counts})
        named = sorted({n for _, n in counts})
        body = [[cause, *[counts.get((cause, n), 0) or "" for n in named]] for cause in causes]
        agree = sum(v for (c, n), v in counts.items() if c == n)
        grid = table(["cause \u2193 / named \u2192", *named], body, "confusion")
        summary = f"{esc(method)}: names the established cause for {agree} of {len(rows)} errors"
        parts.append(f"<details open><summary>{summary}</summary>{grid}</details>")
    return Markup("".join(parts))


def plots(folder: RunFolder, records: list[dict[str, Any]], labels: dict[str, str]) -> Markup:
    """The two plots as PNG files next to the page."""
    done = [r for r in records if not r.get("failed")]
    errors = {(r["target"], r["sample_id"]): cause_of(r) for r in done}
    counts: dict[str, Counter] = {}
    if any(c != "not established" for c in errors.values()):
        counts["true cause"] = Counter(errors.values())
    cei: dict[str, list[float]] = defaultdict(list)
    for r in done:
        counts.setdefault(labels.get(r["method"], r["method"]), Counter())[named_factor(r)] += 1
        if r.get("cei") is not None:
            cei[labels.get(r["method"], r["method"])].append(float(r["cei"]))
    shares = folder.save_figure(cause_shares_figure(counts), "cause_shares.png")
    spread = folder.save_figure(cei_figure(cei), "cei.png")
    return Markup(
        figure(shares, "share of each factor among the established causes and the factors each method named")
        + figure(spread, "CEI per error and method (box: quartiles; dots: errors)")
    )


def explanation_report(folder: RunFolder, report: Page) -> None:
    """Add the sections of a ``nemo-eval`` / ``distill-eval`` run to ``report`` (marked partial without its
    ``summary.json``)."""
    records, skipped = read_records(folder.path / "results.jsonl")
    stored = stored_cells(folder)
    if stored is None:
        report.partial = "the run stopped before writing summary.json; the table is computed from the stored records"
    if skipped:
        report.notes.append(f"{skipped} unreadable line(s) of results.jsonl skipped")
    summary = folder.json("summary.json") if stored is not None else None
    if isinstance(summary, dict):
        for name, text in (summary.get("global_explanations") or {}).items():
            report.facts.append((f"global explanation ({name})", text))
        if summary.get("known_cause_win_rate") is not None:
            report.facts.append(("KnownCause beats Distractor on CEI", f"{summary['known_cause_win_rate']:.3f}"))
    if not records:
        report.sections.append(Section("Results", Markup(""), "no result records stored yet"))
        return
    rows, labels = table_rows(records, stored)
    columns = ["method", "target", "errors", "LLM Match", "grounding", "CEI (pp)", "consistent", "failed"]
    report.sections.append(
        Section(
            "Scores per method",
            table(columns, rows, "summary"),
            "mean [bootstrap 95 % interval over the errors]; CEI in percentage points; consistent = share of "
            "explanations whose applied edit changes a factor their sentence blames",
        )
    )
    report.sections.append(Section("Causes and CEI", plots(folder, records, labels)))
    report.sections.append(
        Section("Named factor against the established cause", confusion(records), "error counts per method")
    )
    body, note = gallery(folder, records, labels)
    if not any(r.get("image_file") for r in records):
        note += "; this run stored no images (it was computed before images were kept beside the records)"
    if not any(r.get("judge_reasons") for r in records):
        note += "; not stored: the judges' reasons (kept by runs from this version on)"
    note += "; not stored: the classifier's predicted class on the edited image"
    report.sections.append(Section("Errors", body, note))
