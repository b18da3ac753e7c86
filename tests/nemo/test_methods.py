"""SciTX and the baselines on a toy classifier whose CEIs are known in closed form."""

from __future__ import annotations

import json
import os

import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_toys import COLORS, VOCAB, RedGreenTarget, SolidRenderer, solid  # noqa: E402

from nemo_train.backends import ScriptedBackend  # noqa: E402
from nemo_train.models.targets import ClassifierTarget  # noqa: E402
from nemo_train.models.zero_shot import tiny_random_clip  # noqa: E402
from nemo_train.nemo.methods.cam_mllm import CamMLLM, describe_heat, gradcam_overlay  # noqa: E402
from nemo_train.nemo.methods.change_mllm import ChangeMLLM  # noqa: E402
from nemo_train.nemo.methods.error_retrieval import ErrorRetrieval  # noqa: E402
from nemo_train.nemo.methods.global_explanation import summarize_attribute_explanations, summarize_explanations  # noqa: E402
from nemo_train.nemo.methods.scitx import AttributeContrastHypothesizer, MLLMHypothesizer, SciTX  # noqa: E402
from nemo_train.nemo.methods.validation import WithValidation  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet  # noqa: E402
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver  # noqa: E402


def toy_benchmark(target) -> NemoBenchmark:
    # (colour, label): red->0 and green->1 are correct, green labelled 0 is a reference the target gets wrong
    rows = [(0, 0, 0), (0, 0, 10), (1, 1, 0), (1, 1, -10), (1, 0, 5), (2, 0, 20)]
    images = torch.stack([solid(c) for c, _, _ in rows])
    labels = torch.tensor([y for _, y, _ in rows])
    attrs = [{"digit": 3, "color": c, "angle": a, "style": 0} for c, _, a in rows]
    captions = [f"a {COLORS[c]} square at {a} degrees #{i}" for i, (c, _, a) in enumerate(rows)]
    reference = ReferenceSet(
        images,
        labels,
        target.predict(images),
        torch.nn.functional.normalize(target.features(images), dim=-1),
        captions,
        attrs,
        image_size=8,
    )
    error = ErrorSample("e0", solid(1), label=0, prediction=1, attrs={"digit": 3, "color": 1, "angle": 10, "style": 0})
    return NemoBenchmark("toy", target.class_names, "cmnist", [error], reference, SolidRenderer(), VOCAB)


def scorer_for(target) -> CounterfactualScorer:
    return CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))


def test_scitx_selects_argmax_cei_and_batches_all_interventions():
    target = RedGreenTarget()
    bench = toy_benchmark(target)
    hypotheses = [
        "The square is green, where correct ones are blue.",  # CEI 100*(0.5 - p)
        "The square is green, where correct ones are red.",  # best: -> red
        "The square is rotated 10 degrees.",  # CEI 0
    ]
    backend = ScriptedBackend([json.dumps({"cause_of_error": h}) for h in hypotheses])
    method = SciTX(target, MLLMHypothesizer(backend), scorer_for(target), k=6, m=3)  # every correct reference
    target.batch_sizes.clear()
    explanation = method.explain(bench.errors[0], bench)
    assert explanation.text == hypotheses[1]
    ceis = [t.cei for t in explanation.trials]
    assert explanation.trial.cei == max(ceis) and ceis[1] > ceis[0] > ceis[2] == 0.0
    assert target.batch_sizes[-1] == 4  # the original + all 3 interventions in one batch
    call = backend.calls[0]
    assert call["n"] == 3 and call["temperature"] > 0  # M hypotheses sampled in one request
    prompt = call["messages"][0]["content"][-1]["text"]
    assert call["messages"][0]["content"][0]["type"] == "image"  # the error image is shown
    # Set A: correctly classified "reddish" references; Set B: "greenish"; the misclassified one (#4) is left out
    set_a = prompt.split("Group A")[1].split("Group B")[0]
    set_b = prompt.split("Group B")[1].split("Group C")[0]
    assert "#0" in set_a and "#1" in set_a and "#5" in set_a and "#4" not in prompt
    assert "#2" in set_b and "#3" in set_b


def test_scitx_tie_goes_to_first_hypothesis():
    target = RedGreenTarget()
    bench = toy_benchmark(target)
    hypotheses = ["The handwriting is odd.", "The square is rotated 10 degrees."]  # both CEI 0
    backend = ScriptedBackend([json.dumps({"cause_of_error": h}) for h in hypotheses])
    explanation = SciTX(target, MLLMHypothesizer(backend), scorer_for(target), k=2, m=2).explain(bench.errors[0], bench)
    assert explanation.text == hypotheses[0]


