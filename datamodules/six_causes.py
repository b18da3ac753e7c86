"""Six causes of low model competency (competency-counterfactuals paper, Sec. 3.2) applied to in-distribution images.

:func:`apply_cause` turns clean images into low-competency ones with one of six known causes, each with a
severity in ``(0, 1]``:

* ``spatial`` — an object the classifier never saw (a chequered, two-coloured square) pasted at a random
  place; severity sets its side, from a fifth to three fifths of the image side.
* ``brightness`` — over-exposure: pixels blended towards white (``up``, default) or darkened (``down``).
* ``contrast`` — pixels blended towards mid-grey (``down``, default: a washed-out image) or stretched away
  from it (``up``).
* ``saturation`` — colours blended towards their luminance (``down``, default: a faded image) or pushed
  away from it (``up``: over-saturated).
* ``noise`` — additive uniform noise of half-width ``0.6 · severity``.
* ``pixelation`` — block-averaged down to ``1 - 0.85 · severity`` of the side and blown back up with
  nearest-neighbour interpolation.

Results are clamped to ``[0, 1]``. :class:`SixCausesDataModule` builds a labelled set from the
high-competency test images of another datamodule (CMNIST first), keeping each clean original next to its
corrupted copy so that image pairs (and explanations of the cause) can be formed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from datamodules.base import check_loader
from nemo_train.errors import UserInputError
from nemo_train.vocabulary import CAUSES  # re-exported: the shared vocabulary defines the six causes

#: The direction each photometric cause takes when none is given.
DEFAULT_DIRECTIONS: dict[str, str] = {"brightness": "up", "contrast": "down", "saturation": "down"}
_LUMA = (0.299, 0.587, 0.114)


def apply_cause(
    images: torch.Tensor,
    cause: str,
    severity: float,
    generator: torch.Generator | None = None,
    *,
    direction: str | None = None,
) -> torch.Tensor:
    """Corrupt ``images`` (``float[B, 3, H, W]`` in ``[0, 1]``) with ``cause`` at ``severity`` in ``(0, 1]``.

    ``generator`` (a CPU generator) drives the random parts (patch place and colours, noise), so a seeded
    call is reproducible. ``direction`` (``"up"`` / ``"down"``) only applies to brightness, contrast and
    saturation; it defaults to :data:`DEFAULT_DIRECTIONS`. Returns a new tensor; the input is untouched.
    """
    _check_images(images)
    if cause not in CAUSES:
        raise UserInputError(f"unknown cause {cause!r}; expected one of {list(CAUSES)}")
    severity = float(severity)
    if not 0.0 < severity <= 1.0:
        raise UserInputError(f"severity={severity} is out of range; expected a value in (0, 1]")
    if direction is not None and (cause not in DEFAULT_DIRECTIONS or direction not in ("up", "down")):
        raise UserInputError(
            f"direction={direction!r} for cause {cause!r}; only {sorted(DEFAULT_DIRECTIONS)} take a direction, 'up' or 'down'"
        )
    direction = direction or DEFAULT_DIRECTIONS.get(cause)
    out = _CAUSE_FUNCTIONS[cause](images.float(), severity, generator, direction)
    return out.clamp(0.0, 1.0)


def _check_images(images: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3:
        shape = list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise UserInputError(f"expected images of shape [B, 3, H, W], got {shape}")
    if not images.is_floating_point():
        raise UserInputError(f"expected float images in [0, 1], got dtype {images.dtype}")


def _rand(shape: Sequence[int], generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    """Uniform ``[0, 1)`` draws made on the CPU (so one generator serves every device), moved to ``like``."""
    return torch.rand(*shape, generator=generator).to(device=like.device, dtype=like.dtype)


def _spatial(images: torch.Tensor, severity: float, generator, direction) -> torch.Tensor:
    b, _, h, w = images.shape
    side = max(2, round(min(h, w) * (0.2 + 0.4 * severity)))
    tiles = max(2, side // 3)
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    checker = (((yy * tiles) // side + (xx * tiles) // side) % 2).to(images)  # [side, side] of 0 / 1
    colours = _rand((b, 2, 3), generator, images)  # two random colours per patch
    patch = colours[:, 0, :, None, None] * (1 - checker) + colours[:, 1, :, None, None] * checker
    top = (_rand((b,), generator, images) * (h - side + 1)).long().clamp(max=h - side)
    left = (_rand((b,), generator, images) * (w - side + 1)).long().clamp(max=w - side)
    out = images.clone()
    for i in range(b):
        t, lft = int(top[i]), int(left[i])
        out[i, :, t : t + side, lft : lft + side] = patch[i]
    return out


def _brightness(images: torch.Tensor, severity: float, generator, direction: str) -> torch.Tensor:
    if direction == "up":
        amount = 0.75 * severity
        return images * (1 - amount) + amount
    return images * (1 - 0.85 * severity)


def _contrast(images: torch.Tensor, severity: float, generator, direction: str) -> torch.Tensor:
    if direction == "down":
        amount = 0.85 * severity
        return images * (1 - amount) + 0.5 * amount
    return (images - 0.5) * (1 + 4 * severity) + 0.5


def _saturation(images: torch.Tensor, severity: float, generator, direction: str) -> torch.Tensor:
    luma = torch.tensor(_LUMA, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
    gray = (images * luma).sum(1, keepdim=True)
    factor = 1 - 0.9 * severity if direction == "down" else 1 + 4 * severity
    return gray + (images - gray) * factor


def _noise(images: torch.Tensor, severity: float, generator, direction) -> torch.Tensor:
    return images + (2 * _rand(images.shape, generator, images) - 1) * (0.6 * severity)


def _pixelation(images: torch.Tensor, severity: float, generator, direction) -> torch.Tensor:
    h, w = images.shape[-2:]
    keep = 1 - 0.85 * severity
    small = F.adaptive_avg_pool2d(images, (max(2, round(h * keep)), max(2, round(w * keep))))
    return F.interpolate(small, size=(h, w), mode="nearest")


_CAUSE_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "spatial": _spatial,
    "brightness": _brightness,
    "contrast": _contrast,
    "saturation": _saturation,
    "noise": _noise,
    "pixelation": _pixelation,
}


def check_directions(directions: dict[str, str] | None) -> dict[str, str | None]:
    """Every cause's direction: :data:`DEFAULT_DIRECTIONS` overridden by ``directions`` (validated)."""
    directions = dict(directions or {})
    wrong = {k: v for k, v in directions.items() if k not in DEFAULT_DIRECTIONS or v not in ("up", "down")}
    if wrong:
        raise UserInputError(f"directions={wrong}; only {sorted(DEFAULT_DIRECTIONS)} take a direction, 'up' or 'down'")
    return {cause: directions.get(cause, DEFAULT_DIRECTIONS.get(cause)) for cause in CAUSES}


