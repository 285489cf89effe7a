"""The boxes route (overlapdp.overlap.boxes, MATH.md 7.5) against brute force over every row.

Small domains make the whole workload one leaf grid; the same workloads are also run with tiny leaf
and bound grids, so the divide and conquer, its bounds and its pruning decide the answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.exact import float_up, sqrt_up
from overlapdp.overlap import CompError, OverlapResult, brute_force_overlap, engine, max_overlap
from overlapdp.overlap import boxes as box_route
from overlapdp.overlap._compiled import compile_workload
from overlapdp.query import PredicateQuery
from overlapdp.schema import CategoricalAttribute, IndexSet, IntAttribute, Schema
from strategies import all_rows, compose
from support.marks import slow_after


@contextmanager
def tiny_grids(leaf: int, bound: int) -> Iterator[None]:
    """Force the cell search (no clique search) to split: leaves and bound grids of at most ``leaf`` /
    ``bound`` cells."""
    old = box_route.LEAF_CELLS, box_route.BOUND_CELLS, box_route.CLIQUE_QUERIES
    box_route.LEAF_CELLS, box_route.BOUND_CELLS, box_route.CLIQUE_QUERIES = leaf, bound, 0
    try:
        yield
    finally:
        box_route.LEAF_CELLS, box_route.BOUND_CELLS, box_route.CLIQUE_QUERIES = old


@contextmanager
def cliques_only() -> Iterator[None]:
    """Force the clique search on every workload (however dense), without a node budget."""
    old = box_route.CLIQUE_DENSITY, box_route.CLIQUE_NODES, box_route.CLIQUE_WEIGHTED_NODES
    box_route.CLIQUE_DENSITY, box_route.CLIQUE_NODES, box_route.CLIQUE_WEIGHTED_NODES = 2.0, 1 << 60, 1 << 60
    try:
        yield
    finally:
        box_route.CLIQUE_DENSITY, box_route.CLIQUE_NODES, box_route.CLIQUE_WEIGHTED_NODES = old


def check(queries: list[PredicateQuery], weights: list[float], comp: str, r: OverlapResult) -> None:
    """Exact and equal to brute force; the witness row carries exactly ``lower``."""
    truth = float(brute_force_overlap(queries, weights, comp).value)
    assert r.exact
    assert math.isclose(float(r.value), truth, rel_tol=1e-9, abs_tol=1e-12)
    assert r.witness_row is not None
    covering = [i for i, q in enumerate(queries) if q.covers(r.witness_row)]
    assert list(r.query_indices) == covering
    assert math.isclose(compose([weights[i] for i in covering], comp), float(r.lower), abs_tol=1e-12)
    assert math.isclose(float(r.lower), truth, rel_tol=1e-9, abs_tol=1e-12)


@st.composite
def box_workloads(
    draw: st.DrawFn, max_attributes: int = 5, value_sets: bool = False
) -> tuple[list[PredicateQuery], list[float]]:
    """1..5 attributes of 1..5 values, 1..25 queries; each constrains each attribute with prob ~0.7.

    With ``value_sets`` some attributes are categorical and take arbitrary non-empty value sets.
    """
    d = draw(st.integers(1, max_attributes))
    attrs: list[IntAttribute | CategoricalAttribute] = []
    categorical = []
    for j in range(d):
        n = draw(st.integers(1, 5))
        cat = value_sets and draw(st.booleans())
        categorical.append(cat)
        if cat:
            attrs.append(CategoricalAttribute(f"a{j}", tuple(f"v{k}" for k in range(n))))
        else:
            attrs.append(IntAttribute(f"a{j}", 0, n - 1))
    schema = Schema(tuple(attrs))
    t = draw(st.integers(1, 25))
    queries = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        for j, a in enumerate(attrs):
            if draw(st.integers(0, 9)) < 7:
                if categorical[j]:
                    vals = draw(st.sets(st.integers(0, a.size - 1), min_size=1))
                    covs[a.name] = IndexSet.from_indices(sorted(vals))
                else:
                    lo = draw(st.integers(0, a.size - 1))
                    hi = draw(st.integers(lo + 1, a.size))
                    covs[a.name] = IndexSet.interval(lo, hi)
        queries.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    weights = [draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 7.0])) for _ in range(t)]
    return queries, weights


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(box_workloads(), st.sampled_from(["count", "sum", "l2"]))
def test_boxes_match_brute_force(work: tuple[list[PredicateQuery], list[float]], comp: str) -> None:
    queries, weights = work
    check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))
    with cliques_only():
        check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))
    with tiny_grids(1, 2):
        check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))


@pytest.mark.slow  # 2.5 s of CPU
@settings(max_examples=60, deadline=None)
@given(box_workloads(value_sets=True), st.sampled_from(["count", "sum"]))
def test_value_sets_enumerated_match_brute_force(
    work: tuple[list[PredicateQuery], list[float]], comp: str
) -> None:
    queries, weights = work
    schema = queries[0].schema
    c = compile_workload(queries, schema)
    if c.attributes and c.live.size and not box_route.applies(c):
        # Every active attribute carries value sets: the route does not take it (nothing to sweep).
        with pytest.raises(CompError):
            max_overlap(queries, weights, comp, algorithm="boxes")
        return
    check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))
    with cliques_only():
        check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))
    with tiny_grids(1, 2):
        check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))


@settings(max_examples=30, deadline=None)
@given(box_workloads(max_attributes=3))
def test_vector_comp_per_component(work: tuple[list[PredicateQuery], list[float]]) -> None:
    queries, weights = work
    rng = np.random.default_rng(len(queries))
    vectors = [[w, float(rng.integers(0, 4)), w * w] for w in weights]
    with tiny_grids(1, 2):
        r = max_overlap(queries, vectors, "vector", algorithm="boxes")
    truth = brute_force_overlap(queries, vectors, "vector")
    assert r.exact
    np.testing.assert_allclose(np.asarray(r.value), np.asarray(truth.value), rtol=1e-9, atol=1e-12)
    for k, part in enumerate(r.components):
        assert part.witness_row is not None
        covering = [i for i, q in enumerate(queries) if q.covers(part.witness_row)]
        assert math.isclose(math.fsum(vectors[i][k] for i in covering), float(part.lower), abs_tol=1e-12)


def random_boxes(schema: Schema, t: int, seed: int) -> list[PredicateQuery]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        covs = {}
        for a in schema:
            if rng.random() < 0.7:
                lo, hi = sorted(rng.integers(0, a.size, 2).tolist())
                covs[a.name] = IndexSet.interval(lo, hi + 1)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


@pytest.mark.slow  # 1.4 s of CPU a seed
@pytest.mark.parametrize("seed", range(4))
def test_larger_workload_splits_and_matches_brute_force(seed: int) -> None:
    """120 weighted boxes on 4 attributes of 7 values: thousands of rows, many cells and bounds."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 120, seed)
    # Multiples of 2^-10: the route's float sums are exact, so its answer is exact (MATH.md 7.8).
    weights = (np.random.default_rng(seed + 100).uniform(0.0, 3.0, 120) * 1024).round() / 1024
    with tiny_grids(8, 16):
        check(
            queries, weights.tolist(), "sum", max_overlap(queries, weights.tolist(), "sum", algorithm="boxes")
        )
    check(
        queries, weights.tolist(), "count", max_overlap(queries, weights.tolist(), "count", algorithm="boxes")
    )
    # Thousandths are not dyadic: the value is still never below the exact maximum.
    tenths = np.random.default_rng(seed + 100).uniform(0.0, 3.0, 120).round(3).tolist()
    with tiny_grids(8, 16):
        r = max_overlap(queries, tenths, "sum", algorithm="boxes")
    truth = max(
        sum((Fraction(w) for q, w in zip(queries, tenths, strict=True) if q.covers(row)), Fraction(0))
        for row in all_rows(schema)
    )
    assert Fraction(float(r.value)) >= truth


