"""Marks shared by test modules: the cases of a parametrised test split between the quick run and the
whole suite."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def slow_after(values: Iterable[Any], keep: int = 1) -> list[Any]:
    """The values of one ``pytest.mark.parametrize`` argument, those after the first ``keep`` marked slow:
    a plain ``pytest`` runs the first cases of the property (one seed of a random stream, say), the
    whole suite (``./scripts/test``, CI) every case. A tuple holds the values of several argument names
    (``parametrize(("a", "b"), ...)``). The test ids stay the values'."""
    return [v if i < keep else _slow(v) for i, v in enumerate(values)]


def slow_where(values: Iterable[Any], slow: Iterable[Any]) -> list[Any]:
    """The values of one ``pytest.mark.parametrize`` argument, those in ``slow`` marked slow."""
    heavy = list(slow)
    return [_slow(v) if v in heavy else v for v in values]


def _slow(v: Any) -> Any:
    return (
        pytest.param(*v, marks=pytest.mark.slow)
        if isinstance(v, tuple)
        else pytest.param(v, marks=pytest.mark.slow)
    )
