"""``nemo-train distill-teacher``: mine errors, label them with a teacher, write the student's training pairs.

1. Mine up to ``n`` errors of the classifier (and of each classifier of a ``pool``) on a split disjoint
   from every evaluation error (:mod:`nemo_train.nemo.distill.mining`).
2. Label each with the teacher: the exhaustive attribute search on generated data (no ``hypotheses``
   backend), or SciTX with the configured MLLM backend as hypothesis source.
3. Keep labels whose CEI is at least ``min_cei`` and write, per kept error and per view, one pair in the
   explanation-record JSONL format (``pairs/train.jsonl``, ``pairs/val.jsonl``; images under ``pairs/images``)
   whose answer is the structured explanation (hypothesis + ``Edit: ...``), with its CEI and provenance.

The teacher labels ``error_batch`` errors at a time: with an MLLM, the reference captions, hypotheses and
derived edits of the whole batch go out as one batched request per stage (one padded ``generate`` for a
local model, ``concurrency`` parallel requests to an endpoint); a batch whose request fails for good is
retried one error at a time, and an error that still fails is left unlabelled for the next run. Every
label is appended to ``<out_dir>/teacher.jsonl`` as soon as its batch is done (flushed and fsynced); a
rerun with the same ``out_dir`` skips labelled errors, and language-model replies are cached under
``<out_dir>/llm_cache``, as in ``nemo-eval``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse.typing import PositiveInt

from nemo_train.backends.base import BackendError, ChatBackend
from nemo_train.backends.cache import ResponseCache
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.metrics.bootstrap import format_with_interval, grouped_mean_interval, interval_fields, mean_interval
from nemo_train.metrics.nemo import score_mean
from nemo_train.models.specs import ClassifierSpec, as_classifier
from nemo_train.models.targets import ClassMapping
from nemo_train.nemo.components.editors import DiffusersEdit
from nemo_train.nemo.distill.evidence import check_evidence_benchmark
from nemo_train.nemo.distill.mining import mine_folder_errors, mine_synthetic_errors
from nemo_train.nemo.distill.pairs import LabelledErrors, ReferenceClass, pairs_from_labels
from nemo_train.nemo.distill.teachers import ExhaustiveAttributeTeacher, SciTXTeacher, TeacherLabel, View
from nemo_train.nemo.evaluation import record_key
from nemo_train.nemo.interventions import (
    CounterfactualScorer,
    ExactAttributeEditor,
    LLMAttributeDeriver,
)
from nemo_train.nemo.methods.scitx import MLLMCaptioner, MLLMHypothesizer, SciTX
from nemo_train.nemo.shift_benchmark import build_shift_benchmark
from nemo_train.quiet import progress_bar
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.sharding import ShardedResultStore, Strategy, current_ranks, merge_shards
from nemo_train.store import fingerprint


def build_target(classifier: str | ClassifierSpec, mapping: ClassMapping | None = None):
    """The classifier model (a timm model mapped onto the folder's classes, or a checkpoint's classifier)."""
    spec = as_classifier(classifier)
    spec.check()
    return spec.build(None if mapping is None else mapping.class_names, mapping)


def teacher_scorer(
    bench, target, backend: ChatBackend, editor: DiffusersEdit | None, seed: int
) -> CounterfactualScorer:
    """The MLLM teacher's counterfactual test: exact re-render of the attribute it names on generated data,
    or the editing instruction it writes applied by a diffusers editor."""
    if bench.renderer is not None:
        deriver = LLMAttributeDeriver(backend, bench.vocabulary, editable=bench.cause["editable"])
        return CounterfactualScorer(target, deriver, ExactAttributeEditor(bench.renderer))
    if editor is None:
        raise UserInputError("an MLLM teacher on folder data needs editor: a DiffusersEdit with a model id or folder")
    return editor.build_scorer(bench, target, backend, seed, batched=True)


def _label_chunk(teacher, chunk, bench, failed: list[str]) -> list[tuple[Any, TeacherLabel | None]]:
    """``(error, label)`` for the errors of ``chunk`` the teacher labelled; when the batched request fails for
    good each error is retried alone (replies that came back are cached), and the reason of every error
    that still fails is added to ``failed``."""
    try:
        return list(zip(chunk, teacher.label_batch(chunk, bench)))
    except BackendError as err:
        if len(chunk) == 1:
            failed.append(str(err))
            return []
        return [pair for sample in chunk for pair in _label_chunk(teacher, [sample], bench, failed)]


@dataclass
class PoolClassifier:
    """One more classifier of a pool (generated data): the teacher labels its mined errors too.

    Args:
        classifier: its checkpoint (its experiment folder names it, as for ``classifier``).
        bias: the bias of its training data: a preset (``model_a``, ``gaps_b``), ``{digit: [colour, ...]}`` (CMNIST)
            or ``{factor: [digits]}`` (shifts gaps); the mined errors are its bias-conflicting ones.
    """

    classifier: str
    bias: str | dict[int, list[str]] | dict[str, list[int]] | None = None


def mining_identity(dataset, n, seed, styles, bias, data_kwargs, mining_root) -> dict[str, Any]:
    """What decides the mined errors and their reference set (a label is recomputed when any of it changes)."""
    folder = str(Path(mining_root).resolve()) if mining_root else None
    found = {"dataset": dataset, "n": n, "seed": seed, "styles": styles, "bias": bias, "data_kwargs": data_kwargs}
    return json.loads(json.dumps({**found, "folder": folder}, default=str))  # as it reads back from the store


#: upper bounds of distill-teacher's sizes (the mining grid holds ``styles`` images per attribute cell; the
#: shifts data ``10 * n`` images)
MAX_STYLES, MAX_ERRORS = 50, 100_000


def check_teacher_ranges(n: int, seed: int, styles: int, m: int, k: int, val_fraction: float) -> None:
    """A one-line error for an option out of range, before anything is built or written."""
    for name, value, low, high in (("n", n, 1, MAX_ERRORS), ("styles", styles, 1, MAX_STYLES), ("m", m, 1, 1000),
                                   ("k", k, 1, 1000), ("seed", seed, 0, 2**32 - 1)):  # fmt: skip
        if not low <= value <= high:
            raise UserInputError(f"{name}={value} is out of range; expected {low} to {high:,}")
    if not 0.0 <= val_fraction < 1.0:
        raise UserInputError(f"val_fraction={val_fraction} is out of range; expected a share from 0 to below 1")


def image_digest(image: torch.Tensor) -> str:
    """SHA-256 of an error image's values (its identity in a label's settings)."""
    return hashlib.sha256(image.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def label_settings(bench, settings: dict) -> dict[str, dict]:
    """The settings of each error's label: a label is paired with the very image it was computed on, so the
    image's digest is part of them."""
    return {s.sample_id: {**settings, "image_sha256": image_digest(s.image)} for s in bench.errors}


