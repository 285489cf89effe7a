"""Maximal covering patterns and the grouped route of approximate-DP overlap, against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.privacy.mechanisms import Laplace, OpaqueApproxDP
from overlapdp.privacy.odometer import Odometer
from overlapdp.privacy.optimal import compose_approx
from overlapdp.privacy.patterns import maximal_patterns
from overlapdp.query import parse_where
from strategies import all_rows, schemas, where_clauses


@given(st.data())
def test_maximal_patterns_cover_every_row_and_are_attained(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    n = data.draw(st.integers(1, 7))
    queries = [parse_where(schema, data.draw(where_clauses(schema))).with_id(str(i)) for i in range(n)]
    pats = maximal_patterns(queries, schema, cap=10_000)
    assert pats is not None
    row_sets = {frozenset(i for i, q in enumerate(queries) if q.covers(r)) for r in all_rows(schema)}
    found = [frozenset(np.flatnonzero(m).tolist()) for m in pats.members]
    # every pattern is attained by its representative row, and is maximal among the rows' sets
    for members, row in zip(found, pats.rows, strict=True):
        assert members == frozenset(i for i, q in enumerate(queries) if q.covers(row))
        assert not any(members < other for other in row_sets)
    # every row's covering set lies inside some maximal pattern
    for s in row_sets:
        assert any(s <= m for m in found)


MECHS = [Laplace(2.0), Laplace(5.0), OpaqueApproxDP(0.3, 1e-7), OpaqueApproxDP(0.5, 0.0)]


@pytest.mark.slow
@given(st.data())
def test_overlap_approx_equals_brute_force_per_row(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    n = data.draw(st.integers(1, 6))
    queries = [parse_where(schema, data.draw(where_clauses(schema))).with_id(str(i)) for i in range(n)]
    mechs = [data.draw(st.sampled_from(MECHS)) for _ in range(n)]
    delta = 1e-5
    odo = Odometer(schema)
    eps, exact, _, _ = odo.overlap_approx(mechs, queries, delta)
    truth = 0.0
    for r in all_rows(schema):
        covering = [m for m, q in zip(mechs, queries, strict=True) if q.covers(r)]
        if covering:
            truth = max(truth, compose_approx(covering, h=odo.h).epsilon_at(delta))
    assert eps >= truth - 1e-12
    if exact:
        assert abs(eps - truth) <= 1e-9 * max(1.0, truth)
