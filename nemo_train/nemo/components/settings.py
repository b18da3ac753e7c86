"""Grouped settings of a NEMO evaluation: which benchmark, and how the run is kept and reported."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from jsonargparse.typing import PositiveInt

from nemo_train.errors import UserInputError
from nemo_train.models.targets import ClassMapping
from nemo_train.scoring.benchmark import NemoBenchmark, build_synthetic_benchmark
from nemo_train.scoring.folder_benchmark import build_folder_benchmark
from nemo_train.scoring.shift_benchmark import build_shift_benchmark

BenchmarkName = Literal["cmnist", "clevr", "shifts", "imagenet_r", "objectnet", "imagenet_d"]
SYNTHETIC_BENCHMARKS = ("cmnist", "clevr", "shifts")


@dataclass(frozen=True)
class BenchmarkArgs:
    """Which errors are explained.

    Args:
        name: ``cmnist`` (embedded default), ``clevr`` (generated), ``shifts`` (generated digits whose errors
            each have their own cause, established by re-rendering), or the image folders ``imagenet_r`` /
            ``objectnet`` / ``imagenet_d``.
        gaps: ``shifts`` only: the gap preset of the classifier's training data (``gaps_a``, ``gaps_b``); its
            training-like images are the reference database.
        n: errors sampled per target (drawn with the command's ``seed``).
        test_styles: generated data only: exemplars / views per cell of the test attribute grid.
        data_kwargs: generated data only: extra datamodule arguments (e.g. ``{image_size: 32}`` for CLEVR).
        data_root: image folder of a real benchmark (``<root>/<class>/<image>``).
        reference_root: more reference images: an ImageNet validation folder as distributed (WordNet-id folders,
            or flat with its ground-truth file) or a folder with the benchmark's class folders.
        mapping_file: class mapping JSON ``{class: [imagenet ids]}`` (default: the shipped ObjectNet / ImageNet-D
            mapping; ImageNet-R folders map by WordNet id).
    """

    name: BenchmarkName = "cmnist"
    n: PositiveInt = 100
    test_styles: PositiveInt = 2
    gaps: str = "gaps_a"
    data_kwargs: dict[str, Any] | None = None
    data_root: str | None = None
    reference_root: str | None = None
    mapping_file: str | None = None

    @property
    def synthetic(self) -> bool:
        return self.name in SYNTHETIC_BENCHMARKS

    def settings(self) -> dict[str, Any]:
        """Everything that changes which errors are drawn and what their reference set holds."""
        return asdict(self)

    def classes(self) -> tuple[ClassMapping | None, list[str] | None]:
        """The class mapping and class names of an image-folder benchmark (``(None, None)`` for generated data)."""
        if self.synthetic:
            return None, None
        if self.data_root is None or not Path(self.data_root).is_dir():
            raise UserInputError(
                f"benchmark {self.name!r} needs data_root, an existing image folder; got {self.data_root!r}"
            )
        mapping = ClassMapping.for_benchmark(self.name, self.data_root, self.mapping_file)
        return mapping, mapping.class_names

    def build(self, target, mapping: ClassMapping | None, seed: int = 0) -> NemoBenchmark:
        """The target's errors on this benchmark (classifies the whole test set once), drawn with ``seed``."""
        if self.name == "shifts":
            return build_shift_benchmark(target, self.gaps, n=self.n, seed=seed, datamodule_kwargs=self.data_kwargs)
        if self.synthetic:
            return build_synthetic_benchmark(
                self.name,
                target=target,
                n=self.n,
                seed=seed,
                test_styles=self.test_styles,
                datamodule_kwargs=self.data_kwargs,
            )
        folders = mapping.folders if mapping is not None else None
        return build_folder_benchmark(
            self.name,
            self.data_root,
            target,
            self.name,
            n=self.n,
            seed=seed,
            class_folders=folders,
            extra_reference=self.reference_root,
            imagenet_ids=mapping.ids if mapping is not None else None,
        )


@dataclass(frozen=True)
class EvalOptions:
    """How a ``nemo-eval`` run is computed and what it reports (its folder, W&B, seed and device are the
    command's run arguments, :mod:`nemo_train.runs`).

    Args:
        batched: classify all counterfactuals of an error in one batch.
        error_batch: errors a method explains together: one batched request to the explainer (a local
            model generates their replies in padded ``generate`` calls, an endpoint gets them concurrently).
        global_explanation: summarise SciTX's explanations into one global explanation and score it on
            every error (row ``Global``; NEMO Sec. 4.2.7).
    """

    batched: bool = True
    error_batch: PositiveInt = 16
    global_explanation: bool = False
