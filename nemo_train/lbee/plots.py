"""Figures of a failure-mode search: one row per hard cluster with each method's sentences, and a beta sweep."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)
import torch  # noqa: E402

from nemo_train.lbee.search import SearchResult  # noqa: E402


def cluster_grid(
    result: SearchResult,
    images: torch.Tensor,
    embeddings: torch.Tensor,
    texts: Sequence[str],
    path: str | Path,
    per_row: int = 6,
    max_clusters: int = 8,
    s_star: set[int] | None = None,
) -> Path:
    """Each hard cluster: its ``per_row`` most typical images, then each method's sentences below
    (a sentence of ``S*`` is marked with ``*``). Saved as PNG at ``path``."""
    clusters = result.clusters[:max_clusters]
    methods = result.methods
    fig, axes = plt.subplots(
        len(clusters), per_row + 1, figsize=(1.3 * per_row + 9, 1.6 * len(clusters) + 0.2), squeeze=False
    )
    for row, cluster in zip(axes, clusters):
        ranked = cluster.ranked_members(embeddings)[:per_row]
        for ax in row:
            ax.axis("off")
        for ax, index in zip(row, ranked.tolist()):
            ax.imshow(images[index].permute(1, 2, 0).clamp(0, 1).numpy())
        lines = [f"{len(cluster.members)} images"]
        for method in methods:
            chosen = [("*" if s_star and s in s_star else "") + texts[s] for s in cluster.selections[method]]
            lines.append(textwrap.shorten(f"{method}: " + "; ".join(chosen), 130))
        row[-1].text(0.0, 0.5, "\n".join(lines), fontsize=7, va="center", ha="left", family="monospace")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def beta_sweep_plot(factors: Sequence[float], sweep: dict[str, dict[str, list[float]]], path: str | Path) -> Path:
    """AHR, TPR and JI of each method against ``o`` (``beta = o * std(omega)``)."""
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, name in zip(axes, ("ahr", "tpr", "ji")):
        for method, values in sweep.items():
            ax.plot(list(factors), values[name], marker="o", label=method)
        ax.set_xlabel("o  (beta = o * std(omega))")
        ax.set_title(name.upper())
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
