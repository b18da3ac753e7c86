"""The five counterfactual generators on a toy estimator whose competency rises as images darken."""

import pytest
import torch
from competency_toys import constant_images

from nemo_train.competency.counterfactuals import LatentNearestNeighbor, ReconstructionCounterfactual, vector_distance
from nemo_train.competency.gradient_counterfactuals import (
    FeatureGradientDescent,
    ImageGradientDescent,
    LatentGradientDescent,
    paper_methods,
)
from nemo_train.errors import UserInputError

CLASSES = {
    "IGD": ImageGradientDescent,
    "FGD": FeatureGradientDescent,
    "Reco": ReconstructionCounterfactual,
    "LGD": LatentGradientDescent,
    "LNN": LatentNearestNeighbor,
}


def build_generator(name, estimator, **options):
    """The generator class ``name`` built with ``options`` and bound to ``estimator``."""
    return CLASSES[name](**options).bind(estimator)


LOW = [0.40, 0.42, 0.45]  # competency 0.83, 0.78, 0.68 under the toy estimator (threshold 0.9)
HIGH = 0.2  # competency 0.99


@pytest.mark.parametrize("name", ["IGD", "FGD"])
def test_pixel_methods_raise_the_score_and_stop_per_image(toy_estimator, name):
    images = constant_images(LOW + [HIGH])
    before = toy_estimator(images).detach()
    options = {"distance": "l2"} if name == "IGD" else {}
    result = build_generator(name, toy_estimator, lr=0.01, **options)(images)
    assert (result.scores[:3] > before[:3]).all() and result.success.all()
    # the already-competent image is untouched and not counted as processed
    assert torch.equal(result.images[3], images[3]) and result.iterations[3] == 0 and result.processed == 3
    # images closer to the threshold finish in fewer steps, and are frozen there (score just above 0.9)
    steps = result.iterations[:3].tolist()
    assert steps == sorted(steps) and steps[0] < steps[2]
    assert (result.scores[:3] < 0.95).all()
    assert result.seconds_per_image == pytest.approx(result.seconds / 3)


def test_batch_wide_stopping_keeps_updating_every_image(toy_estimator):
    images = constant_images(LOW)
    per_image = build_generator("IGD", toy_estimator, lr=0.01, distance="l2")(images)
    batch = build_generator("IGD", toy_estimator, lr=0.01, distance="l2", stopping="batch")(images)
    assert len(set(batch.iterations.tolist())) == 1 and batch.iterations[0] == per_image.iterations.max()
    # the easy images overshoot under the batch rule: they kept moving after passing
    assert (batch.scores[:2] > per_image.scores[:2]).all()


def test_pixels_are_clamped_unless_asked_not_to(toy_estimator):
    images = constant_images([0.45])
    images[:, :, :, :4] = 0.0
    images[:, :, :, 4:] = 0.9  # mean 0.45; unclamped, the optimisation leaves [0, 1]
    clamped = build_generator("IGD", toy_estimator, lr=0.01, distance="l1")(images)
    free = build_generator("IGD", toy_estimator, lr=0.01, distance="l1", clamp_pixels=False)(images)
    assert clamped.images.min() >= 0 and clamped.images.max() <= 1
    assert free.images.min() < 0 or free.images.max() > 1


def test_log_score_objective_moves_images_whose_score_has_underflowed(toy_estimator):
    # tight class statistics: an image at 0.32 has loss 0.1024, 224 standard deviations past 2 * mu,
    # so its score is exactly 0 and has no gradient; darkening it below 0.283 makes it competent
    toy_estimator.class_means.fill_(0.04)
    toy_estimator.class_stds.fill_(1e-4)
    images = constant_images([0.32])
    assert float(toy_estimator(images).detach()) == 0.0
    paper = build_generator("IGD", toy_estimator, lr=0.01, distance="l2", max_iter=20)(images)
    assert not paper.success.any() and torch.equal(paper.images, images)
    logged = build_generator("IGD", toy_estimator, lr=0.01, distance="l2", max_iter=20, objective="log_score")(images)
    assert logged.success.all() and 0 < logged.iterations[0] < 20
    assert float(logged.images.mean()) < 0.29


def test_igd_with_the_perceptual_distance_also_succeeds(toy_estimator):
    from nemo_train.metrics import perceptual

    perceptual._warn_once.cache_clear()  # the fallback warns once per process
    with pytest.warns(UserWarning, match="1-ssim"):
        generator = build_generator("IGD", toy_estimator, lr=0.01)
    assert generator.distance_name == "1-ssim"
    result = generator(constant_images(LOW))
    assert result.success.all()


def test_lgd_raises_the_score_of_the_reconstruction_it_starts_from(latent_estimator):
    images = constant_images([0.5, 0.55, 0.6])  # reconstructions at 0.45-0.54: still low competency
    reco = build_generator("Reco", latent_estimator)(images)
    assert not reco.success.any()
    lgd = build_generator("LGD", latent_estimator, lr=0.05)(images)
    assert lgd.success.all() and (lgd.scores > reco.scores).all()
    assert (lgd.iterations > 0).all() and not torch.allclose(lgd.images, reco.images)


