"""SciTX: observation, hypothesis, experiment, conclusion (NEMO paper, Sec. 3.2 and Alg. 1).

1. **Observation** — the ``k`` reference images nearest to ``x`` in the target's feature space among
   those the target classifies correctly and whose label is ``y`` or ``y_hat`` (exact top-k by cosine
   on a chunked matmul), passed on as captions, not images (cross-image leakage, Sec. 3.2).
2. **Hypothesis** — ``m`` candidate failure causes from a hypothesizer: an MLLM in a failure-analyst
   role (:class:`MLLMHypothesizer`), or offline, for generated data, :class:`AttributeContrastHypothesizer`.
3. **Experiment** — every hypothesis becomes an intervention; the original and all ``m`` counterfactuals
   are classified in one batch (:class:`~nemo_train.nemo.interventions.CounterfactualScorer`).
4. **Conclusion** — the hypothesis with the largest CEI is the explanation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo import prompts
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.nemo.methods.base import Explanation, ask_causes, select_by_cei
from nemo_train.nemo.retrieval import ReferenceIndex
from nemo_train.vocabulary import BIAS_PROMPT


@dataclass
class Observation:
    """A retrieved reference image: its index in the reference set, label, caption and similarity."""

    index: int
    label: int
    caption: str
    similarity: float
    attrs: dict[str, Any] | None = None


def reference_index(reference: ReferenceSet) -> ReferenceIndex:
    """The reference set's :class:`~nemo_train.nemo.retrieval.ReferenceIndex` of correctly classified
    images (built once, then kept on the reference set)."""
    index = getattr(reference, "_index", None)
    if index is None:
        index = ReferenceIndex(reference.features, reference.labels, reference.correct)
        reference._index = index
    return index


def retrieve_observations(
    sample: ErrorSample,
    query: torch.Tensor,
    reference: ReferenceSet,
    k: int,
    class_relevance: bool = True,
    balanced: bool = False,
) -> list[int]:
    """Indices of the ``k`` nearest correctly classified references, nearest first.

    With ``class_relevance`` only references of class ``y`` or ``y_hat`` count and the ``k`` nearest of
    that filtered set are taken (Alg. 1 of the NEMO paper). ``balanced`` (an option of ours) instead takes
    ``ceil(k/2)`` from each class, so the prompt always has both evidence sets A (``y``) and B (``y_hat``)
    even when the error sits deep inside ``y_hat``'s region of feature space (``k + 1`` for odd ``k``).
    Without class relevance (Table 5 ablation) it is plain top-``k`` over all correct references.
    """
    index = reference_index(reference)
    query = query.reshape(1, -1)
    if not class_relevance:
        return index.search(query, k).as_lists()[0]
    if balanced:
        half = -(-k // 2)
        return [
            i
            for c in (sample.label, sample.prediction)
            for i in index.search(query, half, torch.tensor([[c]])).as_lists()[0]
        ]
    return index.search(query, k, torch.tensor([[sample.label, sample.prediction]])).as_lists()[0]


class Hypothesizer(Protocol):
    """Proposes up to ``m`` failure causes for one error given its observations.

    A hypothesizer may set ``reads_captions = False`` when its question does not show the observations'
    captions (SciTX then does not caption the references for it).
    """

    def hypothesize(
        self, sample: ErrorSample, observations: list[Observation], class_names: Sequence[str], m: int
    ) -> list[str]: ...


class MLLMHypothesizer:
    """An MLLM in a failure-analyst role writes ``m`` hypotheses (``n=m`` samples at ``temperature``)."""

    def __init__(self, backend, temperature: float = 0.7, template: str = prompts.SCITX_HYPOTHESIS) -> None:
        self.backend, self.temperature, self.template = backend, temperature, template

    @property
    def reads_captions(self) -> bool:
        """Whether the question lists the observations' captions (a distilled explainer's question does not)."""
        return any("{" + group + "}" in self.template for group in ("set_a", "set_b", "set_c"))

    def prompt(self, sample: ErrorSample, observations: list[Observation], class_names: Sequence[str]) -> str:
        set_a = [o.caption for o in observations if o.label == sample.label]
        set_b = [o.caption for o in observations if o.label == sample.prediction]
        set_c = [o.caption for o in observations if o.label not in (sample.label, sample.prediction)]
        return self.template.format(
            true_name=class_names[sample.label],
            pred_name=class_names[sample.prediction],
            set_a=prompts.bullet_list(set_a),
            set_b=prompts.bullet_list(set_b),
            set_c=prompts.bullet_list(set_c),
        )

    def hypothesize(self, sample, observations, class_names, m):
        message = user_message(self.prompt(sample, observations, class_names), images=[sample.image])
        return ask_causes(self.backend, [message], n=m, temperature=self.temperature if m > 1 else 0.0)


class PlainTextHypothesizer:
    """A fine-tuned explainer that answers in plain sentences (e.g. the tiny explainer fine-tuned by
    ``nemo_train.explainer``):
    it sees the error image and its own one-sentence question, each of ``m`` sampled replies is a
    hypothesis. It gets no observations (its closed training vocabulary has no place for captions)."""

    reads_captions = False

    def __init__(self, backend, question: str | None = None, temperature: float = 0.7, max_tokens: int = 48) -> None:
        self.backend, self.question, self.temperature, self.max_tokens = (
            backend,
            question or BIAS_PROMPT,
            temperature,
            max_tokens,
        )

    def hypothesize(self, sample, observations, class_names, m):
        replies = self.backend.chat(
            [user_message(self.question, images=[sample.image])],
            n=m,
            temperature=self.temperature if m > 1 else 0.0,
            max_tokens=self.max_tokens,
        )
        return list(dict.fromkeys(r.strip() for r in replies if r and r.strip()))


class AttributeContrastHypothesizer:
    """Offline hypothesizer for generated data (NOT a language model).

    For each editable attribute it compares the error's value with the values of the retrieved
    correctly classified images of the true class and, where they differ, writes a template hypothesis
    naming both values ("The digit is green, while the correctly classified 3s it resembles are
    mostly red ..."). It reads the generator attributes of the error and the observations, so it only
    suits synthetic benchmarks with known attributes; it stands in for the fine-tuned explainer when
    none is configured.
    """

    reads_captions = False  # it reads the observations' generator attributes

    TEMPLATES = {
        "color": "The {obj} is {value}, while the correctly classified {true}s it resembles are mostly {other}; "
        "the classifier seems to tie {value} to classes such as {pred}.",
        "angle": "The {obj} is {value_pose}, whereas the correctly classified {true}s it resembles are mostly {other_pose}; "
        "this tilt may make it look like a {pred}.",
    }

    def __init__(
        self, vocabulary: dict[str, list], attributes: Sequence[str] = ("color", "angle"), obj: str = "digit"
    ) -> None:
        self.vocabulary, self.attributes, self.obj = vocabulary, list(attributes), obj

    def _name(self, attribute: str, value: Any) -> str:
        values = self.vocabulary[attribute]
        return values[int(value)] if values and isinstance(values[0], str) else str(value)

    @staticmethod
    def _pose(angle: Any) -> str:
        return "upright (0 degrees)" if int(angle) == 0 else f"rotated {int(angle)} degrees"

    def hypothesize(self, sample, observations, class_names, m):
        if sample.attrs is None:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no generator attributes; the offline hypothesizer needs them"
            )
        same_class = [o.attrs for o in observations if o.label == sample.label and o.attrs]
        out = []
        for attribute in self.attributes:
            current = sample.attrs[attribute]
            counts = Counter(a[attribute] for a in same_class if a[attribute] != current)
            if not counts:
                continue
            other = counts.most_common(1)[0][0]
            text = self.TEMPLATES.get(
                attribute,
                "The {obj}'s {attribute} is {value}, whereas the correctly classified {true}s it resembles "
                "are mostly {other}; this {attribute} may make it look like a {pred}.",
            )
            out.append(
                text.format(
                    obj=self.obj,
                    attribute=attribute,
                    true=class_names[sample.label],
                    pred=class_names[sample.prediction],
                    value=self._name(attribute, current),
                    other=self._name(attribute, other),
                    value_pose=self._pose(current) if attribute == "angle" else "",
                    other_pose=self._pose(other) if attribute == "angle" else "",
                )
            )
        return out[:m]


class SciTX:
    """SciTX explanation method (Alg. 1).

    Args:
        target: the classifier ``f`` (features for retrieval).
        hypothesizer: proposes the ``m`` candidate causes.
        scorer: the counterfactual test (derivation, intervention, batched classification).
        k: number of observations; m: number of hypotheses.
        captioner: ``image -> caption`` for references without a stored caption (an MLLM captioner).
        class_relevance: keep only references of class ``y`` or ``y_hat`` (Table 5 ablation when False).
        balanced: take ``ceil(k/2)`` references from each of ``y`` and ``y_hat`` instead of the ``k`` nearest.
    """

    name = "SciTX"

    def __init__(
        self,
        target,
        hypothesizer: Hypothesizer,
        scorer,
        k: int = 8,
        m: int = 3,
        captioner=None,
        class_relevance: bool = True,
        balanced: bool = False,
    ) -> None:
        if k < 1 or m < 1:
            raise UserInputError(f"SciTX needs k >= 1 and m >= 1; got k={k}, m={m}")
        self.target, self.hypothesizer, self.scorer = target, hypothesizer, scorer
        self.k, self.m, self.captioner, self.class_relevance = k, m, captioner, class_relevance
        self.balanced = balanced

    def observe(self, sample: ErrorSample, benchmark: NemoBenchmark) -> list[Observation]:
        """Stage 1: retrieve and caption the ``k`` observations."""
        ref = benchmark.reference
        query = self.target.features(sample.image[None])[0].cpu()
        indices = retrieve_observations(sample, query, ref, self.k, self.class_relevance, self.balanced)
        sims = (
            F.normalize(ref.features[indices].float(), dim=-1) @ F.normalize(query.float(), dim=0)
            if indices
            else torch.empty(0)
        )
        out = []
        reads_captions = getattr(self.hypothesizer, "reads_captions", True)
        for i, s in zip(indices, sims.tolist()):
            if ref.captions is not None:
                caption = ref.captions[i]
            elif not reads_captions:
                caption = ""
            elif self.captioner is not None:
                caption = self.captioner(ref.image(i))
            else:
                raise UserInputError("the reference set has no captions; configure an MLLM captioner for SciTX")
            out.append(Observation(i, int(ref.labels[i]), caption, float(s), ref.attrs[i] if ref.attrs else None))
        return out

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        observations = self.observe(sample, benchmark)
        hypotheses = self.hypothesizer.hypothesize(sample, observations, benchmark.class_names, self.m)
        best, trials = select_by_cei(self.scorer, sample, hypotheses, benchmark.class_names)
        text = best.hypothesis if best is not None else ""
        return Explanation(text, list(hypotheses), trials, best, {"observations": [o.caption for o in observations]})


class MLLMCaptioner:
    """Caption one image with an MLLM (cached by the backend), for references without a caption."""

    PROMPT = "Describe this image in one short sentence: the main object, its appearance and its surroundings."

    def __init__(self, backend) -> None:
        self.backend = backend

    def __call__(self, image: torch.Tensor) -> str:
        return self.backend.chat([user_message(self.PROMPT, images=[image])], temperature=0.0)[0].strip()
