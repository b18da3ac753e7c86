"""The one classifier spec type: which classifier a command analyses, as a configurable object.

Every command that analyses a classifier (``nemo-eval``, ``distill-teacher`` / ``distill-eval``, ``lbee``,
``differences``, ``counterfactuals``) takes ``--classifier`` (or ``--targets`` for several) as a
:class:`ClassifierSpec`; a plain string is a ``nemo-train fit`` checkpoint (:func:`as_classifier`). Each spec has a
display ``name`` (unique within a run), an ``identity`` that goes into every result's settings (a retrained
checkpoint at the same path has another content hash, so its results are recomputed), a cheap :meth:`check` run
before anything is written, and :meth:`build`, which loads the model as a :class:`~nemo_train.models.targets.Target`.
No spec trains anything: a missing checkpoint is a one-line error naming the ``fit`` command that writes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from datamodules.captions import VOCABULARIES
from datamodules.fact_sheets import SHEETS
from nemo_train.errors import UserInputError
from nemo_train.models.class_mapping import ClassMapping
from nemo_train.models.loading import check_classifier_file, experiment_name
from nemo_train.models.targets import Target, TimmTarget, load_checkpoint_target
from nemo_train.models.zero_shot import ZeroShotTarget
from nemo_train.store import file_digest

__all__ = [
    "CaptionZeroShotModel",
    "ClassifierSpec",
    "FitCheckpoint",
    "TimmModel",
    "ZeroShotModel",
    "as_classifier",
    "check_clip_folder",
    "unique_names",
]


class ClassifierSpec(ABC):
    """A classifier to analyse; ``name`` overrides the default display name."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    @abstractmethod
    def default_name(self) -> str:
        """The display name when none is given."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies the model's weights (JSON-ready; part of every result's settings)."""

    @abstractmethod
    def build(self, class_names: Sequence[str] | None = None, mapping: ClassMapping | None = None) -> Target:
        """Load the model (eval mode, on CPU) over ``class_names`` (default: its own classes)."""

    def check(self) -> None:
        """Fail early (before anything is written) when the classifier cannot exist."""

    @property
    def label(self) -> str:
        return self.name or self.default_name()


class FitCheckpoint(ClassifierSpec):
    """A ``ClassifierModule`` checkpoint of ``nemo-train fit``; named by its experiment folder.

    Args:
        path: the ``.ckpt`` file, e.g. ``checkpoints/cmnist_model_a/checkpoints/best.ckpt`` (name ``cmnist_model_a``).
        name: display name instead of the checkpoint's experiment folder.
    """

    def __init__(self, path: str, name: str | None = None) -> None:
        super().__init__(name)
        self.path = str(path)

    def default_name(self) -> str:
        return experiment_name(self.path)

    def check(self) -> None:
        check_classifier_file(self.path)

    def identity(self) -> dict[str, Any]:
        self.check()
        return {"checkpoint": str(Path(self.path).resolve()), "sha256": file_digest(self.path)}

    def build(self, class_names: Sequence[str] | None = None, mapping: ClassMapping | None = None) -> Target:
        return load_checkpoint_target(self.path, class_names)


class TimmModel(ClassifierSpec):
    """A timm model used as published: its hub (or local) weights and its own head, never trained here.

    Args:
        model_name: timm name, e.g. ``resnet50`` or ``vit_base_patch16_224.augreg2_in21k_ft_in1k`` (ImageNet-1k heads
            are mapped onto a benchmark's classes by the command that needs it).
        pretrained: load the hub weights (``False``: random weights of the architecture, for tests).
        weights_file: a local ``.safetensors`` / ``.pth`` state dict instead of the hub (works offline).
    """

    def __init__(
        self, model_name: str, pretrained: bool = True, weights_file: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name)
        self.model_name, self.pretrained, self.weights_file = model_name, pretrained, weights_file

    def default_name(self) -> str:
        return self.model_name

    def check(self) -> None:
        if self.weights_file is not None and not Path(self.weights_file).is_file():
            raise UserInputError(f"timm weights file {self.weights_file!r} does not exist")

    def identity(self) -> dict[str, Any]:
        if self.weights_file is not None:
            return {
                "timm": self.model_name,
                "weights": str(Path(self.weights_file).resolve()),
                "sha256": file_digest(self.weights_file),
            }
        return {"timm": self.model_name, "pretrained": self.pretrained}

    def build(self, class_names: Sequence[str] | None = None, mapping: ClassMapping | None = None) -> Target:
        return TimmTarget(self.model_name, mapping=mapping, pretrained=self.pretrained, weights_file=self.weights_file)


