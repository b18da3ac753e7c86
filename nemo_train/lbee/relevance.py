"""Image-sentence relevance ``Gamma(x, s)``: from ground-truth attributes, or VQA pseudo ground truth.

VQA: each sentence becomes a yes/no question, asked about each image to one or more multimodal chat
backends; an image counts as described only when every backend answers yes (AND, which the reference
study found the most accurate combination of two models). A reply that is neither yes nor no counts
as no and is tallied in :attr:`VQARelevance.malformed`. Backends cache their replies, so a rerun asks
nothing twice. A question whose request fails for good is recorded, not raised: every other question is
still asked (a backend whose whole batch of questions fails is asked no more), then the failures are one
:class:`~nemo_train.errors.UserInputError`; a rerun asks only what has no cached answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from nemo_train.backends import BackendError, ChatBackend, user_message
from nemo_train.errors import UserInputError
from nemo_train.lbee.sentences import SentenceSet, reply_note

QUESTION = "Does this image match the description \"{sentence}\"? Reply simply with 'yes' or 'no'."
#: questions asked at once (at least twice the backend's concurrency); a batch that fails whole stops the backend
BATCH = 16
_ANSWER = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def question_for(sentence: str) -> str:
    """The yes/no question asked for ``sentence``."""
    return QUESTION.format(sentence=sentence.strip().rstrip("."))


def parse_yes_no(reply: str) -> bool | None:
    """``True`` / ``False`` for a reply starting with yes / no (any case, punctuation), else ``None``."""
    match = _ANSWER.match(reply or "")
    return None if match is None else match.group(1).lower() == "yes"


class AttributeRelevance:
    """``Gamma`` from the attribute conditions of a ground-truth sentence set."""

    def __call__(self, sentences: SentenceSet, images: torch.Tensor, attrs: dict[str, torch.Tensor]) -> torch.Tensor:
        return sentences.relevance(attrs)


class VQARelevance:
    """``Gamma`` from yes/no answers of one or more multimodal backends, combined with AND.

    Args:
        backends: chat backends that accept images (e.g. two OpenAI-compatible VLM endpoints).
        max_tokens: reply budget (a yes/no needs a few tokens).
    """

    def __init__(self, backends: Sequence[ChatBackend], max_tokens: int = 8) -> None:
        # an empty list is refused by check_backends (called by lbee before any work, and before answering): an
        # error raised here would reach the command line inside the config parser's list of every type it tried
        self.backends, self.max_tokens = list(backends), max_tokens
        self.malformed = 0
        #: per backend model: (questions failed, questions not asked, first error)
        self.failures: dict[str, tuple[int, int, str]] = {}

    def check_backends(self) -> None:
        """A one-line error when no backend is given."""
        if not self.backends:
            raise UserInputError(
                "relevance.init_args.backends is empty; VQA relevance needs at least one multimodal chat backend "
                "(e.g. an OpenAICompatibleBackend)"
            )

    def _ask(self, backend: ChatBackend, conversations: list) -> list[str | None]:
        """Each conversation's reply, ``None`` where its request failed for good or was not asked (recorded in
        :attr:`failures`); after a batch whose every request failed the backend is asked no more."""

        def one(conversation) -> str | BackendError:
            try:
                return backend.chat(conversation, temperature=0.0, max_tokens=self.max_tokens)[0]
            except BackendError as err:
                return err

        replies: list[str | None] = []
        failed, first, size = 0, "", max(BATCH, 2 * backend.concurrency)
        with ThreadPoolExecutor(max_workers=backend.concurrency) as pool:
            for start in range(0, len(conversations), size):
                got = list(pool.map(one, conversations[start : start + size]))
                errors = [r for r in got if isinstance(r, BackendError)]
                failed, first = failed + len(errors), first or (str(errors[0]) if errors else "")
                replies += [None if isinstance(r, BackendError) else r for r in got]
                if errors and len(errors) == len(got):
                    break
        skipped = len(conversations) - len(replies)
        if failed:
            self.failures[backend.model] = (failed, skipped, first)
        return replies + [None] * skipped

    def answers(self, backend: ChatBackend, images: torch.Tensor, texts: Sequence[str]) -> torch.Tensor:
        """``bool[M, N]``: the backend's yes answers (malformed replies count as no; failed requests are
        recorded in :attr:`failures` and count as no until :meth:`check_answered`)."""
        questions = [question_for(t) for t in texts]
        conversations = [[user_message(q, [image])] for image in images for q in questions]
        replies = self._ask(backend, conversations)
        parsed = [None if r is None else parse_yes_no(r) for r in replies]
        self.malformed += sum(p is None for r, p in zip(replies, parsed) if r is not None)
        return torch.tensor([bool(p) for p in parsed], dtype=torch.bool).view(len(images), len(texts))

    def check_answered(self) -> None:
        """One :class:`UserInputError` for the questions that got no answer (never scored as "no")."""
        if not self.failures:
            return
        by_model = {b.model: b for b in self.backends}
        parts = [
            f"{model!r} failed for good on {failed} question(s)"
            + (f" and was not asked {skipped} more after a whole batch failed" if skipped else "")
            + f" ({first})"
            for model, (failed, skipped, first) in self.failures.items()
        ]
        raise UserInputError(f"the VQA backend {'; '.join(parts)}; {reply_note(by_model[next(iter(self.failures))])}")

    def __call__(self, sentences: SentenceSet, images: torch.Tensor, attrs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``Gamma``: attribute conditions where a sentence has them, the backends' AND elsewhere."""
        self.check_backends()
        known = torch.tensor(sentences.known(), dtype=torch.bool)
        out = torch.ones(len(images), len(sentences), dtype=torch.bool)
        if known.any():
            subset = SentenceSet(
                [t for t, k in zip(sentences.texts, known) if k], [c for c in sentences.conditions if c is not None]
            )
            out[:, known] = subset.relevance(attrs)
        asked = [t for t, k in zip(sentences.texts, known) if not k]
        if asked:
            for backend in self.backends:
                out[:, ~known] &= self.answers(backend, images, asked)
            self.check_answered()
        return out


Relevance = AttributeRelevance | VQARelevance
