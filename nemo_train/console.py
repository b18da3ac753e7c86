"""Console output shared by every command: rich tables, one place for number formatting.

A leaf module (imports nothing from the toolkit), so data, models, capabilities, callbacks and
scripts all print tables the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from rich.console import Console
from rich.table import Table
from typing_extensions import Unpack  # typing.Unpack needs Python 3.11

#: Width used when output is not a terminal (logs, CI, captured output): wide enough that a table
#: never wraps, so a log line holds one row.
LOG_WIDTH = 200


def make_console(file: Any = None) -> Console:
    """A rich console on ``file`` (stdout by default); no colour codes and no wrapping when not a terminal.

    Markup is off: a cell such as ``fid[classifier]`` prints as written.
    """
    file = file if file is not None else sys.stdout
    terminal = hasattr(file, "isatty") and file.isatty()
    return Console(
        file=file, width=None if terminal else LOG_WIDTH, no_color=not terminal, highlight=False, markup=False
    )


def format_cell(value: Any, digits: int = 3) -> str:
    """A table cell: floats with ``digits`` decimals, ``None`` as ``n/a``, everything else as ``str``."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


class TableOptions(TypedDict, total=False):
    """The options of :func:`make_table` and :func:`print_table` besides the columns and rows."""

    #: line above the table (default: none)
    title: str | None
    #: line below the table (default: none)
    caption: str | None
    #: decimals of float cells (default 3)
    digits: int


def make_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    title: str | None = None,
    caption: str | None = None,
    digits: int = 3,
) -> Table:
    """A rich table: first column left-aligned, the others right-aligned."""
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(format_cell(v, digits) for v in row))
    return table


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], file: Any = None, **options: Unpack[TableOptions]
) -> str:
    """Print a table (see :func:`make_table`) on ``file`` (stdout by default) and return it as plain text
    (for logs and tests)."""
    table = make_table(columns, rows, **options)
    console = make_console(file)
    with console.capture() as capture:
        console.print(table)
    text = capture.get()
    console.file.write(text)
    console.file.flush()
    return text
