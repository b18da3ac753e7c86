"""Single-object CLEVR with a planted material bias (paper 002, Sec. 5.2 and App. A.3).

Each image shows one object on a grey floor, described by four attributes: shape (cube, cylinder,
sphere), material (metal, rubber), colour (8 CLEVR colours) and size (small, medium, large). The task is
to predict the shape. The embedded default draws the images with :class:`CLEVRRenderer`, a small
vectorised ray caster (orthographic camera, one light, Lambert diffuse + Blinn-Phong specular, hard
shadows): rubber is matte, metal is dark-diffuse with a mirror-like environment reflection and a sharp
white highlight. ``style`` seeds a small jitter of position, rotation and light (``style=0`` is the
canonical, centred view), so re-rendering with one attribute changed is an exact counterfactual edit.

Bias (:class:`MaterialBias`): the model pair of 002 is biased toward rubber (model A) and metal (model B).
A CNN only takes a shortcut that predicts the label, so the bias ties material to shape in training:
every shape is shown in the favoured material, while the other material is shown almost only with one
*shortcut shape*. The test split is the full 3 x 2 x 8 x 3 = 144 attribute grid, ``test_styles`` views
per cell; samples in the favoured material are the ``aligned`` group, the others ``conflicting``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
from datamodules.folder import load_images, require_folder
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
#: Documented limits of the size options, checked before anything is allocated: rendered images 8 to 128 px
#: (the ray caster holds every sub-pixel ray of a 128-image chunk in memory), images read from a folder 8 to
#: 1024 px, up to 100,000 training images and 50 views per test cell (and 4 GiB of images in all).
MAX_RENDER_SIZE, MAX_FOLDER_SIZE, MAX_TRAIN_SIZE, MAX_TEST_STYLES = 128, 1024, 100_000, 50


def style_uniform(style: torch.Tensor, count: int) -> torch.Tensor:
    """``float[B, count]`` uniform numbers in [0, 1) fixed by each sample's integer ``style``."""
    values = {s: np.random.default_rng(s).random(count) for s in set(style.tolist())}
    return (
        torch.from_numpy(np.stack([values[s] for s in style.tolist()])).float() if len(style) else torch.empty(0, count)
    )


def attribute_index(name: str, value: int | str) -> int:
    """Index of ``value`` in the vocabulary of attribute ``name`` (given by name or index)."""
    vocab = ATTRIBUTES[name]
    if isinstance(value, str):
        if value not in vocab:
            raise UserInputError(f"unknown CLEVR {name} {value!r}; expected one of {vocab}")
        return vocab.index(value)
    if not 0 <= int(value) < len(vocab):
        raise UserInputError(f"CLEVR {name} index {value} out of range 0-{len(vocab) - 1}")
    return int(value)


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


