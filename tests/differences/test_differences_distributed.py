"""``differences --devices 2``: two processes (Lightning Fabric, gloo on CPU) split every Diff_Model sweep condition
by condition (test and observed conditions, the explored ones, the heat-map grid); the first runs the explainers,
and the run equals the one-process run (same results.json, same table, same Diff_Model cache)."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
from differences_runs import run_differences
from distributed_runs import FixedRanks, printed_table

from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.generators import CMNIST_SPACE, CMNISTGenerator
from nemo_train.differences.models import SpecClassifier
from nemo_train.models import ClassifierModule
from nemo_train.sharding import Ranks


def test_shares_of_a_sweep_are_disjoint_and_equal_the_whole_sweep(tmp_path):
    pair = []
    for seed in (0, 1):
        L.seed_everything(seed, verbose=False)
        pair.append(SpecClassifier.from_module(f"m{seed}", ClassifierModule(backbone="bias_cnn", num_classes=10)))
    generator, conditions = CMNISTGenerator(), CMNIST_SPACE.grid()[::13]
    whole = DiffModel(*pair, generator, n=3, images_per_batch=300, ranks=Ranks())  # one chunk of 100 conditions
    values = {o.condition: (o.acc_a, o.acc_b) for o in whole.observe(conditions)}
    shares = [DiffModel(*pair, generator, n=3, images_per_batch=12, ranks=FixedRanks(r, 2)) for r in (0, 1)]
    measured = [share._measure(conditions, per_chunk=4) for share in shares]  # other batches, other neighbours
    assert [len(m) for m in measured] == [50, 50] and not set(measured[0]) & set(measured[1])
    assert {**measured[0], **measured[1]} == {whole._key(c): v for c, v in values.items()}
    assert len(set(values.values())) > 1  # the values differ from condition to condition


def results(out: Path) -> dict:
    saved = json.loads((out / "results.json").read_text())
    saved.pop("files")  # paths under each run's own folder
    return saved


@pytest.mark.slow
def test_two_processes_give_the_one_process_result(untrained_cmnist_pair, differences_one_process_run, tmp_path):
    one, one_stdout = differences_one_process_run
    two = tmp_path / "two"
    two_stdout = run_differences(untrained_cmnist_pair, two, 2)
    assert results(two) == results(one)
    assert [r["method"] for r in results(one)["rows"]] == ["raw_differences", "summarization", "optimization"]
    title = "Model differences"
    assert printed_table(two_stdout, title) == printed_table(one_stdout, title)
    assert two_stdout.count(title) == 1  # only the first process prints
    cache = json.loads((one / "diff_model_cache.json").read_text())
    assert len(cache) == 1300  # the heat map measured the whole digit x colour x angle grid
    assert (two / "diff_model_cache.json").read_text() == (one / "diff_model_cache.json").read_text()
    assert (two / "heatmap.png").is_file() and not list(two.glob("*.tmp"))
    assert json.loads((two / "provenance.json").read_text())["world_size"] == 2
