"""NEMO benchmarks: a fixed set of a target's errors plus a reference database of other images.

:class:`NemoBenchmark` holds the errors (:class:`ErrorSample`: image, true class ``y``, prediction
``y_hat``), the reference database SciTX retrieves observations from (:class:`ReferenceSet`, with the
target's predictions and features), the dataset's judge criterion and, for generated data, the renderer
the exact editor re-renders with. Builders:

* :func:`build_synthetic_benchmark` / :func:`build_cmnist_benchmark` — the embedded default:
  bias-conflicting errors of a CMNIST (cause: colour) or CLEVR (cause: material) classifier on the full
  attribute grid of the test split, whose true cause is known; the rest of the grid is the reference
  database.
* :func:`build_folder_benchmark` — ImageNet-R / ObjectNet / ImageNet-D style ``root/<class>/<image>``
  folders: the images the target gets wrong are sampled (``n`` per dataset, seeded), the rest plus an
  optional ImageNet subset folder form the reference database (NEMO paper, Sec. 4.1.1 and App. B.1).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from datamodules.folder import IMAGE_EXTENSIONS, UNREADABLE, list_images, read_image, readable_paths
from nemo_train.errors import UserInputError
from nemo_train.nemo.targets import load_checkpoint_target
from nemo_train.quiet import progress_bar

IMAGE_SUFFIXES = IMAGE_EXTENSIONS  # the shared image-folder reader's extensions (any case)


@dataclass
class ErrorSample:
    """One misclassified image: ``image`` float ``[3, H, W]`` in [0, 1], true ``label``, ``prediction``.

    ``attrs`` are generator attributes (synthetic data only) and ``path`` the image file (folders only).
    """

    sample_id: str
    image: torch.Tensor = field(repr=False)
    label: int
    prediction: int
    attrs: dict[str, Any] | None = None
    path: str | None = None


@dataclass
class ReferenceSet:
    """The reference database: images (a ``uint8``/float tensor or file paths), labels, the target's
    predictions and L2-normalised features, and a caption per image where one is known up front."""

    images: torch.Tensor | list[str] = field(repr=False)
    labels: torch.Tensor
    predictions: torch.Tensor
    features: torch.Tensor = field(repr=False)
    captions: list[str] | None = None
    attrs: list[dict[str, Any]] | None = None
    image_size: int = 224

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def correct(self) -> torch.Tensor:
        """``bool[N]``: the target classifies the reference image correctly."""
        return self.predictions == self.labels

    def image(self, index: int) -> torch.Tensor:
        """Reference image ``index`` as float ``[3, H, W]`` in [0, 1]."""
        if isinstance(self.images, torch.Tensor):
            image = self.images[index]
            return image.float() / 255.0 if image.dtype == torch.uint8 else image
        return load_image(self.images[index], self.image_size)


@dataclass
class NemoBenchmark:
    """Errors, reference database, class names, judge criterion and (for generated data) the renderer."""

    name: str
    class_names: list[str]
    criterion: str
    errors: list[ErrorSample]
    reference: ReferenceSet
    renderer: Any | None = None
    vocabulary: dict[str, list] | None = None
    #: the known cause on generated data: ``{"attribute": "color", "values": {class: [bias-aligned values]},
    #: "editable": [...], "distractor": "angle", "object": "digit"}``
    cause: dict[str, Any] | None = None


def load_image(path: str | Path, size: int = 224) -> torch.Tensor:
    """An RGB image file as float ``[3, size, size]`` in [0, 1] (shorter side resized, centre crop), read by
    the shared image-folder reader (:func:`datamodules.folder.read_image`)."""
    try:
        array = read_image(path, size, "center_crop")
    except UNREADABLE as err:
        raise UserInputError(f"cannot read image {str(path)!r}: {err}") from None
    return torch.from_numpy(array).permute(2, 0, 1).float().div_(255.0)


def _split_errors(
    labels: torch.Tensor, predictions: torch.Tensor, eligible: torch.Tensor, n: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of ``n`` sampled errors among eligible misclassified items, and of everything else."""
    wrong = torch.nonzero((predictions != labels) & eligible).flatten()
    order = wrong[torch.randperm(len(wrong), generator=torch.Generator().manual_seed(seed))]
    chosen = order[:n].sort().values
    rest = torch.ones(len(labels), dtype=torch.bool)
    rest[chosen] = False
    return chosen, torch.nonzero(rest).flatten()


