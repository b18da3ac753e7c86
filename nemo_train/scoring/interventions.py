"""Counterfactual interventions: derive an edit from an explanation, apply it, measure CEI.

CEI (NEMO paper, Sec. 3.3) of an explanation ``e`` for an error ``(x, y, y_hat)`` is
``100 * (P(y | s_e) - P(y | s_o))``: ``s_o`` is the original input, ``s_e`` its counterfactual built
from ``e`` alone. Three steps, each behind a small interface:

1. **Derivation** (explanation -> instruction): :class:`LLMInstructionDeriver` (an MLLM writes an
   editing instruction or a rewritten zero-shot prompt, App. A.3 structure), :class:`LLMAttributeDeriver`
   (an MLLM picks ``{"attribute", "value"}`` from a generator's vocabulary) and
   :class:`KeywordAttributeDeriver`, the offline deriver for closed-vocabulary synthetic data: a rule-based
   parser that looks for attribute words (``colour``, ``red``, ``rotated`` ...) in the explanation.
2. **Intervention**: an image editor (:class:`ExactAttributeEditor` re-renders a synthetic image with one
   attribute changed; :class:`~nemo_train.scoring.editing.DiffusersEditor` runs an instruction-following
   diffusion editor) or, for zero-shot targets, a prompt swap.
3. **Estimation**: :class:`CounterfactualScorer` classifies the original and all ``M`` counterfactuals of
   one error in a single batch and returns one :class:`Trial` per explanation
   (:func:`~nemo_train.scoring.batched_scoring.score_many` edits and classifies the errors of a chunk together).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from datamodules.fact_sheets import DEFAULT_EDITABLE, FACTOR_STEMS, NEUTRAL_VALUES
from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.metrics.nemo import cei_points
from nemo_train.scoring import edit_prompts
from nemo_train.scoring.benchmark import ErrorSample
from nemo_train.scoring.structured import parse_attribute_edit, split_answer

Instruction = Any  # str (edit / prompt) or {"attribute": str, "value": ...}


# --------------------------------------------------------------------------- derivation
class Deriver(Protocol):
    """Turns explanations into interventions (``None`` where no intervention can be derived)."""

    def derive(
        self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]
    ) -> list[Instruction | None]: ...


class KeywordAttributeDeriver:
    """Offline rule-based deriver for closed-vocabulary synthetic datasets (CMNIST, CLEVR).

    It is *not* a language model: it scans the explanation for the words of each editable attribute
    (the word beginnings the fact sheets give the factor, :data:`~datamodules.fact_sheets.FACTOR_STEMS`, else
    its name, and its vocabulary values, e.g. colour names), picks the attribute mentioned most (ties: first
    mentioned), and sets it to the last vocabulary value the explanation names that differs from the image's
    current value; with no such value it uses the factor's neutral value (the sheets'
    :data:`~datamodules.fact_sheets.NEUTRAL_VALUES`, e.g. ``angle -> 0``: upright) or gives up (``None``). It
    suits only explanations phrased in the generator's vocabulary.

    Args:
        vocabulary: ``renderer.attributes`` (name -> allowed values; string values are stored as indices).
        editable: attributes it may change (the class attribute, e.g. ``digit``, must not be listed).
        neutral: fallback value per attribute when the explanation names no other value (default the sheets').
        keywords: word beginnings per attribute (default the sheets' stems).
    """

    def __init__(
        self,
        vocabulary: Mapping[str, Sequence],
        editable: Sequence[str] = DEFAULT_EDITABLE,
        neutral: Mapping[str, Any] | None = None,
        keywords: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        unknown = [a for a in editable if a not in vocabulary]
        if unknown:
            raise UserInputError(
                f"editable attribute(s) {unknown} not in the generator vocabulary {sorted(vocabulary)}"
            )
        self.vocabulary = {k: list(v) for k, v in vocabulary.items()}
        self.editable = list(editable)
        self.neutral = dict(NEUTRAL_VALUES if neutral is None else neutral)
        self.keywords = {a: tuple((keywords or FACTOR_STEMS).get(a, (a,))) for a in self.editable}

    def _mentions(self, text: str, attribute: str) -> list[int]:
        """Positions where the explanation refers to ``attribute`` (keywords and, for names, its values)."""
        positions = [m.start() for kw in self.keywords[attribute] for m in re.finditer(r"\b" + re.escape(kw), text)]
        values = self.vocabulary[attribute]
        if values and isinstance(values[0], str):
            positions += [m.start() for v in values for m in re.finditer(r"\b" + re.escape(v.lower()) + r"\b", text)]
        return sorted(positions)

    def _target_value(self, text: str, attribute: str, current: Any) -> Any:
        values = self.vocabulary[attribute]
        if values and isinstance(values[0], str):
            found = sorted(
                (m.start(), i)
                for i, v in enumerate(values)
                for m in re.finditer(r"\b" + re.escape(v.lower()) + r"\b", text)
            )
            differing = [i for _, i in found if i != int(current)]
            if differing:
                return differing[-1]
            fallback = self.neutral.get(attribute)
            return (
                None if fallback is None else (values.index(fallback) if isinstance(fallback, str) else int(fallback))
            )
        # numbers count only as "<n> degrees" / "<n>°"; "upright" / "straight" mean 0
        text = text.replace("−", "-")
        found = [
            (m.start(), float(m.group(1)))
            for m in re.finditer(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)\s*(?:degrees?|deg\b|°)", text)
        ]
        found += [(m.start(), 0.0) for m in re.finditer(r"\b(?:upright|straight|level|unrotated)\b", text)]
        numbers = [v for _, v in sorted(found)]
        in_vocab = [n for n in numbers if min(values) <= n <= max(values) and n != float(current)]
        if in_vocab:
            return min(values, key=lambda v: abs(v - in_vocab[-1]))
        return self.neutral.get(attribute)

    def derive_one(self, hypothesis: str, attrs: Mapping[str, Any]) -> dict | None:
        """``{"attribute", "value"}`` for one explanation, or ``None``. An explanation that states its edit
        (``... Edit: style -> solid``) is taken at its word."""
        _, body = split_answer(hypothesis)
        stated = parse_attribute_edit(body, self.vocabulary, self.editable) if body else None
        if stated is not None:
            return stated
        text = hypothesis.lower()
        counts = {a: self._mentions(text, a) for a in self.editable}
        named = [a for a in self.editable if counts[a]]
        if not named:
            return None
        attribute = max(named, key=lambda a: (len(counts[a]), -counts[a][0]))
        value = self._target_value(text, attribute, attrs[attribute])
        if value is None:
            return None
        return {"attribute": attribute, "value": value}

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[dict | None]:
        if sample.attrs is None:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no generator attributes; the keyword deriver needs them"
            )
        return [self.derive_one(h, sample.attrs) for h in hypotheses]


class _LanguageModelDeriver:
    """A deriver that asks a language model once per explanation: :meth:`conversation` writes the
    request, :meth:`parse` reads the reply. :meth:`derive_batch` sends the requests of many errors in one
    ``chat_json_batch`` call, each distinct request once (errors with the same two classes often share a
    hypothesis); :meth:`derive` is the batch of one error."""

    backend: Any

    def conversation(self, sample: ErrorSample, hypothesis: str, class_names: Sequence[str]) -> list[dict]:
        raise NotImplementedError

    def parse(self, reply: dict | None) -> Instruction | None:
        raise NotImplementedError

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list:
        return self.derive_batch([sample], [hypotheses], class_names)[0]

    def derive_batch(
        self, samples: Sequence[ErrorSample], hypotheses: Sequence[Sequence[str]], class_names: Sequence[str]
    ) -> list[list]:
        """One list of instructions (``None`` where underivable) per error, from one batched request."""
        asked = [[self.conversation(s, h, class_names) for h in found] for s, found in zip(samples, hypotheses)]
        keys = [[json.dumps(c, sort_keys=True, default=str) for c in convs] for convs in asked]
        unique: dict[str, list[dict]] = {}
        for convs, row in zip(asked, keys):
            for conv, key in zip(convs, row):
                unique.setdefault(key, conv)
        replies = dict(zip(unique, self.backend.chat_json_batch(list(unique.values())))) if unique else {}
        return [[self.parse(replies[k][0] if replies[k] else None) for k in row] for row in keys]


class LLMInstructionDeriver(_LanguageModelDeriver):
    """An MLLM turns each explanation into an editing instruction (``kind="image"``) or a rewritten
    zero-shot prompt (``kind="prompt"``), following App. A.3 of the NEMO paper (our wording). It sees only
    the explanation, the two class names and (prompt kind) the true class's original prompt, never the image.
    That prompt is ``class_prompts[y]`` when given (a target whose prompts are not a template), else
    ``prompt_template`` filled with the class name."""

    def __init__(
        self,
        backend,
        kind: str = "image",
        template: str | None = None,
        prompt_template: str = "a photo of a {}",
        class_prompts: Sequence[str] | None = None,
    ) -> None:
        if kind not in ("image", "prompt"):
            raise UserInputError(f"intervention kind {kind!r}; expected 'image' or 'prompt'")
        self.backend = backend
        self.kind = kind
        self.template = template or (edit_prompts.EDIT_INSTRUCTION if kind == "image" else edit_prompts.PROMPT_REWRITE)
        self.prompt_template = prompt_template
        self.class_prompts = None if class_prompts is None else list(class_prompts)

    def original_prompt(self, label: int, class_names: Sequence[str]) -> str:
        """The true class's prompt ``s_o`` that the language model rewrites."""
        return self.class_prompts[label] if self.class_prompts else self.prompt_template.format(class_names[label])

    def conversation(self, sample: ErrorSample, hypothesis: str, class_names: Sequence[str]) -> list[dict]:
        text = self.template.format(
            true_name=class_names[sample.label],
            pred_name=class_names[sample.prediction],
            hypothesis=hypothesis,
            original_prompt=self.original_prompt(sample.label, class_names),
        )
        return [user_message(text)]

    def parse(self, reply: dict | None) -> str | None:
        solution = (reply or {}).get("solution")
        return solution.strip() if isinstance(solution, str) and solution.strip() else None


class LLMAttributeDeriver(_LanguageModelDeriver):
    """An MLLM picks the attribute and value an explanation is about, from a generator's vocabulary
    (the language-model counterpart of :class:`KeywordAttributeDeriver`); invalid replies give ``None``."""

    def __init__(self, backend, vocabulary: Mapping[str, Sequence], editable: Sequence[str] = DEFAULT_EDITABLE) -> None:
        self.backend = backend
        self.vocabulary = {k: list(v) for k, v in vocabulary.items()}
        self.editable = list(editable)

    def parse(self, reply: dict | None) -> dict | None:
        if not reply or reply.get("attribute") not in self.editable:
            return None
        values, value = self.vocabulary[reply["attribute"]], reply.get("value")
        if values and isinstance(values[0], str):
            return {"attribute": reply["attribute"], "value": values.index(value)} if value in values else None
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return {"attribute": reply["attribute"], "value": min(values, key=lambda v: abs(v - number))}

    def conversation(self, sample: ErrorSample, hypothesis: str, class_names: Sequence[str]) -> list[dict]:
        vocab = "\n".join(f"- {a}: {', '.join(map(str, self.vocabulary[a]))}" for a in self.editable)
        text = edit_prompts.ATTRIBUTE_INSTRUCTION.format(
            true_name=class_names[sample.label],
            pred_name=class_names[sample.prediction],
            hypothesis=hypothesis,
            vocabulary=vocab,
        )
        return [user_message(text)]


# --------------------------------------------------------------------------- editors
class ImageEditor(Protocol):
    """Applies instructions to one image: ``[M, 3, H, W]``, ``None`` instructions leave the image as is."""

    def edit(self, sample: ErrorSample, instructions: Sequence[Instruction | None]) -> torch.Tensor: ...


class ExactAttributeEditor:
    """Exact counterfactual for generated data: re-render the sample with the named attribute changed.

    ``renderer`` has ``render_batch(**attrs_as_tensors)`` and ``attributes`` (the CMNIST / CLEVR
    renderers in ``datamodules``). All ``M`` edits of a sample are rendered in one ``render_batch`` call.
    ``quantize`` rounds edits to 1/255 steps like the stored ``uint8`` datasets, so an edit that
    changes nothing reproduces the stored image exactly.
    """

    def __init__(self, renderer, quantize: bool = True) -> None:
        self.renderer = renderer
        self.quantize = quantize

    def edit(self, sample: ErrorSample, instructions: Sequence[dict | None]) -> torch.Tensor:
        if sample.attrs is None:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no generator attributes; the exact editor needs them"
            )
        rows = []
        for instruction in instructions:
            attrs = dict(sample.attrs)
            if instruction is not None:
                if instruction["attribute"] not in attrs:
                    raise UserInputError(
                        f"instruction changes {instruction['attribute']!r}; the sample has attributes {sorted(attrs)}"
                    )
                attrs[instruction["attribute"]] = instruction["value"]
            rows.append(attrs)
        batch = {k: torch.tensor([r[k] for r in rows]) for k in rows[0]}
        edited = self.renderer.render_batch(**batch)
        if self.quantize:
            edited = edited.clamp(0, 1).mul(255).round().div(255)
        return torch.where(
            torch.tensor([i is None for i in instructions]).view(-1, 1, 1, 1), sample.image.expand_as(edited), edited
        )


# --------------------------------------------------------------------------- estimation
@dataclass
class Trial:
    """One explanation put through the counterfactual test."""

    hypothesis: str
    instruction: Instruction | None
    p_original: float
    p_edited: float
    edited_image: torch.Tensor | None = field(default=None, repr=False)

    @property
    def cei(self) -> float:
        """CEI in percentage points: ``100 * (P(y|s_e) - P(y|s_o))`` (:func:`~nemo_train.metrics.nemo.cei_points`)."""
        return cei_points(self.p_edited, self.p_original)


class CounterfactualScorer:
    """Derive -> intervene -> estimate, for all explanations of one error at once.

    Args:
        target: the classifier (``predict_proba``; for ``mode="prompt"`` a ``ZeroShotTarget``).
        deriver: explanation -> instruction.
        editor: instruction -> edited image (``mode="image"``); unused for prompt intervention.
        mode: ``"image"`` or ``"prompt"``.
        batched: classify the original and all ``M`` counterfactuals in one forward pass (default);
            ``False`` classifies them one at a time (the reference path of ``scripts/bench_scitx.py``).
    """

    def __init__(
        self, target, deriver: Deriver, editor: ImageEditor | None = None, mode: str = "image", batched: bool = True
    ) -> None:
        if mode not in ("image", "prompt"):
            raise UserInputError(f"intervention mode {mode!r}; expected 'image' or 'prompt'")
        if mode == "image" and editor is None:
            raise UserInputError("image intervention needs an editor (exact editor or a diffusers editor)")
        if mode == "prompt" and not hasattr(target, "proba_with_prompts"):
            raise UserInputError(f"prompt intervention needs a zero-shot target; got {type(target).__name__}")
        self.target, self.deriver, self.editor, self.mode, self.batched = target, deriver, editor, mode, batched

    def score(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[Trial]:
        """One :class:`Trial` per explanation; an underivable explanation gets ``P(y|s_e) = P(y|s_o)`` (CEI 0)."""
        if not hypotheses:
            return []
        instructions = self.deriver.derive(sample, hypotheses, class_names)
        y = sample.label
        if self.mode == "prompt":
            valid = [i for i in instructions if i]
            image = sample.image[None]
            p_o = float(self.target.predict_proba(image)[0, y])
            p_new = self.target.proba_with_prompts(image, y, valid)[0].tolist() if valid else []
            it = iter(p_new)
            return [Trial(h, i, p_o, next(it) if i else p_o) for h, i in zip(hypotheses, instructions)]
        edited = self.editor.edit(sample, instructions).cpu()
        if self.batched:
            probs = self.target.predict_proba(torch.cat([sample.image[None], edited]))[:, y].cpu()
        else:
            probs = torch.stack([self.target.predict_proba(im[None])[0, y].cpu() for im in (sample.image, *edited)])
        return trial_list(hypotheses, instructions, probs, edited)


def trial_list(
    hypotheses: Sequence[str], instructions: Sequence[Instruction | None], probs: torch.Tensor, edited: torch.Tensor
) -> list[Trial]:
    """Trials from ``P(y)`` of the original (``probs[0]``) and of each edit; an underivable explanation
    keeps ``P(y|s_o)`` (CEI 0)."""
    p_o = float(probs[0])
    return [
        Trial(h, i, p_o, float(p) if i is not None else p_o, im)
        for h, i, p, im in zip(hypotheses, instructions, probs[1:], edited)
    ]
