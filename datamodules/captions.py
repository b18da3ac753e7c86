"""Image-caption pairs from our generators (CMNIST, CLEVR, NICO-like), for training a small CLIP.

Each source draws its attributes uniformly (every combination occurs, unlike the biased classifier
splits), renders the image with its conditional generator, and writes a caption from the attributes
with one of several templates; a fraction of captions name one attribute only ("a photo of a bird"),
so the text tower also learns the single-attribute prompts used for zero-shot evaluation and by the
failure-mode sentence sets. :data:`VOCABULARIES` holds the words of every attribute value, the
caption templates and the zero-shot prompt of every attribute.

Batches are ``{"image": float[B, 3, S, S], "caption": list[str], "source": long[B], "attrs": long[B, A]}``
where ``attrs`` has one column per (source, attribute) slot of :attr:`CaptionDataModule.slots` and
``-1`` in the columns of other sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from datamodules import clevr, cmnist, nico
from datamodules.base import to_uint8
from nemo_train.errors import UserInputError

Source = Literal["cmnist", "clevr", "nico"]


@dataclass(frozen=True)
class CaptionVocabulary:
    """Words of each attribute value, full-caption templates, one-attribute templates and zero-shot prompts."""

    words: dict[str, list[str]]
    templates: tuple[str, ...]
    partial: dict[str, tuple[str, ...]]
    prompts: dict[str, str]

    def caption(self, values: dict[str, int], template: int) -> str:
        return self.templates[template % len(self.templates)].format(**{k: self.words[k][v] for k, v in values.items()})

    def partial_caption(self, attr: str, value: int, template: int) -> str:
        options = self.partial[attr]
        return options[template % len(options)].format(**{attr: self.words[attr][value]})

    def zero_shot_prompts(self, attr: str) -> list[str]:
        """One prompt per value of ``attr`` (the zero-shot classifier of that attribute)."""
        return [self.prompts[attr].format(**{attr: w}) for w in self.words[attr]]


NICO_OBJECT_WORDS = ["mammal", "bird", "plant", "plane", "boat", "car"]
NICO_CONTEXT_WORDS = ["dim light", "the outdoors", "grass", "rocks", "autumn leaves", "water"]
DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TILT_WORDS = ["tilted right", "upright", "tilted left"]


def tilt_index(angle: torch.Tensor) -> torch.Tensor:
    """CMNIST rotation (degrees, counter-clockwise) binned: 0 right (<= -10), 1 upright, 2 left (>= 10)."""
    return (angle >= 10).long() * 2 + ((angle > -10) & (angle < 10)).long()


VOCABULARIES: dict[str, CaptionVocabulary] = {
    "nico": CaptionVocabulary(
        words={"object": NICO_OBJECT_WORDS, "context": NICO_CONTEXT_WORDS},
        templates=(
            "a photo of a {object} in {context}",
            "a {object} in {context}",
            "an image of a {object} in {context}",
            "a picture showing a {object} in {context}",
        ),
        partial={
            "object": ("a photo of a {object}", "an image of a {object}"),
            "context": ("a photo taken in {context}", "an image of {context}"),
        },
        prompts={"object": "a photo of a {object}", "context": "a photo taken in {context}"},
    ),
    "cmnist": CaptionVocabulary(
        words={"digit": DIGIT_WORDS, "color": list(cmnist.COLOR_NAMES), "tilt": TILT_WORDS},
        templates=(
            "a {color} digit {digit} {tilt}",
            "the number {digit} written in {color}, {tilt}",
            "a handwritten {digit} in {color} ink, {tilt}",
        ),
        partial={
            "digit": ("the digit {digit}", "a handwritten {digit}"),
            "color": ("a {color} digit", "a digit written in {color}"),
            "tilt": ("a digit {tilt}",),
        },
        prompts={"digit": "the digit {digit}", "color": "a {color} digit", "tilt": "a digit {tilt}"},
    ),
    "clevr": CaptionVocabulary(
        words={
            "shape": list(clevr.SHAPES),
            "material": ["shiny metal", "matte rubber"],
            "color": list(clevr.COLOR_NAMES),
            "size": list(clevr.SIZE_NAMES),
        },
        templates=(
            "a {size} {color} {shape} made of {material}",
            "a {size} {material} {shape}, {color}",
            "a render of a {color} {shape} of {material}, {size}",
        ),
        partial={
            "shape": ("a render of a {shape}",),
            "material": ("an object made of {material}",),
            "color": ("a {color} object",),
            "size": ("a {size} object",),
        },
        prompts={
            "shape": "a render of a {shape}",
            "material": "an object made of {material}",
            "color": "a {color} object",
            "size": "a {size} object",
        },
    ),
}

SOURCES: tuple[str, ...] = ("cmnist", "clevr", "nico")


class CaptionDataset(Dataset):
    """In-memory ``uint8`` images with a caption, a source index and the attribute slots."""

    def __init__(self, images: torch.Tensor, captions: list[str], source: torch.Tensor, attrs: torch.Tensor) -> None:
        if not len(images) == len(captions) == len(source) == len(attrs):
            raise ValueError("images, captions, sources and attributes differ in length")
        self.images, self.captions, self.source, self.attrs = images, captions, source.long(), attrs.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        return {
            "image": self.images[index].float().div_(255.0),
            "caption": self.captions[index],
            "source": self.source[index],
            "attrs": self.attrs[index],
        }


class CaptionDataModule(L.LightningDataModule):
    """Captioned generated images of several sources, resized to one ``image_size``.

    Args:
        sources: generators to draw from (``cmnist``, ``clevr``, ``nico``).
        image_size: side of every image (sources are rendered or resized to it).
        train_per_source, val_per_source: images per source in each split (validation styles are disjoint).
        partial_caption_prob: fraction of captions naming one attribute only.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every draw.
    """

    def __init__(
        self,
        sources: list[Source] = ["cmnist", "clevr", "nico"],  # noqa: B006 (jsonargparse shows the default)
        image_size: int = 32,
        train_per_source: int = 4000,
        val_per_source: int = 400,
        partial_caption_prob: float = 0.3,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if not sources:
            raise UserInputError("CaptionDataModule needs at least one source")
        unknown = [s for s in sources if s not in SOURCES]
        if unknown:
            raise UserInputError(f"unknown caption source(s) {unknown}; expected some of {list(SOURCES)}")
        if not 0.0 <= partial_caption_prob <= 1.0:
            raise UserInputError(f"partial_caption_prob={partial_caption_prob} must lie in [0, 1]")
        if min(train_per_source, val_per_source) < 1:
            raise UserInputError("train_per_source and val_per_source must be >= 1")
        self.sources = list(dict.fromkeys(sources))
        #: (source, attribute) of every column of ``attrs``
        self.slots: list[tuple[str, str]] = [(s, a) for s in self.sources for a in VOCABULARIES[s].words]
        self.train_set: CaptionDataset | None = None
        self.val_set: CaptionDataset | None = None

    def zero_shot_prompts(self) -> dict[str, list[str]]:
        """``{"source/attribute": prompts}`` in slot order."""
        return {f"{s}/{a}": VOCABULARIES[s].zero_shot_prompts(a) for s, a in self.slots}

    # ------------------------------------------------------------------ generation
    def _render(self, source: str, n: int, gen: torch.Generator, first_style: int) -> tuple[torch.Tensor, dict]:
        size = self.hparams.image_size
        style = first_style + torch.randperm(1 << 20, generator=gen)[:n]
        if source == "nico":
            values = {k: torch.randint(0, len(v), (n,), generator=gen) for k, v in VOCABULARIES["nico"].words.items()}
            images = nico.NICORenderer(size).render_batch(values["object"], values["context"], style)
        elif source == "clevr":
            values = {k: torch.randint(0, len(v), (n,), generator=gen) for k, v in VOCABULARIES["clevr"].words.items()}
            images = clevr.CLEVRRenderer(size).render_batch(
                values["shape"], values["material"], values["color"], values["size"], style
            )
        else:
            digits, labels = cmnist.load_digits(None, "train" if first_style < (1 << 28) else "test")
            renderer = cmnist.CMNISTRenderer(digits, labels)
            digit = torch.randint(0, 10, (n,), generator=gen)
            color = torch.randint(0, len(cmnist.COLOR_NAMES), (n,), generator=gen)
            angle = torch.tensor(cmnist.ANGLES)[torch.randint(0, len(cmnist.ANGLES), (n,), generator=gen)]
            images = renderer.render_batch(digit, color, angle, style)
            images = F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
            values = {"digit": digit, "color": color, "tilt": tilt_index(angle)}
        return to_uint8(images), values

    def _split(self, n: int, gen: torch.Generator, first_style: int) -> CaptionDataset:
        images, captions, sources, attrs = [], [], [], []
        for si, source in enumerate(self.sources):
            vocab = VOCABULARIES[source]
            imgs, values = self._render(source, n, gen, first_style)
            names = list(vocab.words)
            partial = torch.rand(n, generator=gen) < self.hparams.partial_caption_prob
            which = torch.randint(0, len(names), (n,), generator=gen)
            template = torch.randint(0, 12, (n,), generator=gen)
            for i in range(n):
                row = {k: int(values[k][i]) for k in names}
                if partial[i]:
                    name = names[int(which[i])]
                    captions.append(vocab.partial_caption(name, row[name], int(template[i])))
                else:
                    captions.append(vocab.caption(row, int(template[i])))
            column = torch.full((n, len(self.slots)), -1, dtype=torch.long)
            for j, (s, a) in enumerate(self.slots):
                if s == source:
                    column[:, j] = values[a]
            images.append(imgs)
            sources.append(torch.full((n,), si, dtype=torch.long))
            attrs.append(column)
        return CaptionDataset(torch.cat(images), captions, torch.cat(sources), torch.cat(attrs))

    def setup(self, stage: str | None = None) -> None:
        """Render both splits once (idempotent); validation uses other styles (and CMNIST exemplars)."""
        if self.train_set is not None:
            return
        gen = torch.Generator().manual_seed(self.hparams.seed)
        self.train_set = self._split(self.hparams.train_per_source, gen, first_style=1 << 24)
        self.val_set = self._split(self.hparams.val_per_source, gen, first_style=1 << 28)

    def _loader(self, dataset: Dataset | None, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError("CaptionDataModule.setup() has not been called")
        return DataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)
