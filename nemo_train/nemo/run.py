"""``nemo-train nemo-eval``: run explanation methods on a NEMO benchmark, score them, print Table 1.

For every target, method and error the run writes one record to ``<out_dir>/results.jsonl`` as soon
as the sample is finished (:class:`~nemo_train.store.ResultStore`: append-only, fsync'd). Each record
carries the settings it was computed with (the target's resolved path and content hash, the method's
options, the benchmark, explainer, judges and editor); a rerun with the same ``out_dir`` reuses exactly
the records whose settings are unchanged, recomputes the others and says which settings changed. One
run at a time may use an ``out_dir`` (an advisory lock). Language-model replies are cached under
``<out_dir>/llm_cache``, so an interrupted sample does not pay twice for its calls; a sample whose calls
fail for good, or whose JSON replies stay malformed after the re-asks, is recorded as failed (with the reason)
and retried by the next run.

Embedded default (``cmnist``, no ``explainer``): hypotheses from the offline attribute-contrast
hypothesizer (a template over generator attributes, not a language model), edits by the exact CMNIST
editor with the keyword deriver, judging by the grounded judge (an attribute parser checked against the fact
sheet, not a model). These offline parts only suit closed-vocabulary synthetic benchmarks; configure an ``explainer`` and ``judges`` for real ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.backends.base import ChatBackend
from nemo_train.errors import UserInputError
from nemo_train.metrics.bootstrap import mean_interval
from nemo_train.models.specs import ClassifierSpec, as_classifier, unique_names
from nemo_train.nemo.components import (
    BenchmarkArgs,
    BuildContext,
    EvalOptions,
    MethodSpec,
    default_methods,
)
from nemo_train.nemo.evaluation import (
    Progress,
    TargetJob,
    flatten,
    most_frequent_explanation,
    run_constant,
    run_global,
    run_target,
)
from nemo_train.nemo.report import (
    NemoEvalSummary,
    failures_per_method,
    known_cause_win_rate,
    known_cause_wins,
    print_report,
    summarize,
)
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.scoring.editors import EditorSpec, ExactEdit
from nemo_train.scoring.explanations import judge_panel
from nemo_train.scoring.judges import GroundedJudge, Judge, JudgePanel, LLMJudge
from nemo_train.scoring.shift_benchmark import print_causes
from nemo_train.sharding import ShardedResultStore, Strategy, current_ranks, merge_shards
from nemo_train.store import ResultStore, write_json_atomic


def nemo_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts a ``nemo-eval`` run uses (for its provenance)."""
    named = []
    if arguments.get("explainer") is None:
        named += [f"{method}: {what}" for method, what in OFFLINE_STAND_INS.items()]
    if not arguments.get("judges"):
        named.append("judge: grounded judge (an attribute parser, not a model)")
    editor = arguments.get("editor") or ExactEdit()
    if editor.offline_note(arguments.get("explainer")):
        named.append(f"editor: {editor.offline_note(arguments.get('explainer'))}")
    return named


