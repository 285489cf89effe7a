"""Engines (DuckDB, pandas, Polars) against independent pandas boolean masks and brute force.

The truth is computed WITHOUT the schema mapping: each random condition carries its own pandas mask
over the raw columns, and rows outside the domain are found from the schema's declared bounds directly.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.engine import DuckDBEngine, Engine, PandasEngine, PolarsEngine, batch, open_engine
from overlapdp.engine.bitmaps import bitmap_counts
from overlapdp.errors import DataError
from overlapdp.query import parse_where
from overlapdp.samples import adult_raw_schema, adult_schema
from overlapdp.schema import (
    CategoricalAttribute,
    IntAttribute,
    Schema,
)
from strategies import all_rows, representative, schemas, where_clauses
from support.engines import REPORT_FRAME, REPORT_SCHEMA, SECRET, inside_domain, parsed, random_workload, truth
from support.marks import slow_where

LOCAL_ENGINES = ("duckdb", "pandas", "polars")


def make_engine(name: str, schema: Schema, source: pd.DataFrame | Path, **kw: Any) -> Engine:
    return open_engine(name, schema, source, **kw)


# -- Adult: all engines agree with the masks ---------------------------------------------------------
@pytest.mark.parametrize("engine", slow_where(LOCAL_ENGINES, ["duckdb", "polars"]))  # ~0.7 s of CPU each
def test_adult_coded_random_workload(engine: str, adult_csv: Path, adult_frame: pd.DataFrame) -> None:
    schema = adult_schema()
    work = random_workload(schema, 400, seed=11)
    expected = truth(schema, adult_frame, work)
    qs = parsed(schema, work)
    with make_engine(engine, schema, adult_csv) as eng:
        assert eng.rows == len(adult_frame)
        assert eng.report.rows_outside == 0
        assert eng.counts(qs) == expected
        assert eng.counts(qs, method="conditional") == expected
        assert eng.counts(qs, method="histogram") == expected
        assert eng.counts(qs, method="bitmap") == expected


@pytest.mark.parametrize("engine", slow_where(LOCAL_ENGINES, ["duckdb", "polars"]))
def test_adult_raw_random_workload(engine: str, adult_raw_csv: Path, adult_raw_frame: pd.DataFrame) -> None:
    schema = adult_raw_schema()
    work = random_workload(schema, 300, seed=5)
    expected = truth(schema, adult_raw_frame, work)
    qs = parsed(schema, work)
    assert any("IS NULL" in text for text, _ in work) and any("IS NOT NULL" in text for text, _ in work)
    with make_engine(engine, schema, adult_raw_csv) as eng:
        # The raw file has empty cells ('?' in UCI's file) where the schema allows a missing value:
        # every row lies inside the domain, none is dropped.
        assert int(inside_domain(schema, adult_raw_frame).sum()) == len(adult_raw_frame)
        assert eng.rows == len(adult_raw_frame)
        assert eng.report.rows_outside == 0
        for name in ("workclass", "occupation", "native_country"):
            assert eng.report.missing[name] == int(adult_raw_frame[name].isna().sum()) > 0
        assert eng.counts(qs) == expected
        assert eng.counts(qs, method="conditional") == expected
        assert eng.counts(qs, method="bitmap") == expected


def test_adult_from_frames_parquet_and_duckdb_file(adult_frame: pd.DataFrame, tmp_path: Path) -> None:
    """Every input kind gives the same counts: pandas / Polars / Arrow frames, Parquet, a DuckDB file."""
    schema = adult_schema()
    work = random_workload(schema, 150, seed=3)
    expected = truth(schema, adult_frame, work)
    qs = parsed(schema, work)
    parquet = tmp_path / "adult.parquet"
    pq.write_table(pa.Table.from_pandas(adult_frame, preserve_index=False), parquet)
    database = tmp_path / "adult.duckdb"
    with duckdb.connect(str(database)) as con:
        con.register("frame", adult_frame)
        con.execute("CREATE TABLE people AS SELECT * FROM frame")
    engines: list[Engine] = [
        DuckDBEngine.from_parquet(schema, parquet),
        DuckDBEngine.from_database(schema, database, "people"),
        DuckDBEngine.from_database(schema, database, "people", materialize=False),
        DuckDBEngine.from_frame(schema, adult_frame),
        DuckDBEngine.from_frame(schema, pl.from_pandas(adult_frame)),
        DuckDBEngine.from_frame(schema, pa.Table.from_pandas(adult_frame)),
        PolarsEngine.from_path(schema, parquet),
        PolarsEngine.from_frame(schema, pa.Table.from_pandas(adult_frame)),
        PolarsEngine(schema, pl.from_pandas(adult_frame).lazy()),
        PandasEngine.from_path(schema, parquet),
        PandasEngine.from_frame(schema, pl.from_pandas(adult_frame)),
    ]
    for eng in engines:
        with eng:
            assert eng.counts(qs) == expected, eng


@pytest.mark.slow
def test_forced_fallback_and_sparse_path(adult_frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny histogram limit sends ``auto`` to conditional sums; a tiny dense limit to sparse masks."""
    schema = adult_schema()
    work = random_workload(schema, 200, seed=9, max_conditions=4)
    expected = truth(schema, adult_frame, work)
    qs = parsed(schema, work)
    with DuckDBEngine.from_frame(schema, adult_frame, histogram_limit=1) as eng:
        calls: list[int] = []
        original = eng._conditional_counts
        monkeypatch.setattr(eng, "_conditional_counts", lambda q: calls.append(len(q)) or original(q))
        # Few queries: conditional sums; many: row bitmaps over the exported code columns.
        assert eng.counts(qs[:10]) == expected[:10]
        assert calls, "auto did not fall back to conditional sums"
        chunks: list[list[int]] = []
        exported = eng._code_chunks
        monkeypatch.setattr(eng, "_code_chunks", lambda p: chunks.append(list(p)) or exported(p))
        calls.clear()
        assert eng.counts(qs) == expected
        assert chunks and not calls, "auto did not fall back to row bitmaps"
    monkeypatch.setattr(batch, "_DENSE_CELLS", 0)
    monkeypatch.setattr(batch, "_MASK_BUDGET", 1000)  # many small chunks
    for name in LOCAL_ENGINES:
        with make_engine(name, schema, adult_frame) as eng:
            assert eng.counts(qs, method="histogram") == expected


