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

import time
from pathlib import Path
from typing import Any, Literal

from jsonargparse.typing import PositiveInt

from datamodules.sentences import Claims
from nemo_train.backends.base import ChatBackend
from nemo_train.backends.cache import ResponseCache
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.metrics.bootstrap import format_with_interval, grouped_mean_interval, interval_fields, mean_interval
from nemo_train.metrics.nemo import score_mean
from nemo_train.models.specs import ClassifierSpec, as_classifier
from nemo_train.models.targets import ClassMapping
from nemo_train.nemo.distill.evidence import EvidenceView, check_evidence_benchmark
from nemo_train.nemo.distill.mining import mine_folder_errors, mine_synthetic_errors
from nemo_train.nemo.distill.pairs import LabelledErrors, ReferenceClass, pairs_from_labels
from nemo_train.nemo.distill.teacher_parts import (  # noqa: F401  (build_target, PoolClassifier: this module's API)
    PoolClassifier,
    _label_errors,
    build_target,
    check_teacher_ranges,
    label_settings,
    mining_identity,
    stored_labels,
    teacher_scorer,
    teacher_stand_ins,
)
from nemo_train.nemo.distill.teachers import ExhaustiveAttributeTeacher, SciTXTeacher, View
from nemo_train.nemo.distill.zoo_members import ZooSide, zoo_members
from nemo_train.nemo.methods.scitx import MLLMCaptioner, MLLMHypothesizer, SciTX
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.scoring.editors import DiffusersEdit
from nemo_train.scoring.shift_benchmark import build_shift_benchmark
from nemo_train.sharding import ShardedResultStore, Strategy, current_ranks, merge_shards


