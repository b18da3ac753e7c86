"""The scoring the tables use, shared by the evaluation commands and any trainer (a floor below the capabilities).

An error of a classifier and its benchmark (:mod:`~nemo_train.scoring.benchmark`, built for generated data, the
shifts benchmark and image folders); an explanation's counterfactual test: the edit derived from its text
(:mod:`~nemo_train.scoring.text_edits`, :mod:`~nemo_train.scoring.interventions`, the editors of
:mod:`~nemo_train.scoring.editors`), applied and classified, giving CEI; its grade by a judge panel
(:mod:`~nemo_train.scoring.judges`, the grounded judge's parser in :mod:`~nemo_train.scoring.grounding`),
giving LLM Match and grounding. :class:`~nemo_train.scoring.explanations.ExplanationScorer` scores explanations
of errors as ``nemo-eval`` and ``distill-eval`` do. Import from the modules: this file imports nothing.
"""
