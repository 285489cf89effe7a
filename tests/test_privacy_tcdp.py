"""Truncated concentrated DP (Bun, Dwork, Rothblum, Steinke 2018; MATH.md 2.4, 5.9): the definition,
its conversion against the Rényi-DP definition computed independently, composition, the overlap-aware
odometer against brute force over rows, the filter exact at its budget, concurrent composition (Lyu 2022
Cor. 1) and refused parameters. Also the trade-off profiles' parameter (1 / (1 / mu) was below mu)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import dp_accounting
import mpmath as mp
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from overlapdp.errors import OverlapDPError
from overlapdp.privacy import (
    GDP,
    RDP,
    TCDP,
    ZCDP,
    BudgetError,
    Gaussian,
    GaussianTradeOff,
    Laplace,
    LaplaceTradeOff,
    Mechanism,
    Odometer,
    OpaqueApproxDP,
    OpaqueTCDP,
    PrivacyFilter,
    PureDP,
    concurrent_composition,
)
from overlapdp.privacy.odometer import _column_sums_up
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IndexSet, IntAttribute, Schema

DELTAS = (1e-3, 1e-6, 1e-10)


# -- independent references ----------------------------------------------------------------------------
def rdp_eps(alpha: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """The RDP-to-(epsilon, delta) conversion at each order (Balle et al. 2020 Thm. 21; the formula
    dp_accounting's RdpAccountant uses), written out here."""
    return np.asarray(rdp + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1))


def best_over_orders(rho: float, omega: float, delta: float) -> float:
    """The best conversion of alpha -> alpha rho over 1 < alpha <= omega: a dense log grid, the end point
    omega, and a bounded scalar minimisation around the grid's best (each value a valid order)."""
    hi = min(omega, 1e7)
    alpha = np.concatenate([1 + np.geomspace(1e-7, hi - 1, 20_000), [hi]])
    vals = rdp_eps(alpha, alpha * rho, delta)
    i = int(np.argmin(vals))
    lo_a, hi_a = alpha[max(i - 1, 0)], alpha[min(i + 1, alpha.size - 1)]
    res = minimize_scalar(
        lambda a: float(rdp_eps(np.array([a]), np.array([a * rho]), delta)[0]),
        bounds=(lo_a, hi_a),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return min(float(vals[i]), float(res.fun))


def bun_closed_form(rho: float, omega: float, delta: float) -> float:
    """The textbook tCDP conversion, alpha rho + ln(1/delta) / (alpha - 1) at the order alpha* =
    1 + sqrt(ln(1/delta) / rho) clipped to omega (the closed form of Bun et al. 2018)."""
    ld = math.log(1 / delta)
    if ld <= (omega - 1) ** 2 * rho:
        return rho + 2 * math.sqrt(rho * ld)
    return rho * omega + ld / (omega - 1)


# -- the definition ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rho", "omega", "field"),
    [
        (-0.1, 2.0, "rho"),
        (math.inf, 2.0, "rho"),
        (math.nan, 2.0, "rho"),
        (True, 2.0, "rho"),
        ("a lot", 2.0, "rho"),
        (0.1, 1.0, "omega"),
        (0.1, 0.5, "omega"),
        (0.1, -math.inf, "omega"),
        (0.1, math.nan, "omega"),
        (0.1, True, "omega"),
        (0.1, None, "omega"),
    ],
)
def test_invalid_parameters_are_refused_naming_the_field(rho: object, omega: object, field: str) -> None:
    for cls in (TCDP, OpaqueTCDP):
        with pytest.raises(BudgetError, match=field) as err:
            cls(rho, omega)  # type: ignore[arg-type]
        assert isinstance(err.value, OverlapDPError)


