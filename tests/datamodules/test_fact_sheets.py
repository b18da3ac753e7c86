"""Every generator's fact sheet agrees with what its renderer draws and with its datamodule's splits."""

import pytest
import torch
import torch.nn.functional as F

from datamodules.captions import TILT_ANGLES, TILT_WORDS, VOCABULARIES, tilt_index
from datamodules.clevr import CLEVRDataModule, CLEVRRenderer
from datamodules.cmnist import ANGLES, COLORS, CMNISTDataModule
from datamodules.fact_sheets import DEFAULT_EDITABLE, SHEETS, fact_sheet
from datamodules.facts import DatasetFacts, Factor
from datamodules.nico import CORRELATED_CONTEXT, NICODataModule
from datamodules.shifts import ShiftsDataModule
from nemo_train.errors import UserInputError

DATAMODULES = {
    "cmnist": lambda: CMNISTDataModule(train_size=100, test_styles=1),
    "clevr": lambda: CLEVRDataModule(image_size=16, train_size=24, test_styles=1),
    "nico": lambda: NICODataModule(image_size=16, train_size=60, test_per_pair=1),
    "shifts": lambda: ShiftsDataModule(train_size=100, test_size=50),
}


@pytest.fixture(scope="module", params=sorted(DATAMODULES))
def generated(request):
    datamodule = DATAMODULES[request.param]()
    datamodule.setup("test")
    return SHEETS[request.param], datamodule


def test_every_generator_has_a_sheet_named_as_its_dataset():
    # and the six causes of low competency, which corrupt another generator's images (no datamodule of their own)
    assert sorted(SHEETS) == sorted([*DATAMODULES, "six_causes"])
    assert all(fact_sheet(name).name == name for name in SHEETS)
    with pytest.raises(UserInputError, match="no fact sheet for dataset 'mnist'"):
        fact_sheet("mnist")
    assert DEFAULT_EDITABLE == ("color", "angle")  # the embedded default benchmark's (CMNIST's) editable factors


def test_sheet_lists_the_renderers_attributes_and_the_datamodules_classes(generated):
    facts, datamodule = generated
    attributes = datamodule.renderer.attributes
    assert [str(c) for c in attributes[facts.class_attribute]] == list(facts.classes)
    assert list(datamodule.class_names) == list(facts.classes)
    for factor in facts.factors:
        assert list(attributes[factor.name]) == list(factor.values), factor.name
    data = datamodule.test_set
    assert torch.equal(data.labels, data.attrs[facts.class_attribute])
    for factor in facts.factors:  # stored as an index (named values) or as the value itself (numbers)
        stored = data.attrs[factor.name].tolist()
        allowed = range(len(factor.values)) if factor.named else factor.values
        assert set(stored) <= set(allowed) and len(set(stored)) > 1, factor.name


def test_every_value_of_every_factor_draws_another_image(generated):
    facts, datamodule = generated
    base = {k: int(v[0]) for k, v in datamodule.test_set.attrs.items()}
    for factor in facts.factors:
        batch = {k: torch.tensor([v] * len(factor.values)) for k, v in base.items()}
        batch[factor.name] = torch.tensor([factor.stored(v) for v in factor.values])
        images = datamodule.renderer.render_batch(**batch).flatten(1)
        differ = torch.cdist(images, images) > 0
        assert int(differ.sum()) == len(factor.values) * (len(factor.values) - 1), factor.name


def test_sheet_cause_is_the_attribute_the_bias_ties_to_the_class(generated):
    facts, datamodule = generated
    if facts.cause is None:  # the shifts digits: every error has its own cause
        assert facts.name == "shifts" and facts.distractors == ["position"]
        return
    data = datamodule.test_set
    groups: dict[tuple[int, int], set[int]] = {}
    for label, value, group in zip(data.labels.tolist(), data.attrs[facts.cause].tolist(), data.groups.tolist()):
        groups.setdefault((label, value), set()).add(group)
    assert all(len(g) == 1 for g in groups.values())  # aligned or conflicting follows from class and cause alone
    assert {g for gs in groups.values() for g in gs} == {0, 1}
    assert facts.cause not in facts.distractors


def test_cmnist_colour_names_the_stroke_colour_drawn():
    facts, datamodule = SHEETS["cmnist"], DATAMODULES["cmnist"]()
    datamodule.setup("test")
    colors = facts.factor("color").values
    n = len(colors)
    images = datamodule.renderer.render_batch(
        torch.full((n,), 3), torch.arange(n), torch.zeros(n), torch.zeros(n, dtype=torch.long)
    )
    brightest = images.flatten(2).gather(2, images.sum(1).flatten(1).argmax(1)[:, None, None].expand(-1, 3, 1))[..., 0]
    palette = F.normalize(torch.tensor([COLORS[c] for c in colors]), dim=1)
    assert (F.normalize(brightest, dim=1) @ palette.T).argmax(1).tolist() == list(range(n))
    # the sheet's caption writes the angle as the benchmark captions do
    attrs = {"digit": 3, "color": colors.index("green"), "angle": 0}
    assert facts.caption(attrs) == "a green digit 3, upright"
    assert facts.caption({**attrs, "angle": -10}) == "a green digit 3, rotated -10 degrees"


