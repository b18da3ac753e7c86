"""Exact cosine top-k retrieval of reference embeddings, optionally restricted to chosen classes.

SciTX's observation stage (NEMO Sec. 3.2, App. A.1) keeps references the classifier gets right,
whose label is the error's true class ``y`` or prediction ``y_hat``, and takes the ``K`` nearest of
them in the classifier's feature space. :class:`ReferenceIndex` does this exactly: embeddings are
normalised once, references are grouped by class, and each class block is scored against all the
queries that ask for it with one matrix product (``chunk_size`` rows at a time, so memory stays
bounded for millions of references). With ``use_faiss=True`` an exact ``faiss.IndexFlatIP`` per
class block does the scoring instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError


@dataclass
class RetrievalResult:
    """Top-k cosine ``scores`` ``[Q, k]`` (descending) and reference ``indices`` ``[Q, k]``; ``-1`` /
    ``-inf`` pad the rows of queries with fewer than ``k`` allowed references."""

    scores: torch.Tensor
    indices: torch.Tensor

    def as_lists(self) -> list[list[int]]:
        """Each query's reference indices, nearest first, without padding."""
        return [[i for i in row if i >= 0] for row in self.indices.tolist()]


def _merge_topk(
    best_scores: torch.Tensor, best_indices: torch.Tensor, scores: torch.Tensor, indices: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    all_scores = torch.cat([best_scores, scores], dim=1)
    all_indices = torch.cat([best_indices, indices], dim=1)
    top, order = all_scores.topk(min(k, all_scores.shape[1]), dim=1)
    return top, all_indices.gather(1, order)


def cosine_topk(
    queries: torch.Tensor, references: torch.Tensor, k: int, chunk_size: int = 65536, normalized: bool = False
) -> RetrievalResult:
    """Exact top-``k`` references by cosine similarity for each query (``[Q, D]`` or ``[D]``).

    The similarity matrix is built ``chunk_size`` references at a time and merged into a running
    top-k, so memory is ``O(Q * (chunk_size + k))``. Pass ``normalized=True`` if both inputs already
    have unit rows.
    """
    if k < 1:
        raise UserInputError(f"k={k}; expected an integer >= 1")
    queries = queries.reshape(1, -1) if queries.ndim == 1 else queries
    if queries.shape[-1] != references.shape[-1]:
        raise UserInputError(
            f"query dimension {queries.shape[-1]} differs from reference dimension {references.shape[-1]}"
        )
    queries = queries.float() if normalized else F.normalize(queries.float(), dim=-1)
    num_queries = queries.shape[0]
    best_scores = torch.full((num_queries, 0), float("-inf"), device=queries.device)
    best_indices = torch.full((num_queries, 0), -1, dtype=torch.long, device=queries.device)
    for start in range(0, references.shape[0], chunk_size):
        block = references[start : start + chunk_size].to(queries.device, torch.float32)
        if not normalized:
            block = F.normalize(block, dim=-1)
        sims = queries @ block.T
        scores, indices = sims.topk(min(k, sims.shape[1]), dim=1)
        best_scores, best_indices = _merge_topk(best_scores, best_indices, scores, indices + start, k)
    return _pad(RetrievalResult(best_scores, best_indices), k)


def _pad(result: RetrievalResult, k: int) -> RetrievalResult:
    missing = k - result.scores.shape[1]
    if missing <= 0:
        return result
    q = result.scores.shape[0]
    scores = torch.cat([result.scores, result.scores.new_full((q, missing), float("-inf"))], dim=1)
    indices = torch.cat([result.indices, result.indices.new_full((q, missing), -1)], dim=1)
    return RetrievalResult(scores, indices)


class ReferenceIndex:
    """Reference embeddings with labels, searchable by cosine similarity within chosen classes.

    Args:
        features: ``[N, D]`` reference embeddings (e.g. ``ClassifierModule.features``).
        labels: ``[N]`` class of each reference.
        correct: ``[N]`` bool, whether the classifier got each reference right; only those are kept
            (``None`` keeps all).
        chunk_size: references scored per matrix product.
        use_faiss: score with exact ``faiss.IndexFlatIP`` indexes (``faiss`` must be installed).
        device: where the normalised embeddings live (default: that of ``features``).

    Returned indices always refer to rows of the original ``features``.
    """

    def __init__(
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        correct: torch.Tensor | None = None,
        chunk_size: int = 65536,
        use_faiss: bool = False,
        device: str | torch.device | None = None,
    ) -> None:
        if features.ndim != 2:
            raise UserInputError(f"reference features of shape {tuple(features.shape)}; expected [N, D]")
        labels = torch.as_tensor(labels).long().flatten().cpu()
        if labels.numel() != features.shape[0]:
            raise UserInputError(
                f"{labels.numel()} labels for {features.shape[0]} reference features; expected one each"
            )
        keep = torch.ones_like(labels, dtype=torch.bool)
        if correct is not None:
            keep = torch.as_tensor(correct).bool().flatten().cpu()
            if keep.numel() != labels.numel():
                raise UserInputError(
                    f"{keep.numel()} correctness flags for {labels.numel()} references; expected one each"
                )
        if chunk_size < 1:
            raise UserInputError(f"chunk_size={chunk_size}; expected an integer >= 1")
        device = torch.device(device) if device is not None else features.device
        kept = torch.nonzero(keep).flatten()
        # sort the kept references by class so that each class is one contiguous block
        order = kept[torch.argsort(labels[kept], stable=True)]
        self.source_index = order.to(device)  # block row -> original row
        self.labels = labels[order]
        self.embeddings = F.normalize(features[order.to(features.device)].float(), dim=-1).to(device)
        classes, counts = torch.unique_consecutive(self.labels, return_counts=True)
        starts = torch.cumsum(counts, 0) - counts
        self._blocks = {int(c): (int(s), int(s + n)) for c, s, n in zip(classes, starts, counts)}
        self.chunk_size = chunk_size
        self.use_faiss = use_faiss
        self._faiss_indexes: dict[int | None, object] = {}
        if use_faiss:
            try:
                import faiss  # noqa: F401
            except ImportError:
                raise UserInputError(
                    "use_faiss=True but faiss is not installed; pip install faiss-cpu or use_faiss=False"
                ) from None

    def __len__(self) -> int:
        return self.embeddings.shape[0]

    def _score_block(self, queries: torch.Tensor, block: int | None, k: int) -> RetrievalResult:
        start, stop = (0, len(self)) if block is None else self._blocks[block]
        if self.use_faiss:
            return self._faiss_search(queries, block, start, stop, k)
        result = cosine_topk(queries, self.embeddings[start:stop], k, self.chunk_size, normalized=True)
        valid = result.indices >= 0
        result.indices = torch.where(valid, result.indices + start, result.indices)
        return result

    def _faiss_search(self, queries: torch.Tensor, block: int | None, start: int, stop: int, k: int) -> RetrievalResult:
        import faiss  # optional dependency (pip install nemo-train[faiss])

        if block not in self._faiss_indexes:
            index = faiss.IndexFlatIP(self.embeddings.shape[1])
            index.add(self.embeddings[start:stop].cpu().numpy())
            self._faiss_indexes[block] = index
        scores, indices = self._faiss_indexes[block].search(queries.cpu().numpy(), k)
        scores = torch.from_numpy(scores).to(queries.device)
        indices = torch.from_numpy(indices).long().to(queries.device)
        valid = indices >= 0
        scores = torch.where(valid, scores, torch.full_like(scores, float("-inf")))
        return RetrievalResult(scores, torch.where(valid, indices + start, indices))

    def search(self, queries: torch.Tensor, k: int, classes: torch.Tensor | None = None) -> RetrievalResult:
        """The ``k`` nearest kept references of each query, among ``classes[q]`` if given.

        ``classes`` is ``[Q, C]`` (class ids allowed for each query; ``-1`` pads shorter lists), e.g.
        ``torch.stack([y, y_hat], 1)``. Indices are rows of the original ``features``.
        """
        if k < 1:
            raise UserInputError(f"k={k}; expected an integer >= 1")
        queries = queries.reshape(1, -1) if queries.ndim == 1 else queries
        if queries.shape[-1] != self.embeddings.shape[-1]:
            raise UserInputError(
                f"query dimension {queries.shape[-1]} differs from reference dimension {self.embeddings.shape[-1]}"
            )
        queries = F.normalize(queries.float(), dim=-1).to(self.embeddings.device)
        if classes is None:
            result = self._score_block(queries, None, k)
        else:
            result = self._search_classes(queries, k, torch.as_tensor(classes).long().reshape(queries.shape[0], -1))
        valid = result.indices >= 0
        source = self.source_index[result.indices.clamp(min=0)]
        return RetrievalResult(result.scores, torch.where(valid, source, result.indices))

    def _search_classes(self, queries: torch.Tensor, k: int, classes: torch.Tensor) -> RetrievalResult:
        classes = classes.cpu().clone()
        # a class listed twice for one query would return its references twice
        for slot in range(1, classes.shape[1]):
            repeated = (classes[:, slot : slot + 1] == classes[:, :slot]).any(1)
            classes[repeated, slot] = -1
        num_queries, slots = classes.shape
        device = queries.device
        cand_scores = torch.full((num_queries, slots, k), float("-inf"), device=device)
        cand_indices = torch.full((num_queries, slots, k), -1, dtype=torch.long, device=device)
        for c in torch.unique(classes).tolist():
            if c < 0 or c not in self._blocks:
                continue  # padding, or no kept reference of this class
            rows, slot = (t.to(device) for t in torch.nonzero(classes == c, as_tuple=True))
            found = self._score_block(queries[rows], c, k)
            cand_scores[rows, slot] = found.scores
            cand_indices[rows, slot] = found.indices
        top, order = cand_scores.flatten(1).topk(k, dim=1)
        indices = cand_indices.flatten(1).gather(1, order)
        return RetrievalResult(top, torch.where(torch.isfinite(top), indices, torch.full_like(indices, -1)))

    def retrieve(
        self,
        queries: torch.Tensor,
        true_labels: torch.Tensor,
        predicted_labels: torch.Tensor,
        k: int,
        class_relevance: bool = True,
    ) -> list[list[int]]:
        """SciTX observations: per query, the ``k`` nearest correctly classified references of class
        ``y`` or ``y_hat`` (any class when ``class_relevance=False``), nearest first."""
        classes = None
        if class_relevance:
            classes = torch.stack(
                [torch.as_tensor(true_labels).long().flatten(), torch.as_tensor(predicted_labels).long().flatten()], 1
            )
        return self.search(queries, k, classes).as_lists()

    def __repr__(self) -> str:
        return (
            f"ReferenceIndex(references={len(self)}, dim={self.embeddings.shape[1]}, classes={len(self._blocks)}, "
            f"faiss={self.use_faiss})"
        )
