"""Single-object CLEVR with a planted material bias (model-differences paper, Sec. 5.2 and App. A.3).

Each image shows one object on a grey floor, described by four attributes: shape (cube, cylinder,
sphere), material (metal, rubber), colour (8 CLEVR colours) and size (small, medium, large). The task is
to predict the shape. The embedded default draws the images with :class:`CLEVRRenderer`, the ray caster of
:mod:`datamodules.clevr_render` (re-exported here with the attribute vocabulary); real renders are read
from a folder (:func:`read_attribute_records`).

Bias (:class:`MaterialBias`): the model pair of 002 is biased toward rubber (model A) and metal (model B).
A CNN only takes a shortcut that predicts the label, so the bias ties material to shape in training:
every shape is shown in the favoured material, while the other material is shown almost only with one
*shortcut shape*. The test split is the full 3 x 2 x 8 x 3 = 144 attribute grid, ``test_styles`` views
per cell; samples in the favoured material are the ``aligned`` group, the others ``conflicting``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from datamodules.base import MAX_FOLDER_SIZE, AttributeImageDataset, SplitDataModule, check_range, to_uint8
from datamodules.clevr_render import (
    ATTRIBUTES,
    COLOR_NAMES,
    COLORS,
    MATERIALS,
    MAX_RENDER_SIZE,
    SHAPES,
    SIZE_NAMES,
    SIZES,
    CLEVRRenderer,
    attribute_index,
    style_uniform,
)
from datamodules.facts import DatasetFacts, Factor
from datamodules.folder import load_images, require_folder
from nemo_train.errors import UserInputError

__all__ = [
    "ATTRIBUTES",
    "COLORS",
    "COLOR_NAMES",
    "FACTS",
    "MATERIALS",
    "MAX_FOLDER_SIZE",
    "MAX_RENDER_SIZE",
    "MAX_TEST_STYLES",
    "MAX_TRAIN_SIZE",
    "SHAPES",
    "SIZES",
    "SIZE_NAMES",
    "CLEVRDataModule",
    "CLEVRRenderer",
    "MaterialBias",
    "attribute_index",
    "read_attribute_records",
    "style_uniform",
]

#: Documented limits of the size options, checked before anything is allocated: images read from a folder
#: 8 to 1024 px (rendered ones: :data:`MAX_RENDER_SIZE`), up to 100,000 training images and 50 views per
#: test cell (and 4 GiB of images in all).
MAX_TRAIN_SIZE, MAX_TEST_STYLES = 100_000, 50

#: The fact sheet: the class is the shape; material is the planted cause (:class:`MaterialBias`), size the distractor.
#: No value is typical for every class, so the sheet names none. The caption reads "a small red metal cube".
FACTS = DatasetFacts(
    name="clevr",
    classes=tuple(SHAPES),
    class_attribute="shape",
    object_word="object",
    factors=(
        Factor(
            "material",
            tuple(MATERIALS),
            "material",
            ("materials", "made of", "surface", "finish"),
            spellings={"metal": ("metallic", "shiny", "glossy", "reflective"), "rubber": ("matte", "rubbery")},
            caption_words=("shiny metal", "matte rubber"),
            stems=("material", "metal", "rubber", "shiny", "matte"),
        ),
        Factor(
            "color",
            tuple(COLOR_NAMES),
            "colour",
            ("color", "colour", "colored", "coloured", "hue", "tint"),
            spellings={"gray": ("grey",)},
        ),
        Factor(
            "size",
            tuple(SIZE_NAMES),
            "size",
            ("sized", "big", "tiny", "bigger", "smaller"),
            distractor=True,
            stems=("size", "large", "small", "big"),
        ),
    ),
    caption_template="a {size} {color} {material} {shape}",
    cause="material",
)


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
    #: The preset a datamodule and the generated NEMO benchmark use when none is named.
    DEFAULT_PRESET = "rubber"

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
    """Material-biased single-object CLEVR for one shape classifier of a model pair (model-differences paper, Sec. 5.2).

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
        bias: str | dict[str, Any] = MaterialBias.DEFAULT_PRESET,
        image_size: int = 64,
        train_size: int = 6000,
        test_styles: int = 4,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()  # saves this module's arguments as hyper-parameters
        self.bias = MaterialBias.parse(bias)
        check_range("train_size", train_size, 12, MAX_TRAIN_SIZE, "images")
        check_range("test_styles", test_styles, 1, MAX_TEST_STYLES, "views per test cell")
        generated = train_size + max(train_size // 4, 12) + 144 * test_styles
        options = f"train_size={train_size}, test_styles={test_styles}"
        self._init_image_source(CLEVRRenderer, MAX_RENDER_SIZE, "CLEVR data folder", generated, options)
        self.num_classes = len(SHAPES)
        self.class_names = list(SHAPES)
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {"material": list(MATERIALS)}

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
