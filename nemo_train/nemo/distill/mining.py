"""Error mining for distillation: a classifier's errors on a split strictly disjoint from the evaluation errors.

A distilled explainer is trained on explanations of errors and then scored by NEMO on *other* errors, so
the two error sets must never share an image. The evaluation errors of ``nemo-eval`` and
``NemoEvalCallback`` on generated data come from the test grid of :func:`build_synthetic_benchmark`:

* CMNIST renders its test grid from the held-out handwriting pool (``pool="test"`` of the datamodule's
  renderer); mining renders the same digit x colour x angle grid from the *training* pool, whose exemplars
  are other handwritten digits, so no mined image can equal an evaluation image.
* CLEVR renders test views with styles ``>= 2**30``; mining uses views from :data:`MINING_STYLE` (``2**29``)
  on, below that range, so no mined view is an evaluation view.

Folder data: the user names a mining folder; :func:`check_disjoint_files` refuses one that shares an image
(same bytes) with the evaluation folder.

The result is a :class:`~nemo_train.scoring.benchmark.NemoBenchmark` whose ``errors`` are the mined errors
and whose reference set is the rest of the mining grid, so SciTX and the exhaustive teacher run on it
unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Sequence
from pathlib import Path

from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import (
    SYNTHETIC,
    NemoBenchmark,
    benchmark_from_grid,
    check_classes,
)
from nemo_train.scoring.folder_benchmark import build_folder_benchmark, list_image_folder

#: First CLEVR view style of the mining grid (test views start at 2**30).
MINING_STYLE = 1 << 29


def mining_grid(dataset: str, datamodule, styles: int, seed: int = 0):
    """The mining split of a generated dataset and the renderer that re-renders it exactly.

    Returns ``(AttributeImageDataset, renderer)``: CMNIST's full grid drawn from the training handwriting
    pool (``seed`` shifts to other exemplars of that pool), CLEVR's full grid with views from
    :data:`MINING_STYLE` (+ ``seed * styles``).
    """
    datamodule.setup("fit")
    if dataset == "cmnist":
        renderer = datamodule.renderer
        data = datamodule.grid_split(renderer, styles, pool="train")
        if seed:  # other exemplars of the training pool
            attrs = dict(data.attrs)
            attrs["style"] = attrs["style"] + seed * styles
            data = datamodule._dataset(renderer, *(attrs[k] for k in ("digit", "color", "angle", "style")))
        return data, renderer
    if dataset == "clevr":
        attrs = datamodule.grid_attributes(styles, first_style=MINING_STYLE + seed * styles)
        return datamodule._generated(attrs), datamodule.renderer
    raise UserInputError(f"unknown generated dataset {dataset!r}; expected one of {sorted(SYNTHETIC)}")


def mine_synthetic_errors(
    dataset: str,
    target,
    n: int = 200,
    seed: int = 0,
    styles: int = 2,
    bias: str | dict[int, list[str]] | None = None,
    only_conflicting: bool = True,
    datamodule_kwargs: dict | None = None,
) -> NemoBenchmark:
    """Up to ``n`` errors of ``target`` on the mining grid of ``dataset`` (``cmnist`` or ``clevr``).

    Same layout as :func:`~nemo_train.scoring.benchmark.build_synthetic_benchmark` (errors, reference set of
    the rest of the grid with captions and attributes, the renderer, the known cause), on a split that
    shares no image with it. Sample ids start with ``mine-``.
    """
    if dataset not in SYNTHETIC:
        raise UserInputError(f"unknown generated dataset {dataset!r}; expected one of {sorted(SYNTHETIC)}")
    if n < 1 or styles < 1:
        raise UserInputError(f"n={n}, styles={styles}; each must be at least 1")
    spec = SYNTHETIC[dataset]
    module_name, class_name = spec["datamodule"].split(":")
    datamodule_cls = getattr(importlib.import_module(module_name), class_name)
    kwargs = {"train_size": 12, "test_styles": 1, **(datamodule_kwargs or {})}
    dm = datamodule_cls(data_dir=None, bias=bias or spec["bias"], **kwargs)
    data, renderer = mining_grid(dataset, dm, styles, seed)
    check_classes(target, len(dm.class_names), f"the {dataset} mining grid", data.images[:1].float() / 255.0)
    return benchmark_from_grid(
        dataset,
        dm,
        data,
        renderer,
        target,
        n,
        seed,
        only_conflicting,
        id_prefix=f"mine-{dataset}",
        what=f"{dataset} mining grid",
    )


def file_digests(paths: Sequence[str | Path]) -> dict[str, str]:
    """SHA-1 of each file's bytes -> path."""
    return {hashlib.sha1(Path(p).read_bytes()).hexdigest(): str(p) for p in paths}


def check_disjoint_files(mining_root: str | Path, evaluation_root: str | Path) -> None:
    """Refuse a mining folder that shares an image file (same bytes) with the evaluation folder."""
    if Path(mining_root).resolve() == Path(evaluation_root).resolve():
        raise UserInputError(f"the mining folder {str(mining_root)!r} is the evaluation folder; give a disjoint split")
    _, mining, _ = list_image_folder(mining_root)
    _, evaluation, _ = list_image_folder(evaluation_root)
    shared = set(file_digests(mining)) & set(file_digests(evaluation))
    if shared:
        raise UserInputError(
            f"{len(shared)} image(s) of the mining folder {str(mining_root)!r} are also in the evaluation folder "
            f"{str(evaluation_root)!r}; distillation must not see the errors it is evaluated on"
        )


def mine_folder_errors(
    name: str,
    mining_root: str | Path,
    evaluation_root: str | Path,
    target,
    criterion: str,
    n: int = 400,
    seed: int = 0,
    class_folders: Sequence[str] | None = None,
    image_size: int = 224,
) -> NemoBenchmark:
    """Errors of ``target`` on a user's mining folder, checked disjoint from ``evaluation_root`` first."""
    check_disjoint_files(mining_root, evaluation_root)
    return build_folder_benchmark(
        name, mining_root, target, criterion, n=n, seed=seed, class_folders=class_folders, image_size=image_size
    )
