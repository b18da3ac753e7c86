"""Every `nemo-train` command the README shows still parses: its command exists, its options are options of that
command and its values have the right types (nothing is run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from jsonargparse import auto_parser
from test_configs import ParseOnlyCLI

from nemo_train.cli import PIPELINE_COMMANDS, _load

ROOT = Path(__file__).resolve().parents[1]
LIGHTNING = ("fit", "validate", "test", "predict")


class ParseOnlySubcommand(ParseOnlyCLI):
    """LightningCLI with a subcommand (``fit``, ``test``, ...): parsed, nothing built or run."""

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def readme_commands() -> list[list[str]]:
    """The ``nemo-train ...`` commands of the README's code blocks, as argument lists (``&&`` chains split,
    ``\\`` continuations joined, comments dropped, a launcher before ``nemo-train`` such as torchrun or srun
    skipped)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    commands = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part.strip(), comments=True)
                start = words.index("nemo-train") + 1 if "nemo-train" in words else len(words)
                if start < len(words):
                    commands.append(words[start:])
    return commands


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 10
    assert {c[0] for c in COMMANDS} >= {"fit", "nemo-eval", "distill-teacher", "distill-eval", "differences", "lbee"}


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w)[:60])
def test_readme_command_parses(words, monkeypatch):
    monkeypatch.chdir(ROOT)  # the README's preset paths are relative to the repository
    command, args = words[0], words[1:]
    if command in LIGHTNING:
        ParseOnlySubcommand(args=[command, *args, "--trainer.logger=false"])
        return
    assert command in PIPELINE_COMMANDS, f"the README names an unknown command {command!r}"
    parser = auto_parser(_load(PIPELINE_COMMANDS[command].target), as_positional=False, exit_on_error=False)
    parser.parse_args(args)
