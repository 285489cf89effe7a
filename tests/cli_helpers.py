"""Run the ``overlapdp`` command in-process and capture what it prints (shared by the CLI tests)."""

from __future__ import annotations

import pytest

from overlapdp.cli.main import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``overlapdp ARGS``."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
