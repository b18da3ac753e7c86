"""SIGKILL mid-run, every command: ``distill-eval``, ``differences``, ``lbee``, ``counterfactuals`` and ``explain``
are started through the real command line in their own process group, killed (the whole group) once a file they
write shows them mid-way, and run again to the end: the final results equal an uninterrupted run's, with nothing
lost or written twice. The kill must land while the command runs (a run that ended first fails the test).

``fit``, ``nemo-eval`` and ``distill-teacher`` have theirs: ``test_exact_resume.py``,
``tests/nemo/test_run.py::test_kill_minus_nine_then_resume`` and ``tests/nemo/distill/test_teacher_distributed.py``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import forked_commands
import pytest
import yaml
from differences_runs import differences_argv
from distributed_runs import holding, run_in_process, run_to_end
from lbee_runs import write_lbee_config

pytestmark = [pytest.mark.fault, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: a safety net only: every marker below shows up within seconds
DEADLINE_S = 300


def environment(cache: Path | None = None) -> dict[str, str]:
    """The children's environment: one thread, W&B off, and the tiny explainer's cache in ``cache``."""
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env["NEMO_TRAIN_CACHE"] = str(cache)
    return env


def command(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "nemo_train.cli", name, *args]


def run_uninterrupted(argv: list[str], cwd: Path, cache: Path | None = None) -> None:
    """Run the command of ``argv`` (:func:`command`) to its end in this process, started in ``cwd``, as the
    command line runs it (``run_pipeline``): on one thread as the children run (``OMP_NUM_THREADS=1``), W&B off,
    the tiny explainer's cache in ``cache``. The uninterrupted reference; a child process would spend most of
    its time importing. The killed run and its rerun are child processes (forked pre-imported)."""
    run_in_process(argv[2:], cwd, {"NEMO_TRAIN_CACHE": str(cache)} if cache is not None else None)


def kill_when(argv: list[str], env: dict[str, str], cwd: Path, mid_run: Callable[[], bool], hold_after: str) -> None:
    """Start ``argv`` in a new process group (forked pre-imported: ``tests/forked_commands.py``), made to stop for
    good once it has written ``hold_after`` (a file name; :func:`distributed_runs.holding`), poll ``mid_run`` every
    10 ms, and SIGKILL the group as soon as it holds. Fails when the command ended before the kill (the test would
    prove nothing)."""
    proc = forked_commands.start(argv, holding(env, hold_after), cwd, stderr=cwd / "killed.stderr")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while proc.poll() is None and not mid_run() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:  # the whole group, also when the deadline passed or the test was interrupted
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log = (cwd / "killed.stderr").read_text(errors="replace")[-2000:]
    assert proc.returncode == -signal.SIGKILL, f"the run ended (status {proc.returncode}) before the kill: {log}"
    assert mid_run(), f"no sign of the run being mid-way after {DEADLINE_S} s"


def wrote_only_in_out_dir(cwd: Path) -> bool:
    """Whether the runs started in ``cwd`` left nothing there but their out_dir (``run``) and the killed run's
    captured stderr: no cache, log, W&B or lightning folder relative to where the command was started."""
    return {p.name for p in cwd.iterdir()} <= {"run", "killed.stderr"}


def kill_then_reuse(argv: list[str], cwd: Path, recorded: str, weights: str, reference: Path) -> None:
    """Kill the run in ``cwd / "run"`` once its artefact is saved and ``recorded`` (a path under the run) exists,
    before its results; rerun it to its end: the artefact's ``weights`` file is reused as it was (not made
    again) and equals the uninterrupted ``reference`` run's."""
    out = cwd / "run"
    kill_when(argv, environment(), cwd, (out / recorded).is_file, Path(recorded).name)
    assert not (out / "results.json").exists()
    before = unchanged(out / weights)
    run_to_end(argv, environment(), cwd)
    assert wrote_only_in_out_dir(cwd)
    assert unchanged(out / weights) == before  # reused, not made again
    assert (out / weights).read_bytes() == (reference / weights).read_bytes()


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def saved(out: Path) -> str:
    """``out/results.json`` with ``out`` replaced by ``<out>``, as canonical text (so that NaN equals NaN)."""
    return json.dumps(json.loads((out / "results.json").read_text().replace(str(out), "<out>")), sort_keys=True)