def test_valid_parameters_and_the_zcdp_case() -> None:
    assert TCDP(0, 1.5) == TCDP(0.0, 1.5) and TCDP(0.0, 1.5).epsilon_at(1e-6) == 0.0
    assert TCDP(0.5, math.inf).epsilon_at(1e-6) == ZCDP(0.5).epsilon_at(1e-6)  # omega = inf is zCDP
    assert TCDP(0.5, "3") == TCDP(0.5, 3.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize(
    ("rho", "omega"),
    [(0.5, math.inf), (0.5, 2.0), (0.01, 5.0), (0.01, 1.2), (1e-4, 50.0), (2.0, 1.01), (0.1, 1e6)],
)
def test_conversion_equals_the_best_rdp_conversion_up_to_omega(
    rho: float, omega: float, delta: float
) -> None:
    """(rho, omega)-tCDP is (alpha, alpha rho)-RDP for 1 < alpha <= omega: the conversion is at least the
    best RDP conversion over those orders (computed here independently) and within 1e-6 of it."""
    got = TCDP(rho, omega).epsilon_at(delta)
    ref = best_over_orders(rho, omega, delta)
    assert got >= ref * (1 - 1e-9)
    assert got <= ref * (1 + 1e-6) + 1e-12
    assert got <= bun_closed_form(rho, omega, delta) * (1 + 1e-12)  # never looser than the closed form
    # delta at that epsilon: within the target, and never below the best order's delta
    d = TCDP(rho, omega).delta_at(got)
    assert d <= delta * (1 + 1e-6)


@pytest.mark.parametrize(
    ("rho", "omega", "delta"), [(0.01, 1.2, 1e-6), (1e-4, 3.0, 1e-10), (0.05, 2.0, 1e-8)]
)
def test_orders_above_omega_are_not_used(rho: float, omega: float, delta: float) -> None:
    """Where the unrestricted optimum lies above omega the tCDP epsilon is strictly above zCDP's (a
    conversion that ignored omega would report zCDP's smaller, invalid value)."""
    unrestricted = best_over_orders(rho, math.inf, delta)
    got = TCDP(rho, omega).epsilon_at(delta)
    assert got > unrestricted * 1.01
    assert got >= best_over_orders(rho, omega, delta) * (1 - 1e-9)


@pytest.mark.parametrize("sigma", [0.8, 2.0, 7.5])
@pytest.mark.parametrize("omega", [1.5, 4.0, 30.0])
def test_gaussian_curve_against_dp_accounting(sigma: float, omega: float) -> None:
    """A Gaussian mechanism's RDP curve is alpha / (2 sigma^2) (dp_accounting's own closed form); its
    epsilon over the orders <= omega (dp_accounting's RDP accountant on such a grid) is never below ours
    (it uses the same formula on a coarser grid), and ours is at least the best order of a fine grid."""
    rho = 1 / (2 * sigma**2)
    g = TCDP(rho, omega)
    for delta in DELTAS:
        orders = [float(a) for a in np.linspace(1.0001, omega, 4000)]
        acc = RdpAccountant(orders=orders)
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma))
        peer = acc.get_epsilon(delta)
        got = g.epsilon_at(delta)
        assert got <= peer * (1 + 1e-9) + 1e-12  # ours minimises over a superset of near-optimal orders
        assert got >= best_over_orders(rho, omega, delta) * (1 - 1e-9)
    # the mechanism's own tCDP guarantee: (rho, inf) with rho rounded up from the exact value
    mech = Gaussian(sigma).tcdp()
    assert mech is not None and mech.omega == math.inf
    assert Fraction(mech.rho) >= Fraction(Gaussian(sigma).mu) ** 2 / 2


def test_conversions_from_other_definitions_round_up() -> None:
    # pure eps -> (eps^2 / 2, inf); GDP mu -> (mu^2 / 2, inf); zCDP rho -> (rho, inf)
    for eps in (0.1, 1 / 3, 1e-170, 2.5):
        t = PureDP(eps).to_tcdp()
        assert t.omega == math.inf and Fraction(t.rho) >= Fraction(eps) ** 2 / 2
        assert Fraction(math.nextafter(t.rho, 0)) < Fraction(eps) ** 2 / 2 or t.rho == 0.0
        assert Fraction(GDP(eps).to_tcdp().rho) >= Fraction(eps) ** 2 / 2
    assert ZCDP(0.3).to_tcdp() == TCDP(0.3, math.inf)
    assert Laplace(10.0).tcdp() == TCDP(Laplace(10.0).zcdp().rho, math.inf)  # type: ignore[union-attr]
    assert OpaqueApproxDP(1.0, 1e-6).tcdp() is None
    # a tCDP charge seen as RDP: alpha rho at the orders <= omega only
    r = TCDP(0.1, 3.0).to_rdp((1.5, 2.0, 3.0, 4.0, 8.0))
    assert r.orders == (1.5, 2.0, 3.0)
    assert all(Fraction(e) >= Fraction(a) * Fraction(0.1) for a, e in zip(r.orders, r.epsilons, strict=True))
    with pytest.raises(BudgetError, match="omega"):
        TCDP(0.1, 1.2).to_rdp((1.5, 2.0))
    o = OpaqueTCDP(0.1, 3.0)
    assert o.pure() is None and o.zcdp() is None and o.gdp() is None
    assert o.rdp((1.5, 2.0)) == TCDP(0.1, 3.0).to_rdp((1.5, 2.0)) and o.rdp((1.5, 4.0)) is None
    assert o.epsilon_at(1e-6) == TCDP(0.1, 3.0).epsilon_at(1e-6)
    with pytest.raises(BudgetError, match="tCDP"):
        o.pld()


