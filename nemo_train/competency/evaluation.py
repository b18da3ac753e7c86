"""Run counterfactual generators on a set of low-competency images and score them in the layout of Table 1.

:class:`CounterfactualEvaluator` owns the metrics (success rate, perceptual distance, feature and latent
similarity of valid counterfactuals, FID / KID against the calibration images, time per image) and is
used by the ``counterfactuals`` pipeline command, the benchmark and :class:`CounterfactualMetricsCallback`.
"""

from __future__ import annotations

import io
import math

import torch
from torch import nn
from torchmetrics import MetricCollection

from nemo_train.competency.counterfactuals import CounterfactualGenerator, CounterfactualResult
from nemo_train.competency.parce import PaRCE
from nemo_train.console import print_table
from nemo_train.metrics.bootstrap import interval_fields, mean_interval
from nemo_train.metrics.counterfactual import (
    MeanCosineSimilarity,
    PerceptualDistance,
    SuccessRate,
    TimePerImage,
    realism_metrics,
)
from nemo_train.quiet import progress_bar

#: Seed of KID's random subsets (torchmetrics draws them from torch's global generator).
KID_SEED = 0


class CounterfactualEvaluator:
    """Scores counterfactuals of one method at a time; ``evaluate(originals, result) -> {metric: value}``.

    Args:
        estimator: the fitted PaRCE estimator (its classifier gives features, its autoencoder latents).
        real_images: the reference set for FID / KID (the paper uses the calibration set).
        perceptual: a distance module with a ``name`` (LPIPS or a named fallback).
        inception_weights: optional path of torch-fidelity's Inception weights.
        batch_size: chunk size for feature extraction.
    """

    def __init__(
        self,
        estimator: PaRCE,
        real_images: torch.Tensor,
        perceptual: nn.Module,
        inception_weights: str | None = None,
        batch_size: int = 256,
    ) -> None:
        self.estimator = estimator
        self.device = estimator.class_means.device
        self.batch_size = batch_size
        # the per-image values are kept for the bootstrap intervals of their means (:meth:`intervals`)
        self.perceptual = PerceptualDistance(perceptual.to(self.device), keep_values=True)
        self.success = SuccessRate(estimator.threshold, keep_values=True)
        self.feature_sim = MeanCosineSimilarity(keep_values=True)
        self.latent_sim = MeanCosineSimilarity(keep_values=True)
        self.time = TimePerImage()
        image_shape = tuple(real_images.shape[1:])
        self.realism = realism_metrics(estimator.classifier, image_shape, inception_weights)
        # One collection for device moves and resets; each metric is updated with its own inputs.
        self.metrics = MetricCollection(
            {
                "perceptual": self.perceptual,
                "success": self.success,
                "feature_sim": self.feature_sim,
                "latent_sim": self.latent_sim,
                "time": self.time,
                **{name.replace("[", "_").replace("]", ""): m for name, m in self.realism.items()},
            },
            compute_groups=False,
        ).to(self.device)
        for chunk in real_images.split(batch_size):
            for metric in self.realism.values():
                metric.update(chunk.to(self.device), real=True)
        self.num_real = len(real_images)

    @torch.no_grad()
    def update(self, originals: torch.Tensor, result: CounterfactualResult) -> None:
        """Add one batch of originals and their counterfactuals."""
        originals = originals.to(self.device)
        counterfactuals = result.images.to(self.device)
        valid = result.success.to(self.device)
        self.success.update(result.scores)
        self.perceptual.update(originals, counterfactuals)
        classifier, autoencoder = self.estimator.classifier, self.estimator.autoencoder
        self.feature_sim.update(classifier.features(originals), classifier.features(counterfactuals), valid)
        self.latent_sim.update(autoencoder.encode(originals), autoencoder.encode(counterfactuals), valid)
        self.time.update(result.seconds, result.processed)
        for metric in self.realism.values():
            metric.update(counterfactuals, real=False)

    def compute(self) -> dict[str, float]:
        """``{"success", "<perceptual name>", "feature_sim", "latent_sim", "fid[...]", "kid[...]", "sec_per_image"}``."""
        out = {
            "success": float(self.success.compute()),
            self.perceptual.name: float(self.perceptual.compute()),
            "feature_sim": _maybe(self.feature_sim),
            "latent_sim": _maybe(self.latent_sim),
        }
        for name, metric in self.realism.items():
            if name.startswith("kid"):
                n_fake = len(metric.fake_features) and sum(len(f) for f in metric.fake_features)
                metric.subset_size = max(2, min(metric.subset_size, n_fake, self.num_real))
                with torch.random.fork_rng(devices=[]):  # its random subsets: the same whatever ran before
                    torch.manual_seed(KID_SEED)
                    out[name] = float(metric.compute()[0])
            else:
                out[name] = float(metric.compute())
        out["sec_per_image"] = float(self.time.compute())
        return out

    def intervals(self) -> dict[str, float | None]:
        """Bootstrap 95 % intervals over the images of the per-image means (success rate, perceptual distance,
        feature and latent similarity of the valid counterfactuals) as ``{"<metric>_ci_low", "<metric>_ci_high"}``;
        ``None`` bounds where no image counted. FID, KID and time are set-level numbers: no interval."""
        out: dict[str, float | None] = {}
        for name, metric in (
            ("success", self.success),
            (self.perceptual.name, self.perceptual),
            ("feature_sim", self.feature_sim),
            ("latent_sim", self.latent_sim),
        ):
            out.update(interval_fields(name, mean_interval(metric.values().tolist())))
        return out

    def reset(self) -> None:
        """Forget the counterfactuals seen so far (the real-image statistics are kept)."""
        self.metrics.reset()

    def evaluate(
        self,
        generator: CounterfactualGenerator | None,
        images: torch.Tensor,
        batch_size: int = 64,
        progress: str | None = None,
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Run ``generator`` over ``images`` in batches and return ``(metrics, counterfactuals)``.

        ``generator=None`` scores the originals themselves (the ``Orig`` row; its time is 0). ``progress``
        names a progress bar over the images (none when ``None``).
        """
        self.reset()
        outputs = []
        bar = progress_bar(total=len(images), desc=progress, unit="img", leave=False, disable=progress is None)
        for chunk in images.split(batch_size):
            chunk = chunk.to(self.device)
            if generator is None:
                with torch.no_grad():
                    scores = self.estimator(chunk)
                result = CounterfactualResult(
                    chunk, scores, scores >= self.estimator.threshold, torch.zeros(len(chunk)), 0.0, len(chunk)
                )
            else:
                result = generator(chunk)
            self.update(chunk, result)
            outputs.append(result.images.cpu())
            bar.update(len(chunk))
        bar.close()
        return self.compute(), torch.cat(outputs)


def _maybe(metric) -> float:
    return float(metric.compute()) if metric.count > 0 else math.nan


#: How the bounds of a mean's interval are stored beside it.
INTERVAL_SUFFIXES = ("_ci_low", "_ci_high")


def table_rows(rows: dict[str, dict[str, float]]) -> tuple[list[str], list[list[str]]]:
    """Columns and cells of the Table-1 layout: one row per method; success, perceptual, similarities, FID,
    KID, time. A mean stored with ``<metric>_ci_low`` / ``<metric>_ci_high`` (see
    :meth:`CounterfactualEvaluator.intervals`) prints as ``mean [low, high]``."""
    if not rows:
        return [], []
    keys = [k for k in next(iter(rows.values())) if not k.endswith(INTERVAL_SUFFIXES)]
    headers = ["Method"] + [_header(k) for k in keys]
    body = [
        [method]
        + [_cell(k, values.get(k, math.nan), values.get(f"{k}_ci_low"), values.get(f"{k}_ci_high")) for k in keys]
        for method, values in rows.items()
    ]
    return headers, body


def print_counterfactual_table(rows: dict[str, dict[str, float]], file=None, title: str | None = None) -> str:
    """Print the Table-1 layout (see :func:`table_rows`) with :func:`nemo_train.console.print_table`; return
    it as text. ``file=io.StringIO()`` renders without printing."""
    headers, body = table_rows(rows)
    if not headers:
        return ""
    bounded = any(k.endswith(INTERVAL_SUFFIXES) for values in rows.values() for k in values)
    caption = "[bootstrap 95 % interval over the images]" if bounded else None
    return print_table(headers, body, title=title, caption=caption, file=file)


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """The Table-1 layout as text, without printing it (for ``table.txt`` and logs)."""
    return print_counterfactual_table(rows, file=io.StringIO())


def _header(key: str) -> str:
    names = {
        "success": "Success Rate ↑",
        "feature_sim": "Feature Sim ↑",
        "latent_sim": "Latent Sim ↑",
        "sec_per_image": "Time/img ↓",
    }
    if key in names:
        return names[key]
    return f"{key} ↓"


def _cell(key: str, value: float, low: float | None = None, high: float | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if low is not None and high is not None:
        if key == "success":
            return f"{100 * value:.2f}% [{100 * low:.1f}, {100 * high:.1f}]"
        return f"{value:.2f} [{low:.2f}, {high:.2f}]"
    if key == "success":
        return f"{100 * value:.2f}%"
    if key == "sec_per_image":
        return f"{value:.4f} sec"
    if key.startswith("kid"):
        return f"{value:.4f}"
    return f"{value:.2f}"