@run_command("nemo-eval", nemo_stand_ins)
def nemo_eval(
    benchmark: BenchmarkArgs = BenchmarkArgs(),
    targets: list[str | ClassifierSpec] | None = None,
    methods: list[MethodSpec] | None = None,
    explainer: ChatBackend | None = None,
    judges: list[Judge] | None = None,
    editor: EditorSpec | None = None,
    out_dir: OutDir = "checkpoints/nemo_eval",
    wandb: bool = False,
    seed: Seed = 0,
    device: Device = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    strategy: Strategy = "auto",
    run: EvalOptions = EvalOptions(),
) -> NemoEvalSummary | None:
    """Run explanation methods on a NEMO benchmark and print LLM Match and CEI per method and target.

    Args:
        benchmark: which errors (benchmark name, ``n`` errors per target, ``seed``, data folders).
        targets: the classifiers: checkpoint paths (a column named by the checkpoint's experiment folder),
            or ``FitCheckpoint`` / ``TimmModel`` / ``ZeroShotModel`` / ``CaptionZeroShotModel`` (the small CLIP
            as a zero-shot classifier of a generated benchmark) objects (each may take a ``name``).
        methods: explanation methods (default: SciTX and the three baselines): ``SciTXMethod``,
            ``ErrorRetrievalMethod``, ``CamMLLMMethod``, ``ChangeMLLMMethod``, ``KnownCauseMethod``,
            ``DistractorMethod`` and the trivial rows ``EverythingMethod``, ``ClassFreeConstantMethod``,
            ``ClassPriorMethod``, ``OddOneOutMethod`` from ``nemo_train.nemo.components``.
        explainer: the multimodal language model (``OpenAICompatibleBackend``, ``HFLocalBackend``);
            none = the offline rule-based parts (generated benchmarks only).
        judges: the judge panel (``LLMJudge`` per model; default: the offline grounded judge, generated
            benchmarks only). A judge without a ``criterion`` takes the benchmark's.
        editor: ``ExactEdit`` (generated data; default), ``DiffusersEdit`` or ``PromptEdit`` (zero-shot targets;
            offline on generated data the class prompts are rewritten by the caption rule, not a model).
        run: how the evaluation is computed: ``batched``, ``error_batch``, ``global_explanation``.

    Writes ``results.jsonl``, ``summary.json`` (the table: each mean with its bootstrap 95 % interval over the
    errors) and the reply cache ``llm_cache/`` under ``out_dir``; ``device`` runs the targets.

    With ``devices`` > 1 (or several nodes) every process builds the targets once, computes its shard of the
    pending samples into ``results.rank-<r>.jsonl``, and process 0 merges them and prints the table.

    Returns:
        the table and the run's counts (:class:`~nemo_train.nemo.report.NemoEvalSummary`; ``None`` on the
        processes other than the first).
    """
    editor = editor or ExactEdit()
    specs, names = _checked_targets(targets)  # before anything is written to out_dir
    panel_judges = list(judges) if judges else [GroundedJudge()]
    out, ranks = Path(out_dir), current_ranks()
    store = ShardedResultStore(out / "results.jsonl", ranks.rank, ranks.world_size)
    ranks.barrier()  # every process has read the finished work before any writes
    _attach_caches(explainer, panel_judges, out / "llm_cache")
    _note_offline_parts(explainer, judges, editor)
    mapping, class_names = benchmark.classes()
    parts = _Parts(
        benchmark, mapping, seed, editor, explainer, run, list(methods) if methods else default_methods(),
        judge_panel(benchmark.name, panel_judges),
        {
            "benchmark": {**benchmark.settings(), "seed": seed},  # which errors are drawn
            "explainer": explainer.fingerprint() if explainer is not None else None,
            "judges": [j.fingerprint() for j in panel_judges],
            "editor": editor.settings(),
        },
        wandb,
    )  # fmt: skip
    started, progress = time.perf_counter(), Progress()
    for spec, name in zip(specs, names):
        store = _evaluate_target(parts, spec, name, spec.build(class_names, mapping).to(device), store, progress)
    ranks.barrier()
    progress.computed, progress.failed = ranks.total(progress.computed), ranks.total(progress.failed)
    if not ranks.is_main:
        return None
    summary, _ = _summarize(parts, store, progress)
    write_json_atomic(out / "summary.json", summary.to_json())  # the table's means and their intervals
    _print_counts(summary, explainer, time.perf_counter() - started)
    return summary


def _checked_targets(targets) -> tuple[list[ClassifierSpec], list[str]]:
    if not targets:
        raise UserInputError("no target classifier given; pass --targets [path/to/best.ckpt] or classifier specs")
    specs = [as_classifier(t) for t in targets]
    for spec in specs:
        spec.check()
    return specs, unique_names(specs)


@dataclass
class _Parts:
    """What every target of a run is evaluated with; ``global_texts`` and ``cause_counts`` fill per target."""

    benchmark: BenchmarkArgs
    mapping: Any
    seed: int
    editor: EditorSpec
    explainer: ChatBackend | None
    run: EvalOptions
    methods: list[MethodSpec]
    panel: JudgePanel
    shared: dict[str, Any]
    wandb: bool
    global_texts: dict[str, str] = field(default_factory=dict)
    cause_counts: dict[str, dict] = field(default_factory=dict)


def _evaluate_target(parts: _Parts, spec: ClassifierSpec, name: str, target, store, progress: Progress):
    """Every method's records on one target's errors, then its Constant (and Global) rows; returns the store
    (reopened when several processes wrote)."""
    ranks, run = current_ranks(), parts.run
    bench = parts.benchmark.build(target, parts.mapping, parts.seed)
    if bench.cause_counts is not None:
        parts.cause_counts[name] = dict(bench.cause_counts)
        print_causes(bench.cause_counts, name)
    scorer = parts.editor.build_scorer(bench, target, parts.explainer, parts.seed, run.batched)
    base = {"target": spec.identity(), **parts.shared}
    built = _build_methods(parts.methods, bench, target, parts.explainer, scorer, base, parts.benchmark, parts.seed)
    job = TargetJob(name, bench, scorer, parts.panel, built, strict_json=True)  # a malformed reply fails its sample
    show_bar = ranks.is_main  # a bar on a terminal, progress lines in a log (nemo_train.quiet.progress_bar)
    run_target(job, store, progress, parts.wandb, show_bar, run.error_batch, shard=ranks.shard)
    if ranks.world_size > 1:  # the Constant and Global rows read every process's records
        ranks.barrier()
        store = store.reopen()
    constant = most_frequent_explanation(store, name, "KnownCause", [s.sample_id for s in bench.errors])
    if constant is not None and bench.facts is not None:  # what one sentence for every error scores
        constant_settings = flatten({**base, "method": {"class": "Constant"}})
        run_constant(job, store, progress, constant, constant_settings, parts.wandb, shard=ranks.shard)
    if run.global_explanation:
        text = run_global(job, store, progress, parts.explainer, flatten(base), shard=ranks.shard, agree=ranks.on_main)
        if text is not None:
            parts.global_texts[name] = text
            print(f"global explanation ({name}): {text}")
    return store


