"""SparseVector, GuessAndCheck and NoisyCounts: behaviour, declared guarantees, bad input.

Privacy itself is audited statistically in test_audit.py; here the logic is checked against brute force
with (almost) no noise, and the declared guarantees against the formulas of Lyu-Su-Li and Lyu 2022.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.mechanisms import (
    WHOLE_DOMAIN,
    BudgetExceededError,
    CoverageError,
    GuessAndCheck,
    InteractiveMechanism,
    MechanismError,
    NoisyCounts,
    SparseVector,
    optimal_split,
)
from overlapdp.privacy.definitions import GDP, ZCDP, BudgetError, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute
from sources import on_both_sources, source

SCHEMA = Schema((IntAttribute("i", 0, 19), IntAttribute("j", 0, 3)))


def point(i: int) -> PredicateQuery:
    return PredicateQuery.from_coverages(SCHEMA, {"i": IndexSet.interval(i, i + 1)}, id=f"q{i}")


class Table:
    """Counts per value of ``i``; records how many counts were read."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.reads = 0

    def __call__(self, q: PredicateQuery) -> int:
        self.reads += 1
        cov = q.coverage("i")
        return sum(self.counts[k] for k in cov)


QUIET = 10_000.0  # so much budget that the discrete noise is almost surely 0


@on_both_sources
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=20),
    c=st.integers(1, 4),
    threshold=st.integers(0, 30),
)
def test_sparse_vector_without_noise_is_brute_force(
    counts: list[int], c: int, threshold: int, kind: str
) -> None:
    table = Table(counts)
    svt = SparseVector(table, epsilon=QUIET, max_positives=c, threshold=threshold - 0.5, rng=source(kind, 1))
    got, expected, positives = [], [], 0
    for k in range(len(counts)):
        got.append(svt.ask(point(k)).outcome)
        if positives >= c:
            expected.append("exhausted")
        elif counts[k] >= threshold - 0.5:
            positives += 1
            expected.append("above")
        else:
            expected.append("below")
    assert got == expected
    assert table.reads == sum(1 for e in expected if e != "exhausted")  # exhausted reads nothing


@on_both_sources
def test_sparse_vector_stops_after_c_positives_with_a_clear_answer(kind: str) -> None:
    table = Table([100] * 10)
    svt = SparseVector(table, epsilon=QUIET, max_positives=2, threshold=5, rng=source(kind, 2))
    assert [svt.ask(point(k)).outcome for k in range(2)] == ["above", "above"]
    assert svt.exhausted and svt.positives_left == 0
    reads = table.reads
    late = svt.query(point(3))
    assert late.outcome == "exhausted" and not late.above
    assert table.reads == reads
    assert svt.guarantee == PureDP(QUIET)  # declared once, never grows


def test_sparse_vector_split_and_scales_follow_lyu_su_li() -> None:
    eps1, eps2 = optimal_split(1.0, 4)
    assert eps1 + eps2 == pytest.approx(1.0)
    assert eps2 / eps1 == pytest.approx(8 ** (2 / 3))
    m1, m2 = optimal_split(1.0, 4, monotonic=True)
    assert m2 / m1 == pytest.approx(4 ** (2 / 3))
    svt = SparseVector(lambda q: 0, epsilon=1.0, max_positives=4, threshold=0, rng=3)
    assert svt.threshold_noise.scale >= Fraction(1) / Fraction(eps1)
    assert svt.query_noise.scale >= Fraction(8) / Fraction(eps2)
    assert float(svt.query_noise.scale) == pytest.approx(8 / eps2, rel=1e-5)
    mono = SparseVector(lambda q: 0, epsilon=1.0, max_positives=4, threshold=0, monotonic=True, rng=3)
    assert float(mono.query_noise.scale) == pytest.approx(4 / m2, rel=1e-5)
    rel = SparseVector(lambda q: 0, epsilon=1.0, max_positives=4, threshold=0, release_epsilon=0.5, rng=3)
    assert rel.guarantee == PureDP(1.5)
    assert rel.release_noise is not None and float(rel.release_noise.scale) == pytest.approx(8.0)
    own = SparseVector(lambda q: 0, epsilon=1.0, max_positives=1, threshold=0, threshold_epsilon=0.25, rng=3)
    assert float(own.threshold_noise.scale) == pytest.approx(4.0)
    assert isinstance(svt, InteractiveMechanism)


