"""ObjectNet / ImageNet-D use the shipped mappings; the reference images come from an ImageNet folder as
distributed; ImageNet-D's nuisance folders are read as one dataset."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import torch
from PIL import Image

from nemo_train.models.class_mapping import ClassMapping
from nemo_train.nemo.components.settings import BenchmarkArgs
from nemo_train.scoring.folder_benchmark import list_image_folder, reference_files


def _write(path, rgb=(0, 0, 0)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (10, 10), rgb).save(path)


def test_objectnet_and_imagenet_d_presets_need_no_mapping_file(tmp_path):
    _write(tmp_path / "objectnet" / "alarm_clock" / "a.png")
    mapping, names = BenchmarkArgs(name="objectnet", data_root=str(tmp_path / "objectnet")).classes()
    assert len(names) == 113 and names[0] == "Alarm clock" and mapping.folders[0] == "alarm_clock"
    assert mapping.ids[0] == [409, 530]
    logits = torch.full((1, 1000), -5.0)
    logits[0, 530] = 5.0  # digital clock
    assert mapping.predict(logits).tolist() == [0]
    _write(tmp_path / "imagenet_d" / "background" / "tie" / "a.png")
    mapping, names = BenchmarkArgs(name="imagenet_d", data_root=str(tmp_path / "imagenet_d")).classes()
    assert len(names) == 113 and mapping.ids[mapping.folders.index("tie")] == [457, 906]


def test_for_folder_recognises_shipped_class_folders(tmp_path):
    shipped = ClassMapping.shipped("imagenet_d")
    for folder in shipped.folders:
        (tmp_path / "d" / "texture" / folder).mkdir(parents=True)
    _write(tmp_path / "d" / "texture" / "wok" / "1.png")
    assert ClassMapping.for_folder(tmp_path / "d").folders == shipped.folders
    _write(tmp_path / "r" / "n01443537" / "1.png")  # ImageNet-R style: WordNet-id folders
    assert ClassMapping.for_folder(tmp_path / "r").ids == [[1]]


def test_imagenet_d_nuisance_folders_and_an_imagenet_reference(tmp_path):
    for group, n in (("background", 2), ("material", 1)):
        for i in range(n):
            _write(tmp_path / "d" / group / "mug" / f"{i}.png")
    _write(tmp_path / "d" / "texture" / "wok" / "0.png")
    folders, paths, labels = list_image_folder(tmp_path / "d", ["mug", "wok"])
    assert labels.tolist() == [0, 0, 0, 1] and sum("material" in p for p in paths) == 1

    val = tmp_path / "val"
    for n in (1, 2, 3):
        _write(val / f"ILSVRC2012_val_{n:08d}.JPEG")
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00000001,n03063599 1 1 2 2\n"  # coffee mug (504) -> mug
        "ILSVRC2012_val_00000002,n01440764 1 1 2 2\n"  # tench: no class of the benchmark
        "ILSVRC2012_val_00000003,n04596742 1 1 2 2\n"  # wok (909)
    )
    ref_paths, ref_labels = reference_files(val, ["mug", "wok"], [[504], [909]])
    assert [p[-7:] for p in ref_paths] == ["01.JPEG", "03.JPEG"] and ref_labels.tolist() == [0, 1]
    _write(tmp_path / "synsets" / "n04596742" / "x.png")
    _write(tmp_path / "synsets" / "n01440764" / "y.png")
    assert reference_files(tmp_path / "synsets", ["mug", "wok"], [[504], [909]])[1].tolist() == [1]
