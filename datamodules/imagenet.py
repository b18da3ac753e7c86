"""The ImageNet-1k validation set from a folder, as the target set of a per-class failure-mode analysis and as
the reference images of the NEMO folder benchmarks.

Two layouts are read as they are distributed, nothing re-laid-out by hand:

* synset folders ``<data_dir>/<wnid>/<image files>`` (``n01440764/...``; torchvision ``ImageFolder`` style), all
  1,000 classes or any subset of them;
* the flat validation folder (``ILSVRC2012_val_00000001.JPEG`` ...) plus a ground-truth file: the development
  kit's ``ILSVRC2012_validation_ground_truth.txt`` (one ILSVRC2012 class id per line, read through the kit's
  ``meta.mat`` beside it), Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString``), or a text file of
  ``<file name> <wnid or class index>`` lines. Without an explicit file, those names are looked for in the
  folder, its parent and ``<parent>/ILSVRC2012_devkit_t12/data``.

Classes are ordered by WordNet id, the order of the 1,000 outputs of ImageNet classifiers, and named by timm's
label descriptions. There is no embedded default: ImageNet cannot be generated.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import torch

from datamodules.base import AttributeImageDataset, SplitDataModule
from datamodules.folder import list_images, open_images, require_folder
from nemo_train.errors import UserInputError

#: Ground-truth files of the flat validation folder, looked for by name.
GROUND_TRUTH_NAMES = ("ILSVRC2012_validation_ground_truth.txt", "LOC_val_solution.csv")
VAL_IMAGES = 50_000


def imagenet_wnids() -> list[str]:
    """The 1,000 WordNet ids in output order."""
    from timm.data import ImageNetInfo

    return list(ImageNetInfo().label_names())


def find_ground_truth(root: str | Path) -> Path | None:
    """A ground-truth file of a flat validation folder (:data:`GROUND_TRUTH_NAMES`), or ``None``."""
    root = Path(root)
    for folder in (root, root.parent, root.parent / "ILSVRC2012_devkit_t12" / "data"):
        for name in GROUND_TRUTH_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def read_ground_truth(path: str | Path, wnids: list[str]) -> dict[str, int]:
    """``{image file stem: class index}`` from a ground-truth file (the three forms of the module docstring)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserInputError(f"ImageNet ground-truth file {str(path)!r} does not exist")
    order = {w: i for i, w in enumerate(wnids)}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(lines))
        if rows and not {"ImageId", "PredictionString"} <= set(rows[0]):
            raise UserInputError(f"{str(path)!r} needs the columns ImageId and PredictionString (Kaggle's layout)")
        return {
            r["ImageId"]: _class_index(r["PredictionString"].split()[0], order, path)
            for r in rows
            if r["PredictionString"]
        }
    entries = [line.split() for line in lines if line.strip()]
    if entries and all(len(e) == 1 for e in entries):  # the devkit file: one ILSVRC2012 id per line
        by_id = _devkit_ids(path.parent / "meta.mat", path)
        return {f"ILSVRC2012_val_{n:08d}": order[by_id[_int(e[0], path)]] for n, e in enumerate(entries, start=1)}
    out = {}
    for e in entries:
        if len(e) != 2:
            raise UserInputError(f"{str(path)!r} line {' '.join(e)!r}; expected '<file name> <wnid or class index>'")
        out[Path(e[0]).stem] = _class_index(e[1], order, path)
    return out


def _int(text: str, path: Path) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserInputError(f"{str(path)!r} holds {text!r}; expected a class id") from None


def _class_index(label: str, order: dict[str, int], path: Path) -> int:
    if label in order:
        return order[label]
    if label.isdigit() and int(label) < len(order):
        return int(label)
    raise UserInputError(f"{str(path)!r} names class {label!r}; expected an ImageNet-1k WordNet id or index 0-999")


def _devkit_ids(meta: Path, gt: Path) -> dict[int, str]:
    """ILSVRC2012 class id -> WordNet id, from the development kit's ``meta.mat``."""
    if not meta.is_file():
        raise UserInputError(
            f"{str(gt)!r} holds ILSVRC2012 class ids; their WordNet ids are read from the development kit's "
            f"meta.mat, expected at {str(meta)!r}"
        )
    from scipy.io import loadmat

    synsets = loadmat(str(meta), squeeze_me=True)["synsets"]
    return {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets if 1 <= int(s["ILSVRC2012_ID"]) <= 1000}