@run_command("distill-teacher", teacher_stand_ins)
def distill_teacher(
    classifier: str | ClassifierSpec | None = None,
    dataset: Literal["cmnist", "clevr", "shifts", "folder"] = "cmnist",
    out_dir: OutDir = "checkpoints/distill_cmnist/teacher",
    n: int = 300,
    seed: Seed = 1,
    styles: int = 2,
    bias: str | dict[int, list[str]] | dict[str, list[int]] | None = None,
    pool: list[PoolClassifier] | None = None,
    zoo: str | None = None,
    zoo_split: ZooSide = "train",
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
    evidence: EvidenceView | None = None,
    reference_class: ReferenceClass = "either",
    claims: Claims = "values",
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
            (:mod:`nemo_train.models.specs`; ``TimmModel`` for hub or local weights on folder data); may be left
            out when ``zoo`` names the classifiers.
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
        zoo, zoo_split: shifts: a ``nemo-train zoo`` folder and the side whose members the teacher labels (``train``:
            the training zoo); each member is a ``FitCheckpoint`` with the gap spec its provenance records
            (:mod:`nemo_train.nemo.distill.zoo_members`), and all of them go into one pooled pair set. Pairs pooled
            over a zoo carry the labelled classifier's evidence in every prompt (``views: [evidence]``, the
            default then; other views are refused), so that no answer can be learned from the digit alone.
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
        evidence: the ``evidence`` view's references and question (:class:`~nemo_train.nemo.distill.evidence.EvidenceView`:
            handwriting exemplars, the leave-one-trait-out references, tallies naming the traits); the student rows
            of ``distill-eval`` take the same.
        reference_class: the ``change`` view's reference: the nearest correctly classified image of the true or
            the predicted class (``either``, as ChangeMLLM), of one of them (``true`` / ``predicted``), or the
            ``prototype`` of the true class (the correctly classified one with the largest ``P(y)``: it shows
            what the classifier expects of that class).
        claims: what the pairs' answers assert about the image: the cause's factor and its value as the teacher
            wrote them (``values``: ``because of the -45 degree rotation``) or the factor alone (``factor``:
            ``because of its rotation``; the edit line is the same), for a student that cannot read every value, or
            the factor without the classes the question gives (``cause``: ``The classifier erred because of its
            rotation.``), for a student that copies them wrongly.
        val_fraction: share of kept errors whose pairs go to ``val.jsonl``.
        error_batch: errors the teacher labels together (one batched request per stage with an MLLM); the
            labels do not depend on it unless a local model samples the hypotheses.

    With ``devices`` > 1 (or several nodes) every process mines the same errors (they follow from ``seed``),
    labels its share of the unlabelled ones into ``teacher.rank-<r>.jsonl``, and process 0 merges the labels,
    writes the pairs and prints the table (the others return ``None``).
    """
    check_teacher_ranges(n, seed, styles, m, k, val_fraction)
    views = checked_views(views, zoo, dataset)
    out = Path(out_dir)
    members = _checked_members(classifier, bias, pool, dataset, mining_root, evaluation_root, hypotheses, zoo,
                               zoo_split)  # fmt: skip
    if hypotheses is not None and hypotheses.cache is None:
        hypotheses.cache = ResponseCache(out / "llm_cache")
    ranks = current_ranks()
    store = ShardedResultStore(out / "teacher.jsonl", ranks.rank, ranks.world_size)
    ranks.barrier()  # every process has read the finished labels before any writes
    started, computed, failed, groups, rows = time.perf_counter(), 0, [], [], []
    cei_groups: list[list[float]] = []  # the CEI of every labelled error, per classifier
    for spec, member_bias in members:
        target, bench = mined_errors(spec, member_bias, dataset, n, seed, styles, data_kwargs, device,
                               mining_root, evaluation_root, mapping_file)  # fmt: skip
        if "evidence" in views:  # refused before any labelling
            check_evidence_benchmark(bench)
        teacher = _teacher(target, bench, hypotheses, editor, seed, k, m)
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
        cei_groups.append([r["cei"] for r in labels])
        rows.append(_table_row(spec.label, teacher.name, labels, kept))
    ranks.barrier()
    computed, reasons = ranks.total(computed), ranks.gather(failed)
    if not ranks.is_main:
        return None
    merge_shards(store.path)
    failed = [reason for found in reasons for reason in found]
    _check_kept(groups, failed, min_cei)
    paths = pairs_from_labels(groups, out / "pairs", views, val_fraction, seed, reference_class, evidence, claims)
    _print_labels(rows, min_cei, computed, time.perf_counter() - started, paths, failed)
    mean = score_mean([row[4] for row in rows if row[2]], weights=[row[2] for row in rows if row[2]])
    return {
        "labels": sum(row[2] for row in rows),
        "kept": sum(len(group.labels) for group in groups),
        "mean_cei": mean,
        **interval_fields("mean_cei", grouped_mean_interval(cei_groups)),  # classifiers resampled, errors kept whole
        **{k: str(v) for k, v in paths.items()},
    }


def _checked_members(classifier, bias, pool, dataset, mining_root, evaluation_root, hypotheses, zoo=None,
                     zoo_split="train") -> list[tuple]:  # fmt: skip
    """``(spec, bias)`` of the classifier, of each pool member and of each member of the zoo's side; one-line
    errors before any work."""
    if dataset == "folder":
        if mining_root is None or evaluation_root is None:
            raise UserInputError("dataset 'folder' needs mining_root and evaluation_root (disjoint image folders)")
        if not Path(mining_root).is_dir():
            raise UserInputError(f"mining folder {mining_root!r} does not exist")
        if hypotheses is None:
            raise UserInputError("folder data needs an MLLM backend as the teacher's hypothesis source (hypotheses)")
    if pool and dataset == "folder":
        raise UserInputError("a classifier pool needs generated data (dataset cmnist or clevr)")
    members = [(as_classifier(classifier), bias)] if classifier is not None else []
    members += [(as_classifier(p.classifier), p.bias) for p in pool or []]
    members += [(member.spec, member.gaps) for member in (zoo_members(zoo, zoo_split) if zoo else [])]
    if not members:
        raise UserInputError("no classifier to label: give classifier (a checkpoint or spec) or zoo")
    for spec, _ in members:
        spec.check()
    if len({spec.label for spec, _ in members}) < len(members):
        raise UserInputError(f"pool classifiers need distinct names; got {[spec.label for spec, _ in members]}")
    return members


def checked_views(views: list[View] | None, zoo: str | None, dataset: str) -> list[View]:
    """The views of the pairs: by default ``error``, ``gradcam`` and ``change``; over a zoo only ``evidence``."""
    if zoo is None:
        return list(views or ["error", "gradcam", "change"])
    if dataset != "shifts":
        raise UserInputError(f"a classifier zoo is a zoo of shifts classifiers; got dataset {dataset!r}")
    views = list(views or ["evidence"])
    if views != ["evidence"]:
        raise UserInputError(
            f"pairs pooled over a zoo carry the classifier's evidence in every prompt (views: [evidence]); got {views}: "
            "without it an answer can be learned from the digit alone"
        )
    return views


def mined_errors(spec, member_bias, dataset, n, seed, styles, data_kwargs, device, mining_root, evaluation_root,
           mapping_file):  # fmt: skip
    """The classifier (on ``device``) and its mined errors, on a split disjoint from every evaluation error.

    The teacher mines with it, and the verified-edit reward (:mod:`nemo_train.nemo.reward`) rebuilds a teacher's
    errors with it from the teacher's recorded settings, so both find the same errors."""
    if dataset == "folder":
        mapping = ClassMapping.for_folder(mining_root, mapping_file)
        target = build_target(spec, mapping).to(device)
        return target, mine_folder_errors(
            "folder", mining_root, evaluation_root, target, "folder", n=n, seed=seed, class_folders=mapping.folders
        )
    target = build_target(spec).to(device)
    if dataset == "shifts":
        gaps = member_bias if member_bias is not None else "gaps_a"  # a preset or {factor: [digits]}
        return target, build_shift_benchmark(
            target, gaps, n=n, seed=seed, split="mining", size=10 * n, datamodule_kwargs=data_kwargs
        )
    return target, mine_synthetic_errors(dataset, target, n, seed, styles, member_bias, datamodule_kwargs=data_kwargs)


