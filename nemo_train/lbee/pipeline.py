"""``nemo-train lbee``: find and describe a classifier's failure modes with sentences, and score them.

Steps: the classifier (a :class:`~nemo_train.models.specs.ClassifierSpec`: a ``nemo-train fit`` checkpoint, or a
hub model used as published; never trained here) predicts the target split; the joint space embeds its images and
the candidate sentences; the failure-mode search (split, Ward clusters, prototypes, TopS / SetDiff / PDiff /
FPDiff) keeps ``K`` sentences per hard cluster; relevance ``Gamma`` (ground-truth attributes or VQA) and per-image
correctness ``omega`` give ``S*_beta`` and the scores ACR / AHR / TPR / JI per method, printed as a table, followed
by the table of the sentences of ``S*_beta`` and of each method's ``R_S``. Figures (hard clusters with each
method's sentences, beta sweep) are saved in ``out_dir`` and logged to W&B when asked.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import lightning as L
import torch

from datamodules.base import SplitDataModule
from nemo_train.artefacts import record_artefact, reuse_artefact
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.lbee import metrics
from nemo_train.lbee.encoders import Encoder, SyntheticCLIP
from nemo_train.lbee.observe import predict
from nemo_train.lbee.outputs import check_given_joint_space, place_outputs
from nemo_train.lbee.partition import partition_precision
from nemo_train.lbee.plots import beta_sweep_plot, cluster_grid
from nemo_train.lbee.relevance import AttributeRelevance, Relevance, VQARelevance
from nemo_train.lbee.report import print_sentence_table
from nemo_train.lbee.search import FailureModeSearch, MethodScores, SearchResult, beta_sweep, evaluate
from nemo_train.lbee.sentences import AttributeSentences, SentenceSet, SentenceSource
from nemo_train.loggers import init_run
from nemo_train.metrics.bootstrap import format_with_interval
from nemo_train.models.specs import ClassifierSpec, as_classifier
from nemo_train.models.targets import Target
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.sharding import Strategy, current_ranks
from nemo_train.store import write_bytes_atomic

#: largest ``o`` of ``beta = o * std(omega)`` (above it no image is hard)
MAX_O = 10.0
#: The classifier of the NICO-like 85 presets (``configs/nico/nico85_cnn.yaml`` writes it).
NICO_EXAMPLE = "checkpoints/nico85_cnn/checkpoints/best.ckpt"


@dataclass
class EvalArgs:
    """Evaluation settings: ``o`` of ``beta = o * std(omega)``, the sweep of ``o``, the analysed split, the
    number of hard clusters drawn, and ``k`` of the partition precision@k (per-class runs on data with
    known correlated contexts: clusters of the biased validation split scored on the test split; 0: off);
    ``batch_size`` images are classified and embedded at once (the unit several processes share out)."""

    o: float = 0.2
    sweep: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0])
    target_split: Literal["test", "val"] = "test"
    grid_clusters: int = 8
    partition_k: int = 10
    batch_size: int = 256


@dataclass
class LBEEResult:
    """Headline numbers of a run: scores per method, ``S*_beta``, the classifier's accuracy, file paths."""

    scores: list[MethodScores]
    sentences: list[str]
    s_star: list[str]
    beta: float
    accuracy: float
    group_accuracy: dict[str, float]
    num_hard: int
    num_easy: int
    num_clusters: int
    clusters: list[dict]
    files: dict[str, str]
    partition_precision: float | None = None
    encoder_zero_shot: dict[str, float] = field(default_factory=dict)

    def score(self, method: str) -> MethodScores:
        return next(s for s in self.scores if s.method == method)


def check_classifier(classifier: str | ClassifierSpec | None) -> ClassifierSpec:
    """The classifier's spec; a one-line error when none is given or its checkpoint file is missing."""
    if classifier is None:
        raise UserInputError(
            "no classifier given; pass --classifier <checkpoint of `nemo-train fit`>, e.g. "
            f"{NICO_EXAMPLE} after `nemo-train fit --config configs/nico/nico85_cnn.yaml`"
        )
    spec = as_classifier(classifier)
    spec.check()
    return spec


def classifier_model(classifier: str | ClassifierSpec | None, data: SplitDataModule) -> Target:
    """The classifier under analysis, in eval mode, over the data's classes."""
    spec = check_classifier(classifier)
    model = spec.build(getattr(data, "class_names", None))
    if len(model.class_names) != data.num_classes:
        raise UserInputError(
            f"classifier {spec.label!r} has {len(model.class_names)} classes but the data have "
            f"{data.num_classes}; pass a classifier of this data's classes (`nemo-train fit` trains one)"
        )
    return model


