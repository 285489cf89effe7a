"""A pytest plugin that fails the run when the tests leave files in the checkout.

At the start of the session it records ``git status --porcelain --ignored`` of the root directory;
at the end, any entry that was not there before (a new untracked or ignored file, a modified or
deleted tracked file) is listed under "files left in the checkout" and the exit status becomes 1.
Ignored entries count too: ``spark-warehouse/``, ``derby.log``, ``overlapdp-demo/`` and ledgers are
in .gitignore, so plain ``git status`` would not show them (400 files of ``spark-warehouse/`` were
once committed that way). Caches that every run writes (``__pycache__``, ``.pytest_cache``,
``.hypothesis``, ...) are not counted. Outside a git checkout, or without git, it does nothing.
Tests write into ``tmp_path``; a tool that writes beside the current directory is given one there.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: Path parts that every run may create (interpreter, test runner and tool caches).
CACHES = frozenset(
    {"__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", ".venv", ".coverage"}
)

_KEY = pytest.StashKey[set[str]]()
_LEFT = pytest.StashKey[list[str]]()


def git_status(root: Path) -> set[str] | None:
    """The entries of ``git status --porcelain --ignored`` under ``root``, caches left out; None
    when ``root`` is not in a git checkout."""
    if shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--ignored"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return {line for line in done.stdout.splitlines() if not _is_cache(line[3:])}


def _is_cache(path: str) -> bool:
    parts = path.strip('"').rstrip("/").split("/")
    return any(p in CACHES or p.endswith(".egg-info") for p in parts)


def pytest_sessionstart(session: pytest.Session) -> None:
    before = git_status(session.config.rootpath)
    if before is not None:
        session.config.stash[_KEY] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_KEY, None)
    if before is None:
        return
    after = git_status(session.config.rootpath) or set()
    left = sorted(after - before)
    if left:
        session.config.stash[_LEFT] = left
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_LEFT, None)
    if left:
        terminalreporter.section("files left in the checkout", red=True)
        terminalreporter.write_line(
            "the tests changed `git status --porcelain --ignored`; write into tmp_path instead:"
        )
        for line in left:
            terminalreporter.write_line(f"  {line}")
