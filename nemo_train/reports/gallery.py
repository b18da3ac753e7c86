"""The gallery of an explanation run's page: one card per error (its image, true and predicted class, known
cause) with one row per method (explanation, edit, edited image, CEI, judge score, grounding, consistency,
verdict), filterable by method, cause and verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nemo_train.reports.folder import RunFolder, read_records
from nemo_train.reports.html import Markup, esc, image, number, select, table

#: At most this many errors get a card (the page stays light; the count says how many there were).
MAX_ERRORS = 200
#: The judge score from which an explanation's verdict is ``match``.
MATCH_FROM = 0.5
VERDICTS = ("match", "no match", "inconsistent", "not judged", "failed")
COLUMNS = (
    "method",
    "explanation",
    "edit",
    "edited image",
    "P(true class) before \u2192 after",
    "CEI",
    "judge (reason)",
    "grounding",
    "consistent",
    "verdict",
)


def verdict(record: dict[str, Any]) -> str:
    """``failed`` (no result), ``inconsistent`` (the edit changes no factor the sentence blames; scored 0), else
    ``match`` when the judges' score is at least :data:`MATCH_FROM`, ``no match`` below, ``not judged`` without."""
    if record.get("failed"):
        return "failed"
    if record.get("consistent") is False:
        return "inconsistent"
    score = record.get("llm_match")
    if score is None:
        return "not judged"
    return "match" if score >= MATCH_FROM else "no match"


def cause_of(record: dict[str, Any]) -> str:
    """The error's established cause, or ``not established``."""
    return str(record.get("cause") or "not established")


def named_factor(record: dict[str, Any]) -> str:
    """The factor(s) the explanation blames (``+``-joined), or ``none``."""
    blamed = record.get("blamed") or []
    return "+".join(sorted(str(b) for b in blamed)) if blamed else "none"


def edit_text(instruction: Any) -> str:
    """An edit as text: ``factor \u2192 value`` pairs for a mapping, else its JSON."""
    if instruction is None:
        return "\u2013"
    if isinstance(instruction, dict) and set(instruction) == {"attribute", "value"}:
        return f"{instruction['attribute']} \u2192 {instruction['value']}"
    if isinstance(instruction, dict):
        return ", ".join(f"{k} \u2192 {v}" for k, v in instruction.items())
    return instruction if isinstance(instruction, str) else json.dumps(instruction)


def reasons_text(record: dict[str, Any]) -> str | None:
    """The judges' reasons as one text (``judge: reason`` per judge when there are several); a failed record's
    reason for failing; ``None`` when none is stored."""
    reasons = {k: v for k, v in (record.get("judge_reasons") or {}).items() if v}
    if not reasons:
        return record.get("reason") if record.get("failed") else None
    if len(reasons) == 1:
        return next(iter(reasons.values()))
    return "; ".join(f"{judge}: {text}" for judge, text in reasons.items())


def class_text(record: dict[str, Any], which: str) -> str:
    """``3`` or ``3 (three)``: the class index and its name where stored."""
    index, name = record.get(which), record.get(f"{which}_name")
    return f"{index} ({name})" if name is not None and str(name) != str(index) else str(index)


def picture(folder: RunFolder, relative: str | None, alt: str) -> Markup:
    src = folder.image(relative)
    return image(src, alt, "digit") if src else Markup('<span class="missing">not stored</span>')


