"""Statistical privacy audits (overlapdp.audit): the project's mechanisms are never flagged, the
broken sparse-vector variants of Lyu, Su and Li (2017) always are.

Neighbouring data sets are given by their exact query answers, each query moving by at most 1 between
them (sensitivity 1). The non-monotone pairs used against the sparse vectors are not add/remove
neighbours for plain counts, but the non-monotonic SVT is private for ANY sensitivity-1 queries, so
they are fair attacks (and the ones that expose the broken variants; Lyu et al. Section 3).
Every audit runs twice: on a seeded source at confidence 0.95 (reproducible) and on the operating
system's CSPRNG that a served deployment uses, at confidence 1 - 1e-6, so that a mechanism keeping its
declaration is flagged there with probability at most 1e-6 (tests/sources.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from overlapdp.audit import audit_epsilon, battery, clopper_pearson, repeat
from overlapdp.audit.broken_svt import run_variant, run_variant_many
from overlapdp.mechanisms import (
    DiscreteGaussianNoise,
    GuessAndCheck,
    RandomSource,
    SparseVector,
    noise_for,
)
from overlapdp.privacy.definitions import ZCDP, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute
from sources import confidence_for, on_both_sources, on_both_sources_os_slow, source

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


@on_both_sources
def test_identical_mechanisms_get_no_lower_bound_from_the_held_out_half(kind: str) -> None:
    noise = noise_for(PureDP(1.0))
    sampler = lambda which, n, src: noise.sample_many(src, n).tolist()  # noqa: E731
    result = audit_epsilon(sampler, runs=40_000, rng=source(kind, 1), confidence=confidence_for(kind))
    assert result.epsilon_lower < 0.05  # the event search alone may overfit; the held-out half does not


# -- the project's mechanisms are not flagged --------------------------------------------------------
@on_both_sources_os_slow
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_discrete_laplace_count_is_not_flagged_and_the_audit_is_nearly_tight(
    epsilon: float, kind: str
) -> None:
    noise = noise_for(PureDP(epsilon))

    def sampler(which: int, n: int, source: RandomSource) -> list[int]:
        return (which + noise.sample_many(source, n)).tolist()

    result = audit_epsilon(sampler, runs=300_000, rng=source(kind, 2), confidence=confidence_for(kind))
    assert not result.flags(epsilon)
    assert result.epsilon_lower > 0.7 * epsilon  # the audit has the power to see most of epsilon


def discrete_gaussian_delta(sigma2: float, eps: float) -> float:
    """Exact delta(eps) of the discrete Gaussian with sensitivity 1 (CKS 2020, Theorem 7; MATH.md 6.2),
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


@on_both_sources_os_slow
@pytest.mark.parametrize("rho", [0.125, 0.5])
def test_discrete_gaussian_count_is_not_flagged(rho: float, kind: str) -> None:
    noise = noise_for(ZCDP(rho))
    assert isinstance(noise, DiscreteGaussianNoise)
    delta = 1e-3
    declared = epsilon_for_delta(float(noise.sigma2), delta)

    def sampler(which: int, n: int, source: RandomSource) -> list[int]:
        return (which + noise.sample_many(source, n)).tolist()

    result = audit_epsilon(
        sampler, runs=300_000, delta=delta, rng=source(kind, 3), confidence=confidence_for(kind)
    )
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


@pytest.mark.slow  # 1.2 s of CPU
def test_broken_variant_batches_agree_with_single_runs() -> None:
    from collections import Counter

    from overlapdp.mechanisms import SeededRandomSource

    src = SeededRandomSource(4)
    for variant, pair, t, eps in [
        ("no_query_noise", NO_NOISE_PAIR, 0.5, 1.0),
        ("reused_noise_release", REUSED_PAIR, 1, 1.0),
        ("fresh_threshold_noise", SHIFTED, BATTERY_THRESHOLD, BATTERY_EPSILON),
        ("monotonic_noise", OPPOSITE, BATTERY_THRESHOLD, BATTERY_EPSILON),
    ]:
        many = Counter(run_variant_many(variant, pair[0], t, epsilon=eps, c=1, n=30_000, source=src))  # type: ignore[arg-type]
        single = Counter(
            run_variant(variant, pair[0], t, epsilon=eps, c=1, source=src)  # type: ignore[arg-type]
            for _ in range(30_000)
        )
        top = [o for o, _ in many.most_common(3)]
        for o in top:
            assert abs(many[o] - single[o]) < 6 * math.sqrt(many[o] + single[o])


