"""The evaluation loop: explain, score (CEI) and judge each error of each target, one stored record per sample.

A method explains the pending errors of a target a chunk at a time (``batch_size`` errors: one batched
request to its language model where the method supports it); each record is then written on its own.

A record is written as soon as its sample is finished and carries the settings it was computed with
(target identity, method options, benchmark, explainer, judges, editor), so a rerun skips exactly the
records whose settings are unchanged. A sample whose language-model calls fail for good (after the
backend's retries) is stored as ``failed`` with the reason; the run goes on and a rerun retries it. So is,
a sample whose judge's grade is still not JSON after the backend's re-asks, and, for a :class:`TargetJob` with
``strict_json`` (``nemo-eval``), one whose hypothesis or edit is (:func:`~nemo_train.backends.base.strict_json`;
``distill-eval`` scores a student's unreadable answer as given, since the student is what it measures).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from nemo_train.backends.base import BackendError, ChatBackend, strict_json
from nemo_train.nemo.methods.base import Explanation, Method, explain_many
from nemo_train.nemo.methods.global_explanation import (
    GlobalExplanation,
    summarize_attribute_explanations,
    summarize_explanations,
    summarize_factor_explanations,
)
from nemo_train.nemo.methods.reference import ConstantExplainer
from nemo_train.nemo.record_images import save_record_images
from nemo_train.quiet import progress_bar
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.explanations import score_texts
from nemo_train.scoring.interventions import CounterfactualScorer, Trial
from nemo_train.scoring.judges import JudgePanel
from nemo_train.scoring.text_edits import ExplanationReader, reader_for
from nemo_train.store import ResultStore


def record_key(target: str, method: str, sample_id: str) -> str:
    """The store key of one result: target column, method name and sample id."""
    return f"{target}|{method}|{sample_id}"


def flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as one level of dotted names (``method.k``), so a changed setting can be named."""
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def evaluate_samples(
    method: Method,
    samples: list[ErrorSample],
    benchmark: NemoBenchmark,
    scorer: CounterfactualScorer,
    panel: JudgePanel,
    target_name: str,
) -> list[tuple[dict[str, Any], Trial | None]]:
    """Explain ``samples`` together (:func:`~nemo_train.nemo.methods.base.explain_many`), then score (CEI) and
    judge each; returns one (record without settings, selected trial) pair per sample."""
    explanations = explain_many(method, samples, benchmark)
    reader = reader_for(benchmark)
    return [
        score_explanation(method.name, explanation, sample, benchmark, scorer, panel, target_name, reader)
        for explanation, sample in zip(explanations, samples)
    ]


def score_explanation(
    method_name: str,
    explanation: Explanation,
    sample: ErrorSample,
    benchmark: NemoBenchmark,
    scorer: CounterfactualScorer,
    panel: JudgePanel,
    target_name: str,
    reader: ExplanationReader | None = None,
) -> tuple[dict[str, Any], Trial | None]:
    """Score (CEI: the method's own trial, else one counterfactual test) and judge one explanation
    (:func:`~nemo_train.scoring.explanations.score_texts`, the scoring every table and trainer shares).

    The record keeps what the sentence blames, the edit applied and whether they agree
    (:mod:`~nemo_train.scoring.text_edits`); ``cei`` and ``llm_match`` are the headline scores (0 for an
    inconsistent explanation), ``edit_cei`` and ``judged_match`` the scores before that rule."""
    scored = score_texts([explanation.text], [sample], benchmark, scorer, panel, reader, [explanation.trial])[0]
    record = _base_record(target_name, method_name, sample)
    record.update(
        explanation=explanation.text,
        candidates=explanation.candidates,
        candidate_cei=[t.cei for t in explanation.trials],
        **scored.record_fields(),
        cause=sample.cause,
        failed=False,
    )
    return record, scored.trial


