"""Exact output distributions of SparseVector and GuessAndCheck on neighbouring data (TESTING.md,
"Exact distributions of interactive mechanisms"; MATH.md 4.1, 4.2).

The REAL classes are driven with noise we choose: the threshold noise ``rho`` is set the way the
service restores a session (``_rho``), and the query noise object is replaced by one that returns a
chosen integer. Every reachable (output prefix, mechanism state) is extended by every query-noise
value, each weighted by the discrete Laplace pmf computed here independently (closed form
``(1-q)/(1+q) q^|y|``, ``q = e^{-1/t}``). Supports are truncated where the remaining mass is below
``TAIL``; that mass (``miss``) bounds how much any output's probability can be under-counted, so for an
``epsilon``-DP mechanism ``P_D(o) <= e^eps (P_D'(o) + miss)`` must hold for the truncated sums.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.mechanisms import GuessAndCheck, MechanismError, SparseVector
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute
from support.marks import slow_after

SCHEMA = Schema((IntAttribute("i", 0, 19),))
QUERIES = [
    PredicateQuery.from_coverages(SCHEMA, {"i": IndexSet.interval(k, k + 1)}, id=f"q{k}") for k in range(20)
]

Dist = dict[tuple[str, ...], float]


def table(counts: Sequence[int]) -> Callable[[PredicateQuery], int]:
    return lambda q: counts[next(iter(q.coverage("i")))]


def laplace_support(scale: Fraction, tail: float) -> tuple[list[tuple[int, float]], float]:
    """``(y, P(Y = y))`` for ``|y| <= R`` and the mass ``P(|Y| > R) <= tail`` left out."""
    q = math.exp(-1.0 / float(scale))
    norm = (1 - q) / (1 + q)

    def beyond(r: int) -> float:
        return 2 * q ** (r + 1) / (1 + q)

    r = 0
    while beyond(r) > tail:
        r += 1
    return [(y, norm * q ** abs(y)) for y in range(-r, r + 1)], beyond(r)


class Fixed:
    """Stands in for the query noise: the next draw is ``value``; records whether it was drawn."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.drawn = False

    def sample(self, source: object) -> int:
        self.drawn = True
        return self.value


def distribution(
    mech: Any,
    steps: Sequence[tuple[PredicateQuery, float]],
    step: Callable[[Any, PredicateQuery, float], str],
    used_attr: str,
    tail: float,
) -> tuple[Dist, float]:
    """The output distribution of ``mech`` over ``steps`` and the mass the truncation left out."""
    rho_support, rho_miss = laplace_support(mech.threshold_noise.scale, tail)
    nu_support, nu_miss = laplace_support(mech.query_noise.scale, tail)
    real_noise = mech.query_noise
    dist: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for rho, p_rho in rho_support:
        frontier: dict[tuple[tuple[str, ...], int, int], float] = {((), 0, 0): p_rho}
        for query, arg in steps:
            nxt: defaultdict[tuple[tuple[str, ...], int, int], float] = defaultdict(float)
            for (out, used, asked), p in frontier.items():
                for nu, p_nu in nu_support:
                    mech._rho, mech._asked = rho, asked
                    setattr(mech, used_attr, used)
                    noise = Fixed(nu)
                    mech.query_noise = noise
                    outcome = step(mech, query, arg)
                    key = ((*out, outcome), getattr(mech, used_attr), mech._asked)
                    if not noise.drawn:  # no noise read (exhausted): one branch of weight 1
                        nxt[key] += p
                        break
                    nxt[key] += p * p_nu
            frontier = nxt
        for (out, _, _), p in frontier.items():
            dist[out] += p
    mech.query_noise = real_noise
    return dict(dist), rho_miss + len(steps) * nu_miss


def svt_step(mech: Any, query: PredicateQuery, threshold: float) -> str:
    outcome: str = mech.ask(query, threshold).outcome
    return outcome


def gc_step(mech: Any, query: PredicateQuery, guess: float) -> str:
    outcome: str = mech.check(query, guess).outcome
    return outcome


def svt_pair(
    counts: tuple[Sequence[int], Sequence[int]], thresholds: Sequence[float], tail: float, **params: Any
) -> tuple[Dist, Dist, float, float]:
    """Distributions of SparseVector on both data sets, the truncated mass and the declared epsilon."""
    out = []
    for data in counts:
        mech = SparseVector(table(data), rng=0, **params)
        steps = list(zip(QUERIES[: len(data)], thresholds[: len(data)], strict=True))
        out.append(distribution(mech, steps, svt_step, "_positives", tail))
    (d0, m0), (d1, m1) = out
    return d0, d1, max(m0, m1), mech.guarantee.epsilon