def test_effort_limit_gives_safe_bound() -> None:
    """Stopped at once, the route reports a bound at least the truth and a witness that attains lower."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 150, 7)
    truth = float(brute_force_overlap(queries).value)
    with tiny_grids(1, 2):
        r = max_overlap(queries, effort=0.0, algorithm="boxes")
    assert float(r.upper) >= truth
    assert float(r.value) >= truth
    assert float(r.lower) <= truth
    assert r.witness_row is not None
    assert float(r.lower) == sum(q.covers(r.witness_row) for q in queries)
    if r.exact:
        assert float(r.value) == truth


def test_auto_takes_boxes_beyond_the_grid() -> None:
    """Boxes on 5 attributes of 100 values (too large a grid) go to this route and stay exact."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 99) for j in range(5)))
    queries = random_boxes(schema, 60, 3)
    r = max_overlap(queries)
    assert r.algorithm == "boxes" and r.exact
    # Independent check: the clique route is exact for boxes (Helly).
    from overlapdp.overlap import graph_overlap

    assert float(r.value) == float(graph_overlap(queries).value)
    assert r.witness_row is not None
    assert float(r.value) == sum(q.covers(r.witness_row) for q in queries)


def test_compress_axis_keeps_a_superset_of_every_piece() -> None:
    """Brute force over all interval lists on 5 values: some kept piece covers a superset of each piece."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        k = int(rng.integers(1, 6))
        lo = rng.integers(0, 5, k)
        hi = np.array([int(rng.integers(a + 1, 6)) for a in lo.tolist()])
        kept, nlo, nhi = box_route.compress_axis(lo, hi, 5)
        member = [{i for i in range(k) if lo[i] <= s < hi[i]} for s in range(5)]
        for s in range(5):
            assert any(member[s] <= member[int(p)] for p in kept)
        for i in range(k):
            inside = [p for p in kept.tolist() if lo[i] <= p < hi[i]]
            assert inside == kept[nlo[i] : nhi[i]].tolist() and inside


def dense_depth(queries: list[PredicateQuery], weights: list[float], schema: Schema) -> np.ndarray:
    """Independent truth: every query's weight added to its box of a numpy array over all rows."""
    grid = np.zeros(tuple(a.size for a in schema))
    for q, w in zip(queries, weights, strict=True):
        box = []
        for cov in q.coverages():
            (iv,) = cov.intervals
            box.append(slice(iv[0], iv[1]))
        grid[tuple(box)] += w
    return grid


