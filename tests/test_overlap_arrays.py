"""max_overlap_boxes (boxes as numpy arrays) against exact brute force over every row, against the
PredicateQuery route on the same boxes, and its input errors; the lazy covering ids; the compiled form
cached on query objects. Truth is computed here on integers / Fractions (MATH.md 7.8)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
import time
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from overlapdp.overlap import (
    CompError,
    MagnitudeError,
    OverlapInputError,
    SetComp,
    WeightError,
    exactness,
    max_overlap,
    max_overlap_boxes,
)
from overlapdp.overlap._compiled import compile_workload
from overlapdp.overlap._gridbranch import compress
from overlapdp.overlap.branch import atom_tables
from overlapdp.overlap.grid import GridPlan
from overlapdp.overlap.magnitude import Loads
from overlapdp.overlap.result import LazyTuple
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema

MAX_FLOAT = 1.7976931348623157e308


@st.composite
def boxes(draw: st.DrawFn, max_t: int = 10) -> tuple[list[int], np.ndarray, np.ndarray]:
    d = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 6)) for _ in range(d)]
    t = draw(st.integers(0, max_t))
    lo = np.zeros((t, d), dtype=np.int64)
    hi = np.zeros((t, d), dtype=np.int64)
    for i in range(t):
        for j, n in enumerate(sizes):
            kind = draw(st.sampled_from(["range", "range", "full", "empty"]))
            if kind == "full":
                lo[i, j], hi[i, j] = 0, n
            elif kind == "empty":
                v = draw(st.integers(0, n))
                lo[i, j] = hi[i, j] = v
            else:
                a, b = sorted((draw(st.integers(0, n)), draw(st.integers(0, n))))
                lo[i, j], hi[i, j] = a, max(b, a)
    return sizes, lo, hi


magnitude = st.integers(-300, 300).flatmap(lambda e: st.floats(1.0, 9.99).map(lambda m: m * 10.0**e))
weight_lists = st.sampled_from(["small", "any"]).flatmap(
    lambda kind: st.lists(
        st.one_of(st.just(0.0), st.integers(0, 4).map(float), st.floats(0.0, 5.0))
        if kind == "small"
        else st.one_of(st.just(0.0), magnitude),
        min_size=12,
        max_size=12,
    )
)


def covering(lo: np.ndarray, hi: np.ndarray, row: tuple[int, ...]) -> list[int]:
    """The boxes containing ``row``, box by box in plain Python."""
    return [i for i in range(lo.shape[0]) if all(lo[i, j] <= v < hi[i, j] for j, v in enumerate(row))]


def exact_comp(ws: list[float], comp: str) -> Fraction:
    """count: the number; sum: the exact sum; l2: the exact sum of squares (compared squared)."""
    if comp == "count":
        return Fraction(len(ws))
    if comp == "l2":
        return sum((Fraction(w) ** 2 for w in ws), Fraction(0))
    return sum((Fraction(w) for w in ws), Fraction(0))


def smallest_float_at_least(x: Fraction, comp: str) -> float:
    """The smallest float f with f >= x (``l2``: with f^2 >= x)."""
    if comp == "l2":
        if x == 0:
            return 0.0
        # sqrt(x) = 2^k sqrt(x / 4^k), the quotient within the float range whatever x's magnitude.
        k = (x.numerator.bit_length() - x.denominator.bit_length()) // 2
        f = math.ldexp(math.sqrt(float(x / Fraction(4) ** k)), k)
        while Fraction(f) ** 2 < x:
            f = math.nextafter(f, math.inf)
        while f > 0 and Fraction(math.nextafter(f, -math.inf)) ** 2 >= x:
            f = math.nextafter(f, -math.inf)
        return f
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def brute(sizes: list[int], lo: np.ndarray, hi: np.ndarray, w: list[float], comp: str) -> Fraction:
    best = Fraction(0)
    for row in itertools.product(*(range(n) for n in sizes)):
        best = max(best, exact_comp([w[i] for i in covering(lo, hi, row)], comp))
    return best


@settings(max_examples=100, deadline=None)
@given(
    boxes(),
    weight_lists,
    st.sampled_from(["count", "sum", "l2"]),
    st.sampled_from(["auto", "grid", "gridbranch", "branch", "milp"]),
)
def test_against_brute_force(case: Any, weights: list[float], comp: str, algorithm: str) -> None:
    sizes, lo, hi = case
    t = lo.shape[0]
    w = weights[:t]
    truth = brute(sizes, lo, hi, w, comp)
    r = max_overlap_boxes(sizes, lo, hi, None if comp == "count" else np.array(w), comp, algorithm=algorithm)
    # The witness is a row covered by exactly the reported boxes, whose comp is ``lower``.
    assert r.witness_row is not None and len(r.witness_row) == len(sizes)
    assert r.witness == {f"x{j}": v for j, v in enumerate(r.witness_row)}
    cov = covering(lo, hi, r.witness_row)
    assert list(r.query_indices) == cov
    assert list(r.queries) == [f"#{i}" for i in cov]
    ws = [1.0] * len(cov) if comp == "count" else [w[i] for i in cov]
    assert r.lower == smallest_float_at_least(exact_comp(ws, comp), comp)
    want = smallest_float_at_least(truth, comp)
    if r.exact:
        assert r.value == r.upper == r.lower == want
    else:  # a safe bound: never below the maximum
        assert r.upper >= want and r.value == r.upper and r.lower <= want


@settings(max_examples=60, deadline=None)
@given(boxes(max_t=12), weight_lists, st.sampled_from(["count", "sum", "l2"]))
def test_same_answer_as_the_query_route(case: Any, weights: list[float], comp: str) -> None:
    sizes, lo, hi = case
    t = lo.shape[0]
    schema = Schema(tuple(IntAttribute(f"x{j}", 0, n - 1) for j, n in enumerate(sizes)))
    queries = [
        PredicateQuery.from_coverages(
            schema,
            {j: IndexSet.interval(int(lo[i, j]), int(hi[i, j])) for j in range(len(sizes))},
            id=f"b{i}",
        )
        for i in range(t)
    ]
    w = weights[:t]
    mine = max_overlap_boxes(schema, lo, hi, np.array(w), comp, ids=[f"b{i}" for i in range(t)])
    theirs = max_overlap(queries, w, comp, schema=schema)
    assert (mine.value, mine.exact, mine.lower, mine.upper) == (
        theirs.value,
        theirs.exact,
        theirs.lower,
        theirs.upper,
    )
    assert mine.witness_row == theirs.witness_row and mine.witness == theirs.witness
    assert mine.queries == theirs.queries and list(mine.query_indices) == list(theirs.query_indices)


def test_one_dimensional_shape_and_large_domain() -> None:
    rng = np.random.default_rng(5)
    for n in (50, 10**7):  # dense ranking, then np.unique
        a, b = rng.integers(0, n, 300), rng.integers(0, n, 300)
        lo, hi = np.minimum(a, b), np.maximum(a, b) + 1
        r = max_overlap_boxes([n], lo, hi)
        # Truth from the sorted endpoints: +1 at lo, -1 at hi, ends before starts at the same value.
        events = sorted([(int(x), 1) for x in lo] + [(int(x), -1) for x in hi], key=lambda e: (e[0], e[1]))
        depth = best = 0
        for _, s in events:
            depth += s
            best = max(best, depth)
        assert r.exact and r.value == best
        assert r.witness_row is not None
        assert len(covering(lo[:, None], hi[:, None], r.witness_row)) == best


def test_set_comp_counts_rows() -> None:
    lo = np.array([[0, 0], [1, 1], [2, 0]])
    hi = np.array([[3, 2], [4, 3], [4, 1]])
    comp = SetComp(lambda idx: float(len(idx)) ** 2, lambda idx: float(len(idx)) ** 2)
    r = max_overlap_boxes([4, 3], lo, hi, comp=comp)
    best = max(len(covering(lo, hi, row)) for row in itertools.product(range(4), range(3)))
    assert r.exact and r.value == best**2
    assert len(covering(lo, hi, r.witness_row or ())) == best


def test_empty_input() -> None:
    r = max_overlap_boxes([3, 4], np.zeros((0, 2), dtype=np.int64), np.zeros((0, 2), dtype=np.int64))
    assert (
        r.value == 0.0
        and r.exact
        and r.witness_row == (0, 0)
        and r.queries == ()
        and len(r.query_indices) == 0
    )
    # Only empty boxes: nothing covers any row.
    r = max_overlap_boxes([3], [1, 2], [1, 2], [5.0, 7.0], "sum")
    assert r.value == 0.0 and r.exact and r.queries == ()


def test_magnitudes_overflow_is_refused_naming_the_box() -> None:
    with pytest.raises(MagnitudeError, match="#1"):
        max_overlap_boxes([4], [0, 1], [3, 4], [1e308, 1.7e308], "sum")
    # Far apart in magnitude, the heavy and the light box both count, exactly.
    r = max_overlap_boxes([4], [0, 1, 3], [3, 4, 4], [1e300, 1e-300, 1e300], "sum")
    assert r.exact and r.value == smallest_float_at_least(Fraction(1e300) + Fraction(1e-300), "sum")


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: max_overlap_boxes([4], [[0, 1]], [[2, 3]]), OverlapInputError, r"lo: expected shape"),
        (
            lambda: max_overlap_boxes([4, 4], [0, 1], [2, 3]),
            OverlapInputError,
            r"lo: expected shape \(t, 2\)",
        ),
        (lambda: max_overlap_boxes([4], [0, 1], [2, 3, 4]), OverlapInputError, "same shape"),
        (
            lambda: max_overlap_boxes([4], [0, 3], [2, 2]),
            OverlapInputError,
            r"lo\[1, 0\] = 3 > hi\[1, 0\] = 2",
        ),
        (lambda: max_overlap_boxes([4], [-1, 0], [2, 2]), OverlapInputError, r"lo\[0, 0\] = -1 is below 0"),
        (
            lambda: max_overlap_boxes([4], [0, 0], [2, 5]),
            OverlapInputError,
            r"hi\[1, 0\] = 5 is past the end",
        ),
        (
            lambda: max_overlap_boxes([4], [0.0, 1.0], [2, 3]),
            OverlapInputError,
            "lo: expected an integer array",
        ),
        (
            lambda: max_overlap_boxes([4], [0, 1], [2, 3], [1.0, math.nan], "sum"),
            WeightError,
            r"weights\[1\]",
        ),
        (lambda: max_overlap_boxes([4], [0, 1], [2, 3], [1.0, -2.0], "sum"), WeightError, r"weights\[1\]"),
        (
            lambda: max_overlap_boxes([4], [0, 1], [2, 3], [1.0], "sum"),
            WeightError,
            r"weights: expected shape",
        ),
        (lambda: max_overlap_boxes([4], [0, 1], [2, 3], [1.0, math.inf]), WeightError, r"weights\[1\]"),
        (lambda: max_overlap_boxes([0], [0], [0]), OverlapInputError, "domain: size of attribute 0"),
        (lambda: max_overlap_boxes("ab", [0], [1]), OverlapInputError, "domain"),
        (lambda: max_overlap_boxes([4], [0], [1], ids=["a", "b"]), OverlapInputError, "ids"),
        (lambda: max_overlap_boxes([4], [0], [1], [[1.0]], "vector"), CompError, "vector"),
        (lambda: max_overlap_boxes([4], [0], [1], effort=-1), CompError, "effort"),
        (lambda: max_overlap_boxes([4], [0], [1], algorithm="nope"), CompError, "algorithm"),  # type: ignore[arg-type]
    ],
)
def test_bad_arrays_are_named(call: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()


def test_lazy_ids_equal_eager_ids() -> None:
    schema = Schema((IntAttribute("x", 0, 9), IntAttribute("y", 0, 9)))
    rng = np.random.default_rng(3)
    queries = []
    for i in range(40):
        a, b = sorted(rng.integers(0, 10, 2).tolist())
        c, d = sorted(rng.integers(0, 10, 2).tolist())
        covs = {"x": IndexSet.interval(a, b + 1), "y": IndexSet.interval(c, d + 1)}
        queries.append(PredicateQuery.from_coverages(schema, covs, id=None if i % 7 == 0 else f"q{i}"))
    r = max_overlap(queries)
    assert isinstance(r.queries, LazyTuple) and isinstance(r.query_indices, LazyTuple)
    assert r.witness_row is not None
    eager = tuple(
        (q.id if q.id is not None else f"#{i}") for i, q in enumerate(queries) if q.covers(r.witness_row)
    )
    assert len(r.queries) == len(eager) == r.value  # len before anything is listed
    assert r.queries == eager and eager == r.queries and hash(r.queries) == hash(eager)
    assert list(r.queries) == list(eager) and r.queries[:3] == eager[:3] and r.queries[-1] == eager[-1]
    assert all(x in r.queries for x in eager) and "nope" not in r.queries
    assert r.queries + ("z",) == (*eager, "z") and repr(r.queries) == repr(eager)  # noqa: RUF005
    assert pickle.loads(pickle.dumps(r.queries)) == eager
    assert r.to_json()["queries"] == list(eager)
    # Results compare as before (field by field, the ids as tuples).
    assert r == max_overlap(queries)


def test_compiled_form_cached_on_queries_matches_a_fresh_one() -> None:
    schema = Schema((IntAttribute("x", 0, 9), IntAttribute("y", 0, 4), IntAttribute("z", 0, 3)))
    queries = [
        PredicateQuery.from_coverages(schema, {"x": IndexSet.interval(2, 5)}, id="range"),
        PredicateQuery.from_coverages(schema, {}, id="tautology"),
        PredicateQuery.from_coverages(schema, {"y": IndexSet.empty()}, id="contradiction"),
        PredicateQuery.from_coverages(
            schema, {"x": IndexSet.from_indices([0, 1, 7]), "z": IndexSet.interval(1, 3)}, id="sets"
        ),
        PredicateQuery.from_coverages(schema, {"x": IndexSet.interval(4, 9), "y": IndexSet.interval(1, 2)}),
    ]
    first = compile_workload(queries, schema)  # fills the caches
    again = compile_workload(queries, schema)
    fresh = compile_workload([q.with_id(q.id) for q in queries], schema)  # replace(): no cache
    for c in (again, fresh):
        assert c.t == first.t and c.single_interval is first.single_interval is False
        assert c.live.tolist() == first.live.tolist() == [0, 1, 3, 4]
        assert len(c.attributes) == len(first.attributes) == 3
        for a, b in zip(c.attributes, first.attributes, strict=True):
            assert a.position == b.position
            for f in ("cuts", "query", "lo", "hi", "constrained"):
                assert getattr(a, f).tolist() == getattr(b, f).tolist()
    # Independent truth: every row's covering set from the raw coverages equals the compiled one.
    for row in itertools.product(range(10), range(5), range(4)):
        assert first.covering(row).tolist() == [i for i, q in enumerate(queries) if q.covers(row)]
    # The cache takes no part in equality or repr.
    assert queries[0] == PredicateQuery.from_coverages(schema, {"x": IndexSet.interval(2, 5)}, id="range")
    assert "_overlap_flat" not in repr(queries[0])


def test_box_grid_plan_matches_membership() -> None:
    """The boxes fast path of GridPlan against each cell's load summed from per-attribute membership,
    including a constrained query left with no interval (as atoms compression leaves some)."""
    rng = np.random.default_rng(11)
    sizes = [7, 5, 4]
    lo = rng.integers(0, 4, (30, 3))
    hi = np.minimum(lo + rng.integers(0, 4, (30, 3)), sizes)
    hi[3, 0] = 7
    lo[3, 0] = 0  # unconstrained on x
    schema = Schema(tuple(IntAttribute(f"x{j}", 0, n - 1) for j, n in enumerate(sizes)))
    queries = [
        PredicateQuery.from_coverages(
            schema, {j: IndexSet.interval(int(lo[i, j]), int(hi[i, j])) for j in range(3)}
        )
        for i in range(30)
    ]
    c = compile_workload(queries, schema)
    assert c.single_interval
    w = rng.random(30)
    c2 = compress(c, atom_tables(c))
    # A constrained query with no interval left on an attribute covers nothing (defensive: atoms never
    # leave one on box workloads, but the grid must not read it as unconstrained).
    a0 = c.attributes[0]
    drop = a0.query != a0.query[0]
    c3 = dataclasses.replace(
        c,
        attributes=(
            dataclasses.replace(a0, query=a0.query[drop], lo=a0.lo[drop], hi=a0.hi[drop]),
            *c.attributes[1:],
        ),
    )
    for comp in (c, c2, c3):
        grid = GridPlan(comp).loads(w)
        members = [a.membership(comp.live) for a in comp.attributes]
        for cell in itertools.product(*(range(a.size) for a in comp.attributes)):
            cover = np.ones(comp.live.size, dtype=bool)
            for m, s in zip(members, cell, strict=True):
                cover &= m[s]
            assert grid[cell] == pytest.approx(float(w[comp.live][cover].sum()), abs=1e-12)


def test_distinct_equal_schema_objects_are_one_schema() -> None:
    def make() -> Schema:
        return Schema((IntAttribute("x", 0, 9),))

    s1, s2 = make(), make()
    assert s1 is not s2 and s1 == s2
    qs = [PredicateQuery.from_coverages(s, {"x": IndexSet.interval(0, 5)}) for s in (s1, s2, s1)]
    assert max_overlap(qs).value == 3


@settings(max_examples=40, deadline=None)
@given(
    boxes(max_t=10), weight_lists, st.sampled_from(["count", "sum"]), st.sampled_from(["sweep2d", "boxes"])
)
def test_box_routes_against_brute_force(case: Any, weights: list[float], comp: str, algorithm: str) -> None:
    """The two box routes, forced: exact answers equal the brute force; a refusal is a CompError."""
    sizes, lo, hi = case
    w = weights[: lo.shape[0]]
    try:
        r = max_overlap_boxes(sizes, lo, hi, np.array(w), comp, algorithm=algorithm)  # type: ignore[arg-type]
    except CompError:
        return  # the route does not apply (sweep2d: not two active attributes)
    want = smallest_float_at_least(brute(sizes, lo, hi, w, comp), comp)
    assert r.witness_row is not None
    cov = covering(lo, hi, r.witness_row)
    ws = [1.0] * len(cov) if comp == "count" else [w[i] for i in cov]
    assert list(r.query_indices) == cov
    assert r.lower == smallest_float_at_least(exact_comp(ws, comp), comp)
    assert r.upper >= want
    if r.exact:
        assert r.value == want


def test_effort_zero_is_exact_or_a_safe_bound() -> None:
    rng = np.random.default_rng(8)
    lo = rng.integers(0, 5, (200, 4))
    hi = np.minimum(lo + rng.integers(1, 5, (200, 4)), 8)
    r = max_overlap_boxes([8, 8, 8, 8], lo, hi, effort=0.0)
    exact = max_overlap_boxes([8, 8, 8, 8], lo, hi)
    assert exact.exact
    assert r.upper >= exact.value >= r.lower
    if r.exact:
        assert r.value == exact.value


@settings(max_examples=50, deadline=None)
@given(boxes(max_t=10), st.lists(st.sampled_from([0.1, 0.3, 0.2, 1e16, 1.0, 0.7]), min_size=10, max_size=10))
def test_grid_band_without_membership_tables(case: Any, weights: list[float]) -> None:
    """Non-dyadic weights make the dense grid resolve its tie band on integers; with the membership
    tables disallowed (limit 0), the per-candidate cover from the intervals gives the exact answer."""
    sizes, lo, hi = case
    w = weights[: lo.shape[0]]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exactness, "BAND_TABLE_LIMIT", 0)
        r = max_overlap_boxes(sizes, lo, hi, np.array(w), "sum", algorithm="grid")
    assert r.exact and r.value == smallest_float_at_least(brute(sizes, lo, hi, w, "sum"), "sum")
    assert list(r.query_indices) == covering(lo, hi, r.witness_row or ())


def test_non_dyadic_weights_on_many_ranges_stay_fast() -> None:
    """Regression: the tie band of 20 000 ranges with float weights built a (segments x queries) table
    (40 000 x 20 000: 3 GB, 95 s; 100 000 ranges: out of memory). Truth: the exact sweep on integers."""
    rng = np.random.default_rng(21)
    n, t = 1_000_000, 20_000
    a, b = rng.integers(0, n, t), rng.integers(0, n, t)
    lo, hi = np.minimum(a, b), np.maximum(a, b) + 1
    w = rng.random(t)
    start = time.process_time()  # CPU, not wall: other processes on the machine do not count
    r = max_overlap_boxes([n], lo, hi, w, "sum")
    elapsed = time.process_time() - start
    ratios = [x.as_integer_ratio() for x in w.tolist()]
    k = max(d for _, d in ratios).bit_length() - 1
    units = [num << (k - (d.bit_length() - 1)) for num, d in ratios]
    events = sorted([(int(x), 1, i) for i, x in enumerate(lo)] + [(int(x), 0, i) for i, x in enumerate(hi)])
    depth = best = 0
    for _, starts, i in events:  # at equal values, ends (0) come before starts (1)
        depth += units[i] if starts else -units[i]
        best = max(best, depth)
    assert r.exact and r.value == smallest_float_at_least(Fraction(best, 1 << k), "sum")
    assert elapsed < 10.0


tiny_or_any = st.one_of(
    st.just(0.0),
    st.integers(0, 8).map(lambda k: k / 4),
    st.floats(0.0, 1e308, allow_nan=False, allow_infinity=False),
    st.floats(5e-324, 1e-300),
    magnitude,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(tiny_or_any, min_size=1, max_size=8), st.sampled_from(["sum", "l2"]))
@example([0.1], "l2")  # the square rounds
@example([5e-324, 1.0], "sum")  # the scaled subnormal rounds up
@example([1e-170, 1.0], "l2")  # the square underflows
@example([0.1, 1e300], "sum")  # exact although far apart
@example([0.0, 0.0], "l2")
def test_vectorised_unit_test_equals_the_integer_one(weights: list[float], comp: str) -> None:
    """Loads.unit_exponent and loads_exact (numpy) against the definition on Python integers."""
    lw = Loads.of(comp, np.array(weights))  # type: ignore[arg-type]
    nums, k = lw.units
    assert lw.unit_exponent == k
    exact = all(
        Fraction(load) == Fraction(n, 1 << k) for load, n in zip(lw.loads.tolist(), nums, strict=True)
    )
    assert lw.loads_exact == exact


def test_lazy_tuple_read_from_many_threads() -> None:
    import threading

    calls = []

    def make() -> tuple[int, ...]:
        calls.append(1)
        time.sleep(0.01)
        return tuple(range(1000))

    for _ in range(5):
        lazy = LazyTuple(1000, make)
        seen: list[tuple[int, ...]] = []
        threads = [
            threading.Thread(target=lambda lz=lazy, out=seen: out.append(lz.materialise())) for _ in range(8)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert seen == [tuple(range(1000))] * 8 and len(lazy) == 1000
    with pytest.raises(AssertionError, match="length"):
        LazyTuple(3, lambda: (1, 2)).materialise()
