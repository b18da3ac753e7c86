"""``nemo-train prepare``: check a data folder against what a dataset needs and say exactly what is missing.

Nothing is downloaded or moved: the check lists the folder, counts images against the published numbers,
reads the files a run will read (ground truth, attributes, the shipped class mapping) and opens a sample of the
images (up to :data:`SAMPLE_IMAGES`, spread over the folder, checked with PIL's ``verify``): a file named
``.jpg`` that is no image is a problem, not a count. Each problem is one line; the command exits with status 2
when there is any, 0 when the folder is ready.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from datamodules.folder import class_folder_names, class_roots, list_images
from datamodules.mappings import objectnet_folders, read_mapping, shipped_mapping
from nemo_train.errors import UserInputError

DatasetName = Literal["imagenet_r", "imagenet_d", "objectnet", "imagenet_val", "nico", "clevr"]
#: Published sizes: (class folders, images) of the full datasets.
PUBLISHED = {"imagenet_r": (200, 30_000), "objectnet": (313, 50_000), "imagenet_val": (1000, 50_000)}
IMAGENET_D_GROUPS = ("background", "texture", "material")


#: Images opened per check, spread evenly over the sorted list of image files.
SAMPLE_IMAGES = 200


def _few(items: list[str], k: int = 5) -> str:
    return ", ".join(items[:k]) + (f", ... ({len(items)} in all)" if len(items) > k else "")


def unreadable_images(files: list[Path], root: Path, sample: int = SAMPLE_IMAGES) -> list[str]:
    """One problem line when any of a sample of ``files`` (evenly spread) is no image PIL can read; else ``[]``."""
    from PIL import Image

    step = max(1, -(-len(files) // sample))  # ceil: at most ``sample`` files
    picked, bad = files[::step], []
    for path in picked:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as err:  # PIL raises many types for a file that is no image (or a cut one)
            reason = " ".join(str(err).split())[:80] or type(err).__name__
            bad.append(f"{path.relative_to(root) if path.is_relative_to(root) else path} ({reason})")
    if not bad:
        return []
    return [f"{len(bad)} of {len(picked)} sampled image files are not readable images: {_few(bad, 3)}"]


def imagenet_r_wnids() -> list[str]:
    """ImageNet-R's 200 WordNet ids (timm's list of the subset)."""
    import timm.data

    path = Path(timm.data.__file__).parent / "_info" / "imagenet_r_synsets.txt"
    return path.read_text(encoding="utf-8").split()


def _check_class_folders(root: Path, expected: list[str], images: int | None, what: str) -> tuple[list[str], str]:
    problems = []
    found = class_folder_names(root)
    missing = [c for c in expected if c not in found]
    if missing:
        problems.append(f"missing class folder(s) under {str(root)!r}: {_few(missing)}")
    empty = [
        c for c in expected if c in found and not any(list_images(r / c) for r in class_roots(root) if (r / c).is_dir())
    ]
    if empty:
        problems.append(f"class folder(s) without images: {_few(empty)}")
    files = [f for r in class_roots(root) for c in found if (r / c).is_dir() for f in list_images(r / c)]
    count = len(files)
    if images is not None and count < images:
        problems.append(f"found {count:,} images in {len(found)} class folders; expected {images:,} in {len(expected)}")
    problems += unreadable_images(files, root)
    return problems, f"{what}: {count:,} images in {len(found)} class folders"


def _check_mapping(name: str) -> list[str]:
    path = shipped_mapping(name)
    if path is None or not path.is_file():
        return [f"the shipped class mapping of {name} is missing (expected {str(path)!r}); reinstall nemo-train"]
    try:
        read_mapping(path)
    except UserInputError as err:
        return [str(err)]
    return []


def _check_imagenet_val(root: Path, ground_truth: str | None, reference_for: str | None) -> tuple[list[str], str]:
    from datamodules.imagenet import GROUND_TRUTH_NAMES, imagenet_wnids, scan_imagenet_val

    wnids = imagenet_wnids()
    if reference_for is None:
        wanted = list(range(len(wnids)))
    elif reference_for == "imagenet_r":
        wanted = sorted(wnids.index(w) for w in imagenet_r_wnids())
    else:
        path = shipped_mapping(reference_for)
        if path is None:
            raise UserInputError(f"reference_for={reference_for!r}; expected imagenet_r, objectnet or imagenet_d")
        wanted = sorted({i for c in read_mapping(path) for i in c.imagenet_ids})
    try:
        scan = scan_imagenet_val(root, ground_truth)
    except UserInputError as err:
        return [str(err)], "ImageNet validation folder unreadable"
    problems = []
    if scan.layout == "flat" and scan.ground_truth is None:
        problems.append(
            f"no WordNet-id class folders (n01440764/...) and no ground-truth file ({', '.join(GROUND_TRUTH_NAMES)}) "
            f"in {str(root)!r}, its parent or <parent>/ILSVRC2012_devkit_t12/data"
        )
    if scan.unlabelled and scan.ground_truth is not None:
        problems.append(f"{len(scan.unlabelled):,} image(s) not listed in {str(scan.ground_truth)!r}")
    if scan.foreign:
        problems.append(f"folder(s) that are no ImageNet-1k WordNet id: {_few(scan.foreign)}")
    per_class = {i: 0 for i in wanted}
    for label in scan.labels:
        if label in per_class:
            per_class[label] += 1
    absent = [wnids[i] for i, n in per_class.items() if n == 0]
    if absent and not (scan.layout == "flat" and scan.ground_truth is None):
        problems.append(f"no images of {len(absent)} of the {len(wanted)} classes needed: {_few(absent)}")
    short = [f"{wnids[i]} ({n} of 50)" for i, n in per_class.items() if 0 < n < 50]
    if short:
        problems.append(f"{len(short)} class(es) hold fewer than their 50 validation images: {_few(short, 3)}")
    found = sum(per_class.values())
    expected = 50 * len(wanted)
    if found < expected:
        problems.append(f"found {found:,} validation images of the {len(wanted)} classes needed; expected {expected:,}")
    return problems, f"ImageNet validation ({scan.layout} layout): {found:,} images of the {len(wanted)} classes needed"


def _check_imagenet_d(root: Path) -> tuple[list[str], str]:
    classes = [c.folder for c in read_mapping(shipped_mapping("imagenet_d"))]
    problems = _check_mapping("imagenet_d")
    groups = [g for g in IMAGENET_D_GROUPS if (root / g).is_dir()]
    if not groups and class_roots(root) == [root] and not set(class_folder_names(root)) & set(classes):
        problems.append(f"no nuisance folder ({', '.join(IMAGENET_D_GROUPS)}) under {str(root)!r}")
        return problems, "ImageNet-D: nothing found"
    found = class_folder_names(root)
    foreign = [f for f in found if f not in classes]
    if foreign:
        problems.append(f"class folder(s) that are no ImageNet-D class: {_few(foreign)}")
    missing = [c for c in classes if c not in found]
    if missing:
        problems.append(f"ImageNet-D class(es) without a folder in any nuisance folder: {_few(missing)}")
    files = [f for r in class_roots(root) for c in found if (r / c).is_dir() for f in list_images(r / c)]
    count = len(files)
    if count == 0:
        problems.append(f"no images under {str(root)!r}/<nuisance>/<class>/")
    problems += unreadable_images(files, root)
    where = ", ".join(p.name for p in class_roots(root))
    return problems, f"ImageNet-D ({where}): {count:,} images in {len(found)} class folders"


def _check_nico(root: Path) -> tuple[list[str], str]:
    from datamodules.nico import CONTEXT_FOLDERS
    from datamodules.nico_render import CLASSES, CONTEXTS

    problems, found = [], []
    for context in CONTEXTS:
        folder = next((root / n for n in CONTEXT_FOLDERS[context] if (root / n).is_dir()), None)
        if folder is None:
            problems.append(
                f"missing context folder {context!r} (accepted names: {', '.join(CONTEXT_FOLDERS[context])})"
            )
            continue
        for name in CLASSES:
            files = list_images(folder / name) if (folder / name).is_dir() else None
            if files is None:
                problems.append(f"missing folder {str(folder / name)!r}")
            elif not files:
                problems.append(f"no images in {str(folder / name)!r}")
            else:
                found += files
    problems += unreadable_images(found, root)
    return problems, f"NICO++: {len(found):,} images in the {len(CLASSES)} x {len(CONTEXTS)} class/context cells"


def _check_clevr(root: Path) -> tuple[list[str], str]:
    from datamodules.clevr import read_attribute_records

    try:
        records = read_attribute_records(root)
    except UserInputError as err:
        return [str(err)], "CLEVR renders: no readable attributes.json"
    missing = [str(Path(r["path"]).relative_to(root)) for r in records if not Path(r["path"]).is_file()]
    problems = [
        f"{len(missing):,} of {len(records):,} images listed in attributes.json are missing: {_few(missing, 3)}"
    ]
    present = [Path(r["path"]) for r in records if Path(r["path"]).is_file()]
    problems = (problems if missing else []) + unreadable_images(present, root)
    return problems, f"CLEVR renders: {len(records) - len(missing):,} images with attributes"


def check_data(
    dataset: DatasetName, root: str | Path, ground_truth: str | None = None, reference_for: str | None = None
) -> tuple[list[str], str]:
    """``(problems, summary)`` of ``root`` for ``dataset``: one line per problem, empty when it is ready."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return [f"data folder {str(root)!r} does not exist"], f"{dataset}: nothing found"
    if dataset == "imagenet_r":
        return _check_class_folders(root, imagenet_r_wnids(), PUBLISHED[dataset][1], "ImageNet-R")
    if dataset == "objectnet":
        problems, summary = _check_class_folders(root, sorted(objectnet_folders()), PUBLISHED[dataset][1], "ObjectNet")
        return _check_mapping("objectnet") + problems, summary
    if dataset == "imagenet_d":
        return _check_imagenet_d(root)
    if dataset == "imagenet_val":
        return _check_imagenet_val(root, ground_truth, reference_for)
    if dataset == "nico":
        return _check_nico(root)
    if dataset == "clevr":
        return _check_clevr(root)
    raise UserInputError(f"unknown dataset {dataset!r}; expected one of {list(DatasetName.__args__)}")