def _label_errors(
    teacher,
    bench,
    store: ShardedResultStore,
    name: str,
    own: dict[str, dict],
    min_cei: float,
    error_batch: int,
    shard: Callable[[list], list] = list,
) -> tuple[int, list[str]]:
    """Label this process's share (``shard``) of the errors of ``bench`` not in ``store`` yet, ``error_batch``
    at a time, appending each label; returns ``(errors labelled now, reasons of the errors that failed)``."""
    failed: list[str] = []
    pending = [
        s for s in bench.errors if store.lookup(record_key(name, teacher.name, s.sample_id), own[s.sample_id]) is None
    ]
    mine = shard(pending)
    total = len(bench.errors)
    bar = progress_bar(total=total, initial=total - len(mine), desc=f"teacher {name}", unit="error")
    computed = 0
    for start in range(0, len(mine), error_batch):
        chunk = mine[start : start + error_batch]
        for sample, label in _label_chunk(teacher, chunk, bench, failed):
            record = {"key": record_key(name, teacher.name, sample.sample_id), "kept": False, "cei": 0.0}
            record["sample_id"] = sample.sample_id
            if label is not None:
                record.update(label.to_json(), kept=label.cei >= min_cei)
            else:  # no readable hypothesis or edit (e.g. replies that are not JSON): a failure, retried on rerun
                record.update(failed=True, reason="the teacher gave no readable hypothesis with an edit")
                failed.append(record["reason"])
            store.append(record, own[sample.sample_id])
            computed += 1
        bar.update(len(chunk))
    bar.close()
    return computed, failed