def test_clevr_colour_size_and_material_are_what_the_ray_caster_draws():
    facts, renderer = SHEETS["clevr"], CLEVRRenderer(32)
    colors, sizes = facts.factor("color").values, facts.factor("size").values
    palette = torch.tensor([renderer.palette[i].tolist() for i in range(len(colors))])
    metal, rubber = facts.factor("material").stored("metal"), facts.factor("material").stored("rubber")

    def render(shape, material, color, size):
        n = max(len(v) if isinstance(v, torch.Tensor) else 1 for v in (shape, material, color, size))
        full = [torch.full((n,), v) if isinstance(v, int) else v for v in (shape, material, color, size)]
        return renderer.render_batch(*full, style=torch.zeros(n, dtype=torch.long))

    for shape in range(len(facts.classes)):
        images = render(shape, rubber, torch.arange(len(colors)), 1)
        mask = (images - images.mean(0)).abs().sum(1).sum(0) > 0.05  # the pixels the colour changes: the object
        means = torch.stack([image[:, mask].mean(1) for image in images])
        assert (F.normalize(means, dim=1) @ F.normalize(palette, dim=1).T).argmax(1).tolist() == list(range(8))
        areas = []
        for size in range(len(sizes)):
            pair = render(shape, rubber, torch.tensor([1, 6]), size)
            areas.append(int(((pair[0] - pair[1]).abs().sum(0) > 0.05).sum()))
        assert areas == sorted(areas) and len(set(areas)) == 3  # small < medium < large
        for color in range(1, len(colors)):  # chromatic colours: metal mirrors a grey world, rubber shows its colour
            pair = render(shape, torch.tensor([metal, rubber]), color, 1)
            mask = (pair[0] - pair[1]).abs().sum(0) > 0.05
            chroma = [float((im[:, mask].max(0).values - im[:, mask].min(0).values).mean()) for im in pair]
            assert chroma[0] < chroma[1], (shape, colors[color])


def test_nico_cause_is_the_correlated_context():
    facts, datamodule = SHEETS["nico"], DATAMODULES["nico"]()
    datamodule.setup("fit")
    data, contexts = datamodule.train_set, facts.factor("context").values
    for label, name in enumerate(facts.classes):
        shown = data.attrs["context"][data.labels == label]
        assert int(torch.mode(shown).values) == contexts.index(CORRELATED_CONTEXT[name])


def test_caption_vocabularies_are_the_sheets_caption_words():
    for source, vocabulary in VOCABULARIES.items():
        facts = SHEETS[source]
        assert list(vocabulary.words)[0] == facts.class_attribute
        assert list(vocabulary.words.values()) == list(facts.caption_words.values())
    assert VOCABULARIES["cmnist"].words["digit"][3] == "three" and list(VOCABULARIES["cmnist"].words)[2] == "tilt"
    assert VOCABULARIES["clevr"].words["material"] == ["shiny metal", "matte rubber"]
    # the tilt words bin the rotations as tilt_index does, on the grid and between its angles
    angle = SHEETS["cmnist"].factor("angle")
    assert TILT_WORDS == ["tilted right", "upright", "tilted left"]
    assert [TILT_WORDS[int(i)] for i in tilt_index(torch.tensor(ANGLES))] == list(angle.caption_words)
    assert sum(TILT_ANGLES, ()) == tuple(ANGLES) and TILT_ANGLES[1] == (-5, 0, 5)
    assert tilt_index(torch.tensor([-12.5, 7.0, 9.9, 10.0])).tolist() == [0, 1, 1, 2]


def test_sheet_rejects_a_cause_it_does_not_list_and_misaligned_caption_words():
    color = Factor("color", ("red", "green"), "colour")
    with pytest.raises(ValueError, match="cause 'angle' is not a factor"):
        DatasetFacts("toy", ("a", "b"), "label", "thing", (color,), cause="angle")
    with pytest.raises(ValueError, match="1 caption words for 2 values"):
        Factor("color", ("red", "green"), "colour", caption_words=("reddish",))
    with pytest.raises(ValueError, match="1 class words for 2 classes"):
        DatasetFacts("toy", ("a", "b"), "label", "thing", (color,), class_words=("x",))
    toy = DatasetFacts("toy", ("a", "b"), "label", "thing", (color,), class_words=("ay", "bee"))
    assert toy.caption_words == {"label": ["ay", "bee"], "color": ["red", "green"]}
