"""The run fails when tests leave files in the checkout (tests/checkout_guard.py).

Each case runs pytest with the plugin on a small git repository in tmp_path, as the suite runs on this
checkout: a test that writes an ignored ``spark-warehouse/`` (400 such files were once committed) or an
untracked file fails the run and is named; a clean run passes; caches do not count.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# slow: each runs pytest in a fresh interpreter (about 2.4 s of CPU)
pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"), pytest.mark.slow]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("spark-warehouse/\n__pycache__/\n", encoding="utf-8")
    (repo / "test_inner.py").write_text(f"import os\n\n\ndef test_inner():\n{body}\n", encoding="utf-8")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "checkout_guard", "-q", "test_inner.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_ignored_directory_left_behind_fails_the_run(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        "    os.makedirs('spark-warehouse/t', exist_ok=True)\n"
        "    open('spark-warehouse/t/part-0', 'w').close()",
    )
    assert done.returncode == 1, done.stdout
    assert "1 passed" in done.stdout
    assert "files left in the checkout" in done.stdout
    assert "!! spark-warehouse/" in done.stdout


def test_an_untracked_file_or_an_edit_fails_the_run(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        "    open('ledger.sqlite', 'w').close()\n    open('.gitignore', 'a').write('x\\n')",
    )
    assert done.returncode == 1, done.stdout
    assert "?? ledger.sqlite" in done.stdout
    assert " M .gitignore" in done.stdout


def test_a_clean_run_passes_and_caches_do_not_count(tmp_path: Path) -> None:
    done = _run(tmp_path, "    os.makedirs('.hypothesis/examples', exist_ok=True)\n    assert True")
    assert done.returncode == 0, done.stdout
    assert "files left in the checkout" not in done.stdout


def test_a_failing_test_keeps_its_own_status(tmp_path: Path) -> None:
    done = _run(tmp_path, "    open('left.txt', 'w').close()\n    assert False")
    assert done.returncode == 1
    assert "1 failed" in done.stdout
    assert "?? left.txt" in done.stdout
