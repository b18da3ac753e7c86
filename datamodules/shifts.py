"""Shifts: digits that vary along many factors, with several gaps planted in the training data at once.

Each image (:class:`~datamodules.shifts_render.ShiftsRenderer`) shows a digit with a stroke colour, a stroke
style, a rotation, a background texture, a size and a position (:data:`FACTS`). A :class:`GapSpec` says, for
each factor, which digits are only ever seen with the factor's typical value in training (white, solid,
upright, plain, normal-sized); every other digit takes every value of that factor. The test split is the
*shift* distribution (a miniature ImageNet-R / ObjectNet): every image has one factor (``test_shift: single``)
or two to three (``multi``), exactly three (``multi3``) or exactly four (``multi4``) factors at once moved away from their typical values, so a classifier trained on the
gaps errs for several different reasons, and :func:`label_causes` names the reason of each error exactly, by
re-rendering with one factor restored. With several factors off, *which* of them causes an error depends on the
classifier's gaps, not on the image alone: naming the image's unusual factor is no longer enough to explain it.
The position is a distractor: it varies freely in every split and is never a cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from datamodules.base import AttributeImageDataset, SplitDataModule, check_loader, check_range, to_uint8
from datamodules.cmnist import exemplar_pools
from datamodules.digit_pools import STYLE_BITS, exemplar_of
from datamodules.facts import DatasetFacts
from datamodules.shifts_render import CAUSE_FACTORS, FACTS, ShiftsRenderer
from nemo_train.errors import UserInputError

__all__ = [
    "CAUSE_FACTORS",
    "FACTS",
    "GapSpec",
    "ShiftsDataModule",
    "ShiftsRenderer",
    "TestShift",
    "exemplar_of",
    "label_causes",
]

#: Documented limits of the size options (checked before anything is rendered).
MAX_TRAIN_SIZE, MAX_TEST_SIZE = 200_000, 100_000
#: Images rendered per call while building a split.
RENDER_CHUNK = 4096
#: How many factors each shift image has off their typical value: exactly one (``single``), two to three at once
#: (``multi``), or exactly three (``multi3``) or four (``multi4``) of the five.
TestShift = Literal["single", "multi", "multi3", "multi4"]
#: The (fewest, most) factors off their typical value of each :data:`TestShift`.
SHIFTED_FACTORS: dict[str, tuple[int, int]] = {"single": (1, 1), "multi": (2, 3), "multi3": (3, 3), "multi4": (4, 4)}


def _rotate(gaps: Mapping[str, Sequence[int]], by: int) -> dict[str, tuple[int, ...]]:
    return {factor: tuple((d + by) % 10 for d in digits) for factor, digits in gaps.items()}


_GAPS_A: dict[str, tuple[int, ...]] = {
    "color": (0, 1, 2, 3, 4, 5),
    "style": (6, 7, 8, 9, 0),
    "angle": (1, 2),
    "background": (3, 4, 5, 6, 7, 8),
    "scale": (9, 0),
}


@dataclass(frozen=True)
class GapSpec:
    """Which digits see only the typical value of a factor in training: ``{factor: (digit, ...)}``.

    Presets: ``gaps_a`` (colour 0-5, style 6-9 and 0, rotation 1 and 2, background 3-8, size 9 and 0: gap sizes
    chosen so that each factor causes a similar share of a trained classifier's errors on the shift split, as
    a rotation or a shrunk digit fools it far more often than a colour does), ``gaps_b`` (the same gaps on the
    digits five higher) and ``none`` (no gap).
    """

    gaps: Mapping[str, tuple[int, ...]]

    PRESETS = {"gaps_a": _GAPS_A, "gaps_b": _rotate(_GAPS_A, 5), "none": {}}

    @classmethod
    def parse(cls, spec: str | Mapping[str, Sequence[int]] | GapSpec) -> GapSpec:
        """Build a spec from a preset name, a ``{factor: [digits]}`` mapping or a spec."""
        if isinstance(spec, GapSpec):
            return spec
        if isinstance(spec, str):
            if spec not in cls.PRESETS:
                raise UserInputError(f"unknown shifts gap preset {spec!r}; expected one of {sorted(cls.PRESETS)}")
            spec = cls.PRESETS[spec]
        if not isinstance(spec, Mapping):
            raise UserInputError(f"gaps={spec!r}; expected a preset name or a {{factor: [digits]}} mapping")
        gaps: dict[str, tuple[int, ...]] = {}
        for factor, digits in spec.items():
            if factor not in CAUSE_FACTORS:
                raise UserInputError(f"gap spec names factor {factor!r}; factors with gaps: {list(CAUSE_FACTORS)}")
            digits = (digits,) if isinstance(digits, int) else tuple(digits)
            bad = [d for d in digits if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= 9]
            if bad:
                raise UserInputError(f"gap spec for {factor} names digit(s) {bad}; digits are 0-9")
            gaps[factor] = tuple(sorted(set(digits)))
        return cls(gaps)

    def matrix(self) -> torch.Tensor:
        """``bool[len(CAUSE_FACTORS), 10]``: True where a digit has a gap in a factor (in :data:`CAUSE_FACTORS`
        order)."""
        out = torch.zeros(len(CAUSE_FACTORS), 10, dtype=torch.bool)
        for factor, digits in self.gaps.items():
            out[CAUSE_FACTORS.index(factor), list(digits)] = True
        return out


def _values(name: str) -> tuple[torch.Tensor, int]:
    """The stored values of a factor and the typical one."""
    factor = FACTS.factor(name)
    values = torch.arange(len(factor.values)) if factor.named else torch.tensor(factor.values)
    return values, factor.typical_stored


def _atypical(name: str, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` values of factor ``name`` drawn uniformly among its atypical values."""
    values, typical = _values(name)
    others = values[values != typical]
    return others[torch.randint(0, len(others), (count,), generator=gen)]


