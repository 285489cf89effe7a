"""Tight composition against independent truth: brute-force enumeration of composed outputs, the exact
GDP formula, and dp_accounting's optimistic and pessimistic PLDs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as dpl
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.privacy import (
    GDP,
    PLD,
    ApproxDP,
    BudgetError,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    OpaqueApproxDP,
    RandomizedResponse,
    advanced_composition,
    compose_all,
    compose_approx,
    kov_delta,
    kov_epsilon,
)


def brute_force_delta(eps: float, delta: float, k: int, at: float) -> float:
    """delta(at) of the k-fold product of the (eps, delta) dominating pair, enumerating all 4^k outputs
    (outputs: 'only under P' (prob delta), 'likely under P', 'likely under Q', 'only under Q')."""
    e = math.exp(eps)
    p1 = [delta, (1 - delta) * e / (1 + e), (1 - delta) / (1 + e), 0.0]
    q1 = p1[::-1]
    total = 0.0
    for outcome in itertools.product(range(4), repeat=k):
        p = math.prod(p1[o] for o in outcome)
        q = math.prod(q1[o] for o in outcome)
        total += max(0.0, p - math.exp(at) * q)
    return total


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize(("eps", "delta"), [(0.5, 0.0), (1.0, 1e-3), (0.1, 1e-2)])
def test_kov_equals_brute_force_privacy_loss(k: int, eps: float, delta: float) -> None:
    for i in range(k // 2 + 1):
        at = (k - 2 * i) * eps  # the theorem's own points
        assert kov_delta(eps, delta, k, at) == pytest.approx(
            brute_force_delta(eps, delta, k, at), rel=1e-8, abs=1e-15
        )
    for at in (0.0, 0.37 * eps, 1.6 * eps):  # and in between
        assert kov_delta(eps, delta, k, at) == pytest.approx(
            brute_force_delta(eps, delta, k, at), rel=1e-8, abs=1e-15
        )


@given(
    eps=st.floats(0.01, 2.0),
    k=st.integers(1, 6),
    at=st.floats(0.0, 6.0),
)
def test_kov_never_below_brute_force(eps: float, k: int, at: float) -> None:
    assert kov_delta(eps, 0.0, k, at) >= brute_force_delta(eps, 0.0, k, at) - 1e-15


@pytest.mark.slow
def test_kov_large_k_log_space_matches_pld_composition() -> None:
    eps, k = 0.01, 100_000
    e_kov = kov_epsilon(eps, 0.0, k, 1e-6)
    assert math.isfinite(e_kov)
    assert e_kov < k * eps  # far better than basic composition
    # the PLD of randomized response composed by repeated squaring is a pessimistic upper bound, close
    e_pld = RandomizedResponse(eps).pld(h=1e-4).self_compose(k).epsilon_at(1e-6)
    assert e_kov <= e_pld * (1 + 1e-9)
    assert e_pld <= e_kov * 1.02
    # and KOV beats advanced composition
    assert e_kov < advanced_composition(eps, 0.0, k, 1e-6).epsilon


def test_kov_epsilon_is_infinite_when_deltas_alone_exceed_target() -> None:
    assert kov_epsilon(0.1, 1e-7, 100, 1e-6) == math.inf
    e = kov_epsilon(0.1, 1e-9, 100, 1e-6)
    assert kov_delta(0.1, 1e-9, 100, e) <= 1e-6


@pytest.mark.parametrize("sigmas", [[2.0] * 10, [1.0, 3.0, 7.0, 7.0, 0.5]])
def test_gaussian_composition_matches_exact_gdp(sigmas: list[float]) -> None:
    exact = GDP.compose([GDP(1 / s) for s in sigmas])
    comp = compose_approx([Gaussian(s) for s in sigmas])
    for delta in (1e-3, 1e-6, 1e-9):
        e_exact = exact.epsilon_at(delta)
        e = comp.epsilon_at(delta)
        assert e >= e_exact * (1 - 1e-9)  # never below the exact value
        assert e <= e_exact + 2e-3  # and tight (grid h = 1e-4)
    for at in (0.0, 0.5, 2.0):
        assert comp.delta_at(at) >= exact.delta_at(at) * (1 - 1e-9)


def _between(ours: float, optimistic: float, pessimistic: float) -> None:
    assert optimistic * (1 - 1e-9) <= ours
    assert ours <= pessimistic * (1 + 1e-6) + 1e-9


@pytest.mark.parametrize(("scale", "k"), [(1.0, 20), (10.0, 200), (3.0, 1)])
def test_laplace_composition_between_dp_accounting_bounds(scale: float, k: int) -> None:
    pess = dpl.from_laplace_mechanism(scale).self_compose(k)
    opt = dpl.from_laplace_mechanism(scale, pessimistic_estimate=False, use_connect_dots=False).self_compose(
        k
    )
    ours = compose_approx([Laplace(scale)] * k)
    for delta in (1e-3, 1e-6):
        _between(ours.epsilon_at(delta), opt.get_epsilon_for_delta(delta), pess.get_epsilon_for_delta(delta))
    if k == 1:  # exact value known: the Laplace profile's inverse
        for delta in (1e-3, 1e-6):
            assert ours.epsilon_at(delta) >= Laplace(scale).epsilon_at(delta) * (1 - 1e-9)


def test_mixed_composition_between_dp_accounting_bounds() -> None:
    rng = np.random.default_rng(7)
    scales = rng.uniform(2, 20, 15)
    sigmas = rng.uniform(3, 10, 5)
    ours = compose_approx([Laplace(s) for s in scales] + [Gaussian(s) for s in sigmas])

    def build(pessimistic: bool):  # type: ignore[no-untyped-def]
        kw = {} if pessimistic else {"pessimistic_estimate": False, "use_connect_dots": False}
        pld = dpl.from_laplace_mechanism(scales[0], **kw)
        for s in scales[1:]:
            pld = pld.compose(dpl.from_laplace_mechanism(s, **kw))
        for s in sigmas:
            pld = pld.compose(dpl.from_gaussian_mechanism(s, **kw))
        return pld

    pess, opt = build(True), build(False)
    for delta in (1e-4, 1e-7):
        _between(ours.epsilon_at(delta), opt.get_epsilon_for_delta(delta), pess.get_epsilon_for_delta(delta))


def test_opaque_mix_never_below_the_exact_kov_value() -> None:
    mix = compose_approx([OpaqueApproxDP(0.2, 1e-8)] * 6 + [Laplace(5.0)])  # Laplace(5) is 0.2-DP
    exact = kov_epsilon(0.2, 1e-8, 7, 1e-5)  # 7 identical 0.2-DP guarantees dominate the mix
    assert mix.epsilon_at(1e-5) <= exact + 2e-3
    homog = compose_approx([OpaqueApproxDP(0.2, 1e-8)] * 7)
    assert homog.epsilon_at(1e-5) == pytest.approx(exact)
    pld = OpaqueApproxDP(0.2, 1e-8).pld().self_compose(7)
    assert pld.epsilon_at(1e-5) >= exact * (1 - 1e-9)


def test_heterogeneous_grouping_equals_plain_sequence() -> None:
    mechs = [Laplace(5.0), Laplace(5.0), Gaussian(4.0), Laplace(5.0), DiscreteLaplace(3.0), Gaussian(4.0)]
    grouped = compose_approx(mechs)
    plain = mechs[0].pld()
    for m in mechs[1:]:
        plain = plain.compose(m.pld())
    for delta in (1e-3, 1e-6):
        assert grouped.epsilon_at(delta) == pytest.approx(plain.epsilon_at(delta), rel=1e-6)


def test_pure_ledger_never_reports_more_than_basic_composition() -> None:
    comp = compose_approx([Laplace(0.1)] * 3)  # eps = 10 each: PLD may exceed 30 at tiny delta? never
    assert comp.epsilon_at(1e-9) <= 30.0 + 1e-9


# -- PLD safety ------------------------------------------------------------------------------------------
@given(
    b=st.floats(0.3, 30.0),
    h=st.sampled_from([1e-3, 1e-2, 5e-2]),
    at=st.floats(-1.0, 3.0),
)
def test_connect_the_dots_dominates_the_true_profile(b: float, h: float, at: float) -> None:
    m = Laplace(b)
    assert m.pld(h).delta_at(at) >= m.delta_at(at) - 1e-12


@given(sigma=st.floats(0.5, 10.0), at=st.floats(0.0, 4.0))
def test_connect_the_dots_gaussian_dominates_and_is_close(sigma: float, at: float) -> None:
    m = Gaussian(sigma)
    d = m.pld(1e-3).delta_at(at)
    assert d >= m.delta_at(at) * (1 - 1e-6) - 1e-13
    assert d <= m.delta_at(at) + 1e-4


@pytest.mark.slow
def test_rounding_up_atoms_and_truncation_only_increase_delta() -> None:
    rng = np.random.default_rng(3)
    losses = rng.normal(0.3, 1.0, 400)
    probs = rng.dirichlet(np.ones(400)) * 0.999
    fine = PLD.from_atoms(losses, probs, 0.001, h=1e-6)
    coarse = PLD.from_atoms(losses, probs, 0.001, h=0.05)
    cut = coarse.truncated(1e-2)
    for at in np.linspace(-1, 3, 41):
        exact = 0.001 + float(np.sum(probs * np.maximum(0, -np.expm1(at - losses))))
        assert fine.delta_at(at) >= exact - 1e-12
        assert coarse.delta_at(at) >= fine.delta_at(at) - 1e-12
        assert cut.delta_at(at) >= coarse.delta_at(at) - 1e-12


def test_epsilon_at_is_the_inverse_of_delta_at_on_the_safe_side() -> None:
    pld = compose_all([Laplace(2.0).pld(), Gaussian(3.0).pld()], [5, 3])
    for delta in (1e-2, 1e-5, 1e-9):
        e = pld.epsilon_at(delta)
        assert pld.delta_at(e) <= delta * (1 + 1e-9)
        assert pld.delta_at(max(0.0, e - 1e-4)) > delta


def test_bad_inputs() -> None:
    with pytest.raises(BudgetError):
        compose_approx([])
    with pytest.raises(BudgetError):
        compose_approx(["laplace"])
    with pytest.raises(BudgetError):
        compose_approx([Laplace(1.0)]).epsilon_at(0.0)
    with pytest.raises(BudgetError):
        Laplace(1.0).pld(1e-3).compose(Laplace(1.0).pld(1e-4))
    with pytest.raises(BudgetError):
        kov_delta(1.0, 0.0, -1, 0.0)
    assert compose_approx([ApproxDP(1.0, 1e-3)] * 4).method == "kov"
