"""Clipped SUM and MEAN (MATH.md 2.8, 6.4): engines against independent pandas truth, noisy answers within
their error bars, the mean's split, the per-row charge of a mixed workload against brute force over the
rows, and a statistical audit of the sum mechanism on neighbours at and beyond the clipping bounds."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run
from overlapdp.audit import audit_epsilon
from overlapdp.engine import open_engine
from overlapdp.errors import QueryError
from overlapdp.mechanisms import RandomSource, SeededRandomSource
from overlapdp.mechanisms._noisy_counts import NoisyAnswer
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.mechanisms.calibration import declared_guarantee, guarantee_of
from overlapdp.mechanisms.sums import NoisyMean, NoisySum, add_mean_noise, add_sum_noise, split_budget
from overlapdp.privacy.definitions import GDP, ZCDP, BudgetError, PureDP
from overlapdp.query import Workload, parse_where
from overlapdp.query.aggregate import Aggregate, Clipping, parse_sql_aggregate
from overlapdp.samples import adult_raw_schema
from overlapdp.schema import BinnedAttribute, CategoricalAttribute, IntAttribute, Schema
from sources import confidence_for, on_both_sources_os_slow, source
from support.marks import slow_after

ENGINES = ("pandas", "duckdb", "polars")

# The test data holds missing and out-of-domain values on purpose: the schema states they are dropped.
SCHEMA = Schema(
    (
        IntAttribute("age", 17, 90),
        BinnedAttribute("hours", (0.0, 20.0, 40.0, 60.0, 100.0)),
        CategoricalAttribute("sex", ("F", "M")),
    ),
    outside="drop",
)


def small_frame(seed: int = 0, rows: int = 400) -> pd.DataFrame:
    """Raw numbers, some missing, some outside the domain, many beyond the clipping bounds."""
    rng = np.random.default_rng(seed)
    age = rng.integers(10, 95, rows).astype(float)
    hours = np.round(rng.uniform(-5.0, 105.0, rows), 3)
    age[rng.random(rows) < 0.05] = np.nan
    hours[rng.random(rows) < 0.05] = np.nan
    sex = rng.choice(np.array(["F", "M", "X"], dtype=object), rows, p=[0.48, 0.48, 0.04])
    return pd.DataFrame({"age": age, "hours": hours, "sex": sex})


# Conditions as SQL text and as an independent pandas mask over the raw columns.
CONDITIONS = [
    ("TRUE", lambda d: pd.Series(True, index=d.index)),
    ("age >= 30", lambda d: d["age"] >= 30),
    ("sex = 'F' AND age < 50", lambda d: (d["sex"] == "F") & (d["age"] < 50)),
    ("hours >= 40", lambda d: d["hours"] >= 40),
    ("age > 80 AND age < 40", lambda d: pd.Series(False, index=d.index)),
]


def in_domain(d: pd.DataFrame) -> pd.Series:
    """Rows inside the schema's domain, from the declared bounds directly (not the schema's mapping)."""
    age_ok = d["age"].between(17, 90) & (d["age"] == np.floor(d["age"]))
    hours_ok = (d["hours"] >= 0) & (d["hours"] < 100)
    return age_ok & hours_ok & d["sex"].isin(["F", "M"])


def pandas_truth(d: pd.DataFrame, mask: pd.Series, column: str, lo: float, hi: float) -> tuple[float, int]:
    """The clipped sum (pandas' own clip; integer-valued or step-rounded beforehand) and the count."""
    rows = d.loc[in_domain(d) & mask, column]
    return float(rows.clip(lo, hi).sum()), int(rows.shape[0])


# -- exact sums: every engine against pandas --------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("column", "lo", "hi"), [("age", 0, 60), ("age", -20, 40), ("hours", 0, 50), ("hours", 10, 99)]
)
def test_engine_sums_equal_pandas_clipped_sums(engine: str, column: str, lo: float, hi: float) -> None:
    d = small_frame(1)
    if column == "hours":  # step 1: round raw hours half up to integers first (the declared resolution)
        d["hours"] = np.floor(d["hours"] + 0.5)
        d.loc[d["hours"] >= 100, "hours"] = np.nan  # keep the domain test on the same rows
    qs = [parse_where(SCHEMA, text) for text, _ in CONDITIONS]
    clip = Clipping(column, lo, hi)
    with open_engine(engine, SCHEMA, d) as eng:
        got = eng.sums(qs, clip)
    want = [pandas_truth(d, m(d), column, lo, hi)[0] for _, m in CONDITIONS]
    assert got == want
    assert got[-1] == 0  # a contradiction sums nothing


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_sums_round_to_the_declared_step(engine: str) -> None:
    d = pd.DataFrame({"age": [30.0] * 6, "hours": [12.3, 12.2, 47.74, 0.01, 99.9, 55.0], "sex": ["F"] * 6})
    clip = Clipping("hours", 0.5, 50.0, 0.5)
    # In units of 0.5: 12.3 -> 24.6 -> 25; 12.2 -> 24.4 -> 24; 47.74 -> 95.48 -> 95; 0.01 -> 0 -> clipped
    # to 1; 99.9 and 55.0 -> clipped to 100.
    want = 25 + 24 + 95 + 1 + 100 + 100
    with open_engine(engine, SCHEMA, d) as eng:
        assert eng.sums([parse_where(SCHEMA, "TRUE")], clip) == [want]