class ShiftsDataModule(SplitDataModule):
    """Shifts digits: training and validation from the gap distribution, test from the shift distribution.

    Args:
        data_dir: folder holding torchvision's MNIST; ``None`` uses the embedded scikit-learn digits.
        gaps: a preset (``gaps_a``, ``gaps_b``, ``none``) or ``{factor: [digits]}``.
        train_size: generated training images, 10 to 200,000 (validation gets a quarter of that).
        test_size: generated test (shift) images, 10 to 100,000.
        test_shift: ``single``: each shift image has one factor off its typical value (its one unusual factor is
            the cause of any error it has); ``multi``: two or three factors at once (drawn uniformly), so the
            cause of an error depends on the classifier's gaps; ``multi3`` / ``multi4``: exactly three / four at
            once, so that naming one of the image's unusual factors without the classifier is right about one
            time in three / four. Also the mining split of the shifts benchmark.
        typical_share: the chance that a training image shows every factor typical; otherwise one factor the
            digit has no gap in (drawn uniformly) takes a uniformly drawn atypical value, as in the test split.
        batch_size, num_workers: DataLoader settings.
        seed: seed of every random draw.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        gaps: str | dict[str, list[int]] = "gaps_a",
        train_size: int = 8000,
        test_size: int = 4000,
        typical_share: float = 0.2,
        test_shift: TestShift = "single",
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()  # saves this module's arguments as hyper-parameters
        self.gaps = GapSpec.parse(gaps)
        check_range("train_size", train_size, 10, MAX_TRAIN_SIZE, "images")
        check_range("test_size", test_size, 10, MAX_TEST_SIZE, "images")
        check_range("typical_share", typical_share, 0.0, 1.0)
        if test_shift not in get_args(TestShift):
            raise UserInputError(f"test_shift={test_shift!r}; expected one of {list(get_args(TestShift))}")
        check_loader(batch_size, num_workers)
        self.num_classes = 10
        self.class_names = list(FACTS.classes)
        self.group_names = ["aligned", "conflicting"]
        self.eval_groupings: dict[str, list[str]] = {}
        self.facts: DatasetFacts = FACTS
        #: The one renderer of every split (training, validation and test exemplar pools), made by ``setup``.
        self.renderer: ShiftsRenderer | None = None

    def setup(self, stage: str | None = None) -> None:
        """Generate the splits once (idempotent)."""
        if self.train_set is not None:
            return
        hp = self.hparams
        gen = torch.Generator().manual_seed(hp.seed)
        pools = exemplar_pools(hp.data_dir, gen)
        self.renderer = ShiftsRenderer(pools)
        self.train_set = self._gap_split("train", hp.train_size, gen)
        self.val_set = self._gap_split("val", max(hp.train_size // 4, 10), gen)
        self.test_set = self.shifted_split("test", hp.test_size, hp.seed + 1)

    def _require_renderer(self) -> ShiftsRenderer:
        if self.renderer is None:
            raise RuntimeError("ShiftsDataModule.setup() has not been called")
        return self.renderer

    def _common(self, pool: str, size: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Digit, position and exemplar draws shared by both distributions."""
        positions = len(FACTS.factor("position").values)
        return {
            "digit": torch.randint(0, 10, (size,), generator=gen),
            "position": torch.randint(0, positions, (size,), generator=gen),
            "exemplar": exemplar_of(pool, torch.randint(0, 1 << STYLE_BITS, (size,), generator=gen)),
        }

    def _gap_split(self, pool: str, size: int, gen: torch.Generator) -> AttributeImageDataset:
        """The training distribution: an image shows every factor typical (chance ``typical_share``) or one
        factor, drawn uniformly among those the digit has no gap in, at a uniformly drawn atypical value."""
        attrs = self._common(pool, size, gen)
        open_factors = ~self.gaps.matrix()[:, attrs["digit"]].T  # [size, factors]: no gap, may be shifted
        weights = open_factors.float() + 1e-12  # a digit with gaps everywhere stays typical (masked below)
        shifted = torch.multinomial(weights, 1, generator=gen).flatten()
        shift = open_factors[torch.arange(size), shifted]
        shift &= torch.rand(size, generator=gen) >= self.hparams.typical_share
        for k, name in enumerate(CAUSE_FACTORS):
            _, typical = _values(name)
            attrs[name] = torch.where(shift & (shifted == k), _atypical(name, size, gen), torch.full((size,), typical))
        return self._dataset(attrs, torch.zeros(size, dtype=torch.long))

    def shifted_split(self, pool: str, size: int, seed: int, shift: TestShift | None = None) -> AttributeImageDataset:
        """The shift distribution from exemplar pool ``pool``: each image has one (``shift="single"``), two to
        three (``"multi"``), three (``"multi3"``) or four (``"multi4"``) (default: the module's ``test_shift``)
        uniformly chosen factors of :data:`CAUSE_FACTORS`
        at uniformly drawn atypical values, every other one typical, and a uniform position. Group 1
        (conflicting) when a shifted factor is a gap of the image's digit."""
        check_range("size", size, 1, MAX_TEST_SIZE, "images")
        shift = self.hparams.test_shift if shift is None else shift
        if shift not in SHIFTED_FACTORS:
            raise UserInputError(f"shift={shift!r}; expected one of {list(SHIFTED_FACTORS)}")
        self._require_renderer()
        gen = torch.Generator().manual_seed(seed)
        attrs = self._common(pool, size, gen)
        off = shifted_mask(shift, size, gen)
        for k, name in enumerate(CAUSE_FACTORS):
            _, typical = _values(name)
            attrs[name] = torch.where(off[:, k], _atypical(name, size, gen), torch.full((size,), typical))
        groups = (off & self.gaps.matrix()[:, attrs["digit"]].T).any(1).long()
        return self._dataset(attrs, groups)

    def _dataset(self, attrs: dict[str, torch.Tensor], groups: torch.Tensor) -> AttributeImageDataset:
        renderer = self._require_renderer()
        chunks = [{k: v[i : i + RENDER_CHUNK] for k, v in attrs.items()} for i in range(0, len(groups), RENDER_CHUNK)]
        images = torch.cat([to_uint8(renderer.render_batch(**chunk)) for chunk in chunks])
        return AttributeImageDataset(images, attrs["digit"], groups, attrs)


