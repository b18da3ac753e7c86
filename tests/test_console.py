"""Shared console tables."""

import io

from nemo_train.console import format_cell, print_table


def test_print_table_writes_and_returns_plain_rows():
    out = io.StringIO()
    text = print_table(["method", "acc"], [("a", 0.5), ("b", None)], title="T", file=out)
    assert out.getvalue() == text
    lines = text.splitlines()
    assert lines[0].strip() == "T"
    assert any("a" in line and "0.500" in line for line in lines)
    assert any("b" in line and "n/a" in line for line in lines)
    assert "\x1b[" not in text  # no colour codes outside a terminal


def test_format_cell():
    assert format_cell(0.12345, 2) == "0.12"
    assert format_cell(True) == "yes"
    assert format_cell(3) == "3"


def test_square_brackets_print_as_written():
    out = io.StringIO()
    text = print_table(["method", "fid[classifier]"], [("[bold]x", 1.0)], file=out)
    assert "fid[classifier]" in text and "[bold]x" in text
