"""``nemo-train distill-eval``: NEMO evaluation of a distilled explainer next to its teacher and KnownCause.

On held-out errors of each target (the test grid of a generated benchmark; the teacher mined a disjoint
split) it runs the configured rows (``nemo_train.nemo.distill_methods``), with the student as the MLLM everywhere:

* ``ExhaustiveTeacher`` — the exhaustive single-attribute search (the max-CEI edit; not a language model);
* ``StudentGreedy`` — one greedy pass of the student on the error image;
* ``StudentSciTX`` — SciTX with the student as hypothesis source (``m`` sampled answers, argmax CEI);
* ``StudentCamMLLM`` — the student reads the Grad-CAM overlay of the prediction;
* ``StudentChangeMLLM`` — the student compares the error with a correctly classified reference;
* ``KnownCause`` — names the planted bias (edit derived by the keyword deriver, a rule-based parser).

Each row explains ``error_batch`` errors at a time with one batched request to the student.
The student's edits are read from its structured answers (:class:`~nemo_train.nemo.structured.StructuredEditDeriver`).
LLM Match comes from the keyword judge (closed-vocabulary synthetic data only, not a model). Every target
after the first is a classifier whose errors the student never saw in distillation: the generalisation
report. Results resume from ``<out_dir>/results.jsonl`` like ``nemo-eval``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from jsonargparse.typing import PositiveInt

from nemo_train.backends.student import StudentBackend
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import build_synthetic_benchmark
from nemo_train.nemo.components.targets import CheckpointTarget, unique_names
from nemo_train.nemo.distill_methods import DistillContext, DistillMethod, default_distill_methods
from nemo_train.nemo.evaluation import Progress, TargetJob, flatten, run_target
from nemo_train.nemo.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.nemo.judges import JudgePanel, KeywordJudge
from nemo_train.nemo.structured import StructuredEditDeriver
from nemo_train.nemo.targets import load_checkpoint_target
from nemo_train.store import ResultStore


def mean_scores(records) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """Mean LLM Match (judged rows only) and mean CEI per (method, target); failed rows (a request that
    failed for good; a rerun retries them) are left out of both."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["method"], r["target"]), []).append(r)
    out = {}
    for key, rows in groups.items():
        done = [r for r in rows if not r.get("failed")]
        judged = [r["llm_match"] for r in done if r.get("llm_match") is not None]
        cei = sum(r["cei"] for r in done) / len(done) if done else None
        out[key] = (sum(judged) / len(judged) if judged else None, cei)
    return out


def distill_eval(
    student: str,
    targets: list[str],
    biases: list[str] | None = None,
    dataset: Literal["cmnist", "clevr"] = "cmnist",
    methods: list[DistillMethod] | None = None,
    n: PositiveInt = 32,
    seed: int = 0,
    test_styles: PositiveInt = 2,
    data_kwargs: dict | None = None,
    error_batch: PositiveInt = 32,
    max_new_tokens: PositiveInt = 128,
    out_dir: str = "checkpoints/distill_cmnist/eval",
) -> dict:
    """Evaluate a distilled explainer with NEMO (CEI, LLM Match) on held-out errors, next to its teacher and KnownCause.

    Args:
        student: the distilled explainer's adapter folder (``<fit root>/adapter``).
        targets: classifier checkpoints; the first is the one distilled on, the others are the
            generalisation report (biases the student never saw).
        biases: the bias preset of each target (which errors are bias-conflicting; default: the dataset's).
        dataset: ``cmnist`` or ``clevr``.
        methods: the rows (default: all): ``ExhaustiveTeacher``, ``StudentGreedy``, ``StudentSciTX``,
            ``StudentCamMLLM``, ``StudentChangeMLLM``, ``KnownCause`` from ``nemo_train.nemo.distill_methods``.
        n: held-out errors (test grid) per target.
        seed: their sampling seed.
        test_styles: exemplars / views per cell of the test attribute grid.
        data_kwargs: extra datamodule arguments (e.g. ``{image_size: 32}`` for CLEVR).
        error_batch: errors a row explains together: the student answers them in one padded ``generate``
            call (its LoRA weights merged into the base model).
        max_new_tokens: the longest answer the student writes (its structured answers take ~50-90 tokens; the
            cap keeps one sampled answer that never ends from holding its whole batch).
        out_dir: ``results.jsonl`` and the reply cache; reruns resume (a row whose options changed recomputes).
    """
    if not Path(student).is_dir():
        raise UserInputError(f"student adapter folder {student!r} does not exist; run the distilled explainer's fit")
    missing = [t for t in targets if not Path(t).is_file()]
    if missing:
        raise UserInputError(f"classifier checkpoint(s) {missing} do not exist")
    if biases is not None and len(biases) != len(targets):
        raise UserInputError(f"{len(biases)} biases for {len(targets)} targets; give one per target")
    rows = list(methods) if methods else default_distill_methods()
    out = Path(out_dir)
    store = ResultStore(out / "results.jsonl")
    backend = StudentBackend(student, cache=out / "llm_cache", batch_size=error_batch, max_new_tokens=max_new_tokens)
    panel = JudgePanel([KeywordJudge(dataset)])
    started, progress = time.perf_counter(), Progress()
    target_specs = [CheckpointTarget(t) for t in targets]
    for i, (spec, target_spec, target_name) in enumerate(zip(targets, target_specs, unique_names(target_specs))):
        target = load_checkpoint_target(spec)
        bias = biases[i] if biases else None
        bench = build_synthetic_benchmark(
            dataset,
            target=target,
            n=n,
            seed=seed,
            bias=bias,
            test_styles=test_styles,
            datamodule_kwargs=data_kwargs,
        )
        editor, editable = ExactAttributeEditor(bench.renderer), bench.cause["editable"]
        ctx = DistillContext(
            bench,
            target,
            backend,
            structured=CounterfactualScorer(target, StructuredEditDeriver(bench.vocabulary, editable), editor),
            keyword=CounterfactualScorer(target, KeywordAttributeDeriver(bench.vocabulary, editable), editor),
        )
        shared = {
            "target": target_spec.identity(),
            "student": backend.fingerprint(),
            "errors": {"dataset": dataset, "bias": bias, "n": n, "seed": seed, "test_styles": test_styles},
            "data_kwargs": data_kwargs or {},
        }
        for row in rows:
            method, scorer = row.build(ctx)
            job = TargetJob(
                target_name, bench, scorer, panel, [(method, flatten({**shared, "method": row.settings()}))]
            )
            run_target(job, store, progress, batch_size=error_batch)
    summary = mean_scores(store.get(key) for key in dict.fromkeys(progress.keys))
    target_names = list(dict.fromkeys(t for _, t in summary))
    table = []
    for method in dict.fromkeys(mm for mm, _ in summary):
        row = [method]
        for t in target_names:
            row += list(summary.get((method, t), (None, None)))
        table.append(row)
    columns = ["method"] + [f"{t} {c}" for t in target_names for c in ("LLM Match", "CEI")]
    print_table(
        columns,
        table,
        title=f"Distilled explainer on held-out {dataset} errors (distilled on {target_names[0]}; others: unseen biases)",
        caption="LLM Match: keyword judge (closed-vocabulary synthetic only, not a model); CEI in percentage points",
        digits=3,
    )
    print(f"{len(progress.keys)} rows in {time.perf_counter() - started:.1f} s; results in {store.path}")
    return {
        "summary": {f"{mm}|{t}": {"llm_match": v[0], "cei": v[1]} for (mm, t), v in summary.items()},
        "results": str(store.path),
    }