def shifted_mask(shift: TestShift, size: int, gen: torch.Generator) -> torch.Tensor:
    """``bool[size, len(CAUSE_FACTORS)]``: which factors of each image are moved off their typical value; as many
    as :data:`SHIFTED_FACTORS` allows (drawn uniformly), chosen uniformly without repetition."""
    fewest, most = SHIFTED_FACTORS[shift]
    if most == 1:  # one factor: the draw of the original single-shift split (same images for the same seed)
        which = torch.randint(0, len(CAUSE_FACTORS), (size,), generator=gen)
        return torch.nn.functional.one_hot(which, len(CAUSE_FACTORS)).bool()
    count = torch.randint(fewest, most + 1, (size,), generator=gen)
    rank = torch.rand(size, len(CAUSE_FACTORS), generator=gen).argsort(1).argsort(1)
    return rank < count[:, None]


def label_causes(
    renderer: object,
    facts: DatasetFacts,
    attrs: Mapping[str, torch.Tensor],
    labels: torch.Tensor,
    predict: Callable[[torch.Tensor], torch.Tensor],
    batch_size: int = 512,
) -> list[str]:
    """The cause of each (misclassified) image, found by the generator: for every editable, non-distractor
    factor whose value is not typical, the image is re-rendered with that factor alone set back to its typical
    value and classified by ``predict`` (images ``float[B, 3, H, W]`` in [0, 1], quantised to uint8 as stored
    images are, to class indices). The cause is the one factor whose restoration gives the true class;
    ``"none"`` when no restoration does, ``"several"`` when more than one does. ``batch_size`` re-renders go
    to each ``predict`` call."""
    check_range("batch_size", batch_size, 1, 1 << 20, "images")
    factors = [
        f for f in facts.factors if f.editable and not f.distractor and f.typical is not None and f.name in attrs
    ]
    labels = labels.long().cpu()
    jobs_image, jobs_factor = [], []
    for k, factor in enumerate(factors):
        index = torch.nonzero(attrs[factor.name].cpu() != factor.typical_stored).flatten()
        jobs_image.append(index)
        jobs_factor.append(torch.full_like(index, k))
    image = torch.cat(jobs_image) if jobs_image else torch.zeros(0, dtype=torch.long)
    factor_of = torch.cat(jobs_factor) if jobs_factor else torch.zeros(0, dtype=torch.long)
    fixed = torch.zeros(len(image), dtype=torch.bool)
    for start in range(0, len(image), batch_size):
        rows, which = image[start : start + batch_size], factor_of[start : start + batch_size]
        edited = {name: values.cpu()[rows].clone() for name, values in attrs.items()}
        for k, factor in enumerate(factors):
            edited[factor.name][which == k] = factor.typical_stored
        images = to_uint8(renderer.render_batch(**edited)).float() / 255.0
        fixed[start : start + len(rows)] = predict(images).long().cpu() == labels[rows]
    count = torch.bincount(image[fixed], minlength=len(labels))
    causes = ["none" if n == 0 else "several" for n in count.tolist()]
    for row, k in zip(image[fixed].tolist(), factor_of[fixed].tolist()):
        if count[row] == 1:
            causes[row] = factors[k].name
    return causes
