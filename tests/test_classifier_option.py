"""Every pipeline takes its classifier the same way and never trains one it was not asked to train.

``--classifier`` (one checkpoint or a ``ClassifierSpec``) or ``--targets`` (several), ``--out_dir`` for every output;
a missing checkpoint stops the command with one line naming the ``nemo-train fit`` command that writes it, and
a damaged one with one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_errors import one_line_error
from jsonargparse import auto_parser

from nemo_train.cli import PIPELINE_COMMANDS, _load

ROOT = Path(__file__).resolve().parents[1]

#: Commands without a classifier to analyse (the demo trains its own in `fit` steps; `explain` reads image pairs;
#: `report` reads a run folder; `judge` grades explanations as text; `zoo` trains classifiers, as `fit` does).
NO_CLASSIFIER = {"demo", "explain", "export", "judge", "prepare", "report", "zoo"}
#: Commands that write nothing (a data-folder check): no out_dir.
READ_ONLY = {"prepare"}

#: Per command: its shipped preset (whose checkpoint path is relative, so it is missing in an empty folder; an lbee
#: preset is the shared recipe and one correlation, joined by "+"), the fit preset that writes that checkpoint, and
#: how the command is given another checkpoint.
COMMANDS = {
    "counterfactuals": ("competency/counterfactuals_cmnist.yaml", "cmnist/model_a.yaml", "--classifier={}"),
    "competency-explanations": ("competency/explanations_cmnist.yaml", "cmnist/model_a.yaml", "--classifier={}"),
    "lbee": ("lbee/nico_base.yaml+lbee/nico85.yaml", "nico/nico85_cnn.yaml", "--classifier={}"),
    "differences": ("differences/cmnist.yaml", "cmnist/model_a.yaml", "--targets=[{}, {}]"),
    "nemo-eval": ("nemo/cmnist.yaml", "cmnist/model_a.yaml", "--targets=[{}]"),
    "distill-teacher": ("distill/cmnist_teacher.yaml", "cmnist/model_a.yaml", "--classifier={}"),
}


def config_args(preset: str) -> list[str]:
    return [arg for name in preset.split("+") for arg in ("--config", str(ROOT / "configs" / name))]


@pytest.mark.parametrize("command", sorted(PIPELINE_COMMANDS))
def test_every_pipeline_takes_out_dir_and_its_classifier_the_same_way(command):
    help_text = auto_parser(_load(PIPELINE_COMMANDS[command].target), as_positional=False).format_help()
    assert ("--out_dir" in help_text) is (command not in READ_ONLY)
    if command not in NO_CLASSIFIER:
        assert "--classifier" in help_text or "--targets" in help_text
        assert "subclass of ClassifierSpec" in help_text  # the one spec type (nemo_train.models.specs)
    for old in ("--run.out_dir", "--estimator.classifier_checkpoint", "--classifier.checkpoint", "--model_a"):
        assert old not in help_text


def test_the_commands_table_covers_every_command_that_takes_a_classifier():
    assert set(COMMANDS) | NO_CLASSIFIER | {"distill-eval"} == set(PIPELINE_COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_missing_checkpoint_names_the_fit_command_and_trains_nothing(command, tmp_path, monkeypatch, capsys):
    preset, fit_preset, _ = COMMANDS[command]
    monkeypatch.chdir(tmp_path)  # the preset's relative checkpoint (and out_dir) would be here
    err = one_line_error(capsys, [command, *config_args(preset), "--out_dir", str(tmp_path / "o")])
    assert f"`nemo-train fit --config configs/{fit_preset}`" in err and "does not exist" in err
    assert not any(tmp_path.iterdir()), "a command with a missing classifier wrote (or trained) something"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_damaged_checkpoint_is_one_line_naming_the_file(command, tmp_path, monkeypatch, capsys):
    preset, _, option = COMMANDS[command]
    monkeypatch.chdir(tmp_path)
    damaged, other = (tmp_path / name / "checkpoints" / "best.ckpt" for name in ("broken", "broken_b"))
    for path in (damaged, other):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"PK\x03\x04 truncated checkpoint" * 8)
    args = [command, *config_args(preset), "--out_dir", str(tmp_path / "o")]
    args.append(option.format(damaged, other))
    if command == "lbee":  # the data are built before the classifier is read: keep them small
        args += ["--data.init_args.train_size=60", "--data.init_args.test_per_pair=1"]
    err = one_line_error(capsys, args)
    assert str(damaged) in err and "cannot be read" in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_given_as_the_checkpoint_is_one_line(command, tmp_path, monkeypatch, capsys):
    """A folder (a fit's run folder instead of its ``.ckpt``) is refused, never replaced by a model of its own."""
    preset, _, option = COMMANDS[command]
    monkeypatch.chdir(tmp_path)
    folder, other = tmp_path / "run_a", tmp_path / "run_b"
    for path in (folder, other):
        (path / "checkpoints").mkdir(parents=True)
    args = [command, *config_args(preset), "--out_dir", str(tmp_path / "o"), option.format(folder, other)]
    err = one_line_error(capsys, args)
    assert f"{str(folder)!r} is a folder; expected the .ckpt file `fit` writes" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.ckpt"))
