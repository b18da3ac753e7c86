"""Image-caption pairs from our generators (CMNIST, CLEVR, NICO-like), for training a small CLIP.

Each source draws its attributes uniformly (every combination occurs, unlike the biased classifier
splits), renders the image with its conditional generator, and writes a caption from the attributes
with one of several templates; a fraction of captions name one attribute only ("a photo of a bird"),
so the text tower also learns the single-attribute prompts used for zero-shot evaluation and by the
failure-mode sentence sets. :data:`VOCABULARIES` holds the words of every attribute value (read from each
generator's fact sheet, :attr:`datamodules.facts.DatasetFacts.caption_words`) and the caption templates; the
first one-attribute template of an attribute is its zero-shot prompt.

Hard negatives: the training images come in *minimal-pair groups*: a group shares every attribute and
the rendering style but one, which takes a different value in each member ("a red digit three",
"a red digit seven", ... with the same handwriting). Batches keep groups together, so colour or
background alone never separates a batch and the contrastive loss must also learn shape-like
attributes (digit, tilt, object, CLEVR shape).

Batches are ``{"image": float[B, 3, S, S], "caption": list[str], "source": long[B], "attrs": long[B, A]}``
where ``attrs`` has one column per (source, attribute) slot of :attr:`CaptionDataModule.slots` and
``-1`` in the columns of other sources.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler

from datamodules import clevr, cmnist, nico
from datamodules.base import SplitDataModule, check_loader, check_range, to_uint8
from datamodules.fact_sheets import SHEETS
from nemo_train.errors import UserInputError

Source = Literal["cmnist", "clevr", "nico"]


@dataclass(frozen=True)
class CaptionVocabulary:
    """Words of each attribute value, full-caption templates and one-attribute templates.

    The first one-attribute template of an attribute is its zero-shot prompt.
    """

    words: dict[str, list[str]]
    templates: tuple[str, ...]
    partial: dict[str, tuple[str, ...]]

    def caption(self, values: dict[str, int], template: int) -> str:
        return self.templates[template % len(self.templates)].format(**{k: self.words[k][v] for k, v in values.items()})

    def partial_caption(self, attr: str, value: int, template: int = 0) -> str:
        options = self.partial[attr]
        return options[template % len(options)].format(**{attr: self.words[attr][value]})

    def zero_shot_prompts(self, attr: str) -> list[str]:
        """One prompt per value of ``attr`` (the zero-shot classifier of that attribute)."""
        return [self.partial_caption(attr, value) for value in range(len(self.words[attr]))]


#: Caption attributes named apart from their factor: CMNIST captions its rotations as three tilt words.
CAPTION_NAMES: dict[str, dict[str, str]] = {"cmnist": {"angle": "tilt"}}


def caption_words(source: str) -> dict[str, list[str]]:
    """``{caption attribute: words}`` of a source, read from its fact sheet (class words first, then each
    factor's distinct caption words, renamed by :data:`CAPTION_NAMES`)."""
    renamed = CAPTION_NAMES.get(source, {})
    return {renamed.get(k, k): words for k, words in SHEETS[source].caption_words.items()}


_ANGLE = SHEETS["cmnist"].factor("angle")
#: CMNIST's tilt words (the distinct caption words of its rotations): right, upright, left.
TILT_WORDS: list[str] = _ANGLE.caption_vocabulary
#: CMNIST rotations (degrees, counter-clockwise) of each tilt word
TILT_ANGLES: tuple[tuple[int, ...], ...] = tuple(
    tuple(a for a, w in zip(_ANGLE.values, _ANGLE.caption_words) if w == word) for word in TILT_WORDS
)


def tilt_index(angle: torch.Tensor) -> torch.Tensor:
    """CMNIST rotation (degrees, counter-clockwise, on the grid or not) binned as the fact sheet's tilt words:
    0 right (<= -10), 1 upright, 2 left (>= 10)."""
    return (angle >= 10).long() * 2 + ((angle > -10) & (angle < 10)).long()


VOCABULARIES: dict[str, CaptionVocabulary] = {
    "nico": CaptionVocabulary(
        words=caption_words("nico"),
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
    ),
    "cmnist": CaptionVocabulary(
        words=caption_words("cmnist"),
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
    ),
    "clevr": CaptionVocabulary(
        words=caption_words("clevr"),
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
    ),
}

SOURCES: tuple[str, ...] = ("cmnist", "clevr", "nico")


class CaptionDataset(Dataset):
    """In-memory ``uint8`` images with a caption, a source index, the attribute slots and a group id."""

    def __init__(
        self,
        images: torch.Tensor,
        captions: list[str],
        source: torch.Tensor,
        attrs: torch.Tensor,
        group: torch.Tensor | None = None,
    ) -> None:
        if not len(images) == len(captions) == len(source) == len(attrs):
            raise ValueError("images, captions, sources and attributes differ in length")
        self.images, self.captions, self.source, self.attrs = images, captions, source.long(), attrs.long()
        self.group = torch.arange(len(images)) if group is None else group.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        return {
            "image": self.images[index].float().div_(255.0),
            "caption": self.captions[index],
            "source": self.source[index],
            "attrs": self.attrs[index],
        }


class GroupBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices that keep each group's members next to each other: groups are
    shuffled (a new order every epoch), concatenated and cut into batches (the last short one dropped)."""

    def __init__(self, group: torch.Tensor, batch_size: int, seed: int = 0) -> None:
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0
        order = torch.argsort(group, stable=True)
        self.members = list(torch.split(order, torch.unique_consecutive(group[order], return_counts=True)[1].tolist()))

    def __len__(self) -> int:
        return sum(len(m) for m in self.members) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """The next pass draws ``epoch``'s order (a resumed run draws the order of the epoch it resumes at)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        self.epoch += 1
        flat = torch.cat([self.members[i] for i in torch.randperm(len(self.members), generator=gen)])
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield flat[start : start + self.batch_size].tolist()


class CaptionDataModule(SplitDataModule):
    """Captioned generated images of several sources, resized to one ``image_size``.

    Args:
        sources: generators to draw from (``cmnist``, ``clevr``, ``nico``).
        image_size: side of every image (sources are rendered or resized to it).
        train_per_source: training images of every source, or a mapping ``{source: images}`` naming each
            source of ``sources`` (to over-weight a source that is learned more slowly, e.g. the NICO-like
            objects: its images then fill a larger share of every batch).
        val_per_source: validation images per source (validation styles and CMNIST exemplars are disjoint
            from training).
        partial_caption_prob: fraction of captions naming one attribute only (in a minimal-pair group,
            the attribute that varies).
        group_size: members of a training minimal-pair group (at most the number of values of the
            varied attribute); 1 draws every training image independently.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every draw.
    """

    def __init__(
        self,
        sources: list[Source] = ["cmnist", "clevr", "nico"],  # noqa: B006 (jsonargparse shows the default)
        image_size: int = 32,
        train_per_source: int | dict[Source, int] = 4000,
        val_per_source: int = 400,
        partial_caption_prob: float = 0.3,
        group_size: int = 1,
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
        check_range("partial_caption_prob", partial_caption_prob, 0.0, 1.0)
        check_range("val_per_source", val_per_source, 1, 200_000, "images")
        check_range("group_size", group_size, 1, 64, "images per minimal-pair group")
        check_loader(batch_size, num_workers)
        self.sources = list(dict.fromkeys(sources))
        if isinstance(train_per_source, dict):
            missing = [s for s in self.sources if s not in train_per_source]
            if missing:
                raise UserInputError(f"train_per_source names no image count for source(s) {missing}")
            unknown = [s for s in train_per_source if s not in SOURCES]
            if unknown:
                raise UserInputError(f"train_per_source names unknown source(s) {unknown}; expected {list(SOURCES)}")
            #: training images of each source
            self.train_counts = {s: train_per_source[s] for s in self.sources}
        else:
            self.train_counts = dict.fromkeys(self.sources, train_per_source)
        for source, count in self.train_counts.items():
            check_range(f"train_per_source[{source}]", count, 1, 200_000, "images")
        #: (source, attribute) of every column of ``attrs``
        self.slots: list[tuple[str, str]] = [(s, a) for s in self.sources for a in VOCABULARIES[s].words]

    def zero_shot_prompts(self) -> dict[str, list[str]]:
        """``{"source/attribute": prompts}`` in slot order."""
        return {f"{s}/{a}": VOCABULARIES[s].zero_shot_prompts(a) for s, a in self.slots}

    # ------------------------------------------------------------------ generation
    @staticmethod
    def _values(
        source: str, n: int, group_size: int, gen: torch.Generator
    ) -> tuple[dict, torch.Tensor, torch.Tensor, list[str]]:
        """Attribute indices of ``n`` images in minimal-pair groups, each image's group id, how many times
        its value already occurred in its group, and the attribute its group varies. A group varies one
        random attribute; its members cycle through that attribute's values in a random order (repeating
        them when the group is larger than the number of values)."""
        words = VOCABULARIES[source].words
        names = list(words)
        rows: dict[str, list[int]] = {k: [] for k in names}
        group: list[int] = []
        repeat: list[int] = []
        varies: list[str] = []
        while len(group) < n:
            base = {k: int(torch.randint(0, len(v), (1,), generator=gen)) for k, v in words.items()}
            varied = names[int(torch.randint(0, len(names), (1,), generator=gen))]
            size = min(group_size, n - len(group))
            order = torch.randperm(len(words[varied]), generator=gen).tolist()
            for member in range(size):
                for k in names:
                    rows[k].append(order[member % len(order)] if k == varied else base[k])
            group += [group[-1] + 1 if group else 0] * size
            repeat += [member // len(order) for member in range(size)]
            varies += [varied] * size
        return {k: torch.tensor(v) for k, v in rows.items()}, torch.tensor(group), torch.tensor(repeat), varies

    def _render(self, source: str, values: dict, style: torch.Tensor, pool: str) -> torch.Tensor:
        size = self.hparams.image_size
        if source == "nico":
            images = nico.NICORenderer(size).render_batch(values["object"], values["context"], style)
        elif source == "clevr":
            images = clevr.CLEVRRenderer(size).render_batch(
                values["shape"], values["material"], values["color"], values["size"], style
            )
        else:
            renderer = cmnist.CMNISTRenderer(pools={pool: cmnist.load_digits(None, pool)})
            angles = torch.tensor([TILT_ANGLES[t][int(s) % len(TILT_ANGLES[t])] for t, s in zip(values["tilt"], style)])
            style = cmnist.CMNISTRenderer.style_of(pool, style)
            images = renderer.render_batch(values["digit"], values["color"], angles, style)
            images = F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        return to_uint8(images)

    def _split(self, counts: dict[str, int], gen: torch.Generator, group_size: int, pool: str) -> CaptionDataset:
        images, captions, sources, attrs, groups = [], [], [], [], []
        for si, source in enumerate(self.sources):
            n = counts[source]
            vocab = VOCABULARIES[source]
            names = list(vocab.words)
            values, group, repeat, varies = self._values(source, n, group_size, gen)
            # one style per group (exact minimal pairs); members repeating a value get the next styles
            style = torch.randint(0, 1 << 20, (int(group.max()) + 1,), generator=gen)[group] + repeat
            if pool == "test":
                style = style + (1 << 24)  # validation styles differ from training ones
            images.append(self._render(source, values, style, pool))
            partial = torch.rand(n, generator=gen) < self.hparams.partial_caption_prob
            template = torch.randint(0, 12, (n,), generator=gen)
            # the attribute a partial caption names: the one its group varies (a random one without groups)
            which = torch.randint(0, len(names), (n,), generator=gen)
            named = varies if group_size > 1 else [names[int(w)] for w in which]
            for i in range(n):
                row = {k: int(values[k][i]) for k in names}
                if partial[i]:
                    name = named[i]
                    captions.append(vocab.partial_caption(name, row[name], int(template[i])))
                else:
                    captions.append(vocab.caption(row, int(template[i])))
            column = torch.full((n, len(self.slots)), -1, dtype=torch.long)
            for j, (s, a) in enumerate(self.slots):
                if s == source:
                    column[:, j] = values[a]
            sources.append(torch.full((n,), si, dtype=torch.long))
            attrs.append(column)
            groups.append(group + (1 << 40) * si)
        return CaptionDataset(torch.cat(images), captions, torch.cat(sources), torch.cat(attrs), torch.cat(groups))

    def setup(self, stage: str | None = None) -> None:
        """Render both splits once (idempotent); validation uses other styles and CMNIST exemplars, and
        independent images (no groups). The test and predict loaders serve the validation split.

        Each split has its own random stream, so the validation images depend on ``seed``, ``sources``
        and ``val_per_source`` only: runs with other training sizes or groups are compared on the same
        images (two 400-image validation draws of one model differ by up to 0.06 in CLEVR shape)."""
        if self.train_set is not None:
            return
        gen = torch.Generator().manual_seed(self.hparams.seed)
        self.train_set = self._split(self.train_counts, gen, self.hparams.group_size, "train")
        val_counts = dict.fromkeys(self.sources, self.hparams.val_per_source)
        val_gen = torch.Generator().manual_seed(self.hparams.seed + 1)
        self.val_set = self.test_set = self._split(val_counts, val_gen, 1, "test")

    def train_dataloader(self) -> DataLoader:
        if self.train_set is None:
            raise RuntimeError("CaptionDataModule.setup() has not been called")
        sampler = GroupBatchSampler(self.train_set.group, self.hparams.batch_size, self.hparams.seed)
        return DataLoader(
            self.train_set,
            batch_sampler=sampler,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )
