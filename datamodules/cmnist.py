"""Coloured and rotated MNIST with a planted colour bias (model-differences paper, Sec. 5.1 and App. A.3).

Every image is made by a conditional generator, :class:`CMNISTRenderer`, from three attributes: the
digit (a handwritten exemplar, chosen by ``style``), a colour (10 colours; by default the colour of the
strokes on black, or with ``color_target="background"`` the colour of the background behind white strokes,
as in ReBias-style coloured MNIST) and a rotation (13 angles, -30 to 30 degrees; rotation is the
distracting factor that does not matter).
A :class:`BiasSpec` says which colours each digit may take in the training data; the test split is
the full digit x colour x angle grid, each sample marked bias-*aligned* (its colour is allowed for its
digit) or bias-*conflicting*.

Digit source: torchvision's MNIST when ``data_dir`` holds it (``<data_dir>/MNIST/raw``); the embedded
default is scikit-learn's bundled handwritten digits (8x8, upsampled), which needs no download.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from datamodules.base import (
    AttributeImageDataset,
    SplitDataModule,
    check_loader,
    check_range,
    rotate_batch,
    to_uint8,
    vocab_index,
)
from datamodules.digit_pools import POOLS as POOLS  # the pool layout, imported from here by older callers
from datamodules.digit_pools import STYLE_BITS, DigitPools, exemplar_of
from datamodules.facts import DatasetFacts, Factor
from nemo_train.errors import UserInputError

#: What the colour attribute paints: the digit's strokes (on black) or the background (behind white strokes).
ColorTarget = Literal["strokes", "background"]
#: Documented limits of the size options (checked before anything is allocated): at most 200,000 training
#: images (the validation split adds a quarter) and 50 exemplars per cell of the 1,300-cell test grid.
MAX_TRAIN_SIZE, MAX_TEST_STYLES = 200_000, 50
#: Stroke colours (RGB in [0, 1]), in the order of the model-differences paper, App. A.3.
COLORS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 0.8, 0.0),
    "blue": (0.0, 0.25, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "magenta": (1.0, 0.0, 1.0),
    "cyan": (0.0, 1.0, 1.0),
    "orange": (1.0, 0.55, 0.0),
    "pink": (1.0, 0.6, 0.75),
    "purple": (0.55, 0.15, 0.85),
    "grey": (0.6, 0.6, 0.6),
}
COLOR_NAMES: list[str] = list(COLORS)
#: The 13 rotation angles of the test grid (degrees).
ANGLES: list[int] = list(range(-30, 31, 5))
#: The fact sheet: the class is the digit; colour is the planted cause (per class, see :class:`BiasSpec`), rotation
#: the distractor. No value is typical for every class, so the sheet names none. The caption reads "a red digit 3,
#: rotated -10 degrees" ("upright" at 0); the small CLIP's captions bin rotations into three tilt words.
FACTS = DatasetFacts(
    name="cmnist",
    classes=tuple(str(d) for d in range(10)),
    class_attribute="digit",
    object_word="digit",
    factors=(
        Factor(
            "color",
            tuple(COLOR_NAMES),
            "colour",
            ("color", "colour", "colored", "coloured", "hue", "tint"),
            spellings={"grey": ("gray",)},
            stems=("colour", "color", "hue", "tint", "stroke colour", "stroke color"),
        ),
        Factor(
            "angle",
            tuple(ANGLES),
            "rotation",
            ("rotated", "rotation", "tilted", "tilt", "angle", "orientation", "upright"),
            distractor=True,
            stems=("rotat", "angle", "tilt", "slant", "orientation", "upright", "degree", "skew"),
            typical=0,
            neutral=0,
            phrases={str(a): "upright" if a == 0 else f"rotated {a} degrees" for a in ANGLES},
            unit="degrees",
            caption_words=tuple(
                "tilted right" if a <= -10 else "tilted left" if a >= 10 else "upright" for a in ANGLES
            ),
        ),
    ),
    caption_template="a {color} digit {digit}, {angle}",
    cause="color",
    class_words=("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
)


@dataclass(frozen=True)
class BiasSpec:
    """Which stroke colours each digit may take in the training data.

    ``allowed`` maps a digit to its colour names; digits not listed may take every colour.
    Presets (model-differences paper): ``model_a`` — digits 0-4 only red, 5-9 all colours;
    ``model_b`` — 0-4 all colours, 5-9 only blue; ``unbiased`` — every colour everywhere.
    """

    allowed: Mapping[int, tuple[str, ...]]

    PRESETS = {
        "model_a": {d: ("red",) for d in range(5)},
        "model_b": {d: ("blue",) for d in range(5, 10)},
        "unbiased": {},
    }
    #: The preset a datamodule and the generated NEMO benchmark use when none is named.
    DEFAULT_PRESET = "model_a"

    @classmethod
    def parse(cls, spec: str | Mapping[int, Sequence[str]] | BiasSpec) -> BiasSpec:
        """Build a spec from a preset name, a ``{digit: [colours]}`` mapping or a spec."""
        if isinstance(spec, BiasSpec):
            return spec
        if isinstance(spec, str):
            if spec not in cls.PRESETS:
                raise UserInputError(f"unknown CMNIST bias preset {spec!r}; expected one of {sorted(cls.PRESETS)}")
            spec = cls.PRESETS[spec]
        allowed: dict[int, tuple[str, ...]] = {}
        for digit, colors in spec.items():
            digit = int(digit)
            if not 0 <= digit <= 9:
                raise UserInputError(f"bias spec names digit {digit}; digits are 0-9")
            colors = (colors,) if isinstance(colors, str) else tuple(colors)
            unknown = [c for c in colors if c not in COLORS]
            if unknown:
                raise UserInputError(
                    f"bias spec for digit {digit} names unknown colour(s) {unknown}; known colours: {COLOR_NAMES}"
                )
            if not colors:
                raise UserInputError(f"bias spec for digit {digit} allows no colour")
            allowed[digit] = colors
        return cls(allowed)

    def colors_for(self, digit: int) -> tuple[str, ...]:
        """Colour names allowed for ``digit`` in training."""
        return self.allowed.get(int(digit), tuple(COLOR_NAMES))

    def allowed_matrix(self) -> torch.Tensor:
        """``bool[10 digits, 10 colours]``: True where the (digit, colour) pair is bias-aligned."""
        matrix = torch.zeros(10, len(COLOR_NAMES), dtype=torch.bool)
        for digit in range(10):
            for name in self.colors_for(digit):
                matrix[digit, COLOR_NAMES.index(name)] = True
        return matrix


def load_digits(data_dir: str | Path | None, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Grayscale digits ``float[N, 28, 28]`` in [0, 1] and labels.

    With ``data_dir`` set, reads torchvision's MNIST from it (``train`` / ``test`` split, no download).
    Without it, uses scikit-learn's bundled 8x8 digits upsampled to 20x20 and centred on 28x28 like
    MNIST; the split is then a fixed 80/20 partition of those 1,797 images.
    """
    if data_dir is not None:
        from torchvision.datasets import MNIST

        root = Path(data_dir)
        if not root.is_dir():
            raise UserInputError(f"MNIST data folder {str(root)!r} does not exist")
        try:
            mnist = MNIST(str(root), train=(split != "test"), download=False)
        except RuntimeError as err:
            raise UserInputError(
                f"no MNIST found under {str(root)!r} (expected {root / 'MNIST' / 'raw'}): {err}"
            ) from None
        return mnist.data.float() / 255.0, mnist.targets.long()

    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = torch.from_numpy(bunch.images).float() / 16.0
    labels = torch.from_numpy(bunch.target).long()
    images = F.interpolate(images[:, None], size=(20, 20), mode="bilinear", align_corners=False)[:, 0]
    images = F.pad(images, (4, 4, 4, 4)).clamp(0, 1)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(1234))
    cut = int(0.8 * len(images))
    index = order[:cut] if split != "test" else order[cut:]
    return images[index], labels[index]


