"""Every LBEE / CLIP preset parses; the lbee pipeline runs end to end on a tiny NICO-like setting."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

from datamodules.nico import NICODataModule
from nemo_train.cli import PIPELINE_COMMANDS, main
from nemo_train.errors import UserInputError
from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.encoders import SyntheticCLIP
from nemo_train.lbee.pipeline import EvalArgs, lbee
from nemo_train.lbee.search import FailureModeSearch
from nemo_train.lbee.split import ClassProbabilitySplit
from nemo_train.lightning_cli import NemoLightningCLI
from tests.models.tiny_clip import TINY_CLIP

ROOT = Path(__file__).resolve().parents[2]
#: The lbee presets, each a list of configs/lbee files loaded in order: the shared NICO-like recipe with one
#: correlation (and the per-class search), and the two real settings.
NICO_LIKE = [("nico_base.yaml", f"nico{c}.yaml", *extra) for c in (75, 85, 95) for extra in ((), ("per_class.yaml",))]
REAL = {"imagenet_per_class.yaml", "nico85_real.yaml"}  # need data folders / hub weights: parsed, not built
LBEE_PRESETS = [*NICO_LIKE, *((name,) for name in sorted(REAL))]


def preset_parser() -> ArgumentParser:
    parser = ArgumentParser()
    parser.add_function_arguments(lbee)
    parser.add_argument("--config", action="config")
    return parser


def config_args(names: tuple[str, ...]) -> list[str]:
    return [arg for name in names for arg in ("--config", str(ROOT / "configs" / "lbee" / name))]


def test_lbee_command_is_registered():
    assert PIPELINE_COMMANDS["lbee"].target == "nemo_train.lbee.pipeline:lbee"


@pytest.mark.parametrize("names", LBEE_PRESETS, ids="+".join)
def test_lbee_preset_parses(names):
    parser = preset_parser()
    cfg = parser.parse_args(config_args(names))
    if names[-1] in REAL:  # Open-CLIP: the cosine threshold as set for it
        assert (cfg.search.init_args.tau, cfg.search.init_args.tau_scale) == (0.25, "cosine")
    else:
        init = parser.instantiate(cfg)
        assert isinstance(init.data, NICODataModule) and isinstance(init.encoder, SyntheticCLIP)
        assert init.search.k == 3 and (init.search.tau, init.search.tau_scale) == (1.0, "sentence_z")
        assert init.search.per_class == ("per_class.yaml" in names)


def test_clip_preset_parses(tmp_path):
    cli = NemoLightningCLI(
        args=[
            "--config",
            str(ROOT / "configs/clip/synthetic.yaml"),
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert cli.datamodule.sources == ["cmnist", "clevr", "nico"]
    assert cli.model.hparams.export_subdir == "hf"  # the folder follows --trainer.default_root_dir


def tiny_data() -> NICODataModule:
    return NICODataModule(correlation=0.85, image_size=16, train_size=240, test_per_pair=4, batch_size=32)


@pytest.fixture(scope="module")
def tiny_classifier(tiny_nico_classifier) -> str:
    """A bias_cnn fitted for one epoch on the tiny NICO-like data (:func:`tiny_data`), saved as a checkpoint (what
    `fit` writes): the session's (``tests/conftest.py``: ``tiny_nico_classifier``, the same fit), fitted once."""
    return tiny_nico_classifier


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_classifier):
    out = tmp_path_factory.mktemp("lbee")
    result = lbee(
        data=tiny_data(),
        encoder=SyntheticCLIP(
            str(out / "clip"),
            train_missing=True,  # shared with the rerun below, outside its out_dir
            train_per_source=96,
            max_epochs=1,
            batch_size=32,
            group_size=3,  # minimal-pair groups and attribute heads, as the presets' recipe
            model={**TINY_CLIP, "attribute_head_weight": 1.0},
        ),
        search=FailureModeSearch(clustering=WardClustering(n_clusters=4), tau=1.0, tau_scale="sentence_z"),
        classifier=tiny_classifier,
        evaluation=EvalArgs(sweep=[0.0, 0.5]),
        out_dir=str(out / "run"),
    )
    return out, result


