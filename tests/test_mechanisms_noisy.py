"""Noisy counts: calibration from budgets, exact error bars (coverage in simulation), bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.mechanisms import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    MechanismError,
    add_noise,
    declared_guarantee,
    guarantee_of,
    noise_for,
    noisy_count,
    noisy_counts,
)
from overlapdp.mechanisms.randomness import SeededRandomSource
from overlapdp.privacy.definitions import GDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.query import parse_where
from overlapdp.samples import adult_schema, synthetic_adult
from sources import on_both_sources, on_both_sources_os_slow, source


def laplace_abs_cdf(scale: Fraction, w: int) -> float:
    """P(|Y| <= w) for the discrete Laplace, summed from the pmf (independent of the closed form)."""
    q = math.exp(-1 / float(scale))
    ys = np.arange(-w, w + 1)
    return float(((1 - q) / (1 + q) * q ** np.abs(ys)).sum())


def gauss_abs_cdf(sigma2: Fraction, w: int) -> float:
    s2 = float(sigma2)
    big = int(50 * math.sqrt(s2)) + 50
    grid = np.arange(-big, big + 1).astype(float)
    weights = np.exp(-(grid**2) / (2 * s2))
    return float(weights[np.abs(grid) <= w].sum() / weights.sum())


@given(st.floats(min_value=1e-3, max_value=50.0), st.integers(min_value=1, max_value=5))
def test_laplace_calibration_never_gives_less_noise(epsilon: float, sensitivity: int) -> None:
    noise = noise_for(PureDP(epsilon), sensitivity)
    assert isinstance(noise, DiscreteLaplaceNoise)
    assert noise.scale >= Fraction(sensitivity) / Fraction(epsilon)  # exact comparison
    assert noise.scale <= Fraction(sensitivity) / Fraction(epsilon) * Fraction(
        1_000_001, 1_000_000
    ) + Fraction(1, 10**6)
    assert guarantee_of(noise, sensitivity).epsilon <= epsilon


@given(st.floats(min_value=1e-4, max_value=20.0), st.integers(min_value=1, max_value=3))
def test_gaussian_calibration_never_gives_less_noise(rho: float, sensitivity: int) -> None:
    noise = noise_for(ZCDP(rho), sensitivity)
    assert isinstance(noise, DiscreteGaussianNoise)
    assert noise.sigma2 >= Fraction(sensitivity**2) / (2 * Fraction(rho))
    assert guarantee_of(noise, sensitivity).rho <= rho  # type: ignore[union-attr]


def test_gdp_budget_gives_sigma_delta_over_mu_declared_as_zcdp() -> None:
    noise = noise_for(GDP(0.5), 1)
    assert isinstance(noise, DiscreteGaussianNoise)
    assert noise.sigma2 >= 4 and float(noise.sigma2) == pytest.approx(4)
    declared = declared_guarantee(GDP(0.5))
    assert isinstance(declared, ZCDP) and declared.rho == pytest.approx(0.125) and declared.rho >= 0.125


NOISES = [
    DiscreteLaplaceNoise(Fraction(10, 3)),
    DiscreteLaplaceNoise(Fraction(1, 2)),
    DiscreteGaussianNoise(Fraction(50)),
    DiscreteGaussianNoise(Fraction(1, 3)),
]


@pytest.mark.parametrize("noise", NOISES, ids=lambda n: n.describe())
@pytest.mark.parametrize("level", [0.5, 0.8, 0.95])
def test_error_bar_is_the_smallest_interval_reaching_its_level(noise, level: float) -> None:
    w = noise.half_width(level)
    cdf = laplace_abs_cdf if isinstance(noise, DiscreteLaplaceNoise) else gauss_abs_cdf
    param = noise.scale if isinstance(noise, DiscreteLaplaceNoise) else noise.sigma2
    assert cdf(param, w) >= level - 1e-12
    assert w == 0 or cdf(param, w - 1) < level


@pytest.mark.parametrize(
    "budget",
    [PureDP(0.3), PureDP(2.0), ZCDP(0.01), GDP(1.5)],
    ids=["lap0.3", "lap2", "gauss-rho", "gauss-mu"],
)
# 200 000 draws a case, ~2 s of CPU each: the quick suite audits level 0.9, the whole grid runs with
# the slow tests (./scripts/test, CI)
@pytest.mark.parametrize(
    "level", [pytest.param(0.6, marks=pytest.mark.slow), 0.9, pytest.param(0.99, marks=pytest.mark.slow)]
)
@on_both_sources_os_slow
def test_error_bar_coverage_matches_its_level_in_simulation(budget, level: float, kind: str) -> None:
    """Coverage within 5 standard errors: on the OS source a spurious failure has probability below
    6e-7 per assertion (normal approximation of a binomial with n = 200,000)."""
    n = 200_000
    truth = 1234
    answers = add_noise(np.full(n, truth), budget, level=level, rng=source(kind, 3))
    inside = np.mean([a.low <= truth <= a.high for a in answers])
    noise = answers[0].noise
    w = answers[0].high - answers[0].value
    exact = (
        laplace_abs_cdf(noise.scale, w)
        if isinstance(noise, DiscreteLaplaceNoise)
        else gauss_abs_cdf(noise.sigma2, w)
    )
    assert exact >= level - 1e-12
    se = math.sqrt(exact * (1 - exact) / n)
    assert abs(inside - exact) < 5 * se + 1e-9
    assert inside >= level - 5 * math.sqrt(level * (1 - level) / n)


def test_large_sigma_uses_a_conservative_bound() -> None:
    noise = DiscreteGaussianNoise(Fraction(10**12))  # sigma = 10^6: the pmf is not summed
    w = noise.half_width(0.95)
    assert w == pytest.approx(1.96 * 10**6, rel=1e-3)
    assert w >= 1.959963984540054 * 10**6


@on_both_sources
def test_noisy_counts_answer_predicate_queries_from_a_frame(kind: str) -> None:
    schema = adult_schema()
    frame = synthetic_adult(5_000, seed=1)
    queries = [
        parse_where(schema, "age BETWEEN 20 AND 29").with_id("young"),
        parse_where(schema, "sex = 1").with_id("sex1"),
    ]
    exact = [int(frame["age"].between(20, 29).sum()), int((frame["sex"] == 1).sum())]
    answers = noisy_counts(queries, frame, PureDP(100.0), rng=source(kind, 5), level=0.99)  # gamma 2
    assert [a.query_id for a in answers] == ["young", "sex1"]
    for a, e in zip(answers, exact, strict=True):
        assert a.low <= e <= a.high and a.high - a.low <= 2
        assert a.guarantee == PureDP(50.0)
    one = noisy_count(queries[0], frame, ZCDP(1.0), rng=source(kind, 6))
    assert isinstance(one.noise, DiscreteGaussianNoise) and abs(one.value - exact[0]) < 10
    assert one.to_json()["error_bar"] == {"level": one.level, "low": one.low, "high": one.high}
    called = noisy_count(queries[0], lambda q: 7, PureDP(100.0), rng=source(kind, 7))
    assert abs(called.value - 7) <= 1


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_budgets_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(BudgetError):
        add_noise([1], PureDP(bad))
    with pytest.raises(BudgetError):
        add_noise([1], ZCDP(bad))


def test_other_bad_input_is_refused_clearly() -> None:
    with pytest.raises(MechanismError, match="level"):
        add_noise([1], PureDP(1.0), level=1.0)
    with pytest.raises(MechanismError, match="sensitivity"):
        add_noise([1], PureDP(1.0), sensitivity=0)
    with pytest.raises(MechanismError, match="sensitivity"):
        add_noise([1], PureDP(1.0), sensitivity=1.5)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="ApproxDP"):
        add_noise([1], ApproxDP(1.0, 1e-6))
    with pytest.raises(MechanismError):
        DiscreteLaplaceNoise(Fraction(0))


def test_noisy_counts_takes_the_total_budget_and_reports_the_spend() -> None:
    """Issue 24.2: a budget of 1.0 on overlapping queries spent 1.0 per query (gamma 2: 2.0 in all)."""
    schema = adult_schema()
    frame = synthetic_adult(2_000, seed=3)
    queries = [
        parse_where(schema, "age BETWEEN 20 AND 39").with_id("a"),
        parse_where(schema, "age BETWEEN 30 AND 49").with_id("b"),
        parse_where(schema, "age >= 60").with_id("c"),
    ]
    spans = [(20, 39), (30, 49), (60, 200)]  # brute force over every age: 30-39 lie in two, none in three
    gamma = max(sum(lo <= x <= hi for lo, hi in spans) for x in range(0, 120))
    answers = noisy_counts(queries, frame, PureDP(1.0), rng=SeededRandomSource(1))
    assert answers.gamma == gamma == 2
    assert answers.per_query == PureDP(0.5) and answers.spent == PureDP(1.0)
    assert answers.spent == answers.budget
    assert all(a.guarantee == PureDP(0.5) for a in answers)
    assert answers.summary() == "spent epsilon = 1 of 1 on 3 counts (max overlap 2, epsilon = 0.5 each)"
    # a plain number is the same total, in the definition's unit (epsilon by default), as plan_answers takes
    floats = noisy_counts(queries, frame, 1.0, rng=SeededRandomSource(1))
    assert [a.value for a in floats] == [a.value for a in answers]
    rho = noisy_counts(queries, frame, 0.5, definition="zcdp", rng=SeededRandomSource(1))
    assert rho.per_query == ZCDP(0.25) and rho.spent == ZCDP(0.5)
    gdp = noisy_counts(queries, frame, GDP(1.0), rng=SeededRandomSource(1))
    assert gdp.spent.rho <= 0.5  # type: ignore[union-attr]
    # the old per-query meaning only under its own name, and the spend still reported
    old = noisy_counts(queries, frame, per_query=PureDP(0.5), rng=SeededRandomSource(1))
    assert old.budget is None and old.spent == PureDP(1.0)
    for bad in (True, "0.5", None):
        with pytest.raises((BudgetError, MechanismError)):
            noisy_counts(queries, frame, bad)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="not both"):
        noisy_counts(queries, frame, PureDP(1.0), per_query=PureDP(0.5))
    with pytest.raises(MechanismError, match="zcdp"):
        noisy_counts(queries, frame, PureDP(1.0), definition="zcdp")
