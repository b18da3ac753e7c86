"""Evaluators: read an explanation and say, per condition, which model is better (Diff_LLM in {1, -1, 0}).

:class:`LLMEvaluator` asks a language model through a project backend (any OpenAI-compatible
endpoint; replies cached, failures recorded and answered "cannot be determined").
:class:`KeywordEvaluator` is the embedded default: a closed-vocabulary stand-in, not a model, that
reads controlled wording (see :mod:`nemo_train.differences.reader`).
"""

from __future__ import annotations

import functools
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from nemo_train.backends import BackendError, ChatBackend, user_message
from nemo_train.differences import prompts
from nemo_train.differences.conditions import AttributeSpace, Condition, ConditionSpace
from nemo_train.differences.reader import predict_difference, read_explanation
from nemo_train.errors import UserInputError

log = logging.getLogger(__name__)


class EvaluatorFailed(UserInputError):
    """The evaluator's language model failed for good (after its retries): the run has no valid scores."""


class Evaluator(ABC):
    """Answers (explanation, condition) questions with +1 (A better), -1 (B better) or 0."""

    #: name shown in tables
    label: str = "evaluator"

    def __init__(self) -> None:
        self.space: ConditionSpace | None = None
        self.task = ""
        self.questions = 0
        self.failures = 0

    def check_answered(self) -> None:
        """Raise when an answer is missing because a request failed (a language-model evaluator)."""

    def bind(self, space: ConditionSpace, task: str) -> None:
        """Tell the evaluator the condition vocabulary and the models' task."""
        self.space, self.task = space, task

    @abstractmethod
    def answer(self, pairs: Sequence[tuple[str, Condition]]) -> list[int]:
        """Diff_LLM for each (explanation, condition) pair."""


class KeywordEvaluator(Evaluator):
    """Closed-vocabulary stand-in for the evaluator language model (reads model names, direction
    words, attribute values and negations; see :func:`read_explanation`)."""

    label = "keyword reader (closed-vocabulary stand-in, not an LLM)"

    def bind(self, space: ConditionSpace, task: str) -> None:
        if not isinstance(space, AttributeSpace):
            raise UserInputError(
                "the keyword evaluator reads attribute conditions only; configure an LLMEvaluator for free-text conditions"
            )
        super().bind(space, task)
        self._clauses = functools.lru_cache(maxsize=4096)(lambda text: read_explanation(text, space))

    def answer(self, pairs):
        self.questions += len(pairs)
        return [predict_difference(self._clauses(text), condition) for text, condition in pairs]


_OPTION = re.compile(r"\[?\s*([123])\s*\]|\b(model\s*a|model\s*b|cannot be determined)\b", re.IGNORECASE)
_VALUE = {"1": 1, "2": -1, "3": 0, "model a": 1, "model b": -1, "cannot be determined": 0}


def parse_option(reply: str) -> int | None:
    """+1 / -1 / 0 from a reply choosing "[1] Model A", "[2] Model B" or "[3] Cannot be determined"."""
    for match in _OPTION.finditer(reply or ""):
        key = (match.group(1) or re.sub(r"\s+", " ", match.group(2))).lower().replace("modela", "model a")
        if key in _VALUE:
            return _VALUE[key]
    return None


class LLMEvaluator(Evaluator):
    """An evaluator language model behind a project backend (deterministic: temperature 0).

    Args:
        backend: the chat backend (e.g. ``OpenAICompatibleBackend`` serving GPT-5-mini).
        in_context_example: the one worked example shown before each question; ``None`` uses a
            generic example about two animal classifiers.
        max_tokens: reply budget.
    """

    def __init__(self, backend: ChatBackend, in_context_example: str | None = None, max_tokens: int = 32) -> None:
        super().__init__()
        self.backend, self.max_tokens = backend, max_tokens
        self.example = in_context_example or (
            "Explanation: Model A is better than Model B on photos taken at night; Model B is better in daylight.\n"
            "Question: Which model performs better on images with this condition: a cat at night?\n"
            "Answer: [1] Model A"
        )
        self.label = f"LLM {backend.model}"
        self.backend_failures, self.last_error = 0, ""

    def prompt(self, explanation: str, condition: Condition) -> str:
        return prompts.EVALUATOR.format(
            task=self.task,
            example=self.example,
            explanation=explanation,
            condition=self.space.describe(condition),
        )

    def _ask(self, messages) -> str | None:
        try:
            return self.backend.chat(messages, temperature=0.0, max_tokens=self.max_tokens)[0]
        except BackendError as err:
            log.warning("evaluator request failed for good: %s", err)
            self.backend_failures, self.last_error = self.backend_failures + 1, str(err)
            return None

    def check_answered(self) -> None:
        """Raise :class:`EvaluatorFailed` when a request failed for good: a score built on answers that never
        came ("cannot be determined" in their place) would look like a real 0."""
        if self.backend_failures:
            raise EvaluatorFailed(
                f"the evaluator {self.backend.model!r} failed for good on {self.backend_failures} of {self.questions} "
                f"questions ({self.last_error}); no scores were written; rerun when the endpoint answers "
                "(the answers received are cached)"
            )

    def answer(self, pairs):
        self.questions += len(pairs)
        conversations = [[user_message(self.prompt(text, c))] for text, c in pairs]
        try:
            replies = [
                r[0] for r in self.backend.chat_batch(conversations, temperature=0.0, max_tokens=self.max_tokens)
            ]
        except BackendError:
            replies = [self._ask(messages) for messages in conversations]
            if all(reply is None for reply in replies):  # the endpoint is down: stop before asking thousands more
                self.check_answered()
        answers = []
        for reply in replies:
            value = parse_option(reply) if reply is not None else None
            if value is None:
                self.failures += 1
            answers.append(0 if value is None else value)
        return answers
