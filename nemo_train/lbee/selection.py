"""Steps 3-5: match sentences to prototypes and keep ``K`` sentences per hard cluster.

``v`` rows are cosine similarities of a prototype to every sentence embedding. Each hard prototype is
contrasted with its closest easy prototype (cosine). The four selection rules:

* ``TopS`` — the ``K`` sentences most similar to the hard prototype (no contrast);
* ``SetDiff`` — the ``K`` most similar sentences to the hard prototype that are not in the easy
  prototype's set ``S^e`` (its top ``K`` sentences filled with every sentence above ``tau``);
* ``PDiff`` — the ``K`` largest entries of ``d = v^h - v^e``;
* ``FPDiff`` — the ``K`` largest entries of ``d`` among the hard prototype's set ``S^h`` (its top ``K``
  filled with every sentence above ``tau``, so it always holds ``K`` or more).

The output ``R_S`` of a rule is the union of its per-cluster sets.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError

Method = Literal["TopS", "SetDiff", "PDiff", "FPDiff"]
METHODS: tuple[Method, ...] = ("TopS", "SetDiff", "PDiff", "FPDiff")


def similarities(prototypes: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
    """Cosine similarity ``[C, N]`` of each prototype to each sentence embedding."""
    return F.normalize(prototypes.float(), dim=-1) @ F.normalize(sentences.float(), dim=-1).T


def closest(hard: torch.Tensor, easy: torch.Tensor) -> torch.Tensor:
    """Index of the closest (cosine) easy prototype for each hard prototype ``long[C^h]``."""
    return similarities(hard, easy).argmax(-1)


def relevant_set(v: torch.Tensor, k: int, tau: float) -> set[int]:
    """A prototype's sentence set: its top ``k`` sentences, filled with every sentence scoring above ``tau``."""
    top = v.topk(min(k, len(v))).indices.tolist()
    return set(top) | set(torch.nonzero(v > tau).flatten().tolist())


def _first_k(order: torch.Tensor, keep, k: int) -> list[int]:
    out: list[int] = []
    if k <= 0:
        return out
    for i in order.tolist():
        if keep(i):
            out.append(i)
            if len(out) == k:
                break
    return out


def select(method: Method, v_hard: torch.Tensor, v_easy: torch.Tensor, k: int = 3, tau: float = 0.25) -> list[int]:
    """Sentence indices ``R_i^h`` (``k`` of them, best first) for one hard cluster by ``method``.

    ``v_hard`` / ``v_easy``: similarity vectors ``[N]`` of the hard prototype and its closest easy one.
    """
    if k < 1:
        raise UserInputError(f"K={k}; expected an integer >= 1")
    order_h = v_hard.argsort(descending=True, stable=True)
    if method == "TopS":
        return order_h[:k].tolist()
    if method == "SetDiff":
        easy = relevant_set(v_easy, k, tau)
        chosen = _first_k(order_h, lambda i: i not in easy, k)
        return chosen + _first_k(order_h, lambda i: i not in chosen, k - len(chosen))  # all in S^e: top hard
    diff = v_hard - v_easy
    order_d = diff.argsort(descending=True, stable=True)
    if method == "PDiff":
        return order_d[:k].tolist()
    if method == "FPDiff":
        pool = relevant_set(v_hard, k, tau)
        return _first_k(order_d, lambda i: i in pool, k)  # S^h holds at least K sentences
    raise UserInputError(f"unknown selection method {method!r}; expected one of {list(METHODS)}")
