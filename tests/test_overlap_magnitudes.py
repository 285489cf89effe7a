"""Weights of any finite magnitude (MATH.md 7.8).

The truth is computed here with exact rationals (Fractions) over every row of small domains. Every route
(forced), the incremental index and the privacy filters must give a value >= the truth (strictly: no
tolerance), the smallest float >= it when ``exact``, or raise :class:`MagnitudeError` when the truth
exceeds the largest float. Float ties of rows whose exact values differ (weights 1e16 and 1, 0.1 and
0.7) must not lead a route to report the lighter row (MATH.md 7.8).
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import mpmath
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import run
from overlapdp.exact import sqrt_up
from overlapdp.overlap import (
    CompError,
    OverlapIndex,
    OverlapResult,
    brute_force_overlap,
    exactness,
    graph_overlap,
    max_overlap,
)
from overlapdp.overlap.magnitude import MagnitudeError, compose_up
from overlapdp.overlap.wcsp import available as wcsp_available
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.privacy.mechanisms import Gaussian, Laplace, OpaqueApproxDP
from overlapdp.privacy.odometer import Odometer
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IntAttribute, Schema
from strategies import all_rows, schemas, where_clauses

MAX = sys.float_info.max
ROUTES = ["auto", "grid", "sweep2d", "gridbranch", "branch", "milp", "boxes"]
SQUARE = IntAttribute("x", 0, 1), IntAttribute("y", 0, 1)


# -- exact references -----------------------------------------------------------------------------------
def exact_max(queries: list[PredicateQuery], weights: list[float], comp: str) -> Fraction:
    """max over rows of sum f(w) (f(w) = w, or w^2 for l2: then the truth is its square root)."""
    schema = queries[0].schema
    best = Fraction(0)
    for row in all_rows(schema):
        total = sum(
            (
                Fraction(w) ** 2 if comp == "l2" else Fraction(w)
                for q, w in zip(queries, weights, strict=True)
                if q.covers(row)
            ),
            Fraction(0),
        )
        best = max(best, total)
    return best


def assert_safe(value: float, exact: bool, truth: Fraction, comp: str, strict: bool = False) -> None:
    """value >= truth, exactly (never less: MATH.md 7.8); when ``exact`` (or ``strict``: the
    caller demands exactness) value is the smallest float >= truth. For l2 ``truth`` is the exact sum
    of squares and the floats are compared squared."""
    v = Fraction(float(value))
    below = Fraction(math.nextafter(float(value), -math.inf)) if value > 0 else Fraction(-1)
    if comp == "l2":
        v = v * v
        below = below * below if below > 0 else below
    assert v >= truth, (value, float(truth))
    if exact or strict:
        # The float just below the value is below the truth: not an overestimate.
        assert below < truth, (value, float(truth))


def representable(truth: Fraction, comp: str) -> bool:
    """Whether the true maximum (the root of ``truth`` for l2) is at most the largest float."""
    return truth <= (Fraction(MAX) ** 2 if comp == "l2" else Fraction(MAX))


# -- the issue's examples --------------------------------------------------------------------------------
def issue_workload() -> list[PredicateQuery]:
    s = Schema(SQUARE)
    conds = ["x = 0 AND y = 0", "x = 1 AND y = 1", "x = 0 AND y = 0", "x = 0 AND y = 1"]
    return [parse_where(s, c, id=f"q{i}") for i, c in enumerate(conds)]


ISSUE_WEIGHTS = [5e307, 8e307, 1e308, 3e307]


@pytest.mark.parametrize("route", ROUTES)
def test_sums_near_the_float_limit_find_the_heaviest_row(route: str) -> None:
    # The dense grid summed these to inf, inf - inf = nan, and reported 8e307 (row x=1, y=1) as exact.
    queries = issue_workload()
    r = max_overlap(queries, ISSUE_WEIGHTS, "sum", algorithm=route)  # type: ignore[arg-type]
    truth = Fraction(5e307) + Fraction(1e308)
    assert_safe(float(r.value), r.exact, truth, "sum", strict=True)
    assert r.exact and r.witness == {"x": 0, "y": 0}
    assert set(r.queries) == {"q0", "q2"}


def test_sum_beyond_the_float_range_is_refused_naming_the_query() -> None:
    s = Schema(SQUARE)
    queries = [parse_where(s, "x = 0", id="big"), parse_where(s, "TRUE", id="all")]
    with pytest.raises(MagnitudeError, match="'big'"):
        max_overlap(queries, [1.5e308, 1e308], "sum")


def overlap_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], queries: list[tuple[str, str, float]]
) -> tuple[int, str, str]:
    """``overlapdp overlap --comp sum --json`` of ``(id, where, weight)`` queries on a 2x2 schema (x, y
    in 0..1): exit status, standard output and standard error."""
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps({"attributes": [{"name": n, "type": "int", "min": 0, "max": 1} for n in "xy"]})
    )
    workload = tmp_path / "q.jsonl"
    workload.write_text("".join(json.dumps({"id": i, "where": c, "weight": w}) + "\n" for i, c, w in queries))
    args = ["overlap", "--schema", str(schema), "--queries", str(workload), "--comp", "sum", "--json"]
    return run(args, capsys)


def tie_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], conds: list[str], weights: Any) -> Any:
    """The JSON answer of ``overlap_cli`` for queries q0, q1, ... (exit status 0)."""
    code, out, _ = overlap_cli(
        tmp_path, capsys, [(f"q{i}", c, w) for i, (c, w) in enumerate(zip(conds, weights, strict=True))]
    )
    assert code == 0
    return json.loads(out)


def test_cli_overlap_near_the_float_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conds = ["x = 0 AND y = 0", "x = 1 AND y = 1", "x = 0 AND y = 0", "x = 0 AND y = 1"]
    got = tie_cli(tmp_path, capsys, conds, ISSUE_WEIGHTS)
    assert_safe(got["value"], got["exact"], Fraction(5e307) + Fraction(1e308), "sum", strict=True)
    # Beyond the range: a one-line error naming the heaviest query, exit status 2.
    code, _, err = overlap_cli(tmp_path, capsys, [("a", "x = 0", 1e308), ("heavy", "TRUE", 1.7e308)])
    assert code == 2
    assert "heavy" in err and "largest float" in err


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("weight", "count"), [(1e-170, 1), (1e-170, 3), (1e160, 2), (1.3e154, 4)])
def test_l2_squares_neither_underflow_nor_overflow(route: str, weight: float, count: int) -> None:
    # (1e-170)**2 == 0.0 made one query of weight 1e-170 report 0 (exact); above ~1.3e154 the square
    # overflowed to inf and the result was inf or 0.
    s = Schema(SQUARE)
    queries = [parse_where(s, "x = 0", id=f"q{i}") for i in range(count)] + [parse_where(s, "x = 1", id="o")]
    weights = [weight] * count + [weight / 2]
    try:
        r = max_overlap(queries, weights, "l2", algorithm=route)  # type: ignore[arg-type]
    except CompError:
        pytest.skip(f"route {route} does not apply")
    assert_safe(float(r.value), r.exact, exact_max(queries, weights, "l2"), "l2", strict=True)
    assert r.exact and float(r.value) > 0


def test_gdp_filter_admits_one_charge_of_its_whole_budget() -> None:
    # mu^2 = 1e-340 underflowed to 0 in floats: 100 charges of mu = 1e-170 were admitted against
    # GDP(1e-170), a true mu ten times the budget.
    s = Schema((IntAttribute("x", 0, 1),))
    f = PrivacyFilter(s, GDP(1e-170))
    mech = Gaussian(1e170)
    admitted = sum(f.try_charge(mech).admitted for _ in range(100))
    # sqrt(k) mu <= B, in exact arithmetic of the floats.
    k = 0
    while (k + 1) * Fraction(mech.mu) ** 2 <= Fraction(1e-170) ** 2:
        k += 1
    assert admitted == k == 1


@pytest.mark.slow  # 0.9 s of CPU
def test_advanced_filter_with_tiny_epsilons() -> None:
    # eps^2 = 1e-324 underflowed to 0: 400 charges of 1e-162 were admitted against (1e-160, 1e-6).
    s = Schema((IntAttribute("x", 0, 1),))
    budget = ApproxDP(1e-160, 1e-6)
    f = PrivacyFilter(s, budget)
    admitted = sum(f.try_charge(OpaqueApproxDP(1e-162)).admitted for _ in range(400))
    # The Whitehouse et al. filter with delta' = delta / 2, evaluated with 60 digits on the floats.
    mpmath.mp.dps = 60
    eps, slack = mpmath.mpf(1e-162), mpmath.mpf(budget.delta) / 2

    def fits(k: int) -> bool:
        s2 = k * eps**2
        return bool(mpmath.sqrt(2 * mpmath.log(1 / slack) * s2) + s2 / 2 <= mpmath.mpf(budget.epsilon))

    k = max(n for n in range(401) if fits(n))
    assert 300 < k < 400
    assert admitted == k


# -- float ties of rows whose exact values differ ------------------------------------------------------
# Row x=0, y=0 is covered by one query of weight ``a``, row x=1, y=1 by two of weights ``b`` and ``c``
# with fl(b + c) == a (or fl(b^2 + c^2) == a^2) but b + c > a exactly: a route that locates the maximum
# on float sums sees a tie and may report the lighter row x=0 (value a, below the truth).
TIES = [
    ("sum", (1e16, 1e16, 1.0)),  # 1e16 + 1 rounds to 1e16
    ("l2", (1e16, 1e16, 1.0)),
    ("sum", (2.0**60, 2.0**60, 3.0)),  # dyadic, but beyond 2^53 units
    ("l2", (2.0**60, 2.0**60, 3.0)),
    ("sum", (0.7999999999999999, 0.1, 0.7)),  # 0.1 + 0.7 rounds down to 0.7999999999999999
    ("sum", (0.7, 0.3, 0.4)),
    ("sum", (0.8999999999999999, 0.2, 0.7)),
    ("l2", (0.5, 0.3, 0.4)),  # 0.3^2 + 0.4^2 rounds down to 0.5^2
    ("l2", (0.7615773105863908, 0.3, 0.7)),
]


def tie_workload(s: Schema) -> list[PredicateQuery]:
    conds = ["x = 0 AND y = 0", "x = 1 AND y = 1", "x = 1 AND y = 1"]
    return [parse_where(s, c, id=f"q{i}") for i, c in enumerate(conds)]


@pytest.mark.parametrize("route", [*ROUTES, "wcsp"])
@pytest.mark.parametrize(("comp", "weights"), TIES)
def test_float_ties_never_report_the_lighter_row(route: str, comp: str, weights: tuple[float, ...]) -> None:
    queries = tie_workload(Schema(SQUARE))
    w = list(weights)
    truth = exact_max(queries, w, comp)
    try:
        r = max_overlap(queries, w, comp, algorithm=route)  # type: ignore[arg-type]
    except CompError:
        pytest.skip(f"route {route} does not apply")
    assert_safe(float(r.value), r.exact, truth, comp)
    if route == "boxes":
        # Forced on loads whose float sums may round, the boxes route has no tie search: its answer is
        # the certified safe bound (auto does not pick it for such loads; MATH.md 7.8).
        return
    # The dense grid and the sweep resolve the tie exactly, the searches by their exact tie-band search.
    assert r.exact and r.witness == {"x": 1, "y": 1}, (r.value, r.witness)


@pytest.mark.parametrize("route", ROUTES)
def test_vector_components_resolve_float_ties(route: str) -> None:
    queries = tie_workload(Schema(SQUARE))
    vectors = [[a, 1.0] for a in (1e16, 1e16, 1.0)]
    r = max_overlap(queries, vectors, "vector", algorithm=route)  # type: ignore[arg-type]
    assert_safe(float(r.components[0].value), r.components[0].exact, Fraction(10**16 + 1), "sum")
    assert_safe(float(r.components[1].value), r.components[1].exact, Fraction(2), "sum")


def test_cli_overlap_reports_the_heavier_of_a_float_tie(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conds = ["x = 0 AND y = 0", "x = 1 AND y = 1", "x = 1 AND y = 1"]
    for weights, truth in (((1e16, 1e16, 1.0), Fraction(10**16 + 1)), ((0.7999999999999999, 0.1, 0.7), None)):
        got = tie_cli(tmp_path, capsys, conds, weights)
        exact_truth = truth if truth is not None else Fraction(weights[1]) + Fraction(weights[2])
        assert_safe(got["value"], got["exact"], exact_truth, "sum", strict=True)
        assert got["exact"] and got["witness"] == {"x": 1, "y": 1}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_with_many_near_ties_is_exact(seed: int) -> None:
    # 150 random intervals over 400 values weighing tenths: many cells tie in floats; the exact maximum
    # is computed here per value with integers (tenths as the floats' exact dyadic rationals).
    import random

    rnd = random.Random(seed)
    s = Schema((IntAttribute("x", 0, 399),))
    queries, weights, spans = [], [], []
    for i in range(150):
        a, b = sorted((rnd.randrange(400), rnd.randrange(400)))
        queries.append(parse_where(s, f"x >= {a} AND x <= {b}", id=f"q{i}"))
        weights.append(rnd.choice([0.1, 0.2, 0.3, 0.7, 0.7999999999999999]))
        spans.append((a, b))
    exact = [Fraction(w) for w in weights]
    truth = max(
        sum((e for e, (a, b) in zip(exact, spans, strict=True) if a <= x <= b), Fraction(0))
        for x in range(400)
    )
    r = max_overlap(queries, weights, "sum")
    assert r.exact
    assert_safe(float(r.value), r.exact, truth, "sum", strict=True)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("comp", "weights"), TIES)
def test_without_tie_resolution_the_value_is_a_safe_bound(
    route: str, comp: str, weights: tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the exact tie-band evaluation disabled, every route must fall back to its float error
    # bound: value >= the exact maximum, and exact only if that bound pins the value.
    monkeypatch.setattr(exactness, "BAND_WORK_LIMIT", 0)
    monkeypatch.setattr(exactness, "EXACT_NODE_LIMIT", 0)
    queries = tie_workload(Schema(SQUARE))
    truth = exact_max(queries, list(weights), comp)
    try:
        r = max_overlap(queries, list(weights), comp, algorithm=route)  # type: ignore[arg-type]
    except CompError:
        pytest.skip(f"route {route} does not apply")
    assert_safe(float(r.value), r.exact, truth, comp)
    assert float(r.lower) <= float(r.value) == float(r.upper)


@pytest.mark.parametrize("dense_limit", [1 << 22, 1])
@pytest.mark.parametrize(("comp", "weights"), TIES)
def test_index_float_tie_is_not_under_reported(
    comp: str, weights: tuple[float, ...], dense_limit: int
) -> None:
    """The index located its maximum on float sums and reported the lighter row of a float tie as
    exact (1e16 for 1e16 + 1): the tie band is now valued exactly (MATH.md 7.8), on adds and
    on peeks."""
    s = Schema(SQUARE)
    queries = tie_workload(s)
    truth = exact_max(queries, list(weights), comp)
    index = OverlapIndex(s, comp, dense_limit=dense_limit)
    for q, w in zip(queries, weights, strict=True):
        r = index.add(q, w)
    assert_safe(float(r.value), r.exact, truth, comp)
    assert r.exact and r.witness == {"x": 1, "y": 1}, (r.value, r.witness)
    fresh = OverlapIndex(s, comp, dense_limit=dense_limit)
    fresh.add(queries[0], weights[0])
    fresh.add(queries[1], weights[1])
    p = fresh.peek(queries[2], weights[2])
    assert_safe(float(p.value), p.exact, truth, comp)
    assert p.exact and p.witness == {"x": 1, "y": 1}, (p.value, p.witness)


def assert_safe_index(value: float, exact: bool, truth: Fraction, comp: str) -> None:
    """The index's check, as strict as every route's: never below the truth, and when exact the
    smallest float at or above it."""
    assert_safe(value, exact, truth, comp)


# -- properties over magnitudes 1e-300 .. 1e300 -------------------------------------------------------
def log_uniform(lo: int = -300, hi: int = 300) -> st.SearchStrategy[float]:
    return st.floats(lo, hi).map(lambda e: float(10.0**e) if e < 308 else 1e308)


@st.composite
def magnitudes(draw: st.DrawFn, n: int) -> list[float]:
    """Mixed magnitudes in one workload; sometimes one magnitude times small integers (ties, toulbar2's
    integral loads), sometimes subnormals and zeros, sometimes weights whose float sums tie while their
    exact sums differ (0.1 + 0.7, 1e16 + 1, times one power of two)."""
    kind = draw(st.sampled_from(["mixed", "mixed", "scaled", "extreme", "ties"]))
    if kind == "ties":
        scale = 2.0 ** draw(st.integers(-900, 900))
        pool = st.sampled_from([0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.7999999999999999, 1.0, 3.0, 1e16, 2.0**60])
        return [draw(pool) * scale for _ in range(n)]
    if kind == "scaled":
        base = draw(log_uniform())
        return [base * draw(st.integers(0, 3)) for _ in range(n)]
    if kind == "extreme":
        pool = st.sampled_from([0.0, 5e-324, 1e-310, 2.2250738585072014e-308, 1e-300, 1e300, 1e308, MAX / 4])
        return [draw(st.one_of(pool, log_uniform())) for _ in range(n)]
    return [draw(log_uniform()) for _ in range(n)]


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[PredicateQuery], list[float]]:
    schema = draw(schemas(max_attributes=2))
    n = draw(st.integers(1, 6))
    queries = [parse_where(schema, draw(where_clauses(schema)), id=f"q{i}") for i in range(n)]
    return queries, draw(magnitudes(n))


def check_route(queries: list[PredicateQuery], weights: list[float], comp: str, route: str) -> None:
    truth = exact_max(queries, weights, comp)
    try:
        r = max_overlap(queries, weights, comp, algorithm=route)  # type: ignore[arg-type]
    except MagnitudeError:
        assert not representable(truth, comp)  # refused only when the maximum exceeds the range
        return
    except CompError:
        return  # the forced route does not apply to this workload's shape
    assert representable(truth, comp)
    assert_safe(float(r.value), r.exact, truth, comp)
    assert float(r.lower) <= float(r.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(["sum", "l2"]))
def test_every_route_is_safe_at_every_magnitude(
    workload: tuple[list[PredicateQuery], list[float]], comp: str
) -> None:
    queries, weights = workload
    for route in ROUTES:
        check_route(queries, weights, comp, route)
    # The references too: brute force (the value rounded up, so the smallest float >= the truth) and
    # the paper's graph route (a clique's comp: >= the truth).
    truth = exact_max(queries, weights, comp)
    if not representable(truth, comp):
        with pytest.raises(MagnitudeError):
            brute_force_overlap(queries, weights, comp)  # type: ignore[arg-type]
        return
    assert_safe(float(brute_force_overlap(queries, weights, comp).value), True, truth, comp, strict=True)  # type: ignore[arg-type]
    try:
        g = graph_overlap(queries, weights, comp)  # type: ignore[arg-type]
    except MagnitudeError:
        return  # a clique of queries that share no row may exceed the range
    assert_safe(float(g.value), g.exact, truth, comp)


@pytest.mark.parametrize("comp", ["sum", "l2"])
def test_graph_route_breaks_float_ties_exactly(comp: str) -> None:
    """Regression: the paper's graph route chose the heaviest maximal clique by float sums of the
    normalised loads, where 1.0 + 5e-324 ties with 1.0; it took the first clique and reported 1.0 as
    exact, below the true maximum (found by test_every_route_is_safe_at_every_magnitude)."""
    s = Schema((IntAttribute("x0", 0, 1),))
    queries = [parse_where(s, c, id=f"q{i}") for i, c in enumerate(["TRUE", "x0 = 0", "x0 = 1", "TRUE"])]
    weights = [0.0, 0.0, 5e-324, 1.0]
    truth = exact_max(queries, weights, comp)
    assert truth > 1
    g = graph_overlap(queries, weights, comp)  # type: ignore[arg-type]
    assert_safe(float(g.value), g.exact, truth, comp)
    assert g.witness_row == (1,)


@pytest.mark.skipif(not wcsp_available(), reason="pytoulbar2 is not installed")
@pytest.mark.parametrize("base", [1e-300, 1e-170, 3.7e-5, 1e150, 1e300])
def test_toulbar2_route_at_extreme_magnitudes(base: float) -> None:
    s = Schema(SQUARE)
    conds = ["x = 0", "y = 0", "x = 0 AND y = 1", "TRUE"]
    queries = [parse_where(s, c, id=f"q{i}") for i, c in enumerate(conds)]
    weights = [base, 2 * base, 3 * base, base]
    for comp in ("sum", "l2"):
        check_route(queries, weights, comp, "wcsp")


@pytest.mark.slow  # 1.3 s of CPU
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["sum", "l2"]),
    st.lists(log_uniform(), min_size=2, max_size=2),
    st.lists(st.sampled_from(["x = 1", "y = 1", "x = 0 AND y = 1", "TRUE"]), max_size=2),
    st.lists(log_uniform(), min_size=2, max_size=2),
)
def test_constructed_float_ties_on_every_route(
    comp: str, pair: list[float], extra: list[str], extra_w: list[float]
) -> None:
    """Row (0, 0) holds one query weighing the FLOAT sum of the two queries on row (1, 1) (for l2: the
    float root of their float sum of squares), so the rows tie in floats while their exact values
    usually differ; other queries may be added. Every route: value >= the exact maximum."""
    b, c = pair
    a = b + c if comp == "sum" else math.sqrt(b * b + c * c)
    if not (math.isfinite(a) and a > 0):
        return
    queries = tie_workload(Schema(SQUARE))
    queries += [parse_where(Schema(SQUARE), w, id=f"e{i}") for i, w in enumerate(extra)]
    weights = [a, b, c, *extra_w[: len(extra)]]
    for route in [*ROUTES, "wcsp"]:
        check_route(queries, weights, comp, route)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(1, 3))
def test_vector_components_are_safe_at_every_magnitude(
    workload: tuple[list[PredicateQuery], list[float]], k: int
) -> None:
    queries, first = workload
    # Component j scales the weights by 10^(-100 j): each component spans its own magnitudes.
    vectors = [[w * 10.0 ** (-100 * j) for j in range(k)] for w in first]
    for route in ("auto", "branch"):
        try:
            r = max_overlap(queries, vectors, "vector", algorithm=route)  # type: ignore[arg-type]
        except MagnitudeError:
            assert not representable(exact_max(queries, first, "sum"), "sum")
            return
        for j, part in enumerate(r.components):
            truth = exact_max(queries, [v[j] for v in vectors], "sum")
            assert_safe(float(part.value), part.exact, truth, "sum")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads(),
    st.sampled_from(["sum", "l2", "count"]),
    st.sampled_from([1 << 22, 1]),
    st.data(),
)
def test_index_add_and_peek_are_safe_at_every_magnitude(
    workload: tuple[list[PredicateQuery], list[float]], comp: str, dense_limit: int, data: st.DataObject
) -> None:
    queries, weights = workload
    schema = queries[0].schema
    index = OverlapIndex(schema, comp, dense_limit=dense_limit)
    held: list[tuple[PredicateQuery, float]] = []
    w_of = (lambda w: 1.0) if comp == "count" else (lambda w: w)
    for q, w in zip(queries, weights, strict=True):
        peeked = data.draw(st.booleans())
        held_next = [*held, (q, w)]
        truth = exact_max(
            [h[0] for h in held_next], [w_of(h[1]) for h in held_next], "l2" if comp == "l2" else "sum"
        )
        try:
            r: OverlapResult = index.peek(q, w) if peeked else index.add(q, w)
        except MagnitudeError:
            assert not representable(truth, "l2" if comp == "l2" else "sum")
            return
        assert_safe_index(float(r.value), r.exact, truth, "l2" if comp == "l2" else "sum")
        if not peeked:
            held = held_next
        if held and data.draw(st.booleans()):
            # Remove one and check again (the heaviest may go: the index re-normalises).
            gone = data.draw(st.sampled_from([h[0].id for h in held]))
            index.remove(str(gone))
            held = [h for h in held if h[0].id != gone]
            if held:
                rest = exact_max(
                    [h[0] for h in held], [w_of(h[1]) for h in held], "l2" if comp == "l2" else "sum"
                )
                assert_safe_index(
                    float(index.value), index.result().exact, rest, "l2" if comp == "l2" else "sum"
                )


# -- filters -------------------------------------------------------------------------------------------
def row_totals(schema: Schema, charged: list[tuple[PredicateQuery, Any]], k: int) -> list[list[Fraction]]:
    """Per row, per component, the exact sum of the admitted exact loads covering it."""
    out = []
    for row in all_rows(schema):
        tot = [Fraction(0)] * k
        for q, load in charged:
            if q.covers(row):
                tot = [a + b for a, b in zip(tot, load, strict=True)]
        out.append(tot)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["pure", "zcdp", "gdp", "rdp", "approx"]),
    log_uniform(-300, 300),
    st.lists(st.tuples(st.floats(-2.5, 0.5), st.integers(0, 3)), min_size=1, max_size=25),
)
def test_filters_never_admit_beyond_the_budget(
    definition: str, budget: float, charges: list[tuple[float, int]]
) -> None:
    """Charges are the budget times 10^e (e in [-2.5, 0.5]): every row's exact load stays within it."""
    schema = Schema((IntAttribute("x", 0, 2),))
    conds = ["x = 0", "x >= 1", "x <= 1", "TRUE"]
    budgets = {
        "pure": PureDP(budget),
        "zcdp": ZCDP(budget),
        "gdp": GDP(budget),
        "rdp": RDP((2.0, 8.0), (budget, budget * 4)),
        "approx": ApproxDP(budget, 1e-6),
    }
    f = PrivacyFilter(schema, budgets[definition])
    charged: list[tuple[PredicateQuery, Any]] = []
    for i, (e, where) in enumerate(charges):
        p = budget * 10.0**e
        if not p > 0:
            continue
        q = parse_where(schema, conds[where], id=f"c{i}")
        if definition == "gdp":
            mech: Any = Gaussian(1.0 / p) if 1.0 / p < math.inf else None
            if mech is None or mech.mu == 0:
                continue
            load: Any = [Fraction(mech.mu) ** 2]
        else:
            mech = OpaqueApproxDP(p)
            if definition == "zcdp":
                load = [Fraction(p) ** 2 / 2]  # the exact rho of pure p-DP (Bun-Steinke 2016)
            elif definition == "rdp":
                rdp = mech.rdp((2.0, 8.0))
                assert rdp is not None
                load = [Fraction(x) for x in rdp.epsilons]
            elif definition == "approx":
                load = [Fraction(p) ** 2, Fraction(p)]  # sum eps^2 (advanced) and sum eps (basic)
            else:
                load = [Fraction(p)]
        try:
            a = f.try_charge(mech, q)
        except (MagnitudeError, BudgetError):
            # Refused by name: a cost beyond the float range (rho of eps > 1e154 has no finite value).
            continue
        if a.admitted:
            charged.append((q, load))
    k = 2 if definition in ("rdp", "approx") else 1
    for tot in row_totals(schema, charged, k):
        if definition in ("pure", "zcdp"):
            assert tot[0] <= Fraction(budget)
        elif definition == "gdp":
            assert tot[0] <= Fraction(budget) ** 2
        elif definition == "rdp":
            assert tot[0] <= Fraction(budget) and tot[1] <= Fraction(budget * 4)
        else:
            mpmath.mp.dps = 60
            s2 = mpmath.mpf(tot[0].numerator) / tot[0].denominator
            eps = mpmath.sqrt(2 * mpmath.log(1 / mpmath.mpf(5e-7)) * s2) + s2 / 2
            # the combined filter (MATH.md 5.6): each row fits by advanced OR basic composition
            assert eps <= mpmath.mpf(budget) or tot[1] <= Fraction(budget)


