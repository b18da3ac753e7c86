"""Summarisers: turn a list of observations into a short explanation (Summarization), and refine an
explanation from new results (Optimization's feedback / update step).

:class:`LLMSummarizer` prompts a language model (JSON output). :class:`TreeSummarizer` is the embedded
default, a closed-vocabulary stand-in that is not a language model: a shallow scikit-learn decision
tree fitted on the condition attributes to the sign of Diff_Model, whose leaves are written out as
sentences ("Model B is better than Model A for digits 0, 1, 2, 3 and 4, colour other than red.").
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from nemo_train.backends import BackendError, ChatBackend, user_message
from nemo_train.differences import prompts
from nemo_train.differences.conditions import AttributeSpace, ConditionSpace
from nemo_train.differences.diff_model import Observation
from nemo_train.differences.failures import UNREADABLE
from nemo_train.errors import UserInputError

log = logging.getLogger(__name__)


def format_observations(observations: Sequence[Observation], space: ConditionSpace) -> str:
    """One line per observation: ``<condition>: Model A better (+85%)`` (the Raw Differences explanation)."""
    lines = []
    for o in observations:
        gap = round(100 * o.diff)
        verdict = "Model A better" if gap > 0 else "Model B better" if gap < 0 else "no difference"
        lines.append(f"{space.describe(o.condition)}: {verdict} ({gap:+d}%)")
    return "\n".join(lines)


class Summarizer(ABC):
    """Summarization (:meth:`summarize`) and the update step of Optimization (:meth:`update`).

    A language-model summariser counts its ``requests`` and the ``failures`` among them (the request failed for
    good, or its reply held no explanation), keeping the first reason in ``first_error``: the run stores and
    reports them (:func:`nemo_train.differences.failures.part_failures`).
    """

    label = "summarizer"
    requests, failures, first_error = 0, 0, ""

    def _failed(self, reason: str) -> None:
        self.failures += 1
        self.first_error = self.first_error or reason

    def bind(self, space: ConditionSpace, task: str) -> None:
        self.space, self.task = space, task

    @abstractmethod
    def summarize(self, observations: Sequence[Observation], seed: int = 0) -> str:
        """A short explanation of ``observations``."""

    @abstractmethod
    def update(
        self,
        explanation: str,
        observations: Sequence[Observation],
        new: Sequence[Observation],
        before: dict[str, float],
        after: dict[str, float],
        seed: int = 0,
    ) -> tuple[str, str]:
        """(feedback, updated explanation) given all ``observations``, the ``new`` ones and the metrics
        ``before`` and ``after`` the new results."""


class LLMSummarizer(Summarizer):
    """A language model writes and refines the explanation (temperature 1 by default, as in the paper).

    Args:
        backend: chat backend (e.g. vLLM serving Llama-3.1-8B or Phi-4).
        temperature, max_tokens: generation settings.
    """

    def __init__(self, backend: ChatBackend, temperature: float = 1.0, max_tokens: int = 400) -> None:
        self.backend, self.temperature, self.max_tokens = backend, temperature, max_tokens
        self.label = f"LLM {backend.model}"
        self.requests, self.failures, self.first_error = 0, 0, ""

    def _explanation(self, prompt: str, seed: int) -> tuple[dict, str]:
        """The JSON reply and its explanation; ``""`` for a request that failed for good or a reply without one
        (counted in :attr:`failures`)."""
        self.requests += 1
        try:
            reply = self.backend.chat_json(
                [user_message(prompt)], temperature=self.temperature, max_tokens=self.max_tokens, seed=seed
            )[0]
        except BackendError as err:
            log.warning("summariser request failed for good: %s", err)
            self._failed(" ".join(str(err).split())[:200])
            return {}, ""
        text = str(reply.get("explanation", "")).strip() if isinstance(reply, dict) else ""
        if not text:
            self._failed(UNREADABLE if reply is None else "a JSON reply without an explanation")
        return (reply if isinstance(reply, dict) else {}), text

    def summarize(self, observations, seed=0):
        prompt = prompts.SUMMARIZE.format(
            task=self.task, rules=prompts.STYLE_RULES, results=format_observations(observations, self.space)
        )
        return self._explanation(prompt, seed)[1]

    def update(self, explanation, observations, new, before, after, seed=0):
        prompt = prompts.UPDATE.format(
            task=self.task,
            definitions=prompts.METRIC_DEFINITIONS,
            rules=prompts.STYLE_RULES,
            explanation=explanation,
            before=json.dumps(before),
            results=format_observations(new, self.space),
            after=json.dumps(after),
        )
        reply, text = self._explanation(prompt, seed)
        if not text:  # a failed request keeps the old explanation (counted)
            return "", explanation
        return str(reply.get("feedback", "")), text


class TreeSummarizer(Summarizer):
    """Decision-tree rule list (closed-vocabulary stand-in for the summariser LLM, not a model).

    Args:
        max_leaves: leaves of the tree fitted by :meth:`summarize`; :meth:`update` draws from
            ``2 .. 2 * max_leaves`` so candidates differ.
        threshold: |Diff_Model| at or below which a condition counts as "no difference".
        min_samples_leaf: smallest leaf.
    """

    label = "decision-tree rules (closed-vocabulary stand-in, not an LLM)"

    def __init__(self, max_leaves: int = 6, threshold: float = 0.1, min_samples_leaf: int = 2) -> None:
        self.max_leaves, self.threshold, self.min_samples_leaf = max_leaves, threshold, min_samples_leaf

    def bind(self, space, task):
        if not isinstance(space, AttributeSpace):
            raise UserInputError("the decision-tree summariser needs attribute conditions; configure an LLMSummarizer")
        super().bind(space, task)
        self.columns: list[tuple[str, object]] = []  # (attribute, None for ordinal | one-hot value)
        for a in space.attributes:
            self.columns += [(a.name, None)] if a.ordinal else [(a.name, v) for v in a.values]

    def _features(self, observations: Sequence[Observation]) -> np.ndarray:
        return np.array(
            [
                [
                    float(o.condition.values[n]) if v is None else float(o.condition.values[n] == v)
                    for n, v in self.columns
                ]
                for o in observations
            ]
        )

    def fit_text(self, observations: Sequence[Observation], leaves: int, seed: int) -> str:
        diffs = np.array([o.diff for o in observations])
        target = np.where(diffs > self.threshold, 1, np.where(diffs < -self.threshold, -1, 0))
        if len(set(target)) < 2:
            return "Model A and Model B perform the same on every condition tested."
        tree = DecisionTreeClassifier(
            max_leaf_nodes=max(2, leaves), min_samples_leaf=self.min_samples_leaf, random_state=seed
        ).fit(self._features(observations), target)
        return " ".join(sentence for _, sentence in sorted(self._leaf_sentences(tree), key=lambda t: -t[0]))

    def _leaf_sentences(self, tree: DecisionTreeClassifier) -> list[tuple[int, str]]:
        t = tree.tree_
        out: list[tuple[int, str]] = []

        def walk(node: int, allowed: dict[str, set], excluded: dict[str, set]) -> None:
            if t.children_left[node] == -1:
                label = int(tree.classes_[int(np.argmax(t.value[node][0]))])
                if label != 0:
                    out.append((int(t.n_node_samples[node]), self._sentence(label, allowed, excluded)))
                return
            name, value = self.columns[t.feature[node]]
            thr = t.threshold[node]
            attribute = self.space.by_name[name]
            left_a, right_a = dict(allowed), dict(allowed)
            left_e, right_e = dict(excluded), dict(excluded)
            if value is None:
                current = allowed.get(name, set(attribute.values))
                left_a[name] = {v for v in current if v <= thr}
                right_a[name] = {v for v in current if v > thr}
            else:  # left: attribute != value, right: attribute == value
                left_e[name] = excluded.get(name, set()) | {value}
                right_a[name] = {value}
            walk(t.children_left[node], left_a, left_e)
            walk(t.children_right[node], right_a, right_e)

        walk(0, {}, {})
        return out

    def _sentence(self, label: int, allowed: dict[str, set], excluded: dict[str, set]) -> str:
        parts = []
        for a in self.space.attributes:
            values = allowed.get(a.name)
            if values is not None and set(values) != set(a.values):
                ordered = [v for v in a.values if v in values]
                if a.ordinal and a.unit:
                    parts.append(f"{a.noun}s from {ordered[0]} to {ordered[-1]} {a.unit}")
                elif a.ordinal:
                    parts.append(f"{a.noun}s {_join(ordered, 'and')}")
                else:
                    parts.append(f"{a.noun} {_join(ordered, 'or')}")
            elif excluded.get(a.name):
                remaining = [v for v in a.values if v not in excluded[a.name]]
                if len(remaining) == 1:  # "material other than metal" is "material rubber"
                    parts.append(f"{a.noun} {remaining[0]}")
                else:
                    parts.append(f"{a.noun} other than {_join([v for v in a.values if v in excluded[a.name]], 'or')}")
        better, worse = ("A", "B") if label > 0 else ("B", "A")
        return f"Model {better} is better than Model {worse} for {', '.join(parts) or 'all conditions'}."

    def summarize(self, observations, seed=0):
        return self.fit_text(observations, self.max_leaves, seed)

    def update(self, explanation, observations, new, before, after, seed=0):
        leaves = int(np.random.default_rng(seed).integers(2, 2 * self.max_leaves + 1))
        feedback = f"refit on {len(observations)} results with at most {leaves} rules"
        return feedback, self.fit_text(observations, leaves, seed)


def _join(values: Sequence[object], word: str) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} {word} {values[-1]}"
