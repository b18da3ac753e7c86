"""ErrorRetrieval baseline: pick the error sentence of a fixed corpus closest to the image in CLIP space
(NEMO paper, Sec. 4.1.3; Jain et al. 2023, Csurka et al. 2024). It cannot say anything outside its corpus."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark
from nemo_train.nemo.methods.base import Explanation

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


class ErrorRetrieval:
    """Rank ``corpus`` by cosine between the image's and each sentence's CLIP embedding.

    ``encoder`` has ``encode_image(images) -> [B, D]`` and ``encode_text(texts) -> [T, D]``
    (a :class:`~nemo_train.nemo.targets.ZeroShotTarget` does). The top sentence is the explanation;
    :meth:`candidates` gives the top ``m`` (used by the "+validation" variant).
    """

    name = "ErrorRetrieval"

    def __init__(self, encoder, corpus: Sequence[str] = DEFAULT_CORPUS) -> None:
        if not corpus:
            raise UserInputError("ErrorRetrieval needs a non-empty sentence corpus")
        self.encoder, self.corpus = encoder, list(corpus)
        self._text: torch.Tensor | None = None

    def ranking(self, sample: ErrorSample) -> list[int]:
        """Corpus indices, most similar first."""
        if self._text is None:
            self._text = torch.nn.functional.normalize(self.encoder.encode_text(self.corpus).float().cpu(), dim=-1)
        image = torch.nn.functional.normalize(self.encoder.encode_image(sample.image[None]).float().cpu(), dim=-1)
        return (image @ self._text.T)[0].argsort(descending=True).tolist()

    def candidates(self, sample: ErrorSample, benchmark: NemoBenchmark, m: int) -> list[str]:
        return [self.corpus[i] for i in self.ranking(sample)[:m]]

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        top = self.candidates(sample, benchmark, 1)
        return Explanation(top[0], top)
