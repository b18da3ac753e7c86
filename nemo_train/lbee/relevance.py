"""Image-sentence relevance ``Gamma(x, s)``: from ground-truth attributes, or VQA pseudo ground truth.

VQA: each sentence becomes a yes/no question, asked about each image to one or more multimodal chat
backends; an image counts as described only when every backend answers yes (AND, which the reference
study found the most accurate combination of two models). A reply that is neither yes nor no counts
as no and is tallied in :attr:`VQARelevance.malformed`. Backends cache their replies, so a rerun asks
nothing twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from nemo_train.backends import ChatBackend, user_message
from nemo_train.errors import UserInputError
from nemo_train.lbee.sentences import SentenceSet

QUESTION = "Does this image match the description \"{sentence}\"? Reply simply with 'yes' or 'no'."
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
        if not backends:
            raise UserInputError("VQA relevance needs at least one backend")
        self.backends, self.max_tokens = list(backends), max_tokens
        self.malformed = 0

    def answers(self, backend: ChatBackend, images: torch.Tensor, texts: Sequence[str]) -> torch.Tensor:
        """``bool[M, N]``: the backend's yes answers (malformed replies count as no)."""
        questions = [question_for(t) for t in texts]
        conversations = [[user_message(q, [image])] for image in images for q in questions]
        replies = backend.chat_batch(conversations, temperature=0.0, max_tokens=self.max_tokens)
        parsed = [parse_yes_no(r[0]) for r in replies]
        self.malformed += sum(p is None for p in parsed)
        return torch.tensor([bool(p) for p in parsed], dtype=torch.bool).view(len(images), len(texts))

    def __call__(self, sentences: SentenceSet, images: torch.Tensor, attrs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``Gamma``: attribute conditions where a sentence has them, the backends' AND elsewhere."""
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
        return out


Relevance = AttributeRelevance | VQARelevance