# -- composition -------------------------------------------------------------------------------------------
def test_composition_laws() -> None:
    a, b, c = TCDP(0.1, 3.0), TCDP(0.2, 1.5), TCDP(0.3, math.inf)
    ab = a + b
    assert Fraction(ab.rho) >= Fraction(0.1) + Fraction(0.2) and ab.omega == 1.5
    # the exact sum rounded up: the smallest float at or above it
    assert Fraction(math.nextafter(ab.rho, 0)) < Fraction(0.1) + Fraction(0.2)
    assert TCDP.compose([a, b, c]).omega == 1.5
    assert (TCDP(0.25, 2.0) + TCDP(0.5, 3.0)) + TCDP(0.125, 4.0) == TCDP(0.25, 2.0) + (
        TCDP(0.5, 3.0) + TCDP(0.125, 4.0)
    )
    assert a + b == b + a
    with pytest.raises(BudgetError):
        TCDP.compose([])
    # against the RDP definition: the composition's curve bounds the sum of the members' curves at
    # every order both cover (Rényi divergences of products add)
    orders = (1.2, 1.5)
    lhs = ab.to_rdp(orders).epsilons
    rhs = RDP.compose([a.to_rdp(orders), b.to_rdp(orders)]).epsilons
    assert all(x >= y for x, y in zip(lhs, rhs, strict=True))


@settings(max_examples=40, deadline=None)
@given(
    rho=st.floats(1e-4, 5.0),
    omega=st.floats(1.01, 100.0),
    more=st.floats(0.0, 1.0),
    delta=st.sampled_from(DELTAS),
)
def test_conversion_is_monotone(rho: float, omega: float, more: float, delta: float) -> None:
    # larger rho or smaller omega is a weaker guarantee: never a smaller epsilon. The conversion minimises
    # a bound over the orders numerically; every order gives a valid bound (safety does not depend on the
    # minimum), and the minimisation is accurate to ~1e-8 relative (4 000 random cases: worst 1.4e-8).
    e = TCDP(rho, omega).epsilon_at(delta)
    assert TCDP(rho + more, omega).epsilon_at(delta) >= e * (1 - 1e-7)
    assert TCDP(rho, 1 + (omega - 1) / 2).epsilon_at(delta) >= e * (1 - 1e-7)
    assert TCDP(rho, math.inf).epsilon_at(delta) <= e * (1 + 1e-7)


def test_concurrent_composition() -> None:
    """Lyu 2022 Cor. 1: (rho_i, omega)-tCDP compose concurrently to (sum rho_i, omega); with several
    omegas the smallest; zCDP, pure DP and GDP members enter as (rho, inf)."""
    c = concurrent_composition([TCDP(0.1, 3.0), TCDP(0.2, 3.0)])
    assert c.definition == "tcdp" and "Lyu 2022 Cor. 1" in c.theorem
    assert c.guarantee == TCDP(0.1, 3.0) + TCDP(0.2, 3.0)
    mixed = concurrent_composition([TCDP(0.1, 3.0), TCDP(0.2, 1.5), ZCDP(0.25), PureDP(1.0), GDP(1.0)])
    assert isinstance(mixed.guarantee, TCDP) and mixed.guarantee.omega == 1.5
    assert Fraction(mixed.guarantee.rho) >= sum(map(Fraction, (0.1, 0.2, 0.25, 0.5, 0.5)))
    assert mixed.epsilon_at(1e-6) == mixed.guarantee.epsilon_at(1e-6)
    with pytest.raises(BudgetError, match="mix"):
        concurrent_composition([TCDP(0.1, 3.0), OpaqueApproxDP(1.0, 1e-6)])
    with pytest.raises(BudgetError):
        concurrent_composition([OpaqueTCDP(0.1, 3.0), Gaussian(1.0)])  # no trade-off function


