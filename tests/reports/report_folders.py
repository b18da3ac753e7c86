"""Run folders built by hand, as the commands store them (no model is trained or run)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from nemo_train.nemo.record_images import save_record_images
from nemo_train.nemo.report import summarize

CLASSES = [str(d) for d in range(10)]


def provenance(folder: Path, command: str, created: str = "2026-01-01T00:00:00+00:00") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"command": command, "created": created, "git": {"commit": "0123456789abcdef", "dirty": False}}
    (folder / "provenance.json").write_text(json.dumps({**record, "stand_ins": ["judge: grounded judge (a rule)"]}))


def solid(rgb: tuple[float, float, float], size: int = 8) -> torch.Tensor:
    return torch.tensor(rgb, dtype=torch.float32)[:, None, None].expand(3, size, size).clone()


#: (sample, true class, predicted class, established cause); per method (factor it blames, CEI, judge score)
ERRORS = [("e0", 3, 5, "color"), ("e1", 7, 1, "color"), ("e2", 2, 8, "rotation")]
METHODS = {
    "KnownCause": [("color", 40.0, 1.0), ("color", 30.0, 1.0), ("color", 0.0, 0.0)],
    "Distractor": [("rotation", 0.0, 0.0), ("rotation", 5.0, 0.0), ("rotation", 20.0, 1.0)],
}


def nemo_records(folder: Path, images: bool = True) -> list[dict]:
    """The records of a two-method run on :data:`ERRORS` (Distractor's record of ``e1`` inconsistent), with their
    images written as the evaluation loop writes them."""
    records = []
    for method, rows in METHODS.items():
        for (sample, label, prediction, cause), (blamed, cei, match) in zip(ERRORS, rows):
            consistent = not (method == "Distractor" and sample == "e1")
            record = {
                "key": f"model_a|{method}|{sample}",
                "target": "model_a",
                "method": method,
                "sample_id": sample,
                "label": label,
                "prediction": prediction,
                "explanation": f"the {blamed} of the digit",
                "instruction": {blamed: "typical"},
                "edit": {blamed: "typical"},
                "blamed": [blamed],
                "consistent": consistent,
                "p_original": 0.1,
                "p_edited": 0.1 + cei / 100,
                "cei": cei if consistent else 0.0,
                "edit_cei": cei,
                "judges": {"grounded": match},
                "llm_match": match if consistent else 0.0,
                "grounding": 1.0,
                "cause": cause,
                "failed": False,
            }
            if images:
                image, edited = solid((1.0, 0.0, 0.0)), solid((0.0, 0.0, 1.0))
                record.update(save_record_images(folder, record, image, edited, CLASSES))
            records.append(record)
    return records


def write_records(folder: Path, records: list[dict], torn_tail: bool = False) -> None:
    lines = "".join(json.dumps({**r, "settings": {"method.class": r["method"]}}) + "\n" for r in records)
    if torn_tail:
        lines += '{"key": "model_a|KnownCause|e9", "target": "mod'  # a kill in the middle of a write
    (folder / "results.jsonl").write_text(lines)


def nemo_eval_folder(folder: Path, summary: bool = True, torn_tail: bool = False, images: bool = True) -> list[dict]:
    """A ``nemo-eval`` run folder; without ``summary`` it is a run killed before its table was written."""
    provenance(folder, "nemo-eval")
    records = nemo_records(folder, images)
    write_records(folder, records, torn_tail)
    if summary:
        cells = [c.to_json() for c in summarize(records)]
        (folder / "summary.json").write_text(json.dumps({"benchmark": "shifts", "cells": cells}))
    return records


def counterfactuals_folder(folder: Path, results: bool = True) -> None:
    provenance(folder, "counterfactuals")
    from PIL import Image

    Image.new("RGB", (30, 20), (0, 128, 0)).save(folder / "grid.png")
    if results:
        table = {"Orig": {"success": 0.0, "perceptual": 0.0}, "IGD": {"success": 0.75, "success_ci_low": 0.5,
                 "success_ci_high": 1.0, "perceptual": 0.2}}  # fmt: skip
        causes = {"clean": 0.9, "spatial": 0.2, "counts": {"spatial": 4}}
        results_json = {"calibration": {"holdout_accuracy": 0.97, "zscore": 1.5}, "causes": causes, "table": table}
        (folder / "results.json").write_text(json.dumps(results_json))


def lbee_folder(folder: Path) -> None:
    provenance(folder, "lbee")
    from PIL import Image

    Image.new("RGB", (40, 20), (200, 200, 0)).save(folder / "hard_clusters.png")
    scores = [{"method": "TopS", "acr": 0.5, "acr_ci_low": 0.25, "acr_ci_high": 0.75, "ahr": 0.4, "tpr": 1.0,
               "ji": 0.5, "num_selected": 2}]  # fmt: skip
    clusters = [{"size": 12, "class": 3, "conflicting_fraction": 0.75, "TopS": ["a dog on snow", "a dog in water"]}]
    results = {"scores": scores, "s_star": ["a dog on snow"], "accuracy": 0.8, "beta": 0.1, "clusters": clusters}
    (folder / "results.json").write_text(json.dumps(results))