@pytest.mark.parametrize("seed", range(2))
def test_shrinking_proves_six_attributes_in_few_cells(seed: int) -> None:
    """300 boxes on 6 attributes of 12 values: the shrunk cells prove the maximum in a handful of cells.

    Before cells were shrunk to the pieces that can still beat the best row, this took 23-31 cells."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 11) for j in range(6)))
    queries = random_boxes(schema, 300, seed)
    c = compile_workload(queries, schema)
    out = box_route.max_depth(c, np.ones(c.t), route="cells")
    truth = float(dense_depth(queries, [1.0] * len(queries), schema).max())
    assert out.exact and out.best == truth == out.upper
    assert out.nodes <= 12
    row = c.row(out.cell)
    assert sum(q.covers(row) for q in queries) == truth


@pytest.mark.parametrize("seed", slow_after(range(3)))
def test_weighted_six_attributes_with_small_grids_match_dense_truth(seed: int) -> None:
    """Weighted boxes on 6 attributes of 9 values, bound grids of a few cells: many groups, shrinks and
    splits, against a dense numpy array over all rows."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 8) for j in range(6)))
    queries = random_boxes(schema, 150, seed + 10)
    weights = ((np.random.default_rng(seed).uniform(0.0, 4.0, 150) * 64).round() / 64).tolist()
    truth = float(dense_depth(queries, weights, schema).max())
    for leaf, bound in ((16, 8), (64, 32), (1 << 17, 1 << 16)):
        with tiny_grids(leaf, bound):
            r = max_overlap(queries, weights, "sum", algorithm="boxes")
        assert r.exact and float(r.value) == truth
        assert r.witness_row is not None
        assert math.fsum(w for q, w in zip(queries, weights, strict=True) if q.covers(r.witness_row)) == truth


