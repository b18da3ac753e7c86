"""Options out of range are refused with one line before any work: nothing is trained, rendered or scored."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_errors import one_line_error

from nemo_train.errors import UserInputError

pytestmark = pytest.mark.fault
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_pair(tmp_path_factory, lightning_checkpoint):
    import torch

    from nemo_train.models import ClassifierModule

    folder = tmp_path_factory.mktemp("pair")
    paths = []
    for seed, name in enumerate(("model_a", "model_b")):
        torch.manual_seed(seed)
        paths.append(
            lightning_checkpoint(ClassifierModule(backbone="bias_cnn", num_classes=10), folder / name / "best.ckpt")
        )
    return paths


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("protocol.test_conditions", "-3"),
        ("protocol.test_conditions", "100000000"),
        ("protocol.density_repeats", "0"),
        ("optimization.iterations", "-2"),
        ("sampling.samples_per_condition", "0"),
        ("sampling.samples_per_condition", "100000000"),
        ("sampling.images_per_batch", "0"),
        ("protocol.drop_ratio", "1.5"),
    ],
)
def test_differences_options_out_of_range_are_one_line_before_any_work(model_pair, tmp_path, capsys, option, value):
    out = tmp_path / "out"
    argv = [
        "differences", "--config", str(ROOT / "configs/differences/cmnist.yaml"), "--out_dir", str(out),
        "--targets", f"[{model_pair[0]}, {model_pair[1]}]", f"--{option}", value,
    ]  # fmt: skip
    err = one_line_error(capsys, argv)
    assert f"{option}={value}" in err and "out of range" in err
    assert not (out / "diff_model_cache.json").exists() and not (out / "results.json").exists()


def test_lbee_negative_o_is_refused_before_the_data_are_built(model_pair, tmp_path):
    from datamodules.nico import NICODataModule
    from nemo_train.lbee.pipeline import EvalArgs, lbee

    data = NICODataModule(train_size=60, test_per_pair=1, image_size=16)
    with pytest.raises(UserInputError, match=r"evaluation.o=-1.0 is out of range"):
        lbee(data, classifier=model_pair[0], evaluation=EvalArgs(o=-1.0), out_dir=str(tmp_path / "lbee"))
    assert data.train_set is None or not len(data.train_set)  # never set up
    assert not (tmp_path / "lbee" / "clip").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"val_fraction": 1.5}, "val_fraction=1.5 is out of range"),
        ({"styles": 100000}, "styles=100000 is out of range"),
        ({"seed": -1}, "seed=-1 is out of range"),
    ],
)
def test_distill_teacher_options_out_of_range(model_pair, tmp_path, options, message):
    from nemo_train.nemo.distill.labelling import distill_teacher

    with pytest.raises(UserInputError, match=message):
        distill_teacher(model_pair[0], out_dir=str(tmp_path / "teacher"), n=2, **options)
    assert not (tmp_path / "teacher" / "teacher.jsonl").exists()


def test_distill_teacher_refuses_a_classifier_of_another_number_of_classes(checkpoint_factory, tmp_path):
    from nemo_train.nemo.distill.labelling import distill_teacher

    six = checkpoint_factory(tmp_path / "six" / "best.ckpt", seed=0, num_classes=6)
    with pytest.raises(UserInputError, match="6 classes but the cmnist mining grid has 10"):
        distill_teacher(six, out_dir=str(tmp_path / "teacher"), n=2, styles=1)
    assert not (tmp_path / "teacher" / "teacher.jsonl").exists()
