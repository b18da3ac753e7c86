"""``nemo-train distill-eval``: NEMO evaluation of a distilled explainer next to its teacher and KnownCause.

On held-out errors of each target (the test grid of a generated benchmark, or an evaluation image folder; the
teacher mined a disjoint split) it runs the configured rows (``nemo_train.nemo.distill.rows``), with the student as the MLLM everywhere:

* ``ExhaustiveTeacher`` — the exhaustive single-attribute search (the max-CEI edit; not a language model);
* ``StudentGreedy`` — one greedy pass of the student on the error image;
* ``StudentSciTX`` — SciTX with the student as hypothesis source (``m`` sampled answers, argmax CEI);
* ``StudentCamMLLM`` — the student reads the Grad-CAM overlay of the prediction;
* ``StudentChangeMLLM`` — the student compares the error with a correctly classified reference;
* ``KnownCause`` — names the planted bias (edit derived by the keyword deriver, a rule-based parser).

Each row explains ``error_batch`` errors at a time with one batched request to the student.
On generated data every answer's edit is derived from its sentence (:class:`~nemo_train.scoring.text_edits.TextEditDeriver`:
the blamed factor back to its typical value; an ``Edit:`` line that agrees gives the value, one that contradicts
the sentence makes the answer inconsistent, scored 0), re-rendered exactly; on folder data the student's stated
editing instruction (:class:`~nemo_train.scoring.structured.StructuredEditDeriver`) is applied by a diffusers editor (where the teacher and KnownCause rows do not exist). LLM Match comes from the configured judges
(default on generated data: the grounded judge, an attribute parser checked against the fact sheet, not a
model). The table's title names the classifiers the student was distilled on only where the adapter's training
pairs record them (:func:`~nemo_train.nemo.distill.lineage.distilled_classifiers`) or ``distilled_on`` states them;
any other target is one whose errors it never saw: the generalisation report. Results resume from
``<out_dir>/results.jsonl`` like ``nemo-eval``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jsonargparse.typing import PositiveInt

from nemo_train.artefacts import path_digest
from nemo_train.backends.student import StudentBackend, check_adapter_folder
from nemo_train.errors import UserInputError
from nemo_train.models.class_mapping import ClassMapping
from nemo_train.models.specs import ClassifierSpec, as_classifier, unique_names
from nemo_train.nemo.distill.lineage import distilled_classifiers
from nemo_train.nemo.distill.rows import (
    DistillContext,
    DistillMethod,
    ExhaustiveSearchExplainer,
    ExhaustiveTeacher,
    KnownCause,
    default_distill_methods,
    student_distill_methods,
)
from nemo_train.nemo.distill.summary import mean_scores, print_summary
from nemo_train.nemo.distill.zoo_members import ZooSide
from nemo_train.nemo.distill.zoo_targets import pooled_report, zoo_targets
from nemo_train.nemo.evaluation import (
    Progress,
    TargetJob,
    flatten,
    most_frequent_explanation,
    run_constant,
    run_target,
)
from nemo_train.nemo.methods.reference import KnownCauseExplainer
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.scoring.benchmark import FACT_SHEETS, NemoBenchmark, build_synthetic_benchmark
from nemo_train.scoring.editors import DiffusersEdit
from nemo_train.scoring.folder_benchmark import build_folder_benchmark
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.scoring.judges import CriterionName, GroundedJudge, Judge, JudgePanel, LLMJudge
from nemo_train.scoring.shift_benchmark import ErrorSampling, build_shift_benchmark, print_causes
from nemo_train.scoring.structured import StructuredEditDeriver
from nemo_train.scoring.text_edits import TextEditDeriver, reader_for
from nemo_train.sharding import ShardedResultStore, Strategy, current_ranks, merge_shards
from nemo_train.store import ResultStore, write_json_atomic


def edit_scorers(
    bench: NemoBenchmark, target, editor: DiffusersEdit | None, seed: int
) -> tuple[CounterfactualScorer, CounterfactualScorer | None]:
    """``(structured, keyword)`` scorers: the edit a structured answer states (an attribute edit re-rendered
    exactly on generated data, an instruction applied by the diffusers ``editor`` on folder data), and the
    keyword parser for KnownCause (generated data only; ``None`` on folder data)."""
    if bench.renderer is None:
        if editor is None:
            raise UserInputError("folder data needs editor: a DiffusersEdit that applies the student's instructions")
        return CounterfactualScorer(target, StructuredEditDeriver(), editor.editor(seed)), None
    exact = ExactAttributeEditor(bench.renderer)
    reader = reader_for(bench)
    if reader is not None:  # one reading: the sentence's blamed factor, an agreeing Edit: line gives the value
        text = CounterfactualScorer(target, TextEditDeriver(reader), exact)
        return text, text
    editable = bench.cause["editable"]
    structured = CounterfactualScorer(target, StructuredEditDeriver(bench.vocabulary, editable), exact)
    return structured, CounterfactualScorer(target, KeywordAttributeDeriver(bench.vocabulary, editable), exact)


def eval_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts a ``distill-eval`` run uses (for its provenance)."""
    if arguments.get("judges"):
        return []
    return ["judge: grounded judge (an attribute parser, not a model)"]


