"""Competency estimation (PaRCE) and high-competency counterfactual images (competency-counterfactuals paper)."""

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import (
    CounterfactualGenerator,
    CounterfactualResult,
    LatentNearestNeighbor,
    ReconstructionCounterfactual,
)
from nemo_train.competency.gradient_counterfactuals import (
    FeatureGradientDescent,
    ImageGradientDescent,
    LatentGradientDescent,
    paper_methods,
)
from nemo_train.competency.parce import PaRCE, parce_score, reliability

__all__ = [
    "CompetencyAutoencoder",
    "CounterfactualGenerator",
    "CounterfactualResult",
    "FeatureGradientDescent",
    "ImageGradientDescent",
    "LatentGradientDescent",
    "LatentNearestNeighbor",
    "PaRCE",
    "ReconstructionCounterfactual",
    "paper_methods",
    "parce_score",
    "reliability",
]
