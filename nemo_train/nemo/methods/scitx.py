"""SciTX: observation, hypothesis, experiment, conclusion (NEMO paper, Sec. 3.2 and Alg. 1).

1. **Observation** — the ``k`` reference images nearest to ``x`` in the target's feature space among
   those the target classifies correctly and whose label is ``y`` or ``y_hat`` (exact top-k by cosine
   on a chunked matmul), passed on as captions, not images (cross-image leakage, Sec. 3.2).
2. **Hypothesis** — ``m`` candidate failure causes from a hypothesizer: an MLLM in a failure-analyst
   role (:class:`MLLMHypothesizer`), or offline, for generated data, :class:`AttributeContrastHypothesizer`.
3. **Experiment** — every hypothesis becomes an intervention; the original and all ``m`` counterfactuals
   are classified in one batch (:class:`~nemo_train.scoring.interventions.CounterfactualScorer`).
4. **Conclusion** — the hypothesis with the largest CEI is the explanation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from datamodules.fact_sheets import DEFAULT_EDITABLE, DEFAULT_FACTS
from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo import prompts
from nemo_train.nemo.methods.base import Explanation, ask_causes_batch
from nemo_train.nemo.retrieval import ReferenceIndex
from nemo_train.scoring.batched_scoring import select_many
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
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

    A hypothesizer backed by a language model also defines ``hypothesize_batch(samples, observations,
    class_names, m)`` (one list per error), so SciTX asks about many errors in one batched request.
    One that needs references of both the true and the predicted class sets ``retrieval = "balanced"``;
    SciTX then retrieves that way unless told otherwise (the default is ``"nearest"``, Alg. 1).
    It may set ``reads_captions = False`` when its question does not show the observations' captions
    (SciTX then does not caption the references for it).
    """

    def hypothesize(
        self, sample: ErrorSample, observations: list[Observation], class_names: Sequence[str], m: int
    ) -> list[str]: ...


def hypothesize_many(
    hypothesizer: Hypothesizer,
    samples: Sequence[ErrorSample],
    observations: Sequence[list[Observation]],
    class_names: Sequence[str],
    m: int,
) -> list[list[str]]:
    """The hypotheses for each error: one ``hypothesize_batch`` call where the hypothesizer has one."""
    batch = getattr(hypothesizer, "hypothesize_batch", None)
    if batch is not None:
        return batch(list(samples), list(observations), class_names, m)
    return [hypothesizer.hypothesize(s, o, class_names, m) for s, o in zip(samples, observations)]


class MLLMHypothesizer:
    """An MLLM in a failure-analyst role writes ``m`` hypotheses (``n=m`` samples at ``temperature``, drawn with
    ``seed``: a local model samples the same hypotheses for an error however the errors are batched)."""

    def __init__(
        self, backend, temperature: float = 0.7, template: str = prompts.SCITX_HYPOTHESIS, seed: int | None = 0
    ) -> None:
        self.backend, self.temperature, self.template, self.seed = backend, temperature, template, seed

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
        return self.hypothesize_batch([sample], [observations], class_names, m)[0]

    def hypothesize_batch(self, samples, observations, class_names, m):
        conversations = [
            [user_message(self.prompt(sample, seen, class_names), images=[sample.image])]
            for sample, seen in zip(samples, observations)
        ]
        temperature = self.temperature if m > 1 else 0.0
        return ask_causes_batch(self.backend, conversations, n=m, temperature=temperature, seed=self.seed)


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
        return self.hypothesize_batch([sample], [observations], class_names, m)[0]

    def hypothesize_batch(self, samples, observations, class_names, m):
        replies = self.backend.chat_batch(
            [[user_message(self.question, images=[sample.image])] for sample in samples],
            n=m,
            temperature=self.temperature if m > 1 else 0.0,
            max_tokens=self.max_tokens,
        )
        return [list(dict.fromkeys(r.strip() for r in found if r and r.strip())) for found in replies]


