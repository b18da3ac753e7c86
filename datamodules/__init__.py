"""LightningDataModules and conditional image generators for nemo-train."""
