"""Edits of many hypotheses and errors share diffusers calls; the chunk is classified in one forward.

Batch independence is checked on a tiny random InstructPix2Pix pipeline: an edit made in a call of 8 equals
the same edit made alone up to float32 rounding (``EDIT_ATOL``). Every edit has its own generator, so the
noise is the same; what differs is the order in which CPU kernels sum when the batch grows (measured:
about 2e-6 on [0, 1] images).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.backends import ScriptedBackend  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.nemo.methods.scitx import SciTX  # noqa: E402
from nemo_train.scoring.batched_scoring import (  # noqa: E402
    score_many,
    select_by_cei,  # noqa: E402
    select_many,
)
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402
from nemo_train.scoring.editing import DiffusersEditor, tiny_random_instruct_pix2pix  # noqa: E402
from nemo_train.scoring.editors import DiffusersEdit  # noqa: E402
from nemo_train.scoring.interventions import (  # noqa: E402
    CounterfactualScorer,
    ExactAttributeEditor,
    KeywordAttributeDeriver,
    LLMInstructionDeriver,
)
from tests.nemo.nemo_toys import COLORS, VOCAB, RedGreenTarget, SolidRenderer, solid  # noqa: E402

#: Largest difference allowed between an edit made alone and in a batch (float32 summation order).
EDIT_ATOL = 1e-5
STEPS = {"num_inference_steps": 2}
INSTRUCTIONS = [
    ["make it red", None, "turn it upright"],
    ["paint the background blue", "add stripes", "make it smaller", "rotate it"],
    [None],
    ["make it green", "blur it", "flip it"],
]


@pytest.fixture(scope="module")
def pipeline():
    return tiny_random_instruct_pix2pix()


def errors(n: int = len(INSTRUCTIONS)) -> list[ErrorSample]:
    """Random images of two sizes (the editor resizes each to the edit size and back)."""
    out = []
    for j in range(n):
        size = 28 if j % 2 == 0 else 24
        image = torch.rand(3, size, size, generator=torch.Generator().manual_seed(j))
        out.append(ErrorSample(f"e{j}", image, label=j % 2, prediction=1 - j % 2))
    return out


class CountingCalls:
    """Records the number of prompts of every pipeline call."""

    def __init__(self, pipeline, monkeypatch) -> None:
        self.sizes: list[int] = []
        original = type(pipeline).__call__

        def call(this, *args, **kwargs):
            self.sizes.append(len(kwargs["prompt"]))
            return original(this, *args, **kwargs)

        monkeypatch.setattr(type(pipeline), "__call__", call)


def test_an_edit_does_not_depend_on_its_batch(pipeline, monkeypatch):
    samples = errors()
    calls = CountingCalls(pipeline, monkeypatch)
    alone = DiffusersEditor(pipeline, seed=5, size=32, batch_size=1, call_kwargs=STEPS).edit_many(samples, INSTRUCTIONS)
    assert calls.sizes == [1] * 9  # one call per real instruction
    calls.sizes.clear()
    together = DiffusersEditor(pipeline, seed=5, size=32, batch_size=8, call_kwargs=STEPS).edit_many(
        samples, INSTRUCTIONS
    )
    assert calls.sizes == [8, 1]  # the 9 edits of the four errors in two calls
    for sample, found, a, b in zip(samples, INSTRUCTIONS, alone, together):
        assert a.shape == b.shape == (len(found), *sample.image.shape)
        torch.testing.assert_close(a, b, atol=EDIT_ATOL, rtol=0)
        for i, text in enumerate(found):
            if text is None:  # no instruction: the image itself, bit for bit
                assert torch.equal(a[i], sample.image) and torch.equal(b[i], sample.image)
            else:
                assert not torch.allclose(b[i], sample.image, atol=1e-2)
    # an error's edits are those it gets alone (edit), whatever other errors shared its calls
    editor = DiffusersEditor(pipeline, seed=5, size=32, batch_size=8, call_kwargs=STEPS)
    torch.testing.assert_close(editor.edit(samples[1], INSTRUCTIONS[1]), together[1], atol=EDIT_ATOL, rtol=0)


def test_each_edit_is_seeded_from_its_place_in_its_error(pipeline):
    sample = errors(1)[0]
    editor = DiffusersEditor(pipeline, seed=5, size=32, batch_size=8, call_kwargs=STEPS)
    same_text = editor.edit(sample, ["make it red", "make it red"])
    assert not torch.allclose(same_text[0], same_text[1], atol=1e-3)  # seeds 5 and 6
    first = editor.edit(sample, ["make it red"])
    torch.testing.assert_close(first[0], same_text[0], atol=EDIT_ATOL, rtol=0)


class PassThrough:
    """Deriver that uses each hypothesis as its own edit instruction ("skip" is underivable)."""

    def derive(self, sample, hypotheses, class_names):
        return [None if h == "skip" else h for h in hypotheses]


def test_score_many_classifies_a_chunk_in_one_forward_per_size(pipeline, monkeypatch):
    target = RedGreenTarget()
    editor = DiffusersEditor(pipeline, seed=1, size=32, batch_size=8, call_kwargs=STEPS)
    scorer = CounterfactualScorer(target, PassThrough(), editor)
    samples = errors()
    hypotheses = [["make it red", "skip"], ["make it green"], [], ["add stripes", "rotate it", "skip"]]
    calls = CountingCalls(pipeline, monkeypatch)
    together = score_many(scorer, samples, hypotheses, target.class_names)
    assert calls.sizes == [4]  # every real edit of the chunk in one pipeline call
    # 28 px: error 0 (original + 2); 24 px: errors 1 and 3 (2 + 4 images); error 2 has nothing to test
    assert sorted(target.batch_sizes) == [3, 6]
    target.batch_sizes.clear()
    alone = [scorer.score(s, h, target.class_names) for s, h in zip(samples, hypotheses)]
    assert target.batch_sizes == [3, 2, 4]
    assert [len(t) for t in together] == [2, 1, 0, 3]
    for mine, theirs in zip(together, alone):
        assert [t.hypothesis for t in mine] == [t.hypothesis for t in theirs]
        assert [t.instruction for t in mine] == [t.instruction for t in theirs]
        assert [t.p_edited for t in mine] == pytest.approx([t.p_edited for t in theirs], abs=1e-5)
        assert [t.p_original for t in mine] == pytest.approx([t.p_original for t in theirs], abs=1e-6)
    assert together[0][1].p_edited == together[0][1].p_original  # underivable: CEI 0

    target.batch_sizes.clear()
    scorer.batched = False  # one image at a time, still from the shared edits
    score_many(scorer, samples, hypotheses, target.class_names)
    assert target.batch_sizes == [1] * 9


def test_exact_editor_chunks_keep_the_per_error_path():
    """Generated data: each error is still rendered and classified alone, so its numbers do not move."""
    target = RedGreenTarget()
    renderer = SolidRenderer()
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(renderer))
    samples = [
        ErrorSample(f"g{c}", solid(c), label=0, prediction=1, attrs={"digit": 3, "color": c, "angle": 10, "style": 0})
        for c in range(3)
    ]
    hypotheses = [[f"The square is {COLORS[c]}, correct ones are {name}." for name in COLORS] for c in range(3)]
    chosen = select_many(scorer, samples, hypotheses, target.class_names)
    assert target.batch_sizes == [4, 4, 4] and renderer.calls == 3
    for sample, found, (best, trials) in zip(samples, hypotheses, chosen):
        ref_best, ref_trials = select_by_cei(scorer, sample, found, target.class_names)
        assert [(t.p_original, t.p_edited) for t in trials] == [(t.p_original, t.p_edited) for t in ref_trials]
        assert best.hypothesis == ref_best.hypothesis


class FixedHypotheses:
    """Hypothesizer that proposes the same edits for every error."""

    reads_captions = False

    def hypothesize(self, sample, observations, class_names, m):
        return ["make it red", "make it green", "add stripes"][:m]


def test_scitx_tests_a_chunk_with_shared_edits_and_one_forward(pipeline, monkeypatch):
    target = RedGreenTarget()
    images = torch.stack([solid(c) for c in (0, 1)])
    reference = ReferenceSet(images, torch.tensor([0, 1]), target.predict(images), target.features(images))
    samples = [
        ErrorSample(f"e{j}", torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(j)), 0, 1) for j in range(3)
    ]
    bench = NemoBenchmark("toy", target.class_names, "cmnist", samples, reference)
    editor = DiffusersEditor(pipeline, seed=2, size=32, batch_size=8, call_kwargs=STEPS)
    method = SciTX(target, FixedHypotheses(), CounterfactualScorer(target, PassThrough(), editor), k=2, m=3)
    calls = CountingCalls(pipeline, monkeypatch)
    target.batch_sizes.clear()
    together = method.explain_batch(samples, bench)
    assert calls.sizes == [8, 1] and target.batch_sizes == [12]  # 3 errors x (original + 3 edits)
    alone = [method.explain(s, bench) for s in samples]
    for a, b in zip(together, alone):
        assert a.text == b.text
        assert [t.cei for t in a.trials] == pytest.approx([t.cei for t in b.trials], abs=1e-3)


def test_diffusers_edit_spec_batches_edits_without_changing_the_settings(tmp_path):
    spec = DiffusersEdit("some/editor")
    assert spec.edit_batch_size == 8
    assert "edit_batch_size" not in spec.settings() and spec.settings()["model"] == "some/editor"
    assert DiffusersEdit("some/editor", edit_batch_size=2).settings() == spec.settings()
    with pytest.raises(UserInputError, match="edit_batch_size"):
        DiffusersEdit("some/editor", edit_batch_size=0)
    folder = tmp_path / "editor"
    with torch.random.fork_rng(devices=[]):
        tiny_random_instruct_pix2pix().save_pretrained(folder)
    editor = DiffusersEdit(str(folder), edit_batch_size=3, size=32, device="cpu").editor(seed=4)
    assert (editor.batch_size, editor.seed, editor.size) == (3, 4, 32)


def test_score_many_derives_the_edits_of_a_chunk_in_one_request(pipeline):
    backend = ScriptedBackend(lambda messages: '{"reasoning": "r", "solution": "make it red"}')
    target = RedGreenTarget()
    editor = DiffusersEditor(pipeline, seed=0, size=32, batch_size=8, call_kwargs=STEPS)
    scorer = CounterfactualScorer(target, LLMInstructionDeriver(backend, "image"), editor)
    samples = errors(3)
    hypotheses = [["the colour", "the stripes"], ["the colour"], ["the size", "the colour"]]
    trials = score_many(scorer, samples, hypotheses, target.class_names)
    # one request for the chunk; errors 0 and 2 share classes, so their "the colour" requests are asked once
    assert backend.batches == [4]
    assert [[t.instruction for t in found] for found in trials] == [["make it red"] * len(h) for h in hypotheses]


def test_a_pipeline_that_reads_an_image_list_as_one_edit_gets_one_edit_per_call():
    """Qwen-Image-Edit-2509's pipeline composes a list of images into one edit: batching would mix errors."""

    class QwenImageEditPlusPipeline:
        def set_progress_bar_config(self, **kwargs):
            pass

        def __call__(self, prompt=None, image=None, negative_prompt=None, true_cfg_scale=4.0, height=None, width=None):
            raise AssertionError("not called")

    editor = DiffusersEditor(QwenImageEditPlusPipeline(), batch_size=8, device="cpu", size=64)
    assert editor.batch_size == 1
    assert editor.call_kwargs["num_inference_steps"] == 40 and editor.call_kwargs["negative_prompt"] == " "
