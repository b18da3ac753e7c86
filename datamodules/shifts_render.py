"""The "shifts" digits: the fact sheet and the renderer of a digit benchmark whose images vary along many factors.

A digit exemplar (a handwritten digit from the CMNIST digit source, chosen by ``exemplar``) is painted in a
stroke colour, drawn in a stroke style, turned by an angle, shrunk or not, moved to a position and laid over a
grey-level background texture. :data:`FACTS` writes these factors down (values, words, typical values);
:class:`ShiftsRenderer` turns attributes into images, deterministically, so that changing one attribute and
re-rendering is an exact counterfactual edit of that factor alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from datamodules.digit_pools import POOLS, STYLE_BITS, DigitPools
from datamodules.facts import DatasetFacts, Factor
from nemo_train.errors import UserInputError

IMAGE_SIZE = 32
#: Stroke colours (RGB in [0, 1]); white is the training-typical one.
PALETTE: dict[str, tuple[float, float, float]] = {
    "white": (1.0, 1.0, 1.0),
    "red": (1.0, 0.1, 0.1),
    "green": (0.1, 0.9, 0.1),
    "blue": (0.2, 0.35, 1.0),
    "yellow": (1.0, 1.0, 0.1),
    "cyan": (0.1, 1.0, 1.0),
    "magenta": (1.0, 0.1, 1.0),
}
#: Digit displacement of each position, in pixels (x to the right, y downwards).
OFFSETS: dict[str, tuple[int, int]] = {
    "centre": (0, 0),
    "left": (-3, 0),
    "right": (3, 0),
    "top": (0, -3),
    "bottom": (0, 3),
}
#: Digit size of each scale, as a fraction of the exemplar's size.
SCALES: dict[str, float] = {"normal": 1.0, "small": 0.6}
#: Grey level of the lit parts of the stripes and checker backgrounds, and the top of the noise range.
BACKGROUND_LEVEL = 0.55
#: Number of fixed noise textures (the exemplar picks one, so a re-render is bit-exact).
NOISE_TEXTURES = 16

FACTS = DatasetFacts(
    name="shifts",
    classes=tuple(str(d) for d in range(10)),
    class_attribute="digit",
    object_word="digit",
    factors=(
        Factor(
            "color",
            tuple(PALETTE),
            "colour",
            ("color", "colour", "colored", "coloured", "hue", "tint", "painted", "ink"),
            typical="white",
        ),
        Factor(
            "style",
            ("solid", "outline", "dotted", "blurred"),
            "style",
            ("stroke", "strokes", "rendering", "drawn", "outlined", "hollow", "dots", "blurry", "blur", "fuzzy"),
            typical="solid",
            phrases={"outline": "outlined", "solid": "solid"},
            spellings={"outline": ("outlined", "hollow"), "dotted": ("dotty",), "blurred": ("blurry", "fuzzy")},
        ),
        Factor(
            "angle",
            (-90, -45, 0, 45, 90),
            "rotation",
            ("rotated", "rotation", "tilted", "tilt", "angle", "orientation", "turned", "sideways", "upside", "leans"),
            typical=0,
            unit="degrees",
            phrases={
                "-90": "rotated 90 degrees clockwise",
                "-45": "rotated 45 degrees clockwise",
                "0": "upright",
                "45": "rotated 45 degrees anticlockwise",
                "90": "rotated 90 degrees anticlockwise",
            },
        ),
        Factor(
            "background",
            ("plain", "noise", "stripes", "checker"),
            "background",
            ("backdrop", "texture", "textured", "noisy", "striped", "checkered", "chequered", "pattern"),
            typical="plain",
            phrases={"plain": "plain black", "noise": "noisy", "stripes": "striped", "checker": "checkered"},
            spellings={
                "noise": ("noisy", "grainy"),
                "stripes": ("striped", "stripy"),
                "checker": ("checkered", "chequered", "checkerboard"),
            },
        ),
        Factor(
            "scale",
            tuple(SCALES),
            "size",
            ("scale", "size", "small", "tiny", "shrunk", "smaller", "little"),
            typical="normal",
            spellings={"small": ("tiny", "shrunk", "shrunken")},
            phrases={"normal": "normal-sized"},
        ),
        Factor(
            "position",
            tuple(OFFSETS),
            "position",
            ("location", "placement", "off-centre", "off-center"),
            editable=False,
            distractor=True,
        ),
    ),
    caption_template="a {scale} {style} {color} digit {digit}, {angle}, on a {background} background, at the {position}",
)
#: Factors that can cause an error: editable, not a distractor, with a typical value.
CAUSE_FACTORS: tuple[str, ...] = tuple(
    f.name for f in FACTS.factors if f.editable and not f.distractor and f.typical is not None
)


class ShiftsRenderer(DigitPools):
    """Conditional generator ``render(digit, color, style, angle, background, scale, position, exemplar)``
    giving ``float[3, 32, 32]`` images in [0, 1].

    ``pools`` maps exemplar pool names (some of :data:`POOLS`) to ``(digits float[N, 28, 28], labels)``. The
    ``exemplar`` attribute is an exemplar code like CMNIST's ``style`` (see
    :class:`~datamodules.digit_pools.DigitPools`: its bits above :data:`STYLE_BITS` name the pool, the low bits
    the exemplar within it, modulo the pool's exemplars of the digit); it also picks the noise texture. Named
    factors are given by index (or name for :meth:`render`), the angle in degrees.
    """

    attributes: dict[str, list] = FACTS.vocabulary
    code_attribute = "exemplar"

    def __init__(self, pools: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        if not pools:
            raise UserInputError(f"no exemplar pools; expected some of {list(POOLS)}")
        super().__init__(pools)
        digits = torch.cat([pools[name][0].float() for name in self.pool_names])
        if digits.shape[1:] != (28, 28):
            raise UserInputError(f"exemplar digits must be 28x28, got {list(digits.shape[1:])}")
        pad = (IMAGE_SIZE - 28) // 2
        self.digits = F.pad(digits, (pad, pad, pad, pad))
        self.palette = torch.tensor(list(PALETTE.values()))
        self.offsets = torch.tensor(list(OFFSETS.values()), dtype=torch.float32) * (2.0 / IMAGE_SIZE)
        self.scales = torch.tensor(list(SCALES.values()))
        self.backgrounds = self._backgrounds()

    @staticmethod
    def _backgrounds() -> torch.Tensor:
        """``float[4 + NOISE_TEXTURES - 1, 32, 32]``: plain, the noise textures, stripes, checker (grey levels)."""
        y, x = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
        plain = torch.zeros(1, IMAGE_SIZE, IMAGE_SIZE)
        noise = torch.rand(NOISE_TEXTURES, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))
        stripes = (((x + y) // 2) % 2 == 0).float()[None]
        checker = (((x // 4) + (y // 4)) % 2 == 0).float()[None]
        return torch.cat([plain, noise, stripes, checker]) * BACKGROUND_LEVEL

    def render(
        self,
        digit: int,
        color: int | str = "white",
        style: int | str = "solid",
        angle: float = 0,
        background: int | str = "plain",
        scale: int | str = "normal",
        position: int | str = "centre",
        exemplar: int = 0,
    ) -> torch.Tensor:
        """Render one image ``float[3, 32, 32]`` (named factors by name or index)."""
        named = {"color": color, "style": style, "background": background, "scale": scale, "position": position}
        stored = {}
        for name, value in named.items():
            factor = FACTS.factor(name)
            stored[name] = torch.tensor([factor.stored(value)])
            factor.value_name(stored[name][0])  # range check
        return self.render_batch(
            digit=torch.tensor([int(digit)]),
            angle=torch.tensor([float(angle)]),
            exemplar=torch.tensor([int(exemplar)]),
            **stored,
        )[0]

    def render_batch(
        self,
        digit: torch.Tensor,
        color: torch.Tensor,
        style: torch.Tensor,
        angle: torch.Tensor,
        background: torch.Tensor,
        scale: torch.Tensor,
        position: torch.Tensor,
        exemplar: torch.Tensor,
    ) -> torch.Tensor:
        """Render a batch ``float[B, 3, 32, 32]`` from 1-D attribute tensors."""
        digit, exemplar = digit.long(), exemplar.long()
        gray = self.digits[self.exemplar_rows(digit, exemplar)][:, None]
        mask = self._geometry(gray, angle.float(), scale.long(), position.long())
        mask = self._stroke_style(mask, style.long())
        texture_index = background.long().clone()
        noise = background.long() == 1
        texture_index[noise] = 1 + (exemplar[noise] & ((1 << STYLE_BITS) - 1)) % NOISE_TEXTURES
        texture_index[background.long() >= 2] += NOISE_TEXTURES - 1
        texture = self.backgrounds[texture_index][:, None]
        paint = self.palette[color.long()][:, :, None, None]
        return (paint * mask + texture * (1 - mask)).clamp(0, 1)

    def _geometry(
        self, gray: torch.Tensor, degrees: torch.Tensor, scale: torch.Tensor, position: torch.Tensor
    ) -> torch.Tensor:
        """Turn (anticlockwise), shrink and move each digit in one bilinear resampling."""
        theta = degrees * (math.pi / 180.0)
        size = self.scales[scale]
        cos, sin = torch.cos(theta) / size, torch.sin(theta) / size
        shift = self.offsets[position]
        # affine_grid maps output coordinates to input ones: input = A (output - shift), A = R(-angle) / size
        bx = -(cos * shift[:, 0] + sin * shift[:, 1])
        by = -(-sin * shift[:, 0] + cos * shift[:, 1])
        matrix = torch.stack([torch.stack([cos, sin, bx], -1), torch.stack([-sin, cos, by], -1)], 1)
        grid = F.affine_grid(matrix, list(gray.shape), align_corners=False)
        return F.grid_sample(gray, grid, mode="bilinear", padding_mode="zeros", align_corners=False).clamp(0, 1)

    @staticmethod
    def _stroke_style(mask: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        """Apply the stroke style to ``mask`` ``float[B, 1, H, W]``: solid, outline, dotted or blurred."""
        out = mask.clone()
        for value in style.unique().tolist():
            chosen = style == value
            part = mask[chosen]
            if value == 1:  # outline: the ring just outside the stroke
                thick = (part * 2.0).clamp(0, 1)
                part = (F.max_pool2d(thick, 3, stride=1, padding=1) - thick).clamp(0, 1)
            elif value == 2:  # dotted: the stroke seen through a grid of 2x2 dots, 1 px apart
                part = (part * 1.5).clamp(0, 1) * _dot_grid(mask.shape[-1])
            elif value == 3:  # blurred
                part = (_blur(part) * 1.8).clamp(0, 1)
            elif value != 0:
                raise UserInputError(f"style index {value} out of range 0-3")
            out[chosen] = part
        return out


def _dot_grid(size: int) -> torch.Tensor:
    y, x = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    return ((x % 3 < 2) & (y % 3 < 2)).float()


def _blur(images: torch.Tensor, sigma: float = 1.8, radius: int = 4) -> torch.Tensor:
    """Separable Gaussian blur with zero padding, as sums of shifted copies (same result whatever the batch)."""
    weights = torch.exp(-(torch.arange(-radius, radius + 1).float() ** 2) / (2 * sigma**2))
    weights = (weights / weights.sum()).tolist()
    for dim in (-1, -2):
        padded = F.pad(images, (radius, radius, 0, 0) if dim == -1 else (0, 0, radius, radius))
        size = images.shape[dim]
        out = torch.zeros_like(images)
        for k, w in enumerate(weights):
            out = out + w * padded.narrow(dim, k, size)
        images = out
    return images
