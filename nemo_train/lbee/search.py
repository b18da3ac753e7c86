"""The failure-mode search end to end: split, cluster, match prototypes to sentences, select, evaluate.

:class:`FailureModeSearch` is plain Python over tensors (image embeddings, sentence embeddings, the
model's class probabilities); it runs on the full set (unsupervised) or once per class (``per_class``,
each class's images split by that class's probability). :func:`evaluate` scores every method's
selections with the ground-truth relevance ``Gamma`` and the per-image performance ``omega``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from nemo_train.errors import UserInputError
from nemo_train.lbee import metrics
from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.selection import (
    METHODS,
    Method,
    TauScale,
    closest,
    select,
    sentence_statistics,
    similarities,
    standardize,
)
from nemo_train.lbee.split import EntropySplit, SplitRule
from nemo_train.metrics.bootstrap import interval_fields, mean_interval


@dataclass
class HardCluster:
    """One hard cluster: its images (indices into the target set), prototype, closest easy cluster and
    the sentences each method retained for it (best first)."""

    members: torch.Tensor
    prototype: torch.Tensor
    easy_members: torch.Tensor
    selections: dict[str, list[int]]
    class_index: int | None = None

    def ranked_members(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Members ordered by cosine similarity to the prototype (most typical first)."""
        sims = similarities(embeddings[self.members], self.prototype[None])[:, 0]
        return self.members[sims.argsort(descending=True)]


@dataclass
class SearchResult:
    """Hard clusters of one search (over all classes when ``per_class``) and the methods run."""

    clusters: list[HardCluster]
    methods: list[str]
    num_hard: int = 0
    num_easy: int = 0
    two_stage: bool = False

    def per_cluster(self, method: str) -> list[list[int]]:
        return [c.selections[method] for c in self.clusters]