@torch.no_grad()
def classify(
    target,
    images: torch.Tensor | Sequence[str],
    batch_size: int = 256,
    image_size: int = 224,
    desc: str = "classifying",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predictions ``[N]`` and L2-normalised features ``[N, D]`` of ``target`` on images or image files."""
    preds, feats = [], []
    n = len(images)
    for start in progress_bar(range(0, n, batch_size), desc=desc, leave=False, disable=n <= batch_size):
        chunk = images[start : start + batch_size]
        if isinstance(chunk, torch.Tensor):
            batch = chunk.float() / 255.0 if chunk.dtype == torch.uint8 else chunk.float()
        else:
            batch = torch.stack([load_image(p, image_size) for p in chunk])
        preds.append(target.predict(batch).cpu())
        feats.append(torch.nn.functional.normalize(target.features(batch).float(), dim=-1).cpu())
    return torch.cat(preds), torch.cat(feats)


def cmnist_caption(attrs: dict[str, Any], vocabulary: dict[str, list]) -> str:
    """A caption of a CMNIST image from its generator attributes (``"a red digit 3, rotated -10 degrees"``)."""
    color = vocabulary["color"][int(attrs["color"])]
    angle = int(attrs["angle"])
    pose = "upright" if angle == 0 else f"rotated {angle} degrees"
    return f"a {color} digit {int(attrs['digit'])}, {pose}"


def clevr_caption(attrs: dict[str, Any], vocabulary: dict[str, list]) -> str:
    """A caption of a CLEVR image from its attributes (``"a small red metal cube"``)."""
    return " ".join(["a"] + [vocabulary[k][int(attrs[k])] for k in ("size", "color", "material", "shape")])


#: The generated datasets with a planted bias: datamodule, class attribute, cause, editable attributes.
SYNTHETIC: dict[str, dict[str, Any]] = {
    "cmnist": {
        "datamodule": "datamodules.cmnist:CMNISTDataModule",
        "bias": "model_a",
        "class_attribute": "digit",
        "cause": "color",
        "editable": ("color", "angle"),
        "distractor": "angle",
        "object": "digit",
        "caption": cmnist_caption,
    },
    "clevr": {
        "datamodule": "datamodules.clevr:CLEVRDataModule",
        "bias": "rubber",
        "class_attribute": "shape",
        "cause": "material",
        "editable": ("material", "color", "size"),
        "distractor": "size",
        "object": "object",
        "caption": clevr_caption,
    },
}


def check_classes(target, num_classes: int, where: str, probe: torch.Tensor) -> None:
    """A one-line error when the target's output has another number of classes than the benchmark."""
    outputs = int(target.predict_proba(probe).shape[-1])
    if outputs != num_classes:
        raise UserInputError(
            f"the target classifies into {outputs} classes but {where} has {num_classes}; "
            "expected a classifier trained on this benchmark's classes"
        )


def _bias_values(name: str, dm) -> dict[int, list[str]]:
    """Per class, the values of the cause attribute the class had in training (the bias-aligned ones)."""
    if name == "cmnist":
        return {d: list(dm.bias.colors_for(d)) for d in range(10)}
    favoured = dm.bias.favoured_material
    return {k: [favoured] if favoured else [] for k in range(dm.num_classes)}


def build_synthetic_benchmark(
    dataset: str = "cmnist",
    checkpoint: str | Path | None = None,
    target=None,
    n: int = 100,
    seed: int = 0,
    bias: str | None = None,
    test_styles: int = 2,
    data_dir: str | None = None,
    only_conflicting: bool = True,
    datamodule_kwargs: dict[str, Any] | None = None,
) -> NemoBenchmark:
    """Bias-conflicting errors of a classifier on a generated dataset whose true cause is known.

    ``dataset`` is ``cmnist`` (cause: colour) or ``clevr`` (cause: material). ``checkpoint`` is a
    ``ClassifierModule`` checkpoint (or pass a ready ``target``). The full attribute grid of the test split
    (``test_styles`` exemplars / views per cell) is classified; ``n`` misclassified bias-conflicting
    samples are drawn with ``seed``; every other grid image is the reference database, captioned from its
    attributes. The benchmark keeps the renderer, so edits are exact re-renders.
    """
    if dataset not in SYNTHETIC:
        raise UserInputError(f"unknown generated dataset {dataset!r}; expected one of {sorted(SYNTHETIC)}")
    spec = SYNTHETIC[dataset]
    if n < 1:
        raise UserInputError(f"n={n}; expected at least one error to sample")
    if target is None:
        if checkpoint is None:
            raise UserInputError(f"the {dataset} benchmark needs a classifier checkpoint or a target")
        target = load_checkpoint_target(checkpoint)
    module_name, class_name = spec["datamodule"].split(":")
    datamodule_cls = getattr(importlib.import_module(module_name), class_name)
    dm = datamodule_cls(
        data_dir=data_dir,
        bias=bias or spec["bias"],
        test_styles=test_styles,
        train_size=12,
        **(datamodule_kwargs or {}),
    )
    dm.setup("test")
    data = dm.test_set
    check_classes(target, len(dm.class_names), f"the {dataset} benchmark", data.images[:1].float() / 255.0)
    renderer = getattr(dm, "test_renderer", None) or dm.renderer
    if renderer is None:
        raise UserInputError(
            f"the {dataset} data in {data_dir!r} are not generated; the exact editor needs the embedded renderer"
        )
    vocabulary = dict(renderer.attributes)
    predictions, features = classify(target, data.images, desc=f"classifying the {dataset} grid")
    eligible = data.groups == 1 if only_conflicting else torch.ones_like(data.groups, dtype=torch.bool)
    chosen, rest = _split_errors(data.labels, predictions, eligible, n, seed)
    if len(chosen) == 0:
        raise UserInputError(
            f"the classifier makes no bias-conflicting errors on the {dataset} grid; nothing to explain"
        )

    def attrs_of(i: int) -> dict[str, int]:
        return {k: int(v[i]) for k, v in data.attrs.items()}

    errors = [
        ErrorSample(
            f"{dataset}-{int(i):05d}",
            data.images[i].float() / 255.0,
            int(data.labels[i]),
            int(predictions[i]),
            attrs_of(int(i)),
        )
        for i in chosen
    ]
    ref_attrs = [attrs_of(int(i)) for i in rest]
    reference = ReferenceSet(
        images=data.images[rest],
        labels=data.labels[rest],
        predictions=predictions[rest],
        features=features[rest],
        captions=[spec["caption"](a, vocabulary) for a in ref_attrs],
        attrs=ref_attrs,
        image_size=data.images.shape[-1],
    )
    cause = {
        "attribute": spec["cause"],
        "values": _bias_values(dataset, dm),
        "editable": list(spec["editable"]),
        "distractor": spec["distractor"],
        "object": spec["object"],
    }
    return NemoBenchmark(dataset, list(dm.class_names), dataset, errors, reference, renderer, vocabulary, cause)


def build_cmnist_benchmark(
    checkpoint: str | Path | None = None,
    target=None,
    n: int = 100,
    seed: int = 0,
    bias: str = "model_a",
    test_styles: int = 2,
    data_dir: str | None = None,
    only_conflicting: bool = True,
) -> NemoBenchmark:
    """The embedded default: bias-conflicting errors of a CMNIST classifier (cause: colour); see
    :func:`build_synthetic_benchmark`."""
    return build_synthetic_benchmark(
        "cmnist", checkpoint, target, n, seed, bias, test_styles, data_dir, only_conflicting
    )


def list_image_folder(
    root: str | Path, class_names: Sequence[str] | None = None, subset: bool = False
) -> tuple[list[str], list[str], torch.Tensor]:
    """``root/<class>/<image>`` -> (class folder names, image paths, labels); classes sorted by folder name.

    With ``class_names`` the labels follow that order; every class must have a folder unless ``subset``
    (an ImageNet reference subset may cover only some classes, but no foreign ones).
    """
    root = Path(root)
    if not root.is_dir():
        raise UserInputError(f"dataset folder {str(root)!r} does not exist")
    folders = sorted(p.name for p in root.iterdir() if p.is_dir())
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
        if not (root / name).is_dir():
            continue
        files = list_images(root / name)
        paths += [str(p) for p in files]
        labels += [k] * len(files)
    if not paths:
        raise UserInputError(f"no images ({', '.join(IMAGE_SUFFIXES[:5])}) under {str(root)!r}/<class>/")
    return folders, paths, torch.tensor(labels)


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
) -> NemoBenchmark:
    """A benchmark from an image-folder dataset (ImageNet-R, ObjectNet, ImageNet-D).

    The target (whose classes must follow ``class_folders`` order, e.g. through a
    :class:`~nemo_train.nemo.targets.ClassMapping`) classifies every image; ``n`` misclassified ones
    are sampled with ``seed``; the others, plus ``extra_reference`` (an ImageNet subset laid out with the
    same class folders), form the reference database. Captions are made later, on retrieval.
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
    errors = [
        ErrorSample(
            f"{name}-{Path(paths[i]).parent.name}-{Path(paths[i]).stem}",
            load_image(paths[i], image_size),
            int(labels[i]),
            int(predictions[i]),
            path=paths[i],
        )
        for i in chosen.tolist()
    ]
    ref_paths = [paths[i] for i in rest.tolist()]
    ref_labels, ref_preds, ref_feats = labels[rest], predictions[rest], features[rest]
    if extra_reference is not None:
        _, extra_paths, extra_labels = list_image_folder(extra_reference, folders, subset=True)
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