def test_engines_agree_on_raw_adult_with_a_fine_step(adult_raw_csv: Path) -> None:
    s = adult_raw_schema()
    d = pd.read_csv(adult_raw_csv, skipinitialspace=True)
    qs = [parse_where(s, w) for w in ("age >= 30", "sex = 'Female' AND age < 40", "TRUE")]
    clip = Clipping("hours_per_week", 10, 50, 0.5)
    got = {}
    for name in ENGINES:
        with open_engine(name, s, d) as eng:
            got[name] = eng.sums(qs, clip)
    assert got["pandas"] == got["duckdb"] == got["polars"]
    # Integer hours: units of 0.5 are twice pandas' clipped sum over the rows. The raw schema allows
    # the missing values of workclass, occupation and native_country: no row lies outside the domain.
    with open_engine("pandas", s, d) as eng:
        counts = eng.counts(qs)
        assert eng.report.rows_outside == 0
    mask = d["age"] >= 30
    assert counts[0] == int(mask.sum())
    assert got["pandas"][0] == 2 * int(d.loc[mask, "hours_per_week"].clip(10, 50).sum())


# -- noisy answers within their error bars ---------------------------------------------------------
def mixed_workload() -> tuple[Workload, list[tuple[str, str, object]]]:
    lines = [
        {"id": "n", "where": "age >= 30"},
        {"id": "h", "where": "age >= 30", "aggregate": "sum", "of": "hours", "bounds": [0, 99]},
        {"id": "m", "where": "sex = 'F'", "aggregate": "mean", "of": "hours", "bounds": [0, 99]},
        {"id": "a", "where": "hours >= 40", "aggregate": "sum", "of": "age", "bounds": [-20, 40]},
        {"id": "ma", "where": "TRUE", "aggregate": "mean", "of": "age", "bounds": [20, 70]},
    ]
    w = Workload.from_lines(SCHEMA, [json.dumps(x) for x in lines])
    return w, [(x["id"], x["where"], x) for x in lines]  # type: ignore[misc]


def integer_hours() -> pd.DataFrame:
    d = small_frame(2, rows=3000)
    d["hours"] = np.floor(d["hours"] + 0.5)
    d.loc[d["hours"] >= 100, "hours"] = np.nan
    return d


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_sum_and_mean_answers_contain_pandas_truth(definition: str) -> None:
    d = integer_hours()
    w, lines = mixed_workload()
    plan = plan_answers(list(w), 4.0 if definition == "pure" else 2.0, definition, level=0.99)
    res = answer_workload(d, w, plan, rng=SeededRandomSource(7))
    masks = {
        "age >= 30": d["age"] >= 30,
        "sex = 'F'": d["sex"] == "F",
        "hours >= 40": d["hours"] >= 40,
        "TRUE": pd.Series(True, index=d.index),
    }
    for a, (qid, where, spec) in zip(res.answers, lines, strict=True):
        assert a.query_id == qid
        assert isinstance(spec, dict)
        if "aggregate" not in spec:
            assert isinstance(a, NoisyAnswer)
            truth: float = float(in_domain(d)[masks[where]].sum())
        else:
            lo, hi = spec["bounds"]
            total, n = pandas_truth(d, masks[where], spec["of"], lo, hi)
            truth = total if spec["aggregate"] == "sum" else total / n
            assert isinstance(a, NoisySum if spec["aggregate"] == "sum" else NoisyMean)
        assert a.low <= truth <= a.high, (qid, truth, a)
    out = res.to_json()["answers"]
    assert out[2]["aggregate"] == "mean" and set(out[2]["parts"]) == {"split", "sum", "count"}
    assert out[1]["aggregate"] == "sum" and out[1]["sensitivity"] == 99  # max(|0|, |99|), add/remove


