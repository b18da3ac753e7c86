"""Synthetic NICO-like images: six object glyphs over six procedural context backgrounds.

:class:`NICORenderer` draws one of six procedural object glyphs (an animal, a bird, a potted plant, a plane,
a sailing boat, a car, one per class of :data:`CLASSES`) in a random colour over one of six procedural
backgrounds (one per context of :data:`CONTEXTS`). It is the embedded default of
:class:`datamodules.nico.NICODataModule`, which builds the class-context correlated splits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from datamodules.base import check_range, vocab_index
from datamodules.clevr_render import style_uniform
from nemo_train.errors import UserInputError

CLASSES: list[str] = ["mammals", "birds", "plants", "airways", "waterways", "landways"]
CONTEXTS: list[str] = ["dim_lighting", "outdoor", "grass", "rock", "autumn", "water"]
#: Largest rendered image side in pixels (smallest 8).
MAX_RENDER_SIZE = 128
#: Number of uniform random numbers each style seeds (scene parameters + three 8x8 noise grids).
_PARAMS, _GRID = 16, 8


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
        o, c = vocab_index(CLASSES, object, "NICO++ class"), vocab_index(CONTEXTS, context, "NICO++ context")
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
