"""Pieces shared by our datasets: an in-memory attribute dataset, a split datamodule base, a rotation helper."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from datamodules.folder import require_folder
from nemo_train.errors import UserInputError


def check_range(option: str, value: int | float, low: int | float, high: int | float, unit: str = "") -> None:
    """:class:`UserInputError` naming ``option`` unless ``low <= value <= high`` (checked before any allocation,
    so an oversized option is a one-line error instead of a machine running out of memory)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        unit = f" {unit}" if unit else ""
        raise UserInputError(f"{option}={value!r} is out of range; expected {low} to {high}{unit}")


def vocab_index(vocab: Sequence[str], value: int | str, what: str) -> int:
    """Index of ``value`` (a name or an index) in ``vocab``; ``what`` names the vocabulary in errors
    (``"CLEVR shape"``, ``"NICO++ context"``, ``"colour"``)."""
    if isinstance(value, str):
        if value not in vocab:
            raise UserInputError(f"unknown {what} {value!r}; expected one of {list(vocab)}")
        return list(vocab).index(value)
    if not 0 <= int(value) < len(vocab):
        raise UserInputError(f"{what} index {value} out of range 0-{len(vocab) - 1}")
    return int(value)


#: Largest generated dataset (all splits, as uint8 images) a datamodule builds: 4 GiB.
MAX_DATASET_BYTES = 4 << 30
#: Largest side (pixels) of the images a datamodule reads from a folder.
MAX_FOLDER_SIZE = 1024


def check_dataset_bytes(num_images: int, image_size: int, options: str) -> None:
    """:class:`UserInputError` naming ``options`` when ``num_images`` RGB uint8 images of ``image_size`` px would
    exceed :data:`MAX_DATASET_BYTES` (checked before rendering anything)."""
    size = num_images * 3 * image_size * image_size
    if size > MAX_DATASET_BYTES:
        raise UserInputError(
            f"{options} would hold {num_images:,} images of {image_size} px ({size / 2**30:.1f} GiB); "
            f"expected at most {MAX_DATASET_BYTES / 2**30:.0f} GiB: lower them"
        )


def check_loader(batch_size: int, num_workers: int) -> None:
    """:class:`UserInputError` unless ``batch_size`` is positive and ``num_workers`` not negative."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserInputError(f"batch_size={batch_size!r}; expected a positive number of samples per batch")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise UserInputError(f"num_workers={num_workers!r}; expected 0 or more DataLoader worker processes")


class AttributeImageDataset(Dataset):
    """Images held in memory as ``uint8`` with a label, a group and generator attributes per sample.

    Items are dicts ``{"image": float[3,H,W] in [0,1], "label", "group", "attrs": {name: int}}``
    (see docs/ARCHITECTURE.md), so the same batch layout serves every model and callback.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        groups: torch.Tensor,
        attrs: Mapping[str, torch.Tensor],
    ) -> None:
        n = len(images)
        if images.dtype != torch.uint8:
            images = to_uint8(images)
        for name, values in {"labels": labels, "groups": groups, **attrs}.items():
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries for {n} images")
        self.images = images
        self.labels = labels.long()
        self.groups = groups.long()
        self.attrs = {k: v.long() for k, v in attrs.items()}

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        return {
            "image": self.images[index].float().div_(255.0),
            "label": self.labels[index],
            "group": self.groups[index],
            "attrs": {k: v[index] for k, v in self.attrs.items()},
        }


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """Quantise float images in ``[0, 1]`` to ``uint8``."""
    return images.clamp(0, 1).mul(255).round().to(torch.uint8)


def rotate_batch(images: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """Rotate each image of ``[B, C, H, W]`` counter-clockwise by its angle in degrees (bilinear, zero fill)."""
    theta = degrees.to(images.dtype) * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    zeros = torch.zeros_like(cos)
    # affine_grid maps output coords to input coords, so the inverse rotation gives a CCW turn.
    matrix = torch.stack([torch.stack([cos, sin, zeros], -1), torch.stack([-sin, cos, zeros], -1)], 1)
    grid = F.affine_grid(matrix, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class SplitDataModule(L.LightningDataModule):
    """A datamodule whose ``setup`` fills ``train_set`` / ``val_set`` / ``test_set``; this base serves the loaders.

    Subclasses take ``seed``, ``data_dir``, ``batch_size`` and ``num_workers`` among their arguments and
    implement ``_setup_generated(gen)`` (embedded default) and ``_setup_folder(gen)`` (real data), or
    override ``setup``. ``predict`` uses the test split.
    """

    train_set: Dataset | None = None
    val_set: Dataset | None = None
    test_set: Dataset | None = None

    def __init__(self) -> None:
        super().__init__()
        # Lightning collects the arguments of every ``__init__`` in the ``super()`` chain: the subclass's
        # arguments become ``hparams`` (read by ``setup`` and the loaders) and are saved in checkpoints.
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        """Build the splits once (idempotent), from generated data or from ``data_dir``."""
        if self.train_set is not None:
            return
        gen = torch.Generator().manual_seed(self.hparams.seed)
        if self.hparams.data_dir is None:
            self._setup_generated(gen)
        else:
            self._setup_folder(gen)

    def _init_image_source(
        self, renderer: Callable[[int], Any], max_render_size: int, folder: str, num_generated: int, options: str
    ) -> None:
        """Checks and state shared by the datamodules that render their images (``data_dir=None``) or read them
        from ``data_dir``: ``image_size`` within 8 to ``max_render_size`` (rendered) or :data:`MAX_FOLDER_SIZE`
        (read), the loader options, the ``num_generated`` images the generated splits hold (``options`` names
        what sets their number) or the ``folder`` (its name in errors) existing; then :attr:`renderer`
        (``renderer(image_size)``, ``None`` for a folder), ``num_skipped_images`` and empty splits."""
        hp = self.hparams
        generated = hp.data_dir is None
        check_range("image_size", hp.image_size, 8, max_render_size if generated else MAX_FOLDER_SIZE, "pixels")
        check_loader(hp.batch_size, hp.num_workers)
        if generated:
            check_dataset_bytes(num_generated, hp.image_size, options)
        else:
            require_folder(hp.data_dir, folder)
        #: The renderer of every split (``None`` for a folder): ``renderer.render_batch(**attrs)`` re-renders any
        #: generated sample exactly.
        self.renderer = renderer(hp.image_size) if generated else None
        self.num_skipped_images = 0
        self.train_set = self.val_set = self.test_set = None

    def _setup_generated(self, gen: torch.Generator) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no embedded default")

    def _setup_folder(self, gen: torch.Generator) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load a data folder")

    def _loader(self, dataset: Dataset | None, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not been called")
        return DataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