def check_evaluation(evaluation: EvalArgs) -> None:
    """A one-line error for an evaluation option out of range (before any work)."""
    values = {"o": evaluation.o, **{f"sweep[{i}]": o for i, o in enumerate(evaluation.sweep)}}
    for name, value in values.items():
        if not 0.0 <= value <= MAX_O:
            raise UserInputError(
                f"evaluation.{name}={value} is out of range; expected 0 to {MAX_O:g} (beta = o * std(omega))"
            )
    for name in ("grid_clusters", "partition_k"):
        if getattr(evaluation, name) < 0:
            raise UserInputError(f"evaluation.{name}={getattr(evaluation, name)} is out of range; expected 0 or more")
    if evaluation.batch_size < 1:
        raise UserInputError(f"evaluation.batch_size={evaluation.batch_size} is out of range; expected 1 or more")


def clip_settings(encoder: SyntheticCLIP) -> dict:
    """What a trained :class:`SyntheticCLIP` is made of (its fingerprint beside the folder)."""
    names = ("sources", "train_per_source", "max_epochs", "batch_size", "seed", "group_size", "model_kwargs")
    return {name: getattr(encoder, name) for name in names}


def prepare_saved_clip(encoder: Encoder, out: Path) -> dict | None:
    """A joint space that this command trains inside ``out`` is reused only when trained with the same settings:
    one trained with others is removed (trained again when first used). Returns the settings to record beside
    it once trained, or ``None`` (reused, or a folder given elsewhere: an input, never removed)."""
    if not isinstance(encoder, SyntheticCLIP) or not Path(encoder.path).resolve().is_relative_to(out.resolve()):
        return None
    settings = clip_settings(encoder)
    return None if reuse_artefact(encoder.path, settings, "joint space") else settings


def lbee_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts an ``lbee`` run uses (for its provenance)."""
    named = []
    if arguments.get("sentences") is None or isinstance(arguments.get("sentences"), AttributeSentences):
        named.append("sentences: ground-truth attribute sentences of the vocabulary (not generated by a model)")
    if arguments.get("relevance") is None or isinstance(arguments.get("relevance"), AttributeRelevance):
        named.append("relevance: read from the ground-truth attributes (not a VQA model)")
    return named


@run_command("lbee", lbee_stand_ins)
def lbee(
    data: SplitDataModule,
    encoder: Encoder | None = None,
    sentences: SentenceSource | None = None,
    relevance: Relevance | None = None,
    search: FailureModeSearch | None = None,
    classifier: str | ClassifierSpec | None = None,
    evaluation: EvalArgs | None = None,
    out_dir: OutDir = "checkpoints/lbee/run",
    wandb: bool = False,
    seed: Seed = 0,
    device: Device = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    strategy: Strategy = "auto",
) -> LBEEResult | None:
    """Find and describe a classifier's failure modes with sentences (TopS, SetDiff, PDiff, FPDiff).

    Args:
        data: datamodule of the classifier; its test (or validation) split is the target set.
        encoder: joint image-text space (default: the small CLIP of ``<out_dir>/clip``, trained if missing).
        sentences: candidate sentences (default: ground-truth sentences of the NICO-like vocabulary).
        relevance: image-sentence relevance (default: from ground-truth attributes).
        search: split / clustering / selection settings.
        classifier: the classifier under analysis: a ``nemo-train fit`` checkpoint (a missing file is an error
            naming the command that trains it) or another :class:`~nemo_train.models.specs.ClassifierSpec`, e.g.
            ``TimmModel`` (published weights, such as an ImageNet ResNet-50).
        evaluation: beta, beta sweep and target split.

    Writes the figures, ``results.json`` (and the default joint space) under ``out_dir``; with ``wandb`` the table
    and figures are logged too. The seed is set before the data are built; the classifier runs on ``device``.

    With ``devices`` > 1 (or several nodes) the processes split the classification and embedding of the images
    batch by batch; process 0 gathers them, clusters, scores and writes everything (the others return ``None``).
    """
    check_classifier(classifier)  # before anything is written
    inputs = _resolve_inputs(data, encoder, sentences, relevance, search, evaluation, Path(out_dir))
    clip_to_record = _prepare_joint_space(inputs)
    L.seed_everything(seed, verbose=False)  # the data are the same whether or not the joint space was just trained
    data.setup("fit")
    observed = _observe(inputs, data, classifier_model(classifier, data).to(device))
    if observed is None:
        return None  # a process other than the first: its share was gathered there
    if clip_to_record is not None:  # trained by its first use just now: record what it was trained with
        record_artefact(inputs.encoder.path, clip_to_record)
    result, analysis = _analyse(inputs, data, observed)
    saved = json.dumps({**asdict(result), "sweep": {"o": inputs.evaluation.sweep, **analysis.sweep}}, indent=1)
    write_bytes_atomic(inputs.out / "results.json", saved.encode("utf-8"))  # a kill leaves the old or the new file
    columns, numbers = _print_tables(result, analysis, inputs)
    if wandb:
        _log_wandb(columns, numbers, result.files, inputs.out)
    return result


@dataclass
class _Inputs:
    """A run's parts with their defaults filled in, checked before any work."""

    out: Path
    encoder: Encoder
    sentences: SentenceSet
    relevance: Relevance
    search: FailureModeSearch
    evaluation: EvalArgs