def test_sum_error_bars_cover_at_their_level() -> None:
    clip = Clipping("hours", 0, 40)
    truth = 12_345
    answers = add_sum_noise([truth] * 4000, clip, PureDP(1.0), level=0.9, rng=SeededRandomSource(3))
    covered = sum(a.low <= truth <= a.high for a in answers)
    # The bar is exact for the discrete Laplace, so coverage is >= 0.9; a binomial at p = 0.9 falls below
    # 0.88 with probability below 1e-3.
    assert covered >= 0.88 * len(answers)
    assert answers[0].high - answers[0].low == 2 * answers[0].noise.half_width(0.9)  # step 1: units
    # Discrete Laplace at scale Delta/epsilon = 40 (sensitivity max(|0|, |40|)): variance 2q/(1-q)^2.
    q = math.exp(-1 / 40)
    assert answers[0].std == pytest.approx(math.sqrt(2 * q) / (1 - q), rel=1e-9)
    assert answers[0].sensitivity == 40


def test_mean_error_bars_cover_at_their_level() -> None:
    clip = Clipping("age", 20, 70)
    n, s_units = 200, 200 * 45  # a true mean of 45
    answers = add_mean_noise(
        [s_units] * 2000, [n] * 2000, clip, PureDP(0.5), level=0.9, rng=SeededRandomSource(4)
    )
    covered = sum(a.low <= 45 <= a.high for a in answers)
    assert covered >= 0.88 * len(answers)
    for a in answers[:50]:
        assert 20 <= a.low <= a.value <= a.high <= 70
        assert a.sum.level == a.count.level == pytest.approx(0.95)  # union bound over the two parts


def test_mean_with_a_count_near_zero_reports_the_bounds() -> None:
    clip = Clipping("age", 20, 70)
    (a,) = add_mean_noise([0], [0], clip, PureDP(0.01), level=0.95, rng=SeededRandomSource(5))
    assert (a.low, a.high) == (20.0, 70.0) and 20 <= a.value <= 70


@settings(max_examples=100)
@given(
    kind=st.sampled_from(["pure", "zcdp", "gdp"]),
    value=st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False),
)
def test_a_means_two_halves_compose_within_its_budget(kind: str, value: float) -> None:
    whole = {"pure": PureDP, "zcdp": ZCDP, "gdp": GDP}[kind](value)
    half = split_budget(whole)
    w, h = declared_guarantee(whole), declared_guarantee(half)
    val = lambda g: Fraction(g.epsilon if isinstance(g, PureDP) else g.rho)  # noqa: E731
    assert 2 * val(h) <= val(w)
    assert 2 * val(h) >= val(w) * Fraction(999_999, 1_000_000)  # and does not waste the budget


# -- the per-row charge of a mixed workload ----------------------------------------------------------
def charge(a: NoisyAnswer | NoisySum | NoisyMean) -> Fraction:
    """What one answer is declared (and charged) to cost a row it covers."""
    if isinstance(a, NoisyMean):
        return charge(a.sum) + charge(a.count)
    g = a.guarantee
    return Fraction(g.epsilon if isinstance(g, PureDP) else g.rho)