def test_attribute_contrast_hypothesizer_names_the_contrasting_values():
    target = RedGreenTarget()
    bench = toy_benchmark(target)
    method = SciTX(target, AttributeContrastHypothesizer(VOCAB, obj="square"), scorer_for(target), k=6, m=3)
    explanation = method.explain(bench.errors[0], bench)
    colour, angle = explanation.candidates
    # nearest correct "reddish" references: red (0 and 10 degrees) and blue (20 degrees); modal colour = red
    assert "square is green" in colour and "mostly red" in colour
    assert "rotated 10 degrees" in angle
    assert explanation.text == colour and explanation.trial.instruction == {"attribute": "color", "value": 0}


def test_change_mllm_uses_nearest_correct_reference():
    target = RedGreenTarget()
    bench = toy_benchmark(target)
    method = ChangeMLLM(target, reference_class="true")  # offline, rule-based comparison
    explanation = method.explain(bench.errors[0], bench)
    assert explanation.details["reference"] in (0, 1, 5)  # a correct reference of the true class
    assert "colour is green where the reference is" in explanation.text
    # default (the NEMO paper): the nearest correct reference of the true OR the predicted class
    assert ChangeMLLM(target).reference(bench.errors[0], bench) in (2, 3)
    backend = ScriptedBackend(['{"visual_differences": "d", "cause_of_error": "The green colour misleads the model."}'])
    explanation = ChangeMLLM(target, backend).explain(bench.errors[0], bench)
    assert explanation.text == "The green colour misleads the model."
    images = [p for p in backend.calls[0]["messages"][0]["content"] if p["type"] == "image"]
    assert len(images) == 2 and torch.equal(images[0]["image"], bench.errors[0].image)


def test_scitx_retrieval_takes_the_k_nearest_of_the_filtered_set_or_balanced_halves():
    from nemo_train.nemo.methods.scitx import retrieve_observations

    target = RedGreenTarget()
    bench = toy_benchmark(target)
    error = bench.errors[0]  # green, labelled 0, predicted 1
    query = target.features(error.image[None])[0]
    nearest = retrieve_observations(error, query, bench.reference, 2)
    assert sorted(nearest) == [2, 3]  # both correct green references (class 1) are nearer than any class-0 one
    balanced = retrieve_observations(error, query, bench.reference, 2, balanced=True)
    assert [int(bench.reference.labels[i]) for i in balanced] == [0, 1]