def _resolve_inputs(data, encoder, sentences, relevance, search, evaluation, out: Path) -> _Inputs:
    if isinstance(relevance, VQARelevance):
        relevance.check_backends()
    encoder = encoder or SyntheticCLIP()
    check_given_joint_space(out, encoder)
    out.mkdir(parents=True, exist_ok=True)
    sentences, relevance = sentences or AttributeSentences("nico"), relevance or AttributeRelevance()
    place_outputs(out, encoder, sentences, relevance)  # default joint space and reply caches under out_dir
    search, evaluation = search or FailureModeSearch(), evaluation or EvalArgs()
    check_evaluation(evaluation)
    sentence_set = sentences.build(getattr(data, "class_names", None))  # user input checked before any work
    return _Inputs(out, encoder, sentence_set, relevance, search, evaluation)


def _prepare_joint_space(inputs: _Inputs) -> dict | None:
    """Remove a joint space this command trained with other settings; several processes: train a missing one
    once, on the first, before the others load it. Returns the settings to record once it is trained."""
    ranks = current_ranks()
    clip_to_record = None
    if ranks.is_main:
        clip_to_record = prepare_saved_clip(inputs.encoder, inputs.out)
        if isinstance(inputs.encoder, SyntheticCLIP) and ranks.world_size > 1:
            inputs.encoder.encoder()
    ranks.barrier()
    return clip_to_record


@dataclass
class _Observed:
    """The classifier and the joint space on the analysed split (and on the validation split for the partition
    precision of per-class runs)."""

    probs: torch.Tensor
    embeddings: torch.Tensor
    images: torch.Tensor
    labels: torch.Tensor
    attrs: dict[str, torch.Tensor]
    groups: torch.Tensor
    validation: tuple | None


def _observe(inputs: _Inputs, data: SplitDataModule, model: Target) -> _Observed | None:
    evaluation = inputs.evaluation
    dataset = data.test_set if evaluation.target_split == "test" else data.val_set
    if dataset is None or len(dataset) == 0:
        raise UserInputError(f"the datamodule has no {evaluation.target_split} split to analyse")
    predicted = predict(model, inputs.encoder, dataset, evaluation.batch_size)
    partition = inputs.search.per_class and evaluation.partition_k > 0 and hasattr(data, "correlated")
    validation = None
    if partition and data.val_set is not None:
        validation = predict(model, inputs.encoder, data.val_set, evaluation.batch_size)
    if predicted is None:
        return None
    labels = predicted[3]
    groups = dataset.groups if hasattr(dataset, "groups") else torch.zeros_like(labels)
    return _Observed(*predicted, groups=groups, validation=validation)


@dataclass
class _Analysis:
    """What the tables need beyond the result: relevance, correctness, ``S*_beta`` and the beta sweep."""

    search: SearchResult
    gamma: torch.Tensor
    omega: torch.Tensor
    s_star: set[int]
    sweep: dict


