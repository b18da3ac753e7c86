"""NEMO benchmarks from image folders (ImageNet-R / ObjectNet style ``root/<class>/<image>``; ImageNet-D's
``root/<nuisance>/<class>/<image>`` is read as one folder per class across its nuisance folders).

The images the target gets wrong are sampled (``n`` per dataset, seeded); the rest, plus an optional
ImageNet folder, form the reference database (NEMO paper, Sec. 4.1.1 and App. B.1). Images are read from disk
when needed, never all at once.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from datamodules.folder import (
    IMAGE_EXTENSIONS,
    class_folder_names,
    class_roots,
    list_images,
    readable_paths,
    subfolders,
)
from datamodules.imagenet import imagenet_val_files, imagenet_wnids
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import (
    ErrorSample,
    NemoBenchmark,
    ReferenceSet,
    _split_errors,
    check_classes,
    classify,
    load_image,
)


def list_image_folder(
    root: str | Path, class_names: Sequence[str] | None = None, subset: bool = False
) -> tuple[list[str], list[str], torch.Tensor]:
    """``root/<class>/<image>`` -> (class folder names, image paths, labels); classes sorted by folder name.

    With ``class_names`` the labels follow that order; every class must have a folder unless ``subset``
    (an ImageNet reference subset may cover only some classes, but no foreign ones). Folders that are no
    class of ``class_names`` are left out (ObjectNet's 200 classes outside ImageNet).
    """
    root = Path(root)
    if not root.is_dir():
        raise UserInputError(f"dataset folder {str(root)!r} does not exist")
    roots = class_roots(root)
    folders = class_folder_names(root)
    if class_names is not None:
        missing = [c for c in class_names if c not in folders]
        foreign = [f for f in folders if f not in class_names]
        if missing and not subset:
            raise UserInputError(f"class folder(s) {missing[:5]} missing under {str(root)!r}")
        if foreign and subset:
            raise UserInputError(f"folder(s) {foreign[:5]} under {str(root)!r} are not classes of the benchmark")
        folders = list(class_names)
    paths, labels = [], []
    for k, name in enumerate(folders):
        for r in roots:
            if (r / name).is_dir():
                files = list_images(r / name)
                paths += [str(p) for p in files]
                labels += [k] * len(files)
    if not paths:
        raise UserInputError(f"no images ({', '.join(IMAGE_EXTENSIONS[:5])}) under {str(root)!r}/<class>/")
    return folders, paths, torch.tensor(labels)


#: Optional metadata of an image folder: one row per image, ``image`` (path relative to the folder) and ``cause``
#: (the factor that caused the classifier's error on it, where the dataset knows it per image).
CAUSES_FILE = "causes.csv"


def read_causes(root: str | Path) -> dict[str, str]:
    """``{image path: cause}`` from ``<root>/causes.csv`` (empty when the folder has no such file)."""
    path = Path(root) / CAUSES_FILE
    if not path.is_file():
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UserInputError(f"cannot read {str(path)!r}: {err}") from None
    if rows and not {"image", "cause"} <= set(rows[0]):
        raise UserInputError(f"{str(path)!r} needs the columns image and cause; got {sorted(rows[0])}")
    return {
        str((Path(root) / r["image"]).resolve()): r["cause"].strip() for r in rows if (r.get("cause") or "").strip()
    }


def build_folder_benchmark(
    name: str,
    root: str | Path,
    target,
    criterion: str,
    n: int = 400,
    seed: int = 0,
    class_folders: Sequence[str] | None = None,
    extra_reference: str | Path | None = None,
    image_size: int = 224,
    batch_size: int = 64,
    captioner: Callable[[torch.Tensor], str] | None = None,
    imagenet_ids: Sequence[Sequence[int]] | None = None,
) -> NemoBenchmark:
    """A benchmark from an image-folder dataset (ImageNet-R, ObjectNet, ImageNet-D).

    The target (whose classes must follow ``class_folders`` order, e.g. through a
    :class:`~nemo_train.models.targets.ClassMapping`) classifies every image; ``n`` misclassified ones
    are sampled with ``seed``; the others, plus ``extra_reference``, form the reference database.
    ``extra_reference`` is an ImageNet validation folder as distributed (WordNet-id class folders, all or some,
    or the flat folder with its ground-truth file; :mod:`datamodules.imagenet`), whose images count for the
    benchmark class whose ``imagenet_ids`` hold their label (others are left out), or a folder with the
    benchmark's own class folders. Captions are made later, on retrieval. The benchmark keeps
    its paper-level factor (``criterion``); a folder that knows each image's own cause carries it in
    :data:`CAUSES_FILE`, and each error keeps it (judges then grade against it).
    """
    folders, paths, labels = list_image_folder(root, class_folders)
    # unreadable files are left out with one warning, as the folder datamodules do
    kept, _ = readable_paths(paths, desc=f"checking {name} images")
    paths, labels = [paths[i] for i in kept], labels[kept]
    if len(target.class_names) != len(folders):
        raise UserInputError(
            f"the target has {len(target.class_names)} classes but {str(root)!r} has {len(folders)} class folders"
        )
    check_classes(target, len(folders), repr(str(root)), load_image(paths[0], image_size)[None])
    predictions, features = classify(target, paths, batch_size, image_size, desc=f"classifying {name}")
    chosen, rest = _split_errors(labels, predictions, torch.ones_like(labels, dtype=torch.bool), n, seed)
    causes = read_causes(root)
    errors = [
        ErrorSample(
            "-".join([name, *Path(paths[i]).relative_to(root).parent.parts, Path(paths[i]).stem]),
            load_image(paths[i], image_size),
            int(labels[i]),
            int(predictions[i]),
            path=paths[i],
            cause=causes.get(str(Path(paths[i]).resolve())),
        )
        for i in chosen.tolist()
    ]
    ref_paths = [paths[i] for i in rest.tolist()]
    ref_labels, ref_preds, ref_feats = labels[rest], predictions[rest], features[rest]
    if extra_reference is not None:
        extra_paths, extra_labels = reference_files(extra_reference, folders, imagenet_ids)
        kept, _ = readable_paths(extra_paths, desc="checking the reference images")
        extra_paths, extra_labels = [extra_paths[i] for i in kept], extra_labels[kept]
        extra_preds, extra_feats = classify(
            target, extra_paths, batch_size, image_size, desc="classifying the reference subset"
        )
        ref_paths += extra_paths
        ref_labels, ref_preds = torch.cat([ref_labels, extra_labels]), torch.cat([ref_preds, extra_preds])
        ref_feats = torch.cat([ref_feats, extra_feats])
    reference = ReferenceSet(ref_paths, ref_labels, ref_preds, ref_feats, image_size=image_size)
    return NemoBenchmark(name, list(target.class_names), criterion, errors, reference)


def reference_files(
    folder: str | Path, class_folders: Sequence[str], imagenet_ids: Sequence[Sequence[int]] | None = None
) -> tuple[list[str], torch.Tensor]:
    """Image paths and benchmark labels of an extra reference folder (see :func:`build_folder_benchmark`).

    Without ``imagenet_ids``, class folders that are WordNet ids (ImageNet-R) map to their own index."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserInputError(f"reference folder {str(folder)!r} does not exist")
    wnids = {w: i for i, w in enumerate(imagenet_wnids())}
    if imagenet_ids is None and all(c in wnids for c in class_folders):
        imagenet_ids = [[wnids[c]] for c in class_folders]
    subs = [p.name for p in subfolders(folder)]
    imagenet_layout = not subs or any(s in wnids for s in subs)
    if imagenet_ids is None or not imagenet_layout:
        _, paths, labels = list_image_folder(folder, class_folders, subset=True)
        return paths, labels
    owner = {int(i): k for k, group in enumerate(imagenet_ids) for i in group}
    files, indices = imagenet_val_files(folder)
    chosen = [(str(f), owner[int(i)]) for f, i in zip(files, indices.tolist()) if int(i) in owner]
    if not chosen:
        raise UserInputError(f"no image of reference folder {str(folder)!r} belongs to a class of the benchmark")
    return [c[0] for c in chosen], torch.tensor([c[1] for c in chosen], dtype=torch.long)