@on_both_sources_os_slow
def test_svt_without_query_noise_is_flagged_and_the_project_svt_is_not(kind: str) -> None:
    conf = confidence_for(kind)
    broken = audit_epsilon(
        broken_sampler("no_query_noise", NO_NOISE_PAIR, 0.5),
        runs=20_000,
        rng=source(kind, 5),
        confidence=conf,
    )
    assert broken.flags(1.0) and broken.epsilon_lower > 3

    make = lambda data, src: SparseVector(data, epsilon=1.0, max_positives=1, threshold=0.5, rng=src)  # noqa: E731
    ours = audit_epsilon(
        pair_sampler(svt_outputs(make, NO_NOISE_PAIR[0]), svt_outputs(make, NO_NOISE_PAIR[1])),
        runs=20_000,
        rng=source(kind, 6),
        confidence=conf,
    )
    assert not ours.flags(1.0)


@pytest.mark.slow
@on_both_sources_os_slow
def test_svt_releasing_the_compared_noisy_value_is_flagged_and_fresh_release_is_not(kind: str) -> None:
    runs = 400_000
    conf = confidence_for(kind)
    # At confidence 1 - 1e-6 (OS source) the held-out event "score <= 1" has about 300 vs 40-46 hits per
    # 500,000 runs a side: 1,000,000 runs gave 1.35 once and 0.95 in a CI run (2026-12-01); drawing
    # those counts binomially, the bound is <= 1.0 with probability 0.4-0.6 at 1,000,000 runs, 0.005-0.013
    # at 2,000,000, and in none of 400 draws at 4,000,000 (median 1.41-1.50, minimum 1.22-1.32).
    broken = audit_epsilon(
        broken_sampler("reused_noise_release", REUSED_PAIR, 1),
        runs=runs if kind == "seeded" else 4_000_000,
        score=reused_score,
        rng=source(kind, 7),
        confidence=conf,
    )
    assert broken.flags(1.0), broken

    # The project's release uses fresh noise and declares epsilon_3 on top: 1 + 0.5.
    make = lambda data, src: SparseVector(  # noqa: E731
        data, epsilon=1.0, max_positives=1, threshold=1, release_epsilon=0.5, rng=src
    )
    ours = audit_epsilon(
        pair_sampler(svt_outputs(make, REUSED_PAIR[0]), svt_outputs(make, REUSED_PAIR[1])),
        runs=runs,
        score=reused_score,
        rng=source(kind, 8),
        confidence=conf,
    )
    assert not ours.flags(1.5), ours


@pytest.mark.slow
@on_both_sources
def test_svt_that_does_not_stop_after_c_positives_is_flagged_and_the_project_svt_is_not(kind: str) -> None:
    conf = confidence_for(kind)
    broken = audit_epsilon(
        broken_sampler("no_stop", ALTERNATING, 0),
        runs=20_000,
        score=alternating_score,
        rng=source(kind, 9),
        confidence=conf,
    )
    # On the OS source (confidence 1 - 1e-6) the bound measured 1.72-2.17 over 8 repeats: flagged with a
    # margin of about 6 standard deviations; the stronger "> 2" is asserted on the seeded source only.
    assert broken.flags(1.0) and (kind == "os" or broken.epsilon_lower > 2)

    for c in (1, 3):
        make = lambda data, src, c=c: SparseVector(data, epsilon=1.0, max_positives=c, threshold=0, rng=src)  # noqa: E731
        ours = audit_epsilon(
            pair_sampler(svt_outputs(make, ALTERNATING[0]), svt_outputs(make, ALTERNATING[1])),
            runs=20_000,
            score=alternating_score,
            rng=source(kind, 10 + c),
            confidence=conf,
        )
        assert not ours.flags(1.0), ours


