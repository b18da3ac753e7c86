"""Benchmark of the model-differences pipeline.

1. Diff_Model over the CMNIST condition grid (1,300 conditions, 20 samples each): every condition's
   images rendered and classified in large batches vs one condition at a time (conditions/s, ratio).
2. Language-model calls per Completeness / Density evaluation, with and without the response cache
   (a scripted backend answering like an evaluator; the counts are what an endpoint would receive).

    python scripts/bench_differences.py [--conditions 1300] [--samples 20] [--models DIR]

``--models`` is a folder holding cmnist_model_a.ckpt / cmnist_model_b.ckpt (any ``nemo-train fit``
checkpoints of the CMNIST pair); this script trains two small bias_cnn models there first when they are
missing (the timings do not depend on how well they are trained).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from datamodules.cmnist import CMNISTDataModule
from nemo_train.backends import ScriptedBackend
from nemo_train.backends.cache import ResponseCache
from nemo_train.console import print_table
from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.evaluators import LLMEvaluator
from nemo_train.differences.generators import CMNIST_SPACE, CMNISTGenerator
from nemo_train.differences.metrics import completeness, density
from nemo_train.differences.models import SpecClassifier
from nemo_train.models import ClassifierModule
from nemo_train.models.specs import FitCheckpoint
from nemo_train.models.trainer import quiet_trainer

HUMAN = (
    "Model A is worse than model B when the digits of 0, 1, 2, 3, and 4 are not colored in red regardless of the "
    "rotation angle. Model B is worse than model A when the digits of 5, 6, 7, 8, and 9 are not colored in blue "
    "regardless of the rotation angle."
)


def models(folder: Path) -> tuple[SpecClassifier, SpecClassifier]:
    pair = []
    for name, bias in (("cmnist_model_a", "model_a"), ("cmnist_model_b", "model_b")):
        path = folder / f"{name}.ckpt"
        if not path.is_file():  # this benchmark's own stand-ins, trained here on purpose
            module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)
            trainer = quiet_trainer(max_epochs=2)
            trainer.fit(module, CMNISTDataModule(bias=bias, train_size=3000, batch_size=64, test_styles=1))
            folder.mkdir(parents=True, exist_ok=True)
            trainer.save_checkpoint(str(path), weights_only=True)
        model = SpecClassifier(FitCheckpoint(str(path)), name=name)
        model.prepare(folder.parent, torch.device("cpu"))
        pair.append(model)
    return tuple(pair)


def bench_diff_model(model_a, model_b, count: int, samples: int) -> list[tuple]:
    generator = CMNISTGenerator()
    conditions = CMNIST_SPACE.grid()[:count]
    rows, values = [], {}
    for mode, batched in (("batched (4,096 images per batch)", True), ("one condition at a time", False)):
        diff = DiffModel(model_a, model_b, generator, n=samples, images_per_batch=4096)
        start = time.perf_counter()
        values[batched] = [o.diff for o in diff.observe(conditions, batched=batched)]
        seconds = time.perf_counter() - start
        rows.append([mode, len(conditions), samples, seconds, len(conditions) / seconds])
    assert np.allclose(values[True], values[False]), "batched and one-at-a-time Diff_Model differ"
    rows[0].append(rows[0][4] / rows[1][4])
    rows[1].append(1.0)
    return rows


def bench_llm_calls(questions: int) -> list[tuple]:
    def reply(messages) -> str:
        text = messages[-1]["content"][0]["text"] if isinstance(messages[-1]["content"], list) else ""
        return "[2] Model B" if "red" in text else "[3] Cannot be determined"

    rng = np.random.default_rng(0)
    grid = CMNIST_SPACE.grid()
    conditions = [grid[i] for i in rng.choice(len(grid), questions, replace=False)]
    diffs = rng.normal(size=questions)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, cache in (("without cache", None), ("with cache", ResponseCache(Path(tmp)))):
            backend = ScriptedBackend(reply, cache=cache)
            evaluator = LLMEvaluator(backend)
            evaluator.bind(CMNIST_SPACE, "digit classifiers")
            for attempt in ("first evaluation", "repeated evaluation"):
                before = backend.stats.requests
                _, answers = completeness(evaluator, HUMAN, conditions, diffs)
                after_c = backend.stats.requests
                density(evaluator, HUMAN, conditions, diffs, full_answers=answers)  # as the pipeline scores
                rows.append([label, attempt, questions, after_c - before, backend.stats.requests - after_c])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conditions", type=int, default=1300)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--models", default=str(Path(tempfile.gettempdir()) / "bench_differences" / "models"))
    args = parser.parse_args()
    torch.manual_seed(0)
    model_a, model_b = models(Path(args.models))
    print_table(
        ["Diff_Model", "conditions", "samples", "seconds", "conditions/s", "speed-up"],
        bench_diff_model(model_a, model_b, args.conditions, args.samples),
        title="Diff_Model over the CMNIST grid (CPU; timings inflated on a shared machine)",
    )
    print_table(
        ["cache", "run", "questions", "Completeness calls", "Density calls"],
        bench_llm_calls(args.questions),
        title="Evaluator LLM calls per Completeness / Density evaluation",
    )


if __name__ == "__main__":
    main()
