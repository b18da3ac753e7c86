"""The four selection methods in an attribute stand-in joint space (not a model), on a real classifier.

The small CLIP of the NICO-like presets separates contexts but not objects, so its hard clusters and
their closest easy clusters look alike and no contrast can single out a failure sentence. This script
asks what the methods do when the joint space does see both attributes, without training one: every
image and every ground-truth sentence becomes a vector built from its attributes (a shared "photo"
direction, one random direction per object and per context, plus Gaussian noise on the images), while
the classifier's predictions, the relevance ``Gamma``, ``omega`` and ``S*`` stay those of the preset's
target set. It prints the AHR (and ACR) of every method for both scales of the ``tau`` fill (cosine
0.25 and the sentence-standardised ``tau``), per noise level and seed, and their means.

    python scripts/lbee_standin_space.py --config configs/lbee/nico_base.yaml configs/lbee/nico85.yaml

The classifier checkpoint of the preset must exist (train it with its `nemo-train fit` preset, e.g.
configs/nico/nico85_cnn.yaml); the small CLIP is not used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from jsonargparse import ArgumentParser
from torch.utils.data import DataLoader

from nemo_train.console import print_table
from nemo_train.lbee import metrics
from nemo_train.lbee.pipeline import classifier_model, lbee
from nemo_train.lbee.search import FailureModeSearch, evaluate


def standin_space(attrs, conditions, noise: float, seed: int, dim: int = 64):
    """Image ``[M, dim]`` and sentence ``[N, dim]`` vectors built from object / context directions."""
    gen = torch.Generator().manual_seed(seed)
    names = ["object", "context"]
    sizes = [int(attrs[n].max()) + 1 for n in names]
    basis = F.normalize(torch.randn(1 + sum(sizes), dim, generator=gen), dim=-1)
    photo, directions = basis[0], dict(zip(names, basis[1:].split(sizes), strict=True))
    images = photo + sum(directions[n][attrs[n]] for n in names)
    images = images + noise * 3 * torch.randn(images.shape, generator=gen) / dim**0.5
    sentences = torch.stack([photo + sum(directions[n][v] for n, v in c.items()) for c in conditions])
    return images, sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", required=True, help="an lbee preset: its fragments, in order")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tau-z", type=float, default=1.0)
    args = parser.parse_args()
    config = ArgumentParser()
    config.add_function_arguments(lbee)
    config.add_argument("--config", action="config")
    cfg = config.parse_args([arg for path in args.config for arg in ("--config", path)])
    cfg.encoder = None  # the small CLIP is not needed here
    init = config.instantiate(cfg)
    data = init.data
    data.setup("fit")
    model = classifier_model(init.classifier, data)
    probs, images, attrs = [], [], {}
    with torch.no_grad():
        for batch in DataLoader(data.test_set, batch_size=256):
            probs.append(model.predict_proba(batch["image"]))
            images.append(batch["image"])
            for k, v in {**batch["attrs"], "label": batch["label"]}.items():
                attrs.setdefault(k, []).append(v)
    probs, images = torch.cat(probs), torch.cat(images)
    attrs = {k: torch.cat(v) for k, v in attrs.items()}
    labels = attrs["label"]
    sentence_set = init.sentences.build(getattr(data, "class_names", None))
    gamma = init.relevance(sentence_set, images, attrs)
    omega = (probs.argmax(-1) == labels).double()
    beta = metrics.beta_from(omega, init.evaluation.o)
    scales = [("cosine", 0.25), ("sentence_z", args.tau_z)]
    rows, sums = [], {}
    for noise in args.noise:
        for seed in range(args.seeds):
            img, text = standin_space(attrs, sentence_set.conditions, noise, seed)
            for scale, tau in scales:
                search = FailureModeSearch(
                    init.search.split, init.search.clustering, k=init.search.k, tau=tau, tau_scale=scale
                )
                scores = evaluate(search(img, text, probs, labels), gamma, omega, beta)
                rows.append([noise, seed, f"{scale} {tau:g}", *[f"{s.ahr:.2f} / {s.acr:.2f}" for s in scores]])
                for s in scores:
                    sums.setdefault((scale, s.method), []).append(s.ahr)
    methods = [s.method for s in scores]
    for scale, tau in scales:
        means = [sum(sums[scale, m]) / len(sums[scale, m]) for m in methods]
        wins = [sum(a > b for a, b in zip(sums[scale, m], sums[scale, "TopS"], strict=True)) for m in methods]
        rows.append(
            [
                "mean",
                "",
                f"{scale} {tau:g}",
                *[f"{a:.3f} (> TopS {w}/{len(sums[scale, m])})" for a, w, m in zip(means, wins, methods, strict=True)],
            ]
        )
    print_table(
        ["noise", "seed", "tau fill", *[f"{m} AHR / ACR" for m in methods]],
        rows,
        title=f"Selection methods in an attribute stand-in space (not a model), {Path(args.config[-1]).name}",
        caption=f"Real classifier predictions, Gamma and S* ({len(metrics.hard_sentences(gamma, omega, beta))} "
        f"sentences); image and sentence vectors built from attribute directions.",
    )


if __name__ == "__main__":
    main()