@run_command("distill-eval", eval_stand_ins)
def distill_eval(
    student: str | None,
    targets: list[str | ClassifierSpec] | None = None,
    biases: list[str] | None = None,
    zoo: str | None = None,
    zoo_split: ZooSide = "heldout",
    dataset: Literal["cmnist", "clevr", "shifts", "folder"] = "cmnist",
    methods: list[DistillMethod] | None = None,
    n: PositiveInt = 32,
    seed: Seed = 0,
    test_styles: PositiveInt = 2,
    data_kwargs: dict | None = None,
    error_sampling: ErrorSampling = "uniform",
    evaluation_root: str | None = None,
    mapping_file: str | None = None,
    criterion: CriterionName | None = None,
    judges: list[Judge] | None = None,
    editor: DiffusersEdit | None = None,
    error_batch: PositiveInt = 32,
    max_new_tokens: PositiveInt = 128,
    distilled_on: str | None = None,
    out_dir: OutDir = "checkpoints/distill_cmnist/eval",
    wandb: bool = False,
    device: Device = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    strategy: Strategy = "auto",
) -> dict | None:
    """Evaluate a distilled explainer with NEMO (CEI, LLM Match) on held-out errors, next to its teacher and KnownCause.

    Writes ``results.jsonl``, ``summary.json`` (each row's means with their bootstrap 95 % intervals) and the
    reply cache under ``out_dir`` (a rerun resumes; a row whose options changed
    is recomputed); ``seed`` also samples the held-out errors; the targets run on ``device``.

    Args:
        student: the distilled explainer's adapter folder (``<fit root>/adapter``); ``null`` runs only rows that
            ask no student (the teacher, KnownCause, the trivial rows, the Evidence rule): a benchmark's bars
            measured before any student is trained.
        targets: classifier checkpoints, or classifier specs (``TimmModel`` with hub or local weights) for folder
            data; the ones the student was not distilled on are the generalisation report (biases it never saw).
        biases: the bias preset of each target (which errors are bias-conflicting; default: the dataset's).
        zoo, zoo_split: shifts: a ``nemo-train zoo`` folder whose members of one side (``heldout``: the classifiers
            whose gap assignments never occur in training) are the targets, after any ``targets``, each with the
            gaps its provenance records. Every row is then also pooled over the zoo's classifiers, with bootstrap
            intervals over the errors and over the classifiers (:mod:`nemo_train.nemo.distill.zoo_report`), the
            Class prior row takes its prior from the training zoo's mining errors, and ``budget.png`` plots LLM
            Match and CEI against edits per error (the ``StudentEdits`` rows and the teacher).
        dataset: ``cmnist`` / ``clevr`` (the held-out test grid) or ``folder`` (``evaluation_root``).
        methods: the rows (default: all): ``ExhaustiveTeacher``, ``StudentGreedy``, ``StudentSciTX``,
            ``StudentCamMLLM``, ``StudentChangeMLLM``, ``KnownCause`` from ``nemo_train.nemo.distill.rows``
            (on folder data the teacher and KnownCause do not exist: default the four student rows).
        n: held-out errors (test grid) per target.
        test_styles: exemplars / views per cell of the test attribute grid.
        data_kwargs: extra datamodule arguments (e.g. ``{image_size: 32}`` for CLEVR).
        error_sampling: shifts: how the ``n`` held-out errors are drawn among the single-cause ones: ``uniform``
            (the classifier's own cause proportions) or ``by_cause`` (every cause an equal share as far as there
            are such errors; :data:`~nemo_train.scoring.shift_benchmark.ErrorSampling`).
        evaluation_root: folder data: the evaluation folder ``<root>/<class>/<image>`` (the one the teacher's
            mining folder was checked against).
        mapping_file: folder data: class mapping JSON ``{class: [imagenet ids]}`` (default: the folder names
            are WordNet ids).
        criterion: the failure factor the judges grade against (``imagenet_r``, ``objectnet``, ``imagenet_d``;
            default on generated data: the dataset's).
        judges: LLM judges (``LLMJudge`` with an OpenAI-compatible backend; needed on folder data); default on
            generated data: the grounded judge (an attribute parser, not a model).
        editor: folder data: the diffusers instruction editor that applies the student's ``Edit:`` instructions.
        error_batch: errors a row explains together: the student answers them in one padded ``generate``
            call (its LoRA weights merged into the base model).
        max_new_tokens: the longest answer the student writes (its structured answers take ~50-90 tokens; the
            cap keeps one sampled answer that never ends from holding its whole batch).
        distilled_on: what the student was distilled on, for the table's title (default: the classifiers named
            by its training pairs' provenance; when that is unknown the title says nothing about it).

    With ``devices`` > 1 (or several nodes) every process builds the targets and errors, computes its share of
    each row's pending errors into ``results.rank-<r>.jsonl``, and process 0 merges them and prints the table
    (the others return ``None``).
    """
    folder = dataset == "folder"
    rows, specs, biases, training = _checked_inputs(student, targets, biases, folder, methods, evaluation_root,
                                                    criterion, judges, editor, zoo, zoo_split)  # fmt: skip
    out, ranks = Path(out_dir), current_ranks()
    store = ShardedResultStore(out / "results.jsonl", ranks.rank, ranks.world_size)
    ranks.barrier()  # every process has read the finished rows before any writes
    backend = None
    if student is not None:
        backend = StudentBackend(
            student, cache=out / "llm_cache", batch_size=error_batch, max_new_tokens=max_new_tokens
        )
    for judge in judges or []:
        if isinstance(judge, LLMJudge):
            judge.backend.attach_cache(out / "llm_cache")
    facts = FACT_SHEETS.get(dataset)
    panel = JudgePanel([j.for_benchmark(criterion or dataset, facts) for j in judges or [GroundedJudge()]])
    mapping = ClassMapping.for_folder(evaluation_root, mapping_file) if folder else None
    draw = _HeldOut(dataset, n, seed, test_styles, data_kwargs, evaluation_root, criterion, mapping, mapping_file,
                    error_sampling)  # fmt: skip
    student_digest = path_digest(student) if student is not None else None
    started, progress, constant, cause_counts = time.perf_counter(), Progress(), None, None
    for i, (spec, target_name) in enumerate(zip(specs, unique_names(specs))):
        target = spec.build(None if mapping is None else mapping.class_names, mapping).to(device)
        bench, errors = draw.errors(target, biases[i] if biases else None)
        if i == 0 and bench.cause_counts is not None:
            cause_counts = dict(bench.cause_counts)
            print_causes(bench.cause_counts, target_name)
        structured, keyword = edit_scorers(bench, target, editor, seed)
        ctx = DistillContext(bench, target, backend, structured, keyword, seed, training.members, data_kwargs)
        shared = {
            "target": spec.identity(),
            "student": backend.fingerprint() if backend is not None else None,
            "student_sha256": student_digest,  # an adapter replaced at the same path recomputes its rows
            "errors": errors,
            "data_kwargs": data_kwargs or {},
            "judges": [j.fingerprint() for j in panel.judges],
            "editor": editor.settings() if folder else None,
            **training.settings,
        }
        # rows that never ask the student (teacher, known cause, trivial rows) are kept when only the student changes
        without_student = {k: v for k, v in shared.items() if k not in ("student", "student_sha256")}
        for row in rows:
            method, scorer = row.build(ctx)
            settings = flatten({**(shared if row.uses_student else without_student), "method": row.settings()})
            job = TargetJob(target_name, bench, scorer, panel, [(method, settings)])
            run_target(job, store, progress, show_bar=ranks.is_main, batch_size=error_batch, shard=ranks.shard)
        store, constant = _constant_row(store, progress, TargetJob(target_name, bench, structured, panel, []), without_student,
                                        constant, folder)  # fmt: skip
    ranks.barrier()
    if not ranks.is_main:
        return None
    seen = distilled_on or ", ".join((distilled_classifiers(student) if student is not None else None) or [])
    title = f"Distilled explainer on held-out {dataset} errors" + (f" (distilled on {seen})" if seen else "")
    if student is None:
        title = f"Rows without a student on held-out {dataset} errors"
    return _finish(store, progress, panel, title, started, constant, cause_counts, out, rows)