def gc_pair(
    counts: tuple[Sequence[int], Sequence[int]], guesses: Sequence[float], tail: float, **params: Any
) -> tuple[Dist, Dist, float, float]:
    """The same for GuessAndCheck; the outcomes are post-processing of its SVT part alone, so the
    epsilon to meet is that part's, ``Delta/s_1 + 2c Delta/s_2`` (the estimates use other noise)."""
    out = []
    for data in counts:
        mech = GuessAndCheck(table(data), rng=0, **params)
        steps = list(zip(QUERIES[: len(data)], guesses[: len(data)], strict=True))
        out.append(distribution(mech, steps, gc_step, "_failures", tail))
    (d0, m0), (d1, m1) = out
    return d0, d1, max(m0, m1), float(mech.svt_epsilon_exact)


def violations(d0: Dist, d1: Dist, miss: float, epsilon: float) -> list[tuple[tuple[str, ...], float, float]]:
    """Outputs whose probabilities break ``P(o) <= e^eps (P'(o) + miss)`` either way (float pmf
    rounding is covered by a relative 1e-9)."""
    bound = math.exp(epsilon) * (1 + 1e-9)
    bad = []
    for o in set(d0) | set(d1):
        p, p1 = d0.get(o, 0.0), d1.get(o, 0.0)
        if p > bound * (p1 + miss) or p1 > bound * (p + miss):
            bad.append((o, p, p1))
    return bad


def loss(d0: Dist, d1: Dist, floor: float = 1e-9) -> float:
    """``max |log P(o) - log P'(o)|`` over outputs both sides give at least ``floor``."""
    return max(
        (abs(math.log(d0[o] / d1[o])) for o in d0 if o in d1 and min(d0[o], d1[o]) >= floor), default=0.0
    )


# -- the issue's case: a threshold's tiny fractional part was lost for rho != 0 but not for rho = 0 --

ISSUE_THRESHOLDS = [1e-17, 1e-17, 1.0, 1 + 2**-52, 0.0]
ISSUE_COUNTS = ([1, 0, 0, 1, 0], [2, 1, 1, 2, 0])


@pytest.mark.parametrize("epsilon", [2.0, 5.0])
def test_sparse_vector_exact_distribution_with_fractional_thresholds_meets_its_epsilon(
    epsilon: float,
) -> None:
    d0, d1, miss, declared = svt_pair(
        ISSUE_COUNTS, ISSUE_THRESHOLDS, 1e-12, epsilon=epsilon, max_positives=1, monotonic=True
    )
    assert declared == pytest.approx(epsilon)
    assert sum(d0.values()) == pytest.approx(1.0, abs=1e-9)
    assert violations(d0, d1, miss, declared) == []
    assert loss(d0, d1) <= declared + 1e-9


def test_sparse_vector_issue_case_output_probabilities() -> None:
    """With exact comparisons the thresholds act as their ceilings (1, 1, 1, 2, 0); computed
    independently here: P(BBBBA) = sum_rho P(rho) prod_i P(below_i | rho) P(above_5 | rho)."""
    d0, d1, _, _ = svt_pair(
        ISSUE_COUNTS, ISSUE_THRESHOLDS, 1e-12, epsilon=2.0, max_positives=1, monotonic=True
    )
    mech = SparseVector(table([0]), epsilon=2.0, max_positives=1, monotonic=True, rng=0)
    rho_s, _ = laplace_support(mech.threshold_noise.scale, 1e-14)
    nu_s, _ = laplace_support(mech.query_noise.scale, 1e-14)
    ceilings = [1, 1, 1, 2, 0]
    for counts, dist in zip(ISSUE_COUNTS, (d0, d1), strict=True):
        expected = 0.0
        for rho, p_rho in rho_s:
            # below iff value + nu - rho < ceil(T)
            below = [
                sum(p for nu, p in nu_s if v + nu - rho < t) for v, t in zip(counts, ceilings, strict=True)
            ]
            expected += p_rho * below[0] * below[1] * below[2] * below[3] * (1 - below[4])
        assert dist[("below",) * 4 + ("above",)] == pytest.approx(expected, rel=1e-9)


def test_sparse_vector_non_monotonic_fractional_thresholds() -> None:
    """Found by search over tiny thresholds; the float comparison lost 4.46 against a declared 4."""
    counts = ([3, 1, 3, 0, 0], [2, 0, 2, 1, 0])
    thresholds = [2**-52, 2**-52, 1e-17, 1.0, -1e-17]
    d0, d1, miss, declared = svt_pair(counts, thresholds, 1e-11, epsilon=4.0, max_positives=1)
    assert declared == pytest.approx(4.0)
    assert violations(d0, d1, miss, declared) == []


