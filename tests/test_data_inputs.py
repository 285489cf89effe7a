"""Every data-accepting entry point takes pandas, Polars (eager and lazy), Arrow and DuckDB relations.

One matrix: a fixture over the input kinds (the same rows of integer-coded Adult, a few made to lie
outside the domain) times every public entry point that accepts data. Expected counts come from plain
pandas boolean masks on the same rows, and rows outside the domain from the domain sizes in
``adult-domain.json`` read here, not from the schema code. Noisy entry points are compared with the same
mechanism run on a count function returning those independent counts, with the same seed: the noise is
then identical, so the answers agree exactly iff the exact counts do.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from overlapdp import OverlapDPError, SchemaError, infer_schema
from overlapdp.engine import DuckDBEngine, PandasEngine, PolarsEngine, exact_counts, open_engine
from overlapdp.engine.inputs import data_kind, open_data
from overlapdp.errors import DataError, UnsupportedDataError
from overlapdp.mechanisms import (
    ConcurrentComposition,
    Counter,
    GuessAndCheck,
    NoisyCounts,
    SeededRandomSource,
    SparseVector,
    add_noise,
    noisy_count,
    noisy_counts,
)
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.privacy.definitions import ZCDP, PureDP
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.samples import adult_schema
from overlapdp.schema import Schema

Mask = Callable[[pd.DataFrame], "pd.Series[bool]"]

WORKLOAD: list[tuple[str, Mask]] = [
    ("age BETWEEN 20 AND 29", lambda d: d["age"].between(20, 29)),
    ("sex = 1 AND race IN (1, 2, 4)", lambda d: (d["sex"] == 1) & d["race"].isin([1, 2, 4])),
    (
        '"education-num" >= 13 AND "income>50K" = 1',
        lambda d: (d["education-num"] >= 13) & (d["income>50K"] == 1),
    ),
    ("NOT (race = 0 OR race = 1)", lambda d: ~d["race"].isin([0, 1])),
    ('"hours-per-week" > 50 AND age < 40', lambda d: (d["hours-per-week"] > 50) & (d["age"] < 40)),
    ('"capital-gain" > 0', lambda d: d["capital-gain"] > 0),
    ("TRUE", lambda d: d["age"] == d["age"]),
    ("age > 70 AND age < 5", lambda d: (d["age"] > 70) & (d["age"] < 5)),
]

KINDS = ("pandas", "polars", "polars-lazy", "arrow", "arrow-batch", "duckdb")
SEED = 20261130


@dataclass
class Case:
    """The rows (pandas, for the masks), the same rows as ``data`` of one kind, queries and truth."""

    kind: str
    frame: pd.DataFrame
    data: Any
    schema: Schema
    queries: list[PredicateQuery]
    truth: list[int]
    rows_outside: int

    def count_function(self) -> Callable[[PredicateQuery], int]:
        by_id = {q.id: t for q, t in zip(self.queries, self.truth, strict=True)}
        return lambda q: by_id[q.id]


@pytest.fixture(scope="module")
def sample(adult_frame: pd.DataFrame, adult_domain_json: Path) -> tuple[pd.DataFrame, pd.Series[bool]]:
    """1500 rows of Adult; a few values pushed outside the domain; the in-domain mask from the JSON."""
    frame = adult_frame.sample(1500, random_state=7).reset_index(drop=True)
    frame.loc[[3, 50, 700], "age"] = [85, 99, 120]  # the domain holds ages 0..84
    frame.loc[[10, 900], "race"] = 5  # races 0..4
    # A text column (not in the schema: the engines ignore it) for infer_schema, with missing values.
    frame["sex_text"] = np.where(frame["sex"] == 1, "Male", "Female").astype(object)
    frame.loc[[1, 2], "sex_text"] = None
    sizes = json.loads(adult_domain_json.read_text())
    inside = pd.Series(True, index=frame.index)
    for name, size in sizes.items():
        inside &= frame[name].between(0, size - 1)
    return frame, inside


def _as_kind(kind: str, frame: pd.DataFrame) -> tuple[Any, duckdb.DuckDBPyConnection | None]:
    if kind == "pandas":
        return frame, None
    if kind == "polars":
        return pl.from_pandas(frame), None
    if kind == "polars-lazy":
        return pl.from_pandas(frame).lazy().filter(pl.lit(True)), None
    if kind == "arrow":
        return pa.Table.from_pandas(frame, preserve_index=False), None
    if kind == "arrow-batch":
        return pa.RecordBatch.from_pandas(frame, preserve_index=False), None
    assert kind == "duckdb"
    # A table in an in-memory database: a relation over it cannot be read from another connection.
    con = duckdb.connect()
    con.register("incoming", frame)
    con.execute("CREATE TABLE adult AS SELECT * FROM incoming")
    con.unregister("incoming")
    return con.sql("SELECT * FROM adult"), con


@pytest.fixture(params=KINDS)
def case(request: pytest.FixtureRequest, sample: tuple[pd.DataFrame, pd.Series[bool]]) -> Iterator[Case]:
    frame, inside = sample
    # The pushed-out rows are dropped by the schema's stated policy (the default refuses such data).
    schema = dataclasses.replace(adult_schema(), outside="drop")
    queries = [parse_where(schema, w, id=f"q{i}") for i, (w, _) in enumerate(WORKLOAD)]
    truth = [int((mask(frame) & inside).sum()) for _, mask in WORKLOAD]
    data, con = _as_kind(request.param, frame)
    yield Case(request.param, frame, data, schema, queries, truth, int((~inside).sum()))
    if con is not None:
        con.close()


def _values(answers: list[Any]) -> list[Any]:
    return [(a.value, a.low, a.high) for a in answers]


# -- the entry points: each returns (what it gave on the data, what it gives on the truth) --------------
def _exact_counts(c: Case) -> tuple[Any, Any]:
    return exact_counts(c.queries, c.data), c.truth


def _open_data(c: Case) -> tuple[Any, Any]:
    natural = {
        "pandas": PandasEngine,
        "polars": PolarsEngine,
        "polars-lazy": PolarsEngine,
        "arrow": DuckDBEngine,
        "arrow-batch": DuckDBEngine,
        "duckdb": DuckDBEngine,
    }[c.kind]
    with open_data(c.data, c.schema) as eng:
        got = (type(eng), eng.counts(c.queries), eng.report.rows, eng.report.rows_outside)
    return got, (natural, c.truth, len(c.frame), c.rows_outside)


def _open_engine(name: str) -> Callable[[Case], tuple[Any, Any]]:
    def run(c: Case) -> tuple[Any, Any]:
        with open_engine(name, c.schema, c.data) as eng:
            got = (
                eng.counts(c.queries),
                eng.counts(c.queries, method="conditional"),
                eng.report.rows,
                eng.report.rows_outside,
            )
        return got, (c.truth, c.truth, len(c.frame), c.rows_outside)

    return run


def _counter(c: Case) -> tuple[Any, Any]:
    counter = Counter.of(c.data)
    return (counter.count_many(c.queries), [counter.count(q) for q in c.queries]), (c.truth, c.truth)


def _noisy_counts(c: Case) -> tuple[Any, Any]:
    def run(data: Any) -> list[Any]:
        return _values(noisy_counts(c.queries, data, ZCDP(0.5), rng=SeededRandomSource(SEED)))

    return run(c.data), run(c.count_function())


def _noisy_count(c: Case) -> tuple[Any, Any]:
    def run(data: Any) -> list[Any]:
        return [
            _values([noisy_count(q, data, PureDP(1.0), rng=SeededRandomSource(SEED + i))])
            for i, q in enumerate(c.queries)
        ]

    return run(c.data), run(c.count_function())


def _noisy_session(c: Case) -> tuple[Any, Any]:
    def run(data: Any) -> list[Any]:
        session = NoisyCounts(
            data, budget=PureDP(100.0), per_query=PureDP(1.0), schema=c.schema, rng=SeededRandomSource(SEED)
        )
        return _values([session.query(q) for q in c.queries])

    return run(c.data), run(c.count_function())


def _sparse_vector(c: Case) -> tuple[Any, Any]:
    # A threshold below every count: each answer is "above" and releases a fresh noisy count.
    def run(data: Any) -> list[Any]:
        svt = SparseVector(
            data,
            epsilon=1.0,
            max_positives=len(c.queries),
            threshold=-1000,
            release_epsilon=1.0,
            rng=SeededRandomSource(SEED),
        )
        out = [svt.query(q) for q in c.queries]
        return [(a.outcome, None if a.released is None else a.released.value) for a in out]

    return run(c.data), run(c.count_function())


def _guess_and_check(c: Case) -> tuple[Any, Any]:
    # Guesses far off every count: each fails and releases a noisy estimate of the count.
    def run(data: Any) -> list[Any]:
        gc = GuessAndCheck.from_budget(
            data, epsilon=1.0, tolerance=5, max_failures=len(c.queries), rng=SeededRandomSource(SEED)
        )
        out = [gc.check(q, -10_000) for q in c.queries]
        return [(a.outcome, None if a.estimate is None else a.estimate.value) for a in out]

    return run(c.data), run(c.count_function())


def _concurrent(c: Case) -> tuple[Any, Any]:
    def run(data: Any) -> list[Any]:
        comp = ConcurrentComposition(data, c.schema, PureDP(50.0), rng=SeededRandomSource(SEED))
        comp.spawn_noisy_counts(id="counts", budget=PureDP(20.0), per_query=PureDP(1.0))
        comp.spawn_guess_and_check(id="gc", epsilon=2.0, tolerance=5, max_failures=len(c.queries))
        return [
            (comp.query("counts", q).value, comp.query("gc", (q, -10_000)).estimate.value) for q in c.queries
        ]

    return run(c.data), run(c.count_function())


def _answer_workload(c: Case) -> tuple[Any, Any]:
    plan = plan_answers(c.queries, 1.0, "pure")
    res = answer_workload(c.data, c.queries, plan, rng=SeededRandomSource(SEED))
    expected = add_noise(
        c.truth,
        plan.per_query_budget,
        level=plan.level,
        ids=[q.id for q in c.queries],
        rng=SeededRandomSource(SEED),
    )
    return _values(res.answers), _values(expected)


def _infer_schema(c: Case) -> tuple[Any, Any]:
    bounds = {a.name: (0, a.size - 1) for a in c.schema}
    inferred = infer_schema(c.data, bounds=bounds, columns=[*bounds, "sex_text"], categories_from_data=True)
    with pytest.raises(SchemaError, match="'age' is numeric"):
        infer_schema(c.data, columns=["age"])
    with pytest.raises(SchemaError, match="'sex_text' holds text"):
        infer_schema(c.data, columns=["sex_text"])
    present = sorted(c.frame["sex_text"].dropna().unique().tolist())
    text = inferred.attribute("sex_text")
    got = [(a.name, a.kind, a.size) for a in inferred], text.values, text.missing
    # The text column has missing values: "missing": true adds one value to its two labels.
    has_missing = bool(c.frame["sex_text"].isna().any())
    assert has_missing
    expected = (
        [(a.name, a.kind, a.size) for a in c.schema] + [("sex_text", "categorical", 3)],
        tuple(present),
        True,
    )
    return got, expected


ENTRY_POINTS: dict[str, Callable[[Case], tuple[Any, Any]]] = {
    "exact_counts": _exact_counts,
    "open_data": _open_data,
    "open_engine-duckdb": _open_engine("duckdb"),
    "open_engine-pandas": _open_engine("pandas"),
    "open_engine-polars": _open_engine("polars"),
    "Counter.of": _counter,
    "noisy_counts": _noisy_counts,
    "noisy_count": _noisy_count,
    "NoisyCounts": _noisy_session,
    "SparseVector": _sparse_vector,
    "GuessAndCheck": _guess_and_check,
    "ConcurrentComposition": _concurrent,
    "answer_workload": _answer_workload,
    "infer_schema": _infer_schema,
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_entry_point_counts_every_kind(entry: str, case: Case) -> None:
    assert data_kind(case.data) == case.kind
    got, expected = ENTRY_POINTS[entry](case)
    assert got == expected


def test_the_truth_tells_kinds_apart(sample: tuple[pd.DataFrame, pd.Series[bool]]) -> None:
    # Counts that differ from query to query, rows outside the domain that a query with no condition
    # must not count, and an empty contradiction: an entry point that drops or mis-maps rows shows.
    frame, inside = sample
    truth = [int((mask(frame) & inside).sum()) for _, mask in WORKLOAD]
    assert len(set(truth)) == len(truth)
    assert int((~inside).sum()) == 5
    assert truth[-2] == len(frame) - 5 and truth[-1] == 0


# -- unsupported input: one error, listing the accepted kinds, raised before anything is read or drawn --
UNSUPPORTED: list[Any] = [
    [{"age": 1}],
    np.zeros((3, 14), dtype=np.int64),
    pd.Series([1, 2, 3], name="age"),
    {"age": [1, 2], "sex": [0, 1]},
]


def _calls(schema: Schema, q: PredicateQuery) -> dict[str, Callable[[Any], object]]:
    return {
        "exact_counts": lambda d: exact_counts([q], d),
        "open_data": lambda d: open_data(d, schema),
        "open_engine": lambda d: open_engine("polars", schema, d),
        "Counter.of": Counter.of,
        "noisy_counts": lambda d: noisy_counts([q], d, ZCDP(0.5), rng=1),
        "NoisyCounts": lambda d: NoisyCounts(d, budget=PureDP(1.0), per_query=PureDP(0.5), rng=1),
        "SparseVector": lambda d: SparseVector(d, epsilon=1.0, threshold=1, rng=1),
        "GuessAndCheck": lambda d: GuessAndCheck.from_budget(
            d, epsilon=1.0, tolerance=5, max_failures=1, rng=1
        ),
        "ConcurrentComposition": lambda d: ConcurrentComposition(d, schema, PureDP(1.0), rng=1),
        "answer_workload": lambda d: answer_workload(d, [q], plan_answers([q], 1.0, "pure"), rng=1),
        "infer_schema": lambda d: infer_schema(d, categories_from_data=True),
    }


@pytest.mark.parametrize("entry", list(_calls(adult_schema(), parse_where(adult_schema(), "TRUE"))))
@pytest.mark.parametrize("bad", range(len(UNSUPPORTED)))
def test_unsupported_input_is_one_clear_error(entry: str, bad: int) -> None:
    schema = adult_schema()
    call = _calls(schema, parse_where(schema, "age < 30"))[entry]
    with pytest.raises(UnsupportedDataError) as info:
        call(UNSUPPORTED[bad])
    assert isinstance(info.value, OverlapDPError)
    message = str(info.value)
    for accepted in ("pandas DataFrame", "Polars DataFrame or LazyFrame", "pyarrow Table", "DuckDB relation"):
        assert accepted in message
    assert type(UNSUPPORTED[bad]).__name__ in message


def test_relation_engine_leaves_its_connection_clean(sample: tuple[pd.DataFrame, pd.Series[bool]]) -> None:
    """A DuckDB relation is counted on its own connection; closing the engine drops its temporary table
    and leaves the caller's connection open."""
    frame, inside = sample
    relation, con = _as_kind("duckdb", frame)
    assert con is not None
    temporary = "SELECT count(*) FROM duckdb_tables() WHERE temporary"
    schema = dataclasses.replace(adult_schema(), outside="drop")
    query = parse_where(schema, "age < 30")
    with open_data(relation, schema) as eng:
        assert eng.counts([query]) == [int((inside & (frame["age"] < 30)).sum())]
        assert con.sql(temporary).fetchall() == [(1,)]
    assert con.sql(temporary).fetchall() == [(0,)]
    assert relation.count("*").fetchall() == [(len(frame),)]
    con.close()