class FailureModeSearch:
    """Split -> Ward clusters of the easy and hard embeddings -> prototype/sentence similarities ->
    closest easy prototype -> ``k`` sentences per hard cluster by each selection method.

    Args:
        split: confidence measure and thresholds (entropy, class probability or correctness).
        clustering: Ward clustering (two-stage beyond its ``max_direct`` points); the same number of
            clusters is used for the easy and the hard subset.
        methods: selection rules to run.
        k: sentences retained per hard cluster.
        tau: threshold that fills the sentence sets of SetDiff and FPDiff, on the ``tau_scale``.
        tau_scale: ``cosine``: raw cosine similarity (``tau = 0.25`` as set for Open-CLIP); ``sentence_z``:
            each sentence's similarity standardised over the analysed images (``tau`` in standard
            deviations), for a joint space whose similarity scale differs from Open-CLIP's.
        per_class: analyse each ground-truth class separately.
    """

    def __init__(
        self,
        split: SplitRule | None = None,
        clustering: WardClustering | None = None,
        methods: list[Method] = list(METHODS),  # noqa: B006 (jsonargparse shows the default)
        k: int = 3,
        tau: float = 0.25,
        tau_scale: TauScale = "cosine",
        per_class: bool = False,
    ) -> None:
        if k < 1:
            raise UserInputError(f"k={k}; expected an integer >= 1")
        if not methods:
            raise UserInputError(f"no selection method given; expected some of {list(METHODS)}")
        self.split = split or EntropySplit()
        self.clustering = clustering or WardClustering()
        self.methods, self.k, self.tau, self.per_class = list(dict.fromkeys(methods)), k, tau, per_class
        self.tau_scale = tau_scale

    def __call__(
        self,
        image_embeddings: torch.Tensor,
        sentence_embeddings: torch.Tensor,
        probs: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> SearchResult:
        if len(image_embeddings) != len(probs):
            raise UserInputError(f"{len(image_embeddings)} image embeddings but {len(probs)} predictions")
        if not self.per_class:
            return self._search(torch.arange(len(probs)), image_embeddings, sentence_embeddings, probs, labels, None)
        if labels is None:
            raise UserInputError("per_class analysis needs ground-truth labels")
        results = [
            self._search(torch.nonzero(labels == c).flatten(), image_embeddings, sentence_embeddings, probs, labels, c)
            for c in labels.unique().tolist()
        ]
        return SearchResult(
            [c for r in results for c in r.clusters],
            self.methods,
            sum(r.num_hard for r in results),
            sum(r.num_easy for r in results),
            any(r.two_stage for r in results),
        )

    def _search(self, index, embeddings, sentences, probs, labels, class_index) -> SearchResult:
        split = self.split(probs[index], None if labels is None else labels[index], class_index)
        hard_idx, easy_idx = index[split.hard], index[split.easy]
        if len(hard_idx) == 0 or len(easy_idx) == 0:
            return SearchResult([], self.methods, len(hard_idx), len(easy_idx))
        hard, easy = self.clustering(embeddings[hard_idx]), self.clustering(embeddings[easy_idx])
        v_hard, v_easy = similarities(hard.prototypes, sentences), similarities(easy.prototypes, sentences)
        nearest = closest(hard.prototypes, easy.prototypes)
        fill_hard, fill_easy = v_hard, v_easy
        if self.tau_scale == "sentence_z":
            mean, std = sentence_statistics(embeddings[index], sentences)
            fill_hard, fill_easy = standardize(v_hard, mean, std), standardize(v_easy, mean, std)
        clusters = []
        for i in range(hard.num_clusters):
            j = int(nearest[i])
            clusters.append(
                HardCluster(
                    members=hard_idx[hard.members(i)],
                    prototype=hard.prototypes[i],
                    easy_members=easy_idx[easy.members(j)],
                    selections={
                        m: select(m, v_hard[i], v_easy[j], self.k, self.tau, fill_hard[i], fill_easy[j])
                        for m in self.methods
                    },
                    class_index=class_index,
                )
            )
        return SearchResult(clusters, self.methods, len(hard_idx), len(easy_idx), hard.two_stage or easy.two_stage)


@dataclass
class MethodScores:
    """Scores of one selection method: ACR, AHR (means over the hard clusters, with intervals), TPR, JI (set-level,
    no interval) and the size of ``R_S``."""

    method: str
    acr: float
    ahr: float
    tpr: float
    ji: float
    num_selected: int
    selected: list[int] = field(default_factory=list)
    #: bootstrap 95 % interval of ACR and AHR over the hard clusters (``None``: no interval)
    acr_ci_low: float | None = None
    acr_ci_high: float | None = None
    ahr_ci_low: float | None = None
    ahr_ci_high: float | None = None


def evaluate(result: SearchResult, gamma: torch.Tensor, omega: torch.Tensor, beta: float) -> list[MethodScores]:
    """Score each method of ``result`` against ``S*_beta`` built from ``gamma`` and ``omega``."""
    if not result.clusters:
        raise UserInputError("the split left no hard (or no easy) image: nothing to explain")
    s_star = metrics.hard_sentences(gamma, omega, beta)
    members = [c.members for c in result.clusters]
    out = []
    for method in result.methods:
        chosen = result.per_cluster(method)
        r_s = metrics.union(chosen)
        coverage = [metrics.coverage_ratio(r, m, gamma) for r, m in zip(chosen, members)]
        hardness = [metrics.hardness_ratio(r, s_star) for r in chosen]
        out.append(
            MethodScores(
                method,
                acr=metrics.average_coverage_ratio(chosen, members, gamma),
                ahr=metrics.average_hardness_ratio(chosen, s_star),
                tpr=metrics.true_positive_rate(r_s, s_star),
                ji=metrics.jaccard_index(r_s, s_star),
                num_selected=len(r_s),
                selected=sorted(r_s),
                **interval_fields("acr", mean_interval(coverage)),
                **interval_fields("ahr", mean_interval(hardness)),
            )
        )
    return out


def beta_sweep(
    result: SearchResult, gamma: torch.Tensor, omega: torch.Tensor, factors: Sequence[float]
) -> dict[str, dict[str, list[float]]]:
    """``{method: {"ahr"|"tpr"|"ji": [value per factor o]}}`` with ``beta = o * std(omega)``."""
    out: dict[str, dict[str, list[float]]] = {m: {"ahr": [], "tpr": [], "ji": []} for m in result.methods}
    for o in factors:
        for score in evaluate(result, gamma, omega, metrics.beta_from(omega, o)):
            for name in ("ahr", "tpr", "ji"):
                value = getattr(score, name)
                out[score.method][name].append(value if not math.isnan(value) else float("nan"))
    return out