def test_sparse_vector_two_positives_with_fractional_thresholds() -> None:
    counts = ([0, 1, 2, 1], [1, 0, 2, 2])
    thresholds = [0.5, 1e-300, -0.25, 1.0000000000000002]
    d0, d1, miss, declared = svt_pair(counts, thresholds, 1e-11, epsilon=3.0, max_positives=2)
    assert violations(d0, d1, miss, declared) == []


# -- guess-and-check: |q(D) - g| against a tolerance that is not an integer ---------------------------

GC_PARAMS: dict[str, Any] = {"max_failures": 1, "threshold_scale": 1, "query_scale": 2, "estimate_scale": 1}


@pytest.mark.parametrize(
    ("tolerance", "guesses", "counts"),
    slow_after(  # ~0.7 s of CPU each: the quick run keeps the two found by search
        [
            # |q - g| = q + 2^52 - 0.5 rounds to even in floating point, so the query moved by 2 between
            # neighbours: the float comparison lost 3.07 against a declared 2 (found by search).
            (2.0**52 - 0.5, [-(2.0**52 - 0.5)] * 4, ([1, 1, 1, 2], [2, 2, 2, 1])),
            # the same at 2^53 with integers (ulp 2): loss 3.61 against 2.
            (2.0**53, [2.0**53 + 4] * 4, ([1, 1, 1, 3], [2, 2, 2, 2])),
            (1e-17, [0.0, 0.0, 0.0, 1.0, 0.0], ([0, 1, 1, 0, 2], [1, 0, 0, 1, 1])),
            (0.5, [0.5, 1e-17, 2.5, 1 + 2**-52, 0.0], ([0, 1, 2, 1, 0], [1, 0, 3, 2, 1])),
            (1 + 2**-52, [1e-17, 0.0, 3.0, 2.0, 1.0], ([1, 0, 1, 3, 2], [0, 1, 2, 2, 1])),
        ],
        keep=2,
    ),
)
def test_guess_and_check_exact_distribution_with_fractional_tolerance(
    tolerance: float, guesses: list[float], counts: tuple[list[int], list[int]]
) -> None:
    d0, d1, miss, declared = gc_pair(counts, guesses, 1e-12, tolerance=tolerance, **GC_PARAMS)
    assert declared == pytest.approx(2.0)
    assert violations(d0, d1, miss, declared) == []
    assert loss(d0, d1) <= declared + 1e-9


# -- properties: arbitrary finite thresholds never break the declared epsilon, never raise ------------

near_integers = st.tuples(
    st.integers(-3, 5), st.sampled_from([0.0, 1e-17, -1e-17, 2**-52, -(2**-52), 0.5])
).map(lambda kt: kt[0] + kt[1])
ulps = st.integers(-3, 5).flatmap(
    lambda k: st.sampled_from([float(k), math.nextafter(k, math.inf), math.nextafter(k, -math.inf)])
)
# where float addition starts to round: 2^51..2^53 plus or minus a few halves
binade_edges = st.tuples(st.sampled_from([1, -1]), st.sampled_from([51, 52, 53]), st.integers(-8, 8)).map(
    lambda skj: skj[0] * (2.0 ** skj[1] + skj[2] / 2)
)
extreme = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: x == 0 or 1e-300 <= abs(x) <= 1e300
)
thresholds = st.one_of(
    near_integers, ulps, binade_edges, extreme, st.floats(allow_nan=False, allow_infinity=False)
)


@st.composite
def neighbours(draw: st.DrawFn, monotonic: bool) -> tuple[list[int], list[int]]:
    n = draw(st.integers(1, 5))
    d0 = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    if monotonic:
        sign = draw(st.sampled_from([1, -1]))
        steps = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
        d1 = [max(0, v + sign * s) for v, s in zip(d0, steps, strict=True)]
    else:
        d1 = [max(0, v + draw(st.integers(-1, 1))) for v in d0]
    return d0, d1


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.booleans(), st.data(), st.lists(thresholds, min_size=5, max_size=5), st.integers(1, 2))
def test_sparse_vector_never_exceeds_its_epsilon_for_any_finite_threshold(
    monotonic: bool, data: st.DataObject, ts: list[float], c: int
) -> None:
    counts = data.draw(neighbours(monotonic))
    d0, d1, miss, declared = svt_pair(counts, ts, 1e-9, epsilon=4.0, max_positives=c, monotonic=monotonic)
    assert violations(d0, d1, miss, declared) == []


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.data(), st.lists(thresholds, min_size=5, max_size=5), thresholds)
def test_guess_and_check_never_exceeds_its_epsilon_for_any_finite_guess_or_tolerance(
    data: st.DataObject, guesses: list[float], tolerance: float
) -> None:
    counts = data.draw(neighbours(False))
    tol = abs(tolerance) or 1e-300
    d0, d1, miss, declared = gc_pair(
        counts,
        guesses,
        1e-9,
        tolerance=tol,
        max_failures=1,
        threshold_scale=Fraction(1, 2),
        query_scale=1,
        estimate_scale=1,
    )
    assert violations(d0, d1, miss, declared) == []


