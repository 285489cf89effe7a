"""Huge totals: a report of a ledger whose worst row's epsilon passes e^709 (or the float range) states
inf or the figure, it never raises (issue 26, finding 7). Before the fix ``PureDP(710).epsilon_at``
raised OverflowError (``exp(710)`` in the randomized-response profile), and so did every odometer
report of such a ledger."""

from __future__ import annotations

import math

import pytest

from overlapdp.privacy import (
    ZCDP,
    Gaussian,
    Laplace,
    OpaqueApproxDP,
    OpaqueTCDP,
    PureDP,
    RandomizedResponse,
)
from overlapdp.privacy.odometer import Odometer
from overlapdp.query import parse_where
from overlapdp.schema import IntAttribute, Schema

SCHEMA = Schema((IntAttribute("a", 0, 1),))


@pytest.mark.parametrize("eps", [709.0, 710.0, 800.0, 1e5, 1e300])
def test_pure_epsilon_at_delta_past_exp_709(eps: float) -> None:
    # epsilon-DP at delta: the randomized-response pair's profile; above 700 it is eps - ~delta
    e = PureDP(eps).epsilon_at(1e-6)
    assert eps - 1e-5 * max(1.0, eps * 1e-9) <= e <= eps
    assert PureDP(eps).delta_at(eps / 2) == pytest.approx(1.0)
    assert RandomizedResponse(min(eps, 1e5)).delta_at(1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_odometer_reports_a_row_of_epsilon_900(neighbouring: str) -> None:
    """Nine charges of Laplace(0.001) on every row: 9000 per row (the report is the pure figure)."""
    odo = Odometer(SCHEMA, neighbouring=neighbouring)
    for _ in range(9):
        odo.charge(Laplace(0.001))
    odo.charge(RandomizedResponse(800.0), parse_where(SCHEMA, "a = 0"))
    rep = odo.report(1e-6)
    assert rep.definitions["pure"].sequential == pytest.approx(9800.0)
    assert 9799.0 <= rep.sequential_epsilon <= 9800.0 * (1 + 1e-6)
    assert math.isfinite(rep.overlap_epsilon) and rep.overlap_epsilon <= rep.sequential_epsilon


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
@pytest.mark.parametrize(
    "mech",
    [Laplace(1e-308), OpaqueApproxDP(1e308), OpaqueTCDP(1e308, 3.0), Gaussian(1e-160)],
    ids=["laplace", "opaque", "tcdp", "gaussian"],
)
def test_loads_beyond_the_float_range_report_inf(neighbouring: str, mech: object) -> None:
    odo = Odometer(SCHEMA, neighbouring=neighbouring)
    for _ in range(3):
        odo.charge(mech, parse_where(SCHEMA, "a = 0"))  # type: ignore[arg-type]
    rep = odo.report(1e-6)
    assert rep.sequential_epsilon == math.inf
    # the row a = 0 (or the pair a = 0, a = 1) pays all three: the truth is beyond the float range
    assert rep.overlap_epsilon == math.inf


def test_a_laplace_whose_epsilon_is_not_a_float_is_refused_when_built() -> None:
    from overlapdp.privacy import BudgetError

    with pytest.raises(BudgetError, match="largest float"):
        Laplace(5e-324)
    assert Laplace(1e-300).rdp().epsilons[-1] == pytest.approx(1e300)  # its alpha rho is inf: no crash
    assert ZCDP(1e300).epsilon_at(1e-6) >= 1e300
