"""The import contract in pyproject.toml: imports go one way through the layers, and lint-imports enforces it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run lint-imports on the tree at ``root`` (its pyproject.toml, its packages), writing no cache."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
    )


def copy_tree(dest: Path) -> Path:
    """The packages and pyproject.toml, copied (so a test can change them without touching the repository)."""
    for package in ("nemo_train", "datamodules"):
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_package_keeps_the_import_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_a_back_edge_breaks_the_contract(tmp_path):
    tree = copy_tree(tmp_path)
    before = lint_imports(tree)
    assert "datamodules.base -> nemo_train.nemo" not in before.stdout
    base = tree / "datamodules" / "base.py"
    base.write_text(base.read_text() + "\nimport nemo_train.nemo  # a data module reaching up into a capability\n")
    after = lint_imports(tree)
    assert after.returncode != 0
    assert "datamodules is not allowed to import nemo_train.nemo" in after.stdout
    assert "datamodules.base -> nemo_train.nemo" in after.stdout


def test_capability_packages_may_not_import_each_other(tmp_path):
    tree = copy_tree(tmp_path)
    module = tree / "nemo_train" / "competency" / "__init__.py"
    module.write_text(module.read_text() + "\nimport nemo_train.nemo  # one capability importing another\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "nemo_train.competency -> nemo_train.nemo" in result.stdout


def test_no_module_is_over_400_lines():
    """A module that grows past a screenful of screens is split into named modules (one job per file)."""
    long = {
        str(path.relative_to(ROOT)): count
        for package in ("nemo_train", "datamodules")
        for path in (ROOT / package).rglob("*.py")
        if (count := len(path.read_text().splitlines())) > 400
    }
    assert not long, f"modules over 400 lines: {long}"


def test_the_multimodal_model_has_one_loader():
    """Training (``ExplainerModule``) and serving (``HFLocalBackend``) load the multimodal model and its adapter
    through ``models.vlm.load_vlm`` / ``attach_adapter``: no other module calls ``from_pretrained`` on them."""
    calls = ("AutoModelForImageTextToText.from_pretrained", "PeftModel.from_pretrained")
    found = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "nemo_train").rglob("*.py")
        if any(call in path.read_text() for call in calls)
    }
    assert found == {"nemo_train/models/vlm.py"}
    users = ("nemo_train/explainer/module.py", "nemo_train/backends/hf_local.py")
    assert all("load_vlm(" in (ROOT / user).read_text() for user in users)