# --------------------------------------------------------------------------------------------- bias
@dataclass(frozen=True)
class MaterialBias:
    """How material and shape are tied in the training data of one model of the pair.

    Shapes are drawn uniformly. Every shape but the ``shortcut_shape`` is shown in the
    ``favoured_material`` with probability ``favoured_fraction`` (else in the other material); the
    shortcut shape is shown in the other material with probability ``shortcut_fraction``. With
    ``favoured_fraction`` near 1 the other material almost always means the shortcut shape, so a CNN
    learns "other material -> shortcut shape" and fails on the other material's remaining shapes.
    ``favoured_material=None`` is the unbiased distribution.

    Presets (as in ``configs/clevr``): ``rubber`` (model A; metal means cylinder, 80 % of cylinders are
    metal) and ``metal`` (model B; rubber means sphere, spheres half rubber); ``unbiased``. Measured with
    the 32 px configs (3,000 images, 5 epochs of ``bias_cnn``, 576 test images): model A 0.97 on rubber /
    0.64 on metal (metal cubes fail), model B 1.00 on metal / 0.40 on rubber. A weaker tie (every shape seen in both
    materials, or only the favoured material in training) leaves the CNN recognising shapes from their
    silhouettes in both materials: the shortcut must predict the label on the training data.
    """

    favoured_material: str | None = "rubber"
    favoured_fraction: float = 1.0
    shortcut_shape: str = "cylinder"
    shortcut_fraction: float = 0.5

    PRESETS = {
        "rubber": {"favoured_material": "rubber", "shortcut_shape": "cylinder", "shortcut_fraction": 0.8},
        "metal": {"favoured_material": "metal", "shortcut_shape": "sphere", "shortcut_fraction": 0.5},
        "unbiased": {"favoured_material": None},
    }

    def __post_init__(self) -> None:
        if self.favoured_material is not None and self.favoured_material not in MATERIALS:
            raise UserInputError(f"bias names unknown material {self.favoured_material!r}; expected one of {MATERIALS}")
        if self.shortcut_shape not in SHAPES:
            raise UserInputError(f"bias names unknown shortcut_shape {self.shortcut_shape!r}; expected one of {SHAPES}")
        for name in ("favoured_fraction", "shortcut_fraction"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise UserInputError(f"{name}={getattr(self, name)} must lie in [0, 1]")

    @classmethod
    def parse(cls, spec: str | Mapping[str, Any] | MaterialBias) -> MaterialBias:
        """Build a bias from a preset name, a mapping of the fields, or a bias."""
        if isinstance(spec, MaterialBias):
            return spec
        if isinstance(spec, str):
            if spec not in cls.PRESETS:
                raise UserInputError(f"unknown CLEVR bias preset {spec!r}; expected one of {sorted(cls.PRESETS)}")
            spec = cls.PRESETS[spec]
        fields = ("favoured_material", "favoured_fraction", "shortcut_shape", "shortcut_fraction")
        unknown = set(spec) - set(fields)
        if unknown:
            raise UserInputError(f"unknown CLEVR bias field(s) {sorted(unknown)}; expected some of {list(fields)}")
        return cls(**dict(spec))

    def material_probs(self) -> torch.Tensor:
        """``float[3 shapes, 2 materials]``: P(material | shape) in the training data."""
        probs = torch.full((len(SHAPES), len(MATERIALS)), 0.5)
        if self.favoured_material is None:
            return probs
        fav = MATERIALS.index(self.favoured_material)
        for s, name in enumerate(SHAPES):
            p_fav = 1.0 - self.shortcut_fraction if name == self.shortcut_shape else self.favoured_fraction
            probs[s, fav], probs[s, 1 - fav] = p_fav, 1.0 - p_fav
        return probs

    def groups(self, material: torch.Tensor) -> torch.Tensor:
        """Group index per sample: 0 (aligned) for the favoured material, 1 (conflicting) otherwise."""
        if self.favoured_material is None:
            return torch.zeros_like(material)
        return (material != MATERIALS.index(self.favoured_material)).long()


# --------------------------------------------------------------------------------------------- real renders
def read_attribute_records(data_dir: str | Path) -> list[dict[str, Any]]:
    """Records ``{"path", "shape", "material", "color", "size"}`` from ``<data_dir>/attributes.json``.

    Two layouts are accepted (paths are relative to ``data_dir``):

    * a list of records: ``[{"file": "images/000001.png", "shape": "cube", "material": "rubber",
      "color": "red", "size": "large"}, ...]``;
    * the official CLEVR scenes file (``{"scenes": [{"image_filename": ..., "objects": [{...}]}]}``) of
      single-object renders; images are looked up in ``images/`` then in ``data_dir`` itself.
    """
    root = require_folder(data_dir, "CLEVR data folder")
    meta = root / "attributes.json"
    if not meta.is_file():
        raise UserInputError(f"CLEVR data folder {str(root)!r} has no attributes.json (expected {str(meta)!r})")
    try:
        raw = json.loads(meta.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UserInputError(f"{str(meta)!r} is not UTF-8 text (byte {err.start}); expected UTF-8 JSON") from None
    except json.JSONDecodeError as err:
        raise UserInputError(f"{str(meta)!r} is not valid JSON: {err}") from None
    if isinstance(raw, dict) and "scenes" in raw:
        records = _scene_records(raw["scenes"], root, meta)
    elif isinstance(raw, list):
        records = raw
    else:
        raise UserInputError(f"{str(meta)!r} must hold a list of records or a CLEVR scenes object")
    out = []
    for i, rec in enumerate(records):
        where = f"record {i} of {str(meta)!r}"
        if not isinstance(rec, dict):
            raise UserInputError(f"{where} is {type(rec).__name__} {rec!r}; expected an object with {list(_FIELDS)}")
        missing = [k for k in _FIELDS if k not in rec]
        if missing:
            raise UserInputError(f"{where} lacks field(s) {missing}")
        wrong = [k for k in _FIELDS if not isinstance(rec[k], str)]
        if wrong:
            raise UserInputError(
                f"{where} has non-string {', '.join(f'{k}={rec[k]!r}' for k in wrong)}; expected text "
                "(a file path relative to the folder and attribute names)"
            )
        try:
            values = {k: attribute_index(k, rec[k]) for k in ATTRIBUTES}
        except UserInputError as err:
            raise UserInputError(f"{where}: {err}") from None
        out.append({"path": root / rec["file"], **values})
    return out


_FIELDS = ("file", "shape", "material", "color", "size")


def _scene_records(scenes: Any, root: Path, meta: Path) -> list[dict[str, Any]]:
    """Records of the official CLEVR scenes layout (single-object scenes only)."""
    if not isinstance(scenes, list):
        raise UserInputError(f"'scenes' of {str(meta)!r} is {type(scenes).__name__}; expected a list of scenes")
    records = []
    for i, scene in enumerate(scenes):
        where = f"scene {i} of {str(meta)!r}"
        if not isinstance(scene, dict) or not isinstance(scene.get("image_filename"), str):
            raise UserInputError(
                f"{where} has no image_filename text; expected {{'image_filename': ..., 'objects': [...]}}"
            )
        objects = scene.get("objects", [])
        if not isinstance(objects, list) or len(objects) != 1:
            count = len(objects) if isinstance(objects, list) else type(objects).__name__
            raise UserInputError(
                f"scene {scene['image_filename']!r} has {count} objects; single-object CLEVR expects 1"
            )
        obj = objects[0]
        missing = [k for k in ATTRIBUTES if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise UserInputError(f"the object of {where} ({scene['image_filename']!r}) lacks field(s) {missing}")
        name = scene["image_filename"]
        file = f"images/{name}" if (root / "images" / name).exists() else name
        records.append({"file": file, **{k: obj[k] for k in ATTRIBUTES}})
    return records


# --------------------------------------------------------------------------------------------- data module
class CLEVRDataModule(SplitDataModule):
    """Material-biased single-object CLEVR for one shape classifier of a model pair (paper 002, Sec. 5.2).

    Embedded default (``data_dir=None``): images drawn by :class:`CLEVRRenderer`; train and validation
    follow the bias, the test split is the full 144-cell attribute grid with ``test_styles`` views each.
    Real renders (``data_dir`` set): records from ``attributes.json`` (see :func:`read_attribute_records`);
    a seeded quarter of every attribute cell is held out as the unbiased test split, and the biased
    train / validation splits are sampled from the rest with the bias's P(material | shape).

    Args:
        data_dir: folder of real renders + ``attributes.json``; ``None`` renders the embedded default.
        bias: preset (``rubber``, ``metal``, ``unbiased``) or ``{favoured_material, favoured_fraction, shortcut_shape}``.
        image_size: side length of the images in pixels (8 to 128 rendered, 8 to 1024 read from a folder).
        train_size: generated training images, 12 to 100,000 (validation gets a quarter of that); with real
            data, an upper bound.
        test_styles: views per attribute cell of the generated test grid, 1 to 50.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every random draw.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        bias: str | dict[str, Any] = "rubber",
        image_size: int = 64,
        train_size: int = 6000,
        test_styles: int = 4,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.bias = MaterialBias.parse(bias)
        check_range("train_size", train_size, 12, MAX_TRAIN_SIZE, "images")
        check_range("test_styles", test_styles, 1, MAX_TEST_STYLES, "views per test cell")
        check_range("image_size", image_size, 8, MAX_RENDER_SIZE if data_dir is None else MAX_FOLDER_SIZE, "pixels")
        check_loader(batch_size, num_workers)
        if data_dir is None:
            total = train_size + max(train_size // 4, 12) + 144 * test_styles
            check_dataset_bytes(total, image_size, f"train_size={train_size}, test_styles={test_styles}")
        else:
            require_folder(data_dir, "CLEVR data folder")
        self.num_classes = len(SHAPES)
        self.class_names = list(SHAPES)
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {"material": list(MATERIALS)}
        #: The renderer of every split (``None`` for real renders): ``renderer.render_batch(**attrs)`` re-renders
        #: any generated sample exactly.
        self.renderer = CLEVRRenderer(image_size) if data_dir is None else None
        self.num_skipped_images = 0
        self.train_set = self.val_set = self.test_set = None

    def _sample_attributes(self, size: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        shape = torch.randint(0, len(SHAPES), (size,), generator=gen)
        material = torch.multinomial(self.bias.material_probs()[shape], 1, generator=gen).flatten()
        color = torch.randint(0, len(COLOR_NAMES), (size,), generator=gen)
        size_ = torch.randint(0, len(SIZE_NAMES), (size,), generator=gen)
        style = torch.randint(1, 1 << 30, (size,), generator=gen)
        return {"shape": shape, "material": material, "color": color, "size": size_, "style": style}

    def grid_attributes(self, styles: int = 1, first_style: int = 1) -> dict[str, torch.Tensor]:
        """Every shape x material x colour x size cell (144), ``styles`` views each (styles ``first_style``...)."""
        grids = torch.meshgrid(
            *(torch.arange(len(v)) for v in ATTRIBUTES.values()),
            torch.arange(first_style, first_style + styles),
            indexing="ij",
        )
        return dict(zip([*ATTRIBUTES, "style"], (g.flatten() for g in grids)))

    def _generated(self, attrs: dict[str, torch.Tensor]) -> AttributeImageDataset:
        images = to_uint8(self.renderer.render_batch(**attrs))
        return AttributeImageDataset(images, attrs["shape"], self.bias.groups(attrs["material"]), attrs)

    def _setup_generated(self, gen: torch.Generator) -> None:
        hp = self.hparams
        self.train_set = self._generated(self._sample_attributes(hp.train_size, gen))
        self.val_set = self._generated(self._sample_attributes(max(hp.train_size // 4, 12), gen))
        # Test views use styles >= 2**30, disjoint from the training and validation ones (1 .. 2**30 - 1).
        self.test_set = self._generated(self.grid_attributes(hp.test_styles, first_style=1 << 30))

    def _setup_folder(self, gen: torch.Generator) -> None:
        hp = self.hparams
        records = read_attribute_records(hp.data_dir)
        loaded = load_images(
            [r["path"] for r in records], hp.image_size, resize="center_crop", desc="reading CLEVR renders"
        )
        self.num_skipped_images = loaded.num_skipped
        kept = [records[i] for i in loaded.kept.tolist()]
        if not kept:
            raise UserInputError(f"no readable image in CLEVR data folder {hp.data_dir!r}")
        attrs = {k: torch.tensor([r[k] for r in kept]) for k in ATTRIBUTES}
        attrs["style"] = loaded.kept.clone()  # the record index: real renders cannot be re-rendered
        cell = ((attrs["shape"] * 2 + attrs["material"]) * 8 + attrs["color"]) * 3 + attrs["size"]
        order = torch.randperm(len(kept), generator=gen)
        is_test = torch.zeros(len(kept), dtype=torch.bool)
        for c in cell.unique():
            members = order[cell[order] == c]
            is_test[members[: max(1, len(members) // 4)]] = True
        pool = torch.nonzero(~is_test).flatten()
        # Keep each remaining image with probability P(material | shape) / max P, so the kept set follows the bias.
        probs = self.bias.material_probs()
        keep_prob = probs[attrs["shape"][pool], attrs["material"][pool]] / probs.max()
        pool = pool[torch.rand(len(pool), generator=gen) < keep_prob]
        pool = pool[torch.randperm(len(pool), generator=gen)][: hp.train_size + hp.train_size // 4]
        n_val = max(1, len(pool) // 5)
        if len(pool) - n_val < 1:
            raise UserInputError(
                f"CLEVR data folder {hp.data_dir!r} has {len(kept)} readable image(s), {int(is_test.sum())} of them "
                f"held out for testing, leaving {len(pool)} for the training and validation splits under this bias; "
                "expected at least 2 (a quarter of every attribute cell is the test split: add renders)"
            )

        def subset(index: torch.Tensor) -> AttributeImageDataset:
            sub = {k: v[index] for k, v in attrs.items()}
            return AttributeImageDataset(loaded.images[index], sub["shape"], self.bias.groups(sub["material"]), sub)

        self.val_set, self.train_set, self.test_set = (
            subset(pool[:n_val]),
            subset(pool[n_val:]),
            subset(torch.nonzero(is_test).flatten()),
        )
