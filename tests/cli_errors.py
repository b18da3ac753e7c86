"""What the tests of one-line errors share."""

from __future__ import annotations

import pytest

from nemo_train.cli import main


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the CLI on ``argv``; it must exit with status 2 and one line ``nemo-train: error: ...``, returned."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nemo-train: error: ") and err.count("\n") == 1, err
    return err
