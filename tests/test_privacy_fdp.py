"""f-DP numerics and concurrent composition against independent truth (Neyman-Pearson tests computed
from distribution functions, closed-form GDP curves, convexity checks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from overlapdp.privacy import (
    GDP,
    RDP,
    ZCDP,
    ApproxDP,
    ApproxTradeOff,
    BudgetError,
    Gaussian,
    GaussianTradeOff,
    Laplace,
    LaplaceTradeOff,
    PureDP,
    compose_approx,
    concurrent_composition,
    gdp_clt,
    lce,
    tensor,
)

ALPHAS = np.linspace(0.0, 1.0, 401)


def test_gaussian_tradeoff_equals_neyman_pearson_threshold_test() -> None:
    mu = 1.3
    # reject H0 (N(0,1)) when x > c: alpha = P0(x > c), beta = P1(x <= c): optimal (monotone ratio)
    for c in np.linspace(-3, 4, 15):
        alpha = stats.norm.sf(c)
        beta = stats.norm(mu, 1).cdf(c)
        assert GaussianTradeOff(mu)(alpha) == pytest.approx(beta, rel=1e-9, abs=1e-14)


def test_laplace_tradeoff_equals_neyman_pearson_threshold_test() -> None:
    e0 = 0.7
    for c in np.linspace(-3, 4, 29):
        alpha = stats.laplace.sf(c)
        beta = stats.laplace(e0, 1).cdf(c)
        assert LaplaceTradeOff(e0)(alpha) == pytest.approx(beta, rel=1e-9, abs=1e-14)


def test_approx_tradeoff_closed_form() -> None:
    f = ApproxTradeOff(1.0, 0.1)
    assert f(0.0) == pytest.approx(0.9)
    assert f(0.9) == pytest.approx(0.0)
    a = 0.5
    assert f(a) == pytest.approx(max(0, 0.9 - math.e * a, (0.9 - a) / math.e))


@pytest.mark.parametrize("f", [GaussianTradeOff(0.8), LaplaceTradeOff(0.5), ApproxTradeOff(0.4, 0.01)])
def test_profile_curve_is_a_lower_bound_and_close(f) -> None:  # type: ignore[no-untyped-def]
    """The piecewise-linear curve built from the profile lies below the exact f, and close to it."""
    g = lce([f])  # a single function's envelope is the function itself
    exact = f(ALPHAS)
    approx = g(ALPHAS)
    assert np.all(approx <= exact + 1e-9)
    assert np.max(exact - approx) < 5e-3


def test_lce_of_gdp_curves_is_the_curve_of_the_largest_mu() -> None:
    mus = [0.3, 1.7, 0.9, 1.2]
    env = lce([GaussianTradeOff(m) for m in mus])
    truth = GaussianTradeOff(max(mus))(ALPHAS)
    got = env(ALPHAS)
    assert np.all(got <= truth + 1e-9)  # safe
    assert np.max(truth - got) < 2e-3  # and tight
    for e in (0.0, 0.5, 2.0):  # as a profile it is exact
        assert env.delta_at(e) == pytest.approx(GDP(max(mus)).delta_at(e), rel=1e-8, abs=1e-15)


@st.composite
def tradeoff_sets(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 4))
    fs = []
    for _ in range(n):
        kind = draw(st.sampled_from(["g", "l", "a"]))
        if kind == "g":
            fs.append(GaussianTradeOff(draw(st.floats(0.05, 3.0))))
        elif kind == "l":
            fs.append(LaplaceTradeOff(draw(st.floats(0.05, 3.0))))
        else:
            fs.append(ApproxTradeOff(draw(st.floats(0.0, 2.0)), draw(st.floats(0.0, 0.2))))
    return fs


@given(tradeoff_sets())
def test_random_lce_lies_below_each_function_and_is_convex(fs) -> None:  # type: ignore[no-untyped-def]
    env = lce(fs)(ALPHAS)
    for f in fs:
        assert np.all(env <= f(ALPHAS) + 1e-9)
    second = env[:-2] - 2 * env[1:-1] + env[2:]
    assert np.all(second >= -1e-9)  # convex
    assert np.all(np.diff(env) <= 1e-12)  # non-increasing
    assert np.all(env >= 0) and np.all(env <= 1 - ALPHAS + 1e-12)


@pytest.mark.slow
def test_tensor_of_gaussians_is_gdp_composition() -> None:
    t = tensor([GaussianTradeOff(0.6), GaussianTradeOff(0.8)])
    truth = GaussianTradeOff(1.0)(ALPHAS)
    got = t(ALPHAS)
    assert np.all(got <= truth + 1e-9)
    assert np.max(truth - got) < 5e-3


def test_tensor_of_laplace_matches_pld_composition() -> None:
    t = tensor([LaplaceTradeOff(0.5)] * 4)
    c = compose_approx([Laplace(2.0)] * 4)
    for e in (0.1, 0.8, 1.5):
        # the trade-off's profile is the mechanism's rounded up by a relative 1e-9 (per factor)
        assert c.delta_at(e) <= t.delta_at(e) <= c.delta_at(e) * (1 + 1e-8) + 1e-15


def test_clt_is_labelled_approximate_beside_the_safe_bound() -> None:
    eps = [0.01] * 400
    clt = gdp_clt(eps)
    assert clt.approximate is True
    assert clt.safe.epsilon == pytest.approx(4.0)
    assert clt.mu == pytest.approx(math.sqrt(sum(e * e for e in eps)), rel=1e-3)
    with pytest.raises(BudgetError):
        gdp_clt([])


# -- concurrent composition (MATH.md 3) -------------------------------------------------------------------
def test_concurrent_closed_forms() -> None:
    assert concurrent_composition([PureDP(0.5), PureDP(0.25)]).guarantee == PureDP(0.75)
    z = concurrent_composition([ZCDP(0.1), ZCDP(0.2)])
    assert z.definition == "zcdp" and z.guarantee.rho == pytest.approx(0.3)  # type: ignore[union-attr]
    r = concurrent_composition([RDP((2.0, 3.0), (0.1, 0.2))] * 3)
    assert r.guarantee.epsilons == pytest.approx((0.3, 0.6))  # type: ignore[union-attr]
    g = concurrent_composition([GDP(0.3), GDP(0.4)])
    assert g.guarantee.mu == pytest.approx(0.5)  # type: ignore[union-attr]
    # pure and GDP members enter zCDP as eps^2/2 and mu^2/2
    m = concurrent_composition([ZCDP(0.1), PureDP(1.0), GDP(1.0)])
    assert m.guarantee.rho == pytest.approx(1.1)  # type: ignore[union-attr]


def test_concurrent_approx_is_the_optimal_composition() -> None:
    """Lyu Thm. 1: k analysts with (eps, delta) quotas are jointly bounded by the optimal composition."""
    k = concurrent_composition([ApproxDP(0.5, 1e-7)] * 10)
    seq = compose_approx([ApproxDP(0.5, 1e-7)] * 10)
    assert k.epsilon_at(1e-5) == pytest.approx(seq.epsilon_at(1e-5))
    assert k.epsilon_at(1e-5) < 5.0  # better than the basic sum


def test_concurrent_fdp_members() -> None:
    c = concurrent_composition([Gaussian(2.0), GaussianTradeOff(0.5), GDP(0.5)])
    exact = GDP.compose([GDP(0.5)] * 3)
    assert c.epsilon_at(1e-6) >= exact.epsilon_at(1e-6) * (1 - 1e-9)
    assert c.epsilon_at(1e-6) <= exact.epsilon_at(1e-6) + 2e-3


def test_concurrent_refuses_unknown_mixes() -> None:
    with pytest.raises(BudgetError):
        concurrent_composition([ZCDP(0.1), ApproxDP(1.0, 1e-6)])
    with pytest.raises(BudgetError):
        concurrent_composition([])
