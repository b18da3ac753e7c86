"""Image-explanation pairs: JSONL format, label mask, batching, bad input, builders."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from datamodules.explanations import (  # noqa: E402
    ConversationEncoder,
    ExplanationCollator,
    ExplanationDataModule,
    ExplanationPairsDataset,
    ExplanationRecord,
    build_messages,
    build_six_cause_pairs,
    read_records,
    to_pil,
    write_records,
)
from datamodules.six_causes import CAUSES  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.vlm import TINY_MODEL, load_processor  # noqa: E402
from nemo_train.vocabulary import EXPLANATIONS, is_correct  # noqa: E402


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    torch.set_num_threads(1)
    os.environ["NEMO_TRAIN_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return load_processor("embedded:tiny-qwen2-vl")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, processor):
    return build_six_cause_pairs(tmp_path_factory.mktemp("pairs"), per_cause=3, seed=0, val_fraction=0.34)


def _image(path, value=0.5):
    to_pil(torch.full((3, 28, 28), value)).save(path)
    return str(path)


def test_builder_writes_balanced_pairs_with_correct_reference_explanations(pairs):
    records = read_records(pairs["train"]) + read_records(pairs["val"])
    assert len(records) == 3 * len(CAUSES)
    assert sorted(r.cause for r in records) == sorted(list(CAUSES) * 3)
    assert 0 < len(read_records(pairs["val"])) < len(records)
    for record in records:
        assert os.path.isfile(record.image) and os.path.isfile(record.counterfactual)
        assert record.explanation in EXPLANATIONS[record.cause]
        assert is_correct(record.explanation, record.cause)
    # paths are stored relative to the JSONL's folder
    first = json.loads(pairs["train"].read_text().splitlines()[0])
    assert not os.path.isabs(first["image"]) and first["image"].startswith("images/")


def test_label_mask_covers_exactly_the_assistant_tokens(processor, tmp_path):
    encoder = ConversationEncoder(processor, max_length=512)
    image = to_pil(torch.rand(3, 28, 28))
    answer = "The image is pixelated."
    sample = encoder.encode(image, "Why?", answer, system="You explain errors.")
    ids, labels = sample["input_ids"][0], sample["labels"][0]
    # independent reference: the generation prompt alone is a strict prefix of the conversation
    prompt = encoder.prompt_inputs(image, "Why?", system="You explain errors.")["input_ids"][0]
    assert torch.equal(ids[: len(prompt)], prompt)
    answer_ids = processor.tokenizer(answer, add_special_tokens=False)["input_ids"]
    end_id = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    expected = torch.full_like(ids, -100)
    expected[len(prompt) : len(prompt) + len(answer_ids) + 1] = torch.tensor([*answer_ids, end_id])
    assert torch.equal(labels, expected)
    assert processor.tokenizer.decode(labels[labels != -100]) == answer + "<|im_end|>"
    # the image tokens are all there: one per merged 2x2 patch group
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((ids == image_id).sum()) == int(sample["image_grid_thw"].prod()) // 4


def test_collator_pads_right_and_concatenates_patches(processor):
    encoder = ConversationEncoder(processor)
    a = encoder.encode(to_pil(torch.rand(3, 28, 28)), "Why?", "Noise.")
    b = encoder.encode(to_pil(torch.rand(3, 28, 56)), "Why?", "The image is covered in random noise.")
    pad = processor.tokenizer.pad_token_id
    batch = ExplanationCollator(pad)([a, b])
    length = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    assert batch["input_ids"].shape == (2, length)
    short = 0 if a["input_ids"].shape[1] < length else 1
    n = [a, b][short]["input_ids"].shape[1]
    assert (batch["input_ids"][short, n:] == pad).all() and (batch["labels"][short, n:] == -100).all()
    assert (batch["attention_mask"][short, n:] == 0).all() and (batch["attention_mask"][short, :n] == 1).all()
    assert batch["pixel_values"].shape[0] == a["pixel_values"].shape[0] + b["pixel_values"].shape[0]
    assert batch["image_grid_thw"].shape == (2, 3)


def test_bad_pairs_are_skipped_and_counted(processor, tmp_path):
    good = _image(tmp_path / "good.png")
    (tmp_path / "broken.png").write_bytes(b"not a png at all")
    records = [
        ExplanationRecord(image=good, explanation="The image is pixelated."),
        ExplanationRecord(image=str(tmp_path / "missing.png"), explanation="The image is pixelated."),
        ExplanationRecord(image=good, explanation="   "),
        ExplanationRecord(image=str(tmp_path / "broken.png"), explanation="The image is pixelated."),
        ExplanationRecord(image=good, explanation="noise " * 300),
    ]
    with pytest.warns(
        UserWarning, match=r"skipped 4 of 5 pairs.*1 empty explanation.*1 missing image.*too long.*1 unreadable image"
    ):
        dataset = ExplanationPairsDataset(records, ConversationEncoder(processor, max_length=128))
    assert len(dataset) == 1
    assert dict(dataset.skipped) == {
        "missing image": 1,
        "empty explanation": 1,
        "unreadable image": 1,
        "too long (> 128 tokens)": 1,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UserInputError, match="no usable image-explanation pair"):
            ExplanationPairsDataset(records[1:], ConversationEncoder(processor, max_length=128))


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"image": "a.png", "explanation": "x"}\n{not json}\n')
    with pytest.raises(UserInputError, match=r"pairs.jsonl:2 is not valid JSON"):
        read_records(path)
    path.write_text('{"explanation": "x"}\n')
    with pytest.raises(UserInputError, match=r":1 has no 'image'"):
        read_records(path)
    path.write_text('{"image": "a.png", "explenation": "x"}\n')
    with pytest.raises(UserInputError, match="unknown key"):
        read_records(path)
    with pytest.raises(UserInputError, match="does not exist"):
        read_records(tmp_path / "nope.jsonl")


def test_records_round_trip(tmp_path):
    (tmp_path / "img").mkdir()
    image = _image(tmp_path / "img" / "a.png")
    record = ExplanationRecord(image=image, explanation="Noise.", cause="noise", label=3, prediction=5)
    path = write_records([record], tmp_path / "pairs.jsonl")
    assert json.loads(path.read_text())["image"] == "img/a.png"
    assert read_records(path) == [record]


def test_datamodule_batches_and_side_by_side_counterfactual(processor, pairs):
    dm = ExplanationDataModule(
        TINY_MODEL,
        load_processor,
        train_jsonl=str(pairs["train"]),
        val_jsonl=str(pairs["val"]),
        use_counterfactual=True,
        batch_size=4,
    )
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 4 and batch["labels"].shape == batch["input_ids"].shape
    # 28x56 side-by-side pictures: 8 x 14 patches of 4 pixels each (height resized up to 32)
    assert batch["image_grid_thw"][0].tolist() == [1, 8, 14]
    assert len(dm.val_records) == len(read_records(pairs["val"]))
    assert dm.prompt_settings()["use_counterfactual"] is True
    with pytest.raises(UserInputError, match="val_jsonl is set without train_jsonl"):
        ExplanationDataModule(TINY_MODEL, val_jsonl=str(pairs["val"]))


def test_messages_layout():
    messages = build_messages("Why?", "ctx", "Because.")
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[1]["content"][0] == {"type": "image"}


def test_sixteen_bit_grey_images_are_scaled_not_clipped(tmp_path):
    import numpy as np
    from PIL import Image

    path = tmp_path / "wide.png"
    Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16)).save(path)  # 32896 / 257 = 128
    assert Image.open(path).mode.startswith("I")
    assert np.asarray(to_pil(path))[0, 0].tolist() == [128, 128, 128]


# ------------------------------------------------------------------------------------- shifts captions


def test_shift_caption_pairs_are_valid_records(tmp_path):
    from datamodules.explanations.caption_pairs import (
        CAPTION_PROMPT,
        build_shift_caption_pairs,
        facts_named,
        parse_caption,
    )

    facts = facts_named("shifts")
    paths = build_shift_caption_pairs(tmp_path, size=12, seed=0, val_fraction=0.25, shifted_share=0.5)
    train, val = read_records(paths["train"]), read_records(paths["val"])
    assert (len(train), len(val)) == (9, 3)
    for record in train + val:
        assert to_pil(record.image).size == (32, 32)
        assert record.cause == "caption" and record.prompt == CAPTION_PROMPT.format(class_name=str(record.label))
        parsed = parse_caption(record.explanation, facts)
        assert None not in parsed.values() and parsed["digit"] == str(record.label)
    first = json.loads(paths["train"].read_text().splitlines()[0])
    assert first["image"].startswith("images/")
    # the shifted half: exactly one cause factor off its typical value; the rest varies freely
    typical = {f.name: str(f.typical) for f in facts.factors if f.typical is not None}
    off = [sum(parse_caption(r.explanation, facts)[k] != v for k, v in typical.items()) for r in train + val]
    assert off.count(1) >= 6


def test_caption_parsing_and_accuracy_worked_by_hand():
    from datamodules.explanations.caption_pairs import caption_accuracy, facts_named, parse_caption

    facts = facts_named("shifts")
    reference = "a small dotted red digit 3, rotated 45 degrees clockwise, on a striped background, at the left"
    assert parse_caption(reference, facts) == {
        "digit": "3",
        "color": "red",
        "style": "dotted",
        "angle": "-45",
        "background": "stripes",
        "scale": "small",
        "position": "left",
    }
    # free text: a factor counts when exactly one of its values is named ("anticlockwise" is not "clockwise")
    loose = parse_caption("a red digit 3 rotated 45 degrees anticlockwise, small, dotted and outlined", facts)
    assert (loose["color"], loose["angle"], loose["scale"], loose["style"], loose["background"]) == (
        "red",
        "45",
        "small",
        None,
        None,
    )
    generated = [
        reference,  # all right
        "a normal-sized dotted red digit 3, upright, on a striped background, at the left",  # scale, angle wrong
        "a small solid white digit 8",  # digit, colour, style wrong; angle, background, position missing
    ]
    result = caption_accuracy(generated, [reference] * 3, facts)
    assert result["digit"] == pytest.approx(2 / 3)
    assert result["color"] == pytest.approx(2 / 3) and result["style"] == pytest.approx(2 / 3)
    assert result["angle"] == pytest.approx(1 / 3) and result["scale"] == pytest.approx(2 / 3)
    assert result["background"] == pytest.approx(2 / 3) and result["position"] == pytest.approx(2 / 3)
    factors = [2 / 3, 2 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3]  # colour, style, angle, background, scale, position
    assert result["average"] == pytest.approx(sum(factors) / 6)
    with pytest.raises(UserInputError, match="does not state"):
        caption_accuracy(["x"], ["not a caption"], facts)


def test_known_shift_answers_are_graded_field_by_field(tmp_path):
    from datamodules.explanations.shift_pairs import answer_fields, build_known_shift_pairs, score_answer

    reference = (
        '{"cause_of_error": "The classifier read this 3 as a 8 because of the -45 degree rotation. Edit: angle -> 0"}'
    )
    assert answer_fields(reference) == {
        "factor": "angle",
        "value": "-45 degree rotation",
        "true": "3",
        "pred": "8",
        "edit": "angle -> 0",
    }
    wrong_sign = reference.replace("-45 degree", "45 degree")
    assert score_answer(wrong_sign, reference) == {
        "factor": True,
        "value": False,
        "classes": True,
        "all": False,
        "exact": False,
    }
    wrong_factor = (
        '{"cause_of_error": "The classifier read this 3 as a 8 because of the small size. Edit: scale -> normal"}'
    )
    assert score_answer(wrong_factor, reference)["factor"] is False
    assert score_answer(reference.replace("as a 8", "as a 5"), reference)["classes"] is False
    assert all(score_answer(reference, reference).values())
    assert not any(score_answer("garbage", reference).values())
    # the builder: one shifted factor named per pair, class names from the question
    paths = build_known_shift_pairs(tmp_path, size=10, seed=0, val_fraction=0.2)
    for record in read_records(paths["train"]) + read_records(paths["val"]):
        fields = answer_fields(record.explanation)
        assert fields["factor"] == record.cause and record.label != record.prediction
        assert f'"{fields["true"]}" a "{fields["pred"]}"' in record.prompt
        assert (int(fields["true"]), int(fields["pred"])) == (record.label, record.prediction)


def test_cause_balanced_sampling_draws_every_cause_equally_often():
    from datamodules.explanations.datamodule import cause_balanced_sampler

    records = [ExplanationRecord(image=f"{i}.png", explanation="x", cause="color" if i < 90 else "angle")
               for i in range(100)]  # fmt: skip
    torch.manual_seed(0)
    sampler = cause_balanced_sampler(records)
    assert len(sampler) == 100
    drawn = [records[i].cause for _ in range(100) for i in sampler]  # 10,000 draws
    share = drawn.count("angle") / len(drawn)  # 10 % of the pairs, half of the draws
    assert 0.45 < share < 0.55  # binomial sd 0.005: outside only with probability ~1e-23
    weights = sampler.weights
    assert weights[:90].sum().item() == pytest.approx(weights[90:].sum().item())  # exactly equal by construction


def test_the_datamodule_draws_training_pairs_cause_balanced_only_when_asked(processor, pairs):
    from torch.utils.data import RandomSampler, SequentialSampler, WeightedRandomSampler

    def loaders(balance):
        dm = ExplanationDataModule(TINY_MODEL, load_processor, train_jsonl=str(pairs["train"]),
                                   val_jsonl=str(pairs["val"]), balance=balance)  # fmt: skip
        dm.setup("fit")
        return dm.train_dataloader().sampler, dm.val_dataloader().sampler, dm

    train, val, dm = loaders("cause")
    assert isinstance(train, WeightedRandomSampler) and isinstance(val, SequentialSampler)
    causes = [r.cause for r in dm.train_set.records]
    assert len(set(causes)) > 1
    for cause in set(causes):  # every cause the same total weight
        total = sum(w for w, c in zip(train.weights.tolist(), causes) if c == cause)
        assert total == pytest.approx(1.0)
    assert isinstance(loaders("none")[0], RandomSampler)