def _checked_inputs(student, targets, biases, folder: bool, methods, evaluation_root, criterion, judges, editor,
                    zoo=None, zoo_split="heldout"):  # fmt: skip
    """The rows, the classifier specs, their biases and the training zoo; one-line errors before anything is
    loaded or written."""
    targets, biases, training = zoo_targets(targets, biases, zoo, zoo_split, folder)
    rows = list(methods) if methods else (student_distill_methods() if folder else default_distill_methods())
    if student is None:
        asking = [type(row).__name__ for row in rows if row.uses_student]
        if asking:
            raise UserInputError(f"student is null but rows {asking} ask the student; give its adapter folder")
        return _checked_targets(rows, targets, biases, training, folder, evaluation_root, criterion, judges, editor)
    if not Path(student).exists():
        raise UserInputError(f"student adapter folder {student!r} does not exist; run the distilled explainer's fit")
    if any(row.uses_student for row in rows):  # a missing or damaged adapter file: one line before any work
        check_adapter_folder(student, "student")
    return _checked_targets(rows, targets, biases, training, folder, evaluation_root, criterion, judges, editor)


def _checked_targets(rows, targets, biases, training, folder: bool, evaluation_root, criterion, judges, editor):
    """The classifier specs checked (and the folder settings): one-line errors before anything is loaded."""
    specs = [as_classifier(t) for t in targets]
    for spec in specs:
        spec.check()
    if biases is not None and len(biases) != len(targets):
        raise UserInputError(f"{len(biases)} biases for {len(targets)} targets; give one per target")
    if folder:
        check_folder_settings(evaluation_root, criterion, judges, editor, rows)
    return rows, specs, biases, training


