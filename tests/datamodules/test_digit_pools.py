"""The exemplar pools both digit renderers (CMNIST, shifts) look exemplars up in: one lookup, one code layout."""

from __future__ import annotations

import pytest
import torch

from datamodules.cmnist import CMNISTRenderer, exemplar_pools
from datamodules.digit_pools import POOLS, STYLE_BITS, DigitPools, exemplar_of
from datamodules.shifts_render import ShiftsRenderer
from nemo_train.errors import UserInputError


@pytest.fixture(scope="module")
def pools():
    return exemplar_pools(None, torch.Generator().manual_seed(0))


def test_both_renderers_draw_the_exemplar_a_code_names(pools):
    cmnist, shifts = CMNISTRenderer(pools=pools), ShiftsRenderer(pools)
    assert isinstance(cmnist, DigitPools) and isinstance(shifts, DigitPools)
    assert CMNISTRenderer.style_of is exemplar_of  # one code layout
    digit = torch.tensor([3, 3, 7, 0])
    code = torch.tensor(
        [exemplar_of("train", 0), exemplar_of("test", 5), exemplar_of("val", 2), exemplar_of("test", 0)]
    )
    rows = cmnist.exemplar_rows(digit, code)
    assert torch.equal(rows, shifts.exemplar_rows(digit, code))
    labels = torch.cat([pools[name][1] for name in POOLS])
    assert labels[rows].tolist() == digit.tolist()  # every row is an exemplar of its digit
    offsets = {name: sum(len(pools[n][1]) for n in POOLS[: POOLS.index(name)]) for name in POOLS}
    for row, c in zip(rows.tolist(), code.tolist()):  # ... in the pool the code's high bits name
        pool = POOLS[c >> STYLE_BITS]
        assert offsets[pool] <= row < offsets[pool] + len(pools[pool][1])
    # the index is taken modulo the pool's exemplars of the digit
    n = cmnist.num_exemplars(3, "test")
    assert n == cmnist.num_styles(3, "test") == shifts.num_exemplars(3, "test") > 0
    wrapped = cmnist.exemplar_rows(torch.tensor([3]), torch.tensor([exemplar_of("test", 5 + n)]))
    assert wrapped.item() == rows[1].item()


def test_pool_errors_name_the_renderers_code_attribute(pools):
    only_test = {"test": pools["test"]}
    with pytest.raises(UserInputError, match="style names exemplar pool 0, which this renderer does not hold"):
        CMNISTRenderer(pools=only_test).render(3, "red", 0, exemplar_of("train", 0))
    with pytest.raises(UserInputError, match="exemplar names exemplar pool 0"):
        ShiftsRenderer(only_test).render(3, exemplar=exemplar_of("train", 0))
    with pytest.raises(UserInputError, match="digit 10 out of range 0-9"):
        CMNISTRenderer(pools=only_test).render(10, "red", 0, exemplar_of("test", 0))
    with pytest.raises(UserInputError, match="unknown exemplar pool 'holdout'"):
        exemplar_of("holdout", 0)
    with pytest.raises(UserInputError, match="unknown exemplar pool\\(s\\) \\['holdout'\\]"):
        DigitPools({"holdout": pools["test"]})
