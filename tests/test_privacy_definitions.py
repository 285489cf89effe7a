"""Definitions, mechanism costs and conversions against independent computations (numerical integration
of the defining divergences, dense brute-force searches, textbook bounds)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats

from overlapdp.privacy import (
    GDP,
    RDP,
    ZCDP,
    ApproxDP,
    BudgetError,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    OpaqueApproxDP,
    PureDP,
    RandomizedResponse,
)


def hockey_stick_continuous(p_pdf, q_pdf, eps: float, lo: float, hi: float) -> float:
    """delta(eps) = int max(0, p - e^eps q), by adaptive quadrature (independent of the closed forms)."""
    val, _ = integrate.quad(
        lambda x: max(0.0, p_pdf(x) - math.exp(eps) * q_pdf(x)),
        lo,
        hi,
        limit=400,
        points=[0.0, 1.0],
        epsabs=1e-15,
        epsrel=1e-12,
    )
    return val


# -- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: Laplace(0),
        lambda: Laplace(-1),
        lambda: Laplace(math.inf),
        lambda: Laplace(math.nan),
        lambda: Gaussian(0),
        lambda: Gaussian(1, sensitivity=-1),
        lambda: DiscreteLaplace(1, sensitivity=1.5),  # type: ignore[arg-type]
        lambda: RandomizedResponse(1, categories=1),
        lambda: OpaqueApproxDP(1, 1.0),
        lambda: RDP((), ()),
        lambda: RDP((1.0, 2.0), (0.1, 0.2)),
        lambda: RDP((2.0,), (0.1, 0.2)),
        lambda: PureDP(-0.1),
        lambda: GDP(math.inf),
        lambda: ZCDP("x"),  # type: ignore[arg-type]
    ],
)
def test_bad_parameters_raise_budget_error(make) -> None:
    with pytest.raises(BudgetError):
        make()


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-9, 1.5, math.nan])
def test_target_delta_outside_open_unit_interval_is_refused(delta: float) -> None:
    for g in (ZCDP(0.1), GDP(1.0), RDP((2.0,), (0.1,)), Gaussian(2.0)):
        with pytest.raises(BudgetError):
            g.epsilon_at(delta)


# -- composition of closed forms -------------------------------------------------------------------------
def test_closed_form_compositions() -> None:
    assert PureDP.compose([PureDP(0.1)] * 10).epsilon == pytest.approx(1.0)
    assert (ZCDP(0.1) + ZCDP(0.2)).rho == pytest.approx(0.3)
    assert GDP.compose([GDP(3.0), GDP(4.0)]).mu == pytest.approx(5.0)
    r = RDP((2.0, 4.0), (0.1, 0.3)) + RDP((2.0, 4.0), (0.2, 0.1))
    assert r.epsilons == pytest.approx((0.3, 0.4))
    with pytest.raises(BudgetError):
        RDP((2.0,), (0.1,)) + RDP((3.0,), (0.1,))
    a = ApproxDP(0.5, 1e-6) + ApproxDP(0.25, 1e-6)
    assert (a.epsilon, a.delta) == (pytest.approx(0.75), pytest.approx(2e-6))


# -- GDP exact conversion --------------------------------------------------------------------------------
@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 4.0])
@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0, 10.0])
def test_gdp_delta_at_50_digits(mu: float, eps: float) -> None:
    """The closed form in 50-digit arithmetic: log-space evaluation keeps tiny deltas accurate."""
    mp.mp.dps = 50
    m, e = mp.mpf(mu), mp.mpf(eps)
    truth = float(mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2))
    ours = GDP(mu).delta_at(eps)
    assert ours >= truth
    assert ours == pytest.approx(truth, rel=1e-8, abs=1e-300)


def test_gdp_epsilon_inverts_delta_on_the_safe_side() -> None:
    for mu in (0.1, 1.0, 5.0):
        for delta in (1e-3, 1e-6, 1e-10):
            e = GDP(mu).epsilon_at(delta)
            assert GDP(mu).delta_at(e) <= delta
            assert GDP(mu).delta_at(e * (1 - 1e-6) - 1e-9) > delta


# -- zCDP (Canonne-Kamath-Steinke) ----------------------------------------------------------------------
@given(rho=st.floats(1e-5, 20), delta=st.floats(1e-12, 0.1))
def test_zcdp_conversion_is_the_infimum_over_alpha(rho: float, delta: float) -> None:
    eps = ZCDP(rho).epsilon_at(delta)
    # independent dense search over alpha (every alpha gives a valid epsilon)
    a = 1 + np.exp(np.linspace(-16, 18, 200_001))
    vals = a * rho + (np.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
    brute = max(0.0, float(vals.min()))
    assert eps >= brute * (1 - 1e-6)  # never below the infimum (up to the brute search's own slack)
    assert eps <= brute * (1 + 1e-4) + 1e-12
    # tighter than the classic rho + 2 sqrt(rho log(1/delta)) (Bun-Steinke 2016)
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1e-12


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0])
def test_zcdp_and_rdp_conversions_of_the_gaussian_are_at_least_exact(sigma: float) -> None:
    g = Gaussian(sigma)
    for delta in (1e-3, 1e-8):
        exact = GDP(1 / sigma).epsilon_at(delta)
        zc = g.zcdp().epsilon_at(delta)
        rd = g.rdp().epsilon_at(delta)  # type: ignore[union-attr]
        assert exact <= zc * (1 + 1e-9)
        assert exact <= rd * (1 + 1e-9)
        assert zc <= 1.3 * exact + 0.05  # and not uselessly loose


def test_rdp_conversion_matches_its_formula_at_each_order() -> None:
    orders = (1.5, 2.0, 8.0, 32.0)
    eps = (0.01, 0.02, 0.1, 0.5)
    delta = 1e-6
    expected = min(
        e + math.log(1 - 1 / a) - (math.log(delta) + math.log(a)) / (a - 1)
        for a, e in zip(orders, eps, strict=True)
    )
    assert RDP(orders, eps).epsilon_at(delta) == pytest.approx(expected, rel=1e-9)
    # and it beats the classic conversion tau + log(1/delta)/(alpha-1) (Mironov 2017 Prop. 3)
    classic = min(e + math.log(1 / delta) / (a - 1) for a, e in zip(orders, eps, strict=True))
    assert RDP(orders, eps).epsilon_at(delta) < classic


@pytest.mark.parametrize("b", [0.5, 2.0, 10.0])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 5.0, 20.0])
def test_laplace_rdp_equals_renyi_divergence_by_quadrature(b: float, alpha: float) -> None:
    p, q = stats.laplace(0, b), stats.laplace(1, b)
    val, _ = integrate.quad(
        lambda x: math.exp(alpha * p.logpdf(x) + (1 - alpha) * q.logpdf(x)),
        -60 * b,
        60 * b,
        limit=400,
        points=[0.0, 1.0],
        epsrel=1e-11,
    )
    truth = math.log(val) / (alpha - 1)
    assert Laplace(b).rdp((alpha,)).epsilons[0] == pytest.approx(truth, rel=1e-6)


# -- mechanism profiles ----------------------------------------------------------------------------------
@pytest.mark.parametrize("b", [0.7, 3.0])
@pytest.mark.parametrize("eps", [-0.5, 0.0, 0.1, 0.3, 2.0])
def test_laplace_profile_equals_hockey_stick_by_quadrature(b: float, eps: float) -> None:
    truth = hockey_stick_continuous(stats.laplace(0, b).pdf, stats.laplace(1, b).pdf, eps, -80, 80)
    assert Laplace(b).delta_at(eps) == pytest.approx(truth, rel=1e-6, abs=1e-12)


def _discrete_hockey_stick(pmf_p, pmf_q, eps: float) -> float:
    return float(np.sum(np.maximum(0.0, pmf_p - math.exp(eps) * pmf_q)))


@pytest.mark.parametrize("t", [0.8, 4.0])
@pytest.mark.parametrize("sens", [1, 3])
def test_discrete_laplace_profile_by_pmf_enumeration(t: float, sens: int) -> None:
    xs = np.arange(-4000, 4001)
    w = np.exp(-np.abs(xs) / t)
    p = w / w.sum()
    q = np.roll(p, sens)  # the pmf shifted by the sensitivity
    for eps in (0.0, 0.5 / t, sens / t, 2.0):
        assert DiscreteLaplace(t, sens).delta_at(eps) == pytest.approx(
            _discrete_hockey_stick(p, q, eps), rel=1e-9, abs=1e-14
        )
    assert DiscreteLaplace(t, sens).pure().epsilon == pytest.approx(sens / t)


@pytest.mark.parametrize("sigma", [0.6, 3.0])
def test_discrete_gaussian_exact_delta_formula_of_math_md_6(sigma: float) -> None:
    """MATH.md 6.2: delta = Pr[Y > eps s^2/D - D/2] - e^eps Pr[Y > eps s^2/D + D/2], Y ~ N_Z(0, s^2)."""
    ys = np.arange(-200, 201)
    w = np.exp(-(ys**2) / (2 * sigma**2))
    pmf = w / w.sum()

    def tail(a: float) -> float:
        return float(pmf[ys > a].sum())

    m = DiscreteGaussian(sigma, 1)
    for eps in (0.05, 0.5, 1.5):
        truth = tail(eps * sigma**2 - 0.5) - math.exp(eps) * tail(eps * sigma**2 + 0.5)
        assert m.delta_at(eps) == pytest.approx(max(truth, 0.0), rel=1e-9, abs=1e-15)
    # and it is never above the zCDP (CKS) conversion of the same mechanism
    for delta in (1e-3, 1e-6):
        assert m.epsilon_at(delta) <= m.zcdp().epsilon_at(delta) * (1 + 1e-9)


def test_randomized_response_and_opaque_profiles_by_enumeration() -> None:
    e, k = 0.8, 4
    z = math.exp(e) + k - 1
    p = np.array([math.exp(e), 1, 1, 1]) / z
    q = np.array([1, math.exp(e), 1, 1]) / z
    for at in (0.0, 0.3, 0.8):
        assert RandomizedResponse(e, k).delta_at(at) == pytest.approx(_discrete_hockey_stick(p, q, at))
    d = 1e-3
    p2 = np.array([d, (1 - d) * math.exp(e) / (1 + math.exp(e)), (1 - d) / (1 + math.exp(e)), 0.0])
    q2 = p2[::-1]
    for at in (-0.5, 0.0, 0.4, 0.8, 1.0):
        assert OpaqueApproxDP(e, d).delta_at(at) == pytest.approx(_discrete_hockey_stick(p2, q2, at))
        assert ApproxDP(e, d).delta_at(at) == pytest.approx(_discrete_hockey_stick(p2, q2, at))
    assert ApproxDP(e, d).epsilon_at(d) == pytest.approx(e)
    assert ApproxDP(e, d).epsilon_at(d / 2) == math.inf


def test_mechanism_costs_under_each_definition() -> None:
    assert Laplace(10, 2).pure().epsilon == pytest.approx(0.2)
    assert Gaussian(4, 2).zcdp().rho == pytest.approx(4 / 32)
    assert Gaussian(4, 2).gdp().mu == pytest.approx(0.5)
    assert DiscreteGaussian(4, 2).zcdp().rho == pytest.approx(4 / 32)
    assert Gaussian(1).pure() is None
    assert OpaqueApproxDP(1, 1e-5).rdp() is None
    # pure DP's RDP curve: min(eps, alpha eps^2/2)
    assert PureDP(1.0).to_rdp((2.0, 10.0)).epsilons == pytest.approx((1.0, 1.0))
    assert PureDP(0.1).to_rdp((2.0,)).epsilons == pytest.approx((0.01,))


def test_basic_and_concurrent_composition_round_up_against_exact_sums() -> None:
    from fractions import Fraction

    from overlapdp.privacy import concurrent_composition

    tenths = [PureDP(0.1)] * 10
    exact = 10 * Fraction(0.1)  # > 1: fsum's 1.0 would under-report
    assert Fraction(PureDP.compose(tenths).epsilon) >= exact
    assert Fraction(concurrent_composition(tenths).guarantee.epsilon) >= exact  # type: ignore[union-attr]
    assert Fraction(ZCDP.compose([ZCDP(0.1)] * 10).rho) >= exact
    a = ApproxDP.compose([ApproxDP(0.1, 0.01)] * 10)
    assert Fraction(a.epsilon) >= exact and Fraction(a.delta) >= 10 * Fraction(0.01)
    mus = [0.1] * 10
    g = GDP.compose(GDP(m) for m in mus)
    assert Fraction(g.mu) ** 2 >= sum(Fraction(m) ** 2 for m in mus)
    r = RDP.compose([RDP((2.0, 3.0), (0.1, 0.1))] * 10)
    assert all(Fraction(e) >= exact for e in r.epsilons)
    assert PureDP.compose([PureDP(0.25)] * 4).epsilon == 1.0  # exact sums stay exact


def test_definitions_print_short_figures_on_the_safe_side() -> None:
    """Issue 24.3: ``TCDP(rho=0.30000000000000004)`` leaked a raw float; a guarantee prints through
    overlapdp.display: losses rounded up (never below the value), omega down, typed figures as typed."""
    from fractions import Fraction

    from overlapdp.privacy.definitions import GDP, RDP, TCDP, ApproxDP

    composed = TCDP(0.1, 5.0) + TCDP(0.2, 4.0)
    assert repr(composed) == "TCDP(rho=0.300001, omega=4)"
    assert Fraction("0.300001") >= Fraction(composed.rho)
    assert str(ZCDP(0.1) + ZCDP(0.2)) == "ZCDP(rho=0.300001)"
    assert repr(PureDP(0.5)) == "PureDP(epsilon=0.5)" and repr(GDP(1.0)) == "GDP(mu=1)"
    assert repr(ApproxDP(1.0, 1e-6)) == "ApproxDP(epsilon=1, delta=1e-06)"
    assert repr(TCDP(0.3, math.inf)) == "TCDP(rho=0.3, omega=inf)"
    assert (
        repr(RDP((2.0, 3.5), (0.1, 0.30000000000000004))) == "RDP(orders=(2, 3.5), epsilons=(0.1, 0.300001))"
    )