def unchanged(path: Path) -> tuple[int, int]:
    """What changes when a file is written again: its inode and modification time."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


# ------------------------------------------------------------------------------------------------ distill-eval


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory) -> Path:
    """The tiny explainer's folder (``NEMO_TRAIN_CACHE``) of this module's runs, never the user's cache."""
    return tmp_path_factory.mktemp("nemo_train_cache")


@pytest.fixture(scope="module")
def student(tiny_cache, tmp_path_factory) -> Path:
    """An untrained tiny student adapter (its greedy answers are not JSON: those rows are stored as failed)."""
    from nemo_train.explainer import ExplainerModule

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NEMO_TRAIN_CACHE", str(tiny_cache))
        module = ExplainerModule(lora_r=2)
        module.configure_model()
        return module.save_adapter(tmp_path_factory.mktemp("student") / "adapter")


def distill_eval_argv(student: Path, checkpoint: str, out: Path) -> list[str]:
    return command(
        "distill-eval", "--student", str(student), "--targets", f"[{checkpoint}]",
        "--methods", "[ExhaustiveTeacher, StudentGreedy, KnownCause]", "--n", "4", "--test_styles", "1",
        "--error_batch", "2", "--max_new_tokens", "6", "--device", "cpu", "--out_dir", str(out),
    )  # fmt: skip


