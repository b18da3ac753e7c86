"""The faults a fourth probe found, each fixed in a shared mechanism and checked here in-process:

* ``differences --protocol.test_conditions`` larger than the generator's grid: refused in one line;
* a full disk: one line naming the folder for every writer (the project's atomic writes, figures, safetensors
  files, the SQLite reply cache, a library's own write that names no file), with no scratch file left;
* a truncated adapter for ``export`` and a folder for ``test --ckpt_path``: one line;
* ``prepare`` opens a sample of the images: text files named ``.jpg`` are not "ready";
* ``distill-eval`` names its failed rows, and exits 2 when every row failed;
* ``provenance.json`` keeps one entry per command that wrote into the folder;
* ``differences``: a summariser or explorer that fails is stored as failed, reported in one line, and exits 2
  when every method failed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch
from cli_errors import one_line_error
from full_disk import fill_disk, scratch_files

from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError

pytestmark = pytest.mark.fault
ROOT = Path(__file__).resolve().parents[2]
NOT_JSON = "Sure! The answer is that the stroke is red."


@pytest.fixture(scope="module")
def pair(tmp_path_factory, lightning_checkpoint) -> list[str]:
    """Two untrained CMNIST classifiers (Model A, Model B)."""
    from nemo_train.models import ClassifierModule

    folder, paths = tmp_path_factory.mktemp("pair"), []
    for seed, name in enumerate(("model_a", "model_b")):
        torch.manual_seed(seed)
        module = ClassifierModule(backbone="bias_cnn", num_classes=10)
        paths.append(lightning_checkpoint(module, folder / name / "best.ckpt"))
    return paths


def small_differences(pair: list[str], out: Path, *extra: str) -> list[str]:
    return [
        "differences", "--generator", "nemo_train.differences.generators.CMNISTGenerator",
        "--targets", f"[{pair[0]}, {pair[1]}]", "--out_dir", str(out), "--device", "cpu", "--heatmap_grid", "false",
        "--sampling.samples_per_condition", "2", "--protocol.test_conditions", "12",
        "--protocol.observed_conditions", "6", "--protocol.attribution_questions", "3",
        "--optimization.iterations", "1", "--optimization.conditions_per_iteration", "2",
        "--optimization.initial_conditions", "3", *extra,
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------ test conditions


def test_differences_test_conditions_beyond_the_grid_is_one_line_naming_the_grid(pair, tmp_path, capsys):
    out = tmp_path / "out"
    argv = small_differences(pair, out) + ["--protocol.test_conditions", "100000"]
    err = one_line_error(capsys, argv)
    assert "protocol.test_conditions=100,000" in err and "grid has 1,300 conditions" in err, err
    assert "at most 1,299" in err
    assert not (out / "diff_model_cache.json").exists() and not (out / "results.json").exists()


# ------------------------------------------------------------------------------------------------ full disk


def test_differences_on_a_full_disk_is_one_line_naming_the_folder_and_leaves_no_scratch(pair, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        fill_disk(patch, out)
        err = one_line_error(capsys, small_differences(pair, out))
    assert f"cannot write in '{out}' (writing diff_model_cache.json): No space left on device" in err, err
    assert scratch_files(out) == []  # before: diff_model_cache.tmp stayed behind


def test_a_parce_estimator_saved_on_a_full_disk_is_one_line_naming_the_folder(tmp_path):
    from nemo_train.competency.autoencoder import CompetencyAutoencoder
    from nemo_train.competency.parce import PaRCE
    from nemo_train.models import ClassifierModule

    estimator = PaRCE(ClassifierModule(backbone="bias_cnn", num_classes=10), CompetencyAutoencoder(), num_classes=10)
    estimator.fitted, estimator.holdout_accuracy, estimator.holdout_mean_score = True, 0.5, 0.5
    folder = tmp_path / "parce"
    with pytest.MonkeyPatch.context() as patch:
        fill_disk(patch, tmp_path)
        with pytest.raises(UserInputError) as caught:  # before: safetensors' SafetensorError, a traceback
            estimator.save(folder)
    assert f"cannot write in '{folder}' (writing parce.safetensors): No space left on device" in str(caught.value)
    assert scratch_files(tmp_path) == [] and not (folder / "parce.safetensors").exists()
    estimator.save(folder)  # room again: the same call writes a file the loader reads
    assert set(PaRCE.load(folder, estimator.classifier).state_dict()) == set(estimator.state_dict())


def test_safetensors_and_sqlite_spellings_of_a_full_disk_are_disk_errors(tmp_path):
    from safetensors import SafetensorError

    from nemo_train.store import disk_error

    rust = SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    )
    assert "No space left on device" in str(disk_error(rust, tmp_path / "a.safetensors"))
    assert disk_error(SafetensorError("invalid header"), tmp_path / "a.safetensors") is None
    assert disk_error(RuntimeError("process exited with code: 1"), tmp_path / "x") is None


def test_a_copy_onto_a_full_disk_names_the_destination_folder(tmp_path):
    """shutil's copy on a full disk raises ENOSPC naming the source first and the destination second (W&B copies
    its media from a temporary folder into the run's folder): the line named the temporary folder."""
    from nemo_train.store import disk_error

    source, target = tmp_path / "tmp" / "table.json", tmp_path / "run" / "wandb" / "table.json"
    source.parent.mkdir()
    source.write_text("{}")
    target.parent.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        fill_disk(patch, target.parent)
        patch.setattr(os, "sendfile", lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
        with pytest.raises(OSError) as caught:
            shutil.copyfile(source, target)
    assert str(disk_error(caught.value)).startswith(f"cannot write in '{target.parent}' (writing table.json)")


def test_the_reply_cache_on_a_full_disk_is_one_line_and_keeps_the_replies_it_has(tmp_path):
    from nemo_train.backends.cache import ResponseCache

    cache = ResponseCache(tmp_path / "llm_cache")
    cache.put("k0", ["kept"])
    connection = cache._connection()
    (pages,) = connection.execute("PRAGMA page_count").fetchone()
    connection.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own full database: SQLITE_FULL
    with pytest.raises(UserInputError) as caught:  # before: sqlite3.OperationalError, a traceback
        cache.put("k1", ["x" * 100_000])
    message = str(caught.value)
    assert message.startswith(f"cannot write in '{tmp_path / 'llm_cache'}' (writing llm_replies.sqlite)"), message
    assert "full" in message and cache.get("k0") == ["kept"] and cache.get("k1") is None


def test_distill_eval_whose_reply_cache_cannot_grow_is_one_line_naming_it(checkpoint_factory, tmp_path, monkeypatch):
    from nemo_train.backends.cache import ResponseCache
    from nemo_train.nemo.distill.rows import KnownCause
    from nemo_train.nemo.distill.student_eval import distill_eval
    from nemo_train.scoring.judges import LLMJudge

    connect = ResponseCache._connection

    def no_room(self) -> sqlite3.Connection:  # every new reply database is full from its first page
        fresh = getattr(self._local, "conn", None) is None
        conn = connect(self)
        if fresh:
            conn.execute("PRAGMA max_page_count = 1")
        return conn

    monkeypatch.setattr(ResponseCache, "_connection", no_room)
    judge = LLMJudge(ScriptedBackend(lambda messages: '{"reasoning": "r", "score": 1}', model="judge"))
    student = tmp_path / "student"
    student.mkdir()
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    with pytest.raises(UserInputError) as caught:  # before: sqlite3.OperationalError, a traceback
        distill_eval(str(student), [ckpt], methods=[KnownCause()], judges=[judge], n=2, test_styles=1,
                     out_dir=str(tmp_path / "eval"))  # fmt: skip
    assert str(caught.value).startswith(f"cannot write in '{tmp_path / 'eval' / 'llm_cache'}'"), caught.value


def test_a_library_write_that_names_no_file_is_named_by_the_run_folder(tmp_path):
    """matplotlib, W&B or torch writing through a file object raise a full disk without a file name."""
    from nemo_train.runs import RunArgs, open_run
    from nemo_train.store import disk_error

    out = tmp_path / "run"
    with pytest.raises(OSError) as caught, open_run("lbee", RunArgs(out_dir=str(out))):
        (out / "figure.png").write_bytes(b"")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what the kernel raises: no file name
    line = str(disk_error(caught.value))  # what the CLI prints, after the run let its lock go
    assert line.startswith(f"cannot write during the run in '{out}': No space left on device"), line


# ------------------------------------------------------------------------------------ damaged or wrong inputs


def test_export_of_a_truncated_adapter_is_one_line(adapter, tmp_path, capsys):
    damaged = tmp_path / "adapter"
    shutil.copytree(adapter, damaged)
    weights = damaged / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    err = one_line_error(capsys, ["export", "--adapter", str(damaged), "--out_dir", str(tmp_path / "out")])
    assert f"adapter weights '{weights}' are damaged" in err, err  # the words explain and distill-eval use


def test_test_with_a_folder_for_ckpt_path_is_one_line(tmp_path, capsys):
    from nemo_train.cli import main

    root = tmp_path / "run"
    (root / "checkpoints").mkdir(parents=True)
    preset = ROOT / "configs" / "cmnist" / "model_a.yaml"
    args = ["test", "--config", str(preset), "--trainer.default_root_dir", str(root), "--trainer.logger", "false"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--ckpt_path", str(root)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err == (
        f"nemo-train: error: ckpt_path '{root}' is a folder; expected a checkpoint file (.ckpt) (none under '{root}')"
    )


def test_prepare_opens_the_images_a_nico_folder_of_text_files_is_not_ready(tmp_path, capsys):
    from PIL import Image

    from datamodules.nico_render import CLASSES, CONTEXTS
    from nemo_train.cli import main

    for context in CONTEXTS:
        for name in CLASSES:
            (tmp_path / context / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / context / name / "0.png")
            (tmp_path / context / name / "1.jpg").write_text("not an image")
    with pytest.raises(SystemExit) as exit_info:  # before: "ready: nico" (it counted extensions)
        main(["prepare", "--dataset", "nico", "--root", str(tmp_path)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "not ready: 1 problem(s)" in err
    (line,) = [line for line in out.splitlines() if line.startswith("missing:")]
    assert line.startswith("missing: 36 of 72 sampled image files are not readable images: ")
    assert "dim_lighting/mammals/1.jpg (cannot identify image file" in line


# ------------------------------------------------------------------------------------ failures that are stored


def test_distill_eval_with_a_judge_that_answers_no_json_names_the_failed_rows_and_exits_2(
    checkpoint_factory, tmp_path, capsys
):
    from nemo_train.cli import find_user_error
    from nemo_train.nemo.distill.rows import KnownCause
    from nemo_train.nemo.distill.student_eval import distill_eval
    from nemo_train.scoring.judges import LLMJudge

    judge = LLMJudge(ScriptedBackend(lambda messages: NOT_JSON, model="judge"))
    student = tmp_path / "student"
    student.mkdir()  # rows without the student never load it
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    out = tmp_path / "eval"
    with pytest.raises(UserInputError) as caught:  # before: exit 0, nothing said, "n/a" in the table
        distill_eval(str(student), [ckpt], methods=[KnownCause()], judges=[judge], n=4, test_styles=1,
                     out_dir=str(out))  # fmt: skip
    assert find_user_error(caught.value) is caught.value and "\n" not in str(caught.value)
    assert str(caught.value).startswith("every row failed (first: ") and "not JSON" in str(caught.value)
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    failed_lines = [line for line in printed.splitlines() if "rows failed (first: " in line]
    assert rows and all(r["failed"] for r in rows) and (out / "summary.json").is_file()
    assert failed_lines and all("not JSON" in line for line in failed_lines)
    method = rows[0]["method"]
    known = sum(r["method"] == method for r in rows)
    assert f"{method} @ model_r: {known} of {known} rows failed (first: " in printed


def test_provenance_keeps_one_entry_per_command_that_wrote_into_the_folder(tmp_path):
    from nemo_train.runs import RunArgs, open_run

    out = tmp_path / "shared"
    for command, seed in (("nemo-eval", 1), ("distill-teacher", 2), ("nemo-eval", 3)):
        with open_run(command, RunArgs(out_dir=str(out), seed=seed), {"what": command}):
            (out / f"{command}.txt").write_text("output")  # the command wrote something of its own
    record = json.loads((out / "provenance.json").read_text())
    assert record["command"] == "nemo-eval" and record["run"]["seed"] == 3  # the last command at the top
    assert list(record["other_commands"]) == ["distill-teacher"]  # before: the teacher's record was gone
    from nemo_train.provenance import command_record

    teacher = command_record(out, "distill-teacher")
    assert teacher["run"]["seed"] == 2 and teacher["settings"] == {"what": "distill-teacher"}
    assert "other_commands" not in teacher and command_record(out, "nemo-eval")["run"]["seed"] == 3
    assert command_record(out, "lbee") is None


def failing_parts(methods: list[str], tmp_path: Path, pair: list[str]):
    from nemo_train.differences.explorers import LLMExplorer
    from nemo_train.differences.generators import CMNISTGenerator
    from nemo_train.differences.methods import OptimizationArgs
    from nemo_train.differences.models import model_pair
    from nemo_train.differences.pipeline import Explainers, ProtocolArgs, SamplingArgs, run_differences
    from nemo_train.differences.summarizers import LLMSummarizer

    backend = ScriptedBackend(lambda messages: NOT_JSON, model="chatty")
    model_a, model_b = model_pair(pair)
    return run_differences(
        CMNISTGenerator(), model_a, model_b, tmp_path / "run", Explainers(None, LLMSummarizer(backend),
        LLMExplorer(backend)), methods, SamplingArgs(samples_per_condition=2),
        ProtocolArgs(observed_conditions=6, test_conditions=12, attribution_questions=0),
        OptimizationArgs(iterations=2, conditions_per_iteration=2, candidates=2, initial_conditions=3),
        heatmap_grid=False,
    )  # fmt: skip


def test_differences_stores_a_failed_summariser_as_failed_and_says_so_in_one_line(pair, tmp_path, capsys):
    result = failing_parts(["raw_differences", "summarization"], tmp_path, pair)
    assert [r.method for r in result.rows] == ["raw_differences"]  # before: Summarization scored as 0.000
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["failed"]["summarization"]["part"] == "summarizer"
    assert saved["failures"]["summarizer"] == {
        "label": "LLM chatty", "requests": 1, "failed": 1,
        "first_error": "a reply that stayed unreadable (no JSON object) after the re-asks",
    }  # fmt: skip
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "requests failed" in line]
    assert line == (
        "summariser LLM chatty: 1 of 1 requests failed (first: a reply that stayed unreadable (no JSON object) "
        "after the re-asks); not scored: summarization"
    )


def test_differences_exits_2_when_every_method_failed_and_results_json_says_why(pair, tmp_path, capsys):
    with pytest.raises(UserInputError) as caught:  # before: exit 0 with 0.000 rows
        failing_parts(["summarization", "optimization"], tmp_path, pair)
    message = str(caught.value)
    assert message.startswith("every method failed, nothing was scored (summarization: the summariser LLM chatty")
    assert "\n" not in message
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["rows"] == [] and set(saved["failed"]) == {"summarization", "optimization"}
    printed = [line for line in capsys.readouterr().out.splitlines() if "requests failed" in line]
    assert len(printed) == 1 and printed[0].startswith("summariser LLM chatty: ")  # the explorer was never asked


def test_differences_optimization_whose_explorer_always_fails_is_stored_as_failed(pair, tmp_path, capsys):
    from nemo_train.differences.explorers import LLMExplorer
    from nemo_train.differences.generators import CMNISTGenerator
    from nemo_train.differences.methods import OptimizationArgs
    from nemo_train.differences.models import model_pair
    from nemo_train.differences.pipeline import Explainers, ProtocolArgs, SamplingArgs, run_differences

    model_a, model_b = model_pair(pair)
    explorer = LLMExplorer(ScriptedBackend(lambda messages: NOT_JSON, model="explorer"))
    result = run_differences(
        CMNISTGenerator(), model_a, model_b, tmp_path / "run", Explainers(explorer=explorer),
        ["raw_differences", "optimization"], SamplingArgs(samples_per_condition=2),
        ProtocolArgs(observed_conditions=6, test_conditions=12, attribution_questions=0),
        OptimizationArgs(iterations=2, conditions_per_iteration=2, candidates=2, initial_conditions=3),
        heatmap_grid=False,
    )  # fmt: skip
    assert [r.method for r in result.rows] == ["raw_differences"]
    assert result.failed["optimization"]["part"] == "explorer"
    assert "failed on all 2 requests" in result.failed["optimization"]["reason"]
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "requests failed" in line]
    assert line.startswith("explorer LLM explorer: 2 of 2 requests failed (first: a reply that stayed unreadable")
    assert line.endswith("; not scored: optimization")


def test_a_log_file_on_a_full_disk_prints_no_traceback_per_record(tmp_path, capsys):
    """``fit`` with W&B on a full disk printed a "--- Logging error ---" traceback for every record W&B's debug log
    could not take, before the one line that names the folder."""
    import logging

    from nemo_train.cli import main

    folder = tmp_path / "wandb"
    folder.mkdir()
    logger = logging.getLogger("wandb.full-disk-test")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logging, "raiseExceptions", True)  # Python's default, as a fresh process has it
        fill_disk(patch, folder)
        handler = logging.StreamHandler(open(folder / "debug.log", "w"))  # noqa: SIM115 (closed below)
        logger.addHandler(handler)
        try:
            with pytest.raises(SystemExit):
                main(["prepare", "--dataset", "nico", "--root", str(tmp_path / "none")])
            for _ in range(3):
                logger.warning("a record the disk cannot take")
        finally:
            logger.removeHandler(handler)
            handler.stream.close()
    assert "Logging error" not in capsys.readouterr().err
