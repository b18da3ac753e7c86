"""NICO++ with class-context spurious correlation (the FACTS splits used by paper 003, App. A).

Six classes (mammals, birds, plants, airways, waterways, landways) are shown in six contexts (dim
lighting, outdoor, grass, rock, autumn, water). Each class has one correlated context; ``correlation``
(0.75 / 0.85 / 0.95 for NICO++75 / 85 / 95) is the fraction of a class's training images that show it,
the rest being spread evenly over the five other contexts. Validation follows the same bias; the test
split is unbiased (every class-context pair equally often). A sample is ``aligned`` when it shows its
class's correlated context and ``conflicting`` otherwise; ``attrs["context"]`` holds the ground-truth
context, and ``eval_groupings = {"context": CONTEXTS}`` lets the classifier log per-context accuracy.

Embedded default: :class:`NICORenderer`, a synthetic NICO-like generator that draws one of six
procedural object glyphs (an animal, a bird, a potted plant, a plane, a sailing boat, a car) in a random
colour over one of six procedural context backgrounds. Real data: the folder layout described in
:func:`scan_nico_folder`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F

from datamodules.base import (
    AttributeImageDataset,
    SplitDataModule,
    check_dataset_bytes,
    check_loader,
    check_range,
    to_uint8,
)
from datamodules.clevr import style_uniform
from datamodules.folder import list_images, load_images, require_folder
from nemo_train.errors import UserInputError

CLASSES: list[str] = ["mammals", "birds", "plants", "airways", "waterways", "landways"]
CONTEXTS: list[str] = ["dim_lighting", "outdoor", "grass", "rock", "autumn", "water"]
#: Each class's correlated context (as listed in the project issue for the FACTS NICO++ splits).
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
#: Documented limits of the size options, checked before anything is allocated: rendered images 8 to 128 px,
#: images read from a folder 8 to 1024 px, up to 100,000 synthetic training images and 1,000 test images per
#: (class, context) pair (and 4 GiB of images in all).
MAX_RENDER_SIZE, MAX_FOLDER_SIZE, MAX_TRAIN_SIZE, MAX_TEST_PER_PAIR = 128, 1024, 100_000, 1000
#: Number of uniform random numbers each style seeds (scene parameters + three 8x8 noise grids).
_PARAMS, _GRID = 16, 8


def _index(vocab: list[str], value: int | str, what: str) -> int:
    if isinstance(value, str):
        if value not in vocab:
            raise UserInputError(f"unknown NICO++ {what} {value!r}; expected one of {vocab}")
        return vocab.index(value)
    if not 0 <= int(value) < len(vocab):
        raise UserInputError(f"NICO++ {what} index {value} out of range 0-{len(vocab) - 1}")
    return int(value)


def parse_correlated_context(pairs: Mapping[str, str] | None) -> torch.Tensor:
    """``long[6]``: the correlated context index of each class (``None`` gives :data:`CORRELATED_CONTEXT`)."""
    pairs = dict(CORRELATED_CONTEXT if pairs is None else pairs)
    unknown = sorted(set(pairs) - set(CLASSES))
    if unknown:
        raise UserInputError(f"correlated_context names unknown class(es) {unknown}; expected {CLASSES}")
    missing = sorted(set(CLASSES) - set(pairs))
    if missing:
        raise UserInputError(f"correlated_context lacks class(es) {missing}; every class needs a context")
    return torch.tensor([_index(CONTEXTS, pairs[c], "context") for c in CLASSES])


# --------------------------------------------------------------------------------------------- glyphs
def _ellipse(x, y, cx, cy, rx, ry):
    return ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1


def _box(x, y, x0, x1, y0, y1):
    return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)


def _triangle(x, y, a, b, c):
    def side(p, q):
        return (x - q[0]) * (p[1] - q[1]) - (p[0] - q[0]) * (y - q[1])

    d1, d2, d3 = side(a, b), side(b, c), side(c, a)
    return ~(((d1 < 0) | (d2 < 0) | (d3 < 0)) & ((d1 > 0) | (d2 > 0) | (d3 > 0)))


def _mammal(x, y):
    legs = (
        _box(x, y, -0.48, -0.36, 0.1, 0.62)
        | _box(x, y, -0.22, -0.1, 0.1, 0.62)
        | _box(x, y, 0.12, 0.24, 0.1, 0.62)
        | _box(x, y, 0.34, 0.46, 0.1, 0.62)
    )
    tail = _triangle(x, y, (-0.55, -0.05), (-0.55, 0.08), (-0.85, -0.3))
    return _ellipse(x, y, 0.0, 0.0, 0.58, 0.3) | _ellipse(x, y, 0.62, -0.3, 0.2, 0.18) | legs | tail


def _bird(x, y):
    wing = _triangle(x, y, (-0.2, 0.0), (0.2, 0.0), (-0.35, -0.65))
    beak = _triangle(x, y, (0.45, -0.12), (0.45, -0.02), (0.65, -0.07))
    tail = _triangle(x, y, (-0.3, 0.1), (-0.75, -0.05), (-0.75, 0.3))
    return _ellipse(x, y, 0.0, 0.1, 0.38, 0.2) | _ellipse(x, y, 0.35, -0.07, 0.14, 0.14) | wing | beak | tail


def _plant(x, y):
    leaves = (
        _ellipse(x, y, 0.0, -0.45, 0.22, 0.32)
        | _ellipse(x, y, -0.32, -0.15, 0.28, 0.13)
        | _ellipse(x, y, 0.32, -0.2, 0.28, 0.13)
    )
    pot = _triangle(x, y, (-0.32, 0.45), (0.32, 0.45), (0.0, 1.3)) & (y <= 0.85)
    return leaves | _box(x, y, -0.05, 0.05, -0.3, 0.5) | pot


def _plane(x, y):
    wings = _triangle(x, y, (-0.15, 0.0), (0.25, 0.0), (-0.3, 0.7)) | _triangle(
        x, y, (-0.15, 0.0), (0.25, 0.0), (-0.3, -0.7)
    )
    fin = _triangle(x, y, (-0.8, 0.0), (-0.55, 0.0), (-0.82, -0.38))
    return _ellipse(x, y, 0.0, 0.0, 0.82, 0.12) | wings | fin


def _boat(x, y):
    hull = _ellipse(x, y, 0.0, 0.2, 0.75, 0.35) & (y >= 0.2)
    sail = _triangle(x, y, (0.08, 0.12), (0.08, -0.75), (0.6, 0.12)) | _triangle(
        x, y, (-0.02, 0.12), (-0.02, -0.55), (-0.45, 0.12)
    )
    return hull | _box(x, y, -0.02, 0.08, -0.8, 0.25) | sail


def _car(x, y):
    wheels = _ellipse(x, y, -0.42, 0.32, 0.17, 0.17) | _ellipse(x, y, 0.42, 0.32, 0.17, 0.17)
    cabin = _triangle(x, y, (-0.4, -0.05), (-0.2, -0.38), (-0.2, -0.05)) | _box(x, y, -0.2, 0.28, -0.38, -0.05)
    return _box(x, y, -0.72, 0.72, -0.05, 0.3) | cabin | wheels


_GLYPHS = [_mammal, _bird, _plant, _plane, _boat, _car]


# --------------------------------------------------------------------------------------------- renderer
class NICORenderer:
    """Conditional generator ``render(object, context, style) -> float[3, S, S]`` of a synthetic NICO-like set.

    ``object`` picks one of six glyphs (the classes), ``context`` one of six procedural backgrounds;
    ``style`` seeds everything else (glyph colour, pose, background texture), so changing one attribute
    and re-rendering is an exact counterfactual edit. Dim lighting darkens the whole scene, object included.

    Args:
        image_size: output side length in pixels.
        supersample: samples per pixel along each axis (anti-aliasing).
    """

    attributes: dict[str, list[str]] = {"object": CLASSES, "context": CONTEXTS}

    def __init__(self, image_size: int = 64, supersample: int = 2) -> None:
        check_range("NICO++ image_size", image_size, 8, MAX_RENDER_SIZE, "pixels")
        check_range("supersample", supersample, 1, 4, "samples per pixel along each axis")
        self.image_size, self.supersample = image_size, supersample
        n = image_size * supersample
        coords = (torch.arange(n) + 0.5) / n * 2 - 1
        self.y, self.x = torch.meshgrid(coords, coords, indexing="ij")  # [n, n], y grows downwards

    def render(self, object: int | str, context: int | str, style: int = 0) -> torch.Tensor:
        """Render one image ``float[3, S, S]`` in [0, 1]."""
        o, c = _index(CLASSES, object, "class"), _index(CONTEXTS, context, "context")
        return self.render_batch(torch.tensor([o]), torch.tensor([c]), torch.tensor([int(style)]))[0]

    def render_batch(
        self, object: torch.Tensor, context: torch.Tensor, style: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Render ``float[B, 3, S, S]`` from 1-D index tensors (rendered in chunks of 256)."""
        object, context = object.long().flatten(), context.long().flatten()
        style = torch.zeros_like(object) if style is None else style.long().flatten()
        for name, values, vocab in (("class", object, CLASSES), ("context", context, CONTEXTS)):
            if len(values) and (values.min() < 0 or values.max() >= len(vocab)):
                raise UserInputError(
                    f"NICO++ {name} indices must lie in 0-{len(vocab) - 1}, got {values.unique().tolist()}"
                )
        chunks = [self._render_chunk(*c) for c in zip(object.split(256), context.split(256), style.split(256))]
        return torch.cat(chunks) if chunks else torch.empty(0, 3, self.image_size, self.image_size)

    def _noise(self, grid: torch.Tensor, n: int) -> torch.Tensor:
        """Smooth value noise ``[B, n, n]`` in [0, 1] bilinearly upsampled from ``[B, g, g]`` random values."""
        return F.interpolate(grid[:, None], size=(n, n), mode="bilinear", align_corners=True)[:, 0].clamp(0, 1)

    def _background(self, context: int, rand: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``[B, 3, n, n]`` background of one context; ``rand`` are per-sample numbers, ``noise`` three noise fields."""
        x, y = self.x[None, None], self.y[None, None]  # [1, 1, n, n]
        name = CONTEXTS[context]
        r = rand[:, :, None, None]  # r[:, k:k+1] is [B, 1, 1, 1]
        n1, n2, n3 = noise[:, 0:1], noise[:, 1:2], noise[:, 2:3]

        def rgb(c):
            return torch.tensor(c).view(1, 3, 1, 1)

        if name == "dim_lighting":  # an indoor room lit by one lamp (the whole scene is darkened later)
            wall = rgb((0.55, 0.45, 0.38)) * (0.7 + 0.3 * n1)
            lamp = torch.exp(-((x - (r[:, 0:1] - 0.5)) ** 2 + (y + 0.6) ** 2) / 0.3)
            return wall + 0.35 * lamp * rgb((1.0, 0.85, 0.5))
        if name == "outdoor":  # sky over a sandy path
            horizon = 0.1 + 0.35 * r[:, 1:2]
            t = ((y + 1) / (horizon + 1)).clamp(0, 1)
            sky = rgb((0.35, 0.6, 0.95)) * (1 - t) + rgb((0.85, 0.92, 0.98)) * t + 0.15 * (n1 > 0.62).float()
            ground = rgb((0.62, 0.55, 0.42)) * (0.8 + 0.3 * n2)
            return torch.where(y < horizon, sky, ground)
        if name == "grass":  # green blades: high-frequency vertical streaks over patchy green
            blades = 0.5 + 0.5 * torch.sin(x * (55 + 20 * r[:, 2:3]) + 6 * n3 + 3 * y)
            return rgb((0.18, 0.5, 0.12)) * (0.6 + 0.35 * n1) + rgb((0.1, 0.25, 0.05)) * blades
        if name == "rock":  # grey blotches
            blotch = ((n1 - 0.5) * 4).sigmoid()
            return rgb((0.35, 0.34, 0.33)) + rgb((0.3, 0.3, 0.28)) * blotch + 0.1 * (n2 - 0.5)
        if name == "autumn":  # orange, red and yellow leaves
            leaves = ((n1 - 0.5) * 6).sigmoid()
            return (
                rgb((0.8, 0.35, 0.05)) * leaves
                + rgb((0.55, 0.15, 0.05)) * (1 - leaves)
                + rgb((0.3, 0.3, 0.0)) * (n2 > 0.6).float()
            )
        # water: blue with horizontal waves
        waves = torch.sin(y * (30 + 10 * r[:, 3:4]) + 2.5 * torch.sin(x * 4 + 6.28 * r[:, 4:5]) + 4 * n2)
        return rgb((0.1, 0.33, 0.62)) * (0.85 + 0.25 * n1) + 0.18 * (waves > 0.8).float()

    def _render_chunk(self, object, context, style) -> torch.Tensor:
        n = self.image_size * self.supersample
        rand = style_uniform(style, _PARAMS + 3 * _GRID * _GRID)
        params, grids = rand[:, :_PARAMS], rand[:, _PARAMS:].view(-1, 3, _GRID, _GRID)
        noise = torch.stack([self._noise(grids[:, i], n) for i in range(3)], 1)  # [B, 3, n, n]
        image = torch.empty(len(object), 3, n, n)
        for c in context.unique().tolist():
            rows = torch.nonzero(context == c).flatten()
            image[rows] = self._background(c, params[rows], noise[rows])
        # Object glyph: random scale, position, tilt and mirror; coordinates mapped into the glyph's frame.
        scale = 0.5 + 0.25 * params[:, 5]
        dx, dy = (params[:, 6] - 0.5) * 0.4, (params[:, 7] - 0.5) * 0.4
        angle = (params[:, 8] - 0.5) * math.radians(30)
        flip = torch.where(params[:, 9] < 0.5, -1.0, 1.0)
        cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
        px, py = self.x[None] - dx[:, None, None], self.y[None] - dy[:, None, None]
        gx = (cos * px + sin * py) / scale[:, None, None] * flip[:, None, None]
        gy = (-sin * px + cos * py) / scale[:, None, None]
        mask = torch.zeros(len(object), n, n, dtype=torch.bool)
        for o in object.unique().tolist():
            rows = torch.nonzero(object == o).flatten()
            mask[rows] = _GLYPHS[o](gx[rows], gy[rows])
        hue = params[:, 10:13]
        color = (0.15 + 0.8 * hue / hue.amax(-1, keepdim=True)) * (0.55 + 0.45 * params[:, 13:14])
        shade = 0.8 + 0.2 * (1 - gy.clamp(-1, 1))[:, None] / 2  # lit from above
        image = torch.where(mask[:, None], color[:, :, None, None] * shade, image)
        dim = (context == CONTEXTS.index("dim_lighting")).float().view(-1, 1, 1, 1)
        image = image * (1 - 0.65 * dim)
        image = image.clamp(0, 1)
        return F.avg_pool2d(image, self.supersample) if self.supersample > 1 else image


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
    """NICO++ class-context correlated data for a ResNet classifier (paper 003, App. A; FACTS splits).

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
        super().__init__()
        self.save_hyperparameters()
        if not 0.0 < correlation <= 1.0:
            raise UserInputError(f"correlation={correlation} must lie in (0, 1], e.g. 0.75, 0.85 or 0.95")
        check_range("train_size", train_size, 6, MAX_TRAIN_SIZE, "images")
        check_range("test_per_pair", test_per_pair, 1, MAX_TEST_PER_PAIR, "images per (class, context) pair")
        check_range("image_size", image_size, 8, MAX_RENDER_SIZE if data_dir is None else MAX_FOLDER_SIZE, "pixels")
        check_loader(batch_size, num_workers)
        if data_dir is None:
            total = train_size + max(train_size // 4, 6) + 36 * test_per_pair
            check_dataset_bytes(total, image_size, f"train_size={train_size}, test_per_pair={test_per_pair}")
        if not 0.0 < val_fraction < 1.0:
            raise UserInputError(f"val_fraction={val_fraction} must lie in (0, 1)")
        if data_dir is not None:
            require_folder(data_dir, "NICO++ data folder")
        self.correlated = parse_correlated_context(correlated_context)
        self.num_classes = len(CLASSES)
        self.class_names = list(CLASSES)
        self.context_names = list(CONTEXTS)
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {"context": list(CONTEXTS)}
        #: The renderer of every split (``None`` for real data): ``renderer.render_batch(**attrs)`` re-renders any
        #: synthetic sample exactly.
        self.renderer = NICORenderer(image_size) if data_dir is None else None
        self.num_skipped_images = 0
        self.train_set = self.val_set = self.test_set = None

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
        loaded = load_images(paths, hp.image_size, resize="center_crop", desc="reading NICO++")
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