class SixCausesDataset(Dataset):
    """Corrupted images with their clean originals: ``{"image", "clean", "label", "group", "severity", "attrs"}``.

    ``group`` and ``attrs["cause"]`` hold the index of the cause in :data:`CAUSES`; ``label`` is the class of
    the original image; the original's generator attributes (if any) are kept in ``attrs``.
    """

    def __init__(
        self,
        images: torch.Tensor,
        clean: torch.Tensor,
        labels: torch.Tensor,
        causes: torch.Tensor,
        severities: torch.Tensor,
        attrs: dict[str, torch.Tensor] | None = None,
    ) -> None:
        n = len(images)
        for name, values in {
            "clean": clean,
            "labels": labels,
            "causes": causes,
            "severities": severities,
            **(attrs or {}),
        }.items():
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries for {n} images")
        self.images, self.clean = images, clean
        self.labels, self.causes, self.severities = labels.long(), causes.long(), severities.float()
        self.attrs = {k: v.long() for k, v in (attrs or {}).items()}

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        attrs = {k: v[index] for k, v in self.attrs.items()}
        attrs["cause"] = self.causes[index]
        return {
            "image": self.images[index],
            "clean": self.clean[index],
            "label": self.labels[index],
            "group": self.causes[index],
            "severity": self.severities[index],
            "attrs": attrs,
        }


