"""Procedural renderer and attribute vocabulary of single-object CLEVR (model-differences paper, Sec. 5.2 and App. A.3).

An object is described by four attributes: shape (cube, cylinder, sphere), material (metal, rubber),
colour (8 CLEVR colours) and size (small, medium, large). :class:`CLEVRRenderer` draws it on a grey floor
with a small vectorised ray caster (orthographic camera, one light, Lambert diffuse + Blinn-Phong specular,
hard shadows): rubber is matte, metal is dark-diffuse with a mirror-like environment reflection and a sharp
white highlight. ``style`` seeds a small jitter of position, rotation and light (``style=0`` is the
canonical, centred view), so re-rendering with one attribute changed is an exact counterfactual edit.
The datamodule that builds the biased splits from these images is :mod:`datamodules.clevr`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from datamodules.base import check_range, vocab_index
from nemo_train.errors import UserInputError

SHAPES: list[str] = ["cube", "cylinder", "sphere"]
MATERIALS: list[str] = ["metal", "rubber"]
#: The eight CLEVR colours (RGB in [0, 1]).
COLORS: dict[str, tuple[float, float, float]] = {
    "gray": (0.34, 0.34, 0.34),
    "red": (0.68, 0.14, 0.14),
    "blue": (0.16, 0.29, 0.84),
    "green": (0.11, 0.41, 0.08),
    "brown": (0.51, 0.29, 0.10),
    "purple": (0.51, 0.15, 0.75),
    "cyan": (0.16, 0.82, 0.82),
    "yellow": (1.00, 0.93, 0.20),
}
COLOR_NAMES: list[str] = list(COLORS)
#: Object radius (world units) of each size; cubes have half-side 0.85 x radius, cylinders height 2 x radius.
SIZES: dict[str, float] = {"small": 0.32, "medium": 0.46, "large": 0.62}
SIZE_NAMES: list[str] = list(SIZES)
ATTRIBUTES: dict[str, list[str]] = {"shape": SHAPES, "material": MATERIALS, "color": COLOR_NAMES, "size": SIZE_NAMES}
#: Largest rendered image side in pixels (smallest 8): the ray caster holds every sub-pixel ray of a
#: 128-image chunk in memory.
MAX_RENDER_SIZE = 128


def style_uniform(style: torch.Tensor, count: int) -> torch.Tensor:
    """``float[B, count]`` uniform numbers in [0, 1) fixed by each sample's integer ``style``."""
    values = {s: np.random.default_rng(s).random(count) for s in set(style.tolist())}
    return (
        torch.from_numpy(np.stack([values[s] for s in style.tolist()])).float() if len(style) else torch.empty(0, count)
    )


def attribute_index(name: str, value: int | str) -> int:
    """Index of ``value`` in the vocabulary of attribute ``name`` (given by name or index)."""
    return vocab_index(ATTRIBUTES[name], value, f"CLEVR {name}")


# --------------------------------------------------------------------------------------------- rendering
def _normalize(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-8)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def _hit_sphere(o, d, radius):
    """Ray / sphere resting on the floor (centre at height ``radius``); ``o`` relative to the object base."""
    oc = o - torch.stack([torch.zeros_like(radius), radius, torch.zeros_like(radius)], -1)[:, None]
    b = _dot(oc, d)
    disc = b * b - (_dot(oc, oc) - radius[:, None] ** 2)
    t = -b - disc.clamp_min(0).sqrt()
    hit = (disc > 0) & (t > 1e-4)
    normal = (oc + t[..., None] * d) / radius[:, None, None]
    return hit, t, normal


