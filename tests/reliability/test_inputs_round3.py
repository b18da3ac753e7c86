"""Careless input and damaged state, third round: ``lbee``'s VQA backends and sentence file, ``distill-eval``'s
targets and student folder, a cut-short adapter, a cut-short saved estimator, a torn line in ``explain``'s output.
Each is one line (``nemo-train: error: ...``, exit 2) naming what is wrong, or the run completes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from cli_errors import one_line_error
from explain_runs import explain_argv
from PIL import Image
from safetensors.torch import save_file

from nemo_train.cli import main
from nemo_train.models import ClassifierModule

pytestmark = pytest.mark.fault
ROOT = Path(__file__).resolve().parents[2]


def classifier(path: Path, num_classes: int) -> str:
    """A randomly initialised small classifier saved as ``fit`` saves it (weights and hyper-parameters)."""
    torch.manual_seed(0)
    module = ClassifierModule(backbone="bias_cnn", num_classes=num_classes)
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    return str(path)


def adapter_folder(path: Path, weights: bool = True, config: bool = True) -> Path:
    """A folder laid out like a saved explainer adapter (its files are not read as a model here)."""
    path.mkdir(parents=True)
    (path / "nemo_explainer.json").write_text(json.dumps({"model_name_or_path": "tiny"}))
    if config:
        (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    if weights:
        save_file({"lora_A.weight": torch.zeros(64, 64)}, str(path / "adapter_model.safetensors"))
    return path


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("fault", ["empty_backend_list", "sentence_file_not_utf8"])
def test_lbee_careless_input_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, fault):
    monkeypatch.chdir(ROOT)
    argv = ["lbee", "--config", "configs/lbee/nico_base.yaml", "--config", "configs/lbee/nico85.yaml"]
    argv += ["--classifier", classifier(tmp_path / "classifier.ckpt", 6), "--out_dir", str(tmp_path / "out")]
    if fault == "empty_backend_list":
        argv += ["--relevance", "nemo_train.lbee.relevance.VQARelevance", "--relevance.backends", "[]"]
        expected = "relevance.init_args.backends is empty; VQA relevance needs at least one"
    else:
        sentences = tmp_path / "sentences.txt"
        sentences.write_bytes(b"A photo of a bird.\nA photo in sn\xf6w.\n")  # Latin-1, not UTF-8
        argv += ["--sentences", "nemo_train.lbee.sentences.FileSentences", "--sentences.path", str(sentences)]
        expected = f"sentence file {sentences}:2 is not UTF-8 text (byte 32)"
    assert expected in one_line_error(capsys, argv)
    assert not (tmp_path / "out").exists()  # nothing written, no joint space trained


@pytest.mark.parametrize("fault", ["targets_empty", "student_not_an_adapter", "student_weights_cut_short"])
def test_distill_eval_careless_input_is_one_line_before_any_work(tmp_path, capsys, fault):
    student = tmp_path / "adapter"
    targets = json.dumps([str(tmp_path / "model.ckpt")])
    if fault == "targets_empty":
        adapter_folder(student)
        targets, expected = "[]", "targets=[] names nothing; name at least one"  # the run floor's empty-list check
    elif fault == "student_not_an_adapter":
        student.mkdir()
        (student / "notes.txt").write_text("not weights")
        expected = f"student '{student}' is not an adapter folder (no adapter_config.json, adapter_model.safetensors"
    else:
        cut_in_half(adapter_folder(student) / "adapter_model.safetensors")
        expected = f"adapter weights '{student / 'adapter_model.safetensors'}' are damaged"
    argv = ["distill-eval", "--student", str(student), "--targets", targets, "--out_dir", str(tmp_path / "out")]
    assert expected in one_line_error(capsys, argv)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["weights_cut_short", "config_cut_short", "config_missing"])
def test_explain_with_a_damaged_adapter_is_one_line_naming_the_file(tmp_path, capsys, damage):
    model = adapter_folder(tmp_path / "adapter", config=damage != "config_missing")
    if damage == "weights_cut_short":
        cut_in_half(model / "adapter_model.safetensors")
        expected = f"adapter weights '{model / 'adapter_model.safetensors'}' are damaged"
    elif damage == "config_cut_short":
        cut_in_half(model / "adapter_config.json")
        expected = f"adapter file '{model / 'adapter_config.json'}' is damaged (not a JSON object)"
    else:
        expected = f"model '{model}' is not an adapter folder (no adapter_config.json)"
    Image.new("RGB", (28, 28), (200, 30, 30)).save(tmp_path / "a.png")
    argv = ["explain", "--model", str(model), "--images", json.dumps([str(tmp_path / "a.png")])]
    err = one_line_error(capsys, argv + ["--out_dir", str(tmp_path / "out")])
    assert expected in err
    assert not (tmp_path / "out").exists()


def saved_estimator(folder: Path) -> Path:
    """A PaRCE estimator saved as ``counterfactuals`` saves it (its statistics set by hand, not calibrated)."""
    from nemo_train.competency.autoencoder import CompetencyAutoencoder
    from nemo_train.competency.parce import PaRCE

    torch.manual_seed(0)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10)
    estimator = PaRCE(module, CompetencyAutoencoder(image_size=28, widths=(4, 4, 4), latent_dim=4), 10)
    estimator.fitted = True
    return estimator.save(folder)


@pytest.mark.parametrize("name", ["parce.safetensors", "parce.json"])
def test_a_saved_estimator_cut_short_is_one_line_naming_the_file(tmp_path, capsys, name):
    estimator = saved_estimator(tmp_path / "parce")
    cut_in_half(estimator / name)
    argv = ["counterfactuals", "--classifier", classifier(tmp_path / "classifier.ckpt", 10)]
    argv += ["--datamodule", "datamodules.cmnist.CMNISTDataModule", "--datamodule.init_args.train_size", "20"]
    argv += ["--datamodule.init_args.test_styles", "1", "--estimator.dir", str(estimator)]
    argv += ["--out_dir", str(tmp_path / "out"), "--device", "cpu"]
    err = one_line_error(capsys, argv)
    assert f"saved PaRCE estimator file '{estimator / name}' is damaged" in err
    assert "delete it" in err and "rerun with another out_dir" in err
    assert (estimator / name).exists()  # the user's file is named, never removed


def test_a_saved_estimator_cut_short_in_the_out_dir_is_named_by_the_loader(tmp_path):
    from nemo_train.competency.parce import PaRCE
    from nemo_train.errors import UserInputError

    estimator = saved_estimator(tmp_path / "out" / "parce")
    cut_in_half(estimator / "parce.safetensors")
    with pytest.raises(UserInputError, match=r"parce\.safetensors' is damaged .*delete it"):
        PaRCE.load(estimator, ClassifierModule(backbone="bias_cnn", num_classes=10))


def test_explain_rerun_after_a_torn_last_line_completes(tmp_path, capsys):
    from nemo_train.explainer import ExplainerModule

    os.environ.setdefault("NEMO_TRAIN_CACHE", str(tmp_path / "cache"))
    torch.set_num_threads(1)
    module = ExplainerModule(lora_r=2)
    module.configure_model()
    adapter = module.save_adapter(tmp_path / "adapter")
    argv, results = explain_argv(tmp_path, adapter)
    main(argv)
    whole = results.read_text().splitlines()
    torn = "\n".join(whole[:2]) + "\n" + whole[2][: len(whole[2]) // 2]  # a kill while the last line was written
    results.write_text(torn)
    main(argv)  # the torn line is cut and its input explained again
    assert "Traceback" not in capsys.readouterr().err
    assert results.read_text().splitlines() == whole
