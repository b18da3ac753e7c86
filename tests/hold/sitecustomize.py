"""Test helper, run by the interpreter of a command that a kill test starts (this folder on ``PYTHONPATH``).

With ``NEMO_TEST_HOLD_AFTER`` set to a file name or glob (``results.jsonl``, ``results.rank-*.jsonl``), the
process stops for good right after it has written such a file ``NEMO_TEST_HOLD_COUNT`` times (default 1): a
record appended to a result store, a file renamed into place or written whole. A test that kills a command
mid-run then always finds it mid-run, however fast the machine; polling a file against a running command is
a race that a fast machine loses. Without the variable nothing is changed.
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
import threading

PATTERN = os.environ.get("NEMO_TEST_HOLD_AFTER")


def _install(pattern: str, count: int) -> None:
    from nemo_train.store import ResultStore

    written = 0

    def after_write(path) -> None:
        nonlocal written
        if fnmatch.fnmatch(os.path.basename(os.fspath(path)), pattern):
            written += 1
            if written >= count:
                threading.Event().wait()  # until the test kills the process

    real_replace, real_write_text, real_append = os.replace, pathlib.Path.write_text, ResultStore.append

    def replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        after_write(dst)

    def write_text(self, *args, **kwargs):
        done = real_write_text(self, *args, **kwargs)
        after_write(self)
        return done

    def append(self, *args, **kwargs):
        done = real_append(self, *args, **kwargs)
        after_write(self.path)
        return done

    os.replace, pathlib.Path.write_text, ResultStore.append = replace, write_text, append


if PATTERN:
    _install(PATTERN, int(os.environ.get("NEMO_TEST_HOLD_COUNT", "1")))