def stored_labels(store: ShardedResultStore, bench, name: str, teacher_name: str, own: dict[str, dict]) -> list[dict]:
    """The labels of every error of ``bench`` computed with its current settings, in the errors' order."""
    return [
        r
        for r in (store.get(record_key(name, teacher_name, s.sample_id)) for s in bench.errors)
        if r and not r.get("failed") and r.get("fingerprint") == fingerprint(own[r["sample_id"]])
    ]


def teacher_stand_ins(arguments: dict[str, Any]) -> list[str]:
    """The non-model parts a ``distill-teacher`` run uses (for its provenance)."""
    if arguments.get("hypotheses") is None:
        return ["teacher: exhaustive attribute search over the generator's factors (not a language model)"]
    return []


@run_command("distill-teacher", teacher_stand_ins)
def distill_teacher(
    classifier: str | ClassifierSpec,
    dataset: Literal["cmnist", "clevr", "shifts", "folder"] = "cmnist",
    out_dir: OutDir = "checkpoints/distill_cmnist/teacher",
    n: int = 300,
    seed: Seed = 1,
    styles: int = 2,
    bias: str | dict[int, list[str]] | dict[str, list[int]] | None = None,
    pool: list[PoolClassifier] | None = None,
    data_kwargs: dict[str, Any] | None = None,
    mining_root: str | None = None,
    evaluation_root: str | None = None,
    mapping_file: str | None = None,
    hypotheses: ChatBackend | None = None,
    editor: DiffusersEdit | None = None,
    m: int = 4,
    k: int = 8,
    min_cei: float = 20.0,
    views: list[View] | None = None,
    reference_class: ReferenceClass = "either",
    val_fraction: float = 0.1,
    error_batch: PositiveInt = 8,
    wandb: bool = False,
    device: Device = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    strategy: Strategy = "auto",
) -> dict[str, Any] | None:
    """Label a classifier's errors on a mining split with a teacher and write the student's training pairs.

    Writes the labels (``teacher.jsonl``), the reply cache and the pairs (``pairs/``) under ``out_dir``; the
    classifiers run on ``device``; ``seed`` also samples the mined errors.

    Args:
        classifier: the target: a ``nemo-train fit`` checkpoint path or a classifier spec
            (:mod:`nemo_train.models.specs`; ``TimmModel`` for hub or local weights on folder data).
        dataset: ``cmnist`` / ``clevr`` (generated; mined from a split disjoint from the evaluation grid),
            ``shifts`` (the shift distribution rendered from the training handwriting pool; each error keeps the
            cause the generator established; ``10 * n`` images are classified) or ``folder`` (``mining_root``,
            checked disjoint from ``evaluation_root``).
        mining_root, evaluation_root, mapping_file: folder data (``<root>/<class>/<image>``): the mining
            split, the evaluation folder it must not overlap, and the class mapping JSON of an ImageNet
            target (``{class: [imagenet ids]}``; default: the folder names are WordNet ids).
        n, styles: errors to mine, exemplars / views per cell of the mining grid.
        bias, data_kwargs: generated data: the classifier's training bias (a preset of the datamodule or, for
            CMNIST, ``{digit: [colour, ...]}``, for shifts ``{factor: [digits]}``; its conflicting errors are
            mined) and extra datamodule arguments (CLEVR ``image_size``).
        pool: generated data: more classifiers (each with its bias) whose errors the same teacher labels into
            the same pairs, e.g. classifiers with different colour biases, so that a student has to read the
            expected colour from the reference image instead of learning one classifier's answer.
        hypotheses: the teacher's hypothesis source, an MLLM backend (``class_path``); none: the exhaustive
            attribute search (generated data only).
        editor: with a backend on folder data, the diffusers instruction editor (``DiffusersEdit``: model id or
            folder, edit size, pipeline arguments).
        m, k: SciTX hypotheses and observations per error (with a backend).
        min_cei: keep only labels whose CEI (percentage points) is at least this.
        views: conversations per kept error: ``error`` (SciTX's question), ``gradcam`` (CamMLLM's), ``change``
            (ChangeMLLM's, with a correctly classified reference beside the error), ``evidence`` (the error beside
            references of its true class that share one unusual trait of it each, and how the labelled classifier
            read them: :mod:`nemo_train.nemo.distill.evidence`; generated data whose fact sheet names typical
            values, e.g. shifts).
        reference_class: the ``change`` view's reference: the nearest correctly classified image of the true or
            the predicted class (``either``, as ChangeMLLM), of one of them (``true`` / ``predicted``), or the
            ``prototype`` of the true class (the correctly classified one with the largest ``P(y)``: it shows
            what the classifier expects of that class).
        val_fraction: share of kept errors whose pairs go to ``val.jsonl``.
        error_batch: errors the teacher labels together (one batched request per stage with an MLLM); the
            labels do not depend on it unless a local model samples the hypotheses.

    With ``devices`` > 1 (or several nodes) every process mines the same errors (they follow from ``seed``),
    labels its share of the unlabelled ones into ``teacher.rank-<r>.jsonl``, and process 0 merges the labels,
    writes the pairs and prints the table (the others return ``None``).
    """
    check_teacher_ranges(n, seed, styles, m, k, val_fraction)
    views = list(views or ["error", "gradcam", "change"])
    out = Path(out_dir)
    if dataset == "folder":
        if mining_root is None or evaluation_root is None:
            raise UserInputError("dataset 'folder' needs mining_root and evaluation_root (disjoint image folders)")
        if not Path(mining_root).is_dir():
            raise UserInputError(f"mining folder {mining_root!r} does not exist")
        if hypotheses is None:
            raise UserInputError("folder data needs an MLLM backend as the teacher's hypothesis source (hypotheses)")
    if pool and dataset == "folder":
        raise UserInputError("a classifier pool needs generated data (dataset cmnist or clevr)")
    members = [(as_classifier(classifier), bias)] + [(as_classifier(p.classifier), p.bias) for p in pool or []]
    for spec, _ in members:
        spec.check()
    if len({spec.label for spec, _ in members}) < len(members):
        raise UserInputError(f"pool classifiers need distinct names; got {[spec.label for spec, _ in members]}")
    if hypotheses is not None and hypotheses.cache is None:
        hypotheses.cache = ResponseCache(out / "llm_cache")
    ranks = current_ranks()
    store = ShardedResultStore(out / "teacher.jsonl", ranks.rank, ranks.world_size)
    ranks.barrier()  # every process has read the finished labels before any writes
    started, computed, failed, groups, rows = time.perf_counter(), 0, [], [], []
    cei_groups: list[list[float]] = []  # the CEI of every labelled error, per classifier
    for spec, member_bias in members:
        if dataset == "folder":
            mapping = ClassMapping.for_folder(mining_root, mapping_file)
            target = build_target(spec, mapping).to(device)
            bench = mine_folder_errors(
                "folder", mining_root, evaluation_root, target, "folder", n=n, seed=seed, class_folders=mapping.folders
            )
        elif dataset == "shifts":
            target = build_target(spec).to(device)
            gaps = member_bias if member_bias is not None else "gaps_a"  # a preset or {factor: [digits]}
            bench = build_shift_benchmark(
                target, gaps, n=n, seed=seed, split="mining", size=10 * n, datamodule_kwargs=data_kwargs
            )
        else:
            target = build_target(spec).to(device)
            bench = mine_synthetic_errors(dataset, target, n, seed, styles, member_bias, datamodule_kwargs=data_kwargs)
        if "evidence" in views:  # refused before any labelling
            check_evidence_benchmark(bench)
        if hypotheses is None:
            teacher = ExhaustiveAttributeTeacher(target)
        else:
            scorer = teacher_scorer(bench, target, hypotheses, editor, seed)
            scitx = SciTX(target, MLLMHypothesizer(hypotheses), scorer, k=k, m=m, captioner=MLLMCaptioner(hypotheses))
            teacher = SciTXTeacher(scitx)
        settings = {
            "teacher": teacher.name,
            "min_cei": min_cei,
            "m": m,
            "k": k,
            "editor": editor.settings() if editor is not None else None,
            "target": spec.identity(),
            "hypotheses": hypotheses.fingerprint() if hypotheses is not None else None,
            "mining": mining_identity(dataset, n, seed, styles, member_bias, data_kwargs, mining_root),
        }
        own = label_settings(bench, settings)
        done, lost = _label_errors(teacher, bench, store, spec.label, own, min_cei, error_batch, ranks.shard)
        computed, failed = computed + done, failed + lost
        if ranks.world_size > 1:  # the labels of every process
            ranks.barrier()
            store = store.reopen()
        labels = stored_labels(store, bench, spec.label, teacher.name, own)
        kept = [r for r in labels if r["kept"]]
        groups.append(LabelledErrors(spec.label, kept, bench, target))
        mean, mean_kept = score_mean([r["cei"] for r in labels]), score_mean([r["cei"] for r in kept])
        cei_groups.append([r["cei"] for r in labels])
        shown = format_with_interval(mean, *(mean_interval(cei_groups[-1]) or (None, None)), digits=1)
        rows.append([spec.label, teacher.name, len(labels), len(kept), mean, mean_kept, shown])
    ranks.barrier()
    computed, reasons = ranks.total(computed), ranks.gather(failed)
    if not ranks.is_main:
        return None
    merge_shards(store.path)
    failed = [reason for found in reasons for reason in found]
    labelled = sum(row[2] for row in rows)
    if failed and not any(group.labels for group in groups):
        raise UserInputError(
            f"the teacher's backend failed for {len(failed)} error(s) and no label was kept: {failed[0]}; "
            "rerun when the endpoint answers (labelled errors are kept)"
        )
    if not any(group.labels for group in groups):
        raise UserInputError(f"no teacher label reaches min_cei={min_cei}; lower it or mine more errors")
    paths = pairs_from_labels(groups, out / "pairs", views, val_fraction, seed, reference_class)
    print_table(
        ["classifier", "teacher", "errors", f"kept (CEI >= {min_cei:g})", "mean CEI", "mean CEI kept"],
        [[*row[:4], row[6], row[5]] for row in rows],
        title="Distillation teacher",
        caption="mean CEI [bootstrap 95 % interval over the errors]",
        digits=1,
    )
    print(f"{computed} errors labelled in {time.perf_counter() - started:.1f} s; pairs: {paths['train']}")
    if failed:
        print(f"{len(failed)} error(s) left unlabelled ({failed[0]}); rerun to retry them")
    mean = score_mean([row[4] for row in rows if row[2]], weights=[row[2] for row in rows if row[2]])
    kept_total = sum(len(group.labels) for group in groups)
    pooled = grouped_mean_interval(cei_groups)  # classifiers resampled, then their errors kept whole
    return {
        "labels": labelled,
        "kept": kept_total,
        "mean_cei": mean,
        **interval_fields("mean_cei", pooled),
        **{k: str(v) for k, v in paths.items()},
    }
