"""What every explanation method returns, and the MLLM call shared by the generating methods."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nemo_train.backends.providers import object_schema
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import Trial


@dataclass
class Explanation:
    """A method's explanation of one error.

    ``text`` is the final explanation; ``candidates`` the hypotheses it was chosen from (with their
    counterfactual trials when the method scored them, so ``trial`` is the selected one); ``details``
    holds method-specific evidence (retrieved captions, the Grad-CAM overlay, the reference image id).
    """

    text: str
    candidates: list[str] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list, repr=False)
    trial: Trial | None = None
    details: dict[str, Any] = field(default_factory=dict, repr=False)


class Method(Protocol):
    """An explanation generator ``g(x, y, y_hat, f)``.

    A method may also define ``explain_batch(samples, benchmark) -> list[Explanation]``, explaining many
    errors with one batched request to its language model (:func:`explain_many` uses it when present).
    """

    name: str

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation: ...


def explain_many(method: Method, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
    """``method``'s explanations of ``samples``, in order: one ``explain_batch`` call where the method has one."""
    batch = getattr(method, "explain_batch", None)
    if batch is not None:
        return list(batch(list(samples), benchmark))
    return [method.explain(sample, benchmark) for sample in samples]


def ask_causes_batch(
    backend,
    conversations: list[list[dict]],
    n: int = 1,
    temperature: float = 0.0,
    key: str = "cause_of_error",
    seed: int | None = None,
) -> list[list[str]]:
    """For each conversation, ``n`` replies as JSON, keeping the non-empty ``key`` strings (duplicates
    dropped). All first replies come from one ``chat_json_batch`` call (a local model generates them in
    batched ``generate`` calls, an endpoint gets them ``concurrency`` at a time)."""
    out: list[list[str]] = []
    schema = object_schema(**{key: "string"})
    for replies in backend.chat_json_batch(conversations, n=n, temperature=temperature, seed=seed, schema=schema):
        causes: list[str] = []
        for reply in replies:
            text = (reply or {}).get(key)
            if isinstance(text, str) and text.strip() and text.strip() not in causes:
                causes.append(text.strip())
        out.append(causes)
    return out
