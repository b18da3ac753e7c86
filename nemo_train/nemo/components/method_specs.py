"""Explanation methods as configurable objects; each builds its method(s) for one benchmark and target."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from jsonargparse.typing import PositiveInt

from datamodules.captions import VOCABULARIES
from datamodules.fact_sheets import DEFAULT_EDITABLE, DEFAULT_FACTS
from nemo_train.backends.base import ChatBackend
from nemo_train.errors import UserInputError
from nemo_train.models.specs import check_clip_folder
from nemo_train.models.zero_shot import ZeroShotTarget, tiny_random_clip
from nemo_train.nemo.methods import cam_mllm, change_mllm, error_retrieval, reference, scitx
from nemo_train.nemo.methods.base import Method
from nemo_train.nemo.methods.validation import WithValidation
from nemo_train.scoring.benchmark import SYNTHETIC, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer


@dataclass
class BuildContext:
    """What a method needs: the benchmark, the target, the explainer backend (or ``None``) and the scorer."""

    benchmark: NemoBenchmark
    target: Any
    backend: ChatBackend | None
    scorer: CounterfactualScorer
    #: how the benchmark was drawn (``BenchmarkArgs``: gaps, data options), for a row that draws a split
    benchmark_args: Any = None
    #: the command's seed (a row that draws something derives its draws from it)
    seed: int = 0


class MethodSpec(ABC):
    """A configured explanation method."""

    @abstractmethod
    def build(self, ctx: BuildContext) -> list[Method]:
        """The method objects (a baseline with ``validation`` also gives its "+validation" variant)."""

    def settings(self) -> dict[str, Any]:
        """What changes this method's results (part of every result's settings)."""
        return {"class": type(self).__name__, **vars(self)}


class SciTXMethod(MethodSpec):
    """SciTX: observe ``k`` similar references, hypothesise ``m`` causes, keep the one with the highest CEI.

    Args:
        k: observations; m: hypotheses per error.
        hypotheses: source of hypotheses: ``auto`` (the explainer's JSON replies, or offline the
            attribute-contrast template), ``json``, ``plain`` (one sentence per reply, e.g. the fine-tuned
            tiny explainer) or ``attributes`` (the offline template).
        class_relevance: keep only references of the true or predicted class.
        retrieval: ``nearest`` (the ``k`` nearest of the filtered references, as in the NEMO paper's Alg. 1),
            ``balanced`` (``ceil(k/2)`` from each of the true and the predicted class) or ``auto``: nearest
            for a language model, balanced for the attribute template (it contrasts the error with
            references of the true class and has no hypothesis without them).
    """

    def __init__(
        self,
        k: PositiveInt = 8,
        m: PositiveInt = 3,
        hypotheses: Literal["auto", "json", "plain", "attributes"] = "auto",
        class_relevance: bool = True,
        retrieval: Literal["auto", "nearest", "balanced"] = "auto",
    ) -> None:
        self.k, self.m, self.hypotheses, self.class_relevance = k, m, hypotheses, class_relevance
        self.retrieval = retrieval

    def build(self, ctx: BuildContext) -> list[Method]:
        bench, backend = ctx.benchmark, ctx.backend
        if self.hypotheses == "attributes" or (self.hypotheses == "auto" and backend is None):
            if bench.vocabulary is None:
                raise UserInputError("SciTX without an explainer endpoint works only on generated benchmarks")
            cause = bench.cause or {}
            hyp = scitx.AttributeContrastHypothesizer(
                bench.vocabulary,
                cause.get("editable", DEFAULT_EDITABLE),
                cause.get("object", DEFAULT_FACTS.object_word),
            )
        elif backend is None:
            raise UserInputError(f"SciTX hypotheses={self.hypotheses!r} needs an explainer backend")
        elif self.hypotheses == "plain":
            hyp = scitx.PlainTextHypothesizer(backend)
        else:
            hyp = scitx.MLLMHypothesizer(backend)
        captioner = scitx.MLLMCaptioner(backend) if backend is not None else None
        balanced = None if self.retrieval == "auto" else self.retrieval == "balanced"
        search = {"class_relevance": self.class_relevance, "balanced": balanced}
        return [scitx.SciTX(ctx.target, hyp, ctx.scorer, k=self.k, m=self.m, captioner=captioner, **search)]


class _Baseline(MethodSpec):
    """A baseline; ``validation`` adds its "+validation" variant (``m`` candidates, argmax CEI)."""

    def __init__(self, validation: bool = False, m: PositiveInt = 3) -> None:
        self.validation, self.m = validation, m

    @abstractmethod
    def make(self, ctx: BuildContext) -> Method: ...

    def build(self, ctx: BuildContext) -> list[Method]:
        method = self.make(ctx)
        return [method, WithValidation(method, ctx.scorer, self.m)] if self.validation else [method]


class ErrorRetrievalMethod(_Baseline):
    """ErrorRetrieval: rank a fixed corpus of failure descriptions by CLIP similarity to the error.

    Args:
        clip_model: CLIP hub id or Hugging Face folder, e.g. ``checkpoints/clip_synthetic/hf``, the small
            CLIP that ``nemo-train fit --config configs/clip/synthetic.yaml`` trains on our generators'
            captions; ``None`` uses a random tiny CLIP (chance-level ranking, named so in the table).
        corpus: ``auto``: on a generated benchmark whose captions the space was trained on, pairs of
            caption phrases ranked by the error's direction away from its class
            (:class:`~nemo_train.nemo.methods.error_retrieval.ContrastRetrieval`), elsewhere the generic
            failure sentences; ``generic``: always the generic sentences, ranked by image similarity.
        k: correctly classified references of the true class that the contrast direction averages.
    """

    def __init__(
        self,
        clip_model: str | None = None,
        corpus: Literal["auto", "generic"] = "auto",
        k: PositiveInt = 8,
        validation: bool = False,
        m: PositiveInt = 3,
    ) -> None:
        super().__init__(validation, m)
        self.clip_model, self.corpus, self.k = clip_model, corpus, k

    def settings(self) -> dict[str, Any]:
        # a CLIP folder replaced at the same path ranks otherwise: its digest is part of every result's settings
        return {**super().settings(), **error_retrieval.clip_identity(self.clip_model)}

    def make(self, ctx: BuildContext) -> Method:
        bench = ctx.benchmark
        if not self.clip_model:
            method = error_retrieval.ErrorRetrieval(tiny_random_clip(bench.class_names))
            method.name = "ErrorRetrieval(random CLIP)"
            return method
        check_clip_folder(self.clip_model)
        vocabulary = VOCABULARIES.get(bench.name) if bench.vocabulary is not None else None
        if vocabulary is None or self.corpus == "generic":
            return error_retrieval.ErrorRetrieval(ZeroShotTarget(self.clip_model, bench.class_names))
        class_attribute = SYNTHETIC[bench.name]["facts"].class_attribute
        # class prompts written as the space's training captions ("the digit three", not "a photo of a 3")
        encoder = ZeroShotTarget(self.clip_model, vocabulary.zero_shot_prompts(class_attribute), template="{}")
        return error_retrieval.ContrastRetrieval(
            encoder, error_retrieval.caption_pairs(vocabulary, skip=[class_attribute]), k=self.k
        )


class CamMLLMMethod(_Baseline):
    """CamMLLM: the Grad-CAM overlay of the error described by the explainer."""

    def __init__(self, temperature: float = 0.7, validation: bool = False, m: PositiveInt = 3) -> None:
        super().__init__(validation, m)
        self.temperature = temperature

    def make(self, ctx: BuildContext) -> Method:
        return cam_mllm.CamMLLM(ctx.target, ctx.backend, temperature=self.temperature)


class ChangeMLLMMethod(_Baseline):
    """ChangeMLLM: the error next to its nearest correctly classified reference; the explainer names the change.

    Args:
        reference_class: the nearest correctly classified reference of the true or the predicted class
            (``either``, as in the NEMO paper), or only of the ``true`` / ``predicted`` class.
    """

    def __init__(
        self,
        temperature: float = 0.7,
        reference_class: Literal["either", "true", "predicted"] = "either",
        validation: bool = False,
        m: PositiveInt = 3,
    ) -> None:
        super().__init__(validation, m)
        self.temperature, self.reference_class = temperature, reference_class

    def make(self, ctx: BuildContext) -> Method:
        return change_mllm.ChangeMLLM(
            ctx.target, ctx.backend, temperature=self.temperature, reference_class=self.reference_class
        )


class KnownCauseMethod(MethodSpec):
    """Reference explainer naming the planted bias (generated benchmarks only)."""

    def build(self, ctx: BuildContext) -> list[Method]:
        return [reference.KnownCauseExplainer()]


class DistractorMethod(MethodSpec):
    """Reference explainer naming an irrelevant factor (default: the benchmark's distractor attribute)."""

    def __init__(self, attribute: str | None = None) -> None:
        self.attribute = attribute

    def build(self, ctx: BuildContext) -> list[Method]:
        attribute = self.attribute or (ctx.benchmark.cause or {}).get("distractor", "angle")
        return [reference.DistractorExplainer(attribute)]


def default_methods() -> list[MethodSpec]:
    """SciTX and the three baselines (NEMO Table 1)."""
    return [SciTXMethod(), ErrorRetrievalMethod(), CamMLLMMethod(), ChangeMLLMMethod()]
