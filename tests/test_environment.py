"""The environment stays put: every package the code imports is declared, and the installed versions are the
locked ones (constraints.txt, which scripts/setup.sh installs from)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: Imported only where an optional extra or an optional library is present (guarded imports).
OPTIONAL = {"deepspeed", "faiss", "torch_fidelity"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _imported_modules() -> set[str]:
    found = set()
    for folder in ("nemo_train", "datamodules"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"nemo_train", "datamodules"}


def test_every_imported_package_is_declared():
    distributions = metadata.packages_distributions()
    declared = _declared()
    missing = {
        module: distributions.get(module)
        for module in _imported_modules() - OPTIONAL
        if not {canonicalize_name(d) for d in distributions.get(module, [])} & declared
    }
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_installed_versions_are_the_locked_ones():
    locked = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if found:
            locked[canonicalize_name(found[1])] = found[2]
    declared = _declared() - {"deepspeed", "faiss-cpu"}  # optional extras, not installed by setup
    assert declared <= set(locked), f"declared but not locked: {sorted(declared - set(locked))}"
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    differ = {
        name: (version, installed.get(name)) for name, version in locked.items() if installed.get(name) != version
    }
    assert not differ, f"installed versions differ from constraints.txt (locked, installed): {differ}"
