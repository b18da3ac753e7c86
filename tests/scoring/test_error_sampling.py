"""How the shifts benchmark draws its n errors among the single-cause ones: uniformly, or each cause in turn."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from nemo_train.errors import UserInputError
from nemo_train.scoring.shift_benchmark import sample_errors

CAUSES = ["angle"] * 40 + ["color"] * 5 + ["scale"] * 10


def test_uniform_is_the_seeded_permutation_it_always_was():
    expected = torch.randperm(len(CAUSES), generator=torch.Generator().manual_seed(3))[:12].sort().values
    assert torch.equal(sample_errors(CAUSES, 12, seed=3), expected)


def test_by_cause_gives_every_cause_an_equal_share_while_it_lasts():
    picked = sample_errors(CAUSES, 12, seed=0, error_sampling="by_cause")
    assert Counter(CAUSES[i] for i in picked.tolist()) == {"angle": 4, "color": 4, "scale": 4}
    assert picked.tolist() == sorted(set(picked.tolist()))  # distinct, sorted
    more = Counter(CAUSES[i] for i in sample_errors(CAUSES, 31, seed=0, error_sampling="by_cause").tolist())
    assert more["color"] == 5 and more["scale"] == 10 and more["angle"] == 16  # the rarer causes run out
    assert len(sample_errors(CAUSES, 500, seed=0, error_sampling="by_cause")) == len(CAUSES)
    again = sample_errors(CAUSES, 12, seed=0, error_sampling="by_cause")
    assert torch.equal(again, picked) and not torch.equal(
        sample_errors(CAUSES, 12, seed=1, error_sampling="by_cause"), picked
    )
    with pytest.raises(UserInputError, match="error_sampling='stratified'"):
        sample_errors(CAUSES, 3, seed=0, error_sampling="stratified")