# -- the odometer ------------------------------------------------------------------------------------------
SCHEMA = Schema((IntAttribute("a", 0, 3), IntAttribute("b", 0, 2)))
ROWS = list(itertools.product(range(4), range(3)))
POOL: list[Mechanism] = [
    OpaqueTCDP(0.1, 3.0),
    OpaqueTCDP(1 / 3, 1.5),
    OpaqueTCDP(0.3, math.inf),
    OpaqueTCDP(0.05, 20.0),
    Gaussian(3.0),
    Laplace(10.0),
]


@st.composite
def coverage_queries(draw: st.DrawFn, n: int) -> list[PredicateQuery]:
    """Random conjunctions of value subsets (the empty subset makes a contradiction)."""
    out = []
    for i in range(n):
        covs = {}
        for name, size in (("a", 4), ("b", 3)):
            if draw(st.booleans()):
                covs[name] = IndexSet.from_indices(draw(st.sets(st.integers(0, size - 1), max_size=size)))
        out.append(PredicateQuery.from_coverages(SCHEMA, covs, id=f"q{i}"))
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 7))
def test_odometer_overlap_value_equals_brute_force_over_rows(data: st.DataObject, n: int) -> None:
    queries = data.draw(coverage_queries(n))
    mechs = [data.draw(st.sampled_from(POOL)) for _ in range(n)]
    odo = Odometer(SCHEMA)
    for q, m in zip(queries, mechs, strict=True):
        odo.charge(m, q)
    g = odo.report(1e-6).definitions["tcdp"]
    ts = [m.tcdp() for m in mechs]
    assert all(t is not None for t in ts)
    # brute force: each row's (sum of rho, smallest omega) of its covering charges, exactly
    per_row = [
        (
            sum((Fraction(ts[i].rho) for i, q in enumerate(queries) if q.covers(r)), Fraction(0)),  # type: ignore[union-attr]
            min((ts[i].omega for i, q in enumerate(queries) if q.covers(r)), default=math.inf),  # type: ignore[union-attr]
        )
        for r in ROWS
    ]
    worst_rho = max(p[0] for p in per_row)
    worst_omega = min(p[1] for p in per_row)
    rho, omega = g.overlap  # type: ignore[misc]
    assert g.exact
    assert omega == worst_omega
    assert Fraction(rho) >= worst_rho and Fraction(math.nextafter(rho, -math.inf)) < worst_rho
    # sequential: all charges, whatever the coverage
    s_rho, s_omega = g.sequential  # type: ignore[misc]
    total = sum((Fraction(t.rho) for t in ts), Fraction(0))  # type: ignore[union-attr]
    assert s_omega == min(t.omega for t in ts) and Fraction(s_rho) >= total  # type: ignore[union-attr]
    assert Fraction(math.nextafter(s_rho, -math.inf)) < total
    # its epsilon is the conversion of that pair, which bounds every row's own conversion
    assert g.overlap_epsilon == TCDP(rho, omega).epsilon_at(1e-6)
    for r_rho, r_omega in per_row:
        if r_rho > 0:
            assert TCDP(float(r_rho), r_omega).epsilon_at(1e-6) <= g.overlap_epsilon * (1 + 1e-12)
    js = odo.report(1e-6).to_json()["definitions"]["tcdp"]
    assert js["overlap"] == [rho, None if math.isinf(omega) else omega]


def test_odometer_without_a_common_definition_names_the_problem() -> None:
    odo = Odometer(SCHEMA)
    odo.charge(OpaqueTCDP(0.1, 3.0))
    odo.charge(OpaqueApproxDP(1.0, 1e-6))
    with pytest.raises(BudgetError, match="no privacy definition"):
        odo.report(1e-6)
    only = Odometer(SCHEMA)
    only.charge(OpaqueTCDP(0.1, 3.0))
    rep = only.report(1e-6)
    assert set(rep.definitions) == {"tcdp"} and rep.overlap_method == "tcdp"


def test_odometer_sequential_sum_is_rounded_up() -> None:
    # ten charges of 0.1 on one row: the exact total is above 1.0, the float sum is 1.0 (the odometer
    # capped the exact overlap value by that rounded-down sequential sum: 1.0 for pure DP)
    odo = Odometer(SCHEMA)
    for _ in range(10):
        odo.charge(Laplace(10.0))
    rep = odo.report(1e-6)
    exact = 10 * Fraction(0.1)
    for name in ("pure", "zcdp"):
        g = rep.definitions[name]
        load = exact if name == "pure" else 10 * Fraction(Laplace(10.0).zcdp().rho)  # type: ignore[union-attr]
        assert Fraction(g.overlap) >= load and Fraction(g.sequential) >= load  # type: ignore[arg-type]
    # a large ledger's sums are bounded instead (fsum of every column would take seconds): still above
    big = np.full((200_001, 3), 0.1)
    big[:, 1] = 1 / 3
    sums = _column_sums_up(big)
    for k, v in enumerate((Fraction(0.1), Fraction(1 / 3), Fraction(0.1))):
        assert Fraction(float(sums[k])) >= 200_001 * v
        assert float(sums[k]) <= float(200_001 * v) * (1 + 1e-10)