def cam_target() -> ClassifierTarget:
    """A one-convolution classifier over 2 classes (Grad-CAM's layer: the convolution)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    )
    net.features = lambda x: x.mean((2, 3))
    return ClassifierTarget(net, ["a", "b"])


def test_cam_mllm_sends_a_gradcam_overlay():
    target = cam_target()
    image = torch.zeros(3, 16, 16)
    image[:, 2:6, 10:14] = 1.0  # a bright patch in the upper right
    heat, overlay = gradcam_overlay(target, image, 1)
    assert heat.shape == (16, 16) and overlay.shape == (3, 16, 16) and 0 <= heat.min() and heat.max() <= 1
    assert "upper" in describe_heat(torch.where(torch.arange(16)[:, None] < 6, 1.0, 0.0).expand(16, 16), image)
    backend = ScriptedBackend(['{"cause_of_error": "The model looked at the corner."}'])
    sample = ErrorSample("c", image, 0, 1)
    bench = NemoBenchmark("toy", ["a", "b"], "cmnist", [sample], None)
    explanation = CamMLLM(target, backend).explain(sample, bench)
    assert explanation.text == "The model looked at the corner."
    sent = backend.calls[0]["messages"][0]["content"][0]["image"]
    assert torch.allclose(sent, explanation.details["gradcam"])


def test_error_retrieval_ranks_by_clip_similarity_and_validation_picks_argmax():
    encoder = tiny_random_clip(["reddish", "greenish"], seed=0, image_size=8)
    corpus = [
        "The square is green, where correct ones are red.",
        "The square is rotated 10 degrees.",
        "The square is green, where correct ones are blue.",
    ]
    method = ErrorRetrieval(encoder, corpus)
    target = RedGreenTarget()
    bench = toy_benchmark(target)
    sample = bench.errors[0]
    image = torch.nn.functional.normalize(encoder.encode_image(sample.image[None]), dim=-1)
    text = torch.nn.functional.normalize(encoder.encode_text(corpus), dim=-1)
    expected = (image @ text.T)[0].argsort(descending=True).tolist()
    assert method.ranking(sample) == expected
    assert method.explain(sample, bench).text == corpus[expected[0]]
    validated = WithValidation(method, scorer_for(target), m=3).explain(sample, bench)
    assert validated.text == corpus[0]  # highest CEI among all three candidates, whatever the ranking


def test_global_explanation_offline_and_llm():
    texts = [
        "The digit is drawn in green, while the correctly classified 3s it resembles are mostly red; x",
        "The digit is drawn in blue, while the correctly classified 1s it resembles are mostly red; x",
        "The digit is rotated 10 degrees, whereas ... mostly upright (0 degrees)",
    ]
    summary = summarize_attribute_explanations(texts, VOCAB)
    assert "colour" in summary and "red" in summary and "2 explanations" in summary
    backend = ScriptedBackend(['{"global_explanation": "It relies on colour."}'])
    assert summarize_explanations(backend, texts) == "It relies on colour."
    assert texts[0] in backend.calls[0]["messages"][0]["content"][-1]["text"]


def test_plain_text_hypothesizer_for_the_fine_tuned_explainer():
    from nemo_train.nemo.methods.scitx import PlainTextHypothesizer

    target = RedGreenTarget()
    bench = toy_benchmark(target)
    backend = ScriptedBackend(
        ["The green colour misled it; correct ones are red.", "The square is rotated 10 degrees."]
    )
    method = SciTX(target, PlainTextHypothesizer(backend, question="Why?"), scorer_for(target), k=2, m=2)
    explanation = method.explain(bench.errors[0], bench)
    assert explanation.text == "The green colour misled it; correct ones are red."
    call = backend.calls[0]
    assert call["n"] == 2 and call["max_tokens"] == 48
    assert [p["type"] for p in call["messages"][0]["content"]] == ["image", "text"]
    assert call["messages"][0]["content"][1]["text"] == "Why?"


def _by_colour(messages) -> str:
    """A scripted MLLM: the right cause for a green error image, a wrong one otherwise."""
    image = next(p["image"] for p in messages[0]["content"] if p["type"] == "image")
    green = bool(image[1].mean() > 0.5 and image[0].mean() < 0.5)
    cause = "The square is green, where correct ones are red." if green else "The square is rotated 10 degrees."
    return json.dumps({"cause_of_error": cause})


def toy_errors(bench) -> list[ErrorSample]:
    colour = [1, 2, 1]  # green, blue, green (all labelled "reddish")
    return [
        ErrorSample(f"e{i}", solid(c), label=0, prediction=1, attrs={"digit": 3, "color": c, "angle": 10, "style": 0})
        for i, c in enumerate(colour)
    ]


def test_methods_explain_many_errors_with_one_request_and_the_same_answers():
    from nemo_train.nemo.methods.base import explain_many

    target = RedGreenTarget()
    bench = toy_benchmark(target)
    errors = toy_errors(bench)
    makers = {
        "scitx": lambda b: SciTX(target, MLLMHypothesizer(b), scorer_for(target), k=4, m=2),
        "change": lambda b: ChangeMLLM(target, b),
        "validation": lambda b: WithValidation(ChangeMLLM(target, b), scorer_for(target), m=2),
    }
    for name, make in makers.items():
        batched, single = ScriptedBackend(_by_colour), ScriptedBackend(_by_colour)
        together = explain_many(make(batched), errors, bench)
        one_by_one = [make(single).explain(e, bench) for e in errors]
        assert batched.batches == [3], name  # every error's question in one request
        assert single.batches == [1, 1, 1], name
        assert [e.text for e in together] == [e.text for e in one_by_one], name
        assert [e.candidates for e in together] == [e.candidates for e in one_by_one], name
        # each answer belongs to its own error: green errors get the colour cause
        assert ["green" in e.text for e in together] == [True, False, True], name


def test_cam_mllm_reads_many_overlays_in_one_request():
    from nemo_train.nemo.methods.base import explain_many

    target = cam_target()
    samples = [ErrorSample(f"c{i}", torch.rand(3, 16, 16), 0, 1) for i in range(3)]
    bench = NemoBenchmark("toy", ["a", "b"], "cmnist", samples, None)
    backend = ScriptedBackend(lambda messages: '{"cause_of_error": "The model looked at the corner."}')
    method = CamMLLM(target, backend)
    together = explain_many(method, samples, bench)
    assert backend.batches == [3]
    for sample, explanation in zip(samples, together):
        assert torch.allclose(explanation.details["gradcam"], method.explain(sample, bench).details["gradcam"])
        assert explanation.text == "The model looked at the corner."


def test_scitx_captions_uncaptioned_references_of_many_errors_in_one_request():
    import dataclasses

    from nemo_train.nemo.methods.base import explain_many
    from nemo_train.nemo.methods.scitx import MLLMCaptioner

    target = RedGreenTarget()
    bench = toy_benchmark(target)
    bench = dataclasses.replace(bench, reference=dataclasses.replace(bench.reference, captions=None))

    def reply(messages):
        text = messages[0]["content"][-1]["text"]
        if text == MLLMCaptioner.PROMPT:
            return "a square"
        return _by_colour(messages)

    backend = ScriptedBackend(reply)
    method = SciTX(target, MLLMHypothesizer(backend), scorer_for(target), k=2, m=1, captioner=MLLMCaptioner(backend))
    errors = toy_errors(bench)
    explanations = explain_many(method, errors, bench)
    # one request for the captions of every distinct retrieved reference, one for every error's hypotheses
    assert len(backend.batches) == 2 and backend.batches[1] == 3
    assert 1 <= backend.batches[0] <= 2 * 3
    assert all(e.details["observations"] == ["a square", "a square"] for e in explanations)
    assert ["green" in e.text for e in explanations] == [True, False, True]
