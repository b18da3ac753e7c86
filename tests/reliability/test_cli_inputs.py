"""Command-line input and W&B faults: each is one line on stderr (exit 2) or one warning, never a traceback."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest
import wandb
import yaml
from cli_errors import one_line_error

from nemo_train.cli import main
from nemo_train.loggers import WandbLogger

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-test-abcdefghij0123456789"


def run_cli(capsys, *args: str) -> str:
    """Run ``nemo-train args``; it must exit with status 2 and print exactly one error line. Returns that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nemo-train: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["fit", "nemo-eval", "counterfactuals"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "is empty; expected a YAML mapping"),
        ("# only a comment\n", "is empty; expected a YAML mapping"),
        ("- a\n- b\n", "holds a list; expected a YAML mapping"),
        ("key: [unclosed\n", "is not valid YAML"),
    ],
)
def test_a_config_that_is_not_a_mapping_is_one_line(tmp_path, capsys, command, content, expected):
    config = tmp_path / "preset.yaml"
    config.write_text(content)
    line = run_cli(capsys, command, "--config", str(config))
    assert str(config) in line and expected in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["fit", "--config", "configs/cmnist/model_a.yaml", "--trainer.max_epochs", "abc"],
            "Parser key \"trainer.max_epochs\": Expected a <class 'int'>. Got value: abc",
        ),
        (
            ["fit", "--config", "configs/cmnist/model_a.yaml", "--data.init_args.train_size", "abc"],
            "Parser key \"train_size\": Expected a <class 'int'>. Got value: abc",
        ),
        (
            ["nemo-eval", "--config", "configs/nemo/cmnist.yaml", "--benchmark.n", "abc"],
            "Parser key \"benchmark.n\": Not of type PositiveInt: invalid literal for int() with base 10: 'abc'",
        ),
    ],
)
def test_a_wrong_type_keeps_expected_and_got(capsys, monkeypatch, args, expected):
    monkeypatch.chdir(ROOT)
    assert expected in run_cli(capsys, *args)


def test_an_unknown_key_in_a_pipeline_preset_names_it(tmp_path, capsys):
    preset = yaml.safe_load((ROOT / "configs/nemo/cmnist.yaml").read_text())
    preset["no_such_setting"] = 3
    config = tmp_path / "preset.yaml"
    config.write_text(yaml.safe_dump(preset))
    assert "no_such_setting" in run_cli(capsys, "nemo-eval", "--config", str(config))


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "url", [f"http://127.0.0.1:{closed_port()}", "http://10.255.255.1:81"], ids=["refused", "unroutable"]
)
def test_online_without_a_reachable_server_logs_offline_with_one_warning(tmp_path, monkeypatch, capsys, url):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", url)
    logger = WandbLogger(save_dir=str(tmp_path), connect_timeout=0.5, init_timeout=5)
    logger.log_metrics({"loss": 1.0}, step=0)  # starts the run: offline, so it does not wait for the server
    run = logger.experiment
    try:
        assert run.settings.mode == "offline" and Path(run.dir).is_relative_to(tmp_path / "wandb")
    finally:
        wandb.finish()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")), "the run was lost"
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nemo-train: warning:")]
    # refused: the connection check fails; unroutable: no answer, or (behind a proxy) W&B's init fails
    assert len(warnings) == 1 and "logging offline" in warnings[0]


def test_init_arguments_are_redacted_and_the_command_line_is_not_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("NEMO_FAKE_API_KEY", SECRET)
    logger = WandbLogger(
        name=f"run {SECRET}",
        save_dir=str(tmp_path),
        notes=f"key is {SECRET}",
        tags=[SECRET],
        config={"api_key": "x" * 12},
    )
    run = logger.experiment
    try:
        assert SECRET not in f"{run.name} {run.notes} {run.tags} {run.config.as_dict()}"
        assert "<redacted>" in run.notes and run.config.as_dict()["api_key"] == "<redacted>"
        # W&B records no program, arguments, environment, git state or code
        assert run.settings.x_disable_meta and run.settings.disable_git and run.settings.disable_code
        assert run.settings.console == "off" and not run.settings.save_code
    finally:
        wandb.finish()
    assert not list((tmp_path / "wandb").glob("offline-run-*/files/wandb-metadata.json"))


@pytest.mark.parametrize(
    "argv",
    [
        ["nemo-eval", "--config", "configs/nemo/cmnist.yaml", "--n", "16"],  # once read as --num_nodes 16: a hang
        ["differences", "--config", "configs/differences/cmnist.yaml", "--num_n", "2"],
        ["fit", "--config", "configs/cmnist/model_a.yaml", "--trainer.max_ep", "1"],
    ],
    ids=["nemo-eval", "differences", "fit"],
)
def test_an_abbreviated_option_is_refused_not_expanded(capsys, monkeypatch, argv):
    monkeypatch.chdir(ROOT)
    line = one_line_error(capsys, argv)
    assert argv[-2] in line


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="deepspeed is installed")
@pytest.mark.parametrize("stage", [2, 3])
def test_a_deepspeed_preset_without_deepspeed_names_the_extra_to_install(capsys, monkeypatch, stage):
    monkeypatch.chdir(ROOT)
    argv = ["fit", "--config", "configs/explainer/tiny.yaml"]
    argv += ["--config", f"configs/explainer/strategies/deepspeed_zero{stage}.yaml"]
    assert "pip install -e '.[deepspeed]'" in one_line_error(capsys, argv)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["nemo-eval", "--config", "configs/nemo/cmnist.yaml", "--methods", "[]"], "methods"),
        (["differences", "--config", "configs/differences/cmnist.yaml", "--methods", "[]"], "methods"),
        (["distill-eval", "--config", "configs/distill/cmnist_eval.yaml", "--methods", "[]"], "methods"),
        (["distill-teacher", "--config", "configs/distill/cmnist_teacher.yaml", "--views", "[]"], "views"),
    ],
    ids=["nemo-eval", "differences", "distill-eval", "distill-teacher"],
)
def test_an_empty_list_is_refused_not_replaced_by_the_defaults(tmp_path, capsys, monkeypatch, argv, option):
    """``--methods []`` used to run every default method (one of them with a random CLIP) and exit 0."""
    monkeypatch.chdir(ROOT)
    line = one_line_error(capsys, [*argv, "--out_dir", str(tmp_path / "run")])
    assert f"{option}=[] names nothing" in line
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_several_nodes_without_a_launcher_is_one_line_not_a_silent_wait(tmp_path, capsys, monkeypatch):
    """``--num_nodes 2`` with nothing to start the other machine used to wait forever, printing nothing."""
    from nemo_train.sharding import NODE_LAUNCHER_VARIABLES

    for pair in NODE_LAUNCHER_VARIABLES:
        for name in pair:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    argv = ["nemo-eval", "--config", "configs/nemo/cmnist.yaml", "--num_nodes", "2", "--out_dir", str(tmp_path / "r")]
    line = one_line_error(capsys, argv)
    assert "num_nodes=2 needs a launcher" in line and "MASTER_ADDR+NODE_RANK" in line
