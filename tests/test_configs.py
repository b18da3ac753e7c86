"""Every YAML preset under configs/ parses with the parser of the command it is written for.

The command is read from the preset's own usage comment (``# nemo-train <command> --config configs/<it>``),
so a preset whose comment and keys disagree fails here. Fit presets go through ``nemo-train fit``'s
LightningCLI parser (nothing instantiated) and must put every output under ``trainer.default_root_dir``;
pipeline presets through their function's jsonargparse parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from jsonargparse import auto_parser

from nemo_train.cli import PIPELINE_COMMANDS, _load
from nemo_train.lightning_cli import NemoLightningCLI

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))


class ParseOnlyCLI(NemoLightningCLI):
    """``nemo-train fit``'s parser and path derivation, without building the model, data or trainer."""

    def instantiate_classes(self) -> None:
        pass


def command_line(path: Path) -> tuple[str, list[str]]:
    """The command and the ``--config`` files of the preset's usage comment (``fit`` for a bare Lightning preset)."""
    rel = path.relative_to(ROOT).as_posix()
    for line in path.read_text().splitlines():
        match = re.search(r"nemo-train\s+(\S+)", line)
        if line.lstrip().startswith("#") and match and f"--config {rel}" in line:
            return match.group(1), re.findall(r"--config (\S+)", line)
    if "trainer" in (yaml.safe_load(path.read_text()) or {}):
        return "fit", [rel]
    raise AssertionError(f"{rel} has no usage comment `# nemo-train <command> --config {rel}`")


def test_presets_exist():
    assert len(PRESETS) >= 20


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_preset_parses(path, tmp_path):
    command, configs = command_line(path)
    args = [arg for config in configs for arg in ("--config", str(ROOT / config))]
    if command in ("fit", "validate", "test", "predict"):
        cli = ParseOnlyCLI(args=[*args, "--trainer.default_root_dir", str(tmp_path / "run")], run=False)
        trainer = cli.config.trainer
        for callback in trainer.callbacks or []:
            if callback.class_path.endswith("ModelCheckpoint"):
                assert callback.init_args.dirpath == str(tmp_path / "run" / "checkpoints")
        logger = trainer.logger
        if getattr(logger, "class_path", "").endswith("WandbLogger"):
            assert logger.init_args.save_dir == str(tmp_path / "run")
    else:
        assert command in PIPELINE_COMMANDS, f"{path.name} is for an unregistered command {command!r}"
        parser = auto_parser(_load(PIPELINE_COMMANDS[command].target), as_positional=False, exit_on_error=False)
        parser.parse_args(args)
