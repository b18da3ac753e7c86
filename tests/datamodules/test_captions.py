"""Captioned generated images for CLIP training: captions follow the attributes, splits are disjoint."""

from __future__ import annotations

import pytest
import torch

from datamodules.captions import VOCABULARIES, CaptionDataModule, tilt_index
from nemo_train.errors import UserInputError


def test_batches_carry_captions_that_name_the_attributes():
    data = CaptionDataModule(
        sources=["nico", "cmnist", "clevr"],
        image_size=16,
        train_per_source=24,
        val_per_source=8,
        partial_caption_prob=0.0,
        batch_size=8,
    )
    data.setup()
    assert data.slots[:2] == [("nico", "object"), ("nico", "context")]
    assert len(data.train_set) == 72 and len(data.val_set) == 24
    for i in range(len(data.train_set)):
        item = data.train_set[i]
        source = data.sources[int(item["source"])]
        assert item["image"].shape == (3, 16, 16) and 0 <= item["image"].min() <= item["image"].max() <= 1
        for j, (s, attr) in enumerate(data.slots):
            value = int(item["attrs"][j])
            if s == source:
                assert VOCABULARIES[s].words[attr][value] in item["caption"]
            else:
                assert value == -1
    batch = next(iter(data.train_dataloader()))
    assert isinstance(batch["caption"], list) and batch["attrs"].shape == (8, len(data.slots))


def test_partial_captions_name_one_attribute_and_prompts_cover_every_value():
    data = CaptionDataModule(
        sources=["nico"], image_size=16, train_per_source=40, val_per_source=4, partial_caption_prob=1.0
    )
    data.setup()
    assert all(" in " not in c or c.startswith("a photo taken in") for c in data.train_set.captions)
    prompts = data.zero_shot_prompts()
    assert list(prompts) == ["nico/object", "nico/context"]
    assert prompts["nico/object"][1] == "a photo of a bird" and len(prompts["nico/context"]) == 6


def test_validation_uses_other_styles_and_is_seeded():
    a = CaptionDataModule(sources=["nico"], image_size=16, train_per_source=16, val_per_source=16)
    b = CaptionDataModule(sources=["nico"], image_size=16, train_per_source=16, val_per_source=16)
    a.setup(), b.setup()
    assert torch.equal(a.train_set.images, b.train_set.images) and a.train_set.captions == b.train_set.captions
    assert not torch.equal(a.train_set.images, a.val_set.images)
    # the validation images do not depend on the training split's size or groups
    c = CaptionDataModule(sources=["nico"], image_size=16, train_per_source=40, val_per_source=16, group_size=4)
    c.setup()
    assert torch.equal(a.val_set.images, c.val_set.images) and a.val_set.captions == c.val_set.captions


def test_training_images_per_source_can_over_weight_one_source():
    data = CaptionDataModule(
        sources=["cmnist", "nico"], image_size=16, train_per_source={"nico": 30, "cmnist": 10}, val_per_source=8
    )
    data.setup()
    sources = data.train_set.source.tolist()
    assert sources.count(data.sources.index("nico")) == 30 and sources.count(data.sources.index("cmnist")) == 10
    assert data.val_set.source.bincount().tolist() == [8, 8]  # validation stays balanced
    # an int gives every source the same count, and the mapping with equal counts draws the same images
    same = CaptionDataModule(sources=["nico"], image_size=16, train_per_source=12, val_per_source=4)
    mapped = CaptionDataModule(sources=["nico"], image_size=16, train_per_source={"nico": 12}, val_per_source=4)
    same.setup(), mapped.setup()
    assert torch.equal(same.train_set.images, mapped.train_set.images)


def test_per_source_counts_must_name_every_source_and_stay_in_range():
    with pytest.raises(UserInputError, match="clevr"):
        CaptionDataModule(sources=["nico", "clevr"], train_per_source={"nico": 10})
    with pytest.raises(UserInputError, match="unknown source"):
        CaptionDataModule(sources=["nico"], train_per_source={"nico": 10, "mnist": 10})
    with pytest.raises(UserInputError, match=r"train_per_source\[nico\]"):
        CaptionDataModule(sources=["nico"], train_per_source={"nico": 0})


def test_tilt_bins():
    assert tilt_index(torch.tensor([-30, -10, -5, 0, 5, 10, 30])).tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_bad_sources_are_user_errors():
    with pytest.raises(UserInputError):
        CaptionDataModule(sources=["imagenet"])
    with pytest.raises(UserInputError):
        CaptionDataModule(sources=[])


def test_training_images_come_in_minimal_pair_groups_kept_together_in_batches():
    data = CaptionDataModule(
        sources=["cmnist", "clevr"], image_size=16, train_per_source=60, val_per_source=8, group_size=4, batch_size=8
    )
    data.setup()
    train = data.train_set
    assert len(train) == 120
    for g in train.group.unique():
        rows = torch.nonzero(train.group == g).flatten()
        attrs = train.attrs[rows]
        varied = [j for j in range(attrs.shape[1]) if len(attrs[:, j].unique()) > 1]
        # one attribute varies, cycling through its values; every other attribute is shared
        assert len(varied) <= 1 and 1 <= len(rows) <= 4
        if varied:
            source, attr = data.slots[varied[0]]
            assert len(attrs[:, varied[0]].unique()) == min(len(rows), len(VOCABULARIES[source].words[attr]))
            for i in rows.tolist():  # a one-attribute caption of a group names the varied attribute
                caption = train.captions[i]
                assert VOCABULARIES[source].words[attr][int(train.attrs[i, varied[0]])] in caption
    # the validation split holds independent images; batches keep each group's members together
    assert len(data.val_set.group.unique()) == len(data.val_set)
    sampler = data.train_dataloader().batch_sampler
    batches = list(sampler)
    assert len(batches) == 120 // 8 and all(len(b) == 8 for b in batches)
    order = torch.tensor([i for b in batches for i in b])
    groups = train.group[order]
    changes = int((groups[1:] != groups[:-1]).sum()) + 1
    assert changes == len(groups.unique())  # each group is one contiguous run
    assert list(sampler) != batches  # a new group order every epoch