def _analyse(inputs: _Inputs, data: SplitDataModule, seen: _Observed) -> tuple[LBEEResult, _Analysis]:
    """Search the failure modes, score each method's sentences, draw the figures."""
    evaluation, texts = inputs.evaluation, inputs.sentences.texts
    found = inputs.search(seen.embeddings, inputs.encoder.encode_text(texts), seen.probs, seen.labels)
    if not found.clusters:
        raise UserInputError("the split left no hard or no easy image; nothing to contrast")
    gamma = inputs.relevance(inputs.sentences, seen.images, seen.attrs)
    omega = (seen.probs.argmax(-1) == seen.labels).double()
    beta = metrics.beta_from(omega, evaluation.o)
    s_star = metrics.hard_sentences(gamma, omega, beta)
    names = getattr(data, "group_names", ["all"])
    groups = seen.groups
    group_acc = {name: float(omega[groups == g].mean()) for g, name in enumerate(names) if bool((groups == g).any())}
    precision = None
    if seen.validation is not None:
        val_probs, val_emb, _, val_labels, _ = seen.validation
        precision = partition_precision(
            (val_emb, val_probs, val_labels),
            (seen.embeddings, seen.labels, seen.attrs["context"]),
            data.correlated,
            inputs.search.split,
            inputs.search.clustering,
            evaluation.partition_k,
        )
    grid = cluster_grid(
        found, seen.images, seen.embeddings, texts, inputs.out / "hard_clusters.png",
        max_clusters=evaluation.grid_clusters, s_star=s_star,
    )  # fmt: skip
    sweep = beta_sweep(found, gamma, omega, evaluation.sweep)
    files = {
        "clusters": str(grid),
        "beta_sweep": str(beta_sweep_plot(evaluation.sweep, sweep, inputs.out / "beta_sweep.png")),
    }
    clusters = [
        {
            "size": len(c.members),
            "class": c.class_index,
            "conflicting_fraction": float((groups[c.members] > 0).double().mean()),
            **{m: [texts[s] for s in c.selections[m]] for m in found.methods},
        }
        for c in found.clusters
    ]
    result = LBEEResult(
        scores=evaluate(found, gamma, omega, beta),
        sentences=texts,
        s_star=[texts[s] for s in sorted(s_star)],
        beta=beta,
        accuracy=float(omega.mean()),
        group_accuracy=group_acc,
        num_hard=found.num_hard,
        num_easy=found.num_easy,
        num_clusters=len(found.clusters),
        clusters=clusters,
        files=files,
        partition_precision=precision,
        encoder_zero_shot=dict(getattr(inputs.encoder, "zero_shot", {}) or {}),
    )
    return result, _Analysis(found, gamma, omega, s_star, sweep)


def _print_tables(result: LBEEResult, analysis: _Analysis, inputs: _Inputs) -> tuple[list[str], list[list]]:
    """Print the scores and the sentence table; returns the score table's columns and numbers (for W&B)."""
    columns = ["method", "ACR", "AHR", "TPR", "JI", "|R_S|"]
    rows = [
        [
            s.method,
            format_with_interval(s.acr, s.acr_ci_low, s.acr_ci_high, digits=3),
            format_with_interval(s.ahr, s.ahr_ci_low, s.ahr_ci_high, digits=3),
            s.tpr,
            s.ji,
            s.num_selected,
        ]
        for s in result.scores
    ]
    precision, k = result.partition_precision, inputs.evaluation.partition_k
    caption = (
        "ACR, AHR: [bootstrap 95 % interval over the hard clusters]; "
        f"{result.num_clusters} hard clusters ({result.num_hard} hard / {result.num_easy} easy images), "
        f"|S*|={len(analysis.s_star)} of {len(inputs.sentences)} sentences, beta={result.beta:.3f}, "
        f"accuracy {result.accuracy:.3f} "
        + " ".join(f"{k} {v:.3f}" for k, v in result.group_accuracy.items())
        + (f"; partition P@{k} {precision:.3f}" if precision is not None else "")
    )
    print_table(columns, rows, title="Failure-mode sentences", caption=caption)
    print_sentence_table(result.sentences, analysis.gamma, analysis.omega, analysis.s_star, result.scores, result.beta)
    return columns, [[s.method, s.acr, s.ahr, s.tpr, s.ji, s.num_selected] for s in result.scores]


def _log_wandb(columns, rows, files: dict[str, str], out: Path) -> None:
    import wandb  # heavy optional dependency: only when logging is asked for

    run = wandb.run or init_run(out, project="nemo-train", job_type="lbee")  # lbee opens one (nemo_train.runs)
    run.log(
        {
            "lbee/scores": wandb.Table(columns=columns, data=rows),
            "lbee/hard_clusters": wandb.Image(files["clusters"]),
            "lbee/beta_sweep": wandb.Image(files["beta_sweep"]),
        }
    )
