"""Image-explanation pairs of the six causes whose counterfactual a generator made (competency-counterfactuals
paper, Sec. 4 and App. C).

:func:`build_explanation_pairs` draws one six-cause set of low-competency images (the estimator keeps only
corrupted images below its threshold, as in the paper), splits it per cause into fine-tuning and evaluation
images, runs every counterfactual generator (IGD, FGD, Reco, LGD, LNN) on all of them and writes one pair file
per condition and split: ``None`` (no counterfactual) and one per generator, whose every counterfactual is the
image that generator made, never the clean original. The explanation of a pair is a reference sentence of its
cause (:data:`nemo_train.vocabulary.EXPLANATIONS`, or the cause's value in the applied direction), as the paper
assigns "The original image is over-saturated." to its fine-tuning images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch

from datamodules.explanations import ExplanationRecord, to_pil, write_records
from datamodules.six_cause_facts import CAUSE_VALUES
from datamodules.six_causes import CAUSES, DEFAULT_DIRECTIONS, SixCausesDataModule, check_directions
from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import CounterfactualGenerator
from nemo_train.competency.gradient_counterfactuals import ImageGradientDescent
from nemo_train.competency.parce import PaRCE
from nemo_train.competency.pipeline import (
    _accelerator,
    _checked_autoencoder,
    _checkpoint_path,
    _estimator,
    _prepared_data,
)
from nemo_train.competency.settings import DirectedCause, Direction, EstimatorArgs, TrainArgs
from nemo_train.errors import UserInputError
from nemo_train.models.classifier import ClassifierModule
from nemo_train.models.loading import load_classifier
from nemo_train.models.specs import ClassifierSpec
from nemo_train.quiet import progress_bar
from nemo_train.vocabulary import EXPLANATIONS

#: The condition without a counterfactual image (the paper's row "None").
NO_COUNTERFACTUAL = "None"
SPLITS = ("train", "eval")


@dataclass
class PairArgs:
    """The six-cause images of the explanation experiment.

    Args:
        train_per_cause: fine-tuning images per cause (the paper: 500).
        eval_per_cause: evaluation images per cause (the paper: 100), never used for fine-tuning.
        severity: range ``(low, high)`` of cause severities, within (0, 1].
        directions: ``up`` / ``down`` for brightness, contrast or saturation where the default (brightness up,
            contrast down, saturation down) should not be used.
    """

    train_per_cause: int = 40
    eval_per_cause: int = 20
    severity: tuple[float, float] = (0.5, 1.0)
    directions: dict[DirectedCause, Direction] | None = None

    def __post_init__(self) -> None:
        if self.train_per_cause < 1 or self.eval_per_cause < 1:
            raise UserInputError(
                f"train_per_cause={self.train_per_cause}, eval_per_cause={self.eval_per_cause}; expected at least 1"
            )
        low, high = self.severity
        if not 0.0 < low <= high <= 1.0:
            raise UserInputError(f"pairs.severity={list(self.severity)}; expected 0 < low <= high <= 1")


@dataclass
class ExplanationPairs:
    """What :func:`build_explanation_pairs` wrote: ``files[condition][split]`` (``train`` / ``eval`` JSONL),
    the images per cause of each split (``counts``), each generator's success rate on the evaluation images
    (the share of counterfactuals reaching the competency threshold) and the direction of every cause."""

    root: Path
    files: dict[str, dict[str, Path]]
    counts: dict[str, dict[str, int]]
    success: dict[str, float] = field(default_factory=dict)
    directions: dict[str, str | None] = field(default_factory=dict)

    @property
    def conditions(self) -> list[str]:
        return list(self.files)


def loaded_classifier(classifier: str | ClassifierSpec) -> tuple[str, ClassifierModule]:
    """``(checkpoint path, module)`` of a ``nemo-train fit`` checkpoint: a missing, damaged or folder path is a
    one-line error naming the command that writes it (before anything else is built)."""
    checkpoint = _checkpoint_path(classifier)
    return checkpoint, load_classifier(checkpoint)


def prepared_estimator(
    classifier: tuple[str, ClassifierModule],
    datamodule: L.LightningDataModule | None,
    autoencoder: CompetencyAutoencoder | None,
    estimator: EstimatorArgs,
    train: TrainArgs,
    device: str,
    out: Path,
    seed: int,
) -> tuple[PaRCE, L.LightningDataModule]:
    """PaRCE over the loaded classifier (:func:`loaded_classifier`) and its prepared training data, as the
    ``counterfactuals`` command builds them: the saved estimator in ``estimator.dir`` (default ``<out>/parce``)
    when it was calibrated with these settings, else an autoencoder trained and calibrated now (recorded beside
    it)."""
    accelerator, torch_device = _accelerator(device)
    checkpoint, classifier_module = classifier
    L.seed_everything(seed, verbose=False)
    datamodule = _prepared_data(datamodule, seed)
    autoencoder = _checked_autoencoder(autoencoder, datamodule, classifier_module, checkpoint)
    L.seed_everything(seed, verbose=False)
    autoencoder.reset_parameters()
    parce_dir = Path(estimator.dir) if estimator.dir else Path(out) / "parce"
    run_info = {
        "classifier": str(checkpoint),
        "estimator_dir": str(parce_dir),
        "seed": seed,
        "datamodule": {
            "class_path": f"{type(datamodule).__module__}.{type(datamodule).__name__}",
            "init_args": dict(datamodule.hparams),
        },
    }
    parce = _estimator(classifier_module, datamodule, autoencoder, estimator, train, accelerator, Path(out), run_info)
    parce = parce.to(torch_device).eval()
    parce.threshold = estimator.threshold
    return parce, datamodule


def reference_explanation(cause: str, direction: str | None, generator: torch.Generator) -> str:
    """A reference sentence of ``cause``: one of :data:`EXPLANATIONS` (written for the default directions),
    else the cause's value in ``direction`` (``The image is dark.``)."""
    if direction is None or direction == DEFAULT_DIRECTIONS.get(cause):
        variants = EXPLANATIONS[cause]
        return variants[int(torch.randint(len(variants), (1,), generator=generator))]
    return f"The image is {CAUSE_VALUES[cause][direction]}."