def true_loss(a: NoisyAnswer | NoisySum | NoisyMean) -> Fraction:
    """What the noise actually drawn gives, at the answer's own sensitivity (1 for a count, the clipping's
    for a sum): epsilon = Delta/t of the discrete Laplace, rho = Delta^2/(2 sigma^2) of the Gaussian."""
    if isinstance(a, NoisyMean):
        return true_loss(a.sum) + true_loss(a.count)
    delta = a.sensitivity if isinstance(a, NoisySum) else 1
    g = guarantee_of(a.noise, delta)
    return Fraction(g.epsilon if isinstance(g, PureDP) else g.rho)


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_mixed_workload_charge_equals_brute_force_over_rows(definition: str) -> None:
    schema = Schema((IntAttribute("a", 0, 3), IntAttribute("b", 0, 2), IntAttribute("x", 0, 9)))
    specs = [
        {"where": "a <= 1"},
        {"where": "a >= 1 AND b = 0", "aggregate": "sum", "of": "x", "bounds": [0, 9]},
        {"where": "b <= 1", "aggregate": "mean", "of": "x", "bounds": [2, 8]},
        {"where": "a = 3", "aggregate": "sum", "of": "x", "bounds": [-5, 5]},
        {"where": "x >= 5 AND a <= 2"},
        {"where": "b = 2", "aggregate": "mean", "of": "x", "bounds": [0, 9]},
    ]
    w = Workload.of(schema, specs)
    plan = plan_answers(list(w), 1.0, definition)
    data = pd.DataFrame(list(itertools.product(range(4), range(3), range(10))), columns=["a", "b", "x"])
    res = answer_workload(data, w, plan, rng=SeededRandomSource(11))
    worst = worst_true = Fraction(0)
    for row in itertools.product(range(4), range(3), range(10)):
        load = loss = Fraction(0)
        for q, a in zip(w, res.answers, strict=True):
            if all(row[pos] in set(cov) for pos, cov in q.constraints):
                load += charge(a)
                loss += true_loss(a)
        worst, worst_true = max(worst, load), max(worst_true, loss)
    # The noise really drawn never loses more than charged (rounded up to floats: 1e-12 slack).
    assert worst_true <= worst * (1 + Fraction(1, 10**12))
    unit = {"pure": "epsilon", "zcdp": "rho", "gdp": "declared_zcdp_rho"}[definition]
    assert worst <= Fraction(1.0 if definition != "gdp" else 0.5)  # GDP mu = 1 is declared as rho = 1/2
    overlap = Fraction(plan.guarantees()["overlap"][unit])
    sequential = sum((charge(a) for a in res.answers), Fraction(0))
    if definition != "gdp":
        assert worst == overlap
        assert sequential == Fraction(plan.guarantees()["sequential"][unit])
    else:  # a mean's halves mu/sqrt(2) are rounded down, so they may charge a hair less
        assert overlap * Fraction(999_999_999, 10**9) <= worst <= overlap
    assert plan.gamma < len(w)  # the overlap pays off


# -- statistical audit of the sum mechanism on neighbours -------------------------------------------
def engine_sum(frame: pd.DataFrame, clip: Clipping) -> int:
    schema = Schema((IntAttribute("x", -1000, 1000),))
    with open_engine("duckdb", schema, frame) as eng:
        return eng.sums([parse_where(schema, "TRUE")], clip)[0]


def sum_sampler(
    s0: int,
    s1: int,
    clip: Clipping,
    budget: PureDP,
    neighbouring: str = "add_remove",
    covers_all: bool = False,
    schema: Schema | None = None,
):
    def sampler(which: int, n: int, src: RandomSource) -> list[int]:
        s = s0 if which == 0 else s1
        out = add_sum_noise(
            [s] * n,
            clip,
            budget,
            neighbouring=neighbouring,
            covers_all=covers_all,
            schema=schema,
            rng=src,  # type: ignore[arg-type]
        )
        return [a.units for a in out]  # type: ignore[arg-type]

    return sampler


BASE = pd.DataFrame({"x": [3, -7, 12, 40, -40, 5, 0, 999]})