@pytest.mark.slow
@on_both_sources_os_slow
def test_guess_and_check_is_not_flagged(kind: str) -> None:
    """Guesses at the tolerance boundary, answers moving in opposite directions; declared epsilon from
    the noise scales (Lyu 2022 App. B)."""
    pair = ((10, 20, 30, 40), (11, 19, 31, 39))
    guesses = (12, 18, 32, 38)

    def run_for(values: Sequence[int]) -> Callable[[RandomSource], tuple[Any, ...]]:
        data = answers_of(values)

        def run(source: RandomSource) -> tuple[Any, ...]:
            gc = GuessAndCheck(
                data,
                tolerance=1.5,
                max_failures=2,
                threshold_scale=2,
                query_scale=8,
                estimate_scale=4,
                rng=source,
            )
            out = []
            for k, g in enumerate(guesses):
                ans = gc.check(QUERIES[k], g)
                out.append(ans.estimate.value if ans.estimate is not None else ans.outcome)
            return tuple(out)

        return run

    declared = 1 / 2 + 4 / 8 + 2 / 4
    conf = confidence_for(kind)
    lr = audit_epsilon(
        pair_sampler(run_for(pair[0]), run_for(pair[1])), runs=40_000, rng=source(kind, 14), confidence=conf
    )
    assert not lr.flags(declared), lr
    count_score = lambda out: float(sum(1 for x in out if x == "confirmed"))  # noqa: E731
    by_count = audit_epsilon(
        pair_sampler(run_for(pair[0]), run_for(pair[1])),
        runs=40_000,
        score=count_score,
        rng=source(kind, 15),
        confidence=conf,
    )
    assert not by_count.flags(declared), by_count
    assert lr.epsilon_lower > 0 or by_count.epsilon_lower > 0  # the attack sees something


# -- the strengthened battery: two plausible slips as negative controls ----------------------------
# With the shipped pairs above, fresh threshold noise per query scored 0.31 and monotonic noise on
# non-monotonic queries 0.73 at epsilon 1: neither was flagged. overlapdp.audit.battery adds the attacks
# that expose them (SHIFTED: 40 queries all +1 on the neighbour; OPPOSITE: 10 down then 1 up), at
# epsilon 4, confidence 1 - 1e-6 and fixed runs; see its module doc for the reasoning.
BATTERY_EPSILON = battery.EPSILON
BATTERY_THRESHOLD = battery.THRESHOLD
SHIFTED = battery.SHIFTED.answers
OPPOSITE = battery.OPPOSITE.answers


def first_above_distribution(
    answers: Sequence[int], threshold_scale: Fraction, query_scale: Fraction, *, fresh: bool
) -> np.ndarray:
    """EXACT output distribution of a c = 1 sparse vector (independent of the code under test): entry j
    is P(first "above" at query j), the last entry P(no "above"). "above" iff q + nu >= T + rho, with
    rho, nu discrete Laplace (pmf (1-a)/(1+a) a^|y|, a = e^{-1/t}); rho shared, or fresh per query.
    rho is summed over |rho| <= 400, which leaves out mass below 1e-60 at these scales."""

    def pmf(t: Fraction, ys: np.ndarray) -> np.ndarray:
        a = math.exp(-1 / float(t))
        return (1 - a) / (1 + a) * a ** np.abs(ys)

    rhos = np.arange(-400, 401)
    p_rho = pmf(threshold_scale, rhos)
    grid = np.arange(-400, 401)
    cdf = np.concatenate([[0.0], np.cumsum(pmf(query_scale, grid))])  # cdf[i] = P(nu < grid[0] + i)

    def below(x: np.ndarray) -> np.ndarray:  # P(nu < x) for integer x
        return cdf[np.clip(x - grid[0], 0, grid.size)]

    out = []
    if fresh:
        run = 1.0
        for q in answers:
            p = float((p_rho * below(BATTERY_THRESHOLD + rhos - q)).sum())
            out.append(run * (1 - p))
            run *= p
        return np.array([*out, run])
    alive = np.ones(rhos.size)
    for q in answers:
        f = below(BATTERY_THRESHOLD + rhos - q)
        out.append(float((p_rho * alive * (1 - f)).sum()))
        alive = alive * f
    return np.array([*out, float((p_rho * alive).sum())])


def exact_loss(
    pair: tuple[Sequence[int], Sequence[int]], rho_scale: Fraction, nu_scale: Fraction, fresh: bool
) -> float:
    p0 = first_above_distribution(pair[0], rho_scale, nu_scale, fresh=fresh)
    p1 = first_above_distribution(pair[1], rho_scale, nu_scale, fresh=fresh)
    return float(np.max(np.abs(np.log(p0) - np.log(p1))))


