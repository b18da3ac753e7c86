"""ErrorRetrieval baseline: pick the error sentence of a fixed corpus closest to the image in CLIP space
(NEMO paper, Sec. 4.1.3; Jain et al. 2023, Csurka et al. 2024). It cannot say anything outside its corpus."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from datamodules.captions import CaptionVocabulary
from nemo_train.artefacts import source_identity
from nemo_train.errors import UserInputError
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark

#: A small corpus of generic failure causes, in our own words.
DEFAULT_CORPUS: tuple[str, ...] = (
    "The object is shown as a drawing, painting or cartoon rather than a photograph.",
    "The image is a sketch with only outlines and no colour or texture.",
    "The object is a toy, sculpture or plush version of the real thing.",
    "The object is seen from an unusual viewpoint.",
    "The object is rotated or upside down.",
    "The object is lying on its side.",
    "The background is cluttered and draws attention away from the object.",
    "The object appears in an unusual setting for its class.",
    "The object is made of an unusual material.",
    "The surface texture of the object is unusual for its class.",
    "The colour of the object is atypical for its class.",
    "The object is small and occupies only a little of the image.",
    "The object is partly hidden behind other things.",
    "The image is blurry or taken in poor light.",
    "Several objects appear and the model focused on the wrong one.",
    "The object is cropped so that only a part of it is visible.",
    "The object is shiny and reflects its surroundings.",
    "The strokes of the figure are thin or drawn in an unusual handwriting style.",
)


def clip_identity(clip_model: str | None) -> dict[str, str | None]:
    """``{"clip_sha256": ...}``: the digest of a local CLIP folder's weight and configuration files (``None``
    for a hub id or the random tiny CLIP), so results computed with a replaced folder are recomputed."""
    found = source_identity(clip_model) if clip_model else {}
    return {"clip_sha256": found.get("sha256")}


class ErrorRetrieval:
    """Rank ``corpus`` by cosine between the image's and each sentence's CLIP embedding.

    ``encoder`` has ``encode_image(images) -> [B, D]`` and ``encode_text(texts) -> [T, D]``
    (a :class:`~nemo_train.models.targets.ZeroShotTarget` does). The top sentence is the explanation;
    :meth:`candidates` gives the top ``m`` (used by the "+validation" variant).
    """

    name = "ErrorRetrieval"

    def __init__(self, encoder, corpus: Sequence[str] = DEFAULT_CORPUS) -> None:
        if not corpus:
            raise UserInputError("ErrorRetrieval needs a non-empty sentence corpus")
        self.encoder, self.corpus = encoder, list(corpus)
        self._text: torch.Tensor | None = None

    def ranking(self, sample: ErrorSample, benchmark: NemoBenchmark | None = None) -> list[int]:
        """Corpus indices, most similar first."""
        if self._text is None:
            self._text = F.normalize(self.encoder.encode_text(self.corpus).float().cpu(), dim=-1)
        image = F.normalize(self.encoder.encode_image(sample.image[None]).float().cpu(), dim=-1)
        return (image @ self._text.T)[0].argsort(descending=True).tolist()

    def candidates(self, sample: ErrorSample, benchmark: NemoBenchmark, m: int) -> list[str]:
        return [self.corpus[i] for i in self.ranking(sample, benchmark)[:m]]

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        top = self.candidates(sample, benchmark, 1)
        return Explanation(top[0], top)


#: How a contrast sentence of :class:`ContrastRetrieval` reads (``{error}`` / ``{usual}``: caption phrases).
CONTRAST_TEMPLATE = "The error looks like {error}, while correctly classified images of its class look like {usual}."


class ContrastRetrieval(ErrorRetrieval):
    """ErrorRetrieval for a space trained on captions: the corpus pairs two caption phrases of one attribute
    ("a green digit" / "a red digit"), and pairs are ranked by the error's direction away from its class.

    The direction is the error's image embedding minus the mean embedding of the ``k`` nearest correctly
    classified references of its true class (a per-error form of the failure directions of Jain et al.,
    2023); a pair ``(a, b)`` scores ``direction . (t(a) - t(b))`` with ``t`` the phrases' text
    embeddings, so the top pair names what the error shows (``a``) that its correctly classified class
    mates do not (``b``). Only the fixed corpus can be said, as for every retrieval method.

    Args:
        encoder: ``encode_image`` / ``encode_text`` of the trained joint space.
        pairs: ``(error phrase, usual phrase)`` of the corpus, written as the space's training captions.
        k: references averaged for the direction.
        template: how a pair is written as a sentence.
    """

    name = "ErrorRetrieval"

    def __init__(
        self, encoder, pairs: Sequence[tuple[str, str]], k: int = 8, template: str = CONTRAST_TEMPLATE
    ) -> None:
        if not pairs:
            raise UserInputError("ErrorRetrieval needs a non-empty corpus of phrase pairs")
        super().__init__(encoder, [template.format(error=a, usual=b) for a, b in pairs])
        self.pairs, self.k = list(pairs), k
        self._reference: tuple[int, torch.Tensor] | None = None

    def _pair_vectors(self) -> torch.Tensor:
        phrases = sorted({p for pair in self.pairs for p in pair})
        text = F.normalize(self.encoder.encode_text(phrases).float().cpu(), dim=-1)
        index = {p: i for i, p in enumerate(phrases)}
        return torch.stack([text[index[a]] - text[index[b]] for a, b in self.pairs])

    def _reference_embeddings(self, benchmark: NemoBenchmark) -> torch.Tensor:
        """Image embeddings of the reference set (computed once per benchmark)."""
        if self._reference is None or self._reference[0] != id(benchmark):
            ref = benchmark.reference
            images = torch.stack([ref.image(i) for i in range(len(ref))])
            embeds = torch.cat([self.encoder.encode_image(chunk).float().cpu() for chunk in images.split(512)])
            self._reference = (id(benchmark), F.normalize(embeds, dim=-1))
        return self._reference[1]

    def direction(self, sample: ErrorSample, benchmark: NemoBenchmark) -> torch.Tensor:
        """The error's embedding minus the mean of its ``k`` nearest correctly classified class mates."""
        image = F.normalize(self.encoder.encode_image(sample.image[None]).float().cpu(), dim=-1)[0]
        ref = benchmark.reference
        mates = torch.nonzero(ref.correct & (ref.labels == sample.label)).flatten()
        if len(mates) == 0:
            return image
        embeds = self._reference_embeddings(benchmark)[mates]
        nearest = (embeds @ image).topk(min(self.k, len(mates))).indices
        return image - embeds[nearest].mean(0)

    def ranking(self, sample: ErrorSample, benchmark: NemoBenchmark | None = None) -> list[int]:
        if benchmark is None:
            raise UserInputError("ErrorRetrieval on phrase pairs needs the benchmark's reference images")
        if self._text is None:
            self._text = self._pair_vectors()
        return (self._text @ self.direction(sample, benchmark)).argsort(descending=True).tolist()


def caption_pairs(vocabulary: CaptionVocabulary, skip: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Every ordered pair of distinct zero-shot phrases of each attribute of a caption vocabulary
    (``skip``: attributes left out, e.g. the class attribute)."""
    pairs = []
    for attr in vocabulary.words:
        if attr not in skip:
            phrases = vocabulary.zero_shot_prompts(attr)
            pairs += [(a, b) for a in phrases for b in phrases if a != b]
    return pairs