def _base_record(target_name: str, method_name: str, sample: ErrorSample) -> dict[str, Any]:
    return {
        "key": record_key(target_name, method_name, sample.sample_id),
        "target": target_name,
        "method": method_name,
        "sample_id": sample.sample_id,
        "label": sample.label,
        "prediction": sample.prediction,
    }


def failed_record(target_name: str, method_name: str, sample: ErrorSample, reason: str) -> dict[str, Any]:
    """The record of a sample whose language-model calls failed for good."""
    return {
        **_base_record(target_name, method_name, sample),
        "failed": True,
        "reason": reason,
        "explanation": "",
        "judges": {},
        "llm_match": None,
        "grounding": None,
        "cei": None,
        "instruction": None,
        "blamed": [],
        "edit": None,
        "consistent": None,
    }


@dataclass
class Progress:
    """Counts of one run: samples computed, resumed from the store, failed; images kept for W&B."""

    computed: int = 0
    resumed: int = 0
    failed: int = 0
    keys: list[str] = field(default_factory=list)
    images: dict[str, tuple] = field(default_factory=dict)


@dataclass
class TargetJob:
    """Everything needed to evaluate the methods of one target on its benchmark."""

    name: str
    benchmark: NemoBenchmark
    scorer: CounterfactualScorer
    panel: JudgePanel
    #: (method, the settings of its records) in table order
    methods: list[tuple[Method, dict[str, Any]]]
    #: a JSON reply still malformed after its re-asks fails its sample (a rerun asks again) instead of being
    #: scored as an empty answer (``nemo-eval``; ``distill-eval`` scores a student's unreadable answer as given;
    #: a judge's malformed grade fails its sample in both)
    strict_json: bool = False

    def json_replies(self):
        """The context the job's language-model calls run in (:func:`~nemo_train.backends.base.strict_json`)."""
        return strict_json() if self.strict_json else nullcontext()


def run_target(
    job: TargetJob,
    store: ResultStore,
    progress: Progress,
    keep_images: bool = False,
    show_bar: bool = True,
    batch_size: int = 16,
    shard: Callable[[list[ErrorSample]], list[ErrorSample]] = list,
) -> None:
    """Evaluate every method on every error of one target, resuming from ``store``; the pending errors of a
    method are explained ``batch_size`` at a time. ``shard`` picks this process's share of the pending errors
    (:meth:`nemo_train.sharding.Ranks.shard`; all of them in a one-process run)."""
    bar = progress_bar(
        total=len(job.methods) * len(job.benchmark.errors),
        desc=f"nemo-eval {job.name}",
        unit="sample",
        disable=not show_bar,
        leave=False,
    )
    for method, settings in job.methods:
        pending = []
        for sample in job.benchmark.errors:
            key = record_key(job.name, method.name, sample.sample_id)
            progress.keys.append(key)
            if store.lookup(key, settings) is not None:
                progress.resumed += 1
                bar.update(1)
            else:
                pending.append(sample)
        mine = shard(pending)
        bar.update(len(pending) - len(mine))  # the other ranks' share
        for start in range(0, len(mine), batch_size):
            chunk = mine[start : start + batch_size]
            _compute(job, method, chunk, settings, store, progress, keep_images)
            bar.update(len(chunk))
    bar.close()


def _compute(job, method, samples, settings, store, progress, keep_images) -> None:
    """Evaluate and store ``samples``; when a batched request fails for good (or a JSON reply stays malformed),
    each sample is retried alone (replies that came back are cached) so that only the failing ones are recorded
    as failed."""
    try:
        with job.json_replies():  # strict: a malformed reply fails its sample, not scored as an empty answer
            results = evaluate_samples(method, samples, job.benchmark, job.scorer, job.panel, job.name)
    except BackendError as err:
        if len(samples) > 1:
            for sample in samples:
                _compute(job, method, [sample], settings, store, progress, keep_images)
            return
        store.append(failed_record(job.name, method.name, samples[0], str(err)), settings)
        progress.failed += 1
        return
    for sample, (record, trial) in zip(samples, results):
        edited = trial.edited_image if trial is not None else None  # the images, for the run's report page
        record.update(save_record_images(store.path.parent, record, sample.image, edited, job.benchmark.class_names))
        store.append(record, settings)
        progress.computed += 1
        if keep_images:
            progress.images[record["key"]] = (sample.image, trial.edited_image if trial is not None else None)


