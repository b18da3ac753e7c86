"""The evaluation loop keeps each error's image and its edited image as PNG files named by the record."""

from __future__ import annotations

import numpy as np
import torch
from nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid
from PIL import Image

from nemo_train.nemo.evaluation import Progress, TargetJob, run_target
from nemo_train.nemo.methods.base import Explanation
from nemo_train.nemo.record_images import safe_name, save_record_images
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.scoring.judges import JudgePanel, KeywordJudge
from nemo_train.store import ResultStore


class NamesColour:
    name = "Names colour"

    def explain(self, sample, benchmark):
        return Explanation("The green colour made it look like another class; it would be right in red.")


def test_records_name_the_error_image_and_the_edited_image_written_beside_them(tmp_path):
    target = RedGreenTarget()
    errors = [ErrorSample(f"e/{i}", solid(1), 0, 1, {"digit": 3, "color": 1, "angle": 0, "style": 0}) for i in range(2)]
    bench = NemoBenchmark("toy", target.class_names, "cmnist", errors, None, SolidRenderer(), VOCAB)
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    store = ResultStore(tmp_path / "results.jsonl")
    job = TargetJob("toy", bench, scorer, JudgePanel([KeywordJudge("cmnist")]), [(NamesColour(), {"v": 1})])
    run_target(job, store, Progress(), show_bar=False)
    first, second = (store.get(f"toy|Names colour|e/{i}") for i in range(2))
    assert first["label_name"] == "reddish" and first["prediction_name"] == "greenish"
    assert first["image_file"] != second["image_file"]  # a "/" in the sample id makes no folder and no clash
    assert first["image_file"].startswith("images/toy/") and "/Names_colour-" in first["edited_image_file"]
    original = Image.open(tmp_path / first["image_file"])
    edited = Image.open(tmp_path / first["edited_image_file"])
    assert original.size == (8, 8) and original.getpixel((3, 3)) == (0, 255, 0)  # the green error
    assert edited.getpixel((3, 3)) == (255, 0, 0)  # the colour edit re-rendered it red
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_png_holds_the_image_in_8_bits_and_the_error_image_is_written_once(tmp_path):
    image = torch.rand(3, 5, 7, generator=torch.Generator().manual_seed(0))
    record = {"target": "t", "method": "m", "sample_id": "s", "label": 1, "prediction": 0}
    fields = save_record_images(tmp_path, record, image, None)
    decoded = np.asarray(Image.open(tmp_path / fields["image_file"]))
    assert np.array_equal(decoded, (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy())
    assert fields["edited_image_file"] is None and fields["label_name"] is None  # no edit, no class names
    stamp = (tmp_path / fields["image_file"]).stat().st_mtime_ns
    save_record_images(tmp_path, {**record, "method": "other"}, torch.zeros(3, 5, 7), None)
    assert (tmp_path / fields["image_file"]).stat().st_mtime_ns == stamp  # shared by the methods, kept


def test_safe_names_keep_plain_names_and_tell_others_apart():
    assert safe_name("model_a") == "model_a" and safe_name("e12.v2") == "e12.v2"
    assert safe_name("a/b") != safe_name("a b") and "/" not in safe_name("a/b")
    assert safe_name("..") not in ("", "..", ".")
