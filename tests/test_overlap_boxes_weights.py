"""The boxes route on ordinary float weights (issue 22, MATH.md 7.5, 7.8) against exact truth.

The searches compare integer loads scaled once per workload (the exact ones over their common divisor,
or rounded up from the floats) and weigh every row above the threshold on the exact integers. Tiny
node budgets and grids make the cell search take over and split, so its judging decides the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.exact import float_up, sqrt_up
from overlapdp.overlap import _clock, max_overlap
from overlapdp.overlap import boxes as box_route
from overlapdp.overlap._compiled import compile_workload
from overlapdp.overlap.magnitude import Loads
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema
from support.marks import slow_after
from test_effort import DEADLINE, SteppedClock
from test_overlap_boxes import box_workloads, exact_truth, random_boxes

# Ties (equal weights, equal sums of different weights), thirds, tiny and huge ratios, zeros.
UGLY = [0.1, 0.2, 0.3, 1 / 3, 0.7, 1e16, 1.0, 2.0**-60, 0.0]


@contextmanager
def small_search(nodes: int, leaf: int, bound: int) -> Iterator[list[int]]:
    """A clique budget of ``nodes`` (then the cell search), leaves / bounds of ``leaf`` / ``bound``
    cells; yields a list counting the cell searches run."""
    calls: list[int] = []
    real = box_route._cells

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route, "CLIQUE_NODES", nodes)
        mp.setattr(box_route, "CLIQUE_WEIGHTED_NODES", nodes)
        mp.setattr(box_route, "LEAF_CELLS", leaf)
        mp.setattr(box_route, "BOUND_CELLS", bound)
        mp.setattr(box_route, "_cells", spy)
        yield calls


def exact_dense(queries: list[PredicateQuery], weights: list[float], schema: Schema) -> Fraction:
    """Independent truth: every weight (as a Fraction) added to its box of an object array of rows."""
    grid = np.full(tuple(a.size for a in schema), Fraction(0), dtype=object)
    for q, w in zip(queries, weights, strict=True):
        box = []
        for cov in q.coverages():
            (iv,) = cov.intervals
            box.append(slice(iv[0], iv[1]))
        grid[tuple(box)] += Fraction(w)
    return Fraction(max(grid.reshape(-1).tolist()))


@settings(max_examples=80, deadline=None)
@given(
    box_workloads(),
    st.sampled_from(["sum", "l2"]),
    st.lists(st.sampled_from(UGLY), min_size=25, max_size=25),
    st.sampled_from([(0, 1, 2), (3, 4, 8), (1 << 20, 1 << 17, 1 << 16)]),
)
def test_float_weights_exact_through_every_search(
    work: tuple[list[PredicateQuery], list[float]],
    comp: str,
    ugly: list[float],
    sizes: tuple[int, int, int],
) -> None:
    queries, _ = work
    weights = ugly[: len(queries)]
    truth = exact_truth(queries, weights, comp)
    with small_search(*sizes):
        r = max_overlap(queries, weights, comp, algorithm="boxes")
    assert r.exact
    assert r.value == (sqrt_up(truth) if comp == "l2" else float_up(truth))
    assert r.witness_row is not None
    covering = [w for q, w in zip(queries, weights, strict=True) if q.covers(r.witness_row)]
    power = 2 if comp == "l2" else 1
    assert sum((Fraction(w) ** power for w in covering), Fraction(0)) == truth


@settings(max_examples=40, deadline=None)
@given(box_workloads(value_sets=True), st.lists(st.sampled_from(UGLY), min_size=25, max_size=25))
def test_float_weights_on_value_sets(
    work: tuple[list[PredicateQuery], list[float]], ugly: list[float]
) -> None:
    queries, _ = work
    weights = ugly[: len(queries)]
    if not box_route.applies(compile_workload(queries, queries[0].schema)):
        return
    truth = exact_truth(queries, weights, "sum")
    with small_search(2, 2, 4):
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert r.exact and r.value == float_up(truth)


@pytest.mark.parametrize(
    "draw",
    [
        "uniform",  # U[0.01, 1]: the loads rounded up to 2^-s, near-ties judged exactly
        "equal",  # every weight 0.1: the exact loads over their divisor, ties stay ties
        "three",  # 0.1, 0.2, 0.3: plateaus of exactly tied rows among rounded-up loads
    ],
)
@pytest.mark.parametrize("seed", slow_after(range(3)))
def test_float_weights_take_the_cell_search_past_the_budget(draw: str, seed: int) -> None:
    """Regression (issue 22): on non-dyadic weights the clique search ran with no node budget (the
    cell search compared floats, so it never took over): weighted boxes on 8 attributes, t = 1 000,
    did not finish in 120 s. Now, past the budget, the cell search runs on integer loads scaled once
    per workload and weighs every row above its threshold exactly: 120 boxes on 4 attributes of 7
    values against exact sums over every row."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 120, seed + 50)
    rng = np.random.default_rng(seed)
    if draw == "uniform":
        weights = rng.uniform(0.01, 1.0, 120).tolist()
    elif draw == "equal":
        weights = [0.1] * 120
    else:
        weights = rng.choice([0.1, 0.2, 0.3], 120).tolist()
    truth = exact_dense(queries, weights, schema)
    with small_search(5, 8, 16) as calls:
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert calls, "the cell search did not take over"
    assert r.exact and r.value == float_up(truth)
    covering = [w for q, w in zip(queries, weights, strict=True) if q.covers(r.witness_row)]
    assert sum(map(Fraction, covering), Fraction(0)) == truth


