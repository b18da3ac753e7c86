"""NEMO benchmarks: a fixed set of a target's errors plus a reference database of other images.

:class:`NemoBenchmark` holds the errors (:class:`ErrorSample`: image, true class ``y``, prediction
``y_hat``), the reference database SciTX retrieves observations from (:class:`ReferenceSet`, with the
target's predictions and features), the dataset's judge criterion and, for generated data, the renderer
the exact editor re-renders with. Builders:

* :func:`build_synthetic_benchmark` / :func:`build_cmnist_benchmark` — the embedded default:
  bias-conflicting errors of a CMNIST (cause: colour) or CLEVR (cause: material) classifier on the full
  attribute grid of the test split, whose true cause is known; the rest of the grid is the reference
  database.
* :func:`~nemo_train.scoring.folder_benchmark.build_folder_benchmark` — ImageNet-R / ObjectNet / ImageNet-D style ``root/<class>/<image>``
  folders: the images the target gets wrong are sampled (``n`` per dataset, seeded), the rest plus an
  optional ImageNet subset folder form the reference database (NEMO paper, Sec. 4.1.1 and App. B.1).
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from datamodules.clevr import MaterialBias
from datamodules.cmnist import BiasSpec
from datamodules.fact_sheets import SHEETS
from datamodules.facts import DatasetFacts
from datamodules.folder import UNREADABLE, read_image
from nemo_train.errors import UserInputError
from nemo_train.models.targets import load_checkpoint_target
from nemo_train.quiet import progress_bar
from nemo_train.sharding import current_ranks


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
    #: this error's own cause (a factor name) when the generator established it by re-rendering
    cause: str | None = None


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
    _confidence: weakref.WeakKeyDictionary = field(
        default_factory=weakref.WeakKeyDictionary, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.labels)

    @torch.no_grad()
    def confidence(self, target, chunk: int = 256) -> torch.Tensor:
        """``float[N]``: ``P(label | image)`` of every reference image under ``target`` (computed once per target)."""
        if target not in self._confidence:
            probs = []
            for start in range(0, len(self), chunk):
                stop = min(start + chunk, len(self))
                p = target.predict_proba(torch.stack([self.image(i) for i in range(start, stop)])).float().cpu()
                probs.append(p.gather(1, self.labels[start:stop, None].long())[:, 0])
            self._confidence[target] = torch.cat(probs) if probs else torch.empty(0)
        return self._confidence[target]

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
    #: the dataset's fact sheet (generated data), so judges and explainers read factors and values from it
    facts: Any | None = None
    #: errors per established cause (``none`` / ``several`` counted apart) where errors have their own cause
    cause_counts: dict[str, int] | None = None

    def known_attributes(self, sample: ErrorSample) -> dict[str, str] | None:
        """The image's attributes as text (``{"color": "green", ...}``) when the fact sheet knows them."""
        if self.facts is None or sample.attrs is None:
            return None
        return self.facts.value_names(sample.attrs)


def load_image(path: str | Path, size: int = 224) -> torch.Tensor:
    """An RGB image file as float ``[3, size, size]`` in [0, 1] (shorter side resized, centre crop), read by
    the shared image-folder reader (:func:`datamodules.folder.read_image`)."""
    try:
        array = read_image(path, size, "center_crop")
    except UNREADABLE as err:
        raise UserInputError(f"cannot read image {str(path)!r}: {err}") from None
    array = array.copy()  # the reader may hand out a read-only buffer, which torch warns about
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
    """Predictions ``[N]`` and L2-normalised features ``[N, D]`` of ``target`` on images or image files.

    In a run on several processes (:func:`~nemo_train.sharding.current_ranks`) each classifies every
    ``world_size``-th batch and all receive every batch's results: the same batches, so the same numbers.
    """
    ranks = current_ranks()
    starts = list(range(0, len(images), batch_size))
    done: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    mine = ranks.shard(starts)
    for start in progress_bar(mine, desc=desc, leave=False, disable=len(mine) <= 1 or not ranks.is_main):
        chunk = images[start : start + batch_size]
        if isinstance(chunk, torch.Tensor):
            batch = chunk.float() / 255.0 if chunk.dtype == torch.uint8 else chunk.float()
        else:
            batch = torch.stack([load_image(p, image_size) for p in chunk])
        predicted, features = target.predict_and_features(batch)
        done[start] = (predicted.cpu(), torch.nn.functional.normalize(features.float(), dim=-1).cpu())
    if ranks.world_size > 1:
        done = {start: result for part in ranks.all_gather(done) for start, result in part.items()}
    return torch.cat([done[s][0] for s in starts]), torch.cat([done[s][1] for s in starts])