def _summarize(parts: _Parts, store, progress: Progress) -> tuple[NemoEvalSummary, list[dict]]:
    """Merge the processes' records, print the table; the run's summary and its records."""
    changed = store.changed
    merge_shards(store.path)
    store = ResultStore(store.path)
    records = [store.get(key) for key in dict.fromkeys(progress.keys)]
    cells = summarize(records, OFFLINE_STAND_INS if parts.explainer is None else None)
    print_report(cells, parts.benchmark.name, parts.editor.offline_note(parts.explainer))
    rate, pairs = known_cause_win_rate(records)
    summary = NemoEvalSummary(
        benchmark=parts.benchmark.name,
        cells=cells,
        computed=progress.computed,
        resumed=progress.resumed,
        failed=progress.failed,
        failed_per_method=failures_per_method(cells),
        recomputed_because=dict(changed),
        global_explanations=parts.global_texts,
        known_cause_win_rate=rate if pairs else None,
        known_cause_win_rate_ci=mean_interval(known_cause_wins(records)),
        cause_counts=parts.cause_counts,
        results=str(store.path),
    )
    return summary, records


def _attach_caches(explainer: ChatBackend | None, judges: list[Judge], cache_dir: Path) -> None:
    """Every language-model backend of the run caches its replies under ``cache_dir`` unless it has a cache."""
    for backend in [explainer, *(j.backend for j in judges if isinstance(j, LLMJudge))]:
        if backend is not None:
            backend.attach_cache(cache_dir)


def _build_methods(specs, bench, target, explainer, scorer, base, args=None, seed: int = 0) -> list[tuple]:
    """(method, settings of its records) for every configured method; method names must be distinct."""
    ctx = BuildContext(bench, target, explainer, scorer, args, seed)
    built = [(method, flatten({**base, "method": spec.settings()})) for spec in specs for method in spec.build(ctx)]
    names = [m.name for m, _ in built]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserInputError(f"methods {repeated} appear more than once; configure each method once")
    return built


#: What writes the explanations of the language-model methods when no explainer backend is configured.
OFFLINE_STAND_INS = {
    "SciTX": "attribute template, not a model",
    "CamMLLM": "heat-map rule, not a model",
    "ChangeMLLM": "attribute rule, not a model",
    "Global": "counting rule, not a model",
}


def _note_offline_parts(explainer: ChatBackend | None, judges: list[Judge] | None, editor: EditorSpec) -> None:
    offline = []
    if explainer is None:
        offline.append("hypotheses from the attribute-contrast template")
    if editor.offline_note(explainer):
        offline.append(editor.offline_note(explainer))
    if not judges:
        offline.append("judging by the grounded judge (an attribute parser)")
    if offline:
        print(
            f"note: offline parts in use ({'; '.join(offline)}); they suit only closed-vocabulary synthetic benchmarks."
        )


def _print_counts(summary: NemoEvalSummary, explainer: ChatBackend | None, seconds: float) -> None:
    line = f"{summary.computed} samples computed, {summary.resumed} resumed"
    if summary.failed:
        line += f", {summary.failed} failed"
    print(f"{line} ({summary.results}, {seconds:.1f} s)")
    if summary.recomputed_because:
        changed = ", ".join(f"{name} ({count})" for name, count in sorted(summary.recomputed_because.items()))
        print(f"recomputed records whose settings changed since the earlier run: {changed}")
    if summary.failed_per_method:
        failed = ", ".join(f"{m}: {n}" for m, n in summary.failed_per_method.items())
        print(f"failed samples per method (a rerun retries them): {failed}")
    if summary.known_cause_win_rate is not None:
        low, high = summary.known_cause_win_rate_ci or (summary.known_cause_win_rate,) * 2
        share = f"{summary.known_cause_win_rate:.0%} [{low:.0%}, {high:.0%}]"
        print(f"known cause beats the distractor on CEI for {share} of errors (bootstrap 95 % interval)")
    if explainer is not None:
        stats = explainer.stats
        line = f"explainer calls: {stats.requests} sent, {stats.cache_hits} from cache"
        if stats.json_replies:  # schema-constrained endpoints should need none
            line += f", {stats.json_reasked}/{stats.json_replies} JSON replies re-asked ({stats.reask_share:.0%})"
        print(line)
