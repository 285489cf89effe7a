"""Shared fixtures: the real Adult data from ../shared/data when present (skipped with a reason if not),
and the Hypothesis profile named by $HYPOTHESIS_PROFILE ("ci" or "dev", the default; "quick" for a plain
``pytest`` when it is unset).

Shared helper code lives in tests/support/ (``from support.service import ...``), not in test modules."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# dp_accounting's RDP module imports absl, whose logging handler keeps the sys.stderr of its import: under
# pytest, the capture's file. When a later test configures logging (the guide's in-process uvicorn runs
# dictConfig, which closes every existing handler), absl closes that stream unless it is one of the
# process's own, and pytest's capture breaks ("I/O operation on closed file"). Point it at sys.__stderr__.
try:
    import absl.logging

    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__
except ImportError:  # pragma: no cover - absl comes with dp_accounting, a test dependency
    pass

# The run fails when the tests leave files in the checkout (tests/checkout_guard.py); tests skipped for
# want of ../shared/data are counted in one loud section of the summary (tests/shared_data_summary.py).
pytest_plugins = ["checkout_guard", "shared_data_summary"]


def _find_shared_data() -> Path:
    """../shared/data beside the checkout; for a git worktree deeper down, the nearest ancestor's."""
    env = os.environ.get("OVERLAPDP_SHARED_DATA")
    if env:
        return Path(env)
    for parent in REPO.parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "data"


SHARED_DATA = _find_shared_data()

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "quick", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# $HYPOTHESIS_PROFILE picks the profile: .ci/run sets "ci"; unset (a developer's run), "dev". An unknown
# name fails at start-up. Tests that set max_examples themselves keep their own.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "dev")


def quick_run(markexpr: str) -> bool:
    """Whether a run's mark expression is the quick run's, pyproject's ``-m "not slow"``."""
    return markexpr.strip() == "not slow"


def hypothesis_profile(env_value: str | None, markexpr: str) -> str:
    """The profile a run uses: the one $HYPOTHESIS_PROFILE names; unset, "quick" for the quick run
    (pyproject's ``-m "not slow"``, a plain ``pytest``) and "dev" for any other selection, such as
    ./scripts/test's ``-m ""``: the whole suite keeps 60 examples, the quick run a third of them (the 57
    properties on the default profile took 15.4 s of CPU in it with 60 examples, 8.9 s with 20)."""
    if env_value:
        return env_value
    return "quick" if quick_run(markexpr) else "dev"


# Modules whose every test is slow and whose collection alone is costly: a run that leaves slow tests out
# does not import them (the fuzzer builds a service and its Schemathesis cases at collection, 2.8 s).
SLOW_MODULES = frozenset({"test_service_fuzz.py"})


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in SLOW_MODULES and quick_run(config.option.markexpr):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile(hypothesis_profile(os.environ.get("HYPOTHESIS_PROFILE"), config.option.markexpr))


def _shared(path: str) -> Path:
    p = SHARED_DATA / path
    if not p.exists():
        pytest.skip(f"{p} is absent (the shared data folder sits beside the repository only in CI and dev)")
    return p


@pytest.fixture(scope="session")
def adult_csv() -> Path:
    return _shared("adult/adult.csv")


@pytest.fixture(scope="session")
def adult_domain_json() -> Path:
    return _shared("adult/adult-domain.json")


@pytest.fixture(scope="session")
def adult_frame(adult_csv: Path) -> pd.DataFrame:
    return pd.read_csv(adult_csv)


@pytest.fixture(scope="session")
def adult_raw_csv() -> Path:
    return _shared("adult-raw/adult.csv")


@pytest.fixture(scope="session")
def adult_raw_frame(adult_raw_csv: Path) -> pd.DataFrame:
    return pd.read_csv(adult_raw_csv, skipinitialspace=True)