@on_both_sources_os_slow
@pytest.mark.parametrize("extra", slow_after([40, 999, -40, -999]))
def test_sum_audit_add_remove_at_and_beyond_the_bounds(kind: str, extra: int) -> None:
    """D1 = D0 plus one row at a clipping bound or far beyond it: the declared epsilon holds."""
    clip, eps = Clipping("x", -40, 40), 1.0
    s0 = engine_sum(BASE, clip)
    s1 = engine_sum(pd.concat([BASE, pd.DataFrame({"x": [extra]})], ignore_index=True), clip)
    assert abs(s1 - s0) == 40  # clipped to the bound
    res = audit_epsilon(
        sum_sampler(s0, s1, clip, PureDP(eps)),
        runs=60_000,
        rng=source(kind, 21),
        confidence=confidence_for(kind),
    )
    assert not res.flags(eps)
    if kind == "seeded":
        assert res.epsilon_lower > 0.5 * eps  # the audit sees the loss: it could fail


@pytest.mark.slow  # 1.4 s of CPU
@on_both_sources_os_slow
def test_sum_audit_replace_one_row_across_the_bounds(kind: str) -> None:
    """A row moving from below lo to beyond hi shifts the sum by H - L: replace-one calibration holds,
    the add/remove calibration (half the noise) is flagged."""
    clip, eps = Clipping("x", -40, 40), 1.0
    d1 = BASE.copy()
    d1.loc[1, "x"] = 999  # -7 -> 999: clipped -7 -> 40
    d0 = BASE.copy()
    d0.loc[1, "x"] = -999  # clipped to -40
    s0, s1 = engine_sum(d0, clip), engine_sum(d1, clip)
    assert s1 - s0 == 80
    ok = audit_epsilon(
        sum_sampler(s0, s1, clip, PureDP(eps), "replace"),
        runs=60_000,
        rng=source(kind, 22),
        confidence=confidence_for(kind),
    )
    assert not ok.flags(eps)
    wrong = audit_epsilon(
        sum_sampler(s0, s1, clip, PureDP(eps), "add_remove"),
        runs=60_000,
        rng=source(kind, 23),
        confidence=confidence_for(kind),
    )
    assert wrong.flags(eps)


def test_the_audit_flags_a_sum_that_does_not_clip() -> None:
    """Control: the raw value 999 with noise calibrated to the bounds' sensitivity 40 is flagged."""
    clip, eps = Clipping("x", -40, 40), 1.0
    s0 = 0
    res = audit_epsilon(
        sum_sampler(s0, s0 + 120, clip, PureDP(eps)), runs=60_000, rng=SeededRandomSource(24), confidence=0.95
    )
    assert res.flags(eps)


# -- declared bounds, never the data; errors name the field ------------------------------------------
def test_bounds_from_the_line_or_declared_and_a_missing_bound_is_an_error() -> None:
    line = json.dumps({"id": "h", "where": "TRUE", "aggregate": "sum", "of": "hours"})
    with pytest.raises(QueryError, match="'bounds' missing"):
        Workload.from_lines(SCHEMA, [line])
    w = Workload.from_lines(SCHEMA, [line], declared={"hours": [0, 99, 0.5]})
    assert w.aggregate(0) == Aggregate("sum", Clipping("hours", 0, 99, 0.5))
    line2 = json.dumps({"where": "TRUE", "aggregate": "mean", "of": "age", "bounds": [20, 60]})
    w2 = Workload.from_lines(SCHEMA, [line2], declared={"age": [0, 10]})
    assert w2.aggregate(0).clipping == Clipping("age", 20, 60)  # the line's own bounds win


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"aggregate": "median", "of": "age", "bounds": [0, 1]}, "'aggregate' must be one of"),
        ({"aggregate": "sum", "bounds": [0, 1]}, "needs 'of'"),
        ({"aggregate": "sum", "of": "sex", "bounds": [0, 1]}, "only numbers can be summed"),
        ({"aggregate": "sum", "of": "nope", "bounds": [0, 1]}, "not an attribute"),
        ({"aggregate": "sum", "of": "age", "bounds": [5, 5]}, "lo < hi"),
        ({"aggregate": "sum", "of": "age", "bounds": [0, "9"]}, "'bounds' must be a number"),
        ({"aggregate": "sum", "of": "age", "bounds": [0, 1e300]}, "2\\^40"),
        ({"aggregate": "sum", "of": "age", "bounds": [0, 1.25], "step": 0.5}, "not a multiple of 'step'"),
        ({"aggregate": "sum", "of": "age", "bounds": [0, 9], "step": 0}, "'step' must be positive"),
        ({"of": "age"}, "only meaningful with"),
        ({"aggregate": "mean", "of": "age", "bounds": [0]}, "list \\[lo, hi\\]"),
    ],
)
def test_bad_aggregates_name_the_field(extra: dict[str, object], message: str) -> None:
    line = json.dumps({"id": "q", "where": "TRUE", **extra})
    with pytest.raises(QueryError, match=message) as info:
        Workload.from_lines(SCHEMA, [line])
    assert "line 1" in str(info.value)


