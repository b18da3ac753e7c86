"""The ImageNet-1k validation set from a folder, as the target set of a per-class failure-mode analysis.

Layout: ``<data_dir>/<wnid>/<image files>`` (torchvision ``ImageFolder`` style, e.g. ``n01440764/``),
one folder per class; classes are ordered by WordNet id, which is the order of the 1,000 outputs of
ImageNet classifiers, and named by timm's label descriptions. There is no embedded default: ImageNet
cannot be generated.
"""

from __future__ import annotations

import torch

from datamodules.base import AttributeImageDataset, SplitDataModule
from datamodules.folder import list_images, load_images, require_folder
from nemo_train.errors import UserInputError


class ImageNetValDataModule(SplitDataModule):
    """ImageNet-1k validation images (``test`` split; ``train`` / ``val`` are empty).

    Args:
        data_dir: folder of ``<wnid>/<images>``.
        image_size: images are centre-cropped to this side.
        max_per_class: keep at most this many images per class (``None``: all 50).
        batch_size, num_workers: DataLoader settings.
        seed: seed of the per-class subsampling.
    """

    def __init__(
        self,
        data_dir: str,
        image_size: int = 224,
        max_per_class: int | None = None,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()  # saves this module's arguments as hyper-parameters
        from timm.data import ImageNetInfo

        info = ImageNetInfo()
        self.wnids = list(info.label_names())
        self.class_names = [info.index_to_description(i).split(",")[0] for i in range(len(self.wnids))]
        self.num_classes = len(self.wnids)
        self.group_names = ["all"]
        self.eval_groupings: dict[str, list[str]] = {}

    def _setup_folder(self, gen: torch.Generator) -> None:
        root = require_folder(self.hparams.data_dir, "ImageNet validation folder")
        paths, labels = [], []
        for label, wnid in enumerate(self.wnids):
            if not (root / wnid).is_dir():
                raise UserInputError(
                    f"ImageNet folder lacks class folder {str(root / wnid)!r} (layout <data_dir>/<wnid>/*)"
                )
            files = list_images(root / wnid)
            if self.hparams.max_per_class is not None:
                order = torch.randperm(len(files), generator=gen)[: self.hparams.max_per_class]
                files = [files[i] for i in order.tolist()]
            paths += files
            labels += [label] * len(files)
        loaded = load_images(paths, self.hparams.image_size, resize="center_crop", desc="reading ImageNet")
        self.num_skipped_images = loaded.num_skipped
        label = torch.tensor(labels)[loaded.kept]
        self.test_set = AttributeImageDataset(loaded.images, label, torch.zeros_like(label), {"label": label})
        empty = AttributeImageDataset(
            torch.empty(0, 3, self.hparams.image_size, self.hparams.image_size, dtype=torch.uint8),
            torch.empty(0, dtype=torch.long),
            torch.empty(0, dtype=torch.long),
            {"label": torch.empty(0, dtype=torch.long)},
        )
        self.train_set = self.val_set = empty

    def _setup_generated(self, gen: torch.Generator) -> None:
        raise UserInputError("ImageNet has no embedded default; set data_dir to the validation folder")
