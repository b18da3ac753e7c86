"""The ``counterfactuals`` pipeline: estimator, six-cause set, the counterfactual methods, Table 1.

Plain Python usable without the CLI: :func:`run_counterfactuals` evaluates every method against a ready
estimator and writes its results; :func:`counterfactuals` (the command line) prepares the data, the
classifier and the estimator first (see :mod:`nemo_train.competency.estimator`). Both return a
:class:`~nemo_train.competency.settings.CounterfactualRun`.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import lightning as L
import torch
from torchvision.utils import make_grid, save_image

from datamodules.cmnist import CMNISTDataModule
from datamodules.six_causes import CAUSES, SixCausesDataModule, check_directions
from nemo_train.artefacts import as_json, record_artefact, recorded_settings, reuse_artefact, source_identity
from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import CounterfactualGenerator
from nemo_train.competency.estimator import prepare_estimator
from nemo_train.competency.evaluation import CounterfactualEvaluator, format_table, print_counterfactual_table
from nemo_train.competency.gradient_counterfactuals import ImageGradientDescent, paper_methods
from nemo_train.competency.parce import PaRCE, reliability
from nemo_train.competency.settings import (
    Calibration,
    CauseArgs,
    CounterfactualRun,
    EstimatorArgs,
    EvalArgs,
    TrainArgs,
)
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.metrics.perceptual import perceptual_distance
from nemo_train.models.loading import load_classifier
from nemo_train.models.specs import ClassifierSpec, FitCheckpoint, as_classifier
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.store import changed_settings, save_figure, write_bytes_atomic


def _accelerator(device: str) -> tuple[str, torch.device]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("device='cuda' but no CUDA device is available")
    return ("gpu" if device == "cuda" else "cpu"), torch.device(device)


def _method_names(methods: list[CounterfactualGenerator]) -> list[str]:
    names = [m.name for m in methods]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserInputError(f"methods lists {repeated} more than once; each method names one row of the table")
    return names


def _calibration(estimator: PaRCE, holdout: dict, out_dir: Path) -> Calibration:
    device = estimator.class_means.device
    with torch.no_grad():
        scores = torch.cat([estimator(c.to(device)).cpu() for c in holdout["image"].split(256)])
    correct = holdout["probs"].argmax(-1) == holdout["label"]
    calib = reliability(scores, correct)
    save_figure(calib.figure(), out_dir / "reliability.png", dpi=100)
    return Calibration(
        holdout_accuracy=float(correct.float().mean()),
        holdout_mean_score=float(scores.mean()),
        zscore=float(estimator.zscore),
        bins={
            "mean_score": calib.mean_score.tolist(),
            "accuracy": calib.accuracy.tolist(),
            "count": calib.count.tolist(),
        },
    )


def run_counterfactuals(
    estimator: PaRCE,
    datamodule: L.LightningDataModule,
    out_dir: Path,
    methods: list[CounterfactualGenerator],
    causes: CauseArgs,
    evaluation: EvalArgs,
    seed: int = 0,
    run_info: dict | None = None,
) -> CounterfactualRun:
    """Build the six-cause set, run each method, write ``table.txt``, ``results.json``, ``grid.png`` and
    ``reliability.png``. ``results.json`` also records ``run_info`` (e.g. which classifier checkpoint was
    used) and every method's options."""
    _method_names(methods)
    out_dir.mkdir(parents=True, exist_ok=True)
    # what follows draws from the global generators (methods' fitting, KID's subsets): seed them here, so a
    # rerun that reuses the saved estimator (nothing trained before this point) draws what a fresh run draws
    L.seed_everything(seed, verbose=False)
    device = estimator.class_means.device
    holdout = estimator.collect(datamodule.val_dataloader())
    calibration = _calibration(estimator, holdout, out_dir)
    six = SixCausesDataModule(
        datamodule,
        competency=estimator,
        threshold=estimator.threshold,
        per_cause=causes.per_cause,
        severity_range=tuple(causes.severity),
        directions=causes.directions,
        seed=seed,
    )
    six.setup()
    data = six.dataset
    short = {name: n for name, n in six.counts().items() if n < causes.per_cause}
    if short:
        warnings.warn(
            f"fewer than {causes.per_cause} low-competency images for {short}: at the drawn severities most of these "
            "corruptions leave the estimator's score at or above the threshold. Try another direction "
            "(causes.directions) or a higher severity.",
            stacklevel=2,
        )
    with torch.no_grad():
        clean = torch.cat([estimator(c.to(device)).cpu() for c in data.clean.split(256)])
        corrupted = torch.cat([estimator(c.to(device)).cpu() for c in data.images.split(256)])
    cause_scores = {"clean": float(clean.mean())}
    for index, name in enumerate(CAUSES):
        mask = data.causes == index
        cause_scores[name] = float(corrupted[mask].mean()) if mask.any() else math.nan
    cause_scores["counts"] = six.counts()

    evaluator = CounterfactualEvaluator(
        estimator, holdout["image"], perceptual_distance(evaluation.alexnet_weights), evaluation.inception_weights
    )
    rows, grids = {}, {}
    rows["Orig"], _ = evaluator.evaluate(None, data.images, evaluation.batch_size)
    rows["Orig"].update(evaluator.intervals())  # <metric>_ci_low / _ci_high beside each per-image mean
    for generator in methods:
        if isinstance(generator, ImageGradientDescent) and generator.alexnet_weights is None:
            generator.alexnet_weights = evaluation.alexnet_weights
        generator.bind(estimator).fit(holdout["image"])
        rows[generator.name], grids[generator.name] = evaluator.evaluate(
            generator, data.images, evaluation.batch_size, progress=generator.name
        )
        rows[generator.name].update(evaluator.intervals())
    files = {
        "table": out_dir / "table.txt",
        "results": out_dir / "results.json",
        "grid": out_dir / "grid.png",
        "reliability": out_dir / "reliability.png",
    }
    write_bytes_atomic(files["table"], format_table(rows).encode("utf-8"))  # a kill leaves the old file or the new
    results = {
        "calibration": vars(calibration),
        "causes": cause_scores,
        "table": rows,
        "generator_options": {g.name: {"class_path": g.class_path(), "init_args": g.options()} for g in methods},
        "run": dict(run_info or {}),
    }
    write_bytes_atomic(files["results"], json.dumps(results, indent=2, default=float).encode("utf-8"))
    save_grid(data.images, grids, data.causes, files["grid"])
    return CounterfactualRun(out_dir, rows, calibration, cause_scores, files)


