"""Every example of docs/EXTENDING.md runs as written: the page's files are saved in a temporary folder (with a
``configs`` link to the repository's presets), and its commands run there in the page's order, ``nemo-train``
in-process through ``nemo_train.cli.main`` and ``python script.py`` through ``runpy``."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import runpy
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from nemo_train.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "EXTENDING.md"
BLOCK = re.compile(r'^```(?P<lang>\w+)(?: title="(?P<title>[^"]+)")?\n(?P<body>.*?)^```', re.S | re.M)
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass
class Section:
    title: str
    files: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)


def read_sections(text: str) -> dict[int, Section]:
    """The numbered sections (``## 1. ...``) of the page: their files (titled blocks) and command lines (bash)."""
    sections = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = part.splitlines()[0]
        number = re.match(r"(\d+)\.", heading)
        if number is None:
            continue
        section = Section(heading)
        for block in BLOCK.finditer(part):
            if block["title"]:
                section.files[block["title"]] = block["body"]
            elif block["lang"] == "bash":
                joined = re.sub(r"\\\n\s*", " ", block["body"])
                section.commands += [line.strip() for line in joined.splitlines() if line.strip()]
        sections[int(number[1])] = section
    return sections


TEXT = DOC.read_text(encoding="utf-8")
SECTIONS = read_sections(TEXT)
MODULES = [name.removesuffix(".py") for s in SECTIONS.values() for name in s.files if name.endswith(".py")]


def run_line(line: str, folder: Path) -> None:
    """One command line of the page, run in ``folder`` as a shell there would (``VAR=value`` prefixes honoured)."""
    words = shlex.split(line, comments=True)
    if not words:  # a comment line
        return
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert set(env) <= {"PYTHONPATH"}, f"unexpected environment {env} in {line!r}"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        if env.get("PYTHONPATH") == ".":
            patch.syspath_prepend(str(folder))
        if words[0] == "python":
            patch.syspath_prepend(str(folder))  # python puts the script's folder first on the path
            patch.setattr(sys, "argv", words[1:])
            with torch.random.fork_rng():  # the script's seeding stays in the script
                runpy.run_path(words[1], run_name="__main__")
        elif words[0] == "nemo-train":
            main(words[1:])
            wandb = sys.modules.get("wandb")
            if wandb is not None and getattr(wandb, "run", None) is not None:
                wandb.finish()  # each command of the page is its own process, with its own W&B run
        else:
            raise AssertionError(f"the page shows a command this test cannot run: {line!r}")


class Workspace:
    """The folder the page's examples run in; each section's commands run once, after those it builds on."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.done: set[int] = set()
        (folder / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
        for section in SECTIONS.values():
            for name, body in section.files.items():
                (folder / name).write_text(body, encoding="utf-8")

    def run(self, *numbers: int) -> None:
        for number in numbers:
            if number not in self.done:
                for line in SECTIONS[number].commands:
                    run_line(line, self.folder)
                self.done.add(number)

    def summary(self, run: str) -> dict:
        return json.loads((self.folder / "runs" / run / "summary.json").read_text())

    def records(self, run: str) -> list[dict]:
        lines = (self.folder / "runs" / run / "results.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _forget_page_modules() -> None:
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    _forget_page_modules()  # a module of the same name imported from elsewhere is not the page's
    yield Workspace(tmp_path_factory.mktemp("extending"))
    _forget_page_modules()


def test_every_block_of_the_page_is_a_file_or_a_command():
    untested = [m["lang"] for m in BLOCK.finditer(TEXT) if not m["title"] and m["lang"] != "bash"]
    assert not untested, f"code blocks that the test neither saves nor runs: {untested}"
    assert sorted(SECTIONS) == [1, 2, 3, 4]
    assert all(s.commands for s in SECTIONS.values()), "every section runs an example"
    for section in SECTIONS.values():
        for name, body in section.files.items():
            if name.endswith(".py"):
                compile(body, name, "exec")


def test_own_classifier_is_evaluated_under_its_own_name_and_weights(workspace):
    workspace.run(1)
    cells = workspace.summary("my_classifier")["cells"]
    assert {c["target"] for c in cells} == {"my_classifier"}
    assert {"SciTX", "KnownCause"} <= {c["method"] for c in cells}
    assert all(1 <= c["n"] <= 4 for c in cells)
    weights = hashlib.sha256((workspace.folder / "my_net.pt").read_bytes()).hexdigest()
    records = workspace.records("my_classifier")
    assert records and all(r["settings"]["target.my_classifier"] == weights for r in records)


def test_own_image_folder_has_the_layout_the_page_describes(workspace):
    workspace.run(2)
    root = workspace.folder / "my_images"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["circle", "square"]
    with open(root / "causes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and all((root / r["image"]).is_file() and r["cause"] == "colour" for r in rows)


def test_own_backend_judges_in_a_panel_and_edits_own_images(workspace):
    workspace.run(1, 2, 3)
    panel = workspace.summary("my_panel")["cells"]
    known = next(c for c in panel if c["method"] == "KnownCause")
    assert len(known["per_judge"]) == 2 and "colour-word rule (not a model)" in known["per_judge"]
    (cell,) = workspace.summary("my_images")["cells"]
    # every explanation of the rule backend blames the colour, which its rule judge scores 1
    assert cell["method"] == "SciTX" and cell["llm_match"] == 1.0 and 1 <= cell["n"] <= 4
    records = workspace.records("my_images")
    assert all(r["cause"] == "colour" for r in records)  # read from causes.csv
    assert {r["instruction"] for r in records} == {"Make the shape blue"}  # the rule editor's instruction


@pytest.mark.slow
def test_own_explainer_is_fitted_in_two_stages_exported_and_answers(workspace):
    workspace.run(2, 4)
    adapter = workspace.folder / "runs" / "my_explainer" / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    stage_one = json.loads((workspace.folder / "runs" / "my_captions" / "adapter" / "nemo_explainer.json").read_text())
    assert stage_one["model_name_or_path"] == "embedded:tiny-qwen2-vl"
    merged = workspace.folder / "runs" / "my_explainer_merged"
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in merged.iterdir()}
    lines = (workspace.folder / "runs" / "my_explanations" / "explanations.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(len(json.loads(line)["explanations"]) == 1 for line in lines)