def test_lgd_escapes_an_underflowed_score_only_with_the_log_objective(latent_estimator):
    # decoded intensity v has loss (0.1 v)^2; with these statistics only v <= 0.283 is in distribution and the
    # reconstruction of a 0.6 image (v = 0.54) lies 2100 standard deviations out: score exactly 0, no gradient
    latent_estimator.class_means.fill_(4e-4)
    latent_estimator.class_stds.fill_(1e-6)
    images = constant_images([0.6])
    paper = build_generator("LGD", latent_estimator, lr=0.1, max_iter=30)(images)
    assert not paper.success.any() and paper.scores[0] == 0
    assert (
        float(paper.images.mean()) > 0.53
    )  # no pull towards the dark, competent region from the reconstruction at 0.54
    logged = build_generator("LGD", latent_estimator, lr=0.1, max_iter=30, objective="log_score")(images)
    assert logged.success.all() and float(logged.images.mean()) < 0.2834


def test_reco_is_the_autoencoder_output(latent_estimator):
    images = constant_images(LOW)
    result = build_generator("Reco", latent_estimator)(images)
    assert torch.allclose(result.images, 0.9 * images)
    assert (result.iterations == 0).all()


@pytest.mark.parametrize("distance", ["l1", "l2", "cos"])
def test_lnn_decodes_the_nearest_competent_latent(latent_estimator, distance):
    toy_estimator = latent_estimator
    autoencoder = toy_estimator.autoencoder
    bank_images = constant_images([0.1, 0.2, 0.3, 0.6])  # the last one is not competent and stays out
    assert (toy_estimator(bank_images) >= 0.9).tolist() == [True, True, True, False]
    lnn = LatentNearestNeighbor(distance=distance).bind(toy_estimator).fit(bank_images)
    assert len(lnn.bank) == 3
    images = constant_images(LOW)
    result = lnn(images)
    with torch.no_grad():
        z, bank = autoencoder.encode(images), autoencoder.encode(bank_images[:3])
        dist = torch.stack([vector_distance(z, b.expand_as(z), distance) for b in bank], 1)
        expected = autoencoder.decode(bank[dist.argmin(1)])
    assert torch.allclose(result.images, expected)
    if distance != "cos":  # nearest by intensity: the brightest competent image, 0.3 -> 0.27 after decoding
        assert torch.allclose(result.images, torch.full_like(images, 0.27), atol=1e-4)


def test_vector_distances_by_hand():
    a, b = torch.tensor([[1.0, 0.0], [3.0, 4.0]]), torch.tensor([[0.0, 1.0], [3.0, 0.0]])
    assert torch.allclose(vector_distance(a, b, "cos"), torch.tensor([0.0, -0.6]))
    assert torch.allclose(vector_distance(a, b, "l1"), torch.tensor([2.0, 4.0]))
    assert torch.allclose(vector_distance(a, b, "l2"), torch.tensor([2**0.5, 4.0]))


def test_bad_settings_give_clear_errors(toy_estimator):
    with pytest.raises(UserInputError, match="threshold"):
        ReconstructionCounterfactual(threshold=1.2)
    with pytest.raises(UserInputError, match="lr="):
        LatentGradientDescent(lr=-1.0)
    with pytest.raises(UserInputError, match="bind"):
        ReconstructionCounterfactual()(constant_images(LOW))
    with pytest.raises(UserInputError, match="fit"):
        build_generator("LNN", toy_estimator)(constant_images(LOW))
    with pytest.raises(UserInputError, match=r"\[B, 3, 8, 8\]"):
        build_generator("Reco", toy_estimator)(torch.rand(1, 3, 9, 9))


def test_generators_report_their_options_and_the_paper_defaults():
    assert [g.name for g in paper_methods()] == ["IGD", "FGD", "Reco", "LGD", "LNN"]
    lgd = LatentGradientDescent(lr=0.1, objective="log_score")
    assert lgd.options() == {
        "distance": "cos",
        "lr": 0.1,
        "gamma": 0.1,
        "max_iter": 100,
        "stopping": "per_image",
        "objective": "log_score",
        "threshold": None,
    }
    assert lgd.class_path() == "nemo_train.competency.gradient_counterfactuals.LatentGradientDescent"


@pytest.mark.parametrize(
    ("init_args", "option"),
    [
        ({"stopping": "never"}, "stopping"),
        ({"objective": "loss"}, "objective"),
        ({"distance": "manhattan"}, "distance"),
    ],
)
def test_choices_are_validated_by_their_types(init_args, option):
    from jsonargparse import ArgumentParser

    from nemo_train.competency.counterfactuals import CounterfactualGenerator

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--method", type=CounterfactualGenerator)
    config = {"class_path": "nemo_train.competency.gradient_counterfactuals.LatentGradientDescent"}
    with pytest.raises(Exception, match=option):
        parser.parse_object({"method": {**config, "init_args": init_args}})
    parsed = parser.parse_object({"method": {**config, "init_args": {"stopping": "batch"}}})
    assert isinstance(parser.instantiate_classes(parsed).method, LatentGradientDescent)


def test_table_cells_show_a_stored_interval_beside_the_mean():
    from nemo_train.competency.evaluation import format_table

    rows = {
        "LGD": {"success": 0.75, "success_ci_low": 0.5, "success_ci_high": 1.0, "1-ssim": 0.2, "fid[classifier]": 3.0},
        "LNN": {"success": 0.5, "success_ci_low": None, "success_ci_high": None, "1-ssim": 0.1, "fid[classifier]": 2.0},
    }
    text = format_table(rows)
    assert "75.00% [50.0, 100.0]" in text and "0.20 │" in text  # 1-ssim has no stored interval here
    assert "50.00%" in text and "50.00% [" not in text  # nor has LNN's success
    assert "_ci_" not in text and "bootstrap 95 % interval over the images" in text
