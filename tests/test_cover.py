"""Covers of the loads (overlap/cover.py, MATH.md 7.11) against independent truth.

Small domains, every row enumerated: the pairs that meet are the pairs with a row in common; the
cover's bound is never below the heaviest row's exact (Fraction) load, whatever the cover claims
(random sets and amounts, too small amounts, "packings" that are not); a packing plan's own cover
bounds its worst row by its total, 2^-50 under the budget. The engine takes the cover where its search
is cut (the clock jumps past the deadline as the search starts: no timing), and the odometer weighs a
plan's cover: the 1 000-query narrow and uniform plans its search cannot settle are checked through it.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from overlapdp.errors import CompError
from overlapdp.mechanisms._packings import overlap_graph, packing_plan
from overlapdp.mechanisms.allocation import _Coverage
from overlapdp.overlap import _clock, engine, max_overlap
from overlapdp.overlap._compiled import compile_workload
from overlapdp.overlap.bounds import greedy_colouring
from overlapdp.overlap.cover import Cover, cover_bound, meeting_pairs
from overlapdp.privacy import Laplace, Odometer
from overlapdp.query import PredicateQuery
from overlapdp.schema import IntAttribute, Schema
from support.generators import ADULT, mixed, random_coverages

SCHEMA = Schema(tuple(IntAttribute(n, 0, s - 1) for n, s in zip("abcd", (5, 3, 6, 2), strict=True)))
ROWS = list(itertools.product(*(range(a.size) for a in SCHEMA.attributes)))


def workload(rng: np.random.Generator, t: int) -> list[PredicateQuery]:
    """Ranges, value sets and a few contradictions (queries covering no row)."""
    return [
        PredicateQuery.from_coverages(
            SCHEMA, random_coverages(rng, SCHEMA, empty=0.03), id=f"q{i}", weight=float(rng.uniform(0.1, 2))
        )
        for i in range(t)
    ]


def heaviest(qs: list[PredicateQuery], loads: list[Fraction]) -> Fraction:
    return max(sum((w for w, q in zip(loads, qs, strict=True) if q.covers(r)), Fraction(0)) for r in ROWS)


@pytest.mark.parametrize("seed", range(4))
def test_the_meeting_pairs_are_the_pairs_with_a_row_in_common(seed: int) -> None:
    qs = workload(np.random.default_rng(seed), 16)
    c = compile_workload(qs, SCHEMA)
    meet = meeting_pairs(c)
    assert meet is not None
    live = c.live.tolist()
    for (a, i), (b, j) in itertools.combinations(enumerate(live), 2):
        truth = any(qs[i].covers(r) and qs[j].covers(r) for r in ROWS)
        assert meet[a, b] == meet[b, a] == truth
    assert not meet.diagonal().any()


@pytest.mark.parametrize("seed", range(12))
def test_no_cover_bounds_a_row_below_its_load(seed: int) -> None:
    """Whatever the cover claims (random sets and amounts, some queries in none), the bound holds."""
    rng = np.random.default_rng(100 + seed)
    qs = workload(rng, 12)
    loads = [Fraction(q.weight) for q in qs]
    sets = tuple(
        tuple(sorted(rng.choice(len(qs), size=int(rng.integers(1, 6)), replace=False).tolist()))
        for _ in range(int(rng.integers(1, 6)))
    )
    amounts = tuple(float(x) for x in rng.uniform(0.0, 1.5, len(sets)))
    bound = cover_bound(compile_workload(qs, SCHEMA), loads, Cover(sets, amounts))
    assert bound is not None
    assert bound >= heaviest(qs, loads)


def packed(qs: list[PredicateQuery], limit: float = 1.0) -> tuple[list[Fraction], Cover]:
    """A packing plan of ``qs`` (MATH.md 2.10.1) at gamma = the colours of a greedy colouring (a bound
    the planner may take), its exact costs and its certificate."""
    table = _Coverage.build(qs)
    assert table is not None
    g = overlap_graph(table.tables)
    gamma = int(greedy_colouring(g).max()) + 1
    w = np.array([q.weight for q in qs])
    plan = packing_plan(table.tables, w / w.max(), 2, limit, gamma, lambda: False, g)
    assert plan is not None
    return [Fraction(float(c)) for c in plan.costs], Cover(plan.sets, plan.amounts)


@pytest.mark.parametrize("seed", range(6))
def test_a_packing_plans_cover_bounds_its_worst_row_by_its_total(seed: int) -> None:
    """The planner's certificate, weighed here from the workload alone: at most the budget."""
    qs = workload(np.random.default_rng(200 + seed), 14)
    costs, cover = packed(qs)
    # every cost is exactly the sum of its sets' amounts
    held = [Fraction(0)] * len(qs)
    for s, a in zip(cover.sets, cover.amounts, strict=True):
        for i in s:
            held[i] += Fraction(a)
    live = [i for i, q in enumerate(qs) if not q.is_contradiction]
    assert all(costs[i] == held[i] for i in live)
    bound = cover_bound(compile_workload(qs, SCHEMA), costs, cover)
    assert bound is not None
    assert heaviest(qs, costs) <= bound <= 1


def test_a_set_that_is_no_packing_is_weighed_by_its_colours() -> None:
    """Three queries meeting pairwise on one attribute claimed as one set: counted 3 times, not once."""
    qs = [
        PredicateQuery.from_coverages(SCHEMA, {"a": _span(lo, lo + 3)}, id=f"r{lo}", weight=1.0)
        for lo in range(3)
    ]
    ones = [Fraction(1)] * 3
    bound = cover_bound(compile_workload(qs, SCHEMA), ones, Cover(((0, 1, 2),), (1.0,)))
    assert bound == 3 == heaviest(qs, ones)


