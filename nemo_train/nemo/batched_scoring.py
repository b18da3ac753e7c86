"""Counterfactual tests of many errors' hypotheses, with one derivation request for all of them.

:class:`~nemo_train.nemo.interventions.CounterfactualScorer` derives the edits of one error's hypotheses
with one batched request, so a batch of ``B`` errors costs ``B`` derivation rounds. :func:`with_derived_edits`
asks for the edits of every hypothesis of every error in one round through the deriver's
``derive_batch`` (the language-model derivers: one ``chat_json_batch`` call, each distinct request once;
a local model generates them in batched ``generate`` calls, an endpoint gets them ``concurrency`` at a
time); the scorer it returns then edits and classifies each error as before. The trials are the same as
:meth:`CounterfactualScorer.score` gives per error. A deriver without ``derive_batch`` (keywords, structured
answers: no language model) is called per error.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from nemo_train.nemo.benchmark import ErrorSample
from nemo_train.nemo.interventions import CounterfactualScorer


def derive_many(
    deriver, samples: Sequence[ErrorSample], hypotheses: Sequence[Sequence[str]], class_names: Sequence[str]
) -> list[list[Any]]:
    """The instructions of every error's hypotheses (``None`` where underivable), one list per error."""
    batch = getattr(deriver, "derive_batch", None)
    if batch is not None:
        return [list(found) for found in batch(list(samples), [list(h) for h in hypotheses], class_names)]
    return [deriver.derive(s, list(h), class_names) if h else [] for s, h in zip(samples, hypotheses)]


class _Derived:
    """A deriver that returns instructions derived beforehand, by error."""

    def __init__(self, instructions: dict[str, list[Any]]) -> None:
        self.instructions = instructions

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[Any]:
        return self.instructions[sample.sample_id]


def with_derived_edits(
    scorer: CounterfactualScorer,
    samples: Sequence[ErrorSample],
    hypotheses: Sequence[Sequence[str]],
    class_names: Sequence[str],
) -> CounterfactualScorer:
    """A copy of ``scorer`` whose :meth:`~CounterfactualScorer.score` of these errors' hypotheses uses edits
    derived for all of them in one round (it edits and classifies as ``scorer`` does)."""
    derived = derive_many(scorer.deriver, samples, hypotheses, class_names)
    fixed = copy.copy(scorer)
    fixed.deriver = _Derived({s.sample_id: d for s, d in zip(samples, derived)})
    return fixed