# -- small random schemas: brute force over rows -----------------------------------------------------
@st.composite
def schema_rows_queries(draw: st.DrawFn) -> tuple[Schema, list[tuple[int, ...]], list[str]]:
    schema = draw(schemas(max_attributes=3))
    points = all_rows(schema)
    rows = draw(st.lists(st.sampled_from(points), min_size=0, max_size=30))
    texts = draw(st.lists(where_clauses(schema), min_size=1, max_size=8))
    return schema, rows, texts


@pytest.mark.slow
@given(
    schema_rows_queries(),
    st.sampled_from(LOCAL_ENGINES),
    st.sampled_from(["histogram", "conditional", "bitmap"]),
)
def test_small_schemas_match_brute_force(
    case: tuple[Schema, list[tuple[int, ...]], list[str]], engine: str, method: str
) -> None:
    schema, rows, texts = case
    frame = pd.DataFrame(
        {a.name: [representative(a, r[j]) for r in rows] for j, a in enumerate(schema)},
        columns=list(schema.names),
    )
    # Plus one row outside the domain on the first attribute: counted in rows, matched by no query.
    first = schema.attributes[0]
    outside: Any = "zz" if isinstance(first, CategoricalAttribute) else 10_000
    extra = {a.name: [outside if j == 0 else representative(a, 0)] for j, a in enumerate(schema)}
    frame = pd.concat([frame, pd.DataFrame(extra)], ignore_index=True)
    if isinstance(first, CategoricalAttribute):
        frame[first.name] = frame[first.name].astype(object)
    schema = Schema(schema.attributes, outside="drop")  # the data owner drops rows outside the domain
    qs = [parse_where(schema, t) for t in texts]
    with make_engine(engine, schema, frame) as eng:
        got = eng.counts(qs, method=method)  # type: ignore[arg-type]
        assert eng.rows == len(rows) + 1
        assert eng.report.rows_outside == 1
        assert eng.report.outside[first.name] == 1
    assert got == [sum(q.covers(r) for r in rows) for q in qs]


# -- out-of-domain and missing values are reported per attribute -------------------------------------
@pytest.mark.parametrize("engine", LOCAL_ENGINES)
def test_out_of_domain_rows_are_reported_not_dropped(engine: str, tmp_path: Path) -> None:
    csv = tmp_path / "people.csv"
    REPORT_FRAME.to_csv(csv, index=False)
    for source in (REPORT_FRAME, csv):
        with make_engine(engine, REPORT_SCHEMA, source) as eng:
            rep = eng.report
            assert rep.rows == 7
            assert rep.rows_outside == 6  # only the first row is inside on every attribute
            assert rep.missing == {"age": 1, "color": 1, "pay": 1}
            assert rep.outside == {"age": 2, "color": 1, "pay": 1}
            assert rep.problems()["age"] == {"missing": 1, "outside": 2}
            assert "6 of 7 rows" in rep.describe() and "blue" not in rep.describe()
            # "outside": "drop" is the data owner's decision: such rows match no query.
            qs = [parse_where(REPORT_SCHEMA, t) for t in ("TRUE", "color = 'red'", "age >= 18", "pay < 10")]
            assert eng.counts(qs) == [1, 1, 1, 1]
            assert eng.counts(qs, method="conditional") == [1, 1, 1, 1]


# -- bad input: clear DataError naming the column or file, never echoing values ----------------------


