"""Conditional generators G(c) -> (images, labels) over a condition vocabulary.

The embedded generators wrap the toolkit's CMNIST and CLEVR renderers; their condition vocabularies are read
from the generators' fact sheets (:func:`attribute_space`). Samples of a condition depend only on (condition,
n, seed), never on which other conditions are drawn in the same batch, so a condition's images are the same
whether it is rendered alone or with a thousand others.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from datamodules import clevr, cmnist
from datamodules.base import to_uint8
from datamodules.fact_sheets import SHEETS
from datamodules.facts import DatasetFacts
from nemo_train.differences.conditions import Attribute, AttributeSpace, Condition, ConditionSpace


def condition_rng(condition: Condition, seed: int) -> np.random.Generator:
    """A random generator fixed by (condition, seed) alone."""
    return np.random.default_rng([seed, zlib.crc32(condition.key().encode())])


class ConditionalGenerator(ABC):
    """Draws ``n`` labelled images per condition."""

    #: the condition vocabulary
    space: ConditionSpace
    #: a short name of the task for prompts ("classifying digit images from 0 to 9")
    task_description: str = ""

    @property
    def identity(self) -> str:
        """What makes this generator's images what they are (part of every Diff_Model cache key)."""
        return type(self).__name__

    @abstractmethod
    def generate(self, conditions: Sequence[Condition], n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``float[len(conditions) * n, C, H, W]`` in [0, 1] (condition-major) and labels."""

    def grid(self) -> list[Condition]:
        """Every condition of a finite vocabulary (empty for open-set generators)."""
        return self.space.grid() if isinstance(self.space, AttributeSpace) else []


def attribute_space(facts: DatasetFacts) -> AttributeSpace:
    """The conditions of a generator, read from its fact sheet: the class attribute (numbers when the classes are
    digits), then every factor with its values, word, unit and other spellings of its values."""
    digits = all(c.isdigit() for c in facts.classes)
    classes = tuple(int(c) for c in facts.classes) if digits else facts.classes
    attributes = [Attribute(facts.class_attribute, classes, facts.class_attribute, ordinal=digits)]
    for f in facts.factors:
        attributes.append(Attribute(f.name, f.values, f.word, ordinal=not f.named, unit=f.unit, synonyms=f.spellings))
    return AttributeSpace(attributes)


CMNIST_SPACE = attribute_space(SHEETS["cmnist"])
CLEVR_SPACE = attribute_space(SHEETS["clevr"])


class CMNISTGenerator(ConditionalGenerator):
    """Coloured, rotated digits (the toolkit's CMNIST renderer) on held-out handwriting.

    Args:
        data_dir: folder with torchvision's MNIST; ``None`` uses the embedded scikit-learn digits.
        split: which handwriting exemplars to draw (``test`` is disjoint from the classifiers' training).
        color_target: what the colour paints, ``strokes`` or ``background`` (as the classifiers were trained).
    """

    space = CMNIST_SPACE
    task_description = "classifiers of coloured, rotated handwritten digit images (digits 0 to 9)"

    def __init__(
        self,
        data_dir: str | None = None,
        split: Literal["train", "test"] = "test",
        color_target: cmnist.ColorTarget = "strokes",
    ) -> None:
        self.data_dir, self.split, self.color_target = data_dir, split, color_target
        pools = {split: cmnist.load_digits(data_dir, split)}
        self.renderer = cmnist.CMNISTRenderer(color_target=color_target, pools=pools)

    @property
    def identity(self) -> str:
        return f"CMNISTGenerator(data_dir={self.data_dir}, split={self.split}, color_target={self.color_target})"

    def generate(self, conditions, n, seed):
        attrs = np.array(
            [[c.values["digit"], cmnist.COLOR_NAMES.index(c.values["color"]), c.values["angle"]] for c in conditions]
        ).reshape(-1, 3)
        index = np.concatenate([condition_rng(c, seed).integers(0, 1 << 20, n) for c in conditions] or [[]])
        styles = self.renderer.style_of(self.split, torch.from_numpy(index).long())
        rep = torch.from_numpy(np.repeat(attrs, n, axis=0))
        images = self.renderer.render_batch(rep[:, 0], rep[:, 1], rep[:, 2].float(), styles)
        return to_uint8(images).float() / 255.0, rep[:, 0].long()


class CLEVRGenerator(ConditionalGenerator):
    """Single-object CLEVR scenes (the toolkit's ray caster), views jittered by seeded styles.

    Args:
        image_size: side length in pixels (the classifiers' training size).
    """

    space = CLEVR_SPACE
    task_description = "classifiers of the shape (cube, cylinder, sphere) of one object in a rendered scene"

    def __init__(self, image_size: int = 32) -> None:
        self.image_size = image_size
        self.renderer = clevr.CLEVRRenderer(image_size)

    @property
    def identity(self) -> str:
        return f"CLEVRGenerator(image_size={self.image_size})"

    def generate(self, conditions, n, seed):
        index = np.array(
            [[clevr.ATTRIBUTES[name].index(c.values[name]) for name in clevr.ATTRIBUTES] for c in conditions]
        ).reshape(-1, 4)
        styles = np.concatenate([condition_rng(c, seed).integers(1, 1 << 30, n) for c in conditions] or [[]])
        rep = torch.from_numpy(np.repeat(index, n, axis=0))
        images = self.renderer.render_batch(*rep.T, style=torch.from_numpy(styles).long())
        return to_uint8(images).float() / 255.0, rep[:, 0].long()
