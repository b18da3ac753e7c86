"""A zoo of biased shifts classifiers: gap assignments drawn from a seed, and the data to train them together.

:func:`draw_zoo` draws ``train + heldout`` gap assignments (:class:`~datamodules.shifts.GapSpec`: which factor is
a gap for which digits). Each factor gets as many gap digits as in the ``gaps_a`` preset (colour 6, style 5,
rotation 2, background 6, size 2), drawn uniformly, so every member errs for several reasons as the preset
classifiers do; every digit keeps at least one factor without a gap, and no assignment is drawn twice. Every
possible assignment belongs to one side for good (:func:`held_out_side`: a fixed quarter of them, by a digest of
the assignment), so a held-out member's assignment never occurs in any training zoo, whatever the seed or the
sizes. The same seed draws the same zoo, and a larger zoo of that seed starts with the smaller one's members.

``gap_draw`` chooses how assignments are drawn (:data:`GapDraw`). ``gaps_a`` is the above. With it every member
has many colour and background gap digits and few rotation and size ones, so the digits' gap factors share
structure across members and a per-digit prior learnt on some members transfers to others. ``balanced`` takes
that away: every factor is a gap of exactly :data:`BALANCED_DIGITS` digits and every digit has exactly
:data:`BALANCED_PER_DIGIT` gap factors; assignments come in *blocks* of five, a drawn base pattern and its four
rotations over the factors (digit ``d``'s gap factors move one factor on from one block member to the next,
as in a Latin square), so over a whole block every digit has every factor as a gap equally often. A block goes
to one side as a whole (the side of its canonical rotation, :func:`held_out_block`), so the held-out zoo still
never shares an assignment with a training zoo, and a per-digit prior pooled over a training block is flat.

:class:`ShiftsZooDataModule` holds one :class:`~datamodules.shifts.ShiftsDataModule` per member (same sizes,
seed and shift distribution; its own gaps) and serves *stacked* batches: ``image`` ``float[N, B, 3, H, W]`` and
``label`` ``long[N, B]``, member ``k``'s images at index ``k``, so one model holding N classifiers trains them
all in one step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader

from datamodules.base import AttributeImageDataset, check_loader, check_range
from datamodules.shifts import CAUSE_FACTORS, GapSpec, ShiftsDataModule, TestShift
from nemo_train.errors import UserInputError

__all__ = ["GAP_SIZES", "GapDraw", "ShiftsZooDataModule", "ZooMember", "draw_zoo", "held_out_block", "held_out_side"]

#: Gap digits per factor of a drawn assignment: those of the ``gaps_a`` preset.
GAP_SIZES: dict[str, int] = {factor: len(digits) for factor, digits in GapSpec.PRESETS["gaps_a"].items()}
#: How a zoo's gap assignments are drawn (module docstring): ``gaps_a``'s gap digits per factor, drawn
#: independently per member; or ``balanced`` blocks (every factor equally often, rotated over the factors).
GapDraw = Literal["gaps_a", "balanced"]
#: ``balanced``: gap digits per factor, and gap factors per digit (5 factors x 4 digits = 10 digits x 2 factors).
BALANCED_DIGITS, BALANCED_PER_DIGIT = 4, 2
#: Largest zoo (training and held-out members together).
MAX_MEMBERS = 64
#: Draws tried per member before giving up (a valid, new assignment of the wanted side is found in a few).
MAX_TRIES = 1000
#: One assignment in this many is on the held-out side.
HELD_OUT_EVERY = 4


@dataclass(frozen=True)
class ZooMember:
    """One classifier of a zoo: its name, whether it is in the training or the held-out zoo, and its gaps."""

    name: str
    split: str
    gaps: GapSpec

    def gap_lists(self) -> dict[str, list[int]]:
        """The gap spec as plain ``{factor: [digit, ...]}`` (what a config or a provenance record holds)."""
        return {factor: list(digits) for factor, digits in self.gaps.gaps.items()}


def held_out_side(gaps: GapSpec) -> bool:
    """Whether an assignment may only ever be a held-out member (one in :data:`HELD_OUT_EVERY`, fixed by the
    SHA-256 of its gap matrix): the training zoos and the held-out zoos of every seed never share one."""
    bits = "".join("1" if b else "0" for b in gaps.matrix().flatten().tolist())
    return hashlib.sha256(bits.encode("ascii")).digest()[0] % HELD_OUT_EVERY == 0


def _spec(matrix: torch.Tensor) -> GapSpec:
    return GapSpec.parse({f: torch.nonzero(matrix[k]).flatten().tolist() for k, f in enumerate(CAUSE_FACTORS)})


def _rotations(matrix: torch.Tensor) -> list[torch.Tensor]:
    """The pattern and its rotations over the factors: in rotation ``r`` factor ``k`` has factor ``k + r``'s
    digits."""
    return [matrix.roll(-r, dims=0) for r in range(len(CAUSE_FACTORS))]


def held_out_block(gaps: GapSpec) -> bool:
    """:func:`held_out_side` of the block's canonical member (the least of its rotations, read as bits): every
    rotation of a ``balanced`` pattern is on the same side."""
    bits = min("".join("1" if b else "0" for b in m.flatten().tolist()) for m in _rotations(gaps.matrix()))
    return held_out_side(_spec(torch.tensor([c == "1" for c in bits]).reshape(len(CAUSE_FACTORS), 10)))


def _gaps_a_draws(gen: torch.Generator):
    """Endless ``gaps_a``-sized assignments (each factor's digits drawn uniformly), each with its side."""
    while True:
        matrix = torch.zeros(len(CAUSE_FACTORS), 10, dtype=torch.bool)
        for k, factor in enumerate(CAUSE_FACTORS):
            matrix[k, torch.randperm(10, generator=gen)[: GAP_SIZES[factor]]] = True
        if matrix.all(0).any():
            yield None  # a digit with no factor left to vary
            continue
        gaps = _spec(matrix)
        yield gaps, held_out_side(gaps)


def _balanced_draws(gen: torch.Generator):
    """Endless ``balanced`` blocks: a base pattern (each factor :data:`BALANCED_DIGITS` digits, each digit
    :data:`BALANCED_PER_DIGIT` distinct factors, by a shuffled list of factor slots dealt out to the digits)
    followed by its rotations, all on the block's side."""
    slots = torch.arange(len(CAUSE_FACTORS)).repeat_interleave(BALANCED_DIGITS)
    while True:
        dealt = slots[torch.randperm(len(slots), generator=gen)].reshape(10, BALANCED_PER_DIGIT)
        if (dealt.sort(1).values.diff(1) == 0).any():
            yield None  # a digit dealt the same factor twice
            continue
        matrix = torch.zeros(len(CAUSE_FACTORS), 10, dtype=torch.bool)
        matrix[dealt.T.flatten(), torch.arange(10).repeat(BALANCED_PER_DIGIT)] = True
        side = held_out_block(_spec(matrix))
        for rotated in _rotations(matrix):
            yield _spec(rotated), side


def draw_zoo(seed: int, train: int, heldout: int, prefix: str = "zoo", gap_draw: GapDraw = "gaps_a") -> list[ZooMember]:
    """``train`` training members then ``heldout`` held-out members, their gap assignments drawn from ``seed`` as
    ``gap_draw`` says (see the module docstring); names ``<prefix>_train_00``, ..., ``<prefix>_heldout_00``, ..."""
    check_range("train", train, 1, MAX_MEMBERS, "members")
    check_range("heldout", heldout, 0, MAX_MEMBERS - train, "members")
    draws = {"gaps_a": _gaps_a_draws, "balanced": _balanced_draws}
    if gap_draw not in draws:
        raise UserInputError(f"gap_draw={gap_draw!r}; expected one of {list(draws)}")
    gen = torch.Generator().manual_seed(seed)
    drawn: dict[str, list[GapSpec]] = {"train": [], "heldout": []}
    wanted = {"train": train, "heldout": heldout}
    for tries, draw in enumerate(draws[gap_draw](gen)):
        if not any(len(drawn[side]) < wanted[side] for side in drawn):
            break
        if tries > MAX_TRIES * (train + heldout):  # pragma: no cover - needs an astronomically unlucky seed
            raise RuntimeError(f"no new gap assignment in {tries} draws")
        if draw is None:
            continue
        gaps, held_out = draw
        side = "heldout" if held_out else "train"
        if len(drawn[side]) < wanted[side] and gaps not in drawn[side]:
            drawn[side].append(gaps)
    return [
        ZooMember(f"{prefix}_{side}_{i:02d}", side, gaps)
        for side in ("train", "heldout")
        for i, gaps in enumerate(drawn[side])
    ]


class StackedBatches:
    """``collate_fn`` of a stacked split: indices -> ``{"image": float[N, B, 3, H, W], "label": long[N, B]}``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __call__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        index = torch.tensor(indices)
        return {"image": self.images[:, index].float().div_(255.0), "label": self.labels[:, index]}


class ShiftsZooDataModule(L.LightningDataModule):
    """The shifts data of every member of a zoo, served as stacked batches (see the module docstring).

    Args:
        members: each member's gaps (a preset name or ``{factor: [digits]}``), in zoo order.
        data_dir, train_size, test_size, typical_share, test_shift, seed: the
            :class:`~datamodules.shifts.ShiftsDataModule` arguments every member shares.
        batch_size: images per member in a batch; num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        members: Sequence[str | Mapping[str, Sequence[int]]],
        data_dir: str | None = None,
        train_size: int = 8000,
        test_size: int = 4000,
        typical_share: float = 0.2,
        test_shift: TestShift = "multi",
        batch_size: int = 128,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not members:
            raise ValueError("a zoo needs at least one member")
        check_loader(batch_size, num_workers)
        shared = {
            "data_dir": data_dir,
            "train_size": train_size,
            "test_size": test_size,
            "typical_share": typical_share,
            "test_shift": test_shift,
            "batch_size": batch_size,
            "num_workers": num_workers,
            "seed": seed,
        }
        #: One datamodule per member (its arguments are an ordinary ``fit`` of that member).
        self.members = [ShiftsDataModule(gaps=dict(GapSpec.parse(g).gaps), **shared) for g in members]
        self.batch_size, self.num_workers = batch_size, num_workers
        self.num_classes = 10
        self.stacked: dict[str, StackedBatches] = {}

    def member_hparams(self, k: int) -> dict[str, Any]:
        """The ``ShiftsDataModule`` arguments of member ``k`` (gaps as ``{factor: [digits]}``)."""
        hparams = dict(self.members[k].hparams)
        hparams["gaps"] = {f: list(d) for f, d in self.members[k].gaps.gaps.items()}
        return hparams

    def setup(self, stage: str | None = None) -> None:
        """Render every member's splits once (idempotent)."""
        if self.stacked:
            return
        for member in self.members:
            member.setup(stage)
        for split in ("train_set", "val_set", "test_set"):
            sets: list[AttributeImageDataset] = [getattr(m, split) for m in self.members]
            images = torch.stack([s.images for s in sets])
            self.stacked[split] = StackedBatches(images, torch.stack([s.labels for s in sets]))

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        batches = self.stacked[split]
        return DataLoader(
            range(batches.labels.shape[1]),
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=batches,
            num_workers=self.num_workers,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train_set", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val_set", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test_set", shuffle=False)
