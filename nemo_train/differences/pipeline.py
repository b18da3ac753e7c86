"""The ``differences`` pipeline: explain how two vision models differ and score the explanations.

Raw Differences, Summarization and Optimization (and optionally a user-written explanation) are
scored by Completeness, Density and Token Length on held-out test conditions, as in "Towards automatic
discovery and explanation of differences between vision models" (Tables 1 and 3). Plain Python:
:func:`run_differences` takes built objects; :func:`differences` is the command line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from nemo_train.differences.conditions import AttributeSpace, Rejected, sample_conditions
from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.evaluators import Evaluator, KeywordEvaluator
from nemo_train.differences.explorers import Explorer, NeighbourhoodExplorer
from nemo_train.differences.failures import (
    check_some_scored,
    optimization_failure,
    part_failures,
    summarization_failure,
)
from nemo_train.differences.generators import ConditionalGenerator
from nemo_train.differences.methods import Optimization, OptimizationArgs, raw_differences, summarization
from nemo_train.differences.metrics import attribution, normalise_attributions, score, score_intervals, token_classes
from nemo_train.differences.models import ComparedModel, model_pair
from nemo_train.differences.plots import attribution_figure, heatmap, token_ratio_figure
from nemo_train.differences.report import DifferencesResult, MethodScore, log_wandb, print_result
from nemo_train.differences.summarizers import Summarizer, TreeSummarizer
from nemo_train.errors import UserInputError
from nemo_train.models.specs import ClassifierSpec
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.sharding import Strategy, current_ranks

log = logging.getLogger(__name__)

Method = Literal["raw_differences", "summarization", "optimization"]


@dataclass
class SamplingArgs:
    """How Diff_Model is measured.

    Args:
        samples_per_condition: n images per condition.
        images_per_batch: images rendered and classified at once.

    The images and every random choice of the run draw from the command's ``seed``.
    """

    samples_per_condition: int = 20
    images_per_batch: int = 4096


@dataclass
class ProtocolArgs:
    """Which conditions the explainers see and which score them.

    Args:
        observed_conditions: conditions of the Raw Differences list (and of Summarization).
        test_conditions: size of the held-out test set (drawn from the grid before anything is
            explored; never shown to an explainer).
        test_set: explicit test conditions (e.g. captions for a text-to-image generator); replaces
            ``test_conditions``.
        drop_ratio: share of tokens removed per question for Density.
        density_repeats: perturbed copies per question.
        attribution_questions: test questions used for leave-one-out attribution (0 turns it off).
    """

    observed_conditions: int = 100
    test_conditions: int = 300
    test_set: list[dict] | None = None
    drop_ratio: float = 0.25
    density_repeats: int = 1
    attribution_questions: int = 60


@dataclass
class Explainers:
    """The pluggable parts; ``None`` takes the embedded stand-ins (no language model)."""

    evaluator: Evaluator | None = None
    summarizer: Summarizer | None = None
    explorer: Explorer | None = None

    def resolved(self) -> tuple[Evaluator, Summarizer, Explorer]:
        return (
            self.evaluator or KeywordEvaluator(),
            self.summarizer or TreeSummarizer(),
            self.explorer or NeighbourhoodExplorer(),
        )


#: upper bounds of the sizes (a run above them would not fit in memory or time, e.g. 10^8 images per condition)
MAX_CONDITIONS, MAX_SAMPLES, MAX_BATCH, MAX_REPEATS = 100_000, 100_000, 1 << 20, 1_000


def check_ranges(
    sampling: SamplingArgs, protocol: ProtocolArgs, optimization: OptimizationArgs, grid_size: int = 0
) -> None:
    """A one-line error naming the first option out of range (``grid_size``: conditions of a finite grid, which the
    test conditions may not exhaust: the explainers observe the others)."""
    bounds = [
        ("sampling.samples_per_condition", sampling.samples_per_condition, 1, MAX_SAMPLES),
        ("sampling.images_per_batch", sampling.images_per_batch, 1, MAX_BATCH),
        ("protocol.observed_conditions", protocol.observed_conditions, 1, MAX_CONDITIONS),
        ("protocol.test_conditions", protocol.test_conditions, 1, MAX_CONDITIONS),
        ("protocol.density_repeats", protocol.density_repeats, 1, MAX_REPEATS),
        ("protocol.attribution_questions", protocol.attribution_questions, 0, MAX_CONDITIONS),
        ("optimization.iterations", optimization.iterations, 0, MAX_REPEATS),
        ("optimization.conditions_per_iteration", optimization.conditions_per_iteration, 1, MAX_CONDITIONS),
        ("optimization.candidates", optimization.candidates, 1, MAX_REPEATS),
        ("optimization.initial_conditions", optimization.initial_conditions, 1, MAX_CONDITIONS),
    ]
    for name, value, low, high in bounds:
        if not low <= value <= high:
            raise UserInputError(f"{name}={value} is out of range; expected {low:,} to {high:,}")
    if not 0.0 < protocol.drop_ratio < 1.0:
        raise UserInputError(
            f"protocol.drop_ratio={protocol.drop_ratio} is out of range; expected a share above 0 and below 1"
        )
    if grid_size and protocol.test_set is None and protocol.test_conditions >= grid_size:
        raise UserInputError(
            f"protocol.test_conditions={protocol.test_conditions:,} leaves no condition to observe: the generator's "
            f"grid has {grid_size:,} conditions; expected at most {grid_size - 1:,}"
        )
    if protocol.test_set is not None and not protocol.test_set:
        raise UserInputError("protocol.test_set is empty; give at least one test condition (or leave it out)")


def _device(device: str) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("device='cuda' but no CUDA device is available")
    return torch.device(device)


def _test_and_observed(generator: ConditionalGenerator, protocol: ProtocolArgs, explorer: Explorer, seed: int):
    rng = np.random.default_rng([seed, 1])
    space = generator.space
    grid = generator.grid()
    if protocol.test_set is not None:
        try:
            test = [space.parse(c) for c in protocol.test_set]
        except Rejected as why:
            raise UserInputError(f"test_set has a condition outside the generator's vocabulary: {why}") from None
    elif grid:
        test = sample_conditions(grid, protocol.test_conditions, rng)
    else:
        raise UserInputError("an open-set generator needs an explicit test_set of conditions")
    if grid:
        observed = sample_conditions(grid, protocol.observed_conditions, rng, exclude=test)
    else:  # open set: the explorer proposes the observed conditions (rejections are skipped)
        observed, held = [], set(test)
        for round_ in range(20):
            if len(observed) >= protocol.observed_conditions:
                break
            for p in explorer.propose([], [], [], protocol.observed_conditions - len(observed), seed * 100 + round_):
                try:
                    c = space.parse(p.get("condition"))
                except Rejected:
                    continue
                if c not in held and c not in observed:
                    observed.append(c)
    return test, observed[: protocol.observed_conditions]


def _llm_stats(*parts) -> dict[str, dict[str, int]]:
    out = {}
    for part in parts:
        backend = getattr(part, "backend", None)
        if backend is not None:
            s = backend.stats
            out[type(part).__name__] = {
                "requests": s.requests, "cache_hits": s.cache_hits, "retries": s.retries,
                "json_failures": s.json_failures, "unreadable_answers": getattr(part, "failures", 0),
            }  # fmt: skip
    return out


def run_differences(
    generator: ConditionalGenerator,
    model_a: ComparedModel,
    model_b: ComparedModel,
    out_dir: Path,
    explainers: Explainers | None = None,
    methods: list[str] | None = None,
    sampling: SamplingArgs | None = None,
    protocol: ProtocolArgs | None = None,
    optimization: OptimizationArgs | None = None,
    human: str | None = None,
    device: str = "cpu",
    heatmap_grid: bool = True,
    wandb: bool = False,
    quiet: bool = False,
    seed: int = 0,
) -> DifferencesResult | None:
    """Run the explainers and score them; write ``results.json`` and figures under ``out_dir``.

    On several processes (:func:`~nemo_train.sharding.current_ranks`) the first one runs the explainers and
    writes everything; the others only measure their share of each Diff_Model sweep and return ``None``.
    """
    methods = list(methods or ["raw_differences", "summarization", "optimization"])
    sampling, protocol = sampling or SamplingArgs(), protocol or ProtocolArgs()
    optimization = optimization or OptimizationArgs()
    check_ranges(sampling, protocol, optimization, len(generator.grid()))  # before anything is loaded or written
    evaluator, summarizer, explorer = (explainers or Explainers()).resolved()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = _device(device)
    for model in (model_a, model_b):
        model.prepare(out_dir, dev)
    diff_model = DiffModel(
        model_a, model_b, generator, sampling.samples_per_condition, seed, sampling.images_per_batch,
        cache_file=out_dir / "diff_model_cache.json", ranks=current_ranks(),
    )  # fmt: skip
    if not diff_model.ranks.is_main:
        diff_model.serve()
        return None
    try:
        return _explain(
            diff_model, (evaluator, summarizer, explorer), methods, seed, protocol, optimization, human, out_dir,
            heatmap_grid, wandb, quiet,
        )  # fmt: skip
    finally:
        diff_model.stop()  # the other processes return, also when this one fails


def _explain(
    diff_model: DiffModel,
    parts: tuple[Evaluator, Summarizer, Explorer],
    methods: list[str],
    seed: int,
    protocol: ProtocolArgs,
    optimization: OptimizationArgs,
    human: str | None,
    out_dir: Path,
    heatmap_grid: bool,
    wandb: bool,
    quiet: bool,
) -> DifferencesResult:
    """Everything after the models are loaded, on the first process: explainers, scores, figures, ``results.json``."""
    evaluator, summarizer, explorer = parts
    generator = diff_model.generator
    for part in parts:  # language models cache replies under out_dir unless given one
        if getattr(part, "backend", None) is not None:
            part.backend.attach_cache(out_dir / "llm_cache")
    space, task = generator.space, generator.task_description
    for part in parts:
        part.bind(space, task)
    test, observed = _test_and_observed(generator, protocol, explorer, seed)
    test_diffs = diff_model(test)

    def scored(method: str, text: str, seen: int) -> MethodScore:
        s = score(
            evaluator,
            text,
            test,
            test_diffs,
            drop_ratio=protocol.drop_ratio,
            repeats=protocol.density_repeats,
            seed=seed,
        )
        intervals = score_intervals(test_diffs, s.answers, s.dropped)  # over the test conditions
        return MethodScore(method, s.completeness, s.density, s.token_length, seen, text, **intervals)

    rows: list[MethodScore] = []
    if human:
        rows.append(scored("human", human, 0))
    raw_text, observations = raw_differences(diff_model, observed)
    if "raw_differences" in methods:
        rows.append(scored("raw_differences", raw_text, len(observed)))
    result = DifferencesResult(rows, evaluator.label, summarizer.label, explorer.label, len(test))
    if "summarization" in methods:  # a method its language model could not write is stored as failed, not scored
        text = summarization(summarizer, observations, seed)
        if failed := summarization_failure(text, summarizer):
            result.failed["summarization"] = failed
        else:
            rows.append(scored("summarization", text, len(observed)))
    if "optimization" in methods:
        opt = Optimization(
            diff_model, summarizer, explorer, evaluator, optimization, held_out=test, drop_ratio=protocol.drop_ratio,
            seed=seed,
        )  # fmt: skip
        found = opt.run(observed[: optimization.initial_conditions])
        if failed := optimization_failure(found.best.text, summarizer, explorer):
            result.failed["optimization"] = failed
        else:
            rows.append(scored("optimization", found.best.text, len(found.observations)))
        result.history, result.explored, result.rejected = found.history, found.explored, found.rejected
    attributions = {}
    if protocol.attribution_questions > 0:
        questions = test[: protocol.attribution_questions]
        for r in rows:
            if r.method != "raw_differences" and r.explanation:
                attributions[r.method] = attribution(evaluator, r.explanation, questions, test_diffs[: len(questions)])
                r.token_classes = token_classes(attributions[r.method].delta)
        normalise_attributions(list(attributions.values()))
    if attributions:
        result.files["attribution"] = str(attribution_figure(attributions, out_dir / "attribution.png"))
        path, aucs = token_ratio_figure(attributions, out_dir / "effective_ratio.png")
        result.files["ratio_curve"] = str(path)
        for r in rows:
            r.ratio_auc = aucs.get(r.method)
    if isinstance(space, AttributeSpace) and len(space.attributes) >= 2:
        shown = diff_model.observe(generator.grid() if heatmap_grid else test)
        result.files["heatmap"] = str(
            heatmap(shown, space, out_dir / "heatmap.png", f"Diff_Model ({len(shown)} conditions)")
        )
    result.llm = _llm_stats(evaluator, summarizer, explorer)
    evaluator.check_answered()  # an answer that never came is no 0: nothing is saved as a result
    result.failures = part_failures({"summarizer": summarizer, "explorer": explorer})
    result.save(out_dir / "results.json")
    result.files["results"] = str(out_dir / "results.json")
    if not quiet:
        print_result(result, f"Model differences: {type(generator).__name__}")
    if wandb:
        log_wandb(result, attributions, out_dir, out_dir.name)
    check_some_scored(methods, result.failed)  # every method failed: exit non-zero, results.json says why
    return result


def differences_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts a ``differences`` run uses (for its provenance)."""
    parts = {
        "evaluator": "keyword reader of explanations (not a language model)",
        "summarizer": "decision-tree rules (not a language model)",
        "explorer": "neighbourhood sampler (not a language model)",
    }
    return [f"{name}: {what}" for name, what in parts.items() if arguments.get(name) is None]