class ZeroShotModel(ClassifierSpec):
    """A CLIP, SigLIP or SigLIP 2 model through transformers, one prompt per class
    (:class:`~nemo_train.models.image_text.ImageTextEncoder`).

    Args:
        model: hub id or local folder (``openai/clip-vit-base-patch32``, ``google/siglip-base-patch16-224``,
            ``google/siglip2-base-patch16-224``, ``google/siglip2-base-patch16-naflex``).
        template: the class prompt, with ``{}`` where the class name goes.
        prompts: one whole prompt per class in label order instead of the template (e.g. "a photo of a man with
            black hair"); needed where the data name no classes.
    """

    def __init__(
        self,
        model: str,
        template: str = "a photo of a {}",
        prompts: list[str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.model, self.template, self.prompts = model, template, prompts

    def default_name(self) -> str:
        return self.model

    def identity(self) -> dict[str, Any]:
        found: dict[str, Any] = {"zero_shot": self.model, "template": self.template}
        return found if self.prompts is None else {**found, "class_prompts": list(self.prompts)}

    def build(self, class_names: Sequence[str] | None = None, mapping: ClassMapping | None = None) -> Target:
        if class_names is None and self.prompts is None:
            raise UserInputError(
                f"zero-shot classifier {self.model!r} needs class names (an image-folder benchmark) or `prompts`"
            )
        names = list(class_names) if class_names is not None else [str(i) for i in range(len(self.prompts))]
        return ZeroShotTarget(self.model, names, template=self.template, class_prompts=self.prompts)


class CaptionZeroShotModel(ClassifierSpec):
    """The small CLIP trained on our generators' captions as a zero-shot classifier of a generated benchmark.

    Its class prompts are the one-attribute captions of the class attribute it was trained on ("the digit
    three", "a render of a cube"), not "a photo of a 3". With ``PromptEdit`` as the editor, CEI is measured
    by counterfactual prompt intervention.

    Args:
        clip_model: the Hugging Face folder ``nemo-train fit --config configs/clip/synthetic.yaml`` exports
            (``checkpoints/clip_synthetic/hf``), or a hub id.
        captions: the generator whose captions the class prompts follow; it must be the benchmark's.
    """

    def __init__(
        self,
        clip_model: str = "checkpoints/clip_synthetic/hf",
        captions: Literal["cmnist", "clevr"] = "cmnist",
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.clip_model, self.captions = clip_model, captions

    def default_name(self) -> str:
        return f"zero-shot {Path(self.clip_model).parent.name or self.clip_model}"

    @property
    def class_prompts(self) -> list[str]:
        return VOCABULARIES[self.captions].zero_shot_prompts(SHEETS[self.captions].class_attribute)

    def check(self) -> None:
        check_clip_folder(self.clip_model)

    def identity(self) -> dict[str, Any]:
        self.check()
        weights = Path(self.clip_model) / "model.safetensors"
        if weights.is_file():
            found = {"zero_shot": str(Path(self.clip_model).resolve()), "sha256": file_digest(weights)}
        else:
            found = {"zero_shot": self.clip_model}
        return {**found, "class_prompts": self.class_prompts}

    def build(self, class_names: Sequence[str] | None = None, mapping: ClassMapping | None = None) -> Target:
        self.check()
        words = VOCABULARIES[self.captions].words[SHEETS[self.captions].class_attribute]
        return ZeroShotTarget(self.clip_model, words, template="{}", class_prompts=self.class_prompts)


def check_clip_folder(name: str) -> None:
    """A one-line error when ``name`` is a local CLIP folder that does not exist yet (a hub id passes)."""
    hub_id = name.count("/") == 1 and not name.startswith((".", "/", "~"))
    if not hub_id and not Path(name).exists():
        raise UserInputError(
            f"CLIP folder {name!r} does not exist; train and export the small CLIP first: "
            "nemo-train fit --config configs/clip/synthetic.yaml"
        )


def as_classifier(classifier: str | ClassifierSpec) -> ClassifierSpec:
    """A plain string is a ``nemo-train fit`` checkpoint path."""
    return FitCheckpoint(classifier) if isinstance(classifier, str) else classifier


def unique_names(specs: Sequence[ClassifierSpec]) -> list[str]:
    """Display names, unique within the run: a clash of experiment folders falls back to ``folder/stem``."""
    names = [s.label for s in specs]
    counts = Counter(names)
    out = []
    for spec, name in zip(specs, names):
        if counts[name] > 1 and spec.name is None and isinstance(spec, FitCheckpoint):
            name = f"{name}/{Path(spec.path).stem}"
        out.append(name)
    repeated = sorted(n for n, c in Counter(out).items() if c > 1)
    if repeated:
        raise UserInputError(f"classifiers named {repeated} more than once; give each a distinct `name`")
    return out
