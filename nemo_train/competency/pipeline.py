"""The ``counterfactuals`` pipeline: estimator, six-cause set, five methods, Table 1 (paper 004, Sec. 3.2).

Plain Python usable without the CLI: :func:`prepare_estimator` trains (or loads) the competency
autoencoder and calibrates PaRCE, :func:`run_counterfactuals` evaluates every method and writes its
results; :func:`counterfactuals` is the command-line entry point and :func:`demo_step` the demo step.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import lightning as L
import torch
from tqdm.auto import tqdm

from datamodules.six_causes import CAUSES, SixCausesDataModule, check_directions
from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import METHODS, OBJECTIVES, STOPPING_RULES, build_generator
from nemo_train.competency.evaluation import CounterfactualEvaluator, format_table
from nemo_train.competency.parce import PaRCE, check_threshold, reliability
from nemo_train.errors import UserInputError


def _trainer(epochs: int, accelerator: str, out_dir: Path | None = None) -> L.Trainer:
    return L.Trainer(
        max_epochs=epochs,
        accelerator=accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        default_root_dir=str(out_dir) if out_dir else None,
        num_sanity_val_steps=0,
    )


def _accelerator(device: str) -> tuple[str, torch.device]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise UserInputError(f"device={device!r}; expected 'auto', 'cpu' or 'cuda'")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("device='cuda' but no CUDA device is available")
    return ("gpu" if device == "cuda" else "cpu"), torch.device(device)


def load_or_train_classifier(
    datamodule: L.LightningDataModule,
    checkpoint: str | None,
    epochs: int,
    accelerator: str,
    save_to: Path | None = None,
):
    """A :class:`ClassifierModule` from ``checkpoint``; without one, the one saved at ``save_to`` by an earlier
    run, else a ``bias_cnn`` trained for ``epochs`` on ``datamodule`` (and saved to ``save_to``)."""
    from nemo_train.models import ClassifierModule

    if not checkpoint and save_to is not None and save_to.is_file():
        checkpoint = str(save_to)
    if checkpoint:
        if not Path(checkpoint).is_file():
            raise UserInputError(
                f"classifier checkpoint {checkpoint!r} does not exist; train it first (e.g. `nemo-train fit --config "
                "configs/cmnist/model_a.yaml`) or set classifier_checkpoint to null to train a small bias_cnn here"
            )
        return ClassifierModule.load_from_checkpoint(checkpoint, map_location="cpu", weights_only=True).eval()
    module = ClassifierModule(backbone="bias_cnn", num_classes=datamodule.num_classes, lr=3e-3)
    trainer = _trainer(epochs, accelerator)
    trainer.fit(module, datamodule)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(str(save_to), weights_only=True)
    return module.eval()


def load_run(run_dir: str | Path) -> tuple[PaRCE, L.LightningDataModule, dict]:
    """The PaRCE estimator (bound to its classifier), the datamodule and the ``results.json`` contents of an
    earlier :func:`counterfactuals` run in ``run_dir``, rebuilt from the run record it wrote."""
    from lightning.pytorch.cli import instantiate_class

    from nemo_train.models import ClassifierModule

    results_file = Path(run_dir) / "results.json"
    if not results_file.is_file():
        raise UserInputError(
            f"no results.json in {str(run_dir)!r}; run `nemo-train counterfactuals` with that out_dir first"
        )
    results = json.loads(results_file.read_text())
    run = results.get("run", {})
    if "datamodule" not in run:
        raise UserInputError(f"{results_file} records no datamodule; rerun `nemo-train counterfactuals` to record one")
    classifier_path = run["classifier_checkpoint"]
    if not Path(classifier_path).is_file():
        raise UserInputError(f"the run's classifier checkpoint {classifier_path!r} does not exist")
    classifier = ClassifierModule.load_from_checkpoint(classifier_path, map_location="cpu", weights_only=True).eval()
    estimator = PaRCE.load(Path(run["estimator_dir"]), classifier).eval()
    return estimator, instantiate_class((), run["datamodule"]), results


def prepare_estimator(
    classifier: torch.nn.Module,
    datamodule: L.LightningDataModule,
    autoencoder: CompetencyAutoencoder,
    epochs: int,
    threshold: float,
    accelerator: str,
    estimator_dir: Path | None = None,
    autoencoder_checkpoint: str | None = None,
) -> PaRCE:
    """Load a saved estimator from ``estimator_dir`` if there is one, else calibrate PaRCE on the
    datamodule's validation split and save it there. The autoencoder is loaded from
    ``autoencoder_checkpoint`` (a ``nemo-train fit`` checkpoint of :class:`CompetencyAutoencoder`) when
    given, else ``autoencoder`` is trained on the training split for ``epochs``."""
    if estimator_dir is not None and (estimator_dir / "parce.json").is_file():
        return PaRCE.load(estimator_dir, classifier)
    if autoencoder_checkpoint:
        if not Path(autoencoder_checkpoint).is_file():
            raise UserInputError(f"autoencoder checkpoint {autoencoder_checkpoint!r} does not exist")
        autoencoder = CompetencyAutoencoder.load_from_checkpoint(
            autoencoder_checkpoint, map_location="cpu", weights_only=True
        )
    else:
        _trainer(epochs, accelerator).fit(autoencoder, datamodule)
    estimator = PaRCE(classifier, autoencoder.eval(), datamodule.num_classes, threshold=threshold)
    estimator.fit(datamodule.val_dataloader(), progress=True)
    if estimator_dir is not None:
        estimator.save(estimator_dir)
    return estimator


def run_counterfactuals(
    estimator: PaRCE,
    datamodule: L.LightningDataModule,
    out_dir: Path,
    methods: list[str],
    per_cause: int,
    severity: tuple[float, float],
    generator_options: dict,
    batch_size: int,
    alexnet_weights: str | None = None,
    inception_weights: str | None = None,
    seed: int = 0,
    run_info: dict | None = None,
    cause_directions: dict[str, str] | None = None,
) -> dict:
    """Build the six-cause set, run each method, write ``table.txt``, ``results.json``, ``grid.png``,
    ``reliability.png``; return the results dict (``calibration``, ``causes``, ``table``, ``generator_options``
    and ``run``, the ``run_info`` given: e.g. which classifier checkpoint was used)."""
    from nemo_train.competency.perceptual import perceptual_distance

    out_dir.mkdir(parents=True, exist_ok=True)
    device = estimator.class_means.device
    holdout = estimator.collect(datamodule.val_dataloader())
    with torch.no_grad():
        holdout_scores = torch.cat([estimator(c.to(device)).cpu() for c in holdout["image"].split(256)])
    correct = holdout["probs"].argmax(-1) == holdout["label"]
    calib = reliability(holdout_scores, correct)
    fig = calib.figure()
    fig.savefig(out_dir / "reliability.png", dpi=100)
    calibration = {
        "holdout_accuracy": float(correct.float().mean()),
        "holdout_mean_score": float(holdout_scores.mean()),
        "zscore": float(estimator.zscore),
        "bins": {
            "mean_score": calib.mean_score.tolist(),
            "accuracy": calib.accuracy.tolist(),
            "count": calib.count.tolist(),
        },
    }
    six = SixCausesDataModule(
        datamodule,
        competency=estimator,
        threshold=estimator.threshold,
        per_cause=per_cause,
        severity_range=severity,
        directions=cause_directions,
        seed=seed,
    )
    six.setup()
    data = six.dataset
    short = {name: n for name, n in six.counts().items() if n < per_cause}
    if short:
        print(
            f"warning: fewer than {per_cause} low-competency images for {short}: at the drawn severities most of these "
            "corruptions leave the estimator's score at or above the threshold. Try another direction "
            "(cause_directions) or a higher severity."
        )
    with torch.no_grad():
        clean = torch.cat([estimator(c.to(device)).cpu() for c in data.clean.split(256)])
        corrupted = torch.cat([estimator(c.to(device)).cpu() for c in data.images.split(256)])
    causes = {"clean": float(clean.mean())}
    for index, name in enumerate(CAUSES):
        mask = data.causes == index
        causes[name] = float(corrupted[mask].mean()) if mask.any() else math.nan
    causes["counts"] = six.counts()

    evaluator = CounterfactualEvaluator(
        estimator, holdout["image"], perceptual_distance(alexnet_weights), inception_weights
    )
    rows, grids = {}, {}
    rows["Orig"], _ = evaluator.evaluate(None, data.images, batch_size)
    for name in tqdm(methods, desc="counterfactual methods"):
        options = dict(generator_options.get(name, {}))
        if name == "IGD":
            options.setdefault("alexnet_weights", alexnet_weights)
        generator = build_generator(name, estimator, **options)
        if name == "LNN":
            generator.fit(holdout["image"])
        rows[name], images = evaluator.evaluate(generator, data.images, batch_size, progress=name)
        grids[name] = images
    table = format_table(rows)
    (out_dir / "table.txt").write_text(table + "\n")
    results = {
        "calibration": calibration,
        "causes": causes,
        "table": rows,
        "generator_options": generator_options,
        "run": dict(run_info or {}),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=float))
    save_grid(data.images, grids, data.causes, out_dir / "grid.png")
    return results


def save_grid(
    originals: torch.Tensor,
    counterfactuals: dict[str, torch.Tensor],
    causes: torch.Tensor,
    path: Path,
    per_cause: int = 1,
) -> torch.Tensor:
    """Save (and return) an image grid: one row per example (one per cause), columns original | each method."""
    from torchvision.utils import make_grid, save_image

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


def counterfactuals(
    datamodule: L.LightningDataModule | None = None,
    classifier_checkpoint: str | None = None,
    autoencoder: CompetencyAutoencoder | None = None,
    autoencoder_checkpoint: str | None = None,
    estimator_dir: str | None = None,
    out_dir: str = "checkpoints/counterfactuals",
    methods: list[str] | None = None,
    per_cause: int = 20,
    severity: tuple[float, float] = (0.5, 1.0),
    threshold: float = 0.9,
    lr: float = 1e-3,
    gamma: float = 0.1,
    max_iter: int = 100,
    stopping: str = "per_image",
    clamp_pixels: bool = True,
    objective: str = "score",
    lgd_objective: str | None = None,
    lgd_lr: float | None = None,
    igd_distance: str = "lpips",
    fgd_distance: str = "cos",
    lgd_distance: str = "cos",
    lnn_distance: str = "l1",
    classifier_epochs: int = 4,
    autoencoder_epochs: int = 4,
    batch_size: int = 64,
    alexnet_weights: str | None = None,
    inception_weights: str | None = None,
    device: str = "auto",
    channels_last: bool = True,
    cause_directions: dict[str, str] | None = None,
    seed: int = 0,
) -> dict:
    """Run the five counterfactual methods (IGD, FGD, Reco, LGD, LNN) on a six-cause set and print Table 1.

    Args:
        datamodule: the classifier's data (default: embedded CMNIST, Model-A bias).
        classifier_checkpoint: a ClassifierModule checkpoint; without one a small ``bias_cnn`` is trained
            and saved as ``<out_dir>/classifier.ckpt`` (reused by later runs with the same out_dir).
        autoencoder: the competency autoencoder to train (default: one sized for the data's images).
        autoencoder_checkpoint: a trained autoencoder (``nemo-train fit --config
            configs/competency/cmnist_autoencoder.yaml`` writes one) used instead of training ``autoencoder``.
        estimator_dir: folder of a saved PaRCE estimator; loaded if present, else written there
            (default: ``<out_dir>/parce``).
        out_dir: where table.txt, results.json, grid.png and reliability.png are written.
        methods: subset of IGD, FGD, Reco, LGD, LNN (default all five).
        per_cause: low-competency images per cause.
        severity: range of cause severities, within (0, 1].
        cause_directions: ``up`` / ``down`` for brightness, contrast or saturation where the default
            (brightness up, contrast down, saturation down) should not be used.
        threshold: competency threshold (paper: 0.9).
        lr, gamma, max_iter: Adam settings of IGD / FGD / LGD (paper: 1e-3, 0.1, 100).
        stopping: ``per_image`` (ours) or ``batch`` (the reference's batch-wide rule).
        clamp_pixels: keep IGD / FGD pixels in [0, 1] (the reference does not).
        objective: ``score`` (paper: minimise ``-score``) or ``log_score`` (``-log score``, whose gradient
            survives where the score of a far out-of-distribution image has underflowed to 0).
        lgd_objective: objective of LGD alone (default: ``objective``).
        lgd_lr: Adam learning rate of LGD alone (default: ``lr``). Adam moves each coordinate by about
            ``lr`` per step, so the reach of 100 steps depends on the scale of the autoencoder's latent.
        igd_distance, fgd_distance, lgd_distance, lnn_distance: distance of each method.
        classifier_epochs, autoencoder_epochs: training epochs when training is needed.
        batch_size: images per generator call.
        alexnet_weights, inception_weights: local weight files for LPIPS and Inception FID/KID.
        device: ``auto``, ``cpu`` or ``cuda``.
        channels_last: keep the convolution weights of the classifier and autoencoder channels-last (NHWC)
            while generating; same values, faster convolutions (measured on 2 CPU cores: one LGD step per
            image 1.3 ms -> 1.0 ms at batch 64, see ``scripts/bench_counterfactuals.py``).
        seed: seed of training and of the six-cause set.
    """
    threshold = check_threshold(threshold)
    directions = check_directions(cause_directions)
    methods = list(methods or METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UserInputError(f"unknown counterfactual method(s) {unknown}; expected some of {list(METHODS)}")
    if stopping not in STOPPING_RULES:
        raise UserInputError(f"stopping={stopping!r}; expected one of {list(STOPPING_RULES)}")
    for key, value in (("objective", objective), ("lgd_objective", lgd_objective or objective)):
        if value not in OBJECTIVES:
            raise UserInputError(f"{key}={value!r}; expected one of {list(OBJECTIVES)}")
    if lgd_lr is not None and lgd_lr <= 0:
        raise UserInputError(f"lgd_lr={lgd_lr}; expected a positive learning rate")
    if per_cause < 1 or batch_size < 1:
        raise UserInputError(f"per_cause={per_cause}, batch_size={batch_size}; expected positive numbers")
    accelerator, torch_device = _accelerator(device)
    L.seed_everything(seed, verbose=False)
    if datamodule is None:
        from datamodules.cmnist import CMNISTDataModule

        datamodule = CMNISTDataModule(bias="model_a", train_size=3000, test_styles=1, batch_size=64, seed=seed)
    datamodule.setup("fit")
    datamodule.setup("test")
    image_size = int(datamodule.train_set[0]["image"].shape[-1])
    autoencoder = autoencoder or CompetencyAutoencoder(image_size=image_size)
    if autoencoder.hparams.image_size != image_size:
        raise UserInputError(
            f"autoencoder.image_size={autoencoder.hparams.image_size} but the datamodule's images are {image_size} px"
        )
    out = Path(out_dir)
    classifier = load_or_train_classifier(
        datamodule, classifier_checkpoint, classifier_epochs, accelerator, out / "classifier.ckpt"
    )
    # The autoencoder's initial weights and training order follow the seed, whether or not a classifier was
    # trained first (the config parser builds the autoencoder before any seed is set).
    L.seed_everything(seed, verbose=False)
    autoencoder.reset_parameters()
    parce_dir = Path(estimator_dir) if estimator_dir else out / "parce"
    run_info = {
        "classifier_checkpoint": str(classifier_checkpoint or out / "classifier.ckpt"),
        "estimator_dir": str(parce_dir),
        "seed": seed,
        "datamodule": {
            "class_path": f"{type(datamodule).__module__}.{type(datamodule).__name__}",
            "init_args": dict(datamodule.hparams),
        },
        "cause_directions": {k: v for k, v in directions.items() if v is not None},
    }
    estimator = prepare_estimator(
        classifier,
        datamodule,
        autoencoder,
        autoencoder_epochs,
        threshold,
        accelerator,
        parce_dir,
        autoencoder_checkpoint,
    )
    estimator = estimator.to(torch_device).eval()
    if channels_last:
        estimator = estimator.to(memory_format=torch.channels_last)
    run_info["channels_last"] = channels_last
    estimator.threshold = threshold
    common = {"lr": lr, "gamma": gamma, "max_iter": max_iter, "stopping": stopping, "objective": objective}
    options = {
        "IGD": {**common, "clamp_pixels": clamp_pixels, "distance": igd_distance},
        "FGD": {**common, "clamp_pixels": clamp_pixels, "distance": fgd_distance},
        "LGD": {**common, "lr": lgd_lr or lr, "objective": lgd_objective or objective, "distance": lgd_distance},
        "LNN": {"distance": lnn_distance},
        "Reco": {},
    }
    results = run_counterfactuals(
        estimator,
        datamodule,
        out,
        methods,
        per_cause,
        tuple(severity),
        options,
        batch_size,
        alexnet_weights,
        inception_weights,
        seed,
        run_info,
        cause_directions,
    )
    cal, causes = results["calibration"], results["causes"]
    print(
        f"PaRCE calibration: held-out accuracy {cal['holdout_accuracy']:.4f}, mean score {cal['holdout_mean_score']:.4f} (z = {cal['zscore']:.2f})"
    )
    print("mean competency: " + ", ".join(f"{k} {v:.3f}" for k, v in causes.items() if k != "counts"))
    print("images per cause: " + ", ".join(f"{k} {v}" for k, v in causes["counts"].items()))
    print(format_table(results["table"]))
    print(f"written to {out}")
    return results


def demo_step(ctx) -> None:
    """Demo step: PaRCE on CMNIST Model A, the six causes and the five counterfactual methods (Table 1)."""
    checkpoint = ctx.checkpoints.get("cmnist_model_a")
    fast = bool(getattr(ctx, "fast", False))
    out = Path(ctx.out_dir) / "counterfactuals"
    counterfactuals(
        classifier_checkpoint=str(checkpoint) if checkpoint and Path(checkpoint).is_file() else None,
        autoencoder=CompetencyAutoencoder(image_size=28, widths=(16, 32, 32), latent_dim=32),
        out_dir=str(out),
        per_cause=4 if fast else 10,
        max_iter=30 if fast else 100,
        lgd_objective="log_score",  # as configs/competency/counterfactuals_cmnist.yaml
        lgd_lr=0.1,
        autoencoder_epochs=2 if fast else 4,
        classifier_epochs=2 if fast else 4,
        device=os.environ.get("NEMO_DEVICE", "auto"),
    )
    ctx.artifacts["counterfactual_table"] = out / "table.txt"
    ctx.artifacts["counterfactual_grid"] = out / "grid.png"
    ctx.artifacts["parce_estimator"] = out / "parce"
