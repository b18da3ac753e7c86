"""The seed of every model a test session trains: ``NEMO_TEST_SEED`` (0 unless set).

``make test-reseeded`` runs the suite under another seed, so the models it trains make other errors: a test
that passes under one seed only relied on one training outcome. A test builds the case it needs (a constructed
error, a hand-set weight, a search that cannot come up empty), never one that training happens to produce.
"""

from __future__ import annotations

import os

TRAINING_SEED = int(os.environ.get("NEMO_TEST_SEED", "0"))
