"""The shipped ObjectNet / ImageNet-D class mappings: they parse, every target is a real ImageNet-1k class, and
the counts match the published ones."""

import json

import pytest
from timm.data import ImageNetInfo

from datamodules.mappings import MAPPINGS_DIR, SHIPPED, objectnet_folders, read_mapping, shipped_mapping
from nemo_train.errors import UserInputError

INFO = ImageNetInfo()
DESCRIPTIONS = [INFO.index_to_description(i) for i in range(1000)]


@pytest.mark.parametrize("benchmark", sorted(SHIPPED))
def test_every_target_is_a_valid_imagenet_class_named_as_in_imagenet(benchmark):
    path = shipped_mapping(benchmark)
    classes = read_mapping(path)
    rows = json.loads(path.read_text())["classes"]
    assert len(classes) == len(rows) == 113
    for row, mapped in zip(rows, classes):
        assert all(0 <= i < 1000 for i in mapped.imagenet_ids)
        assert [DESCRIPTIONS[i] for i in row["imagenet_ids"]] == row["imagenet_names"]
    assert len({i for c in classes for i in c.imagenet_ids}) == 125  # no ImageNet class counted twice


def test_objectnet_counts_match_the_published_ones():
    folders = objectnet_folders()
    classes = read_mapping(shipped_mapping("objectnet"))
    assert len(folders) == 313  # ObjectNet's classes
    assert len(classes) == 113  # of which overlap ImageNet-1k
    assert all(folders[c.folder] == c.name for c in classes)
    by_name = {c.name: [DESCRIPTIONS[i] for i in c.imagenet_ids] for c in classes}
    assert by_name["Alarm clock"] == ["analog clock", "digital clock"]
    assert by_name["Chair"] == ["barber chair", "folding chair", "rocking chair, rocker"]


def test_imagenet_d_covers_the_same_classes_as_objectnet():
    objectnet = {frozenset(c.imagenet_ids) for c in read_mapping(shipped_mapping("objectnet"))}
    imagenet_d = read_mapping(shipped_mapping("imagenet_d"))
    assert {frozenset(c.imagenet_ids) for c in imagenet_d} == objectnet
    assert [c.folder for c in imagenet_d][:3] == ["alarm_clock", "backpack", "banana"]
    assert (MAPPINGS_DIR / "README.md").is_file() and shipped_mapping("imagenet_r") is None


def test_user_mapping_files_are_checked(tmp_path):
    plain = tmp_path / "m.json"
    plain.write_text('{"cup": [968], "mug": 504}')
    assert [(c.folder, c.imagenet_ids) for c in read_mapping(plain)] == [("cup", (968,)), ("mug", (504,))]
    plain.write_text('{"cup": [1000]}')
    with pytest.raises(UserInputError, match="maps to id 1000"):
        read_mapping(plain)
    plain.write_text('{"cup": []}')
    with pytest.raises(UserInputError, match="no ImageNet id"):
        read_mapping(plain)
    plain.write_text("{not json")
    with pytest.raises(UserInputError, match="not valid UTF-8 JSON"):
        read_mapping(plain)
