"""A zoo trained in one process: stacked weights behave as separate classifiers, and every member is written as
an ordinary ``fit`` checkpoint (loadable, equal outputs, gap spec in its provenance)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from datamodules.shifts import ShiftsDataModule
from datamodules.shifts_zoo import ShiftsZooDataModule, draw_zoo
from nemo_train.errors import UserInputError
from nemo_train.models.classifier import ClassifierModule
from nemo_train.models.loading import load_classifier
from nemo_train.models.specs import FitCheckpoint
from nemo_train.models.trainer import fit_quietly
from nemo_train.models.zoo import StackedClassifiers, member_module
from nemo_train.models.zoo_run import accuracy, zoo
from nemo_train.runs import Seed

TINY = {"train_size": 48, "test_size": 30, "batch_size": 16}


@pytest.fixture(scope="module")
def data():
    dm = ShiftsZooDataModule([m.gaps.gaps for m in draw_zoo(2, train=2, heldout=1)], seed=1, **TINY)
    dm.setup("fit")
    return dm


def test_members_start_as_separate_classifiers_would():
    stacked = StackedClassifiers(3, member_seed=5)
    for k in range(3):
        torch.manual_seed(5 + k)
        alone = ClassifierModule(**stacked.member_hparams()).state_dict()
        assert alone.keys() == stacked.member_state(k).keys()
        assert all(torch.equal(alone[name], value) for name, value in stacked.member_state(k).items())
    with pytest.raises(UserInputError, match="execution='jit'"):
        StackedClassifiers(2, execution="jit")


def test_vmap_and_loop_compute_the_same_outputs_and_updates(data):
    batch = next(iter(data.train_dataloader()))
    runs = {}
    for execution in ("vmap", "loop"):
        stacked = StackedClassifiers(3, member_seed=0, execution=execution)
        optimizer = torch.optim.SGD(stacked.parameters(), lr=0.1)
        stacked.train()
        loss = stacked.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        stacked.eval()
        runs[execution] = (stacked(batch["image"]).detach(), stacked.member_state(1))
    assert torch.allclose(runs["vmap"][0], runs["loop"][0], atol=1e-5)
    assert all(torch.allclose(v, runs["loop"][1][n], atol=1e-6) for n, v in runs["vmap"][1].items())
    # member k of the stack is the module cut out of it: same logits on its own images
    stacked.eval()
    alone = member_module(stacked, 2)
    assert torch.allclose(alone(batch["image"][2]), stacked(batch["image"])[2], atol=1e-5)


def test_a_trained_zoo_writes_fit_checkpoints_with_their_gap_specs(tmp_path, capsys):
    summary = zoo(
        out_dir=str(tmp_path / "zoo"),
        seed=Seed(3),  # as the command line gives it: an int subclass, written to config.yaml as a plain int
        train_members=2,
        heldout_members=1,
        prefix="tiny",
        gap_draw="balanced",
        max_epochs=1,
        device="cpu",
        **TINY,
    )
    drawn = draw_zoo(3, train=2, heldout=1, prefix="tiny", gap_draw="balanced")
    assert json.loads((tmp_path / "zoo" / "zoo.json").read_text())["gap_draw"] == "balanced"
    assert [m["name"] for m in summary["members"]] == ["tiny_train_00", "tiny_train_01", "tiny_heldout_00"]
    assert json.loads((tmp_path / "zoo" / "zoo.json").read_text())["members"] == summary["members"]
    assert "tiny_heldout_00" in capsys.readouterr().out
    for member, record in zip(drawn, summary["members"]):
        folder = tmp_path / "zoo" / member.split / member.name
        assert record["checkpoint"] == str(folder / "checkpoints" / "best.ckpt")
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["settings"]["data"]["init_args"]["gaps"] == member.gap_lists() == record["gaps"]
        assert provenance["settings"]["zoo"]["split"] == member.split
        module = load_classifier(record["checkpoint"])
        target = FitCheckpoint(record["checkpoint"]).build()
        assert FitCheckpoint(record["checkpoint"]).label == member.name
        # the member's own preset rebuilds its data: the recorded test accuracy is the loaded checkpoint's
        config = yaml.safe_load((folder / "config.yaml").read_text())
        assert config["data"]["init_args"]["gaps"] == member.gap_lists()
        dm = ShiftsDataModule(**config["data"]["init_args"])
        dm.setup("fit")
        test = dm.test_set
        assert accuracy(module, test.images, test.labels) == record["test_acc"]
        images = test.images[:8].float() / 255.0
        assert torch.equal(target.predict(images), module(images).argmax(-1))


def test_checkpoints_written_from_the_stack_equal_the_stacked_outputs(tmp_path, data):
    from nemo_train.models.zoo_run import fit_config, write_member

    stacked = StackedClassifiers(3, member_seed=0)
    fit_quietly(stacked, data, max_epochs=1, max_steps=2, limit_val_batches=1)
    stacked.eval()
    batch = next(iter(data.test_dataloader()))
    logits = stacked(batch["image"])
    members = draw_zoo(2, train=2, heldout=1)
    for k, member in enumerate(members):
        config = fit_config(member, tmp_path / member.name, k, 1, stacked.member_hparams(), data.member_hparams(k))
        path = write_member(tmp_path / member.name, stacked.member_state(k), config, {"index": k}, 0, 2)
        loaded = load_classifier(path)
        assert torch.allclose(loaded(batch["image"][k]), logits[k], atol=1e-5)