def test_the_battery_attacks_expose_both_slips_exactly_and_the_project_svt_keeps_its_declaration() -> None:
    """Independent truth for the negative controls: on its attack each slip's exact loss exceeds the
    declared epsilon 4 (fresh threshold noise: 34.1, growing with the run of "below" answers;
    monotonic noise: 6.0 = 1.5 epsilon), while the project's SparseVector stays within its guarantee
    on both attacks (1.55 on SHIFTED; 3.99995 on OPPOSITE, the bound itself: the attack is tight)."""
    from overlapdp.audit.broken_svt import _noises

    svt = SparseVector(lambda q: 0, epsilon=BATTERY_EPSILON, max_positives=1, threshold=BATTERY_THRESHOLD)
    declared = svt.guarantee.epsilon
    assert declared == BATTERY_EPSILON
    for pair in (SHIFTED, OPPOSITE):
        loss = exact_loss(pair, svt.threshold_noise.scale, svt.query_noise.scale, fresh=False)
        assert loss <= declared + 1e-9
    assert loss > declared - 1e-3  # OPPOSITE is (nearly) tight for the correct mechanism
    fresh_rho, fresh_nu = _noises("fresh_threshold_noise", BATTERY_EPSILON, 1)
    assert exact_loss(SHIFTED, fresh_rho.scale, fresh_nu.scale, fresh=True) > 5 * BATTERY_EPSILON
    mono_rho, mono_nu = _noises("monotonic_noise", BATTERY_EPSILON, 1)
    assert exact_loss(OPPOSITE, mono_rho.scale, mono_nu.scale, fresh=False) > 1.45 * BATTERY_EPSILON
    # The shipped opposite-moves pair cannot expose the monotonic slip at all: its exact loss there
    # stays below the declared epsilon, however many runs an audit makes.
    assert exact_loss(NO_NOISE_PAIR, mono_rho.scale, mono_nu.scale, fresh=False) < BATTERY_EPSILON


@pytest.mark.slow
@pytest.mark.parametrize("variant, attack", battery.SLIPS, ids=[v for v, _ in battery.SLIPS])
def test_the_battery_flags_both_slips_on_the_os_source(variant: str, attack: battery.Attack) -> None:
    """Negative controls, on the served randomness source, at confidence 1 - 1e-6 with fixed runs.
    Measured over 20 repeats each: fresh threshold noise 4.98-5.58 (mean 5.23, sd 0.18), monotonic
    noise 4.86-5.21 (mean 5.13, sd 0.085). Both clear the declared 4 by more than 6.5 standard
    deviations, so a miss has probability below 1e-10 (normal tail; the bound is a smooth function of
    held-out counts in the hundreds). About 4 s and 2 s."""
    result = battery.audit(battery.broken_sampler(variant, attack), attack)  # type: ignore[arg-type]
    assert result.flags(BATTERY_EPSILON), result


@pytest.mark.slow
def test_the_project_svt_passes_the_battery_on_the_os_source_and_its_monotonic_misuse_is_flagged() -> None:
    """The project's SparseVector, same attacks, runs, confidence and source as the negative controls:
    not flagged (a mechanism that keeps its declaration is flagged with probability at most 1e-6 per
    audit, by the held-out Clopper-Pearson guarantee; measured 1.43 on SHIFTED and 3.38 on OPPOSITE,
    against 5.16 and 5.08 for the two slips). Declaring monotonic=True for queries that are not
    monotonic is the second slip made through the real class, and is flagged too (measured 5.13).
    About a minute."""
    for attack in battery.ATTACKS:
        ours = battery.audit(battery.svt_sampler(attack), attack)
        assert not ours.flags(BATTERY_EPSILON), (attack.name, ours)
    misuse = battery.audit(battery.svt_sampler(battery.OPPOSITE, monotonic=True), battery.OPPOSITE)
    assert misuse.flags(BATTERY_EPSILON), misuse


def test_audit_rejects_too_few_runs() -> None:
    with pytest.raises(ValueError):
        audit_epsilon(lambda which, n, src: [0] * n, runs=5)


def test_discrete_gaussian_delta_helper_agrees_with_continuous_intuition() -> None:
    """Sanity for the test's own reference: delta(eps) decreases in eps and lies in [0, 1]."""
    ds = [discrete_gaussian_delta(4.0, e) for e in (0.1, 0.5, 1.0, 2.0)]
    assert all(0 <= d <= 1 for d in ds) and ds == sorted(ds, reverse=True)
    assert float(Fraction(1, 2)) == 0.5