@dataclass
class _HeldOut:
    """How the held-out errors of each target are drawn (generated data, the shifts digits or an image folder)."""

    dataset: str
    n: int
    seed: int
    test_styles: int
    data_kwargs: dict | None
    evaluation_root: str | None
    criterion: str | None
    mapping: ClassMapping | None
    mapping_file: str | None
    error_sampling: ErrorSampling = "uniform"

    def errors(self, target, bias: str | dict | None) -> tuple[NemoBenchmark, dict]:
        """The target's held-out errors and what identifies them in the records' settings."""
        n, seed = self.n, self.seed
        if self.dataset == "folder":
            bench = build_folder_benchmark(
                "folder", self.evaluation_root, target, self.criterion, n=n, seed=seed,
                class_folders=self.mapping.folders,
            )  # fmt: skip
            root = str(Path(self.evaluation_root).resolve())
            return bench, {"folder": root, "mapping_file": self.mapping_file, "n": n, "seed": seed}
        if self.dataset == "shifts":
            gaps = bias or "gaps_a"
            bench = build_shift_benchmark(target, gaps, n=n, seed=seed, datamodule_kwargs=self.data_kwargs,
                                          error_sampling=self.error_sampling)  # fmt: skip
            drawn = {"error_sampling": self.error_sampling} if self.error_sampling != "uniform" else {}
            return bench, {"dataset": self.dataset, "gaps": gaps, "n": n, "seed": seed, **drawn}
        bench = build_synthetic_benchmark(
            self.dataset, target=target, n=n, seed=seed, bias=bias, test_styles=self.test_styles,
            datamodule_kwargs=self.data_kwargs,
        )  # fmt: skip
        return bench, {"dataset": self.dataset, "bias": bias, "n": n, "seed": seed, "test_styles": self.test_styles}