def test_pipeline_writes_results_figures_and_scores(tiny_run, capsys):
    out, result = tiny_run
    assert [s.method for s in result.scores] == ["TopS", "SetDiff", "PDiff", "FPDiff"]
    for s in result.scores:
        for value in (s.acr, s.ahr):
            assert 0.0 <= value <= 1.0
        assert math.isnan(s.tpr) or 0.0 <= s.tpr <= 1.0
        assert 1 <= s.num_selected <= 3 * result.num_clusters
    assert result.num_clusters == 4 and len(result.sentences) == 48
    assert set(result.s_star) <= set(result.sentences)
    saved = json.loads((out / "run" / "results.json").read_text())
    assert saved["sweep"]["o"] == [0.0, 0.5] and set(saved["sweep"]) >= {"TopS", "FPDiff"}
    for stored, s in zip(saved["scores"], result.scores):  # each mean over the clusters with its interval beside it
        assert stored["acr_ci_low"] <= stored["acr"] <= stored["acr_ci_high"]
        assert (stored["ahr_ci_low"], stored["ahr_ci_high"]) == (s.ahr_ci_low, s.ahr_ci_high)
    for name in ("hard_clusters.png", "beta_sweep.png"):
        assert (out / "run" / name).is_file()
    assert not (out / "run" / "classifier.ckpt").exists()  # the pipeline never trains a classifier
    assert (out / "clip" / "config.json").is_file()  # the trained space is saved for reuse


def test_rerun_reuses_classifier_and_clip_per_class(tiny_run, tiny_classifier, capsys):
    out, first = tiny_run
    result = lbee(
        data=tiny_data(),
        encoder=SyntheticCLIP(str(out / "clip")),
        search=FailureModeSearch(ClassProbabilitySplit(), WardClustering(n_clusters=2), per_class=True),
        classifier=tiny_classifier,
        evaluation=EvalArgs(sweep=[0.2]),
        out_dir=str(out / "per_class"),
    )
    assert result.accuracy == pytest.approx(first.accuracy)  # same classifier, same target set
    assert result.num_clusters <= 6 * 2
    assert "TopS" in capsys.readouterr().out


def test_missing_file_is_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "lbee",
                *config_args(("nico_base.yaml", "nico85.yaml")),
                "--out_dir",
                str(tmp_path),
                "--sentences",
                "nemo_train.lbee.sentences.FileSentences",
                "--sentences.path",
                str(tmp_path / "no.txt"),
                "--classifier",
                str(tmp_path / "missing.ckpt"),
                "--encoder.init_args.path",
                str(tmp_path / "no_clip"),
                "--encoder.init_args.max_epochs",
                "0",
            ]
        )
    assert exit_info.value.code == 2
    assert "nemo-train: error:" in capsys.readouterr().err


@pytest.mark.parametrize("names", NICO_LIKE, ids="+".join)
def test_preset_analyses_the_classifier_of_its_fit_preset_on_that_data(names):
    # the classifier comes from the `fit` preset that writes its checkpoint (nothing is trained by lbee), and the
    # target set is drawn from the data that classifier was trained on
    from nemo_train.models.loading import fit_preset_for

    parser = preset_parser()
    preset = parser.parse_args(config_args(names))
    fit = fit_preset_for(preset.classifier)
    assert fit is not None and fit.parent.name == "nico", preset.classifier
    fit_data = parser.parse_object({"data": yaml.safe_load(fit.read_text())["data"]}).data
    assert fit_data == preset.data  # class and every argument, given or default


def test_a_missing_joint_space_given_elsewhere_is_not_trained(tmp_path, tiny_classifier):
    given = tmp_path / "shared" / "clip"
    with pytest.raises(UserInputError, match=r"joint space .* does not exist; train and export one first") as err:
        lbee(tiny_data(), encoder=SyntheticCLIP(str(given)), classifier=tiny_classifier, out_dir=str(tmp_path / "run"))
    assert "\n" not in str(err.value) and "configs/clip/synthetic.yaml" in str(err.value)
    assert not given.exists() and not (tmp_path / "run").exists()