@pytest.mark.slow
def test_spark_engine_takes_every_kind(sample: tuple[pd.DataFrame, pd.Series[bool]]) -> None:
    """The named Spark engine gets every kind shipped through Arrow; a Spark DataFrame goes to Spark."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java on the PATH")
    from overlapdp.engine.spark_engine import SparkEngine, spark_session

    frame, inside = sample
    schema = dataclasses.replace(adult_schema(), outside="drop")
    queries = [parse_where(schema, w, id=f"q{i}") for i, (w, _) in enumerate(WORKLOAD)]
    truth = [int((mask(frame) & inside).sum()) for _, mask in WORKLOAD]
    session = spark_session("local[1]", app_name="overlapdp-inputs")
    try:
        for kind in KINDS:
            data, con = _as_kind(kind, frame)
            with open_engine("spark", schema, data, spark=session) as eng:
                assert isinstance(eng, SparkEngine)
                assert (eng.counts(queries), eng.report.rows_outside) == (truth, 5), kind
            if con is not None:
                con.close()
        sdf = session.createDataFrame(pa.Table.from_pandas(frame, preserve_index=False))
        assert data_kind(sdf) == "spark"
        assert exact_counts(queries, sdf) == truth
        assert infer_schema(sdf, columns=["sex_text"], categories_from_data=True).attribute(
            "sex_text"
        ).values == ("Female", "Male")
        with pytest.raises(DataError, match="counted by the spark engine"):
            open_engine("duckdb", schema, sdf)
    finally:
        session.stop()
