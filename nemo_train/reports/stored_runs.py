"""The sections of runs that store one ``results.json`` and their figures: ``counterfactuals`` (competency) and
``lbee`` (failure modes), and the fallback of any other run folder (its tables and figures as stored).

What these runs do not store is said on the page: ``counterfactuals`` keeps one example per cause in one grid
(no per-image competency before and after), ``lbee`` the hard clusters' examples in one grid (no easy images).
"""

from __future__ import annotations

from typing import Any

from nemo_train.competency.evaluation import table_rows as counterfactual_table_rows
from nemo_train.reports.folder import RunFolder
from nemo_train.reports.html import Markup, Page, Section, esc, figure, number, table, with_interval


def figures(folder: RunFolder, named: list[tuple[str, str]]) -> Markup:
    """The run's figures ``(file name, caption)`` that exist, as figures next to the page."""
    parts = []
    for name, caption in named:
        src = folder.image(name)
        if src:
            parts.append(figure(src, caption))
    return Markup("".join(parts))


def counterfactual_report(folder: RunFolder, page: Page) -> None:
    """``counterfactuals``: the Table-1 scores with intervals, each cause's competency, the calibration, the grid
    of one original per cause beside each method's counterfactual, and the reliability plot."""
    results = folder.json("results.json")
    pictures = figures(
        folder,
        [
            ("grid.png", "one low-competency image per cause (rows): the original, then each method's counterfactual"),
            ("reliability.png", "PaRCE reliability on the held-out images"),
        ],
    )
    if not isinstance(results, dict):
        page.partial = "the run stopped before writing results.json"
        page.sections.append(Section("Figures", pictures, "figures written before the run stopped"))
        return
    columns, rows = counterfactual_table_rows(results.get("table") or {})
    page.sections.append(
        Section("Counterfactuals per method", table(columns, rows), "[bootstrap 95 % interval over the images]")
    )
    causes = dict(results.get("causes") or {})
    counts = causes.pop("counts", {}) or {}
    cause_rows = [[name, number(value), counts.get(name, "")] for name, value in causes.items()]
    page.sections.append(
        Section(
            "Competency per cause",
            table(["images", "mean PaRCE competency", "count"], cause_rows),
            "the clean images and the corrupted images of each cause",
        )
    )
    calibration = results.get("calibration") or {}
    for key in ("holdout_accuracy", "holdout_mean_score", "zscore"):
        if key in calibration:
            page.facts.append((key.replace("_", " "), number(calibration[key])))
    page.sections.append(
        Section("Figures", pictures, "not stored: each image's competency before and after (only the means above)")
    )


def lbee_report(folder: RunFolder, page: Page) -> None:
    """``lbee``: each method's ACR / AHR (with intervals) / TPR / JI, ``S*_beta``, each hard cluster with the
    sentences each method chose, and the cluster grid and beta sweep figures."""
    results = folder.json("results.json")
    pictures = figures(
        folder,
        [("hard_clusters.png", "hard clusters: example images and sentences"), ("beta_sweep.png", "beta sweep")],
    )
    if not isinstance(results, dict):
        page.partial = "the run stopped before writing results.json"
        page.sections.append(Section("Figures", pictures, "figures written before the run stopped"))
        return
    scores = results.get("scores") or []
    rows = [
        [
            s.get("method"),
            with_interval(s.get("acr"), s.get("acr_ci_low"), s.get("acr_ci_high")),
            with_interval(s.get("ahr"), s.get("ahr_ci_low"), s.get("ahr_ci_high")),
            s.get("tpr"),
            s.get("ji"),
            s.get("num_selected"),
        ]
        for s in scores
    ]
    page.sections.append(
        Section(
            "Failure-mode sentences per method",
            table(["method", "ACR", "AHR", "TPR", "JI", "|R_S|"], rows),
            "ACR, AHR: [bootstrap 95 % interval over the hard clusters]",
        )
    )
    for key in ("accuracy", "beta", "num_hard", "num_easy", "num_clusters"):
        if key in results:
            page.facts.append((key.replace("_", " "), number(results[key])))
    methods = [s.get("method") for s in scores]
    clusters = [
        [i, c.get("size"), c.get("class"), c.get("conflicting_fraction"), *[_lines(c.get(m)) for m in methods]]
        for i, c in enumerate(results.get("clusters") or [])
    ]
    page.sections.append(
        Section(
            "Hard clusters",
            table(["cluster", "images", "class", "conflicting share", *methods], clusters),
            f"S*_beta: {'; '.join(results.get('s_star') or []) or 'empty'}",
        )
    )
    page.sections.append(
        Section("Figures", pictures, "not stored: per-cluster image sets and the easy images (only the grid)")
    )


def _lines(sentences: Any) -> Markup:
    return Markup("<br>".join(esc(s) for s in sentences or [])) if sentences else esc(None)


def files_report(folder: RunFolder, page: Page) -> None:
    """Any other run folder: its ``table.txt`` and the figures at its top level, as stored."""
    parts = []
    text = folder.path / "table.txt"
    if text.is_file():
        parts.append(f"<pre>{esc(text.read_text(encoding='utf-8', errors='replace'))}</pre>")
    names = sorted(p.name for p in folder.path.glob("*.png"))
    parts.append(figures(folder, [(name, name) for name in names]))
    note = "no section for this command yet: its stored table and figures as written"
    page.sections.append(Section("Stored results", Markup("".join(parts)), note))
