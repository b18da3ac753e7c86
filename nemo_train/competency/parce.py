"""PaRCE: probabilistic and reconstruction-based competency estimation (competency-counterfactuals paper, Sec. 2.1).

For an image ``x`` with reconstruction error ``L(x)`` (per-image MSE of the competency autoencoder) and
class probabilities ``p(c|x)`` from the classifier, the probability that ``x`` is in-distribution for
class ``c`` is ``p_c(ID) = 1 - Phi((L - k * mu_c) / sigma_c - z)``, where ``mu_c`` and ``sigma_c`` are the
mean and standard deviation of ``L`` over held-out images of true class ``c``. The competency score is
``max_c p(c|x) * sum_c p(c|x) p_c(ID)``. The offset ``z`` is chosen on a grid (0 to 5, step 0.05) so
that the mean held-out score is closest to the held-out accuracy.

``k`` (``loss_scale``) is 2 in the authors' code and 1 in the usual z-score; we default to their 2 and
expose it. The score is differentiable in the image, which IGD, FGD and LGD use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from nemo_train.artefacts import save_safetensors
from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.errors import UserInputError
from nemo_train.quiet import progress_bar
from nemo_train.store import write_bytes_atomic

Z_GRID = torch.arange(0, 100) * 0.05  # 0.00 ... 4.95, as the reference grid


def check_threshold(threshold: float) -> float:
    """Return ``threshold`` as a float or raise :class:`UserInputError` unless it lies in ``(0, 1)``."""
    threshold = float(threshold)
    if not 0.0 < threshold < 1.0:
        raise UserInputError(f"competency threshold={threshold} is out of range; expected a value in (0, 1)")
    return threshold


def damaged_estimator(path: Path, err: BaseException) -> UserInputError:
    """The one-line error for a saved estimator file that cannot be read (cut short, or not what ``save`` writes)."""
    reason = " ".join(str(err).split())[:120] or type(err).__name__
    return UserInputError(
        f"saved PaRCE estimator file {str(path)!r} is damaged ({reason}); delete it (with the other parce.* files "
        "beside it) to calibrate the estimator again, or rerun with another out_dir"
    )


def parce_score(
    losses: torch.Tensor,
    probs: torch.Tensor,
    means: torch.Tensor,
    stds: torch.Tensor,
    z: float | torch.Tensor,
    loss_scale: float = 2.0,
) -> torch.Tensor:
    """Competency ``[B]`` from reconstruction losses ``[B]`` and class probabilities ``[B, C]`` (differentiable)."""
    zvals = (losses[:, None] - loss_scale * means) / stds - z
    p_id = 1.0 - torch.special.ndtr(zvals)
    return probs.max(-1).values * (probs * p_id).sum(-1)


def parce_log_score(
    losses: torch.Tensor,
    log_probs: torch.Tensor,
    means: torch.Tensor,
    stds: torch.Tensor,
    z: float | torch.Tensor,
    loss_scale: float = 2.0,
) -> torch.Tensor:
    """``log`` of :func:`parce_score` from log class probabilities ``[B, C]``, computed without underflow.

    ``log(1 - Phi(t)) = log_ndtr(-t)`` keeps a useful gradient far in the Gaussian tail, where the score
    itself is exactly 0 in floating point and its gradient vanishes.
    """
    zvals = (losses[:, None] - loss_scale * means) / stds - z
    return log_probs.max(-1).values + torch.logsumexp(log_probs + torch.special.log_ndtr(-zvals), -1)


@dataclass
class Reliability:
    """Calibration by bins of predicted competency: mean score, accuracy and count per bin."""

    edges: torch.Tensor
    mean_score: torch.Tensor
    accuracy: torch.Tensor
    count: torch.Tensor

    def figure(self, title: str = "PaRCE reliability"):
        """A matplotlib reliability plot (accuracy against mean score per bin, with the diagonal)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 4))
        seen = self.count > 0
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        ax.plot(self.mean_score[seen].numpy(), self.accuracy[seen].numpy(), "o-", label="PaRCE")
        ax.set(xlabel="mean competency score", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1), title=title)
        ax.legend(loc="upper left")
        fig.tight_layout()
        return fig


def reliability(scores: torch.Tensor, correct: torch.Tensor, bins: int = 10) -> Reliability:
    """Bin ``scores`` in ``[0, 1]`` into ``bins`` equal bins; per bin the mean score, the accuracy and the count."""
    scores, correct = scores.detach().double().cpu(), correct.detach().double().cpu()
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    index = torch.bucketize(scores, edges[1:-1], right=True)
    count = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, torch.ones_like(scores))
    score_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, scores)
    hit_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, correct)
    with torch.no_grad():
        denom = count.clamp(min=1)
        mean_score = torch.where(count > 0, score_sum / denom, torch.nan)
        accuracy = torch.where(count > 0, hit_sum / denom, torch.nan)
    return Reliability(edges.float(), mean_score.float(), accuracy.float(), count.long())


