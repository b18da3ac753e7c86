"""The ``nemo-train`` console script: LightningCLI subcommands, one-line errors, resume, DDP, W&B."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked_commands
import pytest
import torch
import wandb
import yaml
from distributed_runs import holding

from nemo_train.cli import main, summarize_parser_error

ROOT = Path(__file__).resolve().parents[1]


def small_config(tmp_path: Path, *, train_size: int = 512, max_epochs: int = 1, logger: str = "csv") -> Path:
    """configs/cmnist/model_a.yaml shrunk and redirected into ``tmp_path``."""
    config = yaml.safe_load((ROOT / "configs/cmnist/model_a.yaml").read_text())
    out = tmp_path / "run"
    config["trainer"].update(
        max_epochs=max_epochs,
        log_every_n_steps=2,
        default_root_dir=str(out),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    if logger == "csv":
        config["trainer"]["logger"] = {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(out), "name": "csv", "version": 0},
        }
    config["data"]["init_args"].update(train_size=train_size, test_styles=1, batch_size=64)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def nemo_train(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nemo_train.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_MODE": "disabled", **(env or {})},
        **kwargs,
    )


def forked_nemo_train(*args: str) -> subprocess.CompletedProcess:
    """:func:`nemo_train` (at most 10 minutes) in a process of its own forked pre-imported, its extra ranks too
    (``tests/forked_commands.py``): for a test of what the command does, not of what its interpreter prints."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return forked_commands.run([sys.executable, "-m", "nemo_train.cli", *args], env, ROOT, timeout=600)


def metric_columns(tmp_path: Path) -> set[str]:
    with open(tmp_path / "run" / "csv" / "version_0" / "metrics.csv") as handle:
        return set(next(csv.reader(handle)))


def error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nemo-train: error:")]
    assert len(lines) == 1
    return lines[0]


def test_fit_then_test_reports_group_accuracy(tmp_path):
    config = small_config(tmp_path)
    main(["fit", "--config", str(config)])
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    assert best.exists() and (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()
    assert {"val/acc", "val/acc_aligned", "train/loss"} <= metric_columns(tmp_path)
    main(["test", "--config", str(config), "--ckpt_path", str(best)])
    assert {"test/acc", "test/acc_aligned", "test/acc_conflicting"} <= metric_columns(tmp_path)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["data"]["init_args"]["bias"] == "model_a"
    # the run's provenance beside its checkpoints: the commit, the versions, the config, the checkpoint's digest
    record = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert record["command"] == "test" and set(record["git"] or {}) <= {"commit", "dirty"}
    assert record["packages"]["torch"] and record["settings"]["data"]["init_args"]["bias"] == "model_a"
    assert any(f["path"] == str(best) and len(f["sha256"]) == 64 for f in record["files"]), record["files"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--data.init_args.no_such_key", "1"], "Option 'no_such_key' is not accepted"),
        (["--trainer.no_such_key", "1"], "unrecognized arguments"),
        (["--data.init_args.bias", "{0: [reed]}"], "unknown colour(s) ['reed']"),
    ],
)
def test_bad_config_is_one_line(tmp_path, capsys, extra, expected):
    config = small_config(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), *extra])
    assert exit_info.value.code == 2
    assert expected in error_line(capsys)


def test_missing_data_folder_is_one_line(tmp_path, capsys):
    config = small_config(tmp_path)
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(config), "--data.init_args.data_dir", str(tmp_path / "nowhere")])
    assert "does not exist" in error_line(capsys)


def test_unknown_command(capsys):
    with pytest.raises(SystemExit):
        main(["fot"])
    assert "unknown command 'fot'" in error_line(capsys)


def test_parser_error_summary_drops_type_noise():
    message = "Parser key \"data\":\n  Does not validate against any of the Union subtypes\n  Subtypes: [A, B]\n  Errors:\n    - Problem with given class_path 'x':\n        Option 'foo' is not accepted\n    - Expected a <class 'NoneType'>\n  Given value type: <class 'X'>"
    assert summarize_parser_error(message) == "Parser key \"data\": Option 'foo' is not accepted"


@pytest.mark.slow
def test_killed_run_resumes_from_last(tmp_path):
    # four 64-image steps an epoch: the hold (not the data's size) makes the kill land after the first epoch
    config = small_config(tmp_path, train_size=256, max_epochs=4)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    proc = forked_commands.start(  # a process of its own, forked pre-imported
        [sys.executable, "-m", "nemo_train.cli", "fit", "--config", str(config)],
        holding({**os.environ, "WANDB_MODE": "disabled"}, "last.ckpt"),  # it stops after its first epoch
        ROOT,
    )
    deadline = time.time() + 300
    while not last.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert last.exists(), "no last.ckpt was written"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(last, map_location="cpu", weights_only=True)
    assert killed_at["epoch"] < 3, "the run finished before it could be killed"
    result = forked_nemo_train("--verbose", "fit", "--config", str(config), "--ckpt_path", "last")
    assert result.returncode == 0, result.stderr[-2000:]
    resumed = torch.load(last, map_location="cpu", weights_only=True)
    assert resumed["epoch"] == 3  # the last epoch (0-based) of max_epochs=4
    assert resumed["global_step"] > killed_at["global_step"]
    assert "Restoring states from the checkpoint" in result.stderr + result.stdout  # Lightning INFO, shown by --verbose