def _teacher(target, bench, hypotheses: ChatBackend | None, editor, seed: int, k: int, m: int):
    """The exhaustive attribute search (no hypotheses backend), or SciTX with the backend as hypothesizer."""
    if hypotheses is None:
        return ExhaustiveAttributeTeacher(target)
    scorer = teacher_scorer(bench, target, hypotheses, editor, seed)
    return SciTXTeacher(
        SciTX(target, MLLMHypothesizer(hypotheses), scorer, k=k, m=m, captioner=MLLMCaptioner(hypotheses))
    )


def _table_row(name: str, teacher: str, labels: list[dict], kept: list[dict]) -> list:
    """``[classifier, teacher, errors, kept, mean CEI, mean CEI kept, mean CEI with its interval]``."""
    ceis = [r["cei"] for r in labels]
    mean, mean_kept = score_mean(ceis), score_mean([r["cei"] for r in kept])
    shown = format_with_interval(mean, *(mean_interval(ceis) or (None, None)), digits=1)
    return [name, teacher, len(labels), len(kept), mean, mean_kept, shown]


def _check_kept(groups: list[LabelledErrors], failed: list[str], min_cei: float) -> None:
    if failed and not any(group.labels for group in groups):
        raise UserInputError(
            f"the teacher's backend failed for {len(failed)} error(s) and no label was kept: {failed[0]}; "
            "rerun when the endpoint answers (labelled errors are kept)"
        )
    if not any(group.labels for group in groups):
        raise UserInputError(f"no teacher label reaches min_cei={min_cei}; lower it or mine more errors")


def _print_labels(rows: list[list], min_cei: float, computed: int, seconds: float, paths: dict, failed: list) -> None:
    print_table(
        ["classifier", "teacher", "errors", f"kept (CEI >= {min_cei:g})", "mean CEI", "mean CEI kept"],
        [[*row[:4], row[6], row[5]] for row in rows],
        title="Distillation teacher",
        caption="mean CEI [bootstrap 95 % interval over the errors]",
        digits=1,
    )
    print(f"{computed} errors labelled in {seconds:.1f} s; pairs: {paths['train']}")
    if failed:
        print(f"{len(failed)} error(s) left unlabelled ({failed[0]}); rerun to retry them")
