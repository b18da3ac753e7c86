"""Step 2: cluster the easy and the hard embeddings (Ward linkage) and take cluster means as prototypes.

Ward's agglomerative clustering needs the full pairwise distance matrix (quadratic memory and time),
so :class:`WardClustering` runs it directly only up to ``max_direct`` points. Beyond that it clusters in
two stages: k-means (scikit-learn's mini-batch k-means by default, or faiss where the optional
``faiss-cpu`` is installed and chosen) reduces the points to ``n_centroids`` centroids (at most a tenth
of the points), Ward groups those centroids into the requested clusters, and every point takes the
cluster of its nearest centroid. k-means runs 10 iterations; faiss trains on at most 64 points per
centroid (a random sample) and then assigns all. Both paths return the same thing: a label per point
and one prototype per cluster, the mean of its members' embeddings. The second stage weighs every
centroid alike (scikit-learn's Ward takes no sample weights), which is the documented approximation of
the two-stage path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.cluster import AgglomerativeClustering, MiniBatchKMeans

from nemo_train.errors import UserInputError


@dataclass
class Clusters:
    """``labels`` ``long[N]`` in ``0..C-1``, ``prototypes`` ``float[C, D]`` (member means), and the path taken."""

    labels: torch.Tensor
    prototypes: torch.Tensor
    two_stage: bool

    @property
    def num_clusters(self) -> int:
        return len(self.prototypes)

    def members(self, cluster: int) -> torch.Tensor:
        """Indices (into the clustered points) of the members of ``cluster``."""
        return torch.nonzero(self.labels == cluster).flatten()


def prototypes(embeddings: torch.Tensor, labels: torch.Tensor, num_clusters: int) -> torch.Tensor:
    """Mean embedding of each cluster ``[C, D]`` (``index_add`` in one pass, memory ``O(C*D)``)."""
    sums = torch.zeros(num_clusters, embeddings.shape[1], dtype=torch.float64)
    sums.index_add_(0, labels, embeddings.double())
    counts = torch.bincount(labels, minlength=num_clusters).clamp_min(1).double()[:, None]
    return (sums / counts).float()


class WardClustering:
    """Ward agglomerative clustering into ``n_clusters`` groups, two-stage beyond ``max_direct`` points.

    Args:
        n_clusters: clusters per subset (15 on a full set, 5 per class in the reference setting).
        max_direct: largest subset clustered directly by Ward (about 2*10^4 fits in a few GiB).
        n_centroids: centroids of the first (k-means) stage of the two-stage path.
        first_stage: scikit-learn's ``minibatch`` k-means (default: no extra dependency) or ``faiss``
            k-means (faster, needs the optional ``faiss-cpu``; a one-line error when it is absent).
        normalize: cluster L2-normalised embeddings (cosine geometry, as CLIP spaces are compared).
        seed: seed of the k-means stage.
    """

    def __init__(
        self,
        n_clusters: int = 15,
        max_direct: int = 20000,
        n_centroids: int = 2000,
        first_stage: Literal["minibatch", "faiss"] = "minibatch",
        normalize: bool = True,
        seed: int = 0,
    ) -> None:
        if n_clusters < 1:
            raise UserInputError(f"n_clusters={n_clusters}; expected an integer >= 1")
        if n_centroids < n_clusters:
            raise UserInputError(f"n_centroids={n_centroids} must be >= n_clusters={n_clusters}")
        self.n_clusters, self.max_direct, self.n_centroids = n_clusters, max_direct, n_centroids
        self.normalize, self.seed, self.first_stage = normalize, seed, first_stage

    def __call__(self, embeddings: torch.Tensor, n_clusters: int | None = None) -> Clusters:
        """Cluster ``embeddings`` ``[N, D]``; fewer points than clusters give one cluster per point."""
        if embeddings.ndim != 2 or len(embeddings) == 0:
            raise UserInputError(f"cannot cluster embeddings of shape {list(embeddings.shape)}")
        points = F.normalize(embeddings.float(), dim=-1) if self.normalize else embeddings.float()
        n = min(n_clusters or self.n_clusters, len(points))
        if n == 1:
            labels, two_stage = torch.zeros(len(points), dtype=torch.long), False
        elif len(points) <= self.max_direct:
            labels, two_stage = self._ward(points.numpy(), n), False
        else:
            labels, two_stage = self._two_stage(points.numpy(), n), True
        return Clusters(labels, prototypes(points, labels, n), two_stage)

    @staticmethod
    def _ward(points: np.ndarray, n: int) -> torch.Tensor:
        return torch.from_numpy(AgglomerativeClustering(n_clusters=n, linkage="ward").fit_predict(points)).long()

    def _two_stage(self, points: np.ndarray, n: int) -> torch.Tensor:
        k = max(n, min(self.n_centroids, len(points) // 10))
        centroids, assignment = self._kmeans(np.ascontiguousarray(points, dtype=np.float32), k)
        centroid_labels = self._ward(centroids, n)
        return centroid_labels[torch.from_numpy(assignment).long()]

    def _kmeans(self, points: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Centroids ``[k, D]`` and the nearest centroid of every point."""
        if self.first_stage == "faiss":
            try:
                import faiss  # optional dependency (faiss-cpu): fast k-means for the two-stage path
            except ImportError as err:
                raise UserInputError(
                    "the faiss first stage needs faiss-cpu (pip install faiss-cpu); or set first_stage: minibatch"
                ) from err
            kmeans = faiss.Kmeans(
                points.shape[1], k, niter=10, seed=self.seed, max_points_per_centroid=64, min_points_per_centroid=1
            )
            kmeans.train(points)
            _, assignment = kmeans.index.search(points, 1)
            return kmeans.centroids, assignment[:, 0]
        kmeans = MiniBatchKMeans(n_clusters=k, batch_size=4096, n_init=1, max_iter=10, random_state=self.seed)
        return kmeans.fit(points).cluster_centers_, kmeans.labels_
