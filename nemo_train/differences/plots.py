"""Figures: Diff_Model heat map over two attributes, token attribution, effective-token-ratio curves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nemo_train.differences.conditions import AttributeSpace  # noqa: E402
from nemo_train.differences.diff_model import Observation  # noqa: E402
from nemo_train.differences.metrics import THRESHOLDS, Attribution, curve_auc, effective_token_ratio  # noqa: E402
from nemo_train.store import save_figure  # noqa: E402


def diff_grid(observations: Sequence[Observation], space: AttributeSpace) -> tuple[np.ndarray, list, list]:
    """Mean Diff_Model per (first attribute, second attribute) cell, averaged over the others."""
    rows, cols = space.attributes[0], space.attributes[1]
    total = np.zeros((len(rows.values), len(cols.values)))
    count = np.zeros_like(total)
    for o in observations:
        i, j = rows.values.index(o.condition.values[rows.name]), cols.values.index(o.condition.values[cols.name])
        total[i, j] += o.diff
        count[i, j] += 1
    with np.errstate(invalid="ignore"):
        return total / count, list(rows.values), list(cols.values)


def heatmap(observations: Sequence[Observation], space: AttributeSpace, path: Path, title: str) -> Path:
    """Save the Diff_Model heat map (red: model B better, blue: model A better)."""
    grid, rows, cols = diff_grid(observations, space)
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(cols), 1.0 + 0.45 * len(rows)))
    image = ax.imshow(grid, cmap="coolwarm_r", vmin=-1, vmax=1)
    ax.set_xticks(range(len(cols)), [str(c) for c in cols], rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(space.attributes[1].noun)
    ax.set_ylabel(space.attributes[0].noun)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="acc(A) - acc(B)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def attribution_figure(items: dict[str, Attribution], path: Path, width: int = 90) -> Path:
    """Each explanation's tokens on a background whose strength is the normalised attribution score."""
    lines: list[tuple[str, list[tuple[str, float]]]] = []
    for name, item in items.items():
        row: list[tuple[str, float]] = []
        rows = [row]
        used = 0
        for token, s in zip(item.tokens, item.scores):
            token = token.replace("\n", " ")
            if used + len(token) > width and row:
                row = []
                rows.append(row)
                used = 0
            row.append((token, float(s)))
            used += len(token)
        lines.append((name, rows))
    height = sum(len(r) + 1.5 for _, r in lines)
    fig, ax = plt.subplots(figsize=(0.105 * width + 0.5, 0.28 * height + 0.5))
    ax.set_axis_off()
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    y = 0.8
    cmap = plt.get_cmap("Reds")
    for name, rows in lines:
        ax.text(0, y, name, fontsize=9, fontweight="bold", va="center")
        y += 1.1
        for row in rows:
            x = 0.0
            for token, s in row:
                ax.text(
                    x,
                    y,
                    token,
                    fontsize=8,
                    family="monospace",
                    va="center",
                    bbox={"facecolor": cmap(0.85 * s), "edgecolor": "none", "pad": 0.5},
                )
                x += len(token)
            y += 1.0
        y += 0.4
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def token_ratio_figure(items: dict[str, Attribution], path: Path) -> tuple[Path, dict[str, float]]:
    """Effective-token-ratio curves (share of tokens above each threshold) with their AUC."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    aucs = {}
    for name, item in items.items():
        ratios = effective_token_ratio(item.scores)
        aucs[name] = curve_auc(THRESHOLDS, ratios)
        ax.plot(THRESHOLDS, ratios, marker="o", markersize=3, label=f"{name} (AUC {aucs[name]:.3f})")
    ax.set_xlabel("attribution threshold")
    ax.set_ylabel("effective token ratio")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path, aucs
