"""The test suite's own set-up: tests/conftest.py loads the Hypothesis profile $HYPOTHESIS_PROFILE names
(.ci/run sets "ci"), "dev" when it is unset or empty, and refuses an unknown name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