def _constant_row(store, progress: Progress, job: TargetJob, shared: dict, constant: str | None, folder: bool):
    """The Constant row on this target: the first target's most frequent teacher (or known-cause) answer for every
    error; returns the store (reopened when several processes wrote) and the constant answer."""
    ranks = current_ranks()
    if ranks.world_size > 1:  # the Constant row reads every process's rows
        ranks.barrier()
        store = store.reopen()
    if constant is None and not folder:
        sample_ids = [s.sample_id for s in job.benchmark.errors]
        for source in (ExhaustiveSearchExplainer.name, KnownCauseExplainer.name):
            constant = constant or most_frequent_explanation(store, job.name, source, sample_ids)
    if constant is not None:
        constant_settings = flatten({**shared, "method": {"class": "Constant"}})
        run_constant(job, store, progress, constant, constant_settings, shard=ranks.shard)
    return store, constant


def _finish(store, progress: Progress, panel: JudgePanel, title: str, started: float, constant, cause_counts, out,
            rows=()):  # fmt: skip
    """Merge the processes' rows, print the table (and, over several classifiers, the pooled table and the budget
    plot) and write ``summary.json``; returns the summary."""
    merge_shards(store.path)
    store = ResultStore(store.path)
    records = [store.get(key) for key in dict.fromkeys(progress.keys)]
    summary = mean_scores(records)
    print_summary(summary, title, panel.names)
    pooled = pooled_report(records, summary, rows, title, out)
    print(f"{len(progress.keys)} rows in {time.perf_counter() - started:.1f} s; results in {store.path}")
    result = {
        "summary": {f"{mm}|{t}": cell for (mm, t), cell in summary.items()},  # each mean with its interval
        "constant": constant,
        "judges": panel.names,  # names the judges that are rules, not models (demo recap)
        "cause_counts": cause_counts,
        "results": str(store.path),
        **pooled,
    }
    write_json_atomic(out / "summary.json", result)
    report_failed_rows([store.get(key) for key in dict.fromkeys(progress.keys)])
    return result


def check_folder_settings(
    evaluation_root: str | None,
    criterion: str | None,
    judges: list[Judge] | None,
    editor: DiffusersEdit | None,
    rows: list[DistillMethod],
) -> None:
    """Refuse an incomplete folder evaluation before anything is loaded or written."""
    if evaluation_root is None or not Path(evaluation_root).is_dir():
        raise UserInputError(
            f"dataset 'folder' needs evaluation_root, an existing image folder; got {evaluation_root!r}"
        )
    if criterion is None or not judges:
        raise UserInputError("folder data needs judges (LLMJudge) and the criterion they grade (e.g. imagenet_r)")
    if editor is None:
        raise UserInputError("folder data needs editor: a DiffusersEdit that applies the student's instructions")
    generated_only = [type(r).__name__ for r in rows if isinstance(r, (ExhaustiveTeacher, KnownCause))]
    if generated_only:
        raise UserInputError(f"methods {generated_only} need generated data (cmnist, clevr)")


def report_failed_rows(records: list[dict | None]) -> None:
    """As ``nemo-eval`` does, name the failed rows (a request that failed for good, e.g. a judge whose replies stayed
    unreadable; stored as failed, left out of the means, retried by a rerun): one line per (method, target) with how
    many failed and the first reason. When every row failed (the table holds no number) a one-line error follows
    (exit status 2). A method whose rows all failed beside others that scored (an untrained student that writes no
    readable answer) is named by its line, and the run still exits 0 with the numbers it has."""
    records = [r for r in records if r is not None]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["method"], r["target"]), []).append(r)
    first = ""
    for (method, target), rows in groups.items():
        bad = [r for r in rows if r.get("failed")]
        if bad:
            reason = " ".join(str(bad[0].get("reason") or "no reason recorded").split())[:200]
            first = first or reason
            print(f"{method} @ {target}: {len(bad)} of {len(rows)} rows failed (first: {reason}); a rerun retries them")
    if records and all(r.get("failed") for r in records):
        raise UserInputError(
            f"every row failed (first: {first}); results.jsonl stores them as failed; rerun when the language "
            "models answer (a rerun retries them)"
        )
