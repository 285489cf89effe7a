"""Marks shared by test modules: the cases of a parametrised test split between the quick run and the
whole suite."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def slow_after(values: Iterable[Any], keep: int = 1) -> list[Any]:
    """The values of one ``pytest.mark.parametrize`` argument, those after the first ``keep`` marked slow:
    a plain ``pytest`` runs the first cases of the property (one seed of a random stream, say), the
    whole suite (``./scripts/test``, CI) every case. The test ids stay the values'."""
    return [v if i < keep else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]
