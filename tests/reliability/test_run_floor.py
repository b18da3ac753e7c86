"""The run floor every pipeline command stands on (``nemo_train.runs``): one set of run arguments, one writer
lock per output folder, ``provenance.json``, and no secret in anything written."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import torch
from cli_errors import one_line_error
from jsonargparse import auto_parser

from nemo_train.cli import PIPELINE_COMMANDS, _load
from nemo_train.errors import UserInputError
from nemo_train.runs import RUN_ARGS_HELP, RunArgs, open_run, run_command
from nemo_train.secrets import REDACTED
from nemo_train.store import ResultStore, write_json_atomic

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[2]
#: The least each command needs on its command line to reach the run floor (nothing is built before it).
MINIMAL = {
    "nemo-eval": [],
    "counterfactuals": [],
    "competency-explanations": [],
    "demo": [],
    "distill-teacher": ["--classifier", "missing.ckpt"],
    "distill-eval": ["--student", "missing", "--targets", "[missing.ckpt]"],
    "explain": ["--model", "missing"],
    "lbee": ["--data", "datamodules.nico.NICODataModule"],
    "differences": ["--generator", "nemo_train.differences.generators.CMNISTGenerator"],
    "export": ["--adapter", "missing"],
    "judge": [],
    "zoo": [],
}
SECRET = "sk-" + "live0123456789abcdefXYZ"  # a made-up key, spelled in two parts so no scanner takes it for one
#: Commands that only read (a data-folder check; a run folder's report page, written into the run's own folder):
#: no run of their own, so no run floor (a report takes no lock and leaves the run's provenance as it was).
READ_ONLY = {"prepare", "report"}
WRITERS = sorted(set(PIPELINE_COMMANDS) - READ_ONLY)
#: Commands whose only run argument is the output folder (no models of their own to seed or place, nothing to log).
OUT_DIR_ONLY = {"demo", "export", "judge"}


def hold_lock(folder: Path, pid: str = "4242") -> int:
    """Take ``folder``'s writer lock as another run would (its own open file), writing ``pid`` into it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, pid.encode(), 0)
    return fd


def test_every_command_has_the_run_floor():
    assert set(MINIMAL) == set(WRITERS)


@pytest.mark.parametrize("command", WRITERS)
def test_every_command_takes_the_run_arguments_with_one_help(command):
    func = _load(PIPELINE_COMMANDS[command].target)
    assert func.run_command == command
    help_text = " ".join(auto_parser(func, as_positional=False).format_help().split())
    names = ["out_dir"] if command in OUT_DIR_ONLY else list(RUN_ARGS_HELP)
    for name in names:
        assert f"--{name}" in help_text
        assert " ".join(RUN_ARGS_HELP[name].split()) in help_text  # the same words in every command
    out_dir = auto_parser(func, as_positional=False).get_defaults().out_dir
    assert out_dir.startswith("checkpoints/")
    if command not in OUT_DIR_ONLY:  # the same defaults everywhere: no W&B unless asked, a GPU when one is visible
        defaults = auto_parser(func, as_positional=False).get_defaults()
        assert defaults.wandb is False and defaults.device == "auto"


