"""The sentence table of a failure-mode run: which sentences form ``S*_beta`` and which each method retained.

The layout follows the reference study's sentence tables: one row per sentence that is in ``S*_beta`` or
in some method's ``R_S``, its hardness ``omega^{s_n}`` (mean performance over the images it describes),
the number of those images, whether it is in ``S*_beta``, and per method ``TP`` (retained and in
``S*_beta``), ``FP`` (retained, not in ``S*_beta``) or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nemo_train.console import print_table
from nemo_train.lbee import metrics
from nemo_train.lbee.search import MethodScores


def sentence_rows(
    texts: Sequence[str],
    gamma: torch.Tensor,
    omega: torch.Tensor,
    s_star: set[int],
    scores: Sequence[MethodScores],
) -> list[list]:
    """Rows ``[sentence, images, omega^s, in S*, mark per method]`` for every sentence of ``S*`` or of some
    ``R_S``: ``S*`` first, then the others, each group by increasing hardness (the hardest first)."""
    hardness = metrics.sentence_hardness(gamma, omega)
    counts = gamma.sum(0)
    chosen = [set(s.selected) for s in scores]
    shown = sorted(
        s_star.union(*chosen),
        key=lambda n: (n not in s_star, float("inf") if torch.isnan(hardness[n]) else float(hardness[n]), n),
    )
    rows = []
    for n in shown:
        marks = [("TP" if n in s_star else "FP") if n in c else "" for c in chosen]
        rows.append([texts[n], int(counts[n]), float(hardness[n]), "yes" if n in s_star else "no", *marks])
    return rows


def print_sentence_table(
    texts: Sequence[str],
    gamma: torch.Tensor,
    omega: torch.Tensor,
    s_star: set[int],
    scores: Sequence[MethodScores],
    beta: float,
) -> str:
    """Print the sentence table (see the module docstring) and return it as text."""
    threshold = float(omega.double().mean()) - beta
    return print_table(
        ["sentence", "images", "omega_s", "in S*", *[s.method for s in scores]],
        sentence_rows(texts, gamma, omega, s_star, scores),
        title="S*_beta and the retained sentences",
        caption=f"S*_beta: omega_s < omega_avg - beta = {threshold:.3f} ({len(s_star)} sentences); "
        "TP / FP: retained by the method, in / not in S*_beta",
    )