def test_prefix_sums_match_numpy_cumsum() -> None:
    """The prefix sums equal np.cumsum along every axis, on grids of 1 to 9 axes: short axes (summed by
    rotation) and long ones (by index and np.cumsum), the result in the axes' own order."""
    rng = np.random.default_rng(5)
    for case in range(300):
        ndim = int(rng.integers(1, 10))
        top = 7 if case % 2 else 90
        shape = tuple(int(x) for x in rng.integers(1, top, ndim))
        if int(np.prod(shape)) > 200_000:
            continue
        grid = rng.integers(-5, 6, shape).astype(np.float64)
        want = grid.copy()
        for k in range(grid.ndim):
            want = np.cumsum(want, axis=k)
        got = box_route._prefix_sums(grid)
        assert got.shape == shape
        np.testing.assert_array_equal(got, want)


def test_cell_pieces_match_compress_axis_per_attribute() -> None:
    """All attributes compressed at once equal compress_axis on each, and the boxes' pieces its indices."""
    rng = np.random.default_rng(6)
    for _ in range(200):
        d = int(rng.integers(1, 5))
        n = int(rng.integers(1, 8))
        m = rng.integers(1, 9, d)
        lo = np.stack([rng.integers(0, mj, n) for mj in m], axis=1)
        hi = np.stack(
            [np.array([int(rng.integers(a + 1, mj + 1)) for a in lo[:, j]]) for j, mj in enumerate(m)], 1
        )
        depth = box_route._Depth(lo, hi, m.astype(np.int64), np.ones(n))
        clo = np.array([int(rng.integers(0, mj)) for mj in m])
        chi = np.array([int(rng.integers(a + 1, mj + 1)) for a, mj in zip(clo, m, strict=True)])
        meets = np.all((lo < chi) & (hi > clo), axis=1)
        lc, hc = np.maximum(lo[meets], clo), np.minimum(hi[meets], chi)
        if not lc.size:
            continue
        kept, cells, pl, ph = depth._grid(clo, chi, lc, hc)
        assert cells == math.prod(k.size for k in kept)
        for j in range(d):
            want, _, _ = box_route.compress_axis(lc[:, j] - clo[j], hc[:, j] - clo[j], int(chi[j] - clo[j]))
            np.testing.assert_array_equal(kept[j], want)
            np.testing.assert_array_equal(pl[:, j], np.searchsorted(want, lc[:, j] - clo[j]))
            np.testing.assert_array_equal(ph[:, j], np.searchsorted(want, hc[:, j] - clo[j]))


# -- the pair-graph (clique) route, and exact prunes (issue 22) -----------------------------------------


def exact_truth(queries: list[PredicateQuery], weights: list[float], comp: str) -> Fraction:
    """The exact maximum over every row: sum of the weights (of their squares for l2), as Fractions."""
    schema = queries[0].schema
    power = 2 if comp == "l2" else 1
    return max(
        sum(
            (Fraction(w) ** power for q, w in zip(queries, weights, strict=True) if q.covers(row)),
            Fraction(0),
        )
        for row in all_rows(schema)
    )


