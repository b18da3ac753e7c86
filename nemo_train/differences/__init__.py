"""Discover and explain how two vision models differ, and score the explanations.

Following "Towards automatic discovery and explanation of differences between vision models":
conditions and a batched, cached Diff_Model (:mod:`.conditions`, :mod:`.generators`, :mod:`.diff_model`);
Raw Differences, Summarization and Optimization (:mod:`.methods`); Completeness, Density, Token Length,
attribution and effective token ratio (:mod:`.metrics`); language-model parts and their embedded
closed-vocabulary stand-ins (:mod:`.evaluators`, :mod:`.summarizers`, :mod:`.explorers`); the
``differences`` pipeline (:mod:`.pipeline`).
"""