@pytest.mark.parametrize("command", WRITERS)
def test_a_second_run_on_one_folder_exits_with_one_line(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    fd = hold_lock(out)
    try:
        err = one_line_error(capsys, [command, *MINIMAL[command], "--out_dir", str(out)])
    finally:
        os.close(fd)
    assert "is in use by another run (pid 4242)" in err and str(out) in err
    assert {p.name for p in tmp_path.rglob("*")} == {"out", ".lock"}  # the refused run wrote nothing


def test_out_dir_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    err = one_line_error(capsys, ["counterfactuals", "--out_dir", str(afile)])
    assert f"out_dir '{afile}' is a file" in err
    err = one_line_error(capsys, ["lbee", *MINIMAL["lbee"], "--out_dir", str(afile / "below")])
    assert "which is a file" in err
    read_only = Path("/sys/nemo-train-run-floor-test")
    if os.access("/sys", os.W_OK) and not _mkdir_fails(read_only):
        pytest.skip("/sys is writable here")
    err = one_line_error(capsys, ["nemo-eval", "--out_dir", str(read_only)])
    assert "cannot be written" in err and str(read_only) in err


def _mkdir_fails(path: Path) -> bool:
    try:
        path.mkdir()
    except OSError:
        return True
    path.rmdir()
    return False


def test_bad_seed_and_unavailable_device_are_one_line(tmp_path, capsys):
    err = one_line_error(capsys, ["differences", *MINIMAL["differences"], "--seed", "-1", "--out_dir", str(tmp_path)])
    assert "seed" in err and "-1" in err
    if not torch.cuda.is_available():
        err = one_line_error(capsys, ["nemo-eval", "--device", "cuda", "--out_dir", str(tmp_path / "o")])
        assert "no CUDA device" in err
        assert not (tmp_path / "o").exists()  # refused before anything was written


def test_provenance_records_commit_versions_settings_files_and_stand_ins(tmp_path, monkeypatch):
    checkpoint = tmp_path / "model.ckpt"
    checkpoint.write_bytes(b"weights")
    monkeypatch.setenv("NEMO_TEST_API_KEY", "envsecret-123456789")
    seen = {}

    @run_command("toy", lambda arguments: ["judge: a keyword rule (not a model)"])
    def toy(
        classifier: str,
        explainer: dict | None = None,
        out_dir: str = "checkpoints/toy",
        seed: int = 0,
        device: str = "auto",
    ):
        """A toy command.

        Args:
            classifier: a checkpoint.
            explainer: a backend's options.
        """
        seen["device"] = device
        seen["draw"] = torch.rand(1).item()
        return json.loads((Path(out_dir) / "provenance.json").read_text())

    options = {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "extra_body": {"api_key": SECRET}, "note": "envsecret-123456789"}
    record = toy(str(checkpoint), explainer=options, out_dir=str(tmp_path / "out"), seed=3, device="cpu")
    torch.manual_seed(3)
    assert seen["device"] == "cpu" and seen["draw"] == torch.rand(1).item()  # seeded when the run opened
    assert record["command"] == "toy" and record["run"] == {
        "out_dir": str(tmp_path / "out"),
        "wandb": False,
        "seed": 3,
        "device": "cpu",
        "device_used": "cpu",
    }
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0:
        assert record["git"]["commit"] == commit.stdout.strip() and isinstance(record["git"]["dirty"], bool)
    assert record["packages"]["torch"] == metadata.version("torch") and torch.__version__.startswith(
        metadata.version("torch")
    )
    assert {"lightning", "jsonargparse", "numpy"} <= set(record["packages"])
    assert record["settings"]["explainer"] == {
        "model": "Qwen/Qwen2.5-VL-7B-Instruct",
        "extra_body": {"api_key": REDACTED},
        "note": REDACTED,
    }
    assert record["files"] == [
        {"setting": "classifier", "path": str(checkpoint), "sha256": hashlib.sha256(b"weights").hexdigest(), "bytes": 7}
    ]
    assert record["model_ids"] == [{"setting": "explainer.model", "id": "Qwen/Qwen2.5-VL-7B-Instruct"}]
    assert record["stand_ins"] == ["judge: a keyword rule (not a model)"]
    assert "argv" not in json.dumps(record) and SECRET not in json.dumps(record)


def test_a_refused_run_leaves_the_folder_as_it_found_it(tmp_path):
    with pytest.raises(UserInputError, match="bad input"):
        with open_run("toy", RunArgs(out_dir=str(tmp_path / "a" / "b"))):
            raise UserInputError("bad input")
    assert not (tmp_path / "a").exists()
    # an earlier run's folder keeps its files and its provenance
    out = tmp_path / "kept"
    with open_run("toy", RunArgs(out_dir=str(out), seed=1)):
        (out / "results.jsonl").write_text("{}\n")
    before = (out / "provenance.json").read_bytes()
    with pytest.raises(UserInputError):
        with open_run("toy", RunArgs(out_dir=str(out), seed=2)):
            raise UserInputError("bad input")
    assert (out / "provenance.json").read_bytes() == before and (out / "results.jsonl").is_file()
    # a run that wrote something keeps it, with its own provenance
    with pytest.raises(RuntimeError):
        with open_run("toy", RunArgs(out_dir=str(out), seed=5)):
            (out / "partial.jsonl").write_text("{}\n")
            raise RuntimeError("crash")
    assert json.loads((out / "provenance.json").read_text())["run"]["seed"] == 5


def test_the_lock_is_held_for_the_whole_run_and_is_reentrant_in_one_process(tmp_path):
    from nemo_train.store import RunLock

    with open_run("toy", RunArgs(out_dir=str(tmp_path))):
        fd = os.open(tmp_path / ".lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):  # another process (another open file) is refused
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with RunLock(tmp_path):  # the command's own lock inside its run
            pass
        with pytest.raises(BlockingIOError):  # still held after the inner release
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at the end of the run
    os.close(fd)


def test_results_settings_and_json_files_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-abcdefgh12345")
    store = ResultStore(tmp_path / "results.jsonl")
    settings = {"explainer": {"extra_body": {"api_key": SECRET}, "model": "m"}, "k": 3}
    store.append({"key": "a", "explanation": f"echoed {SECRET} and tok-abcdefgh12345"}, settings)
    assert store.lookup("a", settings) is not None  # the redacted record still matches its settings
    assert ResultStore(tmp_path / "results.jsonl").lookup("a", settings) is not None
    write_json_atomic(tmp_path / "results.json", {"headers": {"Authorization": f"Bearer {SECRET}"}, "n": 1})
    for path in tmp_path.iterdir():
        text = path.read_text()
        assert SECRET not in text and "tok-abcdefgh12345" not in text and REDACTED in text


def test_an_inline_key_reaches_no_file_of_a_run(checkpoint_factory, tmp_path, monkeypatch, capsys):
    """``--explainer.init_args.extra_body '{"api_key": ...}'`` through the command line: the endpoint gets the key,
    no file under out_dir holds it (results' settings, reply cache, provenance)."""
    from loopback_openai_server import LoopbackOpenAIServer, completion

    from nemo_train.cli import main

    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    sent = []

    def responder(request):
        sent.append(json.dumps(request["body"]))
        cause = f"The stroke colour is unusual (echo {SECRET})."
        return completion(*[json.dumps({"cause_of_error": cause})] * request["body"].get("n", 1))

    out = tmp_path / "out"
    with LoopbackOpenAIServer(responder) as server:
        explainer = {
            "class_path": "nemo_train.backends.OpenAICompatibleBackend",
            "init_args": {"base_url": server.base_url, "model": "tiny", "api_key_env": None},
        }
        main([
            "nemo-eval", "--targets", f"[{ckpt}]", "--benchmark.n", "2", "--benchmark.test_styles", "1",
            "--methods", '[{"class_path": "nemo_train.nemo.components.SciTXMethod", "init_args": {"m": 2}}]',
            "--editor", '{"class_path": "nemo_train.scoring.editors.ExactEdit", "init_args": {"deriver": "keyword"}}',
            "--explainer", json.dumps(explainer),
            "--explainer.init_args.extra_body", json.dumps({"api_key": SECRET}),
            "--run.global_explanation", "false", "--out_dir", str(out),
        ])  # fmt: skip
    assert any(SECRET in body for body in sent)  # the key was used
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"results.jsonl", "provenance.json"} <= {p.name for p in files}
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    settings = json.loads((out / "results.jsonl").read_text().splitlines()[0])["settings"]
    assert REDACTED in json.dumps(settings)
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["settings"]["explainer"]["init_args"]["extra_body"] == {"api_key": REDACTED}
    assert provenance["stand_ins"] == [
        "judge: grounded judge (an attribute parser, not a model)",
        "editor: edits derived from the sentence by the grounded judge's parser, not a model",
    ]


def test_wandb_config_is_the_provenance_and_logged_tables_are_redacted(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)

    @run_command("toy")
    def toy(backend: dict, out_dir: str = "checkpoints/toy", wandb: bool = False):
        """A toy command that logs a table."""
        import wandb as w

        table = w.Table(columns=["explanation"], data=[[f"the key is {SECRET}"]])
        w.run.log({"toy/table": table, "toy/note": f"Bearer {SECRET}"})
        return dict(w.run.config), table.data, w.run.settings

    config, rows, settings = toy({"api_key": SECRET, "model": "m"}, out_dir=str(tmp_path), wandb=True)
    assert wandb.run is None  # finished with the run
    assert config["command"] == "toy" and config["settings"]["backend"] == {"api_key": REDACTED, "model": "m"}
    assert rows == [[f"the key is {REDACTED}"]]
    assert settings.x_disable_meta and settings.disable_git and settings.disable_code and not settings.save_code
    assert Path(settings.sync_dir).is_relative_to(tmp_path / "wandb")
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix != ".wandb":  # the binary run file is written by W&B's service
            assert SECRET.encode() not in path.read_bytes(), path
