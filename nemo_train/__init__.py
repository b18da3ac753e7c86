"""nemo-train: train and evaluate explainers of vision-model errors with PyTorch Lightning."""

__version__ = "0.1.0"