#: The generated datasets with a planted bias: datamodule, default bias preset (the dataset's own, as its
#: datamodule's default) and fact sheet (class attribute, cause, editable factors, distractor, object word and
#: caption are read from the sheet).
SYNTHETIC: dict[str, dict[str, Any]] = {
    "cmnist": {
        "datamodule": "datamodules.cmnist:CMNISTDataModule",
        "bias": BiasSpec.DEFAULT_PRESET,
        "facts": SHEETS["cmnist"],
    },
    "clevr": {
        "datamodule": "datamodules.clevr:CLEVRDataModule",
        "bias": MaterialBias.DEFAULT_PRESET,
        "facts": SHEETS["clevr"],
    },
}

#: Every generated benchmark, by name, and its fact sheet: the grid benchmarks above and the shifts digits, whose
#: errors have their own causes. Each is graded against its sheet (the grounded judge checks every claim about the
#: image against its attributes), and the sheet gives the Constant row and the reference explainers. Image-folder
#: benchmarks have no sheet: they are graded against their criterion (:data:`~nemo_train.scoring.criteria.CRITERIA`).
FACT_SHEETS: dict[str, DatasetFacts] = {
    **{name: spec["facts"] for name, spec in SYNTHETIC.items()},
    "shifts": SHEETS["shifts"],
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
        return {d: list(dm.bias.colors_for(d)) for d in range(dm.num_classes)}
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
    return benchmark_from_grid(
        dataset, dm, data, renderer, target, n, seed, only_conflicting, id_prefix=dataset, what=f"{dataset} grid"
    )


def benchmark_from_grid(
    dataset: str,
    dm: Any,
    data: Any,
    renderer: Any,
    target: Any,
    n: int,
    seed: int,
    only_conflicting: bool,
    id_prefix: str,
    what: str,
) -> NemoBenchmark:
    """Classify a generated attribute grid and split it into ``n`` sampled errors and the reference set.

    ``data`` is an attribute dataset of ``dm`` (uint8 images, labels, groups, attrs) rendered by ``renderer``;
    errors get ids ``<id_prefix>-<index>``; every other image is the reference database, captioned from its
    attributes. ``what`` names the grid in messages and the progress bar.
    """
    facts: DatasetFacts = SYNTHETIC[dataset]["facts"]
    vocabulary = dict(renderer.attributes)
    predictions, features = classify(target, data.images, desc=f"classifying the {what}")
    eligible = data.groups == 1 if only_conflicting else torch.ones_like(data.groups, dtype=torch.bool)
    chosen, rest = _split_errors(data.labels, predictions, eligible, n, seed)
    if len(chosen) == 0:
        kind = "bias-conflicting errors" if only_conflicting else "errors"
        raise UserInputError(f"the classifier makes no {kind} on the {what}; nothing to explain")

    def attrs_of(i: int) -> dict[str, int]:
        return {k: int(v[i]) for k, v in data.attrs.items()}

    errors = [
        ErrorSample(
            f"{id_prefix}-{int(i):05d}",
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
        captions=[facts.caption(a) for a in ref_attrs],
        attrs=ref_attrs,
        image_size=data.images.shape[-1],
    )
    cause = {
        "attribute": facts.cause,
        "values": _bias_values(dataset, dm),
        "editable": facts.editable,
        "distractor": facts.distractors[0],
        "object": facts.object_word,
    }
    return NemoBenchmark(dataset, list(dm.class_names), dataset, errors, reference, renderer, vocabulary, cause, facts)


def build_cmnist_benchmark(
    checkpoint: str | Path | None = None,
    target=None,
    n: int = 100,
    seed: int = 0,
    bias: str | None = None,
    test_styles: int = 2,
    data_dir: str | None = None,
    only_conflicting: bool = True,
) -> NemoBenchmark:
    """The embedded default: bias-conflicting errors of a CMNIST classifier (cause: colour); see
    :func:`build_synthetic_benchmark` (``bias=None``: CMNIST's default preset)."""
    return build_synthetic_benchmark(
        "cmnist", checkpoint, target, n, seed, bias, test_styles, data_dir, only_conflicting
    )
