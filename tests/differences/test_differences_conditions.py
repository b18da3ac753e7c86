"""Condition vocabularies (rejections recorded, never a crash) and the batched, cached Diff_Model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rule_pair import AttributeEchoGenerator, expected_diffs, rule_pair

from nemo_train.differences.conditions import Rejected, TextSpace
from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.generators import CLEVR_SPACE, CMNIST_SPACE, CLEVRGenerator, CMNISTGenerator
from nemo_train.differences.models import ComparedModel


@pytest.mark.parametrize(
    "proposal, reason",
    [
        ({"digit": 12, "color": "red", "angle": 0}, "out of range"),
        ({"digit": 3, "color": "teal", "angle": 0}, "not in the vocabulary"),
        ({"digit": 3, "color": "red"}, "missing"),
        ({"digit": "three", "color": "red", "angle": 0}, "not a number"),
        ({"digit": 3, "color": "red", "angle": 7}, "out of range"),
        ({"digit": 3, "color": "red", "angle": 0, "font": "serif"}, "unknown attribute"),
        ("digit 3 in red", "expected an object"),
    ],
)
def test_out_of_vocabulary_conditions_are_rejected_with_a_reason(proposal, reason):
    with pytest.raises(Rejected, match=reason):
        CMNIST_SPACE.parse(proposal)


def test_conditions_parse_synonyms_and_grids():
    c = CMNIST_SPACE.parse({"Digit": "3", "colour": "Gray", "angle": "-10 degrees", "strategy": "exploration"})
    assert c.values == {"digit": 3, "color": "grey", "angle": -10}
    assert CMNIST_SPACE.describe(c) == "digit 3, grey, -10 degrees"
    assert len(CMNIST_SPACE.grid()) == 1300 and len(CLEVR_SPACE.grid()) == 144
    assert CLEVR_SPACE.parse({"shape": "cubes", "material": "metallic", "color": "grey", "size": "small"}) is not None


def test_text_conditions_follow_the_caption_rules():
    space = TextSpace(["man", "woman"], [["man", "boy", "male"], ["woman", "girl", "female"]])
    assert space.parse(["a boy riding a bike", 0]).text == "a boy riding a bike"
    for bad in (["a girl riding a bike", 0], ["a boy and a girl", 0], ["a bike", 1], ["a man", 5], {"text": ""}):
        with pytest.raises(Rejected):
            space.parse(bad)


class ConstantModel(ComparedModel):
    def __init__(self, label):
        self.label = label

    def prepare(self, work_dir, device):
        pass

    def predict(self, images):
        return torch.full((len(images),), self.label)

    @property
    def identity(self):
        return f"constant-{self.label}"


def test_diff_model_by_hand_on_real_renders(tmp_path):
    generator = CMNISTGenerator()
    diff = DiffModel(ConstantModel(3), ConstantModel(5), generator, n=4, cache_file=tmp_path / "cache.json")
    conditions = [CMNIST_SPACE.make(digit=d, color="red", angle=0) for d in (3, 5, 7)]
    assert diff(conditions).tolist() == [1.0, -1.0, 0.0]
    images, labels = generator.generate(conditions[:1], 4, seed=0)
    assert images.shape == (4, 3, 28, 28) and labels.tolist() == [3] * 4
    clevr = CLEVRGenerator(image_size=16).generate([CLEVR_SPACE.make(shape="sphere", material="metal",
                                                                    color="red", size="large")], 2, seed=0)  # fmt: skip
    assert clevr[0].shape == (2, 3, 16, 16) and clevr[1].tolist() == [2, 2]


def test_diff_model_batched_equals_one_at_a_time_and_caches(tmp_path):
    model_a, model_b = rule_pair(fail_rate=0.5)
    conditions = CMNIST_SPACE.grid()[::7]
    batched_gen, single_gen = AttributeEchoGenerator(), AttributeEchoGenerator()
    batched = DiffModel(model_a, model_b, batched_gen, n=20, images_per_batch=400, cache_file=tmp_path / "c.json")
    single = DiffModel(model_a, model_b, single_gen, n=20)
    a = batched(conditions)
    b = np.array([o.diff for o in single.observe(conditions, batched=False)])
    assert np.array_equal(a, b)
    assert batched_gen.calls == -(-len(conditions) // 20) and single_gen.calls == len(conditions)
    assert np.corrcoef(a, expected_diffs(conditions))[0, 1] > 0.8
    again = DiffModel(model_a, model_b, batched_gen, n=20, cache_file=tmp_path / "c.json")
    calls = batched_gen.calls
    assert np.array_equal(again(conditions), a) and batched_gen.calls == calls  # read from the cache file
    other_seed = DiffModel(model_a, model_b, batched_gen, n=20, seed=1, cache_file=tmp_path / "c.json")
    other_seed(conditions[:3])
    assert batched_gen.calls == calls + 1  # a new seed is a new key
