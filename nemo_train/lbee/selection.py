"""Steps 3-5: match sentences to prototypes and keep ``K`` sentences per hard cluster.

``v`` rows are cosine similarities of a prototype to every sentence embedding. Each hard prototype is
contrasted with its closest easy prototype (cosine). The four selection rules:

* ``TopS`` — the ``K`` sentences most similar to the hard prototype (no contrast);
* ``SetDiff`` — ``S^h \\ S^e``: the sentences of the hard prototype's set ``S^h`` that are not in the easy
  prototype's set ``S^e`` (each set: the prototype's top ``K`` sentences filled with every sentence
  above ``tau``), most similar to the hard prototype first; when fewer than ``K`` remain, the next most
  similar sentences outside ``S^e`` complete them (and the top hard sentences if every one is in ``S^e``).
  With the raw cosine fill ``S^h`` is a prefix of the hard ranking, so this is simply the ``K`` most
  similar sentences outside ``S^e``, as the reference study states it; with the standardised fill
  ``S^h`` is not a prefix, and a sentence that describes neither cluster (high raw similarity to every
  image) no longer comes before the hard cluster's own sentences;
* ``PDiff`` — the ``K`` largest entries of ``d = v^h - v^e``;
* ``FPDiff`` — the ``K`` largest entries of ``d`` among the hard prototype's set ``S^h`` (its top ``K``
  filled with every sentence above ``tau``, so it always holds ``K`` or more).

The output ``R_S`` of a rule is the union of its per-cluster sets.

The ``tau`` fill compares a score with ``tau``: the raw cosine similarity (``tau = 0.25`` as chosen for
Open-CLIP, whose sentence-image similarities average about 0.17), or, for a joint space with another
similarity scale, the *sentence-standardised* similarity ``(v_n - mean_n) / std_n``, where ``mean_n`` and
``std_n`` are the mean and standard deviation of sentence ``n``'s cosine similarity over the analysed
images (:func:`sentence_statistics`). A sentence then fills a prototype's set when the prototype matches
it ``tau`` standard deviations better than the analysed images do on average: a sentence that suits every
image alike (one that names no distinguishing attribute) stays out however high its raw similarity.
Only the fill changes; the rankings (``v``, ``d``) stay the raw cosine similarities.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError

Method = Literal["TopS", "SetDiff", "PDiff", "FPDiff"]
METHODS: tuple[Method, ...] = ("TopS", "SetDiff", "PDiff", "FPDiff")
TauScale = Literal["cosine", "sentence_z"]


def similarities(prototypes: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
    """Cosine similarity ``[C, N]`` of each prototype to each sentence embedding."""
    return F.normalize(prototypes.float(), dim=-1) @ F.normalize(sentences.float(), dim=-1).T


def sentence_statistics(
    images: torch.Tensor, sentences: torch.Tensor, chunk: int = 65536
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) standard deviation ``[N]`` of each sentence's cosine similarity over ``images``.

    Computed in chunks of images (memory ``O(chunk * N)``), in float64 sums.
    """
    text = F.normalize(sentences.float(), dim=-1)
    total = torch.zeros(len(text), dtype=torch.float64)
    squares = torch.zeros(len(text), dtype=torch.float64)
    for block in images.split(chunk):
        sims = (F.normalize(block.float(), dim=-1) @ text.T).double()
        total += sims.sum(0)
        squares += (sims * sims).sum(0)
    mean = total / len(images)
    std = (squares / len(images) - mean * mean).clamp_min(0).sqrt()
    return mean.float(), std.float()


def standardize(v: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Sentence-standardised similarities ``(v - mean) / std`` (``v`` ``[..., N]``; a constant sentence scores 0)."""
    return (v - mean) / std.clamp_min(eps)


def closest(hard: torch.Tensor, easy: torch.Tensor) -> torch.Tensor:
    """Index of the closest (cosine) easy prototype for each hard prototype ``long[C^h]``."""
    return similarities(hard, easy).argmax(-1)


def relevant_set(v: torch.Tensor, k: int, tau: float, fill: torch.Tensor | None = None) -> set[int]:
    """A prototype's sentence set: its top ``k`` sentences by ``v``, filled with every sentence whose ``fill``
    score (default ``v``) is above ``tau``."""
    top = v.topk(min(k, len(v))).indices.tolist()
    return set(top) | set(torch.nonzero((v if fill is None else fill) > tau).flatten().tolist())


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


def select(
    method: Method,
    v_hard: torch.Tensor,
    v_easy: torch.Tensor,
    k: int = 3,
    tau: float = 0.25,
    fill_hard: torch.Tensor | None = None,
    fill_easy: torch.Tensor | None = None,
) -> list[int]:
    """Sentence indices ``R_i^h`` (``k`` of them, best first) for one hard cluster by ``method``.

    ``v_hard`` / ``v_easy``: similarity vectors ``[N]`` of the hard prototype and its closest easy one.
    ``fill_hard`` / ``fill_easy``: the scores compared with ``tau`` to fill ``S^h`` / ``S^e`` (default: the
    similarities themselves; :func:`standardize` gives the sentence-standardised ones).
    """
    if k < 1:
        raise UserInputError(f"K={k}; expected an integer >= 1")
    order_h = v_hard.argsort(descending=True, stable=True)
    if method == "TopS":
        return order_h[:k].tolist()
    if method == "SetDiff":
        hard, easy = relevant_set(v_hard, k, tau, fill_hard), relevant_set(v_easy, k, tau, fill_easy)
        chosen = _first_k(order_h, lambda i: i in hard and i not in easy, k)  # S^h minus S^e, hard-ranked
        chosen += _first_k(order_h, lambda i: i not in easy and i not in chosen, k - len(chosen))
        return chosen + _first_k(order_h, lambda i: i not in chosen, k - len(chosen))  # all in S^e: top hard
    diff = v_hard - v_easy
    order_d = diff.argsort(descending=True, stable=True)
    if method == "PDiff":
        return order_d[:k].tolist()
    if method == "FPDiff":
        pool = relevant_set(v_hard, k, tau, fill_hard)
        return _first_k(order_d, lambda i: i in pool, k)  # S^h holds at least K sentences
    raise UserInputError(f"unknown selection method {method!r}; expected one of {list(METHODS)}")
