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


def test_no_two_modules_of_one_package_share_a_file_name():
    """A capability package (``nemo_train/nemo``, ``nemo_train/lbee``, ..., ``datamodules``) has one module per file
    name, so a spec and its runtime part never shadow each other (``targets.py`` beside ``components/targets.py``)."""
    packages = [p for p in (ROOT / "nemo_train").iterdir() if (p / "__init__.py").exists()] + [ROOT / "datamodules"]
    shared = {}
    for package in packages:
        names = collections.Counter(
            p.name for p in package.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
        )
        repeated = sorted(name for name, count in names.items() if count > 1)
        if repeated:
            shared[package.name] = repeated
    assert not shared
