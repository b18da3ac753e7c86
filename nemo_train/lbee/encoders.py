"""Joint image-text spaces for the failure-mode search: a released Open-CLIP model, a transformers CLIP /
SigLIP / SigLIP 2 model, or our trained small CLIP.

Every encoder has ``encode_image(images float[B, 3, H, W] in [0, 1]) -> [B, D]`` and
``encode_text(texts) -> [T, D]``, both L2-normalised, computed in batches by one
:class:`~nemo_train.models.image_text.ImageTextEncoder`; the classes here are the configurable specs.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from filelock import FileLock, Timeout

from datamodules.captions import CaptionDataModule, Source
from nemo_train.models.clip import CLIPEncoder, CLIPModule
from nemo_train.models.image_text import ImageTextEncoder, check_open_clip_name
from nemo_train.models.trainer import fit_quietly

log = logging.getLogger(__name__)


class _Space:
    """A joint space behind the failure-mode search's two calls, loaded on first use (so a preset parses, and the
    run checks its data folder, before any weight is read or downloaded)."""

    _space: ImageTextEncoder | None = None

    def _load(self) -> ImageTextEncoder:
        raise NotImplementedError

    @property
    def space(self) -> ImageTextEncoder:
        if self._space is None:
            self._space = self._load()
        return self._space

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.space.encode_image(images)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        return self.space.encode_text(texts)


class OpenCLIPEncoder(_Space):
    """A released Open-CLIP model, e.g. ``ViT-B-32`` / ``laion2b_s34b_b79k`` (LAION-2B) or ``ViT-B-16-SigLIP2`` /
    ``webli``, by name and pretrained tag, or a local weights file as ``pretrained``. Weights come from the hub
    (or the file) when the search first embeds something; the package and the model name are checked at once."""

    def __init__(
        self,
        model_name: str = "ViT-B-32",
        pretrained: str | None = "laion2b_s34b_b79k",
        device: str = "cpu",
        batch_size: int = 256,
    ) -> None:
        check_open_clip_name(model_name)
        self.model_name, self.pretrained, self.device, self.batch_size = model_name, pretrained, device, batch_size

    def _load(self) -> ImageTextEncoder:
        return ImageTextEncoder.from_open_clip(
            self.model_name, self.pretrained, device=self.device, batch_size=self.batch_size
        )


class PretrainedEncoder(_Space):
    """A transformers CLIP / SigLIP / SigLIP 2 model by hub id or local folder, e.g.
    ``google/siglip2-base-patch16-naflex`` or ``google/siglip2-base-patch16-224`` (loaded on first use)."""

    def __init__(
        self, model: str = "google/siglip2-base-patch16-224", device: str = "cpu", batch_size: int = 256
    ) -> None:
        self.model, self.device, self.batch_size = model, device, batch_size

    def _load(self) -> ImageTextEncoder:
        return ImageTextEncoder.from_pretrained(self.model, batch_size=self.batch_size).to(self.device)


class SyntheticCLIP:
    """Our small CLIP trained on generated captions: loaded from ``path`` (a Hugging Face folder written
    by ``nemo-train fit --config configs/clip/synthetic.yaml``, or a ``.ckpt``), or, when ``path`` does
    not exist yet, trained on ``sources`` and saved there (so later runs reuse it). The ``lbee`` command trains
    one into its own ``out_dir`` (``path`` unset or inside it); a missing folder given elsewhere is an error unless
    ``train_missing`` asks for it to be trained there (one joint space shared by several runs). Processes given the
    same missing ``path`` at once train it one at a time, taking turns on the lock file ``<path>.lock`` beside it:
    the first trains, the others wait and then load what it saved.

    Args:
        path: Hugging Face folder (or ``.ckpt``) of the trained model; ``None``: ``<out_dir>/clip`` of the
            ``lbee`` run using it.
        sources: generators whose captions train a missing model.
        train_per_source, max_epochs, batch_size, seed: training of a missing model.
        group_size: members of a minimal-pair group of training images (see
            :class:`~datamodules.captions.CaptionDataModule`); 1 draws every image independently.
        model: :class:`~nemo_train.models.clip.CLIPModule` settings of a missing model.
        train_missing: train a missing ``path`` outside the ``lbee`` run's ``out_dir`` (else a one-line error).
    """

    def __init__(
        self,
        path: str | None = None,
        sources: list[Source] = ["nico"],  # noqa: B006 (jsonargparse shows the default)
        train_per_source: int = 3000,
        max_epochs: int = 8,
        batch_size: int = 128,
        seed: int = 0,
        group_size: int = 1,
        model: dict | None = None,
        train_missing: bool = False,
    ) -> None:
        self.path, self.sources, self.train_missing = path, list(sources), train_missing
        self.train_per_source, self.max_epochs, self.batch_size, self.seed = (
            train_per_source,
            max_epochs,
            batch_size,
            seed,
        )
        self.group_size = group_size
        self.model_kwargs = dict(model or {})
        self._encoder: CLIPEncoder | None = None
        self.zero_shot: dict[str, float] = {}

    def encoder(self) -> CLIPEncoder:
        if self._encoder is None:
            if self.path is None:
                raise ValueError("SyntheticCLIP has no path; the lbee run sets <out_dir>/clip")
            if not Path(self.path).exists():
                self._train_once()
            self._encoder = CLIPEncoder(self.path)
            record = Path(self.path) / "zero_shot.json"
            if not self.zero_shot and record.is_file():
                self.zero_shot = json.loads(record.read_text())
        return self._encoder

    def _train_once(self) -> None:
        """Train the missing model unless another process does: the lock file beside :attr:`path` lets one
        process train at a time, and one that waited for it finds the model saved and trains nothing."""
        target = Path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(f"{target}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("another process is training the joint space %s; waiting for it", target)
            lock.acquire()
        try:
            if not target.exists():
                self.train()
        finally:
            lock.release()

    def train(self) -> dict[str, float]:
        """Train a CLIP on the caption sources, export it to :attr:`path` (which must not exist yet); returns the
        last validation metrics. The model is written beside it first and moved there whole, so that a process
        that finds the folder finds it complete (and a run killed while training leaves none)."""
        L.seed_everything(self.seed, verbose=False)
        data = CaptionDataModule(
            sources=self.sources,
            image_size=self.model_kwargs.get("image_size", 32),
            train_per_source=self.train_per_source,
            val_per_source=max(self.train_per_source // 10, 50),
            group_size=self.group_size,
            batch_size=self.batch_size,
            seed=self.seed,
        )
        module = CLIPModule(**self.model_kwargs)
        trainer = fit_quietly(module, data, self.max_epochs, check_val_every_n_epoch=self.max_epochs)
        target = Path(self.path)
        staging = target.with_name(f"{target.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while exporting
        module.export(staging)
        self.zero_shot = {k: float(v) for k, v in trainer.callback_metrics.items() if "zeroshot" in k}
        (staging / "zero_shot.json").write_text(json.dumps(self.zero_shot, indent=1))
        staging.rename(target)
        log.info("trained CLIP saved to %s (%s)", self.path, self.zero_shot)
        return self.zero_shot

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.encoder().encode_image(images)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        return self.encoder().encode_text(texts)


Encoder = SyntheticCLIP | OpenCLIPEncoder | PretrainedEncoder