def save_grid(
    originals: torch.Tensor,
    counterfactuals: dict[str, torch.Tensor],
    causes: torch.Tensor,
    path: Path,
    per_cause: int = 1,
) -> torch.Tensor:
    """Save (and return) an image grid: one row per example (one per cause), columns original | each method."""
    rows = []
    for index in range(len(CAUSES)):
        picks = torch.nonzero(causes == index).flatten()[:per_cause]
        for i in picks.tolist():
            rows.append(torch.stack([originals[i]] + [images[i] for images in counterfactuals.values()]))
    if not rows:
        return torch.zeros(3, 1, 1)
    grid = make_grid(torch.cat(rows), nrow=1 + len(counterfactuals), padding=2, pad_value=1.0)
    save_image(grid, str(path))
    return grid


def saved_estimator_matches(parce_dir: Path, out: Path, settings: dict) -> bool:
    """Whether the estimator saved in ``parce_dir`` was calibrated with ``settings`` (the classifier's digest, the
    data, the autoencoder): one inside ``out`` calibrated otherwise is removed (so it is calibrated again); a
    folder given elsewhere is the user's input, never removed: one recorded with other settings is an error."""
    meta = parce_dir / "parce.json"
    if Path(parce_dir).resolve().is_relative_to(out.resolve()):
        return reuse_artefact(meta, settings, "PaRCE estimator", parce_dir / "parce.safetensors")
    recorded = recorded_settings(meta)
    if recorded is not None and recorded != as_json(settings):
        changed = ", ".join(changed_settings(recorded, as_json(settings)))
        raise UserInputError(
            f"the estimator in {str(parce_dir)!r} was calibrated with other settings ({changed}); "
            "leave estimator.dir unset to calibrate one in out_dir, or pass the matching classifier"
        )
    return meta.is_file()


