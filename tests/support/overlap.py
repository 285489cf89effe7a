"""Checking an OverlapIndex result against a fresh brute-force computation (value, exactness, witness
row and the lower bound its covering queries give).

Used by test_overlap_index.py and test_admission_path.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from overlapdp.overlap import OverlapIndex, brute_force_overlap
from overlapdp.query import PredicateQuery

weights_st = st.one_of(st.just(0.0), st.floats(0.0, 5.0, allow_nan=False), st.integers(0, 4).map(float))


def truth(queries: list[PredicateQuery], weights: list[Any], comp: str) -> Any:
    return brute_force_overlap(queries, weights, comp).value  # type: ignore[arg-type]


def check_result(
    index: OverlapIndex, queries: list[PredicateQuery], weights: list[Any], comp: str, r: Any
) -> None:
    expected = (
        truth(queries, weights, comp)
        if queries
        else (np.zeros(len(weights[0])) if comp == "vector" and weights else 0.0)
    )
    np.testing.assert_allclose(
        np.asarray(r.value, dtype=float), np.asarray(expected, dtype=float), rtol=1e-9, atol=1e-12
    )
    assert r.exact
    parts = r.components if comp == "vector" else (r,)
    for j, part in enumerate(parts):
        if not queries:
            continue
        assert part.witness_row is not None
        covering = [q.id for q in queries if q.covers(part.witness_row)]
        assert sorted(part.queries) == sorted(covering)
        ws = [
            w[j] if comp == "vector" else w for q, w in zip(queries, weights, strict=True) if q.id in covering
        ]
        if comp == "count":
            ws = [1.0] * len(ws)
        lower = math.sqrt(math.fsum(x * x for x in ws)) if comp == "l2" else math.fsum(ws)
        assert float(part.lower) == pytest.approx(lower, rel=1e-9, abs=1e-12)