def test_every_piece_of_a_leaf_above_the_threshold_is_weighed() -> None:
    """Rounded up to the search's unit, 0.1 and the next float above it tie; the leaf grid's first
    maximum is the lighter row, so the heavier one is found only by weighing every piece above the
    threshold, not just the grid's maximum."""
    schema = Schema((IntAttribute("a", 0, 1), IntAttribute("b", 0, 1)))
    heavy = float(np.nextafter(0.1, 1.0))
    lighter = PredicateQuery.from_coverages(schema, {"a": IndexSet.interval(0, 1)}, id="light")
    heavier = PredicateQuery.from_coverages(schema, {"a": IndexSet.interval(1, 2)}, id="heavy")
    queries, weights = [lighter, heavier], [0.1, heavy]
    with small_search(0, 1 << 17, 1 << 16) as calls:
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert calls
    assert r.exact and r.value == heavy and list(r.query_indices) == [1]


@pytest.mark.parametrize(
    ("weights", "budget"), [("equal", "CLIQUE_NODES"), ("distinct", "CLIQUE_WEIGHTED_NODES")]
)
def test_weighted_loads_hand_over_to_the_cell_search_sooner(weights: str, budget: str) -> None:
    """Weighted colourings prune little: 8 Adult attributes, t = 1 000, took 3.4-5.5 s of CPU in 100 000
    clique nodes before the cell search, which alone proves it in 1.6 s. Loads that differ get the
    smaller budget; equal loads (counts) keep the clique search's."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 60, 7)
    w = [0.1] * 60 if weights == "equal" else np.random.default_rng(7).uniform(0.01, 1.0, 60).tolist()
    limits: list[int | None] = []
    real = box_route.max_clique

    def spy(*args: Any, **kwargs: Any) -> Any:
        limits.append(args[5])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route, "max_clique", spy)
        mp.setattr(box_route, "CLIQUE_DENSITY", 2.0)
        r = max_overlap(queries, w, "sum", algorithm="boxes")
    assert limits and set(limits) == {getattr(box_route, budget)}
    assert r.exact and r.value == float_up(exact_dense(queries, w, schema))


@pytest.mark.parametrize("weights", ["count", "dyadic"])
def test_exact_search_loads_weigh_no_row_again(weights: str) -> None:
    """When the search loads are the exact ones (counts, dyadic weights) a clique's weight is exact:
    no row is weighed again on the exact integers (it cost 0.1-0.15 ms of 2.5 ms on 400 narrow
    boxes), and the answer still matches a dense array over every row."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 120, 11)
    w = [1.0] * 120 if weights == "count" else [float(x) for x in np.arange(120) % 7 / 4]
    weighed: list[int] = []
    real = box_route._Judge.rows

    def spy(self: Any, points: Any) -> float:
        weighed.append(int(points.shape[0]))
        return real(self, points)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route._Judge, "rows", spy)
        mp.setattr(box_route, "CLIQUE_DENSITY", 2.0)
        r = max_overlap(queries, w, "sum", algorithm="boxes")
    assert not weighed
    assert r.exact and r.value == float_up(exact_dense(queries, w, schema))


