"""Odometer.exceeds (the threshold decision over the whole domain, MATH.md 7.9) against brute force:
every row of a small domain enumerated, its pure epsilon and zCDP rho summed with Fractions; the
decision is "over" exactly when some row's load is over the limit, and then names a row's charges."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from overlapdp.privacy import BudgetError, Gaussian, Laplace, Odometer
from overlapdp.query import PredicateQuery
from overlapdp.schema import IntAttribute, Schema
from support.generators import random_coverages

SCHEMA = Schema(tuple(IntAttribute(n, 0, s - 1) for n, s in zip("abc", (4, 3, 5), strict=True)))
ROWS = list(itertools.product(*(range(a.size) for a in SCHEMA.attributes)))


@pytest.mark.parametrize("seed", range(8))
def test_exceeds_is_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    odo = Odometer(SCHEMA)
    qs = []
    for i in range(int(rng.integers(1, 12))):
        q = PredicateQuery.from_coverages(SCHEMA, random_coverages(rng, SCHEMA, empty=0.05), id=f"q{i}")
        odo.charge(Laplace(float(rng.uniform(0.5, 4))), q)
        qs.append(q)
    eps = [Fraction(float(c.mechanism.pure().epsilon)) for c in odo.charges]
    loads = {r: sum((e for e, q in zip(eps, qs, strict=True) if q.covers(r)), Fraction(0)) for r in ROWS}
    top = max(loads.values())
    for limit in (float(top), float(top) * (1 - 1e-12), float(top) / 2, 0.0):
        found = odo.exceeds(limit)
        over = [r for r in ROWS if loads[r] > Fraction(limit)]
        if not over:
            assert found is None
        else:
            assert found is not None
            assert any(
                tuple(c.id for c, q in zip(odo.charges, qs, strict=True) if q.covers(r)) == found
                for r in over
            )


def test_exceeds_refuses_what_it_cannot_decide() -> None:
    odo = Odometer(SCHEMA)
    odo.charge(Gaussian(1.0), None)
    with pytest.raises(BudgetError, match="no pure guarantee"):
        odo.exceeds(1.0)
    with pytest.raises(BudgetError, match="not 'approx'"):
        odo.exceeds(1.0, definition="approx")
    assert odo.exceeds(0.4, definition="zcdp") == (odo.charges[0].id,)  # rho 1/2 on every row
    assert odo.exceeds(0.5, definition="zcdp") is None
    with pytest.raises(BudgetError, match="add/remove"):
        Odometer(SCHEMA, neighbouring="replace").exceeds(1.0)


@pytest.mark.parametrize("mu", [1e-170, 1.0, 1e200])
def test_exceeds_decides_gdp_at_any_magnitude(mu: float) -> None:
    """GDP's row mu is sqrt(sum mu^2): two charges of mu meet on a = 1 (sqrt(2) mu there). Squares of
    1e-170 underflow and of 1e200 overflow as floats; the decision scales them first (MATH.md 7.8)."""
    odo = Odometer(SCHEMA)
    for lo in (0, 1):
        q = PredicateQuery.from_coverages(SCHEMA, {"a": _span(lo, lo + 2)}, id=f"r{lo}")
        odo.charge(Gaussian(1.0 / mu), q)
    row = odo.charges[0].mechanism.gdp().mu
    assert odo.exceeds(1.2 * row, definition="gdp") == ("r0", "r1")
    assert odo.exceeds(1.5 * row, definition="gdp") is None
    assert odo.exceeds(0.9 * row, definition="gdp") is not None


def test_exceeds_refuses_limits_and_definitions_it_cannot_decide() -> None:
    odo = Odometer(SCHEMA)
    odo.charge(Laplace(1.0), None)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(BudgetError, match="finite non-negative limit"):
            odo.exceeds(bad)
    with pytest.raises(BudgetError, match="not 'tcdp'"):
        odo.exceeds(1.0, definition="tcdp")


def _span(lo: int, hi: int):  # type: ignore[no-untyped-def]
    from overlapdp.schema import IndexSet

    return IndexSet.interval(lo, hi)