def _span(lo: int, hi: int):  # type: ignore[no-untyped-def]
    from overlapdp.schema import IndexSet

    return IndexSet.interval(lo, hi)


def cut_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock stands still until the search starts, then jumps past any deadline: the cover is
    weighed, the search is cut at once (its safe bound is the per-attribute table bound)."""
    clock = [0.0]
    monkeypatch.setattr(_clock, "now", lambda: clock[0])
    search = engine._scalar

    def jumped(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock[0] = 1e9
        return search(*args, **kwargs)

    monkeypatch.setattr(engine, "_scalar", jumped)


@pytest.mark.parametrize("seed", range(4))
def test_a_cut_search_answers_the_covers_bound_never_below_the_truth(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    qs = workload(np.random.default_rng(300 + seed), 14)
    costs, cover = packed(qs)
    truth = heaviest(qs, costs)
    shares = [float(x) for x in costs]
    cut_search(monkeypatch)
    plain = max_overlap(qs, weights=shares, comp="sum", effort=1.0, algorithm="branch")
    covered = max_overlap(qs, weights=shares, comp="sum", effort=1.0, cover=cover, algorithm="branch")
    assert not plain.exact
    assert truth <= Fraction(covered.value) <= 1
    assert covered.value <= plain.value
    # exact only when the witness's exact load rounds up to the same float as the bound
    assert covered.exact == (covered.value == covered.lower)


def test_a_shifted_cover_checks_a_plan_charged_after_other_charges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two charges first, then a packing plan's queries: its cover, shifted past them, bounds the worst
    row by the plan's total plus theirs, never below the truth (brute force); unshifted it names the
    wrong charges, which can only loosen the bound."""
    qs = workload(np.random.default_rng(310), 14)
    costs, cover = packed(qs)
    before = workload(np.random.default_rng(311), 2)
    ledger = [*before, *qs]
    loads = [Fraction(1, 4), Fraction(1, 8), *costs]
    truth = heaviest(ledger, loads)
    shares = [float(x) for x in loads]
    cut_search(monkeypatch)
    shifted = max_overlap(
        ledger, weights=shares, comp="sum", effort=1.0, cover=cover.shifted(2), algorithm="branch"
    )
    cut_search(monkeypatch)  # (each cut search starts from a standing clock)
    wrong = max_overlap(ledger, weights=shares, comp="sum", effort=1.0, cover=cover, algorithm="branch")
    assert not shifted.exact and not wrong.exact
    assert truth <= Fraction(shifted.value) <= 1 + Fraction(3, 8)
    assert truth <= Fraction(wrong.value)
    assert shifted.value <= wrong.value
    with pytest.raises(CompError, match="offset"):
        cover.shifted(-1)


def test_the_cover_pins_the_maximum_when_the_witness_reaches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """One query over everything and 5 disjoint ones: the cover {big}, {small} bounds by 1 + 2, and the
    cut search's witness row (inside the heaviest query) holds exactly that: exact although cut."""
    big = PredicateQuery.from_coverages(SCHEMA, {}, id="all", weight=1.0)
    small = [
        PredicateQuery.from_coverages(SCHEMA, {"a": _span(i, i + 1)}, id=f"s{i}", weight=2.0)
        for i in range(5)
    ]
    qs = [big, *small]
    cover = Cover(((0,), (1, 2, 3, 4, 5)), (1.0, 2.0))
    cut_search(monkeypatch)
    res = max_overlap(qs, comp="sum", effort=1.0, cover=cover, algorithm="branch")
    assert res.value == 3.0
    assert res.exact == (res.lower == 3.0)


def test_a_cover_is_refused_where_it_cannot_bound() -> None:
    qs = workload(np.random.default_rng(0), 4)
    with pytest.raises(CompError, match="outside the workload"):
        max_overlap(qs, comp="sum", cover=Cover(((0, 9),), (1.0,)))
    with pytest.raises(CompError, match="one amount per set"):
        Cover(((0,),), ())
    with pytest.raises(CompError, match="non-negative"):
        Cover(((0,),), (-1.0,))
    with pytest.raises(CompError, match="count, sum and l2"):
        max_overlap(qs, weights=[[1.0]] * 4, comp="vector", cover=Cover(((0,),), (1.0,)))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["narrow", "uniform"])
def test_the_odometer_checks_a_thousand_query_packing_plan_through_its_cover(kind: str) -> None:
    """The plans whose maximum the odometer's search does not settle (their unweighted maximum is not
    proved in a minute either, benchmarks/README.md): with the plan's cover, the odometer's report of
    the Laplace charges at the shares (epsilons an ulp off the shares) is within the budget, whenever
    its search is cut. The packing plan runs 12 rounds of column generation (no clock)."""
    qs = mixed(kind, 1000, 1)
    rounds = iter(range(12))
    table = _Coverage.build(qs)
    assert table is not None
    g = overlap_graph(table.tables)
    gamma = int(greedy_colouring(g).max()) + 1
    plan = packing_plan(table.tables, np.ones(len(qs)), 2, 1.0, gamma, lambda: next(rounds, None) is None, g)
    assert plan is not None and plan.columns > 1
    odo = Odometer(ADULT, effort=2.0)
    odo.measures = tuple(m for m in odo.measures if m.name == "pure")
    for q, e in zip(qs, plan.costs.tolist(), strict=True):
        odo.charge(Laplace(1.0 / e), q)
    pure = odo.report(1e-9, cover=Cover(plan.sets, plan.amounts)).definitions["pure"]
    assert float(pure.overlap) <= 1.0
    assert "cover" in pure.method or pure.exact  # the cover's bound, unless the search settled it
