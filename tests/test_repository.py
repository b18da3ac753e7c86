"""Repository hygiene that a merge can break silently."""

from __future__ import annotations

import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )")


def _text_files():
    for folder in ("nemo_train", "datamodules", "configs", "docs", "scripts", "tests"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path
    yield ROOT / "README.md"
    yield ROOT / "pyproject.toml"


def test_no_merge_conflict_markers():
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in _text_files()
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if MARKER.match(line)
    ]
    assert not found, f"merge conflict markers left in {found}"


def test_test_modules_have_unique_names():
    """pytest imports test files by basename (no __init__.py), so two files with one name break collection."""
    names = collections.Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]