def test_workload_round_trips_its_aggregates(tmp_path: Path) -> None:
    w, _ = mixed_workload()
    p = tmp_path / "w.jsonl"
    w.write_jsonl(p)
    again = Workload.read_jsonl(SCHEMA, p)
    assert again.aggregates == w.aggregates and again.ids == w.ids
    counts_only = Workload.from_lines(SCHEMA, ['{"where": "TRUE"}'])
    assert counts_only.aggregates == () and counts_only.aggregate(0).kind == "count"


def test_a_budget_too_small_for_the_sensitivity_fails_before_any_noise() -> None:
    schema = Schema((IntAttribute("x", 0, 10),))
    w = Workload.of(schema, [{"where": "TRUE", "aggregate": "sum", "of": "x", "bounds": [0, 2**40]}])
    plan = plan_answers(list(w), 1e-3, "pure")
    with pytest.raises(BudgetError, match="sum of 'x'"):
        answer_workload(pd.DataFrame({"x": [1]}), w, plan, rng=SeededRandomSource(0))


def test_replace_one_sensitivity_is_the_width_and_add_remove_the_larger_magnitude() -> None:
    c = Clipping("x", -30, 10)
    assert c.sensitivity("add_remove") == 30 and c.sensitivity("replace") == 40
    c2 = Clipping("x", 1.5, 4.5, 0.5)
    assert c2.units == (3, 9) and c2.sensitivity("add_remove") == 9
    # Replacing a row may take it out of the query's rows: the whole contribution 9, not H - L = 6.
    assert c2.sensitivity("replace") == 9
    # H - L only when every row the data may hold adds a value: the query covers the whole domain, the
    # schema refuses rows outside it and the summed attribute has no missing value
    complete = Schema((IntAttribute("x", 0, 10),))
    assert c2.sensitivity("replace", covers_all=True, schema=complete) == 6
    assert c2.sensitivity("replace", covers_all=True) == 9  # no schema: such rows are not ruled out
    for other in (
        Schema(complete.attributes, outside="drop"),
        Schema((IntAttribute("x", 0, 10, missing=True),)),
    ):
        assert c2.sensitivity("replace", covers_all=True, schema=other) == 9


@pytest.mark.parametrize("case", ["missing", "outside"])
def test_replace_one_sum_covering_all_counts_rows_that_add_nothing(case: str) -> None:
    """Issue 26, finding 3: a sum of every row, bounds [10, 20], under replace-one. A row whose summed
    value is missing (or a row outside a "drop" schema's domain) adds 0; replaced by a row at 20 it
    moves the sum by 20, twice H - L. covers_all used H - L whatever the schema: noise for 10, an exact
    loss of 2.0 for a declared 1.0."""
    if case == "missing":
        schema = Schema((IntAttribute("x", 0, 99, missing=True),))
        gone = {"x": [None]}
    else:
        schema = Schema((IntAttribute("x", 0, 99),), outside="drop")
        gone = {"x": [500]}
    clip, eps = Clipping("x", 10, 20), 1.0
    d0 = pd.DataFrame({"x": [15, 99, 12]})
    d1 = pd.concat([d0.iloc[[0, 2]], pd.DataFrame(gone)], ignore_index=True)  # the 99 row replaced
    q = parse_where(schema, "TRUE")
    sums = []
    for d in (d0, d1):
        with open_engine("duckdb", schema, d) as eng:
            sums.append(eng.sums([q], clip)[0])
    assert sums[0] - sums[1] == 20
    for given_schema in (None, schema):
        (noisy,) = add_sum_noise(
            [sums[0]], clip, PureDP(eps), neighbouring="replace", covers_all=True, schema=given_schema
        )
        # discrete Laplace of scale t: the exact loss between the two sums is |s0 - s1| / t
        loss = Fraction(abs(sums[0] - sums[1])) / noisy.noise.scale  # type: ignore[attr-defined]
        assert noisy.sensitivity == 20 and loss <= Fraction(eps)