@dataclass
class ImageNetScan:
    """What an ImageNet validation folder holds: image files with their class index (output order), the layout
    (``synset`` or ``flat``), the ground-truth file used, and what could not be placed."""

    paths: list[Path]
    labels: list[int]
    layout: str
    ground_truth: Path | None = None
    foreign: list[str] = field(default_factory=list)  # sub-folders that are not ImageNet-1k WordNet ids
    unlabelled: list[Path] = field(default_factory=list)  # flat-folder images the ground truth does not list


def scan_imagenet_val(root: str | Path, ground_truth: str | Path | None = None) -> ImageNetScan:
    """The images and labels of an ImageNet validation folder in either layout, without raising on gaps."""
    root = require_folder(root, "ImageNet validation folder")
    wnids = imagenet_wnids()
    subfolders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    known = set(wnids)
    if ground_truth is None and any(name in known for name in subfolders):
        paths, labels = [], []
        for index, wnid in enumerate(wnids):
            if wnid in subfolders:
                files = list_images(root / wnid)
                paths += files
                labels += [index] * len(files)
        return ImageNetScan(paths, labels, "synset", foreign=[s for s in subfolders if s not in known])
    gt = Path(ground_truth) if ground_truth is not None else find_ground_truth(root)
    files = list_images(root)
    if gt is None:
        return ImageNetScan([], [], "flat", unlabelled=files)
    table = read_ground_truth(gt, wnids)
    scan = ImageNetScan([], [], "flat", ground_truth=gt)
    for f in files:
        if f.stem in table:
            scan.paths.append(f)
            scan.labels.append(table[f.stem])
        else:
            scan.unlabelled.append(f)
    return scan


def imagenet_val_files(root: str | Path, ground_truth: str | Path | None = None) -> tuple[list[Path], torch.Tensor]:
    """Image files and class indices of an ImageNet validation folder; a one-line error when it cannot be read."""
    scan = scan_imagenet_val(root, ground_truth)
    if scan.layout == "flat" and scan.ground_truth is None:
        raise UserInputError(
            f"ImageNet folder {str(root)!r} has neither WordNet-id class folders (n01440764/...) nor a ground-truth "
            f"file ({', '.join(GROUND_TRUTH_NAMES)}) in it, its parent or the devkit's data folder"
        )
    if scan.unlabelled:
        raise UserInputError(
            f"{len(scan.unlabelled)} image(s) of {str(root)!r} are not in {str(scan.ground_truth)!r}, "
            f"e.g. {scan.unlabelled[0].name!r}"
        )
    if scan.foreign:
        raise UserInputError(f"folder(s) {scan.foreign[:5]} under {str(root)!r} are not ImageNet-1k WordNet ids")
    if not scan.paths:
        raise UserInputError(f"no images under ImageNet folder {str(root)!r}")
    return scan.paths, torch.tensor(scan.labels, dtype=torch.long)


class ImageNetValDataModule(SplitDataModule):
    """ImageNet-1k validation images (``test`` split; ``train`` / ``val`` are empty), read from disk per item.

    Args:
        data_dir: the validation folder, synset folders or flat (see the module docstring).
        ground_truth: the flat folder's ground-truth file (default: looked for by name).
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
        ground_truth: str | None = None,
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
        hp = self.hparams
        paths, labels = imagenet_val_files(hp.data_dir, hp.ground_truth)
        keep = torch.arange(len(paths))
        if hp.max_per_class is not None:
            chosen = []
            for label in range(self.num_classes):
                members = keep[labels == label]
                chosen.append(members[torch.randperm(len(members), generator=gen)[: hp.max_per_class]])
            keep = torch.cat(chosen)
        loaded = open_images([paths[i] for i in keep.tolist()], hp.image_size, desc="checking ImageNet images")
        self.num_skipped_images = loaded.num_skipped
        label = labels[keep][loaded.kept]
        self.test_set = AttributeImageDataset(loaded.images, label, torch.zeros_like(label), {"label": label})
        empty = AttributeImageDataset(
            torch.empty(0, 3, hp.image_size, hp.image_size, dtype=torch.uint8),
            torch.empty(0, dtype=torch.long),
            torch.empty(0, dtype=torch.long),
            {"label": torch.empty(0, dtype=torch.long)},
        )
        self.train_set = self.val_set = empty

    def _setup_generated(self, gen: torch.Generator) -> None:
        raise UserInputError("ImageNet has no embedded default; set data_dir to the validation folder")