@pytest.fixture(scope="module")
def distill_eval_reference(student, model_a_checkpoint, tiny_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("distill_eval") / "run"
    run_uninterrupted(distill_eval_argv(student, model_a_checkpoint, out), out.parent, tiny_cache)
    return out / "results.jsonl"


def records(path: Path) -> dict[str, dict]:
    return {r["key"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_distill_eval_killed_mid_run_resumes_to_the_uninterrupted_rows(
    student, model_a_checkpoint, tiny_cache, distill_eval_reference, tmp_path
):
    reference = records(distill_eval_reference)
    assert len(reference) == 16  # teacher, student, KnownCause and the Constant row for 4 errors
    out, env = tmp_path / "run", environment(tiny_cache)
    argv = distill_eval_argv(student, model_a_checkpoint, out)
    results = out / "results.jsonl"
    kill_when(argv, env, tmp_path, lambda: line_count(results) >= 1, results.name)
    before = records(results)
    assert 1 <= len(before) < len(reference)

    run_to_end(argv, env, tmp_path)
    assert wrote_only_in_out_dir(tmp_path)
    assert records(results) == reference  # same rows, settings and numbers
    written = Counter(r["key"] for r in map(json.loads, results.read_text().splitlines()))
    again = {key for key, count in written.items() if count > 1}
    # only a row stored as failed before the kill is written again (a rerun retries failures), and only once
    assert again <= {key for key, r in before.items() if r["failed"]} and max(written.values()) <= 2
    assert len(written) == len(reference)


# ------------------------------------------------------------------------------------------------- differences


@pytest.fixture(scope="module")
def differences_reference(differences_one_process_run) -> Path:
    """``tests/differences_runs.py``'s run (also ``test_differences_distributed.py``'s) uninterrupted (made once
    per session, shared with that module); the heat map measures the whole 1,300-condition grid."""
    return differences_one_process_run[0]


def test_differences_killed_mid_run_measures_the_rest_and_scores_as_uninterrupted(
    untrained_cmnist_pair, differences_reference, tmp_path
):
    out = tmp_path / "run"
    argv, cache = differences_argv(untrained_cmnist_pair, out), out / "diff_model_cache.json"
    # the first sweep (the test conditions) is saved; later sweeps and the scores are not written yet
    kill_when(
        argv, environment(), tmp_path, lambda: cache.is_file() and not (out / "results.json").exists(), cache.name
    )
    assert not (out / "results.json").exists()
    reference_cache = json.loads((differences_reference / "diff_model_cache.json").read_text())
    measured = json.loads(cache.read_text())
    assert 1 <= len(measured) < len(reference_cache)

    run_to_end(argv, environment(), tmp_path)
    assert wrote_only_in_out_dir(tmp_path)
    final_cache = json.loads(cache.read_text())
    assert list(final_cache.items()) == list(reference_cache.items())  # same values, same order, none twice
    assert saved(out) == saved(differences_reference)


# -------------------------------------------------------------------------------------------------------- lbee


@pytest.fixture(scope="module")
def lbee_config(tiny_nico_classifier, tmp_path_factory) -> Path:
    """``tests/lbee_runs.py``'s tiny run (also ``test_lbee_distributed.py``'s): a classifier fitted for one epoch
    on tiny NICO-like data and a tiny joint space trained into ``<out_dir>/clip`` (the default place)."""
    return write_lbee_config(tiny_nico_classifier, tmp_path_factory.mktemp("lbee_inputs") / "lbee.yaml")


@pytest.fixture(scope="module")
def lbee_reference(lbee_one_process_run) -> Path:
    """The same run uninterrupted (made once per session, shared with ``test_lbee_distributed.py``)."""
    return lbee_one_process_run[0]


def test_lbee_killed_after_training_its_joint_space_reuses_it_and_scores_as_uninterrupted(
    lbee_config, lbee_reference, tmp_path
):
    out = tmp_path / "run"
    argv = command("lbee", "--config", str(lbee_config), "--out_dir", str(out))
    # killed once the joint space is trained, saved and recorded
    kill_then_reuse(argv, tmp_path, "clip.fingerprint.json", "clip/model.safetensors", lbee_reference)
    assert saved(out) == saved(lbee_reference)


# --------------------------------------------------------------------------------------------- counterfactuals


#: ``test_counterfactuals_command_prints_table_one``'s run: every method, three steps each, two images per cause,
#: a one-epoch autoencoder
COUNTERFACTUALS = """
datamodule:
  class_path: datamodules.cmnist.CMNISTDataModule
  init_args: {train_size: 1000, test_styles: 1, batch_size: 32}
autoencoder:
  class_path: nemo_train.competency.autoencoder.CompetencyAutoencoder
  init_args: {image_size: 28, widths: [8, 16], latent_dim: 16}
methods:
  - {class_path: nemo_train.competency.gradient_counterfactuals.ImageGradientDescent, init_args: {max_iter: 3}}
  - {class_path: nemo_train.competency.gradient_counterfactuals.FeatureGradientDescent, init_args: {max_iter: 3}}
  - {class_path: nemo_train.competency.counterfactuals.ReconstructionCounterfactual}
  - {class_path: nemo_train.competency.gradient_counterfactuals.LatentGradientDescent, init_args: {max_iter: 3}}
  - {class_path: nemo_train.competency.counterfactuals.LatentNearestNeighbor}
causes: {per_cause: 2}
estimator: {threshold: 0.1}
train: {autoencoder_epochs: 1}
device: cpu
"""


@pytest.fixture(scope="module")
def counterfactuals_config(model_a_checkpoint, tmp_path_factory) -> Path:
    config = {**yaml.safe_load(COUNTERFACTUALS), "classifier": model_a_checkpoint}
    path = tmp_path_factory.mktemp("counterfactuals_inputs") / "cf.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def counterfactuals_reference(counterfactuals_config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("counterfactuals") / "run"
    argv = command("counterfactuals", "--config", str(counterfactuals_config), "--out_dir", str(out))
    run_uninterrupted(argv, out.parent)
    return out


def table(out: Path) -> str:
    """``results.json`` without the timings (seconds per image) and with ``out`` replaced."""
    results = json.loads(saved(out))
    for row in results["table"].values():
        row.pop("sec_per_image")
    return json.dumps(results, sort_keys=True)


def test_counterfactuals_killed_after_calibrating_reuses_the_estimator_and_scores_as_uninterrupted(
    counterfactuals_config, counterfactuals_reference, tmp_path
):
    out = tmp_path / "run"
    argv = command("counterfactuals", "--config", str(counterfactuals_config), "--out_dir", str(out))
    # killed once the estimator is calibrated, saved and recorded
    kill_then_reuse(
        argv, tmp_path, "parce/parce.json.fingerprint.json", "parce/parce.safetensors", counterfactuals_reference
    )
    assert table(out) == table(counterfactuals_reference)


# ----------------------------------------------------------------------------------------------------- explain


@pytest.fixture(scope="module")
def explain_inputs(tiny_cache, tmp_path_factory) -> tuple[Path, Path]:
    """Eighteen embedded six-cause pairs and a tiny explainer adapter with random LoRA weights (so that sampled
    answers differ from input to input): ``(pairs file, adapter folder)``."""
    import torch

    from datamodules.explanations import build_six_cause_pairs
    from nemo_train.explainer import ExplainerModule

    folder = tmp_path_factory.mktemp("explain_inputs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NEMO_TRAIN_CACHE", str(tiny_cache))
        pairs = build_six_cause_pairs(folder / "pairs", per_cause=3, seed=0, val_fraction=0.0)["train"]
        module = ExplainerModule(lora_r=2)
        module.configure_model()
        torch.manual_seed(0)
        for name, param in module.model.named_parameters():
            if "lora_B" in name:
                param.data.normal_(0.0, 0.5)
        return pairs, module.save_adapter(folder / "adapter")


def sampled_explain_argv(inputs: tuple[Path, Path], out: Path) -> list[str]:
    """Sampled answers (the seed matters), two images per ``generate`` call."""
    pairs, adapter = inputs
    return command(
        "explain", "--model", str(adapter), "--pairs", str(pairs), "--out_dir", str(out), "--device", "cpu",
        "--generation.temperature", "1.0", "--seed", "3", "--generation.max_new_tokens", "24",
        "--generation.batch_size", "2",
    )  # fmt: skip


@pytest.fixture(scope="module")
def explain_reference(explain_inputs, tiny_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("explain") / "run"
    run_uninterrupted(sampled_explain_argv(explain_inputs, out), out.parent, tiny_cache)
    return out


def outputs(out: Path) -> tuple[bytes, bytes]:
    return (out / "explanations.jsonl").read_bytes(), (out / "explanations.jsonl.accuracy.json").read_bytes()


def test_explain_killed_mid_run_resumes_to_the_uninterrupted_explanations(
    explain_inputs, tiny_cache, explain_reference, tmp_path
):
    total = line_count(explain_inputs[0])
    assert line_count(explain_reference / "explanations.jsonl") == total == 18
    out, env = tmp_path / "run", environment(tiny_cache)
    argv, explanations = sampled_explain_argv(explain_inputs, out), out / "explanations.jsonl"
    kill_when(argv, env, tmp_path, lambda: line_count(explanations) >= 1, explanations.name)
    assert 1 <= line_count(explanations) < total

    run_to_end(argv, env, tmp_path)
    assert wrote_only_in_out_dir(tmp_path)
    assert outputs(out) == outputs(explain_reference)  # one line per input, in order, the same answers


def test_explain_killed_between_two_records_of_a_batch_samples_what_an_uninterrupted_run_samples(
    explain_inputs, tiny_cache, explain_reference, tmp_path
):
    """The kill above lands between batches or inside one, by chance; here it is inside one, for certain: the
    first record of the second batch was written and the second was cut short. Before, the rerun batched the
    pending inputs from there (other batches, other seeds) and sampled other answers."""
    lines = (explain_reference / "explanations.jsonl").read_bytes().splitlines(keepends=True)
    out = tmp_path / "run"
    out.mkdir()
    (out / "explanations.jsonl").write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    run_to_end(sampled_explain_argv(explain_inputs, out), environment(tiny_cache), tmp_path)
    assert outputs(out) == outputs(explain_reference)