@pytest.mark.parametrize("engine", LOCAL_ENGINES)
def test_bad_input(engine: str, tmp_path: Path) -> None:
    schema = Schema((IntAttribute("age", 0, 99), CategoricalAttribute("sex", ("F", "M"))))
    # A schema column missing from the data.
    with pytest.raises(DataError, match=r"'sex'.*missing"):
        make_engine(engine, schema, pd.DataFrame({"age": [1, 2]}))
    # Strings in an int attribute, in a frame and in a CSV (where the sniffer may type it as numbers
    # first: the text sits after the first thousands of rows).
    frame = pd.DataFrame({"age": ["3", SECRET], "sex": ["F", "M"]})
    with pytest.raises(DataError, match="column 'age': 1 value") as err:
        make_engine(engine, schema, frame)
    assert SECRET not in str(err.value)
    csv = tmp_path / "late-text.csv"
    csv.write_text("age,sex\n" + "30,F\n" * 30_000 + f"{SECRET},M\n")
    with pytest.raises(DataError, match="'age'") as err:
        make_engine(engine, schema, csv)
    assert SECRET not in str(err.value)
    # An empty file, a missing file, a Parquet file that is not Parquet.
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty.csv.*empty"):
        make_engine(engine, schema, empty)
    with pytest.raises(DataError, match="does not exist"):
        make_engine(engine, schema, tmp_path / "nope.csv")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + SECRET.encode() * 10)
    with pytest.raises(DataError, match=r"broken.parquet") as err:
        make_engine(engine, schema, broken)
    assert SECRET not in str(err.value)


def test_duckdb_database_errors(tmp_path: Path) -> None:
    schema = Schema((IntAttribute("age", 0, 99),))
    database = tmp_path / "d.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS age")
    with pytest.raises(DataError, match="no table 'people'"):
        DuckDBEngine.from_database(schema, database, "people")
    not_db = tmp_path / "x.duckdb"
    not_db.write_text(SECRET)
    with pytest.raises(DataError, match=r"x.duckdb") as err:
        DuckDBEngine.from_database(schema, not_db, "t")
    assert SECRET not in str(err.value)
    with DuckDBEngine.from_database(schema, database, "t") as eng:
        assert eng.counts([parse_where(schema, "age = 1")]) == [1]
    with pytest.raises(DataError, match="unknown engine"):
        open_engine("oracle", schema, database)


def test_query_on_another_schema_is_rejected() -> None:
    schema = Schema((IntAttribute("age", 0, 99),))
    other = Schema((IntAttribute("age", 0, 9),))
    with (
        PandasEngine(schema, pd.DataFrame({"age": [1]})) as eng,
        pytest.raises(DataError, match="another schema"),
    ):
        eng.counts([parse_where(other, "age = 1")])


def test_empty_workload_and_contradictions() -> None:
    schema = Schema((IntAttribute("age", 0, 99), CategoricalAttribute("sex", ("F", "M"))))
    frame = pd.DataFrame({"age": [1, 2, 3], "sex": ["F", "M", "M"]})
    qs = [
        parse_where(schema, t)
        for t in ("age > 5 AND age < 3", "age > 1 AND sex = 'M'", "TRUE", "sex = 'F' AND sex = 'M'")
    ]
    for name in LOCAL_ENGINES:
        with make_engine(name, schema, frame) as eng:
            assert eng.counts([]) == []
            assert eng.counts(qs) == [0, 2, 3, 0]
            assert eng.counts(qs, method="conditional") == [0, 2, 3, 0]


def test_bitmap_counts_over_uneven_chunks() -> None:
    """Row bitmaps over chunks whose lengths are not multiples of 64, against direct numpy masks."""
    schema = adult_schema()
    rng = np.random.default_rng(7)
    work = random_workload(schema, 120, seed=23)
    qs = parsed(schema, work)
    codes = np.stack([rng.integers(0, a.size, 5000) for a in schema], axis=1)
    expected = [
        int(
            np.all(
                [np.isin(codes[:, p], list(cov)) for p, cov in q.constraints] or [np.ones(5000, bool)], axis=0
            ).sum()
        )
        for q in qs
    ]
    bounds = [0, 1, 63, 64, 130, 2000, 5000]
    chunks = [{p: codes[lo:hi, p] for p in range(len(schema))} for lo, hi in itertools.pairwise(bounds)]
    assert bitmap_counts(chunks, qs) == expected


def test_duckdb_engines_share_a_database_but_not_their_tables() -> None:
    """Engines on frames open connections to one in-memory database (opening a database costs ~20 ms):
    each keeps its own registered frame and encoded table, engines open at once count their own rows,
    and closing one closes its connection and leaves the other working."""
    schema = Schema((IntAttribute("x", 0, 3),))
    q = parse_where(schema, "x >= 2")
    a = DuckDBEngine.from_frame(schema, pd.DataFrame({"x": [0, 2, 3, 3]}))
    b = DuckDBEngine.from_frame(schema, pd.DataFrame({"x": [2, 1]}))
    try:
        assert a.counts([q]) == [3] and b.counts([q]) == [1]
        a.close()
        with pytest.raises(duckdb.ConnectionException):
            a.con.execute("SELECT 1")
        assert b.counts([q]) == [1]
    finally:
        b.close()