@pytest.mark.parametrize(
    ("text", "want"),
    [("SUM(age)", ("sum", "age")), ("AVG(hours)", ("mean", "hours")), ("COUNT(*)", ("count", None))],
)
def test_sql_aggregates(text: str, want: tuple[str, str | None]) -> None:
    assert parse_sql_aggregate(SCHEMA, text) == want


@pytest.mark.parametrize("text", ["SUM(sex)", "MAX(age)", "SUM(age + 1)", "COUNT(age)", "SUM(", "SUM(t.age)"])
def test_bad_sql_aggregates_are_errors(text: str) -> None:
    with pytest.raises(QueryError):
        parse_sql_aggregate(SCHEMA, text)


@pytest.mark.slow
def test_spark_sums_equal_pandas_clipped_sums() -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java")
    from overlapdp.engine.spark_engine import SparkEngine, spark_session

    d = small_frame(1)
    d.loc[0, "hours"] = 1e300  # outside the domain: its clipped value must not overflow Spark's floor
    qs = [parse_where(SCHEMA, text) for text, _ in CONDITIONS]
    session = spark_session()
    for clip in (Clipping("age", -20, 40), Clipping("hours", 0.5, 50, 0.5)):
        with SparkEngine.from_frame(SCHEMA, d, spark=session) as eng:
            got = eng.sums(qs, clip)
        with open_engine("pandas", SCHEMA, d) as eng:
            assert got == eng.sums(qs, clip)
    want = [pandas_truth(d, m(d), "age", -20, 40)[0] for _, m in CONDITIONS]
    with SparkEngine.from_frame(SCHEMA, d, spark=session) as eng:
        assert eng.sums(qs, Clipping("age", -20, 40)) == want