# -- the filter --------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 9), omega_b=st.sampled_from([1.5, 3.0, 20.0]))
def test_filter_admits_exactly_while_every_row_fits(data: st.DataObject, n: int, omega_b: float) -> None:
    """Replaying the filter's decisions with Fractions over every row of the domain: a charge is
    admitted iff its omega is at least the budget's (or it covers no row) and every row's exact sum of
    rho with it stays within the budget's rho. The budget is the float nearest an exact total of some prefix, so sums land on
    both sides of it."""
    queries = data.draw(coverage_queries(n))
    mechs = [data.draw(st.sampled_from(POOL)) for _ in range(n)]
    k = data.draw(st.integers(1, n))
    target = sum((Fraction(m.tcdp().rho) for m in mechs[:k]), Fraction(0))  # type: ignore[union-attr]
    budget = TCDP(float(target), omega_b)
    flt = PrivacyFilter(SCHEMA, budget)
    admitted: list[int] = []
    for i, (q, m) in enumerate(zip(queries, mechs, strict=True)):
        t = m.tcdp()
        assert t is not None
        fits = (t.omega >= omega_b or q.is_contradiction) and all(
            sum((Fraction(mechs[j].tcdp().rho) for j in [*admitted, i] if queries[j].covers(r)), Fraction(0))  # type: ignore[union-attr]
            <= Fraction(budget.rho)
            for r in ROWS
        )
        got = flt.try_charge(m, q)
        assert got.admitted == fits
        if t.omega < omega_b and not q.is_contradiction:
            assert "omega" in got.reason and not got.admitted
        if got.admitted:
            admitted.append(i)
    assert len(flt) == len(admitted)
    # spent(): the worst row's exact sum, rounded up
    if admitted:
        worst = max(
            sum((Fraction(mechs[j].tcdp().rho) for j in admitted if queries[j].covers(r)), Fraction(0))  # type: ignore[union-attr]
            for r in ROWS
        )
        s = flt.spent()
        assert Fraction(s) >= worst and Fraction(math.nextafter(s, -math.inf)) < worst


def test_filter_at_the_budget_and_refusal_reason() -> None:
    # charges of rho 0.1 on one row: nine fit a budget of 1.0 exactly, the tenth does not
    tenth = OpaqueTCDP(0.1, 5.0)
    flt = PrivacyFilter(SCHEMA, TCDP(1.0, 4.0))
    assert all(flt.try_charge(tenth).admitted for _ in range(9))
    assert not flt.try_charge(tenth).admitted  # 10 * Fraction(0.1) > 1 though the float sum is 1.0
    # a charge whose omega is below the budget's: refused with a reason naming omega, nothing charged
    small = flt.try_charge(OpaqueTCDP(0.0, 3.0))
    assert not small.admitted and "omega 3.0" in small.reason and "4.0" in small.reason
    assert len(flt) == 9
    # zCDP mechanisms are (rho, inf)-tCDP: they fit any omega
    assert PrivacyFilter(SCHEMA, TCDP(1.0, 1e9)).try_charge(Gaussian(2.0)).admitted
    # a mechanism without a tCDP guarantee is an error naming the definition
    with pytest.raises(BudgetError, match="truncated CDP"):
        PrivacyFilter(SCHEMA, TCDP(1.0, 2.0)).try_charge(OpaqueApproxDP(0.5, 1e-6))
    # the replace-one-row filter doubles the loads
    rep = PrivacyFilter(SCHEMA, TCDP(0.5, 2.0), neighbouring="replace")
    assert rep.try_charge(OpaqueTCDP(0.25, 2.0)).admitted
    assert not rep.try_charge(OpaqueTCDP(2.0**-60, 2.0)).admitted