@on_both_sources
def test_sparse_vector_release_is_fresh_noise_with_an_error_bar(kind: str) -> None:
    table = Table([50] * 5)
    svt = SparseVector(
        table, epsilon=1.0, max_positives=1, threshold=-1000, release_epsilon=QUIET, rng=source(kind, 4)
    )
    ans = svt.ask(point(0))
    assert ans.above and ans.released is not None
    assert ans.released.low <= 50 <= ans.released.high


def test_the_count_of_positives_has_one_name_the_services_own() -> None:
    """``max_positives`` / ``max_failures``, as in the HTTP sessions; the papers' ``c`` is not a keyword."""
    assert SparseVector(lambda q: 0, epsilon=1.0, max_positives=3, threshold=0).max_positives == 3
    with pytest.raises(TypeError, match="'c'"):
        SparseVector(lambda q: 0, epsilon=1.0, c=3, threshold=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'c'"):
        GuessAndCheck.from_budget(lambda q: 0, epsilon=1.0, tolerance=1.0, c=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("c", [0, -1, 1.5, True])
def test_max_positives_and_max_failures_must_be_positive_integers(c: object) -> None:
    with pytest.raises(MechanismError, match="max_positives"):
        SparseVector(lambda q: 0, epsilon=1.0, max_positives=c, threshold=0)  # type: ignore[arg-type]
    with pytest.raises(MechanismError, match="max_failures"):
        GuessAndCheck.from_budget(lambda q: 0, epsilon=1.0, tolerance=1.0, max_failures=c)  # type: ignore[arg-type]


@pytest.mark.parametrize("eps", [0.0, -2.0, float("inf"), float("nan")])
def test_budgets_must_be_positive_finite(eps: float) -> None:
    with pytest.raises(BudgetError):
        SparseVector(lambda q: 0, epsilon=eps, threshold=0)
    with pytest.raises(BudgetError):
        SparseVector(lambda q: 0, epsilon=1.0, threshold=0, release_epsilon=eps)
    with pytest.raises(BudgetError):
        GuessAndCheck.from_budget(lambda q: 0, epsilon=eps, tolerance=1.0, max_failures=1)


def test_queries_outside_the_declared_coverage_are_refused() -> None:
    cov = PredicateQuery.from_coverages(SCHEMA, {"i": IndexSet.interval(0, 10)})
    table = Table([1] * 20)
    svt = SparseVector(table, epsilon=1.0, threshold=0, coverage=cov, rng=5)
    svt.ask(point(3))
    with pytest.raises(CoverageError, match="outside"):
        svt.ask(point(12))
    wide = PredicateQuery.from_coverages(SCHEMA, {"j": IndexSet.interval(0, 1)})
    with pytest.raises(CoverageError):
        svt.ask(wide)
    assert table.reads == 1
    assert svt.coverage is cov
    with pytest.raises(CoverageError):
        SparseVector(table, epsilon=1.0, threshold=0, coverage="half the domain")  # type: ignore[arg-type]


def _guess_table() -> tuple[Table, Callable[[int], PredicateQuery]]:
    return Table([10 * k for k in range(20)]), point


@on_both_sources
def test_guess_and_check_confirms_good_guesses_and_estimates_bad_ones(kind: str) -> None:
    table, q = _guess_table()
    gc = GuessAndCheck(
        table,
        tolerance=3,
        max_failures=2,
        threshold_scale=Fraction(1, 1000),
        query_scale=Fraction(1, 1000),
        estimate_scale=Fraction(1, 1000),
        rng=source(kind, 6),
    )
    assert gc.check(q(1), 11).outcome == "confirmed"
    bad = gc.check(q(2), 40)
    assert bad.outcome == "estimate" and bad.estimate is not None and bad.estimate.value == 20
    assert bad.estimate.low <= 20 <= bad.estimate.high
    assert gc.query((q(3), 30)).outcome == "confirmed"
    assert gc.check(q(4), 0).outcome == "estimate"
    reads = table.reads
    assert gc.check(q(5), 0).outcome == "exhausted" and gc.exhausted
    assert table.reads == reads


def test_guess_and_check_guarantee_is_computed_from_its_noise_scales() -> None:
    gc = GuessAndCheck(
        lambda q: 0,
        tolerance=2.5,
        max_failures=3,
        threshold_scale=4,
        query_scale=Fraction(30),
        estimate_scale=12,
        rng=7,
    )
    # Lyu 2022 App. B: eps_SVT (1/s1 + 2c/s2) + c Delta/b, with Delta = 1.
    assert gc.epsilon_exact == Fraction(1, 4) + Fraction(6, 30) + Fraction(3, 12)
    assert gc.guarantee.epsilon >= 0.7 and gc.guarantee.epsilon == pytest.approx(0.7)  # rounded up
    two = GuessAndCheck(
        lambda q: 0,
        tolerance=1,
        max_failures=2,
        threshold_scale=2,
        query_scale=8,
        estimate_scale=4,
        sensitivity=2,
        rng=7,
    )
    assert two.epsilon_exact == Fraction(2, 2) + Fraction(8, 8) + Fraction(4, 4)
    fb = GuessAndCheck.from_budget(lambda q: 0, epsilon=1.0, tolerance=5, max_failures=4, rng=7)
    # declared as asked (issue 24.3: 0.4999999969689454 was charged for 0.5), never below the scales' own
    assert (
        fb.guarantee.epsilon == 1.0
        and fb.epsilon_exact <= 1
        and float(fb.epsilon_exact) == pytest.approx(1.0)
    )
    assert float(fb.estimate_epsilon_exact) == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize("tol", [0, -1.0, float("nan"), float("inf")])
def test_tolerance_must_be_positive(tol: float) -> None:
    with pytest.raises(MechanismError, match="tolerance"):
        GuessAndCheck(
            lambda q: 0, tolerance=tol, max_failures=1, threshold_scale=1, query_scale=1, estimate_scale=1
        )


@on_both_sources
def test_noisy_counts_session_charges_each_answer_and_refuses_beyond_its_budget(kind: str) -> None:
    table = Table([5] * 20)
    session = NoisyCounts(table, budget=PureDP(1.0), per_query=PureDP(0.3), rng=source(kind, 8))
    for k in range(3):
        ans = session.query(point(k))
        assert ans.guarantee == PureDP(0.3) and ans.query_id == f"q{k}"
    assert session.exhausted
    with pytest.raises(BudgetExceededError, match="nothing charged"):
        session.query(point(4))
    assert table.reads == 3 and session.answered == 3
    assert session.guarantee == PureDP(1.0) and session.coverage == WHOLE_DOMAIN


def test_noisy_counts_session_sums_exactly_without_float_drift() -> None:
    session = NoisyCounts(lambda q: 0, budget=PureDP(1.0), per_query=PureDP(0.1), rng=9)
    answered = 0
    while not session.exhausted:
        session.query(point(0))
        answered += 1
    assert answered == 9  # 10 * 0.1 (as floats) exceeds 1.0 exactly: never admitted past the total


def test_noisy_counts_session_in_zcdp_and_kind_mismatch() -> None:
    session = NoisyCounts(lambda q: 3, budget=ZCDP(0.5), per_query=GDP(0.5), rng=10)
    assert session.per_query == ZCDP(0.125)
    for _ in range(4):
        session.query(point(1))
    assert session.exhausted
    with pytest.raises(MechanismError, match="same kind"):
        NoisyCounts(lambda q: 3, budget=PureDP(1.0), per_query=ZCDP(0.1))


@pytest.mark.parametrize(
    ("eps", "eps1", "eps3"),
    # 16384 - 2^-40 rounds up to 16384 in floats: epsilon_2 is worth more than asked. (A threshold
    # epsilon of 2^-60 would need a noise scale of 2^60, beyond the supported 2^40: refused below.)
    [(16384.0, 2.0**-40, None), (16384.0, 2.0**-40, 0.5), (1.0, 0.25, None), (0.7, None, None)],
)
def test_sparse_vector_declares_at_least_the_epsilon_of_its_noise(
    eps: float, eps1: float | None, eps3: float | None
) -> None:
    # independent truth: Lyu-Su-Li's epsilon_1 + epsilon_2 (+ epsilon_3) recomputed exactly from the
    # noise scales actually used (Delta/t1 + 2c Delta/t2 + c Delta/t3), against the declared guarantee
    c = 1
    svt = SparseVector(
        lambda q: 0,
        epsilon=eps,
        max_positives=c,
        threshold=0,
        threshold_epsilon=eps1,
        release_epsilon=eps3,
        rng=3,
    )
    true = 1 / svt.threshold_noise.scale + Fraction(2 * c) / svt.query_noise.scale
    if svt.release_noise is not None:
        true += Fraction(c) / svt.release_noise.scale
    assert Fraction(svt.guarantee.epsilon) >= true


def test_sparse_vector_refuses_noise_beyond_the_supported_scale() -> None:
    with pytest.raises(MechanismError, match="2\\^40"):
        SparseVector(
            lambda q: 0, epsilon=3.0, max_positives=1, threshold=0, threshold_epsilon=2.0**-60, rng=3
        )
