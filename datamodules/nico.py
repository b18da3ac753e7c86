"""NICO++ with class-context spurious correlation (the FACTS splits used by the LBEE paper, App. A).

Six classes (mammals, birds, plants, airways, waterways, landways) are shown in six contexts (dim
lighting, outdoor, grass, rock, autumn, water). Each class has one correlated context; ``correlation``
(0.75 / 0.85 / 0.95 for NICO++75 / 85 / 95) is the fraction of a class's training images that show it,
the rest being spread evenly over the five other contexts. Validation follows the same bias; the test
split is unbiased (every class-context pair equally often). A sample is ``aligned`` when it shows its
class's correlated context and ``conflicting`` otherwise; ``attrs["context"]`` holds the ground-truth
context, and ``eval_groupings = {"context": CONTEXTS}`` lets the classifier log per-context accuracy.

Embedded default: :class:`NICORenderer` (in :mod:`datamodules.nico_render`, re-exported here with the
class and context vocabularies), a synthetic NICO-like generator of object glyphs over procedural context
backgrounds. Real data: the folder layout described in :func:`scan_nico_folder`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch

from datamodules.base import (
    MAX_FOLDER_SIZE,
    AttributeImageDataset,
    SplitDataModule,
    check_range,
    to_uint8,
    vocab_index,
)
from datamodules.facts import DatasetFacts, Factor
from datamodules.folder import list_images, open_images, require_folder
from datamodules.nico_render import CLASSES, CONTEXTS, MAX_RENDER_SIZE, NICORenderer
from nemo_train.errors import UserInputError

__all__ = [
    "CLASSES",
    "CONTEXTS",
    "CONTEXT_FOLDERS",
    "CORRELATED_CONTEXT",
    "FACTS",
    "MAX_FOLDER_SIZE",
    "MAX_RENDER_SIZE",
    "MAX_TEST_PER_PAIR",
    "MAX_TRAIN_SIZE",
    "NICODataModule",
    "NICORenderer",
    "biased_counts",
    "parse_correlated_context",
    "scan_nico_folder",
]

#: Each class's correlated context (the class-context pairs of the FACTS NICO++ splits).
CORRELATED_CONTEXT: dict[str, str] = {
    "mammals": "rock",
    "birds": "grass",
    "plants": "dim_lighting",
    "airways": "outdoor",
    "waterways": "water",
    "landways": "autumn",
}
#: Folder names accepted for each context in a real NICO++ folder (NICO++ itself names dim lighting ``dim``).
CONTEXT_FOLDERS: dict[str, tuple[str, ...]] = {
    "dim_lighting": ("dim_lighting", "dim", "dim lighting", "dimlighting"),
    **{c: (c,) for c in CONTEXTS[1:]},
}
#: Documented limits of the size options, checked before anything is allocated: images read from a folder
#: 8 to 1024 px (rendered ones: :data:`MAX_RENDER_SIZE`), up to 100,000 synthetic training images and 1,000
#: test images per (class, context) pair (and 4 GiB of images in all).
MAX_TRAIN_SIZE, MAX_TEST_PER_PAIR = 100_000, 1000
#: The fact sheet of the NICO-like images: the class is the object, its context the planted cause
#: (:data:`CORRELATED_CONTEXT`); the style-seeded glyph colour, pose and texture are not factors.
FACTS = DatasetFacts(
    name="nico",
    classes=tuple(CLASSES),
    class_attribute="object",
    object_word="object",
    factors=(
        Factor(
            "context",
            tuple(CONTEXTS),
            "context",
            ("background", "setting", "scene", "surroundings", "environment"),
            caption_words=("dim light", "the outdoors", "grass", "rocks", "autumn leaves", "water"),
        ),
    ),
    cause="context",
    class_words=("mammal", "bird", "plant", "plane", "boat", "car"),
)


def parse_correlated_context(pairs: Mapping[str, str] | None) -> torch.Tensor:
    """``long[6]``: the correlated context index of each class (``None`` gives :data:`CORRELATED_CONTEXT`)."""
    pairs = dict(CORRELATED_CONTEXT if pairs is None else pairs)
    unknown = sorted(set(pairs) - set(CLASSES))
    if unknown:
        raise UserInputError(f"correlated_context names unknown class(es) {unknown}; expected {CLASSES}")
    missing = sorted(set(CLASSES) - set(pairs))
    if missing:
        raise UserInputError(f"correlated_context lacks class(es) {missing}; every class needs a context")
    return torch.tensor([vocab_index(CONTEXTS, pairs[c], "NICO++ context") for c in CLASSES])


# --------------------------------------------------------------------------------------------- splits
def biased_counts(total: int, correlation: float, num_contexts: int = len(CONTEXTS)) -> list[int]:
    """Images per context for one class: ``round(correlation * total)`` in context 0 (the correlated one),
    the rest spread as evenly as possible over the others (earlier contexts get the remainder).

    With real data, a context that holds fewer images than its share gives what it has (the achieved
    correlation is then slightly above the requested one); the split never reuses an image."""
    n_corr = round(correlation * total)
    rest = total - n_corr
    others = num_contexts - 1
    return [n_corr] + [rest // others + (1 if i < rest % others else 0) for i in range(others)]


def scan_nico_folder(data_dir: str | Path) -> dict[tuple[int, int], list[Path]]:
    """Image files of every (class, context) cell of a real NICO++ folder.

    Layout: ``<data_dir>/<context>/<class>/<image files>``, with ``<context>`` one of ``dim_lighting``
    (or NICO++'s own ``dim``), ``outdoor``, ``grass``, ``rock``, ``autumn``, ``water`` and ``<class>`` one of
    the six FACTS super-classes (``mammals``, ``birds``, ``plants``, ``airways``, ``waterways``,
    ``landways``; link or copy NICO++'s fine-grained class folders into them). Every cell must exist.
    """
    root = require_folder(data_dir, "NICO++ data folder")
    cells: dict[tuple[int, int], list[Path]] = {}
    for ci, context in enumerate(CONTEXTS):
        folder = next((root / name for name in CONTEXT_FOLDERS[context] if (root / name).is_dir()), None)
        if folder is None:
            raise UserInputError(
                f"NICO++ data folder {str(root)!r} has no context folder {context!r} (accepted names: {list(CONTEXT_FOLDERS[context])})"
            )
        for oi, name in enumerate(CLASSES):
            if not (folder / name).is_dir():
                raise UserInputError(
                    f"NICO++ data folder lacks {str(folder / name)!r} (layout: <data_dir>/<context>/<class>/*.jpg)"
                )
            cells[(oi, ci)] = list_images(folder / name)
    return cells


class NICODataModule(SplitDataModule):
    """NICO++ class-context correlated data for a ResNet classifier (LBEE paper, App. A; FACTS splits).

    Args:
        data_dir: real NICO++ folder (layout in :func:`scan_nico_folder`); ``None`` renders the synthetic default.
        correlation: fraction of a class's training (and validation) images in its correlated context.
        image_size: side length of the images in pixels (8 to 128 rendered, 8 to 1024 read from a folder).
        train_size: synthetic training images, 6 to 100,000 (validation gets a quarter); ignored for real data.
        test_per_pair: test images per (class, context) pair of the unbiased test split, 1 to 1,000.
        val_fraction: real data only: fraction of the biased pool kept for validation.
        correlated_context: ``{class: context}`` override of :data:`CORRELATED_CONTEXT`.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every random draw.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        correlation: float = 0.85,
        image_size: int = 64,
        train_size: int = 3000,
        test_per_pair: int = 20,
        val_fraction: float = 0.2,
        correlated_context: dict[str, str] | None = None,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()  # saves this module's arguments as hyper-parameters
        if not 0.0 < correlation <= 1.0:
            raise UserInputError(f"correlation={correlation} must lie in (0, 1], e.g. 0.75, 0.85 or 0.95")
        check_range("train_size", train_size, 6, MAX_TRAIN_SIZE, "images")
        check_range("test_per_pair", test_per_pair, 1, MAX_TEST_PER_PAIR, "images per (class, context) pair")
        if not 0.0 < val_fraction < 1.0:
            raise UserInputError(f"val_fraction={val_fraction} must lie in (0, 1)")
        generated = train_size + max(train_size // 4, 6) + 36 * test_per_pair
        options = f"train_size={train_size}, test_per_pair={test_per_pair}"
        self._init_image_source(NICORenderer, MAX_RENDER_SIZE, "NICO++ data folder", generated, options)
        self.correlated = parse_correlated_context(correlated_context)
        self.num_classes = len(CLASSES)
        self.class_names = list(CLASSES)
        self.context_names = list(CONTEXTS)
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {"context": list(CONTEXTS)}

    def groups(self, label: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """0 (aligned) where ``context`` is the class's correlated context, else 1 (conflicting)."""
        return (self.correlated[label] != context).long()

    def context_order(self, label: int) -> list[int]:
        """Context indices for class ``label``: its correlated context first, then the others in order."""
        first = int(self.correlated[label])
        return [first] + [c for c in range(len(CONTEXTS)) if c != first]

    # ------------------------------------------------------------------ synthetic
    def biased_attributes(self, size: int, gen: torch.Generator, first_style: int = 1) -> dict[str, torch.Tensor]:
        """Class / context / style of ``size`` samples following the correlation (counts exact, order shuffled)."""
        labels, contexts = [], []
        for label in range(len(CLASSES)):
            per_class = size // len(CLASSES) + (1 if label < size % len(CLASSES) else 0)
            for context, count in zip(self.context_order(label), biased_counts(per_class, self.hparams.correlation)):
                labels += [label] * count
                contexts += [context] * count
        order = torch.randperm(len(labels), generator=gen)
        style = torch.randint(first_style, first_style + (1 << 29), (len(labels),), generator=gen)
        return {"object": torch.tensor(labels)[order], "context": torch.tensor(contexts)[order], "style": style}

    def unbiased_attributes(self, per_pair: int, first_style: int = 1 << 30) -> dict[str, torch.Tensor]:
        """Every class x context pair ``per_pair`` times, styles ``first_style``, ``first_style + 1``, ..."""
        o, c, s = torch.meshgrid(
            torch.arange(len(CLASSES)), torch.arange(len(CONTEXTS)), torch.arange(per_pair), indexing="ij"
        )
        o, c = o.flatten(), c.flatten()
        return {"object": o, "context": c, "style": first_style + torch.arange(len(o))}

    def _generated(self, attrs: dict[str, torch.Tensor]) -> AttributeImageDataset:
        images = to_uint8(self.renderer.render_batch(attrs["object"], attrs["context"], attrs["style"]))
        return AttributeImageDataset(images, attrs["object"], self.groups(attrs["object"], attrs["context"]), attrs)

    def _setup_generated(self, gen: torch.Generator) -> None:
        hp = self.hparams
        self.train_set = self._generated(self.biased_attributes(hp.train_size, gen, first_style=1))
        self.val_set = self._generated(self.biased_attributes(max(hp.train_size // 4, 6), gen, first_style=1 << 29))
        self.test_set = self._generated(self.unbiased_attributes(hp.test_per_pair))

    # ------------------------------------------------------------------ real folder
    def _setup_folder(self, gen: torch.Generator) -> None:
        hp = self.hparams
        cells = scan_nico_folder(hp.data_dir)
        paths = [p for files in cells.values() for p in files]
        cell_of = [key for key, files in cells.items() for _ in files]
        loaded = open_images(paths, hp.image_size, resize="center_crop", desc="checking NICO++ images")
        self.num_skipped_images = loaded.num_skipped
        readable: dict[tuple[int, int], list[int]] = {key: [] for key in cells}
        for row, index in enumerate(loaded.kept.tolist()):
            readable[cell_of[index]].append(row)
        empty = [f"{CLASSES[o]}/{CONTEXTS[c]}" for (o, c), rows in readable.items() if not rows]
        if empty:
            raise UserInputError(f"NICO++ cells without a readable image: {empty}")
        test, train, val = [], [], []
        for label in range(len(CLASSES)):
            pools = []
            for context in self.context_order(label):
                rows = torch.tensor(readable[(label, context)])
                rows = rows[torch.randperm(len(rows), generator=gen)]
                k = min(hp.test_per_pair, len(rows) // 2)  # keep at least half of a small cell for training
                test += rows[:k].tolist()
                pools.append(rows[k:])
            # Largest biased subset: all correlated images if the other contexts can supply their share.
            others = sum(len(p) for p in pools[1:])
            n_corr = (
                len(pools[0])
                if hp.correlation == 1.0
                else min(len(pools[0]), math.floor(others * hp.correlation / (1 - hp.correlation)))
            )
            counts = biased_counts(round(n_corr / hp.correlation), hp.correlation)
            counts = [min(c, len(p)) for c, p in zip(counts, pools)]
            for pool, count in zip(pools, counts):
                chosen = pool[:count].tolist()
                n_val = round(count * hp.val_fraction)
                val += chosen[:n_val]
                train += chosen[n_val:]

        def subset(rows: list[int]) -> AttributeImageDataset:
            index = torch.tensor(rows, dtype=torch.long)
            keys = [cell_of[i] for i in loaded.kept[index].tolist()]
            label = torch.tensor([k[0] for k in keys], dtype=torch.long)
            context = torch.tensor([k[1] for k in keys], dtype=torch.long)
            attrs = {"object": label, "context": context, "style": loaded.kept[index]}  # style: index of the file
            return AttributeImageDataset(loaded.images[index], label, self.groups(label, context), attrs)

        self.train_set, self.val_set, self.test_set = subset(train), subset(val), subset(test)