@run_command("differences", differences_stand_ins)
def differences(
    generator: ConditionalGenerator,
    targets: list[str | ClassifierSpec] | None = None,
    evaluator: Evaluator | None = None,
    summarizer: Summarizer | None = None,
    explorer: Explorer | None = None,
    methods: list[Method] | None = None,
    sampling: SamplingArgs = SamplingArgs(),
    protocol: ProtocolArgs = ProtocolArgs(),
    optimization: OptimizationArgs = OptimizationArgs(),
    human: str | None = None,
    out_dir: OutDir = "checkpoints/differences",
    device: Device = "auto",
    heatmap_grid: bool = True,
    wandb: bool = False,
    seed: Seed = 0,
    devices: int = 1,
    num_nodes: int = 1,
    strategy: Strategy = "auto",
) -> DifferencesResult | None:
    """Explain how two vision models differ (Raw Differences, Summarization, Optimization) and score it.

    Args:
        generator: conditional generator (CMNIST, CLEVR, or a text-to-image model).
        targets: the two compared models, Model A then Model B: ``nemo-train fit`` checkpoints (named by their
            experiment folder; a missing file is an error naming the command that trains it) or other classifier
            specs (:mod:`nemo_train.models.specs`: ``TimmModel``, ``ZeroShotModel`` with one prompt per class).
        evaluator: evaluator of explanations; default: the keyword reader (closed-vocabulary stand-in).
        summarizer: Summarization / update step; default: decision-tree rules (stand-in, not an LLM).
        explorer: exploration step; default: neighbourhood sampler (stand-in, not an LLM).
        methods: explainers to run (default all three).
        sampling: Diff_Model sampling settings.
        protocol: observed and test conditions, Density and attribution settings.
        optimization: Optimization settings (T, conditions per round, n candidates).
        human: a user-written explanation to score the same way (row "Human").
        heatmap_grid: measure every condition of a finite grid for the heat map (else the test set).

    Writes ``results.json``, the figures and the Diff_Model cache under ``out_dir``; with ``wandb`` the tables and
    figures are logged too (``seed`` draws the images and the conditions).

    With ``devices`` > 1 (or several nodes) the processes split every Diff_Model sweep (test and observed
    conditions, explored conditions, the heat-map grid) condition by condition; process 0 runs the explainers and
    writes everything a one-process run writes, with the same numbers (the others return ``None``).
    """
    model_a, model_b = model_pair(targets)  # checked before anything is written
    explainers = Explainers(evaluator, summarizer, explorer)
    return run_differences(
        generator, model_a, model_b, Path(out_dir), explainers, methods, sampling, protocol, optimization, human,
        device, heatmap_grid, wandb, seed=seed,
    )  # fmt: skip
