"""Benchmark of the failure-mode search end to end (split, cluster, match, select) at 10^4-10^6 images.

Embeddings are synthetic: a mixture of ``--modes`` Gaussian modes on the unit sphere in ``--dim``
dimensions (CLIP-like: normalised), class probabilities whose confidence depends on the mode (so the
hard set gathers a few modes), and ``--sentences`` random sentence embeddings. Each size runs the
search with the two-stage clustering (k-means to ``--centroids`` centroids, then Ward) for every first
stage of ``--first-stages`` (scikit-learn's mini-batch k-means, the default; faiss k-means where the
optional faiss-cpu is installed, skipped otherwise) and, where every subset fits Ward directly (at most
``--max-direct`` points), with direct Ward as well. Agreement columns: the adjusted Rand index of each
two-stage hard partition with direct Ward's (where it runs) and with the first listed first stage's.
Times are wall-clock seconds on this machine (shared: other jobs inflate them).

    python scripts/bench_lbee.py --sizes 10000 100000 1000000 --first-stages minibatch faiss
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import torch
import torch.nn.functional as F
from sklearn.metrics import adjusted_rand_score

from nemo_train.console import print_table
from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.selection import METHODS, closest, select, similarities
from nemo_train.lbee.split import EntropySplit


def synthetic(n: int, dim: int, modes: int, classes: int, sentences: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    centers = F.normalize(torch.randn(modes, dim, generator=gen), dim=-1)
    mode = torch.randint(0, modes, (n,), generator=gen)
    embeddings = torch.empty(n, dim)
    for start in range(0, n, 200_000):  # bounded temporary memory
        m = mode[start : start + 200_000]
        embeddings[start : start + len(m)] = F.normalize(
            centers[m] + 0.35 * torch.randn(len(m), dim, generator=gen) / dim**0.5 * 4, dim=-1
        )
    confidence = torch.rand(modes, generator=gen) * 6  # per-mode logit margin: low margin = hard mode
    logits = torch.randn(n, classes, generator=gen)
    logits[torch.arange(n), mode % classes] += confidence[mode]
    text = F.normalize(torch.randn(sentences, dim, generator=gen), dim=-1)
    return embeddings, logits.softmax(-1), text


def run(embeddings, probs, text, clustering: WardClustering, k: int = 3, tau: float = 0.25):
    times = {}
    t = time.perf_counter()
    split = EntropySplit(0.2)(probs)
    hard_x, easy_x = embeddings[split.hard], embeddings[split.easy]
    times["split"] = time.perf_counter() - t
    t = time.perf_counter()
    hard, easy = clustering(hard_x), clustering(easy_x)
    times["cluster"] = time.perf_counter() - t
    t = time.perf_counter()
    v_h, v_e = similarities(hard.prototypes, text), similarities(easy.prototypes, text)
    nearest = closest(hard.prototypes, easy.prototypes)
    times["match"] = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(hard.num_clusters):
        for method in METHODS:
            select(method, v_h[i], v_e[int(nearest[i])], k, tau)
    times["select"] = time.perf_counter() - t
    return times, hard, int(split.hard.sum()), int(split.easy.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--modes", type=int, default=30)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--clusters", type=int, default=15)
    parser.add_argument("--centroids", type=int, default=1000)
    parser.add_argument("--max-direct", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--first-stages", nargs="+", choices=["minibatch", "faiss"], default=["minibatch", "faiss"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    stages = [s for s in dict.fromkeys(args.first_stages) if s != "faiss" or importlib.util.find_spec("faiss")]
    skipped = [s for s in args.first_stages if s not in stages]
    rows = []
    for n in args.sizes:
        embeddings, probs, text = synthetic(n, args.dim, args.modes, args.classes, args.sentences)
        staged_rows, labels = [], []
        for stage in stages:
            staged = WardClustering(args.clusters, max_direct=0, n_centroids=args.centroids, first_stage=stage)
            t0 = time.perf_counter()
            times, hard, n_hard, n_easy = run(embeddings, probs, text, staged)
            total = time.perf_counter() - t0
            labels.append(hard.labels.numpy())
            staged_rows.append([n, f"two-stage ({stage})", n_hard, n_easy, *times.values(), total])
        direct_labels = None
        if max(n_hard, n_easy) <= args.max_direct:
            direct = WardClustering(args.clusters, max_direct=args.max_direct)
            t0 = time.perf_counter()
            times, hard_direct, _, _ = run(embeddings, probs, text, direct)
            total = time.perf_counter() - t0
            direct_labels = hard_direct.labels.numpy()
            rows.append([n, "direct Ward", n_hard, n_easy, *times.values(), total, None, None])
        for row, lab in zip(staged_rows, labels, strict=True):
            vs_direct = None if direct_labels is None else adjusted_rand_score(direct_labels, lab)
            rows.append([*row, vs_direct, adjusted_rand_score(labels[0], lab)])
        del embeddings, probs
    print_table(
        [
            "images",
            "clustering",
            "hard",
            "easy",
            "split s",
            "cluster s",
            "match s",
            "select s",
            "total s",
            "hard ARI vs direct",
            f"hard ARI vs {stages[0]}",
        ],
        rows,
        title=f"Failure-mode search end to end ({args.threads} threads, dim {args.dim}, {args.clusters} clusters, "
        f"{args.centroids} centroids)",
        caption="Wall-clock seconds on a shared machine (other jobs inflate them)."
        + (f" Skipped (not installed): {', '.join(skipped)}." if skipped else ""),
        digits=2,
    )


if __name__ == "__main__":
    main()
