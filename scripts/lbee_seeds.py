"""The failure-mode presets over seeds: how often each contrastive method beats TopS on AHR.

One run of a NICO-like preset is one classifier (one data seed) in one joint space (one CLIP seed), and a
difference of 0.044 in AHR is two sentences of 45. This script repeats a preset over CLIP seeds and data
seeds (the classifier of a data seed is trained by the preset's classifier recipe, the ``fit`` preset that
writes its checkpoint, on that seed's images with that seed) and prints every run's AHR,
then per method the mean and standard deviation of ACR / AHR / TPR / JI and the number of runs in which
its AHR is above TopS's. Nothing else of the preset changes.

    python scripts/lbee_seeds.py --base configs/lbee/nico_base.yaml \
        --config configs/lbee/nico85.yaml configs/lbee/nico95.yaml \
        --clip-seeds 0 1 2 --data-seeds 0 1 2 --out_dir checkpoints/lbee/seeds

``--base`` names the shared fragments loaded before each preset (``--config base ... --config preset``).

Data seed 0 reuses the preset's own classifier (train that one first with its ``nemo-train fit`` preset); other
data seeds train theirs once. Each CLIP seed trains one joint space, ``<out_dir>/clips/seed<s>`` (about 7 min on
2 cores), shared by every preset and data seed. Classifiers go under ``--out_dir`` (in the folder named after the preset's classifier experiment, so
presets that share a classifier share its seeds; ``--fit-config`` names the classifier recipe when no shipped
preset writes the preset's checkpoint), so a rerun only analyses. Every finished run's scores are kept in ``<out_dir>/seeds.jsonl``: a rerun, or one after a kill, only
runs what is missing (a run is redone when its preset file or overrides changed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from jsonargparse import ArgumentParser

from nemo_train.console import print_table
from nemo_train.lbee.pipeline import lbee
from nemo_train.models.loading import fit_preset_for
from nemo_train.store import ResultStore, file_digest


def _parser() -> ArgumentParser:
    parser = ArgumentParser()
    parser.add_function_arguments(lbee)
    parser.add_argument("--config", action="config")
    return parser


def config_args(config: str, base: Sequence[str] = ()) -> list[str]:
    """``--config`` for each shared fragment of ``base``, then for the preset ``config``."""
    return [arg for path in [*base, config] for arg in ("--config", str(path))]


def seed_classifier(config: str, data_seed: int, out_dir: Path, base: Sequence[str] = ()) -> Path:
    """Where the classifier of ``data_seed`` is kept (keyed by the preset's classifier experiment, so presets
    sharing a classifier share its other seeds too): ``<out_dir>/<experiment>/data<s>/checkpoints/best.ckpt``."""
    checkpoint = Path(_parser().parse_args(config_args(config, base)).classifier)
    owner = checkpoint.parent.parent.name if checkpoint.parent.name == "checkpoints" else checkpoint.parent.name
    return out_dir / owner / f"data{data_seed}" / "checkpoints" / "best.ckpt"


def train_classifier(fit_config: str | Path, seed: int, folder: Path) -> Path:
    """``nemo-train fit`` of the classifier recipe ``fit_config`` on data seed ``seed``; its best checkpoint."""
    from nemo_train.lightning_cli import NemoLightningCLI  # Lightning's import takes seconds: only when training

    args = ["--config", str(fit_config), f"--seed_everything={seed}", f"--data.init_args.seed={seed}"]
    args += [f"--trainer.default_root_dir={folder}", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    cli = NemoLightningCLI(args=[*args, "--trainer.enable_model_summary=false"], run=False)
    cli.trainer.fit(cli.model, cli.datamodule)
    best = folder / "checkpoints" / "best.ckpt"
    if not best.is_file():
        raise SystemExit(f"{fit_config} wrote no checkpoints/best.ckpt (a ModelCheckpoint with filename `best`)")
    return best


def run_config(config: str, clip_seed: int, data_seed: int, out_dir: Path, base: Sequence[str] = ()) -> list[str]:
    """Command-line overrides of one preset run at ``clip_seed`` / ``data_seed``."""
    _parser().parse_args(config_args(config, base))  # a preset that does not parse fails here, before any run
    stem = Path(config).stem
    args = [
        *config_args(config, base),
        "--wandb",
        "false",
        "--out_dir",
        str(out_dir / stem / f"clip{clip_seed}_data{data_seed}"),
    ]
    # one joint space per CLIP seed, shared by the runs of that seed: the first one trains it
    args += ["--encoder.init_args.path", str(out_dir / "clips" / f"seed{clip_seed}")]
    args += ["--encoder.init_args.train_missing", "true"]
    if clip_seed:
        args += ["--encoder.init_args.seed", str(clip_seed)]
    if data_seed:
        args += ["--data.init_args.seed", str(data_seed), "--seed", str(data_seed)]
        args += ["--classifier", str(seed_classifier(config, data_seed, out_dir, base))]
    return args


def run(args: list[str], verbose: bool) -> dict[str, dict[str, float]]:
    """One preset run; ``{method: {"acr", "ahr", "tpr", "ji"}}``."""
    parser = _parser()
    init = parser.instantiate(parser.parse_args(args))
    kwargs = {k: v for k, v in vars(init).items() if k != "config"}
    with contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO()):
        result = lbee(**kwargs)
    return {s.method: {"acr": s.acr, "ahr": s.ahr, "tpr": s.tpr, "ji": s.ji} for s in result.scores}


def above(a: float, b: float) -> bool:
    """``a > b`` beyond float noise (an AHR is a mean over clusters; equal counts can differ in the last bit)."""
    return a > b and not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def summary(runs: list[dict[str, dict[str, float]]]) -> list[list[str]]:
    """Per method: mean +- sd of each score over the runs and the number of runs with AHR above TopS."""
    rows = []
    for method in runs[0]:
        cells = []
        for name in ("acr", "ahr", "tpr", "ji"):
            values = [r[method][name] for r in runs]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.fmean(values):.3f} ± {sd:.3f}")
        if method == "TopS" or "TopS" not in runs[0]:
            rows.append([method, *cells, ""])
            continue
        wins = sum(above(r[method]["ahr"], r["TopS"]["ahr"]) for r in runs)
        rows.append([method, *cells, f"{wins}/{len(runs)}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", required=True, help="failure-mode presets (configs/lbee/*.yaml)")
    parser.add_argument("--base", nargs="*", default=[], help="shared fragments loaded before each preset")
    parser.add_argument("--clip-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out_dir", default="checkpoints/lbee/seeds")
    parser.add_argument("--fit-config", help="classifier recipe of the data seeds (default: the preset that writes it)")
    parser.add_argument("--verbose", action="store_true", help="print every run's tables")
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    store = ResultStore(out_dir / "seeds.jsonl")
    for config in args.config:
        runs, rows = [], []
        for clip_seed in args.clip_seeds:
            for data_seed in args.data_seeds:
                overrides = run_config(config, clip_seed, data_seed, out_dir, args.base)
                checkpoint = seed_classifier(config, data_seed, out_dir, args.base)
                if data_seed and not checkpoint.is_file():
                    preset = _parser().parse_args(config_args(config, args.base))
                    recipe = args.fit_config or fit_preset_for(preset.classifier)
                    if recipe is None:
                        raise SystemExit(f"no fit preset writes the classifier of {config}; name one with --fit-config")
                    train_classifier(recipe, data_seed, checkpoint.parent.parent)
                key = f"{config} clip {clip_seed} data {data_seed}"
                settings = {"overrides": " ".join(overrides), "preset": file_digest(config)}
                settings.update({f"base {path}": file_digest(path) for path in args.base})
                record = store.lookup(key, settings) or store.append(
                    {"key": key, "scores": run(overrides, args.verbose)}, settings
                )
                runs.append(record["scores"])
                rows.append(
                    [f"clip {clip_seed} data {data_seed}", *(f"{v['ahr']:.3f}" for v in record["scores"].values())]
                )
        print_table(["run", *(f"{m} AHR" for m in runs[0])], rows, title=f"{Path(config).name}: AHR per run")
        print_table(
            ["method", "ACR", "AHR", "TPR", "JI", "AHR > TopS"],
            summary(runs),
            title=f"{Path(config).name}: mean ± sd over {len(runs)} runs",
        )


if __name__ == "__main__":
    main()