def prepare(dataset: DatasetName, root: str, ground_truth: str | None = None, reference_for: str | None = None) -> int:
    """Check a data folder for a dataset and print exactly what is missing, one line per problem.

    Args:
        dataset: ``imagenet_r``, ``imagenet_d`` (``root/<nuisance>/<class>/``), ``objectnet`` (``images/`` folder),
            ``imagenet_val`` (the ImageNet validation folder: WordNet-id folders, or flat with its ground truth),
            ``nico`` (``root/<context>/<class>/``) or ``clevr`` (renders with ``attributes.json``).
        root: the data folder.
        ground_truth: ``imagenet_val`` only: the flat folder's ground-truth file (default: looked for by name).
        reference_for: ``imagenet_val`` only: check just the ImageNet classes a benchmark's reference images
            need (``imagenet_r``, ``objectnet``, ``imagenet_d``) instead of all 1,000.

    Returns 0 when the folder is ready; otherwise a one-line error (exit status 2) follows the problem lines.
    """
    problems, summary = check_data(dataset, root, ground_truth, reference_for)
    print(summary)
    for line in problems:
        print(f"missing: {line}")
    if problems:
        raise UserInputError(f"{dataset} data in {root!r} is not ready: {len(problems)} problem(s) listed above")
    print(f"ready: {dataset} in {root}")
    return 0