class PaRCE(nn.Module):
    """Competency estimator: a classifier, a :class:`CompetencyAutoencoder` and per-class loss statistics.

    ``fit`` calibrates on held-out in-distribution images; ``forward`` / ``score`` return the competency of
    images (differentiable). ``save`` writes ``parce.json`` (settings, ``z``, the autoencoder's hyper-
    parameters) and ``parce.safetensors`` (class statistics and autoencoder weights); ``load`` reads them
    back given the classifier, with no pickle involved.

    Args:
        classifier: a module with ``forward(images) -> logits`` and ``features(images)``.
        autoencoder: the reconstruction model trained on the classifier's training distribution.
        num_classes: number of classes of the classifier.
        threshold: competency threshold separating low from high competency (paper: 0.9).
        loss_scale: the factor ``k`` in front of ``mu_c`` (2 in the authors' code).
    """

    def __init__(
        self,
        classifier: nn.Module,
        autoencoder: CompetencyAutoencoder,
        num_classes: int,
        threshold: float = 0.9,
        loss_scale: float = 2.0,
    ) -> None:
        super().__init__()
        self.classifier, self.autoencoder = classifier, autoencoder
        self.num_classes = int(num_classes)
        self.threshold = check_threshold(threshold)
        self.loss_scale = float(loss_scale)
        self.register_buffer("class_means", torch.zeros(self.num_classes))
        self.register_buffer("class_stds", torch.ones(self.num_classes))
        self.register_buffer("zscore", torch.tensor(0.0))
        self.fitted = False
        self.holdout_accuracy: float | None = None
        self.holdout_mean_score: float | None = None

    # ----------------------------------------------------------------- scoring
    def _require_fitted(self) -> None:
        if not self.fitted:
            raise UserInputError(
                "the PaRCE estimator is not fitted; call fit(holdout_loader) or PaRCE.load(folder, classifier) first"
            )

    def losses(self, images: torch.Tensor) -> torch.Tensor:
        """Per-image reconstruction MSE ``[B]``; raises :class:`UserInputError` for a wrong image shape."""
        return self.autoencoder.reconstruction_loss(images)

    def score_parts(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"score", "loss", "probs", "logits"}`` for images ``[B, C, H, W]`` in ``[0, 1]`` (differentiable)."""
        self._require_fitted()
        losses = self.losses(images)  # checks the shape first
        logits = self.classifier(images)
        probs = logits.softmax(-1)
        score = parce_score(losses, probs, self.class_means, self.class_stds, self.zscore, self.loss_scale)
        return {"score": score, "loss": losses, "probs": probs, "logits": logits}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Competency scores ``[B]`` in ``[0, 1]`` (differentiable)."""
        return self.score_parts(images)["score"]

    score = forward

    def log_score(self, images: torch.Tensor) -> torch.Tensor:
        """``log`` of the competency scores ``[B]``, finite (with a gradient) even where the score underflows to 0."""
        self._require_fitted()
        losses = self.losses(images)
        log_probs = self.classifier(images).log_softmax(-1)
        return parce_log_score(losses, log_probs, self.class_means, self.class_stds, self.zscore, self.loss_scale)

    # ----------------------------------------------------------------- calibration
    @torch.no_grad()
    def collect(self, loader, progress: bool = False) -> dict[str, torch.Tensor]:
        """Losses, probabilities, labels and images of every batch of ``loader`` (dict batches with ``image``, ``label``)."""
        device = self.class_means.device
        out: dict[str, list[torch.Tensor]] = {"loss": [], "probs": [], "label": [], "image": []}
        for batch in progress_bar(loader, desc="PaRCE: held-out pass", disable=not progress, leave=False):
            images = batch["image"].to(device)
            out["loss"].append(self.losses(images).cpu())
            out["probs"].append(self.classifier(images).softmax(-1).cpu())
            out["label"].append(batch["label"].cpu())
            out["image"].append(batch["image"].cpu())
        if not out["loss"]:
            raise UserInputError("the held-out loader given to PaRCE.fit is empty")
        return {k: torch.cat(v) for k, v in out.items()}

    @torch.no_grad()
    def fit(self, loader, progress: bool = False) -> PaRCE:
        """Calibrate on a held-out in-distribution loader: class loss statistics, then ``z`` by grid search."""
        data = self.collect(loader, progress)
        self.fit_from(data["loss"], data["probs"], data["label"])
        return self

    @torch.no_grad()
    def fit_from(self, losses: torch.Tensor, probs: torch.Tensor, labels: torch.Tensor) -> PaRCE:
        """Calibrate from held-out losses ``[N]``, class probabilities ``[N, C]`` and true labels ``[N]``."""
        if probs.ndim != 2 or probs.shape[1] != self.num_classes:
            raise UserInputError(f"expected class probabilities [N, {self.num_classes}], got {list(probs.shape)}")
        losses, probs, labels = losses.double().cpu(), probs.double().cpu(), labels.long().cpu()
        means = torch.zeros(self.num_classes, dtype=torch.float64)
        stds = torch.ones(self.num_classes, dtype=torch.float64)
        for c in range(self.num_classes):
            class_losses = losses[labels == c]
            if len(class_losses) < 2:
                raise UserInputError(
                    f"the held-out set has {len(class_losses)} image(s) of class {c}; need at least 2 per class"
                )
            means[c], stds[c] = class_losses.mean(), class_losses.std(unbiased=False).clamp(min=1e-12)
        accuracy = (probs.argmax(-1) == labels).double().mean()
        mean_scores = torch.stack(
            [parce_score(losses, probs, means, stds, z, self.loss_scale).mean() for z in Z_GRID.double()]
        )
        best = int((mean_scores - accuracy).abs().argmin())
        device = self.class_means.device
        self.class_means.copy_(means.float().to(device))
        self.class_stds.copy_(stds.float().to(device))
        self.zscore.fill_(float(Z_GRID[best]))
        self.fitted = True
        self.holdout_accuracy = float(accuracy)
        self.holdout_mean_score = float(mean_scores[best])
        return self

    # ----------------------------------------------------------------- persistence
    def save(self, folder: str | Path) -> Path:
        """Write ``parce.json`` and ``parce.safetensors`` (statistics and autoencoder weights) to ``folder``."""
        self._require_fitted()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"class_means": self.class_means, "class_stds": self.class_stds}
        tensors.update({f"autoencoder.{k}": v for k, v in self.autoencoder.state_dict().items()})
        save_safetensors(tensors, folder / "parce.safetensors")  # a full disk: one line naming the folder
        hparams = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(self.autoencoder.hparams).items()}
        meta = {
            "num_classes": self.num_classes,
            "threshold": self.threshold,
            "loss_scale": self.loss_scale,
            "zscore": float(self.zscore),
            "holdout_accuracy": self.holdout_accuracy,
            "holdout_mean_score": self.holdout_mean_score,
            "autoencoder": hparams,
        }
        write_bytes_atomic(folder / "parce.json", json.dumps(meta, indent=2).encode("utf-8"))
        return folder

    @classmethod
    def load(cls, folder: str | Path, classifier: nn.Module, map_location: str | torch.device = "cpu") -> PaRCE:
        """Read an estimator written by :meth:`save`, attached to ``classifier``."""
        folder = Path(folder)
        meta_path, tensor_path = folder / "parce.json", folder / "parce.safetensors"
        if not meta_path.is_file() or not tensor_path.is_file():
            raise UserInputError(
                f"no saved PaRCE estimator in {str(folder)!r} (expected parce.json and parce.safetensors)"
            )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("autoencoder"), dict):
                raise ValueError("not the JSON object save writes")
        except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
            raise damaged_estimator(meta_path, err) from None
        try:
            tensors = load_file(str(tensor_path), device=str(map_location))
            autoencoder = CompetencyAutoencoder(**meta["autoencoder"])
            autoencoder.load_state_dict(
                {k.removeprefix("autoencoder."): v for k, v in tensors.items() if k.startswith("autoencoder.")}
            )
            for key in ("class_means", "class_stds"):
                if key not in tensors:
                    raise KeyError(key)
        except (SafetensorError, RuntimeError, KeyError, TypeError, ValueError) as err:
            raise damaged_estimator(tensor_path, err) from None
        estimator = cls(classifier, autoencoder, meta["num_classes"], meta["threshold"], meta["loss_scale"])
        estimator.class_means.copy_(tensors["class_means"])
        estimator.class_stds.copy_(tensors["class_stds"])
        estimator.zscore.fill_(meta["zscore"])
        estimator.fitted = True
        estimator.holdout_accuracy = meta.get("holdout_accuracy")
        estimator.holdout_mean_score = meta.get("holdout_mean_score")
        return estimator.to(map_location).eval()