@pytest.mark.parametrize("scale", [1e170, 1e200, 1e20, 1e5, 1.0])
def test_mechanism_costs_do_not_underflow(scale: float) -> None:
    # rho = eps^2 / 2 underflowed to 0 for eps < 1e-162 (a free mechanism), and the exact Laplace RDP
    # formula cancelled to a NEGATIVE epsilon (a BudgetError) for small eps.
    for mech in (Laplace(scale), Gaussian(scale), OpaqueApproxDP(1 / scale)):
        param = Fraction(getattr(mech, "mu", None) or getattr(mech, "eps0", None) or mech.epsilon)
        z = mech.zcdp()
        assert z is not None and Fraction(z.rho) >= param**2 / 2 > 0
    curve = Laplace(scale).rdp((1.5, 2.0, 8.0))
    eps0 = Fraction(1 / scale)
    for a, e in zip(curve.orders, curve.epsilons, strict=True):
        # Pure eps-DP is eps^2/2-zCDP, and Laplace's RDP is at least (1 - o(1)) of that bound: never 0.
        assert e > 0 and Fraction(e) <= max(Fraction(a) * eps0**2 / 2 * (1 + Fraction(1, 10**9)), eps0)


# -- helpers ----------------------------------------------------------------------------------------------
@given(st.lists(st.one_of(log_uniform(), st.just(0.0), st.just(5e-324)), max_size=8))
def test_compose_up_is_the_smallest_float_at_or_above_the_exact_value(ws: list[float]) -> None:
    total = sum((Fraction(w) for w in ws), Fraction(0))
    if total <= Fraction(MAX):
        assert_safe(compose_up("sum", ws), True, total, "sum", strict=True)
    else:
        assert compose_up("sum", ws) == math.inf
    squares = sum((Fraction(w) ** 2 for w in ws), Fraction(0))
    if squares <= Fraction(MAX) ** 2:
        assert_safe(sqrt_up(squares), True, squares, "l2", strict=True)


@pytest.mark.parametrize("sigma", [1e170, 1e100, 1.0])
def test_odometer_gdp_report_is_not_zero_for_tiny_mu(sigma: float) -> None:
    # The odometer summed mu^2 in floats: (1e-170)^2 == 0, so four charges of mu = 1e-170 reported 0.
    s = Schema((IntAttribute("x", 0, 1),))
    o = Odometer(s)
    conds = ["TRUE", "x = 0", "TRUE", "x = 0"]
    for c in conds:
        o.charge(Gaussian(sigma), parse_where(s, c))
    g = o.report(1e-6).definitions["gdp"]
    mu = Fraction(Gaussian(sigma).mu)
    # Row x = 0 holds all four charges (overlap-aware = sequential here): sqrt(4 mu^2) = 2 mu.
    for value in (g.overlap, g.sequential):
        assert isinstance(value, float)
        # The odometer's ``exact`` says the overlap was found exactly; its GDP value is the root of a
        # sum of rounded-up normalised squares, so it may exceed the smallest float >= the truth.
        assert_safe(value, False, 4 * mu**2, "l2")
