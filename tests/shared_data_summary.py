"""A pytest plugin: tests skipped because ../shared/data is absent are announced once, loudly.

Each such test skips with its own reason (``... is absent (the shared data folder ...)``), which ``-ra``
lists line by line among other skips, easy to miss: on a fresh clone more than a hundred tests check
nothing. At the end of the run this prints one section saying how many skipped for that reason, where
the data was looked for and how to point the tests at it (``$OVERLAPDP_SHARED_DATA``).
"""

from __future__ import annotations

import pytest

#: Words of every skip reason about the shared data (tests/conftest.py ``_shared``, test_demo.py).
_MARKS = ("shared data", "shared/data")
_ABSENT = ("absent", "not present")


def is_shared_data_skip(reason: str) -> bool:
    text = reason.lower()
    return any(m in text for m in _MARKS) and any(a in text for a in _ABSENT)


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    n = sum(1 for r in skipped if is_shared_data_skip(_reason(r)))
    if not n:
        return
    from conftest import SHARED_DATA

    terminalreporter.section("SHARED DATA ABSENT", sep="!", red=True, bold=True)
    terminalreporter.write_line(
        f"{n} test(s) SKIPPED because the shared data folder is absent (looked for {SHARED_DATA}): they "
        "checked nothing. Put UCI Adult there, beside the checkout, or set OVERLAPDP_SHARED_DATA=/path/to/data.",
        red=True,
        bold=True,
    )
