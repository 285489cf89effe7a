"""The exact samplers against their exact pmfs (chi-square goodness of fit), and the randomness rules.

Expected pmfs are written here from the definitions (CKS 2020), not taken from the code under test.
Each test draws a few hundred thousand values with a fixed seed and uses a loose significance level
(1e-4) so it is stable; a deliberately wrong pmf must be rejected, so the test can fail.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

from overlapdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    InsecureRandomnessError,
    SeededRandomSource,
    SparseVector,
    SystemRandomSource,
    resolve_source,
)
from overlapdp.mechanisms.randomness import _after_fork_in_child
from overlapdp.mechanisms.samplers import (
    bernoulli_exp_neg_batch,
    bernoulli_exp_neg_scalar,
    discrete_gaussian_batch,
    discrete_gaussian_scalar,
    discrete_laplace_batch,
    discrete_laplace_scalar,
)

N_BATCH = 300_000
N_SCALAR = 60_000
ALPHA = 1e-4


def laplace_pmf(scale: Fraction, ys: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / float(scale))
    return (1 - q) / (1 + q) * q ** np.abs(ys)


def gauss_pmf(sigma2: Fraction, ys: np.ndarray) -> np.ndarray:
    s2 = float(sigma2)
    grid = np.arange(-int(60 * math.sqrt(s2)) - 60, int(60 * math.sqrt(s2)) + 61)
    z = np.exp(-(grid.astype(float) ** 2) / (2 * s2)).sum()
    return np.exp(-(ys.astype(float) ** 2) / (2 * s2)) / z


def gof_pvalue(draws: np.ndarray, pmf) -> float:
    """Chi-square p-value: one bin per value with expected count >= 10, the two tails pooled."""
    n = draws.size
    lo, hi = int(draws.min()), int(draws.max())
    span = np.arange(min(lo, -1), max(hi, 1) + 1)
    expected = pmf(span) * n
    keep = expected >= 10
    inner = span[keep]
    a, b = int(inner.min()), int(inner.max())
    inner = np.arange(a, b + 1)
    p_inner = pmf(inner)
    obs = np.array([np.sum(draws < a)] + [np.sum(draws == y) for y in inner] + [np.sum(draws > b)])
    exp_inner = p_inner * n
    rest = n - exp_inner.sum()
    # Split the remaining mass between the symmetric tails (both pmfs are symmetric about 0).
    tail_left = (1 - p_inner.sum()) / 2 * n if a == -b else _tail(pmf, a, -1) * n
    tail_right = rest - tail_left
    exp = np.concatenate([[tail_left], exp_inner, [tail_right]])
    mask = exp > 1e-9
    obs, exp = obs[mask], exp[mask]
    exp = exp * obs.sum() / exp.sum()
    return float(chisquare(obs, exp).pvalue)


def _tail(pmf, start: int, step: int) -> float:
    ys = np.arange(start + step, start + step * 100000, step)
    return float(pmf(ys).sum())


LAPLACE_SCALES = [Fraction(1), Fraction(10), Fraction(7, 3), Fraction(1, 2), Fraction(1000, 7)]
GAUSS_SIGMA2 = [Fraction(1), Fraction(100), Fraction(201, 2), Fraction(1, 4), Fraction(5000)]


@pytest.mark.parametrize("scale", LAPLACE_SCALES)
def test_discrete_laplace_batch_fits_its_pmf(scale: Fraction) -> None:
    draws = discrete_laplace_batch(SeededRandomSource(11), scale.numerator, scale.denominator, N_BATCH)
    assert gof_pvalue(draws, lambda y: laplace_pmf(scale, y)) > ALPHA


@pytest.mark.parametrize("scale", [Fraction(10), Fraction(7, 3)])
def test_discrete_laplace_scalar_fits_its_pmf(scale: Fraction) -> None:
    src = SeededRandomSource(12)
    draws = np.array(
        [discrete_laplace_scalar(src, scale.numerator, scale.denominator) for _ in range(N_SCALAR)]
    )
    assert gof_pvalue(draws, lambda y: laplace_pmf(scale, y)) > ALPHA


@pytest.mark.parametrize("sigma2", GAUSS_SIGMA2)
def test_discrete_gaussian_batch_fits_its_pmf(sigma2: Fraction) -> None:
    draws = discrete_gaussian_batch(SeededRandomSource(13), sigma2.numerator, sigma2.denominator, N_BATCH)
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(100), Fraction(201, 2)])
def test_discrete_gaussian_scalar_fits_its_pmf(sigma2: Fraction) -> None:
    src = SeededRandomSource(14)
    draws = np.array(
        [discrete_gaussian_scalar(src, sigma2.numerator, sigma2.denominator) for _ in range(N_SCALAR)]
    )
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > ALPHA


def test_goodness_of_fit_rejects_a_slightly_wrong_pmf() -> None:
    """The tests above have power: 5% too little noise is detected."""
    lap = discrete_laplace_batch(SeededRandomSource(15), 10, 1, N_BATCH)
    assert gof_pvalue(lap, lambda y: laplace_pmf(Fraction(95, 10), y)) < ALPHA
    gau = discrete_gaussian_batch(SeededRandomSource(16), 100, 1, N_BATCH)
    assert gof_pvalue(gau, lambda y: gauss_pmf(Fraction(95), y)) < ALPHA


def test_vectorised_gaussian_falls_back_exactly_when_integers_are_large() -> None:
    """A denominator too large for 64-bit arithmetic takes the scalar path; the pmf still fits."""
    sigma2 = Fraction(10**15 + 1, 10**13)  # about 100, with huge integers
    draws = discrete_gaussian_batch(SeededRandomSource(17), sigma2.numerator, sigma2.denominator, 20_000)
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7)])
def test_bernoulli_exp_neg_has_the_right_mean(gamma: Fraction) -> None:
    n = N_BATCH
    num = np.full(n, gamma.numerator, dtype=np.int64)
    hits = int(bernoulli_exp_neg_batch(SeededRandomSource(21), num, gamma.denominator).sum())
    p = math.exp(-float(gamma))
    assert chisquare([hits, n - hits], [p * n, (1 - p) * n]).pvalue > ALPHA if 0 < p < 1 else hits == n
    src = SeededRandomSource(19)
    m = 40_000
    hits_s = sum(bernoulli_exp_neg_scalar(src, gamma.numerator, gamma.denominator) for _ in range(m))
    assert chisquare([hits_s, m - hits_s], [p * m, (1 - p) * m]).pvalue > ALPHA if 0 < p < 1 else hits_s == m


def test_randbelow_is_uniform_for_small_and_huge_ranges() -> None:
    src = SeededRandomSource(20)
    draws = [src.randbelow(7) for _ in range(70_000)]
    assert chisquare(np.bincount(draws, minlength=7)).pvalue > ALPHA
    big = 3 * 2**70 + 5
    top = [src.randbelow(big) * 6 // big for _ in range(30_000)]
    assert all(0 <= v < 6 for v in top)
    assert chisquare(np.bincount(top, minlength=6)).pvalue > ALPHA
    arr = src.below(np.array([3, 5, 2**63 + 1], dtype=np.uint64).repeat(20_000))
    assert chisquare(np.bincount(arr[:20_000].astype(np.int64), minlength=3)).pvalue > ALPHA
    assert (arr[20_000:40_000] < 5).all() and (arr[40_000:] <= 2**63).all()


def test_default_randomness_is_the_operating_system_csprng() -> None:
    src = resolve_source(None)
    assert isinstance(src, SystemRandomSource) and src.secure
    assert resolve_source(None, served=True) is src
    noise = DiscreteLaplace(Fraction(3))
    draws = noise.sample_many(src, 1000)
    assert len(set(draws.tolist())) > 5  # not constant


@pytest.mark.parametrize("rng", [7, SeededRandomSource(7), np.random.default_rng(7)])
def test_seeded_generators_are_refused_in_a_served_context(rng: object) -> None:
    assert not resolve_source(rng).secure  # accepted for tests and simulations
    with pytest.raises(InsecureRandomnessError, match="served context"):
        resolve_source(rng, served=True)
    with pytest.raises(InsecureRandomnessError):
        SparseVector(lambda q: 0, epsilon=1.0, threshold=0.0, rng=rng, served=True)


def test_the_environment_can_declare_a_served_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLAPDP_SERVED", "1")
    with pytest.raises(InsecureRandomnessError):
        resolve_source(5)
    assert resolve_source(None).secure


def test_seeded_sources_reproduce_and_forked_children_drop_buffered_words() -> None:
    a, b = SeededRandomSource(3), SeededRandomSource(3)
    assert [a.word() for _ in range(5)] == [b.word() for _ in range(5)]
    DiscreteGaussian(Fraction(4)).sample(a)
    assert a._buffer  # words are buffered ...
    _after_fork_in_child()
    assert not a._buffer  # ... and a forked child never reuses them
    assert hasattr(os, "register_at_fork")


def test_bad_rng_is_refused() -> None:
    with pytest.raises(InsecureRandomnessError):
        resolve_source("seed")  # type: ignore[arg-type]