def method_row(folder: RunFolder, record: dict[str, Any], label: str) -> Markup:
    """The ``<tr>`` of one method's explanation of an error."""
    kind = verdict(record)
    if kind == "failed":
        cells = [label, f"failed: {record.get('reason', '')}", *[None] * (len(COLUMNS) - 3), kind]
        cells = [esc(c) for c in cells]
    else:
        judges = record.get("judges") or {}
        judge = esc(number(record.get("llm_match")))
        if len(judges) > 1:
            judge = Markup(judge + "<br>" + "<br>".join(f"{esc(k)}: {number(v)}" for k, v in judges.items()))
        reason = reasons_text(record)
        if reason:
            judge = Markup(f'{judge}<br><span class="ci">{esc(reason)}</span>')
        cei = esc(number(record.get("cei"), 2))
        if record.get("edit_cei") is not None and record.get("edit_cei") != record.get("cei"):
            cei = Markup(f'{cei} <span class="ci">(edit alone {number(record["edit_cei"], 2)})</span>')
        blamed = named_factor(record)
        explanation = Markup(
            f'{esc(record.get("explanation") or "(empty)")}<br><span class="ci">blames: {esc(blamed)}</span>'
        )
        before_after = f"{number(record.get('p_original'))} \u2192 {number(record.get('p_edited'))}"
        cells = [
            esc(label),
            explanation,
            esc(edit_text(record.get("edit", record.get("instruction")))),
            picture(folder, record.get("edited_image_file"), f"{label}: edited image"),
            esc(before_after),
            cei,
            judge,
            esc(number(record.get("grounding"))),
            esc(number(record.get("consistent"))),
            esc(kind),
        ]
    css = f"method-row verdict-{kind.replace(' ', '-')}"
    data = f'data-method="{esc(record["method"])}" data-verdict="{esc(kind)}"'
    return Markup(f'<tr class="{css}" {data}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")


def error_card(folder: RunFolder, rows: list[dict[str, Any]], labels: dict[str, str]) -> Markup:
    """The card of one error: its image and facts, then one row per method."""
    first = rows[0]
    facts = (
        f"<b>{esc(first['target'])}</b> &middot; error {esc(first['sample_id'])}<br>"
        f"true class {esc(class_text(first, 'label'))} &middot; predicted {esc(class_text(first, 'prediction'))}<br>"
        f"known cause: <b>{esc(cause_of(first))}</b>"
    )
    stored = next((r.get("image_file") for r in rows if r.get("image_file")), None)
    head = f'<div class="error-head">{picture(folder, stored, "error image")}<div>{facts}</div></div>'
    header = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = "".join(method_row(folder, r, labels.get(r["method"], r["method"])) for r in rows)
    return Markup(
        f'<div class="error-card" data-cause="{esc(cause_of(first))}">{head}'
        f'<table class="methods"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table></div>'
    )


def gallery(folder: RunFolder, records: Sequence[dict[str, Any]], labels: dict[str, str]) -> tuple[Markup, str]:
    """The filters and the cards (errors in target then sample-id order, methods in run order); returns the HTML
    and a note saying how many errors got a card."""
    methods = list(dict.fromkeys(r["method"] for r in records))
    by_error: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        by_error.setdefault((str(r["target"]), str(r["sample_id"])), []).append(r)
    for rows in by_error.values():
        rows.sort(key=lambda r: methods.index(r["method"]))
    errors = sorted(by_error)
    shown = errors[:MAX_ERRORS]
    causes = sorted({cause_of(r) for r in records})
    present = [v for v in VERDICTS if any(verdict(r) == v for r in records)]
    filters = Markup(
        '<div class="filters">'
        + select("filter-method", "method", methods)
        + select("filter-cause", "known cause", causes)
        + select("filter-verdict", "verdict", present)
        + '<span id="gallery-count"></span></div>'
    )
    cards = "".join(error_card(folder, by_error[key], labels) for key in shown)
    note = (
        f"{len(errors)} errors, {len(methods)} methods; verdict: match when the judges' score is at least "
        f"{MATCH_FROM}, inconsistent when the applied edit changes no factor the sentence blames (scored 0)"
    )
    if len(shown) < len(errors):
        note += f"; the first {len(shown)} errors are shown"
    return Markup(filters + f'<div id="gallery">{cards}</div>'), note


def preview(folder: RunFolder, prefix: str, errors: int = 3, methods: int = 4) -> Markup:
    """A strip of the first ``errors`` errors of a written page (image, classes, each method's edited image and
    verdict) for an index page; image paths are prefixed by ``prefix``, the way from the index to ``folder``'s
    report. Empty without stored records."""
    records, _ = read_records(folder.path / "results.jsonl")
    by_error: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        by_error.setdefault((str(r["target"]), str(r["sample_id"])), []).append(r)
    names = list(dict.fromkeys(r["method"] for r in records))[:methods]

    def shown(relative: str | None, alt: str) -> Markup:
        if relative and (folder.out / relative).is_file():
            return image(f"{prefix}/{relative}", alt, "digit")
        return Markup('<span class="missing">not stored</span>')

    rows = []
    for key in sorted(by_error)[:errors]:
        rows_of = {r["method"]: r for r in by_error[key]}
        first = by_error[key][0]
        cells = [shown(first.get("image_file"), "error image"), f"true {class_text(first, 'label')}, predicted "
                 f"{class_text(first, 'prediction')}; cause: {cause_of(first)}"]  # fmt: skip
        for name in names:
            r = rows_of.get(name)
            cells.append(
                Markup(f"{shown(r.get('edited_image_file'), name + ': edited')}<br>{esc(verdict(r))}")
                if r is not None
                else esc(None)
            )
        rows.append(cells)
    return table(["error", "classes", *names], rows, "preview") if rows else Markup("")
