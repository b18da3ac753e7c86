"""How explanations become counterfactuals (the editor part of the counterfactual test), as configurable objects.

* :class:`ExactEdit` — re-render a generated image with the named attribute changed (CMNIST, CLEVR);
* :class:`DiffusersEdit` — an instruction-following diffusers editor (FLUX.1 Kontext, Qwen-Image-Edit-2509,
  InstructPix2Pix) for image-folder benchmarks;
* :class:`PromptEdit` — rewrite the true class's prompt of a zero-shot target (NEMO Eq. 8).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from datamodules.fact_sheets import DEFAULT_EDITABLE
from nemo_train.backends.base import ChatBackend
from nemo_train.errors import UserInputError
from nemo_train.scoring import interventions as iv
from nemo_train.scoring.benchmark import NemoBenchmark
from nemo_train.scoring.editing import DiffusersEditor
from nemo_train.scoring.prompt_rule import CaptionPromptRule
from nemo_train.scoring.text_edits import TextEditDeriver, reader_for


class EditorSpec(ABC):
    """Builds the counterfactual scorer for one benchmark and target."""

    @abstractmethod
    def build_scorer(
        self, benchmark: NemoBenchmark, target, backend: ChatBackend | None, seed: int, batched: bool
    ) -> iv.CounterfactualScorer: ...

    def settings(self) -> dict[str, Any]:
        """What changes the edits (part of every result's settings)."""
        return {"class": type(self).__name__, **vars(self)}

    def offline_note(self, backend: ChatBackend | None) -> str | None:
        """What derives the interventions in place of a language model with this backend (``None``: a model)."""
        return None


class ExactEdit(EditorSpec):
    """Exact re-rendering of generated data (the benchmark's renderer).

    Args:
        deriver: how an explanation becomes an attribute edit: ``keyword`` (offline: the factor the grounded
            judge's parser reads as blamed, set to its training-typical value; an ``Edit:`` line that agrees with
            the sentence gives the value), ``llm`` (the explainer picks attribute and value from the whole
            explanation) or ``auto`` (``llm`` when an explainer is configured).
    """

    def __init__(self, deriver: Literal["auto", "keyword", "llm"] = "auto") -> None:
        self.deriver = deriver

    def offline_note(self, backend: ChatBackend | None) -> str | None:
        if backend is None or self.deriver == "keyword":
            return "edits derived from the sentence by the grounded judge's parser, not a model"
        return None

    def build_scorer(self, benchmark, target, backend, seed, batched):
        if benchmark.renderer is None:
            raise UserInputError(
                f"benchmark {benchmark.name!r} has no renderer; use DiffusersEdit or PromptEdit as the editor"
            )
        editable = (benchmark.cause or {}).get("editable", DEFAULT_EDITABLE)
        if self.deriver == "llm" and backend is None:
            raise UserInputError("ExactEdit(deriver='llm') needs an explainer backend")
        reader = reader_for(benchmark)
        if (backend is None or self.deriver == "keyword") and reader is not None:
            deriver = TextEditDeriver(reader)  # the blamed factor back to its typical value; Edit: lines a hint
        elif backend is None or self.deriver == "keyword":
            deriver = iv.KeywordAttributeDeriver(benchmark.vocabulary, editable=editable)
        else:
            deriver = iv.LLMAttributeDeriver(backend, benchmark.vocabulary, editable=editable)
        return iv.CounterfactualScorer(target, deriver, iv.ExactAttributeEditor(benchmark.renderer), batched=batched)


class DiffusersEdit(EditorSpec):
    """An instruction-following diffusers editor; the explainer writes the edit instruction.

    Args:
        model: hub id or local folder (``black-forest-labs/FLUX.1-Kontext-dev``, ``Qwen/Qwen-Image-Edit-2509``
            (Apache-2.0; its pipeline reads a list of images as several inputs to one edit, so give it
            ``edit_batch_size: 1``), ``timbrooks/instruct-pix2pix``).
        edit_batch_size: edits per pipeline call (the hypotheses of one error and of the other errors of its
            chunk share calls); it bounds memory and leaves the edits as they are (each edit has its own seeded
            generator), so it is not part of the results' settings. size: edit resolution.
        dtype: weights' dtype (default: bfloat16 on GPU, float32 on CPU); device: default cuda if available.
        call_kwargs: extra pipeline arguments (``num_inference_steps``, ``guidance_scale``, ...).
    """

    def __init__(
        self,
        model: str,
        edit_batch_size: int = 8,
        size: int = 512,
        dtype: Literal["float32", "float16", "bfloat16"] | None = None,
        device: str | None = None,
        call_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if edit_batch_size < 1:
            raise UserInputError(f"edit_batch_size={edit_batch_size}; expected at least 1")
        self.model, self.edit_batch_size, self.size = model, edit_batch_size, size
        self.dtype, self.device, self.call_kwargs = dtype, device, call_kwargs

    def settings(self) -> dict[str, Any]:
        settings = super().settings()
        settings.pop("edit_batch_size")  # how many edits share a call does not change them
        return settings

    def editor(self, seed: int) -> DiffusersEditor:
        """The loaded editor (instruction ``i`` of an error seeded with ``seed + i``)."""
        return DiffusersEditor(
            self.model,
            seed=seed,
            batch_size=self.edit_batch_size,
            device=self.device,
            dtype=self.dtype,
            size=self.size,
            call_kwargs=self.call_kwargs,
        )

    def build_scorer(self, benchmark, target, backend, seed, batched):
        if backend is None:
            raise UserInputError(f"benchmark {benchmark.name!r} needs an explainer endpoint to write edit instructions")
        deriver = iv.LLMInstructionDeriver(backend, "image")
        return iv.CounterfactualScorer(target, deriver, self.editor(seed), batched=batched)


class PromptEdit(EditorSpec):
    """Counterfactual prompt intervention for zero-shot targets (NEMO Eq. 8): the true class's prompt is
    rewritten to name the cue the explanation identifies, and ``P(y)`` is read off the new softmax.

    Args:
        deriver: who rewrites the prompt: ``llm`` (the explainer), ``caption_rule`` (offline, generated
            benchmarks only: :class:`~nemo_train.scoring.prompt_rule.CaptionPromptRule` writes the values the
            explanation names in the word order of the small CLIP's training captions; a rule, not a model)
            or ``auto`` (``llm`` when an explainer is configured, else ``caption_rule``).
    """

    def __init__(self, deriver: Literal["auto", "caption_rule", "llm"] = "auto") -> None:
        self.deriver = deriver

    def uses_rule(self, backend: ChatBackend | None) -> bool:
        """Whether the prompts are rewritten by the caption rule (not a model) for this backend."""
        return self.deriver == "caption_rule" or (self.deriver == "auto" and backend is None)

    def offline_note(self, backend: ChatBackend | None) -> str | None:
        return "class prompts rewritten by the caption rule, not a model" if self.uses_rule(backend) else None

    def build_scorer(self, benchmark, target, backend, seed, batched):
        if self.uses_rule(backend):
            if benchmark.vocabulary is None:
                raise UserInputError(
                    f"benchmark {benchmark.name!r} has no generator vocabulary for the caption prompt rule; "
                    "configure an explainer endpoint to rewrite the class prompts"
                )
            deriver = CaptionPromptRule(benchmark.name, benchmark.vocabulary)
        elif backend is None:
            raise UserInputError("PromptEdit(deriver='llm') needs an explainer endpoint to rewrite the class prompt")
        else:
            deriver = iv.LLMInstructionDeriver(
                backend,
                "prompt",
                prompt_template=getattr(target, "template", "a photo of a {}"),
                class_prompts=getattr(target, "prompts", None),
            )
        return iv.CounterfactualScorer(target, deriver, mode="prompt", batched=batched)