class SixCausesDataModule(L.LightningDataModule):
    """Low-competency images with one of six known causes, made from high-competency test images.

    The source is another datamodule's test split (``source.setup("test")``). With a ``competency`` function
    (``images -> scores``, e.g. a fitted :class:`nemo_train.competency.PaRCE` bound to its classifier), only
    originals scoring at least ``threshold`` are used and only corrupted images scoring below it are kept,
    as in the paper; without one every original is used. Each cause is applied at severities drawn
    uniformly from ``severity_range``, ``per_cause`` images per cause.

    Args:
        source: the datamodule providing clean images (CMNIST, CLEVR, NICO-like).
        competency: optional scoring function used for the high/low competency selection.
        threshold: competency threshold separating low from high (paper: 0.9).
        per_cause: number of corrupted images kept per cause.
        severity_range: ``(low, high)`` within ``(0, 1]``.
        directions: direction (``"up"`` / ``"down"``) of brightness, contrast or saturation where it should
            differ from :data:`DEFAULT_DIRECTIONS`; e.g. a reconstruction-based estimator can score a
            whitened image of a light-background dataset as competent, while a darkened one is not.
        batch_size, seed: DataLoader batch size and the seed of every random draw.
    """

    group_names: list[str] = list(CAUSES)

    def __init__(
        self,
        source: L.LightningDataModule,
        competency: Callable[[torch.Tensor], torch.Tensor] | None = None,
        threshold: float = 0.9,
        per_cause: int = 100,
        severity_range: tuple[float, float] = (0.5, 1.0),
        directions: dict[str, str] | None = None,
        batch_size: int = 64,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 < threshold < 1.0:
            raise UserInputError(f"threshold={threshold} is out of range; expected a value in (0, 1)")
        low, high = severity_range
        if not 0.0 < low <= high <= 1.0:
            raise UserInputError(f"severity_range={tuple(severity_range)}; expected 0 < low <= high <= 1")
        if per_cause < 1:
            raise UserInputError(f"per_cause={per_cause}; expected at least 1")
        check_loader(batch_size, 0)
        self.directions = check_directions(directions)
        self.source, self.competency = source, competency
        self.threshold, self.per_cause, self.severity_range = threshold, per_cause, (low, high)
        self.batch_size, self.seed = batch_size, seed
        self.num_classes = getattr(source, "num_classes", None)
        self.class_names = getattr(source, "class_names", None)
        self.cause_names = list(CAUSES)
        self.dataset: SixCausesDataset | None = None
        self.originals_kept = 0

    @torch.no_grad()
    def _scores(self, images: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.competency(chunk).detach().cpu() for chunk in images.split(256)])

    def setup(self, stage: str | None = None) -> None:
        """Build the corrupted set once (idempotent)."""
        if self.dataset is not None:
            return
        self.source.setup("test")
        loader = DataLoader(self.source.test_set, batch_size=512, shuffle=False)
        batches = list(loader)
        images = torch.cat([b["image"] for b in batches])
        labels = torch.cat([b["label"] for b in batches])
        attr_names = list(batches[0].get("attrs", {}))
        attrs = {k: torch.cat([b["attrs"][k] for b in batches]) for k in attr_names}
        competent = torch.ones(len(images), dtype=torch.bool)
        if self.competency is not None:
            competent = self._scores(images) >= self.threshold
            if not competent.any():
                raise UserInputError(
                    f"no test image of the source reaches competency {self.threshold}; lower the threshold"
                )
        self.originals_kept = int(competent.sum())
        gen = torch.Generator().manual_seed(self.seed)
        parts: list[dict[str, torch.Tensor]] = []
        low, high = self.severity_range
        for cause_index, cause in enumerate(CAUSES):
            # draw a few candidates per wanted image: some corruptions leave competency high and get dropped.
            # The order is drawn over the whole test split, then filtered, so that an original whose score
            # moves across the threshold changes one candidate, not the whole draw.
            order = torch.randperm(len(images), generator=gen)
            candidates = order[competent[order]][: 4 * self.per_cause]
            severity = low + (high - low) * torch.rand(len(candidates), generator=gen)
            # one call per distinct severity would be slow; apply per image chunk with its own severity
            corrupted = torch.cat(
                [
                    apply_cause(images[i : i + 1], cause, float(s), gen, direction=self.directions[cause])
                    for i, s in zip(candidates.tolist(), severity)
                ]
            )
            keep = torch.ones(len(candidates), dtype=torch.bool)
            if self.competency is not None:
                keep = self._scores(corrupted) < self.threshold
            chosen = torch.nonzero(keep).flatten()[: self.per_cause]
            idx = candidates[chosen]
            parts.append(
                {
                    "images": corrupted[chosen],
                    "clean": images[idx],
                    "labels": labels[idx],
                    "causes": torch.full((len(chosen),), cause_index),
                    "severities": severity[chosen],
                    **{f"attr_{k}": v[idx] for k, v in attrs.items()},
                }
            )
        joined = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
        self.dataset = SixCausesDataset(
            joined["images"],
            joined["clean"],
            joined["labels"],
            joined["causes"],
            joined["severities"],
            {k: joined[f"attr_{k}"] for k in attr_names},
        )

    def counts(self) -> dict[str, int]:
        """Number of corrupted images per cause (after the competency selection)."""
        if self.dataset is None:
            raise UserInputError("SixCausesDataModule.setup() has not been called yet")
        return {name: int((self.dataset.causes == i).sum()) for i, name in enumerate(CAUSES)}

    def _loader(self) -> DataLoader:
        if self.dataset is None:
            self.setup()
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    def predict_dataloader(self) -> DataLoader:
        return self._loader()