def exemplar_pools(data_dir: str | Path | None, gen: torch.Generator) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The exemplar pools of a digit renderer, in :data:`POOLS` order: the training digits split 85 / 15 (drawn
    with ``gen``) into ``train`` and ``val``, and the held-out ``test`` digits."""
    digits, labels = load_digits(data_dir, "train")
    order = torch.randperm(len(digits), generator=gen)
    cut = int(0.85 * len(digits))
    return {
        "train": (digits[order[:cut]], labels[order[:cut]]),
        "val": (digits[order[cut:]], labels[order[cut:]]),
        "test": load_digits(data_dir, "test"),
    }


class CMNISTRenderer(DigitPools):
    """Conditional generator ``render(digit, color, angle, style) -> float[3, 28, 28]``.

    The renderer holds one or more exemplar pools (``pools``: name -> ``(digits, labels)``, in the order of
    :data:`POOLS`: the datamodule's renderer holds the training, validation and test exemplars). A
    ``style`` names one exemplar of ``digit``: its bits above :data:`STYLE_BITS` pick the pool and the low
    bits the exemplar (modulo the number the pool holds), so every sample of every split re-renders exactly
    from its attributes, and re-rendering with one attribute changed is an exact counterfactual edit of
    that attribute alone (the exemplar's pool and index stay; :class:`~datamodules.digit_pools.DigitPools`).
    ``color_target`` says what the colour paints.
    """

    attributes: dict[str, list] = {"digit": list(range(10)), "color": COLOR_NAMES, "angle": ANGLES}

    def __init__(
        self,
        digits: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        color_target: ColorTarget = "strokes",
        pools: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> None:
        if pools is None:
            if digits is None or labels is None:
                raise UserInputError("CMNISTRenderer needs digits and labels, or pools")
            pools = {"train": (digits, labels)}
        if color_target not in ("strokes", "background"):
            raise UserInputError(f"color_target={color_target!r}; expected 'strokes' or 'background'")
        self.color_target = color_target
        super().__init__(pools)
        self.digits = torch.cat([pools[name][0] for name in self.pool_names])
        self.palette = torch.tensor(list(COLORS.values()))

    #: The ``style`` of exemplar ``index`` (taken modulo the pool's size per digit) of ``pool``.
    style_of = staticmethod(exemplar_of)
    #: How many exemplars of ``digit`` the pool ``pool`` holds.
    num_styles = DigitPools.num_exemplars

    @staticmethod
    def color_index(color: int | str) -> int:
        """Index of a colour given by name or index."""
        return vocab_index(COLOR_NAMES, color, "colour")

    def render(self, digit: int, color: int | str, angle: float, style: int = 0) -> torch.Tensor:
        """Render one image ``float[3, 28, 28]`` in [0, 1]."""
        return self.render_batch(
            torch.tensor([int(digit)]),
            torch.tensor([self.color_index(color)]),
            torch.tensor([float(angle)]),
            torch.tensor([int(style)]),
        )[0]

    def render_batch(
        self, digit: torch.Tensor, color: torch.Tensor, angle: torch.Tensor, style: torch.Tensor
    ) -> torch.Tensor:
        """Render a batch ``float[B, 3, 28, 28]`` from 1-D attribute tensors (colour as index)."""
        digit, color, style = digit.long(), color.long(), style.long()
        gray = rotate_batch(self.digits[self.exemplar_rows(digit, style)][:, None], angle.float())
        paint = self.palette[color][:, :, None, None]
        if self.color_target == "background":
            return (gray + (1 - gray) * paint).clamp(0, 1)
        return (gray * paint).clamp(0, 1)


class CMNISTDataModule(SplitDataModule):
    """Biased coloured-MNIST data for one classifier of a model pair (model-differences paper, Sec. 5.1).

    Args:
        data_dir: folder holding torchvision's MNIST; ``None`` uses the embedded scikit-learn digits.
        bias: a preset (``model_a``, ``model_b``, ``unbiased``) or ``{digit: [colour, ...]}``.
        color_target: ``strokes`` (coloured digits on black) or ``background`` (white digits on a coloured
            background, as the model-differences paper's CMNIST).
        train_size: number of generated training images, 10 to 200,000 (validation gets a quarter of that,
            same bias).
        test_styles: exemplars per (digit, colour, angle) cell of the test grid (1,300 cells), 1 to 50.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every random draw, so two runs see identical data.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        bias: str | dict[int, list[str]] = BiasSpec.DEFAULT_PRESET,
        color_target: ColorTarget = "strokes",
        train_size: int = 12000,
        test_styles: int = 2,
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()  # saves this module's arguments as hyper-parameters
        self.bias = BiasSpec.parse(bias)
        check_range("train_size", train_size, 10, MAX_TRAIN_SIZE, "images")
        check_range("test_styles", test_styles, 1, MAX_TEST_STYLES, "exemplars per test cell")
        check_loader(batch_size, num_workers)
        self.num_classes = 10
        self.class_names = [str(d) for d in range(10)]
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {}
        #: The one renderer of every split (its training, validation and test exemplar pools): after
        #: ``setup``, ``renderer.render_batch(**attrs)`` re-renders any sample of any split exactly.
        self.renderer: CMNISTRenderer | None = None

    @property
    def test_renderer(self) -> CMNISTRenderer | None:
        """The same object as :attr:`renderer` (which renders every split); kept for older callers."""
        return self.renderer

    def setup(self, stage: str | None = None) -> None:
        """Generate the splits once (idempotent)."""
        if self.train_set is not None:
            return
        hp = self.hparams
        gen = torch.Generator().manual_seed(hp.seed)
        pools = exemplar_pools(hp.data_dir, gen)
        self.renderer = CMNISTRenderer(color_target=hp.color_target, pools=pools)
        self.train_set = self._biased_split(self.renderer, hp.train_size, gen, "train")
        self.val_set = self._biased_split(self.renderer, max(hp.train_size // 4, 10), gen, "val")
        self.test_set = self.grid_split(self.renderer, hp.test_styles)

    def _biased_split(
        self, renderer: CMNISTRenderer, size: int, gen: torch.Generator, pool: str
    ) -> AttributeImageDataset:
        digit = torch.randint(0, 10, (size,), generator=gen)
        allowed = self.bias.allowed_matrix()[digit].float()
        color = torch.multinomial(allowed, 1, generator=gen).flatten()
        angle = torch.tensor(ANGLES)[torch.randint(0, len(ANGLES), (size,), generator=gen)]
        style = renderer.style_of(pool, torch.randint(0, 1 << STYLE_BITS, (size,), generator=gen))
        return self._dataset(renderer, digit, color, angle, style)

    def grid_split(self, renderer: CMNISTRenderer, styles: int = 1, pool: str = "test") -> AttributeImageDataset:
        """The full digit x colour x angle grid (1,300 cells), ``styles`` exemplars of ``pool`` per cell."""
        d, c, a, s = torch.meshgrid(
            torch.arange(10), torch.arange(len(COLOR_NAMES)), torch.tensor(ANGLES), torch.arange(styles), indexing="ij"
        )
        return self._dataset(renderer, d.flatten(), c.flatten(), a.flatten(), renderer.style_of(pool, s.flatten()))

    def _dataset(self, renderer, digit, color, angle, style) -> AttributeImageDataset:
        images = torch.cat(
            [
                to_uint8(renderer.render_batch(*chunk))
                for chunk in zip(*(t.split(4096) for t in (digit, color, angle, style)))
            ]
        )
        aligned = self.bias.allowed_matrix()[digit, color]
        attrs = {"digit": digit, "color": color, "angle": angle, "style": style}
        return AttributeImageDataset(images, digit, (~aligned).long(), attrs)

    def group_of(self, digit: int, color: int | str) -> str:
        """``"aligned"`` or ``"conflicting"`` for a (digit, colour) pair under this module's bias."""
        return self.group_names[0 if self.bias.allowed_matrix()[int(digit), CMNISTRenderer.color_index(color)] else 1]
