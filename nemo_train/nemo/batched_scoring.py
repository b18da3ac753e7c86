"""Counterfactual tests of many errors' hypotheses, with one derivation request for all of them.

:class:`~nemo_train.nemo.interventions.CounterfactualScorer` derives the edits of one error's hypotheses
with one batched request, so a batch of ``B`` errors costs ``B`` derivation rounds. :func:`score_many`
asks for the edits of every hypothesis of every error in one round (a local model generates them in
batched ``generate`` calls, an endpoint gets them ``concurrency`` at a time), then edits and classifies
each error as the scorer does. The trials are the same as :meth:`CounterfactualScorer.score` per error.

A deriver that defines ``derive_batch(samples, hypotheses, class_names)`` is used as is. A language-model
deriver that asks its ``backend`` through ``chat_json_batch`` (the attribute and instruction derivers) is
run twice over a copy of itself whose backend is a :class:`_RequestCollector`: the first pass collects the
conversations it would send, one ``chat_json_batch`` call on the real backend answers them all (each
distinct conversation once: errors with the same classes often share a hypothesis), the second pass reads
the answers back in order. Any other deriver (structured answers, keywords: no backend) is
called per error.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from nemo_train.backends.messages import to_openai_messages
from nemo_train.nemo.benchmark import ErrorSample
from nemo_train.nemo.interventions import CounterfactualScorer, Trial


class _RequestCollector:
    """Stands in for a deriver's backend: records ``chat_json_batch`` requests, or answers them from
    replies obtained beforehand (in the order they were recorded)."""

    def __init__(self, replies: list[list[dict | None]] | None = None) -> None:
        self.conversations: list[list[dict]] = []
        self.options: list[str] = []
        self.replies = None if replies is None else iter(replies)

    def chat_json_batch(self, conversations: list[list[dict]], **options: Any) -> list[list[dict | None]]:
        if self.replies is not None:
            return [next(self.replies) for _ in conversations]
        self.conversations.extend(conversations)
        self.options.extend([json.dumps(options, sort_keys=True, default=str)] * len(conversations))
        return [[None] for _ in conversations]


def _collects_requests(deriver) -> bool:
    return callable(getattr(getattr(deriver, "backend", None), "chat_json_batch", None))


def derive_many(
    deriver, samples: Sequence[ErrorSample], hypotheses: Sequence[Sequence[str]], class_names: Sequence[str]
) -> list[list[Any]]:
    """The instructions of every error's hypotheses (``None`` where underivable), one list per error."""
    batch = getattr(deriver, "derive_batch", None)
    if batch is not None:
        return [list(found) for found in batch(list(samples), [list(h) for h in hypotheses], class_names)]
    asked = [(s, list(h)) for s, h in zip(samples, hypotheses) if h]
    if not _collects_requests(deriver) or len(asked) <= 1:
        return [deriver.derive(s, list(h), class_names) if h else [] for s, h in zip(samples, hypotheses)]
    collector = _RequestCollector()
    recording = copy.copy(deriver)
    recording.backend = collector
    for sample, found in asked:
        recording.derive(sample, found, class_names)
    # identical requests (the same hypothesis of errors with the same classes) are asked once
    keys = [
        json.dumps([to_openai_messages(c), o], sort_keys=True)
        for c, o in zip(collector.conversations, collector.options)
    ]
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    unique = sorted(set(first.values()))
    answers: dict[int, list[dict | None]] = {}
    for options in dict.fromkeys(collector.options[i] for i in unique):  # one call per sampling (derivers use one)
        rows = [i for i in unique if collector.options[i] == options]
        answered = deriver.backend.chat_json_batch([collector.conversations[i] for i in rows], **json.loads(options))
        answers.update(zip(rows, answered))
    replies = [answers[first[key]] for key in keys]
    replaying = copy.copy(deriver)
    replaying.backend = _RequestCollector(replies)
    return [replaying.derive(s, list(h), class_names) if h else [] for s, h in zip(samples, hypotheses)]


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


def score_many(
    scorer: CounterfactualScorer,
    samples: Sequence[ErrorSample],
    hypotheses: Sequence[Sequence[str]],
    class_names: Sequence[str],
) -> list[list[Trial]]:
    """:meth:`CounterfactualScorer.score` of each error's hypotheses, their edits derived in one round."""
    fixed = with_derived_edits(scorer, samples, hypotheses, class_names)
    return [fixed.score(s, list(h), class_names) for s, h in zip(samples, hypotheses)]