def test_exact_floats_prune_no_heavier_row() -> None:
    """Regression: the cell search pruned with a relative slack of 1e-12 even on exact (dyadic) float
    sums, so a row heavier by 2^-31 on a load of 6000 was cut and 6000 reported as exact."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 5) for j in range(3)))
    rng = np.random.default_rng(1)
    t = int(rng.integers(3, 40))
    queries = []
    for _ in range(t):
        covs = {}
        for j in range(3):
            a, b = sorted(rng.integers(0, 6, 2).tolist())
            covs[f"a{j}"] = IndexSet.interval(a, b + 1)
        queries.append(PredicateQuery.from_coverages(schema, covs))
    weights = [1000.0 if rng.random() < 0.8 else 2.0**-31 for _ in range(t)]
    truth = exact_truth(queries, weights, "sum")
    assert truth == 6000 + Fraction(2) ** -31
    with tiny_grids(2, 4):
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert r.exact and Fraction(r.value) >= truth and r.value == float_up(truth)


@settings(max_examples=80, deadline=None)
@given(box_workloads(), st.sampled_from([0, box_route.WORD_QUERIES]))
def test_meeting_sets_match_pairwise_overlaps(
    work: tuple[list[PredicateQuery], list[float]], word_queries: int
) -> None:
    """The bitsets from sorted endpoints (as Python integers, or as numpy words) against the n x n
    comparison of every pair, any bit order."""
    queries, _ = work
    check_meeting_sets(queries, word_queries)


@pytest.mark.parametrize("word_queries", [0, box_route.WORD_QUERIES])
@pytest.mark.parametrize(("t", "seed"), [(63, 1), (64, 2), (65, 3), (200, 4)])
def test_meeting_sets_span_several_words(t: int, seed: int, word_queries: int) -> None:
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 9) for j in range(4)))
    check_meeting_sets(random_boxes(schema, t, seed), word_queries)


def check_meeting_sets(queries: list[PredicateQuery], word_queries: int) -> None:
    c = compile_workload(queries, queries[0].schema)
    if not c.attributes or c.live.size == 0:
        return
    n, d = c.live.size, len(c.attributes)
    sizes = np.array([a.size for a in c.attributes], dtype=np.int64)
    lo = np.zeros((c.t, d), dtype=np.int64)
    hi = np.tile(sizes, (c.t, 1))
    for j, a in enumerate(c.attributes):
        lo[a.query, j], hi[a.query, j] = a.lo, a.hi
    lo, hi = lo[c.live], hi[c.live]
    bit = np.random.default_rng(n).permutation(n)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route, "WORD_QUERIES", word_queries)
        meets = box_route.meeting_sets(lo, hi, sizes, bit)
    pairs = np.all((lo[:, None, :] < hi[None, :, :]) & (lo[None, :, :] < hi[:, None, :]), axis=2)
    for a in range(n):
        want = sum(1 << int(bit[b]) for b in range(n) if b != a and pairs[a, b])
        assert meets[int(bit[a])] == want


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 14).flatmap(
        lambda n: st.tuples(
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n * (n - 1) // 2),
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
        )
    ),
    st.sampled_from([None, 1, 3]),
    st.sampled_from([-1, 0, 4, 9]),
)
def test_max_clique_matches_networkx(graph: Any, node_limit: int | None, floor: int) -> None:
    """The bitset clique search on arbitrary graphs (heaviest bits first) against networkx's exact
    maximum weight clique; stopped by a node limit, best <= truth <= upper. With a floor (the colour
    classes whose bound does not pass it are dropped), a clique heavier than the floor is found, and
    none is reported when the heaviest is not."""
    import networkx as nx

    edges, weights = graph
    n = len(weights)
    order = sorted(range(n), key=lambda v: -weights[v])  # bit of each vertex: heaviest first
    bit = {v: k for k, v in enumerate(order)}
    meets = [0] * n
    g = nx.Graph()
    g.add_nodes_from((v, {"w": weights[v]}) for v in range(n))
    for a, b in edges:
        if a != b:
            g.add_edge(a, b)
            meets[bit[a]] |= 1 << bit[b]
            meets[bit[b]] |= 1 << bit[a]
    w = [weights[v] for v in order]
    positive = sum(1 << k for k in range(n) if w[k] > 0)
    _, truth = nx.max_weight_clique(g, weight="w")
    truth = truth if positive else -1  # nothing carries weight: no clique above the floor
    out = box_route.max_clique(meets, w, positive, floor, node_limit=node_limit)
    if truth <= floor:
        assert out.members is None and out.best == floor <= out.upper
        return
    assert out.best <= truth <= out.upper
    if out.members is not None:
        assert out.best == sum(w[v] for v in out.members)
        assert all(meets[a] >> b & 1 for a in out.members for b in out.members if a != b)
    if out.exact:
        assert out.best == truth == out.upper


ugly = st.sampled_from([0.1, 0.2, 0.3, 1 / 3, 0.7, 1e16, 1.0, 2.0**-60, 0.0])


@settings(max_examples=60, deadline=None)
@given(box_workloads(), st.sampled_from(["sum", "l2"]), st.lists(ugly, min_size=25, max_size=25))
def test_ordinary_float_weights_take_the_boxes_route_exactly(
    work: tuple[list[PredicateQuery], list[float]], comp: str, ugly_weights: list[float]
) -> None:
    """Regression (issue 22 item 5): non-dyadic weights skipped the boxes route in ``auto`` (its float
    sums could tie), for the general search: 80x slower, and not exact on 5 attributes. The clique
    search compares the exact loads as integers: exact, and the smallest float at or above the exact
    maximum. The dense grid is disabled so that small domains reach the route."""
    queries, _ = work
    weights = ugly_weights[: len(queries)]
    truth = exact_truth(queries, weights, comp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "grid_feasible", lambda c, *args: False)
        r = max_overlap(queries, weights, comp)
    c = compile_workload(queries, queries[0].schema)
    if not (len(c.attributes) > 2 or (len(c.attributes) == 2 and not c.single_interval)):
        return  # no attribute, or the 2-D sweep: not this route
    # A workload that splits into independent parts (MATH.md 7.10) solves each part by the same rule.
    routes = (
        r.algorithm[r.algorithm.index(":") + 2 : -1].split("+")
        if r.algorithm.startswith("parts(")
        else [r.algorithm]
    )
    assert set(routes) <= {"boxes", "sweep", "sweep2d", "grid", "free"}, r.algorithm
    assert r.exact
    assert r.value == (sqrt_up(truth) if comp == "l2" else float_up(truth))


@pytest.mark.parametrize(("peel_queries", "peel_density"), [(4_000, 0.0), (4_000, 2.0), (0, 0.0)])
@pytest.mark.parametrize("seed", range(3))
def test_every_bit_order_of_the_clique_search_is_exact(
    peel_queries: int, peel_density: float, seed: int
) -> None:
    """The degeneracy order (dense table), the first pass's order (sparse graphs) and the decreasing
    degree (many boxes) against a dense numpy array over all rows, weighted."""
    schema = Schema(tuple(IntAttribute(f"a{j}", 0, 6) for j in range(4)))
    queries = random_boxes(schema, 120, seed + 30)
    weights = ((np.random.default_rng(seed).uniform(0.0, 4.0, 120) * 64).round() / 64).tolist()
    truth = float(dense_depth(queries, weights, schema).max())
    with pytest.MonkeyPatch.context() as mp, cliques_only():
        mp.setattr(box_route, "PEEL_QUERIES", peel_queries)
        mp.setattr(box_route, "PEEL_DENSITY", peel_density)
        r = max_overlap(queries, weights, "sum", algorithm="boxes")
    assert r.exact and float(r.value) == truth


def test_sparse_graphs_colour_the_largest_boxes_first() -> None:
    """Narrow boxes (5 Adult attributes, 400 queries, 5% of the pairs meet): with the largest boxes in
    the first bits the greedy colourings need fewer classes and the search colours 570 boxes in all
    (2 326 in query order: issue 22 item 4, 6.8x the graph route where 10x is the target). The value
    against networkx's maximum clique of the pairwise graph."""
    import networkx as nx

    from support.generators import constrained

    names = ["age", "education-num", "hours-per-week", "capital-gain", "fnlwgt"]
    queries = constrained("narrow", names, 400, 2200, sets=False)
    coloured: list[int] = []
    real = box_route._colour

    def spy(cand: int, *args: Any) -> Any:
        coloured.append(cand.bit_count())
        return real(cand, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(box_route, "_colour", spy)
        r = max_overlap(queries, algorithm="boxes")
    c = compile_workload(queries, queries[0].schema)
    sizes = np.array([a.size for a in c.attributes], dtype=np.int64)
    lo = np.zeros((c.t, len(sizes)), dtype=np.int64)
    hi = np.tile(sizes, (c.t, 1))
    for j, a in enumerate(c.attributes):
        lo[a.query, j], hi[a.query, j] = a.lo, a.hi
    pairs = np.all((lo[:, None, :] < hi[None, :, :]) & (lo[None, :, :] < hi[:, None, :]), axis=2)
    graph = nx.Graph()
    graph.add_nodes_from(range(c.t))
    graph.add_edges_from((int(a), int(b)) for a, b in zip(*np.nonzero(np.triu(pairs, 1)), strict=True))
    _, truth = nx.max_weight_clique(graph, weight=None)
    assert r.exact and r.value == truth
    assert sum(coloured) < 1_000