def test_cli_answers_sums_with_bounds_declared_in_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = SCHEMA.to_json()
    doc["attributes"][0]["bounds"] = [20, 60]  # age: declared by the data owner, used by the mean
    (tmp_path / "s.json").write_text(json.dumps(doc))
    (tmp_path / "q.jsonl").write_text(
        '{"id": "n", "where": "age >= 30"}\n'
        '{"id": "h", "where": "age >= 30", "aggregate": "sum", "of": "hours", "bounds": [0, 99]}\n'
        '{"id": "m", "where": "TRUE", "aggregate": "mean", "of": "age"}\n'
    )
    d = integer_hours()
    d.to_csv(tmp_path / "d.csv", index=False)
    args = ["answer", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    args += ["--queries", str(tmp_path / "q.jsonl"), "--budget", "3", "--definition", "pure", "--json"]
    code, out, err = run(args, capsys)
    assert code == 0, err
    answers = json.loads(out)["answers"]
    assert [a.get("aggregate", "count") for a in answers] == ["count", "sum", "mean"]
    assert answers[2]["bounds"] == [20, 60]
    lo, hi = answers[2]["error_bar"]["low"], answers[2]["error_bar"]["high"]
    assert 20 <= lo <= hi <= 60
    # The table prints a mean as a short decimal with its bar widened outwards, and says what it is.
    code, table, err = run(args[:-1], capsys)
    assert code == 0, err
    assert not re.search(r"\d\.\d{7,}", table), table  # no float noise such as 42.0704971118501
    assert "mean of age over" in " ".join(table.split())
    (tmp_path / "bad.jsonl").write_text('{"where": "TRUE", "aggregate": "sum", "of": "hours"}\n')
    args[args.index(str(tmp_path / "q.jsonl"))] = str(tmp_path / "bad.jsonl")
    code, out, err = run(args, capsys)
    assert code == 2 and "'bounds' missing" in err


@pytest.mark.slow  # 1.5 s of CPU
@on_both_sources_os_slow
def test_sum_audit_replace_one_row_leaving_the_query_with_positive_bounds(kind: str) -> None:
    """Bounds [10, 20]: replacing a row at 20 inside ``age >= 30`` by one outside removes 20 from the sum,
    twice H - L. The default replace-one sensitivity holds; H - L alone (``covers_all``) is flagged."""
    schema = Schema((IntAttribute("age", 0, 99), IntAttribute("x", 0, 99)))
    q = parse_where(schema, "age >= 30")
    clip, eps = Clipping("x", 10, 20), 1.0
    d0 = pd.DataFrame({"age": [40, 50, 20], "x": [15, 99, 5]})
    d1 = d0.copy()
    d1.loc[1, "age"] = 25  # the row at x = 99 (clipped to 20) leaves the query's rows
    sums = []
    for d in (d0, d1):
        with open_engine("duckdb", schema, d) as eng:
            sums.append(eng.sums([q], clip)[0])
    assert sums[0] - sums[1] == 20
    ok = audit_epsilon(
        sum_sampler(sums[0], sums[1], clip, PureDP(eps), "replace"),
        runs=60_000,
        rng=source(kind, 25),
        confidence=confidence_for(kind),
    )
    assert not ok.flags(eps)
    wrong = audit_epsilon(
        sum_sampler(sums[0], sums[1], clip, PureDP(eps), "replace", covers_all=True, schema=schema),
        runs=60_000,
        rng=source(kind, 26),
        confidence=confidence_for(kind),
    )
    assert wrong.flags(eps)


def test_exact_count_command_refuses_sum_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    SCHEMA.save(tmp_path / "s.json")
    (tmp_path / "q.jsonl").write_text(
        '{"id": "h", "where": "TRUE", "aggregate": "sum", "of": "age", "bounds": [0, 9]}\n'
    )
    small_frame().to_csv(tmp_path / "d.csv", index=False)
    args = ["count", "--exact", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    code, _, err = run([*args, "--queries", str(tmp_path / "q.jsonl")], capsys)
    assert code == 2 and "asks for a sum" in err


def test_missing_values_contribute_nothing_to_a_sum_on_every_path() -> None:
    """SQL semantics for NULL: today such rows are outside the domain; the value mapping alone must
    also skip them (DuckDB's GREATEST(NULL, L) is L, which would count a missing value as lo)."""
    import duckdb
    import polars as pl

    from overlapdp.engine import sql
    from overlapdp.engine.aggregates import clip_units, units_sql
    from overlapdp.engine.polars_engine import raw_number

    clip = Clipping("v", 10, 20)
    values = [float("nan"), 5.0, 15.4, 99.0]
    assert clip_units(values, clip).tolist() == [0, 10, 15, 20]
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"v": values}))
    expr = units_sql(sql.DUCKDB, "v", "float", clip)
    assert [r[0] for r in con.execute(f"SELECT {expr} FROM t").fetchall()] == [None, 10, 15, 20]
    nulls = con.execute(f"SELECT {units_sql(sql.DUCKDB, 'v', 'int', clip)} FROM (SELECT NULL::INT AS v)")
    assert nulls.fetchall() == [(None,)]
    con.close()
    frame = pl.DataFrame({"v": [None, float("nan"), 5.0, 15.4, 99.0]})
    raw = frame.select(raw_number(clip, "float").alias("v"))["v"].to_numpy()
    assert clip_units(raw, clip).tolist() == [0, 0, 10, 15, 20]
    assert clip_units(frame.to_pandas()["v"], clip).tolist() == [0, 0, 10, 15, 20]


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    step=st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 0.001]),
    lo_k=st.integers(-300, 300),
    width=st.integers(1, 600),
)
def test_engines_agree_on_random_steps_and_bounds(seed: int, step: float, lo_k: int, width: int) -> None:
    """Rounding to the step is the same IEEE computation on every engine, ties and all."""
    d = small_frame(seed, rows=120)
    rng = np.random.default_rng(seed)
    d.loc[:40, "hours"] = np.round(rng.uniform(0, 99.99, 41) / step) * step + step / 2  # exact halves
    lo, hi = lo_k * step, (lo_k + width) * step
    clip = Clipping("hours", lo, hi, step)
    qs = [parse_where(SCHEMA, text) for text, _ in CONDITIONS]
    got = set()
    for name in ENGINES:
        with open_engine(name, SCHEMA, d) as eng:
            got.add(tuple(eng.sums(qs, clip)))
    assert len(got) == 1
