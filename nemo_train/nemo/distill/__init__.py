"""Distillation: a teacher labels mined errors with CEI-validated explanations (``nemo-train distill-teacher``),
a student is fine-tuned on them, and ``nemo-train distill-eval`` scores it with NEMO beside its teacher.

Modules: :mod:`.mining` (errors on a split disjoint from the evaluation), :mod:`.teachers` (the exhaustive
search and SciTX as teachers), :mod:`.pairs` (training pairs from kept labels), :mod:`.labelling` (the
teacher command), :mod:`.rows` (the rows of the student's evaluation), :mod:`.student_eval` (that command).
Over a zoo of classifiers: :mod:`.zoo_members` (a ``nemo-train zoo`` folder's members as classifier specs with
their gaps), :mod:`.edit_rows` (the student with a budget of edits per error), :mod:`.zoo_targets` and
:mod:`.zoo_report` (the held-out zoo as targets, every row pooled with intervals over errors and classifiers,
the budget plot).
"""