class AttributeContrastHypothesizer:
    """Offline hypothesizer for generated data (NOT a language model).

    For each editable attribute it compares the error's value with the values of the retrieved
    correctly classified images of the true class and, where they differ, writes a template hypothesis
    naming both values ("The digit is green, while the correctly classified 3s it resembles are
    mostly red ..."). It reads the generator attributes of the error and the observations, so it only
    suits synthetic benchmarks with known attributes; it stands in for the fine-tuned explainer when
    none is configured.

    It has nothing to contrast without correctly classified references of the true class, and the ``k``
    nearest references of an error the classifier confuses are often all of the predicted class (see
    docs/RESULTS.md, "Offline SciTX and retrieval"). So it asks SciTX for balanced retrieval (``ceil(k/2)``
    references of each class); with plain nearest retrieval those errors would get no hypothesis and an
    empty explanation (CEI 0).
    """

    retrieval = "balanced"
    reads_captions = False  # it reads the observations' generator attributes

    TEMPLATES = {
        "color": "The {obj} is {value}, while the correctly classified {true}s it resembles are mostly {other}; "
        "the classifier seems to tie {value} to classes such as {pred}.",
        "angle": "The {obj} is {value_pose}, whereas the correctly classified {true}s it resembles are mostly {other_pose}; "
        "this tilt may make it look like a {pred}.",
    }

    def __init__(
        self,
        vocabulary: dict[str, list],
        attributes: Sequence[str] = DEFAULT_EDITABLE,
        obj: str = DEFAULT_FACTS.object_word,
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
        balanced: take ``ceil(k/2)`` references from each of ``y`` and ``y_hat`` instead of the ``k`` nearest;
            ``None``: what the hypothesizer asks for (its ``retrieval`` attribute), else the ``k`` nearest.
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
        balanced: bool | None = None,
    ) -> None:
        if k < 1 or m < 1:
            raise UserInputError(f"SciTX needs k >= 1 and m >= 1; got k={k}, m={m}")
        self.target, self.hypothesizer, self.scorer = target, hypothesizer, scorer
        self.k, self.m, self.captioner, self.class_relevance = k, m, captioner, class_relevance
        self.balanced = getattr(hypothesizer, "retrieval", "nearest") == "balanced" if balanced is None else balanced

    def observe(self, sample: ErrorSample, benchmark: NemoBenchmark) -> list[Observation]:
        """Stage 1: retrieve and caption the ``k`` observations."""
        return self.observe_batch([sample], benchmark)[0]

    def observe_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[list[Observation]]:
        """Stage 1 for several errors; references without a stored caption are captioned in one request."""
        ref = benchmark.reference
        found = []
        for sample in samples:
            query = self.target.features(sample.image[None])[0].cpu()
            indices = retrieve_observations(sample, query, ref, self.k, self.class_relevance, self.balanced)
            sims = (
                F.normalize(ref.features[indices].float(), dim=-1) @ F.normalize(query.float(), dim=0)
                if indices
                else torch.empty(0)
            )
            found.append((indices, sims.tolist()))
        captions = ref.captions
        if captions is None and not getattr(self.hypothesizer, "reads_captions", True):
            captions = {i: "" for indices, _ in found for i in indices}  # its question shows no captions
        if captions is None:
            needed = list(dict.fromkeys(i for indices, _ in found for i in indices))
            if needed and self.captioner is None:
                raise UserInputError("the reference set has no captions; configure an MLLM captioner for SciTX")
            texts = caption_many(self.captioner, [ref.image(i) for i in needed]) if needed else []
            captions = dict(zip(needed, texts))
        return [
            [
                Observation(i, int(ref.labels[i]), captions[i], float(s), ref.attrs[i] if ref.attrs else None)
                for i, s in zip(indices, sims)
            ]
            for indices, sims in found
        ]

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        """Observe each error, ask for every error's hypotheses at once, then test each error's hypotheses."""
        names = benchmark.class_names
        observations = self.observe_batch(samples, benchmark)
        hypotheses = hypothesize_many(self.hypothesizer, samples, observations, names, self.m)
        out = []
        selected = select_many(self.scorer, samples, hypotheses, names)  # the chunk's edits and forwards shared
        for seen, found, (best, trials) in zip(observations, hypotheses, selected):
            text = best.hypothesis if best is not None else ""
            out.append(Explanation(text, list(found), trials, best, {"observations": [o.caption for o in seen]}))
        return out


class MLLMCaptioner:
    """Caption images with an MLLM (cached by the backend), for references without a caption."""

    PROMPT = "Describe this image in one short sentence: the main object, its appearance and its surroundings."

    def __init__(self, backend) -> None:
        self.backend = backend

    def __call__(self, image: torch.Tensor) -> str:
        return self.caption_batch([image])[0]

    def caption_batch(self, images: Sequence[torch.Tensor]) -> list[str]:
        """One caption per image, all asked in one batched request."""
        conversations = [[user_message(self.PROMPT, images=[image])] for image in images]
        return [replies[0].strip() for replies in self.backend.chat_batch(conversations, temperature=0.0)]


def caption_many(captioner, images: Sequence[torch.Tensor]) -> list[str]:
    """Captions of ``images``: one ``caption_batch`` call where the captioner has one."""
    batch = getattr(captioner, "caption_batch", None)
    return batch(list(images)) if batch is not None else [captioner(image) for image in images]