def run_global(
    job: TargetJob,
    store: ResultStore,
    progress: Progress,
    backend: ChatBackend | None,
    settings: dict[str, Any],
    say: Callable[[str], None] = print,
    shard: Callable[[list[ErrorSample]], list[ErrorSample]] = list,
    agree: Callable[[Callable[[], str | None]], str | None] = lambda write: write(),
) -> str | None:
    """Summarise this target's SciTX explanations into one global explanation and score it on every error.

    ``agree`` runs the summary once for all processes (:meth:`nemo_train.sharding.Ranks.on_main`: rank 0
    writes it, the others receive it); ``shard`` splits the scoring. Returns the global explanation
    (``None`` when SciTX produced none or the summary failed).
    """
    text = agree(lambda: global_text(job, store, backend, say))
    if text is None:
        return None
    method = GlobalExplanation(text)
    settings = {**settings, "method.class": "GlobalExplanation", "method.text": text}
    one_row = replace(job, methods=[(method, settings)])
    run_target(one_row, store, progress, show_bar=False, shard=shard)
    return text


def global_text(
    job: TargetJob, store: ResultStore, backend: ChatBackend | None, say: Callable[[str], None] = print
) -> str | None:
    """The global explanation of a target's SciTX explanations (``None``, with the reason said, when none)."""
    bench = job.benchmark
    texts = [
        r["explanation"]
        for r in (store.get(record_key(job.name, "SciTX", s.sample_id)) for s in bench.errors)
        if r is not None and not r.get("failed") and r.get("explanation")
    ]
    if not texts:
        say(f"global explanation ({job.name}): no SciTX explanations to summarise; skipped")
        return None
    try:
        if backend is not None:
            with job.json_replies():  # strict: a malformed summary is a failed one, not an empty one
                text = summarize_explanations(backend, texts)
        elif bench.facts is not None:  # not told the cause: the factor the explanations blame most
            text = summarize_factor_explanations(texts, bench.facts)
        else:
            cause = bench.cause or {}
            text = summarize_attribute_explanations(
                texts, bench.vocabulary or {}, cause.get("object", "digit"), cause.get("attribute", "color")
            )
    except BackendError as err:
        say(f"global explanation ({job.name}): the summary failed ({err}); skipped")
        return None
    if not text:
        say(f"global explanation ({job.name}): the summary came back empty; skipped")
        return None
    return text


def most_frequent_explanation(store: ResultStore, target: str, method: str, sample_ids: list[str]) -> str | None:
    """The explanation ``method`` gave most often on ``target``'s errors (ties: the first given)."""
    texts = [
        r["explanation"]
        for r in (store.get(record_key(target, method, s)) for s in sample_ids)
        if r is not None and not r.get("failed") and r.get("explanation")
    ]
    return max(dict.fromkeys(texts), key=texts.count) if texts else None


def run_constant(
    job: TargetJob,
    store: ResultStore,
    progress: Progress,
    text: str,
    settings: dict[str, Any],
    keep_images: bool = False,
    shard: Callable[[list[ErrorSample]], list[ErrorSample]] = list,
) -> None:
    """Score one fixed explanation (``text``) on every error of the target as the row ``Constant``."""
    method = ConstantExplainer(text)
    settings = {**settings, "method.class": "ConstantExplainer", "method.text": text}
    one_row = replace(job, methods=[(method, settings)])
    run_target(one_row, store, progress, keep_images=keep_images, show_bar=False, shard=shard)