def _hit_cube(o, d, radius, yaw):
    """Ray / axis-aligned-then-yawed box of half-side ``0.85 * radius`` resting on the floor (slab method)."""
    half = 0.85 * radius
    cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]

    def to_local(v):  # rotate by -yaw about the vertical axis
        return torch.stack([cos * v[..., 0] - sin * v[..., 2], v[..., 1], sin * v[..., 0] + cos * v[..., 2]], -1)

    ol = to_local(o) - torch.stack([torch.zeros_like(half), half, torch.zeros_like(half)], -1)[:, None]
    dl = to_local(d.expand_as(o))
    dl = torch.where(dl.abs() < 1e-8, torch.full_like(dl, 1e-8), dl)
    t1, t2 = (-half[:, None, None] - ol) / dl, (half[:, None, None] - ol) / dl
    t_near, t_far = torch.minimum(t1, t2), torch.maximum(t1, t2)
    t_enter, axis = t_near.max(-1)
    t_exit = t_far.min(-1).values
    hit = (t_exit >= t_enter) & (t_enter > 1e-4)
    normal_local = -torch.sign(dl) * F.one_hot(axis, 3).to(dl.dtype)
    nx, ny, nz = normal_local.unbind(-1)
    normal = torch.stack([cos * nx + sin * nz, ny, -sin * nx + cos * nz], -1)  # rotate back by +yaw
    return hit, t_enter, normal


def _hit_cylinder(o, d, radius):
    """Ray / upright cylinder of radius ``radius`` and height ``2 * radius`` standing on the floor."""
    r = radius[:, None]
    dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
    ox, oy, oz = o[..., 0], o[..., 1], o[..., 2]
    a = (dx * dx + dz * dz).clamp_min(1e-12)
    b = ox * dx + oz * dz
    disc = b * b - a * (ox * ox + oz * oz - r * r)
    t_side = (-b - disc.clamp_min(0).sqrt()) / a
    y_side = oy + t_side * dy
    side = (disc > 0) & (t_side > 1e-4) & (y_side >= 0) & (y_side <= 2 * r)
    safe_dy = torch.where(dy.abs() < 1e-8, torch.full_like(dy, -1e-8), dy)
    t_cap = (2 * r - oy) / safe_dy
    cap = (t_cap > 1e-4) & ((ox + t_cap * dx) ** 2 + (oz + t_cap * dz) ** 2 <= r * r)
    use_cap = cap & (~side | (t_cap < t_side))
    t = torch.where(use_cap, t_cap, t_side)
    p = o + t[..., None] * d
    side_normal = torch.stack([p[..., 0] / r, torch.zeros_like(t), p[..., 2] / r], -1)
    normal = torch.where(use_cap[..., None], torch.tensor([0.0, 1.0, 0.0]), side_normal)
    return side | cap, t, normal