@pytest.mark.slow
def test_two_process_ddp_on_cpu_gives_same_metric_keys(tmp_path):
    config = small_config(tmp_path, train_size=256)
    result = forked_nemo_train(
        "fit", "--config", str(config), "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.accelerator", "cpu",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"train/loss", "val/acc", "val/acc_aligned", "val/loss"} <= metric_columns(tmp_path)
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()


def test_wandb_offline_run_holds_metrics_config_and_grid(tmp_path, monkeypatch):
    """Checks what the W&B client holds in this process (config, logged keys, settings) and the media files it
    writes synchronously; never the binary run file, which W&B's service process writes asynchronously."""
    secret = "sk-test-0123456789abcdefghij"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("NEMO_FAKE_API_KEY", secret)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    logged: list[dict] = []
    original_log = wandb.sdk.wandb_run.Run.log

    def recording_log(run, data, *args, **kwargs):
        logged.append(dict(data))
        return original_log(run, data, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", recording_log)
    config = small_config(tmp_path, train_size=256, logger="wandb")
    main(["fit", "--config", str(config), "--model.init_args.lr", "0.002", "--trainer.logger.init_args.notes", secret])
    run = wandb.run  # Lightning leaves the run open
    try:
        assert run is not None and run.name == "run"  # named after trainer.default_root_dir
        assert Path(run.dir).is_relative_to(tmp_path / "run" / "wandb")  # a sibling of the checkpoint folder
        saved = run.config.as_dict()["config"]
        assert run.config.as_dict()["provenance"]["packages"]["lightning"]  # commit, versions, files, model ids
        assert saved["seed_everything"] == 0 and saved["data"]["init_args"]["bias"] == "model_a"
        assert saved["model"]["init_args"]["lr"] == 0.002
        assert {"val/acc_aligned", "train/loss"} <= {key for data in logged for key in data}
        assert run.settings.x_disable_meta and run.settings.console == "off" and run.settings.disable_git
        assert secret not in json.dumps(run.config.as_dict()) and secret not in str(run.notes)
        assert secret not in json.dumps(logged, default=str)
        assert list(Path(run.dir).glob("media/images/samples/train_grid_*.png")), "no sample-image grid"
        tables = list(Path(run.dir).glob("media/table/val/group_accuracy_*.table.json"))
        assert tables and "aligned" in tables[0].read_text()
    finally:
        wandb.finish()
    assert secret not in (tmp_path / "run" / "config.yaml").read_text()


@pytest.mark.slow  # the console script in its own process, with an offline W&B run
def test_fit_output_is_quiet_when_not_a_terminal(tmp_path):
    """No W&B banner, no Lightning info lines (GPU available, tips, model summary), no progress bar, one warning each."""
    config = small_config(tmp_path, train_size=256, logger="wandb")
    result = nemo_train("fit", "--config", str(config), env={"WANDB_MODE": "offline"}, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    for noise in ("wandb:", "GPU available", "Tip:", "| Name", "Epoch 0:", "exists and is not empty", "Seed set to"):
        assert noise not in output, f"{noise!r} in output:\n{output}"
    assert (
        list((tmp_path / "run" / "wandb").glob("offline-run-*"))
        and (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file()
    )


def test_python_dash_m_nemo_train_is_the_console_script():
    result = subprocess.run(
        [sys.executable, "-m", "nemo_train", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "nemo-eval" in result.stdout and "fit" in result.stdout


def _entry_body_lines(function) -> int:
    """Lines of a function's body after its signature and docstring."""
    import ast
    import inspect

    node = ast.parse(inspect.getsource(function)).body[0]
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    return node.end_lineno - first.lineno + 1


def test_every_command_entry_function_reads_in_one_screen():
    """A command's function reads as its steps (resolve inputs, open the run, build parts, loop, write, report),
    each step a named function: at most 60 lines of body."""
    import inspect

    from nemo_train.cli import PIPELINE_COMMANDS, _load

    lengths = {name: _entry_body_lines(inspect.unwrap(_load(c.target))) for name, c in PIPELINE_COMMANDS.items()}
    too_long = {n: k for n, k in lengths.items() if k > 60}
    assert not too_long, f"entry functions over 60 lines: {too_long}"


def test_every_command_has_one_seed():
    """One seed per command: ``--seed``; no option group carries a second one (derived seeds come from it)."""
    import dataclasses
    import inspect
    import typing

    from nemo_train.cli import PIPELINE_COMMANDS, _load

    found = {}
    for name, command in PIPELINE_COMMANDS.items():
        function = inspect.unwrap(_load(command.target))
        seeds = [p for p in inspect.signature(function).parameters if "seed" in p]
        for parameter, hint in typing.get_type_hints(function).items():
            for kind in typing.get_args(hint) or (hint,):
                if dataclasses.is_dataclass(kind):
                    seeds += [f"{parameter}.{f.name}" for f in dataclasses.fields(kind) if "seed" in f.name]
        if seeds not in ([], ["seed"]):
            found[name] = seeds
    assert not found, f"commands with a seed besides --seed: {found}"
