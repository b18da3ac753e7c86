"""Global explanation (NEMO paper, Sec. 4.2.7): aggregate per-sample explanations into one statement of
the model's dominant failure mode, which can be scored like any explanation (Table 6)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo import prompts
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark


def summarize_explanations(backend, explanations: Sequence[str], max_items: int = 200) -> str:
    """An MLLM's summary of the explanations (``global_explanation`` key of its JSON reply)."""
    items = [e for e in explanations if e][:max_items]
    if not items:
        raise UserInputError("no explanations to summarise into a global explanation")
    text = prompts.GLOBAL_EXPLANATION.format(explanations=prompts.bullet_list(items))
    reply = backend.chat_json([user_message(text)], temperature=0.0)[0] or {}
    summary = reply.get("global_explanation")
    return summary.strip() if isinstance(summary, str) else ""


def summarize_attribute_explanations(
    explanations: Sequence[str], vocabulary: Mapping[str, Sequence], obj: str = "digit", attribute: str = "color"
) -> str:
    """Offline summary for generated data (not a language model): the value of ``attribute`` most often
    named as the contrast (``"... mostly red"``) becomes the global cause. Suits only the attribute-contrast
    wording of :class:`~nemo_train.nemo.methods.scitx.AttributeContrastHypothesizer`."""
    values = [v for v in vocabulary.get(attribute, []) if isinstance(v, str)]
    named = Counter()
    for text in explanations:
        found = re.findall(r"mostly (\w+)", text.lower())
        named.update(v for v in found if v in values)
    if not named:
        return ""
    value, count = named.most_common(1)[0]
    word = {"color": "colour"}.get(attribute, attribute)
    return (
        f"Across {len(explanations)} errors the classifier is misled by the {obj}'s {word}: {count} explanations "
        f"say the misread {obj}s would be recognised if they were {value}."
    )


def summarize_factor_explanations(explanations: Sequence[str], facts) -> str:
    """Offline summary for a generated dataset with a fact sheet (a counting rule, not a language model): the
    factor the explanations name most often (its word, synonyms or values) becomes the global cause. It is not
    told any error's cause."""
    counts = Counter()
    for text in explanations:
        words = set(re.findall(r"[a-z]+", text.lower().split("edit:")[0]))
        for factor in facts.factors:
            names = {factor.word, *factor.synonyms, *(str(v).lower() for v in factor.values if factor.named)}
            if words & {w.lower() for w in names}:
                counts[factor.word] += 1
    if not counts:
        return ""
    word = counts.most_common(1)[0][0]  # no counts in the sentence: a number would read as a claim about a class
    return f"Across these errors the classifier is most often misled by the {facts.object_word}'s {word}."


class GlobalExplanation:
    """Scores one fixed global explanation on every error (the "+ Global" row of Table 6)."""

    def __init__(self, text: str) -> None:
        if not text:
            raise UserInputError("the global explanation is empty")
        self.text = text
        self.name = "Global"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return Explanation(self.text, [self.text])
