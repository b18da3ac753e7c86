"""HTML pieces of a report page: escaping, numbers with intervals, tables, images, and the page itself.

A page is plain HTML with its style inline and a few lines of plain JavaScript for the gallery's filters; it
needs no server, no network and no framework. Text is escaped here; a :class:`Markup` value is HTML already.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemo_train.console import format_cell


class Markup(str):
    """A string that is HTML already (not escaped again)."""


def esc(value: Any) -> Markup:
    """``value`` as HTML text (``Markup`` as is; ``None`` as an en dash)."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("&ndash;")
    if isinstance(value, float):
        return Markup(number(value))
    return Markup(html.escape(str(value), quote=True))


def number(value: Any, digits: int = 3) -> str:
    """A number as a table shows it: floats with ``digits`` decimals, ``None`` and NaN as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "\u2013"
    return format_cell(value, digits)  # the console tables' cell, but an en dash for a missing value


def with_interval(mean: Any, low: Any, high: Any, digits: int = 3) -> Markup:
    """``mean [low, high]`` (the interval in a smaller, grey span), or the mean alone without an interval."""
    text = esc(number(mean, digits))
    if mean is None or low is None or high is None:
        return text
    return Markup(f'{text} <span class="ci">[{number(low, digits)}, {number(high, digits)}]</span>')


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], css: str = "") -> Markup:
    """A table: ``columns`` as its header, one ``<tr>`` per row (cells escaped unless :class:`Markup`)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return Markup(f'<table class="{esc(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def image(src: str, alt: str, css: str = "") -> Markup:
    """An ``<img>`` of ``src`` (a path relative to the page)."""
    return Markup(f'<img src="{esc(src)}" alt="{esc(alt)}" class="{esc(css)}" loading="eager">')


def figure(src: str, caption: str, css: str = "plot") -> Markup:
    """An image with a caption under it."""
    return Markup(f"<figure>{image(src, caption, css)}<figcaption>{esc(caption)}</figcaption></figure>")


def paragraph(text: Any, css: str = "") -> Markup:
    return Markup(f'<p class="{esc(css)}">{esc(text)}</p>')


def select(ident: str, label: str, choices: Sequence[str]) -> Markup:
    """A ``<select>`` with an "all" choice first (value ``""``), then ``choices``."""
    options = '<option value="">all</option>' + "".join(f'<option value="{esc(c)}">{esc(c)}</option>' for c in choices)
    return Markup(f'<label>{esc(label)} <select id="{esc(ident)}" class="filter">{options}</select></label>')


@dataclass
class Section:
    """One part of a page: a title, its HTML body and an optional note under the title (what is not stored)."""

    title: str
    body: Markup
    note: str | None = None

    def render(self) -> str:
        note = f'<p class="note">{esc(self.note)}</p>' if self.note else ""
        return f"<section><h2>{esc(self.title)}</h2>{note}{self.body}</section>"


@dataclass
class Page:
    """A report page: title, facts about the run (label -> value), sections, and ``partial`` (why the results
    are incomplete, shown as a banner) when the run stopped early."""

    title: str
    facts: list[tuple[str, Any]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    partial: str | None = None
    #: lines about what was read (e.g. unreadable lines skipped), shown under the facts
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in self.facts)
        banner = f'<p class="partial" id="partial">partial results: {esc(self.partial)}</p>' if self.partial else ""
        sections = "".join(f'<p class="note">{esc(n)}</p>' for n in self.notes)
        sections += "".join(s.render() for s in self.sections)
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title><style>{STYLE}</style></head><body>"
            f'<h1>{esc(self.title)}</h1>{banner}<dl class="facts">{facts}</dl>{sections}'
            f"<script>{FILTER_SCRIPT}</script></body></html>\n"
        )


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1500px}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top}
th{background:#f2f2f2;text-align:left}.ci{color:#777;font-size:.9em}.note{color:#555;font-style:italic}
.partial{background:#fff3cd;border:1px solid #e0b000;padding:.5em;font-weight:bold}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:bold}dd{margin:0}
img.digit{width:84px;height:84px;image-rendering:pixelated;border:1px solid #999}
img.plot{max-width:760px}figure{display:inline-block;margin:.5em}figcaption{color:#555;font-size:.9em}
.error-card{border:1px solid #bbb;border-radius:4px;margin:.6em 0;padding:.5em}
.error-head{display:flex;gap:1em;align-items:center}.filters{margin:.5em 0;display:flex;gap:1.2em}
.verdict-match{background:#e3f6e3}.verdict-no-match{background:#fbe4e4}
.verdict-inconsistent{background:#fdf0d8}.verdict-failed{background:#eee}
.missing{color:#999;font-size:.85em}[hidden]{display:none!important}
"""

#: The gallery's filters: a method row shows when it matches the method and verdict filters; an error card
#: shows when its cause matches and one of its rows shows. The count line says how many cards show.
FILTER_SCRIPT = """
function applyFilters(){
  var get=function(id){var e=document.getElementById(id);return e?e.value:'';};
  var m=get('filter-method'),c=get('filter-cause'),v=get('filter-verdict'),shown=0;
  var cards=document.querySelectorAll('.error-card');
  cards.forEach(function(card){
    var any=false;
    card.querySelectorAll('.method-row').forEach(function(row){
      var ok=(!m||row.dataset.method===m)&&(!v||row.dataset.verdict===v);
      row.hidden=!ok;if(ok){any=true;}
    });
    var ok=any&&(!c||card.dataset.cause===c);card.hidden=!ok;if(ok){shown++;}
  });
  var count=document.getElementById('gallery-count');
  if(count){count.textContent=shown+' of '+cards.length+' errors shown';}
}
document.querySelectorAll('select.filter').forEach(function(s){s.addEventListener('change',applyFilters);});
applyFilters();
"""
