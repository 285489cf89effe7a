"""The odometer's (epsilon, delta) guarantee on wide schemas (issue 22): the route by parts
(``Odometer._parts_overlap``, MATH.md 7.10 with Pareto sets of per-mechanism counts) against every row.

Truth: the charges only constrain attributes a0..a6 (3 values each) of a schema of 1 000 attributes,
so every row's covering set is decided by those 7 values: all 2 187 are enumerated, each distinct set
of per-mechanism counts composed with the odometer's own composition (what is checked is the
maximisation over rows, not the PLD).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from overlapdp.privacy import Gaussian, Laplace, Odometer
from overlapdp.privacy.odometer import _cheap_upper
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema
from support.marks import slow_after

DELTA = 1e-6


def ledger(seed: int, d: int) -> tuple[Schema, Odometer]:
    schema = Schema(tuple(IntAttribute(f"a{i}", 0, 2) for i in range(d)))
    rng = np.random.default_rng(seed)
    odo = Odometer(schema)
    mechs = [Laplace(8.0), Laplace(20.0), Gaussian(6.0)]
    for _ in range(18):
        covs = {}
        for j in rng.choice(7, size=int(rng.integers(1, 3)), replace=False).tolist():
            a, b = sorted(rng.integers(0, 3, 2).tolist())
            covs[j] = IndexSet.interval(a, b + 1)
        odo.charge(mechs[int(rng.integers(0, 3))], PredicateQuery.from_coverages(schema, covs))
    return schema, odo


def truth(odo: Odometer) -> float:
    charges = odo.charges
    best = 0.0
    seen: set[tuple[int, ...]] = set()
    for values in itertools.product(range(3), repeat=7):
        row = values + (0,) * (len(odo.schema) - 7)
        covering = [c for c in charges if c.query.covers(row)]
        key = tuple(sorted(id(c.mechanism) for c in covering))
        if key in seen:
            continue
        seen.add(key)
        best = max(best, odo._compose_eps([c.mechanism for c in covering], DELTA))
    return best


@pytest.mark.parametrize("seed", slow_after(range(3)))
def test_parts_route_is_the_maximum_over_rows(seed: int) -> None:
    schema, odo = ledger(seed, 1_000)
    charges = odo.charges
    mechs = [c.mechanism for c in charges]
    queries = [c.query for c in charges]

    def value(idx: list[int]) -> float:
        return odo._compose_eps([mechs[i] for i in idx], DELTA)

    def upper(idx: list[int]) -> float:
        return _cheap_upper([mechs[i] for i in idx], DELTA, odo.h)

    got = odo._parts_overlap(mechs, queries, value, upper)  # type: ignore[arg-type]
    assert got is not None
    eps, exact, witness, method = got
    assert exact and method == "pld/parts"
    assert eps == pytest.approx(truth(odo), rel=1e-12)
    # the witness row attains it
    assert witness is not None
    row = tuple(schema.attributes[i].index_of(witness[f"a{i}"]) or 0 for i in range(len(schema)))
    assert value([i for i, q in enumerate(queries) if q.covers(row)]) == eps


def test_report_on_a_wide_schema_is_exact() -> None:
    """report() on 1 000 attributes: the approximate-DP guarantee is exact and the maximum over rows."""
    _, odo = ledger(7, 1_000)
    approx = odo.report(DELTA).definitions["approx"]
    assert approx.exact
    assert approx.overlap == pytest.approx(truth(odo), rel=1e-12)
