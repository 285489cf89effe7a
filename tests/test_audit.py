"""Statistical privacy audits (overlapdp.audit): the project's mechanisms are never flagged, the
broken sparse-vector variants of Lyu, Su and Li (2017) always are.

Neighbouring data sets are given by their exact query answers, each query moving by at most 1 between
them (sensitivity 1). The non-monotone pairs used against the sparse vectors are not add/remove
neighbours for plain counts, but the non-monotonic SVT is private for ANY sensitivity-1 queries, so
they are fair attacks (and the ones that expose the broken variants; Lyu et al. Section 3).
Every audit uses a fixed seed, so the outcome is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from overlapdp.audit import audit_epsilon, clopper_pearson, repeat
from overlapdp.audit.broken_svt import run_variant, run_variant_many
from overlapdp.mechanisms import (
    DiscreteGaussian,
    GuessAndCheck,
    RandomSource,
    SparseVector,
    noise_for,
)
from overlapdp.privacy.definitions import ZCDP, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute

SCHEMA = Schema((IntAttribute("k", 0, 63),))
QUERIES = [PredicateQuery.from_coverages(SCHEMA, {"k": IndexSet.interval(i, i + 1)}) for i in range(64)]


def answers_of(values: Sequence[int]) -> Callable[[PredicateQuery], int]:
    """A data source whose query ``k`` has exact answer ``values[k]``."""

    def count(q: PredicateQuery) -> int:
        return values[q.constraints[0][1].intervals[0][0]]

    return count


def svt_outputs(
    make: Callable[[Callable[[PredicateQuery], int], RandomSource], SparseVector], values: Sequence[int]
) -> Callable[[RandomSource], tuple[Any, ...]]:
    data = answers_of(values)

    def run(source: RandomSource) -> tuple[Any, ...]:
        svt = make(data, source)
        out: list[Any] = []
        for k in range(len(values)):
            ans = svt.ask(QUERIES[k])
            if ans.outcome == "exhausted":
                break
            out.append(ans.released.value if ans.released is not None else ans.outcome)
        return tuple(out)

    return run


def pair_sampler(run0: Callable[[RandomSource], Any], run1: Callable[[RandomSource], Any]):
    return repeat(lambda which, source: (run0 if which == 0 else run1)(source))


# -- the audit itself -------------------------------------------------------------------------------
def test_clopper_pearson_matches_known_values() -> None:
    lo, hi = clopper_pearson(5, 100, 0.025)
    assert lo == pytest.approx(0.016432, abs=1e-5) and hi == pytest.approx(0.112834, abs=1e-5)
    assert clopper_pearson(0, 50, 0.05)[0] == 0.0 and clopper_pearson(50, 50, 0.05)[1] == 1.0


def test_identical_mechanisms_get_no_lower_bound_from_the_held_out_half() -> None:
    noise = noise_for(PureDP(1.0))
    sampler = lambda which, n, src: noise.sample_many(src, n).tolist()  # noqa: E731
    result = audit_epsilon(sampler, runs=40_000, rng=1)
    assert result.epsilon_lower < 0.05  # the event search alone may overfit; the held-out half does not


# -- the project's mechanisms are not flagged --------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_discrete_laplace_count_is_not_flagged_and_the_audit_is_nearly_tight(epsilon: float) -> None:
    noise = noise_for(PureDP(epsilon))

    def sampler(which: int, n: int, source: RandomSource) -> list[int]:
        return (which + noise.sample_many(source, n)).tolist()

    result = audit_epsilon(sampler, runs=300_000, rng=2)
    assert not result.flags(epsilon)
    assert result.epsilon_lower > 0.7 * epsilon  # the audit has the power to see most of epsilon


def discrete_gaussian_delta(sigma2: float, eps: float) -> float:
    """Exact delta(eps) of the discrete Gaussian with sensitivity 1 (CKS 2020, Theorem 7; MATH.md 6),
    summed here from the pmf."""
    big = int(60 * math.sqrt(sigma2)) + 60
    ys = np.arange(-big, big + 1).astype(float)
    pmf = np.exp(-(ys**2) / (2 * sigma2))
    pmf /= pmf.sum()
    a = eps * sigma2 - 0.5
    b = eps * sigma2 + 0.5
    return float(pmf[ys > a].sum() - math.exp(eps) * pmf[ys > b].sum())


def epsilon_for_delta(sigma2: float, delta: float) -> float:
    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if discrete_gaussian_delta(sigma2, mid) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("rho", [0.125, 0.5])
def test_discrete_gaussian_count_is_not_flagged(rho: float) -> None:
    noise = noise_for(ZCDP(rho))
    assert isinstance(noise, DiscreteGaussian)
    delta = 1e-3
    declared = epsilon_for_delta(float(noise.sigma2), delta)

    def sampler(which: int, n: int, source: RandomSource) -> list[int]:
        return (which + noise.sample_many(source, n)).tolist()

    result = audit_epsilon(sampler, runs=300_000, delta=delta, rng=3)
    assert not result.flags(declared)
    assert result.epsilon_lower > 0.4 * declared


# -- sparse vector: each broken variant flagged, the project's variant not, on the same attack ---------
NO_NOISE_PAIR = ((0, 1), (1, 0))  # opposite moves: impossible output on one side without query noise
M = 7
REUSED_PAIR = ((0,) * M + (1,), (1,) * M + (1,))  # M "below" then a released value pins the threshold
ALTERNATING = (tuple((i + 1) % 2 for i in range(30)), tuple(i % 2 for i in range(30)))


def reused_score(out: tuple[Any, ...]) -> float:
    """Small when the run is M "below" answers and then a released value <= 1 (Lyu et al. Alg. 3)."""
    if len(out) == M + 1 and all(x == "below" for x in out[:M]) and isinstance(out[M], int):
        return float(out[M])
    return 1e9


def alternating_score(out: tuple[Any, ...]) -> float:
    """ "above" on the queries larger in D0 minus "above" on those larger in D1."""
    return float(sum((1 if i % 2 == 0 else -1) for i, x in enumerate(out) if x == "above"))


def broken_sampler(variant: str, pair: tuple[Sequence[int], Sequence[int]], threshold: float):
    def sampler(which: int, n: int, source: RandomSource) -> list[tuple[object, ...]]:
        return run_variant_many(variant, pair[which], threshold, epsilon=1.0, c=1, n=n, source=source)  # type: ignore[arg-type]

    return sampler


def test_broken_variant_batches_agree_with_single_runs() -> None:
    from collections import Counter

    from overlapdp.mechanisms import SeededRandomSource

    src = SeededRandomSource(4)
    for variant, pair, t in [
        ("no_query_noise", NO_NOISE_PAIR, 0.5),
        ("reused_noise_release", REUSED_PAIR, 1),
    ]:
        many = Counter(run_variant_many(variant, pair[0], t, epsilon=1.0, c=1, n=30_000, source=src))  # type: ignore[arg-type]
        single = Counter(
            run_variant(variant, pair[0], t, epsilon=1.0, c=1, source=src) for _ in range(30_000)
        )  # type: ignore[arg-type]
        top = [o for o, _ in many.most_common(3)]
        for o in top:
            assert abs(many[o] - single[o]) < 6 * math.sqrt(many[o] + single[o])


def test_svt_without_query_noise_is_flagged_and_the_project_svt_is_not() -> None:
    broken = audit_epsilon(broken_sampler("no_query_noise", NO_NOISE_PAIR, 0.5), runs=20_000, rng=5)
    assert broken.flags(1.0) and broken.epsilon_lower > 3

    make = lambda data, src: SparseVector(data, epsilon=1.0, c=1, threshold=0.5, rng=src)  # noqa: E731
    ours = audit_epsilon(
        pair_sampler(svt_outputs(make, NO_NOISE_PAIR[0]), svt_outputs(make, NO_NOISE_PAIR[1])),
        runs=20_000,
        rng=6,
    )
    assert not ours.flags(1.0)


def test_svt_releasing_the_compared_noisy_value_is_flagged_and_fresh_release_is_not() -> None:
    runs = 400_000
    broken = audit_epsilon(
        broken_sampler("reused_noise_release", REUSED_PAIR, 1), runs=runs, score=reused_score, rng=7
    )
    assert broken.flags(1.0), broken

    # The project's release uses fresh noise and declares epsilon_3 on top: 1 + 0.5.
    make = lambda data, src: SparseVector(data, epsilon=1.0, c=1, threshold=1, release_epsilon=0.5, rng=src)  # noqa: E731
    ours = audit_epsilon(
        pair_sampler(svt_outputs(make, REUSED_PAIR[0]), svt_outputs(make, REUSED_PAIR[1])),
        runs=runs,
        score=reused_score,
        rng=8,
    )
    assert not ours.flags(1.5), ours


def test_svt_that_does_not_stop_after_c_positives_is_flagged_and_the_project_svt_is_not() -> None:
    broken = audit_epsilon(
        broken_sampler("no_stop", ALTERNATING, 0), runs=20_000, score=alternating_score, rng=9
    )
    assert broken.flags(1.0) and broken.epsilon_lower > 2

    for c in (1, 3):
        make = lambda data, src, c=c: SparseVector(data, epsilon=1.0, c=c, threshold=0, rng=src)  # noqa: E731
        ours = audit_epsilon(
            pair_sampler(svt_outputs(make, ALTERNATING[0]), svt_outputs(make, ALTERNATING[1])),
            runs=20_000,
            score=alternating_score,
            rng=10 + c,
        )
        assert not ours.flags(1.0), ours


def test_guess_and_check_is_not_flagged() -> None:
    """Guesses at the tolerance boundary, answers moving in opposite directions; declared epsilon from
    the noise scales (Lyu 2022 App. B)."""
    pair = ((10, 20, 30, 40), (11, 19, 31, 39))
    guesses = (12, 18, 32, 38)

    def run_for(values: Sequence[int]) -> Callable[[RandomSource], tuple[Any, ...]]:
        data = answers_of(values)

        def run(source: RandomSource) -> tuple[Any, ...]:
            gc = GuessAndCheck(
                data, tolerance=1.5, c=2, threshold_scale=2, query_scale=8, estimate_scale=4, rng=source
            )
            out = []
            for k, g in enumerate(guesses):
                ans = gc.check(QUERIES[k], g)
                out.append(ans.estimate.value if ans.estimate is not None else ans.outcome)
            return tuple(out)

        return run

    declared = 1 / 2 + 4 / 8 + 2 / 4
    lr = audit_epsilon(pair_sampler(run_for(pair[0]), run_for(pair[1])), runs=40_000, rng=14)
    assert not lr.flags(declared), lr
    count_score = lambda out: float(sum(1 for x in out if x == "confirmed"))  # noqa: E731
    by_count = audit_epsilon(
        pair_sampler(run_for(pair[0]), run_for(pair[1])), runs=40_000, score=count_score, rng=15
    )
    assert not by_count.flags(declared), by_count
    assert lr.epsilon_lower > 0 or by_count.epsilon_lower > 0  # the attack sees something


def test_audit_rejects_too_few_runs() -> None:
    with pytest.raises(ValueError):
        audit_epsilon(lambda which, n, src: [0] * n, runs=5)


def test_discrete_gaussian_delta_helper_agrees_with_continuous_intuition() -> None:
    """Sanity for the test's own reference: delta(eps) decreases in eps and lies in [0, 1]."""
    ds = [discrete_gaussian_delta(4.0, e) for e in (0.1, 0.5, 1.0, 2.0)]
    assert all(0 <= d <= 1 for d in ds) and ds == sorted(ds, reverse=True)
    assert float(Fraction(1, 2)) == 0.5
