"""Image classifier over any timm backbone, with per-group accuracy (aligned / conflicting, per context)."""

from __future__ import annotations

import lightning as L
import timm
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import ClasswiseWrapper, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

import nemo_train.models.bias_cnn  # noqa: F401  (registers ``bias_cnn`` in timm)
from nemo_train.errors import UserInputError
from nemo_train.metrics.group_accuracy import GroupAccuracy


def create_backbone(name: str, num_classes: int, in_chans: int = 3, pretrained: bool = False, **kwargs) -> nn.Module:
    """``timm.create_model``; pretrained weights that cannot be loaded are a one-line error, never a silent
    random initialisation (a run would then analyse or fine-tune a model nobody asked for)."""
    if name not in timm.list_models() and name.split(".")[0] not in timm.list_models():
        raise UserInputError(f"unknown backbone {name!r}; use `bias_cnn` or a timm model name such as `resnet50`")
    if pretrained:
        try:
            return timm.create_model(name, pretrained=True, num_classes=num_classes, in_chans=in_chans, **kwargs)
        except Exception as err:  # no network, no cached weights, no weights for this name
            reason = (str(err).splitlines() or [""])[0][:160]
            raise UserInputError(
                f"cannot load the pretrained weights of {name!r} ({type(err).__name__}: {reason}); make them "
                "reachable (hub access or a filled HF_HOME cache) or set pretrained: false to start from random weights"
            ) from None
    return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans, **kwargs)


class ClassifierModule(L.LightningModule):
    """Supervised image classifier: a timm backbone (or the model-differences paper's ``bias_cnn``) trained with
    cross-entropy.

    Logs ``{stage}/loss``, ``{stage}/acc`` and ``{stage}/acc_<group>`` for every group the datamodule
    names (``group_names``, e.g. aligned / conflicting), plus ``{stage}/acc_<key>_<value>`` for each of
    the datamodule's ``eval_groupings`` (e.g. ``{"context": [...]}`` for NICO++).

    Args:
        backbone: timm model name, e.g. ``bias_cnn`` or ``resnet50``.
        num_classes: number of classes (must match the datamodule).
        pretrained: start from the hub weights (a one-line error when they cannot be loaded).
        lr, weight_decay: AdamW settings; the learning rate follows a cosine schedule over training.
        label_smoothing: cross-entropy label smoothing.
    """

    def __init__(
        self,
        backbone: str = "bias_cnn",
        num_classes: int = 10,
        pretrained: bool = False,
        in_chans: int = 3,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_backbone(backbone, num_classes, in_chans, pretrained)
        cfg = getattr(self.model, "pretrained_cfg", None) or {}
        self.register_buffer(
            "mean", torch.tensor(cfg.get("mean", (0.485, 0.456, 0.406))).view(1, -1, 1, 1), persistent=False
        )
        self.register_buffer(
            "std", torch.tensor(cfg.get("std", (0.229, 0.224, 0.225))).view(1, -1, 1, 1), persistent=False
        )
        self.group_names: list[str] = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {}
        self.metrics = nn.ModuleDict()  # "val" / "test": clones of one MetricCollection, made in setup

    # ----------------------------------------------------------------- model API
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits for images in ``[0, 1]`` (normalised inside)."""
        return self.model(self.normalize(images))

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim != 4 or images.shape[1] != self.hparams.in_chans:
            raise UserInputError(
                f"expected images of shape [B, {self.hparams.in_chans}, H, W], got {list(images.shape)}"
            )
        return (images - self.mean) / self.std

    def predict_proba(self, images: torch.Tensor) -> torch.Tensor:
        """Class probabilities ``P(.|x)``."""
        return self(images).softmax(-1)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Pooled pre-logit features ``[B, D]``."""
        return self.model.forward_head(self.model.forward_features(self.normalize(images)), pre_logits=True)

    # ----------------------------------------------------------------- setup
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None:
            if getattr(datamodule, "num_classes", self.hparams.num_classes) != self.hparams.num_classes:
                raise UserInputError(
                    f"model.num_classes={self.hparams.num_classes} but the datamodule has {datamodule.num_classes} classes"
                )
            self.group_names = list(getattr(datamodule, "group_names", self.group_names))
            self.eval_groupings = dict(getattr(datamodule, "eval_groupings", {}) or {})
        if not self.metrics:
            metrics = self._metrics()
            for stage_name in ("val", "test"):
                self.metrics[stage_name] = metrics.clone(prefix=f"{stage_name}/")

    def _metrics(self) -> MetricCollection:
        """Overall accuracy (``acc``), accuracy per group (``acc_<group>``) and per value of each evaluation
        grouping (``acc_<key>_<value>``)."""
        metrics = {
            "acc": MulticlassAccuracy(self.hparams.num_classes, average="micro"),
            "group": ClasswiseWrapper(GroupAccuracy(len(self.group_names)), self.group_names, prefix="acc_"),
        }
        for key, names in self.eval_groupings.items():
            metrics[f"by_{key}"] = ClasswiseWrapper(
                GroupAccuracy(len(names), attribute=key), names, prefix=f"acc_{key}_"
            )
        return MetricCollection(metrics, compute_groups=False)

    # ----------------------------------------------------------------- steps
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        logits = self(batch["image"])
        loss = F.cross_entropy(logits, batch["label"], label_smoothing=self.hparams.label_smoothing)
        acc = (logits.argmax(-1) == batch["label"]).float().mean()
        self.log_dict({"train/loss": loss, "train/acc": acc}, prog_bar=True, batch_size=len(logits))
        return loss

    def _eval_step(self, batch: dict, stage: str) -> None:
        logits = self(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        preds = logits.argmax(-1)
        self.metrics[stage].update(preds=preds, target=batch["label"], groups=batch["group"], attrs=batch.get("attrs"))
        self.log(f"{stage}/loss", loss, batch_size=len(logits), sync_dist=True)

    def _eval_epoch_end(self, stage: str) -> None:
        metrics = self.metrics[stage]
        # a group without samples has no accuracy (nan): it is left out of the log
        values = {name: value for name, value in metrics.compute().items() if not torch.isnan(value)}
        metrics.reset()
        self.log_dict(values, prog_bar=stage == "val")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        probs = self.predict_proba(batch["image"])
        return {"probs": probs, "pred": probs.argmax(-1), "label": batch.get("label")}

    def configure_optimizers(self):
        return adamw_one_cycle(self)


def adamw_one_cycle(module: L.LightningModule) -> dict:
    """AdamW (``hparams.lr``, ``hparams.weight_decay``) with a one-cycle schedule over the fit's steps."""
    hp = module.hparams
    optimizer = torch.optim.AdamW(module.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
    steps = module.trainer.estimated_stepping_batches if module._trainer is not None else 1000
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=hp.lr, total_steps=max(int(steps), 1), pct_start=0.15
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