def test_a_recorded_charge_below_the_budgets_omega_admits_nothing_more() -> None:
    """Issue 26, finding 6: one rule for refusals and records. A recorded charge (never refused) with
    omega below the budget's takes the rows it covers outside (rho_B, omega_B); the filter went on
    admitting charges on those very rows. Now, as after a record over the rho budget, nothing more is
    admitted (every row must stay within budget), until the record is rolled back."""
    flt = PrivacyFilter(SCHEMA, TCDP(0.5, 4.0))
    assert flt.try_charge(OpaqueTCDP(0.1, 8.0), parse_where(SCHEMA, "a = 0")).admitted
    mark = flt.savepoint()
    flt.record(OpaqueTCDP(0.1, 2.0), parse_where(SCHEMA, "a = 0"), id="low")
    for where in ("a = 0", "a = 1", "TRUE"):
        r = flt.try_charge(OpaqueTCDP(0.01, 8.0), parse_where(SCHEMA, where))
        assert not r.admitted and "'low'" in r.reason and "omega 2.0" in r.reason, (where, r.reason)
        assert flt.try_on_bounds(Gaussian(10.0), parse_where(SCHEMA, where)) is None
    # the pure-DP filter after a record over its budget behaves alike: one rule
    pure = PrivacyFilter(SCHEMA, PureDP(1.0))
    pure.record(Laplace(0.5), parse_where(SCHEMA, "a = 0"))
    assert not pure.try_charge(Laplace(10.0), parse_where(SCHEMA, "a = 1")).admitted
    flt.rollback(mark)
    assert flt.try_charge(OpaqueTCDP(0.01, 8.0), parse_where(SCHEMA, "a = 1")).admitted
    # a recorded charge that covers no row takes no row outside
    flt.record(OpaqueTCDP(0.1, 2.0), parse_where(SCHEMA, "a = 0 AND a = 1"), id="empty")
    assert flt.try_charge(OpaqueTCDP(0.01, 8.0), parse_where(SCHEMA, "a = 1")).admitted


# -- the trade-off profiles' parameter (privacy/fdp.py) ----------------------------------------------------
def _mp_gaussian(mu: float, e: float) -> mp.mpf:
    m, x = mp.mpf(mu), mp.mpf(e)
    return mp.ncdf(-x / m + m / 2) - mp.exp(x) * mp.ncdf(-x / m - m / 2)


def _mp_laplace(e0: float, e: float) -> mp.mpf:
    a, x = mp.mpf(e0), mp.mpf(e)
    if x >= a:
        return mp.mpf(0)
    if x < -a:
        return 1 - mp.exp(x)
    return 1 - mp.exp((x - a) / 2)


def _below_reciprocal_twice(lo: float, hi: float) -> list[float]:
    """Parameters p with 1 / (1 / p) < p (one ulp below), found on a grid."""
    return [float(p) for p in np.linspace(lo, hi, 4001) if 1 / (1 / float(p)) < float(p)]


def test_tradeoff_profiles_use_the_parameter_and_never_under_report() -> None:
    """``GaussianTradeOff(mu).profile`` computed through 1 / (1 / mu), which is one ulp below mu for
    these mu: the profile of a smaller mu, below the true delta. Against mpmath at 60 digits, with the
    exact mu, the profile is never below the truth."""
    mp.mp.dps = 60
    mus = _below_reciprocal_twice(0.1, 3.0)[:12]
    assert len(mus) == 12
    for mu in mus:
        es = np.linspace(-mu, 6 * mu + mu * mu / 2, 21)
        got = GaussianTradeOff(mu).profile(es)
        for e, d in zip(es, got, strict=True):
            assert mp.mpf(float(d)) >= _mp_gaussian(mu, float(e)), (mu, e)
        # and the trade-off is the mechanism's (with this exact mu) up to the upward margin
        mech = Gaussian(1.0, sensitivity=mu)
        assert mech.mu == mu
        assert np.all(got >= mech.profile(es)) and np.all(got <= mech.profile(es) * (1 + 1e-8))
    for e0 in _below_reciprocal_twice(0.1, 3.0)[12:24]:
        es = np.linspace(-1.5 * e0, e0, 21)
        got = LaplaceTradeOff(e0).profile(es)
        for e, d in zip(es, got, strict=True):
            assert mp.mpf(float(d)) >= _mp_laplace(e0, float(e)), (e0, e)
    with pytest.raises(BudgetError, match="mu"):
        GaussianTradeOff(-1.0).profile(np.array([0.0]))
    with pytest.raises(BudgetError, match="eps0"):
        LaplaceTradeOff(math.inf).profile(np.array([0.0]))
