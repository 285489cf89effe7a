"""The boxes route (overlapdp.overlap.boxes, MATH.md 7.5) against brute force over every row.

Small domains make the whole workload one leaf grid; the same workloads are also run with tiny leaf
and bound grids, so the divide and conquer, its bounds and its pruning decide the answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.overlap import CompError, OverlapResult, brute_force_overlap, max_overlap
from overlapdp.overlap import boxes as box_route
from overlapdp.overlap._compiled import compile_workload
from overlapdp.query import PredicateQuery
from overlapdp.schema import CategoricalAttribute, IndexSet, IntAttribute, Schema
from strategies import all_rows, compose


@contextmanager
def tiny_grids(leaf: int, bound: int) -> Iterator[None]:
    """Force the search to split: leaves and bound grids of at most ``leaf`` / ``bound`` cells."""
    old = box_route.LEAF_CELLS, box_route.BOUND_CELLS
    box_route.LEAF_CELLS, box_route.BOUND_CELLS = leaf, bound
    try:
        yield
    finally:
        box_route.LEAF_CELLS, box_route.BOUND_CELLS = old


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


@settings(max_examples=100, deadline=None)
@given(box_workloads(), st.sampled_from(["count", "sum", "l2"]))
def test_boxes_match_brute_force(work: tuple[list[PredicateQuery], list[float]], comp: str) -> None:
    queries, weights = work
    check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))
    with tiny_grids(1, 2):
        check(queries, weights, comp, max_overlap(queries, weights, comp, algorithm="boxes"))


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
