"""Benchmark SciTX observation retrieval: exact class-filtered cosine top-k over reference embeddings.

For each reference-set size it times, on the same random embeddings and queries:

* ``naive``: per query, normalise every reference, score all of them, mask the classes, top-k
  (what a straightforward loop does);
* ``batched full scan``: all queries at once, one chunked matmul over every reference, masked;
* ``ReferenceIndex``: references normalised once and grouped by class; each class block is scored
  only against the queries that ask for it (``nemo_train.nemo.retrieval``);
* ``ReferenceIndex + faiss``: the same with exact ``faiss.IndexFlatIP`` per class (if installed).

Every method must return the same neighbours as ``ReferenceIndex`` (column ``agree``).

    python scripts/bench_retrieval.py --sizes 10000 1000000 --dim 128 --queries 64 --classes 1000

On a machine whose cores are busy with other work, pass ``--threads 1``: OpenMP threads that wait
for a busy core make every small matrix product take a scheduler time slice (~20 ms).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nemo_train.console import print_table
from nemo_train.nemo.retrieval import ReferenceIndex


def naive(refs, labels, correct, queries, y, y_hat, k):
    out = []
    for q, a, b in zip(queries, y.tolist(), y_hat.tolist()):
        sims = F.normalize(refs, dim=-1) @ F.normalize(q, dim=0)
        allowed = correct & ((labels == a) | (labels == b))
        sims = sims.masked_fill(~allowed, float("-inf"))
        top = sims.topk(k)
        out.append(top.indices[torch.isfinite(top.values)].tolist())
    return out


def full_scan(refs, labels, correct, queries, y, y_hat, k, chunk=65536):
    q = F.normalize(queries, dim=-1)
    best_s = torch.full((len(q), 0), float("-inf"))
    best_i = torch.zeros((len(q), 0), dtype=torch.long)
    for start in range(0, len(refs), chunk):
        block = F.normalize(refs[start : start + chunk], dim=-1)
        lab, ok = labels[start : start + chunk], correct[start : start + chunk]
        sims = q @ block.T
        allowed = ok[None, :] & ((lab[None, :] == y[:, None]) | (lab[None, :] == y_hat[:, None]))
        sims = sims.masked_fill(~allowed, float("-inf"))
        s, i = sims.topk(min(k, sims.shape[1]), dim=1)
        s, order = torch.cat([best_s, s], 1).topk(k, dim=1)
        best_i, best_s = torch.cat([best_i, i + start], 1).gather(1, order), s
    return [i[torch.isfinite(s)].tolist() for i, s in zip(best_i, best_s)]


def timed(fn, repeats=1):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--naive-queries", type=int, default=16, help="queries timed for the slow naive loop")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import faiss  # optional dependency (pip install nemo-train[faiss])

        faiss.omp_set_num_threads(args.threads)
    except ImportError:
        faiss = None

    rows = []
    g = torch.Generator().manual_seed(0)
    for n in args.sizes:
        refs = torch.randn(n, args.dim, generator=g)
        labels = torch.randint(0, args.classes, (n,), generator=g)
        correct = torch.rand(n, generator=g) > 0.2
        queries = torch.randn(args.queries, args.dim, generator=g)
        y = torch.randint(0, args.classes, (args.queries,), generator=g)
        y_hat = (y + 1 + torch.randint(0, args.classes - 1, (args.queries,), generator=g)) % args.classes

        index, build = timed(lambda: ReferenceIndex(refs, labels, correct))
        exact, search = timed(lambda: index.retrieve(queries, y, y_hat, args.k), repeats=3)
        rows.append((n, "ReferenceIndex (class blocks)", build, search, args.queries, "-"))

        m = args.naive_queries
        got, t = timed(lambda: naive(refs, labels, correct, queries[:m], y[:m], y_hat[:m], args.k))
        rows.append((n, "naive per-query scan", 0.0, t, m, got == exact[:m]))
        got, t = timed(lambda: full_scan(refs, labels, correct, queries, y, y_hat, args.k))
        rows.append((n, "batched full scan (chunked)", 0.0, t, args.queries, got == exact))
        if faiss is not None:
            index_f, build_f = timed(lambda: ReferenceIndex(refs, labels, correct, use_faiss=True))
            index_f.retrieve(queries, y, y_hat, args.k)  # faiss indexes are built lazily on first use
            got, t = timed(lambda: index_f.retrieve(queries, y, y_hat, args.k), repeats=3)
            rows.append((n, "ReferenceIndex + faiss", build_f, t, args.queries, got == exact))
        del refs, index

    print_table(
        ["method", "references", "build s", "search s", "queries", "ms/query", "agree"],
        [(name, f"{n:,}", build, search, q, 1000 * search / q, agree) for n, name, build, search, q, agree in rows],
        title=(
            f"Reference retrieval: dim={args.dim} classes={args.classes} k={args.k} threads={args.threads} "
            f"faiss={'yes' if faiss is not None else 'not installed'}"
        ),
        digits=4,
    )


if __name__ == "__main__":
    main()