def split_per_cause(causes: torch.Tensor, eval_per_cause: int) -> list[str]:
    """``eval`` for the first ``eval_per_cause`` images of each cause (in set order), ``train`` for the rest."""
    seen: dict[int, int] = {}
    out = []
    for cause in causes.tolist():
        seen[cause] = seen.get(cause, 0) + 1
        out.append("eval" if seen[cause] <= eval_per_cause else "train")
    return out


def generated_counterfactuals(
    generator: CounterfactualGenerator, images: torch.Tensor, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counterfactuals, success)`` of ``generator`` over ``images`` (CPU tensors), in batches."""
    device = generator.estimator.class_means.device
    made, success = [], []
    bar = progress_bar(total=len(images), desc=generator.name, unit="img", leave=False)
    for chunk in images.split(batch_size):
        result = generator(chunk.to(device))
        made.append(result.images.detach().cpu())
        success.append(result.success.detach().cpu())
        bar.update(len(chunk))
    bar.close()
    return torch.cat(made), torch.cat(success)


def build_explanation_pairs(
    estimator: PaRCE,
    datamodule: L.LightningDataModule,
    methods: list[CounterfactualGenerator],
    pairs: PairArgs,
    out_dir: str | Path,
    seed: int = 0,
    batch_size: int = 64,
    alexnet_weights: str | None = None,
) -> ExplanationPairs:
    """Write ``<out_dir>/images/*.png`` and ``<out_dir>/<condition>_<split>.jsonl`` for the condition ``None``
    and every generator of ``methods`` (fitted here on the estimator's held-out images)."""
    root = Path(out_dir)
    images_dir = root / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(seed, verbose=False)
    holdout = estimator.collect(datamodule.val_dataloader())
    six = SixCausesDataModule(
        datamodule,
        competency=estimator,
        threshold=estimator.threshold,
        per_cause=pairs.train_per_cause + pairs.eval_per_cause,
        severity_range=tuple(pairs.severity),
        directions=pairs.directions,
        seed=seed,
    )
    six.setup()
    data = six.dataset
    splits = split_per_cause(data.causes, pairs.eval_per_cause)
    counts = {s: {c: sum(1 for k, sp in zip(data.causes.tolist(), splits) if sp == s and k == i)
                  for i, c in enumerate(CAUSES)} for s in SPLITS}  # fmt: skip
    if not counts["train"] or not any(counts["train"].values()):
        raise UserInputError("no fine-tuning image is left after the evaluation images; raise pairs.train_per_cause")
    directions = check_directions(pairs.directions)
    originals = [_save_png(image, images_dir / f"{i:05d}.png") for i, image in enumerate(data.images)]
    made: dict[str, list[str | None]] = {NO_COUNTERFACTUAL: [None] * len(originals)}
    success: dict[str, float] = {}
    is_eval = torch.tensor([s == "eval" for s in splits])
    for generator in methods:
        if isinstance(generator, ImageGradientDescent) and generator.alexnet_weights is None:
            generator.alexnet_weights = alexnet_weights
        generator.bind(estimator).fit(holdout["image"])
        images, reached = generated_counterfactuals(generator, data.images, batch_size)
        success[generator.name] = float(reached[is_eval].float().mean()) if is_eval.any() else float("nan")
        made[generator.name] = [
            _save_png(image, images_dir / f"{i:05d}_{generator.name}.png") for i, image in enumerate(images)
        ]
    explanations = _explanations(data.causes.tolist(), directions, seed)
    files: dict[str, dict[str, Path]] = {}
    for condition, counterfactuals in made.items():
        records = {s: [] for s in SPLITS}
        for i, (image, cf) in enumerate(zip(originals, counterfactuals)):
            cause = CAUSES[int(data.causes[i])]
            records[splits[i]].append(
                ExplanationRecord(
                    image=image, counterfactual=cf, explanation=explanations[i], cause=cause, label=int(data.labels[i])
                )
            )
        files[condition] = {s: write_records(records[s], root / f"{condition}_{s}.jsonl") for s in SPLITS}
    return ExplanationPairs(root, files, counts, success, directions)


def _explanations(causes: list[int], directions: dict[str, str | None], seed: int) -> list[str]:
    generator = torch.Generator().manual_seed(seed + 1)
    return [reference_explanation(CAUSES[c], directions[CAUSES[c]], generator) for c in causes]


def _save_png(image: torch.Tensor, path: Path) -> str:
    to_pil(image).save(path)
    return str(path.resolve())
