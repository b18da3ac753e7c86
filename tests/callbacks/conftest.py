"""Fixtures of the callback tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def table_loggers():
    """``(other, wandb)``: a logger that is not W&B's and fails the test when given a table, and a W&B logger
    that starts no run and keeps the tables it is given in ``.tables`` as ``(key, columns, data)``."""
    from lightning.pytorch.loggers import WandbLogger

    class RecordingWandb(WandbLogger):
        def __init__(self):  # no run is started
            self.tables = []

        def log_table(self, key, columns=None, data=None, **kwargs):
            self.tables.append((key, columns, data))

    other = SimpleNamespace(log_table=lambda *a, **k: pytest.fail("a non-W&B logger got a table"))
    return other, RecordingWandb()
