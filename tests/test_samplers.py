"""The exact samplers against their exact pmfs (chi-square goodness of fit), and the randomness rules.

Expected pmfs are written here from the definitions (CKS 2020), not taken from the code under test.
Each test draws a few hundred thousand values, once from a seeded source (significance level 1e-4, the
outcome fixed by the seed) and once from the operating system's CSPRNG that a served deployment uses
(significance level 1e-7: a spurious failure about once in ten million runs; see tests/sources.py). A
deliberately wrong pmf must be rejected at that level on both sources, so the tests can fail.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from overlapdp.mechanisms import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    InsecureRandomnessError,
    MechanismError,
    SeededRandomSource,
    SparseVector,
    SystemRandomSource,
    add_noise,
    resolve_source,
    system_source,
)
from overlapdp.mechanisms.randomness import _after_fork_in_child
from overlapdp.mechanisms.samplers import (
    _below_const,
    bernoulli_exp_neg_batch,
    bernoulli_exp_neg_scalar,
    discrete_gaussian_batch,
    discrete_gaussian_scalar,
    discrete_laplace_batch,
    discrete_laplace_scalar,
)
from overlapdp.privacy.definitions import ZCDP
from sources import alpha_for, on_both_sources, on_both_sources_os_slow, source

N_BATCH = 300_000
N_SCALAR = 60_000


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


@on_both_sources_os_slow
@pytest.mark.parametrize("scale", LAPLACE_SCALES)
def test_discrete_laplace_batch_fits_its_pmf(scale: Fraction, kind: str) -> None:
    draws = discrete_laplace_batch(source(kind, 11), scale.numerator, scale.denominator, N_BATCH)
    assert gof_pvalue(draws, lambda y: laplace_pmf(scale, y)) > alpha_for(kind)


@on_both_sources_os_slow
@pytest.mark.parametrize("scale", [Fraction(10), Fraction(7, 3)])
def test_discrete_laplace_scalar_fits_its_pmf(scale: Fraction, kind: str) -> None:
    src = source(kind, 12)
    draws = np.array(
        [discrete_laplace_scalar(src, scale.numerator, scale.denominator) for _ in range(N_SCALAR)]
    )
    assert gof_pvalue(draws, lambda y: laplace_pmf(scale, y)) > alpha_for(kind)


@on_both_sources_os_slow
@pytest.mark.parametrize("sigma2", GAUSS_SIGMA2)
def test_discrete_gaussian_batch_fits_its_pmf(sigma2: Fraction, kind: str) -> None:
    draws = discrete_gaussian_batch(source(kind, 13), sigma2.numerator, sigma2.denominator, N_BATCH)
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > alpha_for(kind)


@on_both_sources_os_slow
@pytest.mark.parametrize("sigma2", [Fraction(100), Fraction(201, 2)])
def test_discrete_gaussian_scalar_fits_its_pmf(sigma2: Fraction, kind: str) -> None:
    src = source(kind, 14)
    draws = np.array(
        [discrete_gaussian_scalar(src, sigma2.numerator, sigma2.denominator) for _ in range(N_SCALAR)]
    )
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > alpha_for(kind)


@on_both_sources_os_slow
def test_goodness_of_fit_rejects_a_slightly_wrong_pmf(kind: str) -> None:
    """The tests above have power: 5% too little noise is detected at the source's level (measured
    p-values on the OS source are below 1e-50, so a miss is out of the question)."""
    lap = discrete_laplace_batch(source(kind, 15), 10, 1, N_BATCH)
    assert gof_pvalue(lap, lambda y: laplace_pmf(Fraction(95, 10), y)) < alpha_for(kind)
    gau = discrete_gaussian_batch(source(kind, 16), 100, 1, N_BATCH)
    assert gof_pvalue(gau, lambda y: gauss_pmf(Fraction(95), y)) < alpha_for(kind)


@on_both_sources
def test_vectorised_gaussian_falls_back_exactly_when_integers_are_large(kind: str) -> None:
    """A denominator too large for 64-bit arithmetic takes the scalar path; the pmf still fits."""
    sigma2 = Fraction(10**15 + 1, 10**13)  # about 100, with huge integers
    draws = discrete_gaussian_batch(source(kind, 17), sigma2.numerator, sigma2.denominator, 20_000)
    assert gof_pvalue(draws, lambda y: gauss_pmf(sigma2, y)) > alpha_for(kind)


@on_both_sources_os_slow
@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7)])
def test_bernoulli_exp_neg_has_the_right_mean(gamma: Fraction, kind: str) -> None:
    alpha = alpha_for(kind)
    n = N_BATCH
    num = np.full(n, gamma.numerator, dtype=np.int64)
    hits = int(bernoulli_exp_neg_batch(source(kind, 21), num, gamma.denominator).sum())
    p = math.exp(-float(gamma))
    assert chisquare([hits, n - hits], [p * n, (1 - p) * n]).pvalue > alpha if 0 < p < 1 else hits == n
    src = source(kind, 19)
    m = 40_000
    hits_s = sum(bernoulli_exp_neg_scalar(src, gamma.numerator, gamma.denominator) for _ in range(m))
    assert chisquare([hits_s, m - hits_s], [p * m, (1 - p) * m]).pvalue > alpha if 0 < p < 1 else hits_s == m


@on_both_sources
def test_randbelow_is_uniform_for_small_and_huge_ranges(kind: str) -> None:
    alpha = alpha_for(kind)
    src = source(kind, 20)
    draws = [src.randbelow(7) for _ in range(70_000)]
    assert chisquare(np.bincount(draws, minlength=7)).pvalue > alpha
    big = 3 * 2**70 + 5
    top = [src.randbelow(big) * 6 // big for _ in range(30_000)]
    assert all(0 <= v < 6 for v in top)
    assert chisquare(np.bincount(top, minlength=6)).pvalue > alpha
    arr = src.below(np.array([3, 5, 2**63 + 1], dtype=np.uint64).repeat(20_000))
    assert chisquare(np.bincount(arr[:20_000].astype(np.int64), minlength=3)).pvalue > alpha
    assert (arr[20_000:40_000] < 5).all() and (arr[40_000:] <= 2**63).all()


# -- the OS source hands out read-only bytes: samplers must never write into them --------------------
def test_words_are_fresh_writable_arrays_on_every_source() -> None:
    for src in (system_source(), SystemRandomSource(), SeededRandomSource(1)):
        a, b = src.words(64), src.words(64)
        assert a.flags.writeable
        a[:] = 0  # the caller owns it ...
        assert not np.shares_memory(a, b) and b.any()  # ... and it is not shared with later draws


def test_rejection_sampling_on_the_os_source_with_many_rejections() -> None:
    """m = 2^63 + 1 rejects each 64-bit word with probability about 1/2, so the loop that redraws
    rejected words in place runs (on the old code it wrote into np.frombuffer(os.urandom(...)), a
    read-only array, and raised ValueError with probability 1 - 2^-1000 here). The values must still be
    uniform: the top quarter-ranges are tested by chi-square at 1e-7."""
    m = 2**63 + 1
    draws = _below_const(system_source(), m, 4000)
    assert draws.dtype == np.uint64 and (draws < np.uint64(m)).all()
    quarters = np.array([int(v) * 4 // m for v in draws.tolist()])
    assert chisquare(np.bincount(quarters, minlength=4)).pvalue > alpha_for("os")


def test_exact_samplers_with_large_integers_run_on_the_os_source() -> None:
    """The exact samplers' public paths with large integers on the served source: a discrete Gaussian of
    sigma 10^6 and zCDP(1e-6) counts. (A discrete Laplace of scale 2^54 + 1, which rejected about one
    word in 1024, is now refused: noise scales stop at 2^40, where rejections are too rare to test;
    ``_below_const`` on the OS source with many rejections is tested directly above.)"""
    src = system_source()
    with pytest.raises(MechanismError, match="2\\^40"):
        DiscreteLaplaceNoise(Fraction(2**54 + 1))
    for _ in range(10):
        assert DiscreteGaussianNoise(Fraction(10**6)).sample_many(src, 1000).size == 1000
        answers = add_noise(np.zeros(1000, dtype=np.int64), ZCDP(1e-6), rng=src)
        assert len(answers) == 1000


# -- a source shared by threads (a served deployment shares one) ----------------------------------------
class _YieldingList(list[int]):
    """A pool whose emptiness check lets other threads run right after it: the window between seeing
    a draw in the pool and popping it, which the interpreter rarely switches in, opens on every call."""

    def __len__(self) -> int:
        n = super().__len__()
        time.sleep(0.0002)  # long enough that the other threads really run
        return n


class _Draws:
    """What a refill returns: ``tolist()`` gives the pool (a :class:`_YieldingList`)."""

    def __init__(self, values: list[int]) -> None:
        self.values = values

    def tolist(self) -> _YieldingList:
        return _YieldingList(self.values)


def _run_threads(n: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run() -> None:
        barrier.wait()
        try:
            work()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_threads_draining_a_small_pool_never_fail_and_never_share_a_draw() -> None:
    """Pools of TWO draws, 8 threads: the refilling thread takes one and the other threads all see the
    last one; on the old code they all popped it and all but one raised IndexError (reliably, since each
    emptiness check of the pool yields to the other threads). Each draw (numbered by the refill) must
    reach exactly one caller: a draw handed out twice would be reused noise."""
    src = SeededRandomSource(1)
    numbers = itertools.count()
    lock = threading.Lock()

    def refill(n: int) -> Any:
        with lock:
            return _Draws([next(numbers), next(numbers)])

    got: list[int] = []

    def work() -> None:
        mine = [src.pooled("k", refill) for _ in range(100)]
        with lock:
            got.extend(mine)

    errors = _run_threads(8, work)
    assert not errors, errors[:1]
    assert len(got) == 8 * 100 and len(set(got)) == len(got)


def test_threads_sharing_the_os_source_get_distinct_words_and_draws() -> None:
    """Many threads drawing words and pooled noise from the shared OS source: no error, no word twice
    (64-bit words from the CSPRNG collide with probability below 2^-40 here)."""
    src = system_source()
    got: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [src.word() for _ in range(5000)]
        for _ in range(2000):
            DiscreteLaplaceNoise(Fraction(7, 3)).sample(src)
        with lock:
            got.extend(mine)

    errors = _run_threads(8, work)
    assert not errors, errors[:1]
    assert len(set(got)) == len(got) == 8 * 5000


def test_default_randomness_is_the_operating_system_csprng() -> None:
    src = resolve_source(None)
    assert isinstance(src, SystemRandomSource) and src.secure
    assert resolve_source(None, served=True) is src
    noise = DiscreteLaplaceNoise(Fraction(3))
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
    DiscreteGaussianNoise(Fraction(4)).sample(a)
    assert a._buffer  # words are buffered ...
    _after_fork_in_child()
    assert not a._buffer  # ... and a forked child never reuses them
    assert hasattr(os, "register_at_fork")


def test_bad_rng_is_refused() -> None:
    with pytest.raises(InsecureRandomnessError):
        resolve_source("seed")  # type: ignore[arg-type]


@on_both_sources_os_slow
@pytest.mark.parametrize(
    "noise",
    [DiscreteLaplaceNoise(Fraction(7, 3)), DiscreteGaussianNoise(Fraction(201, 2))],
    ids=["laplace", "gaussian"],
)
def test_single_draws_fit_their_pmf(noise: DiscreteLaplaceNoise | DiscreteGaussianNoise, kind: str) -> None:
    """``sample`` (one draw per call: pools that grow from 512 to 4096 draws, refilled from buffered
    word arrays) has the exact pmf too, on the seeded and on the served OS source."""
    src = source(kind, 15)
    draws = np.array([noise.sample(src) for _ in range(N_SCALAR)])
    if isinstance(noise, DiscreteLaplaceNoise):
        assert gof_pvalue(draws, lambda y: laplace_pmf(noise.scale, y)) > alpha_for(kind)
    else:
        assert gof_pvalue(draws, lambda y: gauss_pmf(noise.sigma2, y)) > alpha_for(kind)


def test_pool_refills_double_up_to_the_cap_and_restart_after_eviction() -> None:
    """A cold distribution costs one small refill; a hot one is refilled in ever larger batches, capped."""
    src = SeededRandomSource(2)
    sizes: list[int] = []

    def refill(n: int) -> Any:
        sizes.append(n)
        return np.arange(n, dtype=np.int64)

    for _ in range(512 + 1024 + 2048 + 4096 + 4096 + 1):
        src.pooled("hot", refill)
    assert sizes == [512, 1024, 2048, 4096, 4096, 4096]
    for i in range(64):  # 64 other pools evict "hot": its next refill is small again
        src.pooled(("cold", i), lambda n: np.zeros(n, dtype=np.int64))
    sizes.clear()
    src.pooled("hot", refill)
    assert sizes == [512]


@pytest.mark.parametrize("make", [system_source, lambda: SeededRandomSource(4)], ids=["os", "seeded"])
def test_threads_taking_small_word_arrays_never_share_a_word(make: Any) -> None:
    """Small ``words(n)`` requests share one buffered array: each word must reach exactly one caller
    (64-bit words collide by chance with probability below 2^-36 here)."""
    src = make()
    got: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        mine: list[int] = []
        for i in range(3000):
            mine.extend(src.words(1 + i % 7).tolist())
        with lock:
            got.extend(mine)

    errors = _run_threads(8, work)
    assert not errors, errors[:1]
    assert len(set(got)) == len(got) == 8 * sum(1 + i % 7 for i in range(3000))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_reuses_the_parents_buffered_word_array() -> None:
    """After a fork, parent and child must not hand out the same buffered words (reused noise); the
    child drops the buffer and refills from the OS. Without the drop both read the same next words."""
    src = system_source()
    src.words(4)  # the buffer now holds unread words
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next words and leave at once
        os.write(write_fd, src.words(4).tobytes())
        os._exit(0)
    os.close(write_fd)
    child = np.frombuffer(os.read(read_fd, 32), dtype=np.uint64)
    os.close(read_fd)
    os.waitpid(pid, 0)
    parent = src.words(4)
    assert child.size == 4 and not np.array_equal(child, parent)


def test_memoised_calibration_still_refuses_a_boolean_sensitivity() -> None:
    """noise_for is memoised; a cache that treated True as 1 (equal and same hash) would hand back the
    sensitivity-1 noise instead of refusing the boolean."""
    from overlapdp.mechanisms.calibration import noise_for
    from overlapdp.privacy.definitions import PureDP

    assert noise_for(PureDP(0.5), 1) == DiscreteLaplaceNoise(Fraction(2))
    with pytest.raises(MechanismError, match="sensitivity"):
        noise_for(PureDP(0.5), True)  # type: ignore[arg-type]
    with pytest.raises(MechanismError):
        noise_for([0.5])  # type: ignore[arg-type]  # unhashable: still the named error


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(201, 2), Fraction(5000)])
def test_memoised_gaussian_half_width_is_the_smallest_covering_width(sigma2: Fraction) -> None:
    """Against the pmf summed here independently (mpmath-free: the normaliser over +-60 sigma), for
    several levels on the same noise (the memo is keyed by sigma^2 AND level)."""
    s2 = float(sigma2)
    m = int(60 * math.sqrt(s2)) + 60
    ys = np.arange(-m, m + 1)
    pmf = np.exp(-(ys.astype(float) ** 2) / (2 * s2))
    pmf /= pmf.sum()
    noise = DiscreteGaussianNoise(sigma2)
    for level in (0.5, 0.9, 0.95, 0.99):
        w = noise.half_width(level)
        inside = pmf[np.abs(ys) <= w].sum()
        below = pmf[np.abs(ys) <= w - 1].sum()
        assert inside >= level - 1e-12 and (w == 0 or below < level + 1e-12), (level, w)
        assert DiscreteGaussianNoise(sigma2).half_width(level) == w  # a new object, the same answer
