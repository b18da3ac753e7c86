"""Zoo gap assignments drawn from a seed (a training and a held-out zoo) and the stacked zoo batches."""

from __future__ import annotations

import pytest
import torch

from datamodules.shifts import CAUSE_FACTORS, GapSpec
from datamodules.shifts_zoo import (
    BALANCED_DIGITS,
    BALANCED_PER_DIGIT,
    GAP_SIZES,
    ShiftsZooDataModule,
    draw_zoo,
    held_out_block,
    held_out_side,
)
from nemo_train.errors import UserInputError


def test_drawn_assignments_are_reproducible_and_held_out_ones_never_occur_in_training():
    zoo = draw_zoo(7, train=12, heldout=8, prefix="z")
    assert zoo == draw_zoo(7, train=12, heldout=8, prefix="z")
    assert [m.gaps for m in zoo] != [m.gaps for m in draw_zoo(8, train=12, heldout=8, prefix="z")]
    assert [m.name for m in zoo[:2]] == ["z_train_00", "z_train_01"] and zoo[12].name == "z_heldout_00"
    assert [m.split for m in zoo] == ["train"] * 12 + ["heldout"] * 8
    training = [m.gaps.matrix() for m in zoo if m.split == "train"]
    for member in zoo:
        matrix = member.gaps.matrix()
        assert {f: len(d) for f, d in member.gaps.gaps.items()} == GAP_SIZES
        assert (matrix.sum(0) < len(CAUSE_FACTORS)).all()  # every digit may still show some factor shifted
        assert member.gaps == GapSpec.parse(member.gap_lists())
        assert held_out_side(member.gaps) == (member.split == "heldout")
        if member.split == "heldout":
            assert not any(torch.equal(matrix, seen) for seen in training)
    assert len({tuple(m.gaps.matrix().flatten().tolist()) for m in zoo}) == len(zoo)  # no assignment twice
    # held-out assignments are never training ones in any zoo: the training zoos of 30 other seeds hold none
    held_out = {tuple(m.gaps.matrix().flatten().tolist()) for m in zoo if m.split == "heldout"}
    for seed in range(30):
        others = draw_zoo(seed, train=20, heldout=0)
        assert not held_out & {tuple(m.gaps.matrix().flatten().tolist()) for m in others}
        assert not any(held_out_side(m.gaps) for m in others)
    # a bigger draw from the same seed starts with the same members on each side
    bigger = draw_zoo(7, train=14, heldout=10, prefix="z")
    assert bigger[:12] == zoo[:12] and bigger[14:22] == zoo[12:]
    with pytest.raises(UserInputError, match="train=0"):
        draw_zoo(0, train=0, heldout=1)


def test_balanced_draws_rotate_each_digits_gap_factors_and_keep_held_out_blocks_apart():
    zoo = draw_zoo(0, train=8, heldout=8, gap_draw="balanced")
    assert zoo == draw_zoo(0, train=8, heldout=8, gap_draw="balanced")
    assert [m.gaps for m in zoo] != [m.gaps for m in draw_zoo(0, train=8, heldout=8)]  # the default draw differs
    for member in zoo:
        matrix = member.gaps.matrix()
        assert (matrix.sum(1) == BALANCED_DIGITS).all() and (matrix.sum(0) == BALANCED_PER_DIGIT).all()
        assert held_out_block(member.gaps) == (member.split == "heldout")
    for side in ("train", "heldout"):
        block = torch.stack([m.gaps.matrix() for m in zoo if m.split == side][:5]).int()
        # a block of five: every digit has every factor as a gap equally often, and one member's gap factor of a
        # digit is the next member's previous factor (rotated by one factor)
        assert (block.sum(0) == BALANCED_PER_DIGIT).all()
        for k in range(4):
            assert torch.equal(block[k + 1], block[k].roll(-1, dims=0))
    matrices = [tuple(m.gaps.matrix().flatten().tolist()) for m in zoo]
    assert len(set(matrices)) == len(zoo)
    held_out = {t for t, m in zip(matrices, zoo) if m.split == "heldout"}
    for seed in range(20):  # held-out blocks never reach a training zoo of any seed
        others = draw_zoo(seed, train=20, heldout=0, gap_draw="balanced")
        assert not held_out & {tuple(m.gaps.matrix().flatten().tolist()) for m in others}
    with pytest.raises(UserInputError, match="gap_draw='latin'"):
        draw_zoo(0, train=1, heldout=0, gap_draw="latin")


def test_stacked_batches_hold_each_members_own_images():
    members = [m.gaps.gaps for m in draw_zoo(1, train=2, heldout=1)]
    dm = ShiftsZooDataModule(members, train_size=40, test_size=20, batch_size=8, seed=4)
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    assert batch["image"].shape == (3, 8, 3, 32, 32) and batch["label"].shape == (3, 8)
    for k, member in enumerate(dm.members):
        assert member.gaps == GapSpec.parse(members[k])
        assert torch.equal(batch["image"][k], member.val_set.images[:8].float() / 255.0)
        assert torch.equal(batch["label"][k], member.val_set.labels[:8])
        assert dm.member_hparams(k)["gaps"] == {f: list(d) for f, d in member.gaps.gaps.items()}
    train = dm.members[0].train_set, dm.members[1].train_set
    assert not torch.equal(train[0].images, train[1].images)  # other gaps, other training images
    assert len(list(dm.train_dataloader())) == 5