def print_run(run: CounterfactualRun) -> None:
    """Print a run's calibration, the competency of each cause and Table 1."""
    cal = run.calibration
    print(
        f"PaRCE calibration: held-out accuracy {cal.holdout_accuracy:.4f}, mean score {cal.holdout_mean_score:.4f} "
        f"(z = {cal.zscore:.2f})"
    )
    counts = run.causes["counts"]
    print_table(
        ["images", "mean competency", "count"],
        [[name, value, counts.get(name, "")] for name, value in run.causes.items() if name != "counts"],
        title="Competency of the clean images and of each cause",
    )
    print_counterfactual_table(run.table, title="Counterfactual methods (Table 1 layout)")
    print(f"written to {run.out_dir}")


def counterfactual_stand_ins(arguments: dict) -> list[str]:
    """The substitutes a ``counterfactuals`` run may use for metric networks (for its provenance)."""
    evaluation = arguments.get("evaluation") or EvalArgs()
    named = []
    if evaluation.inception_weights is None:
        named.append("FID / KID: the classifier's feature space unless torch-fidelity's Inception weights are cached")
    if evaluation.alexnet_weights is None:
        named.append("LPIPS: 1-SSIM unless AlexNet weights are in the torch hub cache (the metric's name says which)")
    return named


def _checkpoint_path(classifier: str | ClassifierSpec) -> str:
    """The checkpoint path of ``--classifier``; a spec other than a ``fit`` checkpoint is a one-line error."""
    spec = as_classifier(classifier)
    if not isinstance(spec, FitCheckpoint):
        raise UserInputError(
            f"counterfactuals needs a `nemo-train fit` checkpoint as --classifier, not {type(spec).__name__} "
            f"{spec.label!r}: PaRCE differentiates through the classifier's features"
        )
    return spec.path


@run_command("counterfactuals", counterfactual_stand_ins)
def counterfactuals(
    classifier: str | ClassifierSpec = "checkpoints/cmnist_model_a/checkpoints/best.ckpt",
    datamodule: L.LightningDataModule | None = None,
    autoencoder: CompetencyAutoencoder | None = None,
    methods: list[CounterfactualGenerator] | None = None,
    estimator: EstimatorArgs = EstimatorArgs(),
    causes: CauseArgs = CauseArgs(),
    train: TrainArgs = TrainArgs(),
    evaluation: EvalArgs = EvalArgs(),
    out_dir: OutDir = "checkpoints/counterfactuals",
    device: Device = "auto",
    channels_last: bool = True,
    seed: Seed = 0,
    wandb: bool = False,
) -> CounterfactualRun:
    """Run counterfactual methods (IGD, FGD, Reco, LGD, LNN) on a six-cause set and print Table 1.

    Args:
        classifier: the ``ClassifierModule`` checkpoint of ``nemo-train fit`` to explain (default: CMNIST Model A
            of ``configs/cmnist/model_a.yaml``), as a path or a ``FitCheckpoint`` spec; a missing file is an error
            naming the command that trains it. PaRCE differentiates through the classifier's features, so other
            specs (published or zero-shot models) are refused.
        datamodule: the classifier's training data (default: embedded CMNIST, Model-A bias).
        autoencoder: the competency autoencoder to train (default: one sized for the data's images).
        methods: the counterfactual generators, each by ``class_path`` / ``init_args`` (default: the five
            methods with the paper's settings).
        estimator: autoencoder checkpoint, saved-estimator folder, threshold, loss scale.
        causes: images per cause, severity range and directions of the six-cause set.
        train: epochs of the competency autoencoder when no saved one is given.
        evaluation: generator batch size and the LPIPS / Inception weight files.
        channels_last: keep the convolution weights of the classifier and autoencoder channels-last (NHWC)
            while generating; same values, faster convolutions (see ``scripts/bench_counterfactuals.py``).

    Writes ``table.txt``, ``results.json``, ``grid.png``, ``reliability.png`` (and, unless set elsewhere, the
    estimator) under ``out_dir``; ``seed`` also seeds training and the six-cause set.
    """
    methods = list(methods) if methods is not None else paper_methods()
    _method_names(methods)
    directions = check_directions(causes.directions)
    accelerator, torch_device = _accelerator(device)
    classifier = _checkpoint_path(classifier)
    classifier_module = load_classifier(classifier)  # before any data is built: a missing file fails at once
    L.seed_everything(seed, verbose=False)
    datamodule = _prepared_data(datamodule, seed)
    autoencoder = _checked_autoencoder(autoencoder, datamodule, classifier_module, classifier)
    # The autoencoder's initial weights and training order follow the seed (the config parser builds the
    # autoencoder before any seed is set).
    L.seed_everything(seed, verbose=False)
    autoencoder.reset_parameters()
    out = Path(out_dir)
    parce_dir = Path(estimator.dir) if estimator.dir else out / "parce"
    run_info = {
        "classifier": str(classifier),
        "estimator_dir": str(parce_dir),
        "seed": seed,
        "datamodule": {
            "class_path": f"{type(datamodule).__module__}.{type(datamodule).__name__}",
            "init_args": dict(datamodule.hparams),
        },
        "cause_directions": {k: v for k, v in directions.items() if v is not None},
        "channels_last": channels_last,
    }
    parce = _estimator(classifier_module, datamodule, autoencoder, estimator, train, accelerator, out, run_info)
    parce = parce.to(torch_device).eval()
    if channels_last:
        parce = parce.to(memory_format=torch.channels_last)
    parce.threshold = estimator.threshold
    run = run_counterfactuals(parce, datamodule, out, methods, causes, evaluation, seed, run_info)
    run.files["estimator"] = parce_dir
    run.files["classifier"] = Path(classifier)
    print_run(run)
    return run


