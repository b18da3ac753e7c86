"""ErrorRetrieval on a space trained on captions: phrase pairs ranked by the error's direction away from
its correctly classified class mates, the corpus built from the caption vocabulary, and the method's
configuration (a missing CLIP folder is a one-line error)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from nemo_toys import COLORS, PALETTE, VOCAB, RedGreenTarget, SolidRenderer, solid

from datamodules.captions import VOCABULARIES
from nemo_train.demo_steps import STEPS
from nemo_train.errors import UserInputError
from nemo_train.nemo.components.method_specs import BuildContext, ErrorRetrievalMethod
from nemo_train.nemo.methods.error_retrieval import ContrastRetrieval, caption_pairs
from nemo_train.nemo.methods.validation import WithValidation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver


class ColourSpace:
    """A hand-made joint space: an image embeds as its mean colour, "a <colour> digit" as that colour."""

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean((2, 3))

    def encode_text(self, texts) -> torch.Tensor:
        return torch.stack([PALETTE[next(i for i, c in enumerate(COLORS) if f" {c} " in f" {t} ")] for t in texts])


def benchmark() -> NemoBenchmark:
    # class 0 ("reddish") is recognised in red only; the error is a green image of class 0
    rows = [(0, 0), (0, 0), (2, 0), (1, 1), (1, 1)]  # (colour, label); the blue one of class 0 is misread
    images = torch.stack([solid(c) for c, _ in rows])
    labels = torch.tensor([y for _, y in rows])
    predictions = torch.tensor([0, 0, 1, 1, 1])
    attrs = [{"digit": 3, "color": c, "angle": 0} for c, _ in rows]
    reference = ReferenceSet(images, labels, predictions, images.mean((2, 3)), None, attrs, image_size=8)
    error = ErrorSample("e0", solid(1), label=0, prediction=1, attrs={"digit": 3, "color": 1, "angle": 0})
    return NemoBenchmark("toy", ["reddish", "greenish"], "cmnist", [error], reference, SolidRenderer(), VOCAB)


PAIRS = [(f"a {a} digit", f"a {b} digit") for a in COLORS for b in COLORS if a != b]


def test_contrast_direction_and_ranking_by_hand():
    bench = benchmark()
    method = ContrastRetrieval(ColourSpace(), PAIRS, k=8)
    sample = bench.errors[0]
    # correctly classified class-0 references: the two red ones (the blue one is misclassified)
    assert torch.allclose(method.direction(sample, bench), torch.tensor([-1.0, 1.0, 0.0]))
    # pair (a, b) scores direction . (t(a) - t(b)): green/red 2, green/blue 1, blue/red 1, ...
    scores = [
        float(
            torch.tensor([-1.0, 1.0, 0.0]) @ (PALETTE[COLORS.index(a.split()[1])] - PALETTE[COLORS.index(b.split()[1])])
        )
        for a, b in PAIRS
    ]
    ranking = method.ranking(sample, bench)
    assert scores[ranking[0]] == 2.0 and PAIRS[ranking[0]] == ("a green digit", "a red digit")
    assert [scores[i] for i in ranking] == sorted(scores, reverse=True)
    text = method.explain(sample, bench).text
    assert (
        text
        == "The error looks like a green digit, while correctly classified images of its class look like a red digit."
    )


def test_retrieved_contrast_gives_an_edit_and_a_positive_cei():
    bench = benchmark()
    target = RedGreenTarget()
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    method = ContrastRetrieval(ColourSpace(), PAIRS)
    explanation = WithValidation(method, scorer, m=2).explain(bench.errors[0], bench)
    assert "a red digit" in explanation.text
    assert explanation.trial.instruction == {"attribute": "color", "value": 0}  # re-rendered in red
    assert explanation.trial.cei > 50


def test_caption_pairs_cover_every_attribute_but_the_class():
    vocab = VOCABULARIES["cmnist"]
    pairs = caption_pairs(vocab, skip=["digit"])
    n_color, n_tilt = len(vocab.words["color"]), len(vocab.words["tilt"])
    assert len(pairs) == n_color * (n_color - 1) + n_tilt * (n_tilt - 1)
    assert ("a red digit", "a green digit") in pairs and ("a digit upright", "a digit tilted left") in pairs
    assert not any("the digit" in a or "the digit" in b for a, b in pairs)
    # every phrase is a zero-shot prompt, i.e. written as the space's training captions
    prompts = set(vocab.zero_shot_prompts("color")) | set(vocab.zero_shot_prompts("tilt"))
    assert {p for pair in pairs for p in pair} == prompts


def test_missing_clip_folder_is_one_line_error(tmp_path):
    bench = benchmark()
    ctx = BuildContext(bench, RedGreenTarget(), None, None)
    with pytest.raises(UserInputError, match="nemo-train fit --config configs/clip/synthetic.yaml"):
        ErrorRetrievalMethod(clip_model=str(tmp_path / "clip" / "hf")).make(ctx)
    random = ErrorRetrievalMethod(clip_model=None).make(ctx)
    assert random.name == "ErrorRetrieval(random CLIP)"


def test_shipped_presets_never_rank_with_a_random_clip_and_the_demo_passes_its_own():
    root = Path(__file__).resolve().parents[2]
    for preset in sorted((root / "configs" / "nemo").glob("*.yaml")):
        for method in yaml.safe_load(preset.read_text()).get("methods") or []:
            if isinstance(method, dict) and method["class_path"].endswith("ErrorRetrievalMethod"):
                assert method["init_args"].get("clip_model"), preset.name
    step = next(s for s in STEPS if s.name == "nemo_eval")
    (dotted,) = step.edits
    methods = yaml.safe_load((root / "configs" / step.preset).read_text())["methods"]
    assert dotted == "methods.1.init_args.clip_model" and methods[1]["class_path"].endswith(".ErrorRetrievalMethod")
    assert [s.name for s in STEPS].index("clip") < [s.name for s in STEPS].index("nemo_eval")
