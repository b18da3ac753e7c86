"""ExplanationAccuracyCallback: per-cause scores worked out by hand, sanity-check skip, W&B table only with W&B."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

import nemo_train.explainer.lockstep as generation  # noqa: E402  (the callback generates through it)
from datamodules.explanations import ExplanationRecord  # noqa: E402
from nemo_train.callbacks.explanation_accuracy import ExplanationAccuracyCallback  # noqa: E402
from nemo_train.explainer.report import print_accuracy_table  # noqa: E402
from nemo_train.vocabulary import causes_named, is_correct, per_cause_accuracy  # noqa: E402

# (true cause, generated text): hits per cause worked out by hand below
CASES = [
    ("noise", "The image is covered in random noise."),  # hit
    ("noise", "The image is pixelated."),  # miss (wrong cause)
    ("pixelation", "The image is pixelated."),  # hit
    ("pixelation", "The image is pixelated and too bright."),  # miss (two causes named)
    ("pixelation", "It is pixelated."),  # hit
    ("brightness", "No idea."),  # miss (no cause named)
    ("spatial", "A foreign object is pasted in."),  # hit
]
# noise 1/2, pixelation 2/3, brightness 0/1, spatial 1/1; contrast and saturation absent
EXPECTED = {"spatial": 1.0, "brightness": 0.0, "noise": 0.5, "pixelation": 2 / 3}


class _Module:
    def __init__(self):
        self.device = torch.device("cpu")
        self.prompting = {}
        self.logged = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _trainer(records, sanity=False, loggers=()):
    return SimpleNamespace(
        sanity_checking=sanity,
        current_epoch=0,
        datamodule=SimpleNamespace(val_records=records),
        global_rank=0,
        world_size=1,
        loggers=list(loggers),
        is_global_zero=True,
        global_step=7,
    )


@pytest.fixture
def scripted(monkeypatch):
    texts = {f"img{i}.png": text for i, (_, text) in enumerate(CASES)}

    def fake_generate(module, images, prompts=None, counterfactuals=None, **kwargs):
        return [[texts[image]] for image in images]

    monkeypatch.setattr(generation, "generate_explanations", fake_generate)
    return [
        ExplanationRecord(image=f"img{i}.png", explanation="ref", cause=cause) for i, (cause, _) in enumerate(CASES)
    ]


def test_per_cause_accuracy_matches_hand_counts(scripted):
    callback, module = ExplanationAccuracyCallback(), _Module()
    callback.on_validation_epoch_end(_trainer(scripted), module)
    result = callback.last_result
    assert set(result) == {*EXPECTED, "average"}
    for cause, value in EXPECTED.items():
        assert result[cause] == pytest.approx(value)
        assert module.logged[f"val/explanation_acc/{cause}"] == pytest.approx(value)
    assert module.logged["val/explanation_acc"] == pytest.approx(sum(EXPECTED.values()) / 4)
    # the functional helper agrees, with nan for the absent causes
    functional = per_cause_accuracy([c for c, _ in CASES], [t for _, t in CASES])
    assert math.isnan(functional["contrast"]) and functional["average"] == pytest.approx(result["average"])


def test_sanity_check_is_skipped(scripted):
    callback, module = ExplanationAccuracyCallback(), _Module()
    callback.on_validation_epoch_end(_trainer(scripted, sanity=True), module)
    assert module.logged == {} and callback.last_result == {}


def test_wandb_table_only_with_a_wandb_logger(scripted, monkeypatch, tmp_path, table_loggers):
    from datamodules.explanations import to_pil

    for i, record in enumerate(scripted):
        record.image = str(tmp_path / f"img{i}.png")
        to_pil(torch.rand(3, 8, 8)).save(record.image)
    texts = {r.image: t for r, (_, t) in zip(scripted, CASES)}
    monkeypatch.setattr(generation, "generate_explanations", lambda m, images, **kw: [[texts[i]] for i in images])

    other, wandb_logger = table_loggers
    ExplanationAccuracyCallback().on_validation_epoch_end(_trainer(scripted, loggers=[other, wandb_logger]), _Module())
    ((key, columns, rows),) = wandb_logger.tables
    grader = "correct (keyword rule standing in for manual grading)"
    assert key == "val/explanations" and columns == ["image", "cause", "target", "generated", grader]
    assert [row[4] for row in rows] == [True, False, True, False, True, False, True]


def test_scorer_credits_exactly_one_named_cause():
    assert causes_named("Too bright and noisy.") == {"brightness", "noise"}
    assert not is_correct("Too bright and noisy.", "noise")
    assert is_correct("The image is under-saturated.", "saturation")
    assert is_correct("Low contrast.", "contrast")
    table = print_accuracy_table({"none": {"spatial": 0.99, "contrast": math.nan, "average": 0.5}})
    assert "Spatial" in table and "99.0" in table and "n/a" in table


def _accuracy_rank(rank: int, init: str, out: str) -> None:
    """One of two gloo ranks running the callback on 5 pairs (3 for rank 0, 2 for rank 1) in lockstep mode."""
    import torch.distributed as dist

    import nemo_train.explainer.lockstep as lockstep

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        calls = []

        def sharded_generate(module, images, prompts=None, counterfactuals=None, **kwargs):
            step = torch.ones(1)
            dist.all_reduce(step)  # what a sharded forward does: a collective every rank must join
            calls.append((list(images), float(step)))
            texts = {f"img{i}.png": text for i, (_, text) in enumerate(CASES)}
            return [[texts.get(image, "")] for image in images]

        lockstep.lockstep = lambda trainer: True  # as under FSDP / ZeRO-3, without the accelerator
        lockstep.generate_explanations = sharded_generate
        records = [
            ExplanationRecord(image=f"img{i}.png", explanation="ref", cause=cause) for i, (cause, _) in enumerate(CASES)
        ][:5]
        trainer = _trainer(records)
        trainer.global_rank, trainer.world_size, trainer.is_global_zero = rank, 2, rank == 0
        module = _Module()
        callback = ExplanationAccuracyCallback(batch_size=1, causes=["noise", "pixelation", "brightness", "spatial"])
        callback.on_validation_epoch_end(trainer, module)
        torch.save({"calls": calls, "result": callback.last_result}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_with_uneven_shares_make_the_same_number_of_generate_calls(tmp_path):
    from forked_ranks import start_processes

    start_processes(_accuracy_rank, (f"file://{tmp_path / 'store'}", str(tmp_path)), 2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    # pairs 0, 2, 4 on rank 0 and 1, 3 on rank 1 (batch 1): rank 1 pads with one dummy call
    assert [[images for images, _ in r["calls"]] for r in ranks][0] == [["img0.png"], ["img2.png"], ["img4.png"]]
    images_1 = [images for images, _ in ranks[1]["calls"]]
    assert images_1[:2] == [["img1.png"], ["img3.png"]] and len(images_1) == 3
    assert isinstance(images_1[2][0], torch.Tensor)  # the dummy image; its answer is dropped
    assert all(step == 2.0 for r in ranks for _, step in r["calls"])  # every collective had both ranks
    # the five pairs, reduced across ranks: noise 1/2, pixelation 2/3, brightness and spatial absent
    expected = {"noise": 0.5, "pixelation": 2 / 3}
    for r in ranks:
        assert r["result"] == pytest.approx({**expected, "average": (0.5 + 2 / 3) / 2})