class CLEVRRenderer:
    """Conditional generator ``render(shape, material, color, size, style) -> float[3, S, S]`` of single-object CLEVR scenes.

    Attributes are names or indices into :attr:`attributes`; ``render_batch`` takes 1-D index tensors.
    The image is ray cast at ``supersample`` x the resolution and averaged down (anti-aliasing).

    Args:
        image_size: output side length in pixels.
        supersample: rays per pixel along each axis.
        jitter: scale of the style-seeded position / rotation / light jitter (0 disables it).
    """

    attributes: dict[str, list[str]] = ATTRIBUTES
    #: Camera elevation (degrees) and half-width of the square view window (world units).
    ELEVATION, EXTENT = 30.0, 1.25
    #: How much of a metal object's mirror reflection takes the object's colour (the rest stays grey).
    METAL_TINT = 0.2
    #: Light elevation and azimuth (degrees) of the canonical view.
    LIGHT_ELEVATION, LIGHT_AZIMUTH = 50.0, -40.0

    def __init__(self, image_size: int = 64, supersample: int = 2, jitter: float = 1.0) -> None:
        check_range("CLEVR image_size", image_size, 8, MAX_RENDER_SIZE, "pixels")
        check_range("supersample", supersample, 1, 4, "rays per pixel along each axis")
        self.image_size, self.supersample, self.jitter = image_size, supersample, jitter
        self.palette = torch.tensor(list(COLORS.values()))
        self.radii = torch.tensor(list(SIZES.values()))
        n = image_size * supersample
        e = math.radians(self.ELEVATION)
        self.fill_light = _normalize(torch.tensor([0.7, 0.25, 1.0]))
        self.view_dir = torch.tensor([0.0, -math.sin(e), -math.cos(e)])
        cam_up = torch.tensor([0.0, math.cos(e), -math.sin(e)])
        coords = (torch.arange(n) + 0.5) / n * 2 - 1  # pixel centres in (-1, 1)
        v, u = torch.meshgrid(-coords * self.EXTENT, coords * self.EXTENT, indexing="ij")
        target = torch.tensor([0.0, 0.42, 0.0])
        origins = target + u[..., None] * torch.tensor([1.0, 0.0, 0.0]) + v[..., None] * cam_up - 6.0 * self.view_dir
        self.origins = origins.reshape(-1, 3)  # [P, 3], one ray per sub-pixel

    def render(
        self, shape: int | str, material: int | str, color: int | str, size: int | str, style: int = 0
    ) -> torch.Tensor:
        """Render one image ``float[3, S, S]`` in [0, 1]."""
        idx = [
            attribute_index(k, v)
            for k, v in zip(("shape", "material", "color", "size"), (shape, material, color, size))
        ]
        return self.render_batch(*(torch.tensor([i]) for i in idx), torch.tensor([int(style)]))[0]

    def scene_params(self, style: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-sample object offset, yaw and light direction; ``style == 0`` gives the canonical view."""
        rand = style_uniform(style, 4)
        on = (style != 0).float() * self.jitter
        offset_x = (rand[:, 0] - 0.5) * 0.5 * on
        offset_z = (rand[:, 1] - 0.5) * 0.5 * on
        yaw = torch.full_like(offset_x, math.radians(30.0)) + (rand[:, 2] - 0.5) * math.radians(60.0) * on
        azimuth = (
            torch.full_like(offset_x, math.radians(self.LIGHT_AZIMUTH)) + (rand[:, 3] - 0.5) * math.radians(50.0) * on
        )
        el = math.radians(self.LIGHT_ELEVATION)
        light = torch.stack(
            [
                math.cos(el) * torch.sin(azimuth),
                torch.full_like(azimuth, math.sin(el)),
                math.cos(el) * torch.cos(azimuth),
            ],
            -1,
        )
        return {"offset_x": offset_x, "offset_z": offset_z, "yaw": yaw, "light": light}

    def render_batch(
        self,
        shape: torch.Tensor,
        material: torch.Tensor,
        color: torch.Tensor,
        size: torch.Tensor,
        style: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Render ``float[B, 3, S, S]`` from 1-D index tensors (rendered in chunks of 128)."""
        shape, material, color, size = (t.long().flatten() for t in (shape, material, color, size))
        style = torch.zeros_like(shape) if style is None else style.long().flatten()
        chunks = [self._render_chunk(*c) for c in zip(*(t.split(128) for t in (shape, material, color, size, style)))]
        return torch.cat(chunks) if chunks else torch.empty(0, 3, self.image_size, self.image_size)

    def _intersect(self, o, d, shape, radius, yaw):
        """First hit of rays ``o + t d`` (object-base coordinates, ``[B, P, 3]``) with each sample's object."""
        hit = torch.zeros(o.shape[:2], dtype=torch.bool)
        t = torch.full(o.shape[:2], float("inf"))
        normal = torch.zeros_like(o)
        for index, name in enumerate(SHAPES):
            rows = torch.nonzero(shape == index).flatten()
            if len(rows) == 0:
                continue
            dd = d[rows] if d.shape[0] > 1 else d
            if name == "sphere":
                h, tt, n = _hit_sphere(o[rows], dd, radius[rows])
            elif name == "cube":
                h, tt, n = _hit_cube(o[rows], dd, radius[rows], yaw[rows])
            else:
                h, tt, n = _hit_cylinder(o[rows], dd, radius[rows])
            hit[rows], t[rows], normal[rows] = h, torch.where(h, tt, t[rows]), n
        return hit, t, _normalize(normal)

    def _render_chunk(self, shape, material, color, size, style) -> torch.Tensor:
        for name, values in (("shape", shape), ("material", material), ("color", color), ("size", size)):
            if len(values) and (values.min() < 0 or values.max() >= len(ATTRIBUTES[name])):
                raise UserInputError(
                    f"CLEVR {name} indices must lie in 0-{len(ATTRIBUTES[name]) - 1}, got {values.unique().tolist()}"
                )
        params = self.scene_params(style)
        radius = self.radii[size]
        base = torch.stack([params["offset_x"], torch.zeros_like(radius), params["offset_z"]], -1)
        o = self.origins[None] - base[:, None]  # [B, P, 3] rays relative to the object's base centre
        d = self.view_dir.view(1, 1, 3)
        light = params["light"][:, None]  # [B, 1, 3]

        hit, t, normal = self._intersect(o, d, shape, radius, params["yaw"])

        # Floor (y = 0): lit from above, with the object's hard shadow.
        t_floor = -o[..., 1] / d[..., 1]
        floor_point = o + t_floor[..., None] * d
        shadow, _, _ = self._intersect(floor_point + 1e-3 * light, light, shape, radius, params["yaw"])
        ground = 0.52 + 0.08 * torch.exp(-(floor_point[..., 0] ** 2 + floor_point[..., 2] ** 2) / 4.0)
        floor_rgb = (ground * torch.where(shadow, 0.55, 1.0))[..., None].expand(*ground.shape, 3)

        # Object: rubber = matte Lambert + faint broad highlight; metal = dark diffuse + tinted mirror + sharp highlight.
        albedo = self.palette[color][:, None]  # [B, 1, 3]
        view = -d
        diffuse = _dot(normal, light).clamp_min(0)[..., None]
        half = _normalize(light + view)
        n_dot_h = _dot(normal, half).clamp_min(0)[..., None]
        rubber = albedo * (0.32 + 0.68 * diffuse) + 0.06 * n_dot_h**8
        # The mirror looks up a nearby environment (direction bent by the hit point, so flat faces show gradients):
        # the grey floor below the horizon, a darker sky gradient above, a bright window around the key light;
        # a second, broad highlight from a fill light in front of the scene puts streaks on cube and cylinder sides.
        point = o + t.clamp(max=1e3)[..., None] * d
        reflected = d - 2 * _dot(d, normal)[..., None] * normal
        lookup = _normalize(reflected + 1.2 * (point - torch.tensor([0.0, 0.4, 0.0])))
        up = lookup[..., 1:2]
        window = ((_dot(lookup, light)[..., None] - 0.75) / 0.2).clamp(0, 1) ** 2
        environment = torch.where(up > 0, 0.12 + 0.4 * up, 0.5 + 0.1 * up) + 1.3 * window
        fill = _normalize(self.fill_light + view)
        streak = _dot(normal, fill).clamp_min(0)[..., None] ** 24
        tint = albedo / albedo.amax(-1, keepdim=True)
        # Chrome-like: mostly the (grey) environment, tinted by the object colour, over a weak dark diffuse term.
        metal = (
            albedo * (0.05 + 0.15 * diffuse)
            + 0.9 * (1 - self.METAL_TINT + self.METAL_TINT * tint) * environment
            + 1.2 * n_dot_h**80
            + 0.6 * streak
        )
        is_metal = (material == MATERIALS.index("metal"))[:, None, None]
        object_rgb = torch.where(is_metal, metal, rubber)

        rgb = torch.where(hit[..., None], object_rgb, floor_rgb).clamp(0, 1)
        n = self.image_size * self.supersample
        rgb = rgb.reshape(-1, n, n, 3).permute(0, 3, 1, 2)
        return F.avg_pool2d(rgb, self.supersample) if self.supersample > 1 else rgb.contiguous()
