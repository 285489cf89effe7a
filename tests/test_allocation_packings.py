"""Packing plans (mechanisms/_packings.py, MATH.md 2.10.1) against independent truth.

Small domains, every row enumerated: the overlap graph equals "some row lies in both queries" found row
by row; a packing plan's costs, summed with Fractions over the queries covering each row, are within
the budget on every row, and no worse than even shares. The allocation as a whole keeps a better plan
than even shares when every search it could run gives up (the large workloads' case), because a
packing plan needs no search."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from overlapdp.errors import SearchGaveUp
from overlapdp.mechanisms import allocation
from overlapdp.mechanisms._packings import overlap_graph, packing_plan
from overlapdp.mechanisms.allocation import _Coverage, allocate
from overlapdp.overlap import max_overlap
from overlapdp.overlap.wcsp import integral_loads
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema
from support.generators import mixed, random_coverages

SCHEMA = Schema(tuple(IntAttribute(n, 0, s - 1) for n, s in zip("abcd", (5, 3, 6, 2), strict=True)))
ROWS = list(itertools.product(*(range(a.size) for a in SCHEMA.attributes)))


def workload(rng: np.random.Generator, t: int) -> list[PredicateQuery]:
    """Ranges and arbitrary value sets (no Helly property: pairwise meeting queries may share no row)."""
    out = []
    for i in range(t):
        covs = random_coverages(rng, SCHEMA)
        out.append(PredicateQuery.from_coverages(SCHEMA, covs, id=f"q{i}", weight=float(rng.uniform(0.2, 3))))
    return out


def gamma_of(qs: list[PredicateQuery]) -> int:
    return max(sum(q.covers(r) for q in qs) for r in ROWS)


def worst_row(qs: list[PredicateQuery], costs: list[Fraction]) -> Fraction:
    return max(sum((c for c, q in zip(costs, qs, strict=True) if q.covers(r)), Fraction(0)) for r in ROWS)


@pytest.mark.parametrize("seed", range(6))
def test_the_overlap_graph_is_rows_in_common(seed: int) -> None:
    qs = workload(np.random.default_rng(seed), 14)
    table = _Coverage.build(qs)
    assert table is not None
    g = overlap_graph(table.tables)
    for i, j in itertools.combinations(range(len(qs)), 2):
        meet = any(qs[i].covers(r) and qs[j].covers(r) for r in ROWS)
        assert g[i, j] == g[j, i] == meet
    assert not g.diagonal().any()


@pytest.mark.parametrize("limit", [1.0, 0.37, 3e-5, 2e6])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("seed", range(5))
def test_packing_plans_are_within_budget_on_every_row(seed: int, p: int, limit: float) -> None:
    rng = np.random.default_rng(100 + seed)
    qs = workload(rng, int(rng.integers(4, 16)))
    table = _Coverage.build(qs)
    assert table is not None
    w = np.array([q.weight for q in qs])
    w = w / w.max()
    gamma = gamma_of(qs)
    packed = packing_plan(table.tables, w, p, limit, gamma, lambda: False)
    assert packed is not None
    costs = [Fraction(float(c)) for c in packed.costs]
    assert all(c > 0 for c in costs)
    assert worst_row(qs, costs) <= Fraction(limit)  # every row affords its charges, exactly
    # integer multiples of one unit, within toulbar2's range: the engine's exact route can check them
    assert integral_loads(packed.costs) is not None
    even = float(np.sum(w / (limit / gamma) ** p))
    assert packed.objective <= even * (1 + 1e-6)
    assert packed.objective == pytest.approx(float(np.sum(w / packed.costs**p)), rel=1e-12)


def test_disjoint_ranges_under_one_big_query_are_two_packings() -> None:
    """The issue's example: {big} and {every range} are the only columns needed, and the plan is the
    closed-form optimum (big query 0.1773 B, each range 0.8227 B)."""
    s = Schema((IntAttribute("age", 0, 99),))
    qs = [PredicateQuery.from_coverages(s, {}, id="all")] + [
        PredicateQuery.from_coverages(s, {"age": IndexSet.interval(i, i + 1)}, id=f"r{i}") for i in range(100)
    ]
    table = _Coverage.build(qs)
    assert table is not None
    packed = packing_plan(table.tables, np.ones(101), 2, 1.0, 2, lambda: False)
    assert packed is not None
    big = 1 / (1 + 100 ** (1 / 3))
    assert packed.costs[0] == pytest.approx(big, rel=1e-3)
    assert np.allclose(packed.costs[1:], 1 - big, rtol=1e-3)
    assert packed.costs[0] + packed.costs[1:].max() <= 1.0


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_a_plan_beats_even_shares_when_no_search_can_prove_anything(
    definition: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On large workloads the rows' plan cannot be certified within the effort: every threshold decision
    gives up and the engine's bound is loose. Simulated without a clock: the decision raises
    SearchGaveUp, the engine's bound is the sum of all costs (safe, and useless). The old planner fell
    back to even shares (gain 1.00, "even shares (no better plan proven)"); a packing plan needs no
    search. Checked row by row with Fractions."""

    def gives_up(self: object, costs: np.ndarray, limit: float, effort: float | None) -> None:
        raise SearchGaveUp

    def loose(self: allocation._Planner, costs: np.ndarray) -> tuple[float, bool, tuple[int, ...]]:
        return float(math.fsum(costs)) * 1.01, False, ()

    monkeypatch.setattr(_Coverage, "over", gives_up)
    monkeypatch.setattr(allocation._Planner, "certified", loose)
    s = Schema((IntAttribute("age", 0, 29), IntAttribute("sex", 0, 1)))
    qs = [PredicateQuery.from_coverages(s, {}, id="all")]
    qs += [
        PredicateQuery.from_coverages(s, {"age": IndexSet.interval(i, i + 1)}, id=f"a{i}") for i in range(30)
    ]
    qs += [
        PredicateQuery.from_coverages(s, {"sex": IndexSet.interval(i, i + 1)}, id=f"s{i}") for i in range(2)
    ]
    plan = allocate(qs, 1.0, definition)
    assert plan.gain > 1.3, plan.method
    assert plan.method.startswith("packings")
    costs = [Fraction(x) ** 2 if definition == "gdp" else Fraction(x) for x in plan.shares]
    rows = list(itertools.product(range(30), range(2)))
    worst = max(sum((c for c, q in zip(costs, qs, strict=True) if q.covers(r)), Fraction(0)) for r in rows)
    assert worst <= 1


@pytest.mark.slow  # ~3-6 s: a plan of 1 000 queries
def test_a_packing_plan_of_a_thousand_queries_is_checked_exactly_by_toulbar2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1 000 mixed Adult queries (the Adult-like generator): the plan's shares are integers of one unit
    small enough for toulbar2, whose exact weighted maximum (an independent solver, not the packing
    certificate) is within the budget. Before the unit was chosen for it, the shares summed to 2^54
    units, the engine had no exact route for them and its bound after 30 s was 1.49. The planner's
    clock advances 1 ms a reading (its phases end as they would on any machine: on a loaded one its
    4.5 s of wall clock once cut the packing phase)."""
    import itertools

    from overlapdp.overlap import _clock

    ticks = itertools.count()
    monkeypatch.setattr(_clock, "now", lambda: next(ticks) * 1e-3)
    qs = mixed("adult", 1000, 1)
    plan = allocate(qs, 1.0, "pure", effort=4.5)
    assert plan.method.startswith("packings"), plan.method
    assert integral_loads(np.array(plan.shares)) is not None
    checked = max_overlap(qs, list(plan.shares), "sum", algorithm="wcsp")
    assert checked.exact and float(checked.value) <= 1.0