@pytest.mark.parametrize("reads", [0, 1, 2, 3, 1_000])
def test_leaf_weighing_stops_at_the_deadline_with_a_safe_bound(reads: int) -> None:
    """49 cells each covered by boxes of 0.1 and 0.2, a slab of 0.3 over them all: rounded up, every
    cell ties (0.1 + 0.2 > 0.3 exactly, so the cells are also the exact maximum), and each is
    weighed on the exact integers in turn, in one leaf. Past the deadline the rest are left
    unweighed (before, all were, however long it took) and bounded by their search loads:
    best <= truth <= upper, exact only when every one was weighed."""
    schema = Schema((IntAttribute("a0", 0, 6), IntAttribute("a1", 0, 6), IntAttribute("a2", 0, 1)))
    queries, weights = [], []
    for i in range(7):
        for j in range(7):
            for w in (0.1, 0.2):
                cov = {"a0": IndexSet.interval(i, i + 1), "a1": IndexSet.interval(j, j + 1)}
                queries.append(PredicateQuery.from_coverages(schema, cov, id=f"q{len(queries)}"))
                weights.append(w)
    queries.append(PredicateQuery.from_coverages(schema, {"a2": IndexSet.interval(0, 1)}, id="slab"))
    weights.append(0.3)
    truth = sum(map(Fraction, (0.1, 0.2, 0.3)), Fraction(0))
    c = compile_workload(queries, schema)
    lw = Loads.of("sum", np.asarray(weights))
    clock = SteppedClock(reads)
    weighed: list[int] = []
    real = box_route._Judge.rows

    def spy(self: Any, points: Any) -> float:
        weighed.append(int(points.shape[0]))
        return real(self, points)

    with small_search(0, 1 << 17, 1 << 16), pytest.MonkeyPatch.context() as mp:
        mp.setattr(_clock, "now", clock)
        mp.setattr(box_route._Judge, "rows", spy)
        out = box_route.max_depth(c, lw.loads, DEADLINE, lw.exact, floats_exact=False)
    assert out.cell is not None
    row = c.row(out.cell)
    found = sum((Fraction(w) for q, w in zip(queries, weights, strict=True) if q.covers(row)), Fraction(0))
    assert found <= truth <= Fraction(out.upper) * Fraction(2) ** lw.shift
    assert found == truth or not out.exact
    if reads == 0:
        assert sum(weighed) <= 8  # the ascent's rows and the leaf's maximum, no more
        assert not out.exact
    if reads == 1_000:
        assert out.exact and found == truth and sum(weighed) >= 49


def test_split_cells_finish_exact_after_the_deadline_check() -> None:
    """Regression: the bound on rows left unweighed at the deadline was kept in a variable that the
    search loop's split position (``cut``) overwrote, so any search that split a cell ended "not
    exact" with that position as its bound (found by the vector-comp property test: 53 reported as
    [53, 64])."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 4) for j in range(3)))
    spec = [
        {"a0": (2, 3), "a1": (1, 2), "a2": (1, 2)},
        {"a0": (2, 3), "a1": (1, 2), "a2": (4, 5)},
        {"a0": (0, 1), "a2": (1, 2)},
        {"a0": (1, 2), "a2": (2, 3)},
        {"a0": (2, 3), "a1": (0, 1), "a2": (1, 4)},
        {"a1": (0, 1), "a2": (4, 5)},
        {"a0": (2, 3), "a1": (1, 2), "a2": (0, 2)},
    ]
    queries = [
        PredicateQuery.from_coverages(
            schema, {k: IndexSet.interval(*iv) for k, iv in box.items()}, id=f"q{i}"
        )
        for i, box in enumerate(spec)
    ]
    weights = [49.0, 0.0, 0.0, 0.25, 0.0, 49.0, 4.0]
    with small_search(0, 1, 2), pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route, "CLIQUE_QUERIES", 0)
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert r.exact and r.value == 53.0 == float(exact_truth(queries, weights, "sum"))