def _prepared_data(datamodule: L.LightningDataModule | None, seed: int) -> L.LightningDataModule:
    """The classifier's training data, set up for fit and test (default: embedded CMNIST, Model-A bias)."""
    if datamodule is None:
        datamodule = CMNISTDataModule(bias="model_a", train_size=3000, test_styles=1, batch_size=64, seed=seed)
    datamodule.setup("fit")
    datamodule.setup("test")
    return datamodule


def _checked_autoencoder(autoencoder, datamodule, classifier_module, classifier: str) -> CompetencyAutoencoder:
    """The autoencoder to train (default: one sized for the data's images); one-line errors when the
    autoencoder or the classifier does not fit the data."""
    image_size = int(datamodule.train_set[0]["image"].shape[-1])
    autoencoder = autoencoder or CompetencyAutoencoder(image_size=image_size)
    if autoencoder.hparams.image_size != image_size:
        raise UserInputError(
            f"autoencoder.image_size={autoencoder.hparams.image_size} but the datamodule's images are {image_size} px"
        )
    if classifier_module.hparams.num_classes != datamodule.num_classes:
        raise UserInputError(
            f"classifier {classifier!r} has {classifier_module.hparams.num_classes} classes but the datamodule has "
            f"{datamodule.num_classes}; pass the classifier trained on this data"
        )
    return autoencoder


def _estimator(classifier_module, datamodule, autoencoder, estimator: EstimatorArgs, train: TrainArgs,
               accelerator: str, out: Path, run_info: dict) -> PaRCE:  # fmt: skip
    """PaRCE over the classifier: the saved estimator when it was calibrated with these settings, else trained
    and calibrated now and recorded with its settings beside it."""
    parce_dir = Path(run_info["estimator_dir"])
    settings = {
        "classifier": source_identity(run_info["classifier"]),
        "datamodule": run_info["datamodule"],
        "autoencoder": dict(autoencoder.hparams),
        "autoencoder_checkpoint": source_identity(estimator.autoencoder_checkpoint)
        if estimator.autoencoder_checkpoint
        else None,
        "autoencoder_epochs": train.autoencoder_epochs,
        "threshold": estimator.threshold,
        "loss_scale": estimator.loss_scale,
        "seed": run_info["seed"],
    }
    calibrate = not saved_estimator_matches(parce_dir, out, settings)
    parce = prepare_estimator(
        classifier_module,
        datamodule,
        autoencoder,
        train.autoencoder_epochs,
        estimator.threshold,
        accelerator,
        parce_dir,
        estimator.autoencoder_checkpoint,
        estimator.loss_scale,
    )
    if calibrate:  # written just now: record what it was calibrated with, beside it
        record_artefact(parce_dir / "parce.json", settings)
    return parce
