"""Competency estimation (PaRCE) and high-competency counterfactual images (paper 004)."""

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import (
    METHODS,
    CounterfactualGenerator,
    CounterfactualResult,
    FeatureGradientDescent,
    ImageGradientDescent,
    LatentGradientDescent,
    LatentNearestNeighbor,
    ReconstructionCounterfactual,
    build_generator,
)
from nemo_train.competency.parce import PaRCE, parce_score, reliability

__all__ = [
    "METHODS",
    "CompetencyAutoencoder",
    "CounterfactualGenerator",
    "CounterfactualResult",
    "FeatureGradientDescent",
    "ImageGradientDescent",
    "LatentGradientDescent",
    "LatentNearestNeighbor",
    "PaRCE",
    "ReconstructionCounterfactual",
    "build_generator",
    "parce_score",
    "reliability",
]
