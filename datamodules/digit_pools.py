"""The exemplar pools of the digit renderers (CMNIST's :class:`~datamodules.cmnist.CMNISTRenderer` and the shifts
digits' :class:`~datamodules.shifts_render.ShiftsRenderer`), and how one attribute names one handwritten exemplar.

A renderer holds one or more pools of handwritten digits (``train``, ``val``, ``test``; see :data:`POOLS`). One
attribute, its *exemplar code* (CMNIST's ``style``, the shifts ``exemplar``), names the exemplar an image draws:
the bits above :data:`STYLE_BITS` name the pool, the low bits the exemplar within it (taken modulo the pool's
exemplars of the digit), so every sample re-renders exactly from its attributes. :class:`DigitPools` is that
lookup, written once for both renderers.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from nemo_train.errors import UserInputError

#: Exemplar pools of a renderer, in the order of the bits above :data:`STYLE_BITS` of an exemplar code.
POOLS: tuple[str, ...] = ("train", "val", "test")
#: An exemplar code's low bits pick the exemplar within its pool; the bits above name the pool (see :data:`POOLS`).
STYLE_BITS = 30


def exemplar_of(pool: str, index: torch.Tensor | int) -> torch.Tensor | int:
    """The exemplar code of exemplar ``index`` (taken modulo the pool's size per digit) of ``pool``."""
    if pool not in POOLS:
        raise UserInputError(f"unknown exemplar pool {pool!r}; expected one of {list(POOLS)}")
    return (POOLS.index(pool) << STYLE_BITS) + index


class DigitPools:
    """The exemplar pools of a digit renderer and the lookup of the exemplar an exemplar code names.

    ``pools`` maps pool names (some of :data:`POOLS`) to ``(digits float[N, 28, 28], labels)``; a renderer
    concatenates the pools' digits in :data:`POOLS` order (:attr:`pool_names`), and :meth:`exemplar_rows`
    indexes that concatenation. Every pool must hold every digit 0-9.
    """

    #: The attribute that holds the exemplar code, as messages name it.
    code_attribute = "style"

    def __init__(self, pools: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        unknown = [name for name in pools if name not in POOLS]
        if unknown:
            raise UserInputError(f"unknown exemplar pool(s) {unknown}; expected some of {list(POOLS)}")
        #: the pools held, in :data:`POOLS` order
        self.pool_names = [name for name in POOLS if name in pools]
        labels = torch.cat([pools[name][1] for name in self.pool_names])
        offsets = torch.tensor([0] + [len(pools[name][0]) for name in self.pool_names]).cumsum(0)
        #: ``by_pool[p][d]``: the rows (into the pools' digits concatenated in :attr:`pool_names` order) of the
        #: exemplars of digit ``d`` in pool ``p`` (``None``: pool absent)
        self.by_pool: list[list[torch.Tensor] | None] = [None] * len(POOLS)
        for k, name in enumerate(self.pool_names):
            pool_labels = labels[offsets[k] : offsets[k + 1]]
            by_digit = [torch.nonzero(pool_labels == d).flatten() + offsets[k] for d in range(10)]
            missing = [d for d, idx in enumerate(by_digit) if len(idx) == 0]
            if missing:
                raise UserInputError(f"the {name} exemplar pool has no exemplar of digit(s) {missing}")
            self.by_pool[POOLS.index(name)] = by_digit

    def num_exemplars(self, digit: int, pool: str = "train") -> int:
        """How many exemplars of ``digit`` the pool ``pool`` holds."""
        return len(self._pool(POOLS.index(pool))[int(digit)])

    def exemplar_rows(self, digit: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        """``long[B]``: the row, in the pools' digits, of the exemplar each ``(digit, exemplar code)`` names."""
        pool, within = code >> STYLE_BITS, code & ((1 << STYLE_BITS) - 1)
        rows = torch.empty_like(digit)
        for p in pool.unique().tolist():
            by_digit = self._pool(p)
            for d in digit[pool == p].unique().tolist():
                if not 0 <= d <= 9:
                    raise UserInputError(f"digit {d} out of range 0-9")
                chosen = (digit == d) & (pool == p)
                rows[chosen] = by_digit[d][within[chosen] % len(by_digit[d])]
        return rows

    def _pool(self, index: int) -> list[torch.Tensor]:
        by_digit = self.by_pool[index] if 0 <= index < len(POOLS) else None
        if by_digit is None:
            raise UserInputError(
                f"{self.code_attribute} names exemplar pool {index}, which this renderer does not hold"
            )
        return by_digit
