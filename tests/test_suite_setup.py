"""The test suite's own set-up: tests/conftest.py loads the Hypothesis profile $HYPOTHESIS_PROFILE names
(.ci/run sets "ci"), "dev" when it is unset or empty, and refuses an unknown name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# Imports conftest afresh under each value of $HYPOTHESIS_PROFILE (None: unset) in one child process,
# and reports the max_examples Hypothesis then uses, or the error.
PROBE = """
import importlib, json, os, sys
from hypothesis import settings
out = {}
for profile in json.loads(sys.argv[1]):
    os.environ.pop("HYPOTHESIS_PROFILE", None)
    if profile is not None:
        os.environ["HYPOTHESIS_PROFILE"] = profile
    try:
        importlib.reload(sys.modules["conftest"]) if "conftest" in sys.modules else importlib.import_module("conftest")
        out[str(profile)] = settings.default.max_examples
    except Exception as exc:
        out[str(profile)] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def test_conftest_loads_the_profile_hypothesis_profile_names() -> None:
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    profiles = ["ci", None, "dev", "", "ci", "nightly"]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(profiles)],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    # The registered profiles: "ci" 150 examples, "dev" 60.
    assert {k: v for k, v in got.items() if k != "nightly"} == {"ci": 150, "None": 60, "dev": 60, "": 60}
    assert "InvalidArgument" in got["nightly"] and "nightly" in got["nightly"]


def test_the_quick_run_takes_the_quick_profile_and_the_whole_suite_keeps_dev() -> None:
    from conftest import hypothesis_profile

    assert hypothesis_profile(None, "not slow") == "quick"  # a plain `pytest` (pyproject's addopts)
    assert hypothesis_profile("", " not slow ") == "quick"
    assert hypothesis_profile(None, "") == "dev"  # ./scripts/test: -m ""
    assert hypothesis_profile(None, "slow") == "dev"
    assert hypothesis_profile("ci", "not slow") == "ci"  # .ci/run names its profile
    assert hypothesis_profile("dev", "not slow") == "dev"


def test_this_run_uses_the_profile_its_selection_names(request: pytest.FixtureRequest) -> None:
    from hypothesis import settings

    from conftest import hypothesis_profile

    name = hypothesis_profile(os.environ.get("HYPOTHESIS_PROFILE"), request.config.option.markexpr)
    assert settings.default.max_examples == {"quick": 20, "dev": 60, "ci": 150}[name]


def test_modules_the_quick_run_does_not_collect_hold_only_slow_tests() -> None:
    """conftest's SLOW_MODULES are not imported by the quick run: a test there not marked slow would be
    silently left out of it."""
    import ast

    from conftest import SLOW_MODULES

    for name in SLOW_MODULES:
        tree = ast.parse((TESTS / name).read_text())
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        assert tests, name
        for fn in tests:
            marks = [ast.unparse(d) for d in fn.decorator_list]
            assert "pytest.mark.slow" in marks, (name, fn.name)