@given(thresholds, st.integers(-(2**70), 2**70))
@settings(max_examples=100, deadline=None)
def test_comparisons_never_raise_on_extreme_finite_values(t: float, count: int) -> None:
    svt = SparseVector(lambda q: count, epsilon=1.0, threshold=t, rng=1)
    assert svt.ask(QUERIES[0]).outcome in ("above", "below")
    gc = GuessAndCheck.from_budget(
        lambda q: count, epsilon=1.0, tolerance=abs(t) or 1.0, max_failures=1, rng=1
    )
    assert gc.check(QUERIES[0], t).outcome in ("confirmed", "estimate")


def _pinned(mech: Any, nu: int = 0) -> Any:
    """``mech`` with ``rho = 0`` and the next query noise ``nu``, so an answer is deterministic."""
    mech._rho = 0
    mech.query_noise = Fixed(nu)
    return mech


@pytest.mark.parametrize(
    ("threshold", "count", "expected"),
    [
        (10**400, 5, "below"),  # an int too large for a float is compared exactly, not an OverflowError
        (-(10**400), 5, "above"),
        (Fraction(1, 3), 0, "below"),
        (Fraction(1, 3), 1, "above"),
        (Fraction(-1, 10**30), 0, "above"),
        (Decimal("0.5"), 0, "below"),
        (1e-17, 0, "below"),  # 0 < 1e-17: the tiny fractional part counts (ceil(1e-17) = 1)
        (1e-17, 1, "above"),
        (2.0**53 + 2, 2**53 + 1, "below"),  # beyond 2^53 the integer side is still exact
    ],
)
def test_thresholds_are_compared_exactly(threshold: Any, count: int, expected: str) -> None:
    svt = _pinned(SparseVector(lambda q: count, epsilon=1.0, rng=1))
    assert svt.ask(QUERIES[0], threshold).outcome == expected


def test_guesses_and_tolerances_are_compared_exactly() -> None:
    # confirmed iff |q - g| + nu < E + rho; with nu = rho = 0: iff |q - g| < E.
    def outcome(count: int, guess: Any, tol: Any) -> str:
        gc = GuessAndCheck(
            table([count]), tolerance=tol, max_failures=5, threshold_scale=1, query_scale=1, estimate_scale=1
        )
        return str(_pinned(gc).check(QUERIES[0], guess).outcome)

    assert outcome(0, 1e-17, 1e-17) == "estimate"  # |0 - 1e-17| = E, not below it
    assert outcome(0, 1e-17, 2e-17) == "confirmed"
    assert outcome(2**53 + 1, 2.0**53, 1) == "estimate"  # |1| is not < 1
    assert outcome(2**53 + 1, 2.0**53, 1 + 2**-52) == "confirmed"
    assert outcome(3, Fraction(10, 3), Fraction(1, 3)) == "estimate"
    assert outcome(3, Fraction(10, 3), Fraction(1, 3) + Fraction(1, 10**40)) == "confirmed"
    assert outcome(0, 10**400, 10**400 + 1) == "confirmed"
    gc = GuessAndCheck(
        table([0]), tolerance=0.1, max_failures=1, threshold_scale=1, query_scale=1, estimate_scale=1
    )
    assert gc.tolerance == Fraction(0.1)  # the float exactly as stored


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), -float("inf"), True, "abc", None, Decimal("NaN")]
)
def test_non_finite_thresholds_and_guesses_name_the_field(bad: Any) -> None:
    svt = SparseVector(lambda q: 0, epsilon=1.0, rng=1)
    if bad is not None:  # None means "use the default threshold", of which there is none here
        with pytest.raises(MechanismError, match="threshold"):
            svt.ask(QUERIES[0], bad)
        with pytest.raises(MechanismError, match="threshold"):
            SparseVector(lambda q: 0, epsilon=1.0, threshold=bad, rng=1)
    gc = GuessAndCheck.from_budget(lambda q: 0, epsilon=1.0, tolerance=1.0, max_failures=1, rng=1)
    with pytest.raises(MechanismError, match="guess"):
        gc.check(QUERIES[0], bad)
    with pytest.raises(MechanismError, match="tolerance"):
        GuessAndCheck.from_budget(lambda q: 0, epsilon=1.0, tolerance=bad, max_failures=1, rng=1)
