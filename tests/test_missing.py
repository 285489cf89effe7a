"""Missing values as one more domain value, and the schema's policy for rows outside the domain
(MATH.md 1.1).

The truth is computed without overlapdp's mapping: by DuckDB's own SQL over the raw values (its
three-valued logic: a comparison with NULL is UNKNOWN, NOT UNKNOWN is UNKNOWN, only TRUE counts) and
by pandas masks on the raw Adult CSV.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run
from overlapdp.engine import open_engine
from overlapdp.errors import OutsideDomainError, QueryError, SchemaError
from overlapdp.query import IsNull, Not, PredicateQuery, parse_conditions, parse_where
from overlapdp.samples import adult_raw_schema
from overlapdp.schema import (
    Attribute,
    BinnedAttribute,
    CategoricalAttribute,
    IntAttribute,
    Schema,
    infer_schema,
)
from support.engines import RAW_QUERIES

ENGINES = ("duckdb", "pandas", "polars")

SMALL = Schema.from_json(
    {
        "attributes": [
            {"name": "age", "type": "int", "min": 18, "max": 25, "missing": True},
            {"name": "work", "type": "categorical", "values": ["gov", "private", "self"], "missing": True},
            {"name": "pay", "type": "binned", "edges": [0, 10, 100], "missing": True},
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        ]
    }
)


# -- schema --------------------------------------------------------------------------------------------
def test_missing_is_one_more_value_and_round_trips() -> None:
    assert SMALL.attributes[0] == IntAttribute("age", 18, 25, missing=True)
    work = SMALL.attribute("work")
    assert (work.size, work.value_count, work.null_index) == (4, 3, 3)
    assert work.value_at(3) is None and work.value_at(1) == "private"
    assert SMALL.attribute("sex").null_index is None and SMALL.attribute("sex").size == 2
    assert SMALL.domain_size == 9 * 4 * 3 * 2
    doc = SMALL.to_json()
    assert doc["attributes"][1] == {
        "name": "work",
        "type": "categorical",
        "values": ["gov", "private", "self"],
        "missing": True,
    }
    assert "missing" not in doc["attributes"][3] and "outside" not in doc
    assert Schema.from_json(json.loads(json.dumps(doc))) == SMALL
    dropping = Schema(SMALL.attributes, outside="drop")
    assert dropping.to_json()["outside"] == "drop"
    assert Schema.from_json(dropping.to_json()) == dropping != SMALL


def test_schema_json_errors_name_the_field() -> None:
    bad_missing = {"attributes": [{"name": "a", "type": "int", "min": 0, "max": 1, "missing": "yes"}]}
    with pytest.raises(SchemaError, match=r"'a'.*'missing' must be true or false"):
        Schema.from_json(bad_missing)
    bad_policy = {"attributes": [{"name": "a", "type": "int", "min": 0, "max": 1}], "outside": "ignore"}
    with pytest.raises(SchemaError, match=r"'outside' must be"):
        Schema.from_json(bad_policy)


# -- parsing: IS NULL, IS NOT NULL and three-valued logic -------------------------------------------------
def _cov(text: str) -> dict[str, set[int]]:
    q = parse_where(SMALL, text)
    return {SMALL.attributes[p].name: set(c) for p, c in q.constraints}


def test_is_null_and_three_valued_logic() -> None:
    # work: gov 0, private 1, self 2, missing 3.
    assert _cov("work IS NULL") == {"work": {3}}
    assert _cov("work IS NOT NULL") == {"work": {0, 1, 2}}
    assert _cov("NOT (work IS NOT NULL)") == {"work": {3}}
    assert _cov("NOT (work IS NULL)") == {"work": {0, 1, 2}}
    # Comparisons and their negations never cover the missing value (SQL: NULL != 'gov' is UNKNOWN).
    assert _cov("work = 'gov'") == {"work": {0}}
    assert _cov("work != 'gov'") == {"work": {1, 2}}
    assert _cov("work NOT IN ('gov', 'self')") == {"work": {1}}
    assert _cov("NOT (work = 'gov')") == {"work": {1, 2}}
    assert _cov("NOT (work = 'gov' OR work IS NULL)") == {"work": {1, 2}}
    assert _cov("work = 'gov' OR work IS NULL") == {"work": {0, 3}}
    assert _cov("NOT (work != 'gov')") == {"work": {0}}
    # age: 18..25 are indices 0..7, missing 8.
    assert _cov("age < 20") == {"age": {0, 1}}
    assert _cov("NOT (age < 20)") == {"age": set(range(2, 8))}
    assert _cov("NOT (age < 20 AND age > 22)") == {"age": set(range(8))}
    assert _cov("age >= 18") == {"age": set(range(8))}  # every present age, not the missing one
    assert _cov("NOT (FALSE AND age > 20)") == {}  # FALSE AND x is FALSE, whatever x; NOT FALSE is TRUE
    assert _cov("pay IS NULL AND sex = 'F'") == {"pay": {2}, "sex": {0}}
    # A query that does not name an attribute covers its missing value too.
    assert parse_where(SMALL, "sex = 'F'").covers((8, 3, 2, 0))


def test_json_form_matches_sql_form() -> None:
    pairs = [
        ({"work": {"is_null": True}}, "work IS NULL"),
        ({"work": {"is_null": False}}, "work IS NOT NULL"),
        ({"work": {"ne": "gov"}}, "work != 'gov'"),
        ({"work": {"not_in": ["gov", "self"]}}, "work NOT IN ('gov', 'self')"),
        ({"age": {"not": {"lt": 20}}}, "NOT (age < 20)"),
        ({"age": {"not": {"is_null": False}}}, "age IS NULL"),
        ({"age": {"range": [None, None]}}, "age IS NOT NULL"),
        ({"age": {"gt": 20, "is_null": False}}, "age > 20"),
    ]
    for conditions, text in pairs:
        assert parse_conditions(SMALL, conditions).constraints == parse_where(SMALL, text).constraints, text


def test_null_conditions_are_refused_where_the_schema_allows_no_missing_value() -> None:
    for text in ("sex IS NULL", "sex IS NOT NULL", "NOT (sex IS NULL)"):
        with pytest.raises(QueryError, match=r"attribute 'sex' allows no missing value.*\"missing\": true"):
            parse_where(SMALL, text)
    with pytest.raises(QueryError, match="'sex' allows no missing value"):
        parse_conditions(SMALL, {"sex": {"is_null": True}})
    with pytest.raises(QueryError, match="'sex' allows no missing value"):
        PredicateQuery.build(SMALL, {"sex": Not(IsNull())})
    with pytest.raises(QueryError, match="use IS NULL"):
        parse_where(SMALL, "work = NULL")
    with pytest.raises(QueryError, match="use IS NULL"):
        parse_where(SMALL, "work IN ('gov', NULL)")
    with pytest.raises(QueryError, match="'is_null' takes true or false"):
        parse_conditions(SMALL, {"work": {"is_null": "yes"}})


def test_query_json_and_description_round_trip() -> None:
    for text in (
        "work IS NULL",
        "work IS NOT NULL",
        "work = 'gov' OR work IS NULL",
        "age BETWEEN 19 AND 21 OR age IS NULL",
        "work != 'gov' AND pay IS NULL",
    ):
        q = parse_where(SMALL, text)
        doc = q.to_json()
        assert parse_conditions(SMALL, doc["conditions"]).constraints == q.constraints, (text, doc)
        described = PredicateQuery(SMALL, q.constraints).describe()
        assert parse_where(SMALL, described).constraints == q.constraints, (text, described)


# -- random schemas with missing values: every engine against DuckDB's own SQL --------------------------
@st.composite
def _attribute(draw: st.DrawFn, name: str) -> Attribute:
    kind = draw(st.sampled_from(["int", "categorical", "binned"]))
    missing = draw(st.booleans())
    if kind == "int":
        lo = draw(st.integers(-3, 5))
        return IntAttribute(name, lo, lo + draw(st.integers(0, 4)), missing=missing)
    if kind == "categorical":
        return CategoricalAttribute(name, tuple("abcd"[: draw(st.integers(1, 4))]), missing=missing)
    edges = sorted(draw(st.sets(st.integers(0, 40), min_size=2, max_size=4)))
    return BinnedAttribute(name, tuple(float(e) for e in edges), missing=missing)


@st.composite
def _leaf(draw: st.DrawFn, a: Attribute) -> str:
    """A condition whose SQL meaning on the raw values equals overlapdp's (bins: edge comparisons)."""
    n = a.name
    if a.missing and draw(st.integers(0, 3)) == 0:
        return f"{n} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if isinstance(a, CategoricalAttribute):
        vals = [f"'{v}'" for v in draw(st.lists(st.sampled_from(a.values), min_size=1, max_size=3))]
        op = draw(st.sampled_from(["=", "!=", "IN", "NOT IN"]))
        return f"{n} {op} ({', '.join(vals)})" if "IN" in op else f"{n} {op} {vals[0]}"
    if isinstance(a, BinnedAttribute):
        if draw(st.booleans()):
            return f"{n} < {draw(st.sampled_from(a.edges[1:]))}"
        return f"{n} >= {draw(st.sampled_from(a.edges[:-1]))}"
    assert isinstance(a, IntAttribute)
    v = draw(st.integers(a.min, a.max))
    op = draw(st.sampled_from(["=", "!=", "<=", ">=", "IN", "NOT IN"]))
    return f"{n} {op} ({v}, {a.max})" if "IN" in op else f"{n} {op} {v}"


@st.composite
def _condition(draw: st.DrawFn, a: Attribute) -> str:
    left = draw(_leaf(a))
    shape = draw(st.sampled_from(["plain", "not", "or", "and", "not-or", "not-and"]))
    if shape == "plain":
        return left
    if shape == "not":
        return f"NOT ({left})"
    right = draw(_leaf(a))
    joined = f"({left} {'OR' if 'or' in shape else 'AND'} {right})"
    return f"NOT {joined}" if shape.startswith("not") else joined


@st.composite
def _case(draw: st.DrawFn) -> tuple[Schema, list[list[Any]], list[str]]:
    schema = Schema(tuple(draw(_attribute(f"x{j}")) for j in range(draw(st.integers(1, 3)))))
    rows: list[list[Any]] = []
    for _ in range(draw(st.integers(1, 25))):
        row: list[Any] = []
        for a in schema:
            i = draw(st.integers(0, a.size - 1))
            raw: Any = None if i == a.null_index else a.value_at(i)
            if isinstance(a, BinnedAttribute) and raw is not None:
                raw = a.edges[i]
            row.append(raw)
        rows.append(row)
    # One row with every value present, so that no column is entirely empty (its type unknown).
    rows.append([a.edges[0] if isinstance(a, BinnedAttribute) else a.value_at(0) for a in schema])
    texts = []
    for _ in range(draw(st.integers(1, 5))):
        chosen = draw(st.lists(st.sampled_from(list(schema.attributes)), max_size=len(schema)))
        texts.append(" AND ".join(draw(_condition(a)) for a in chosen) or "TRUE")
    return schema, rows, texts


def _duckdb_truth(schema: Schema, rows: list[list[Any]], texts: list[str]) -> list[int]:
    """DuckDB's SQL over the raw values, NULL for missing: its own three-valued logic."""
    types = {"int": "BIGINT", "categorical": "VARCHAR", "binned": "DOUBLE"}
    with duckdb.connect() as con:
        cols = ", ".join(f"{a.name} {types[a.kind]}" for a in schema)
        con.execute(f"CREATE TABLE t ({cols})")
        con.executemany(f"INSERT INTO t VALUES ({', '.join('?' for _ in schema)})", rows)
        return [int(con.execute(f"SELECT count(*) FROM t WHERE {t}").fetchone()[0]) for t in texts]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(_case())
def test_engines_match_sql_three_valued_logic(case: tuple[Schema, list[list[Any]], list[str]]) -> None:
    schema, rows, texts = case
    expected = _duckdb_truth(schema, rows, texts)
    frame = pd.DataFrame(rows, columns=list(schema.names))
    for a in schema:
        if isinstance(a, CategoricalAttribute):
            frame[a.name] = frame[a.name].astype(object)
        else:
            frame[a.name] = frame[a.name].astype(float)  # missing as NaN
    qs = [parse_where(schema, t) for t in texts]
    for engine in ENGINES:
        with open_engine(engine, schema, frame) as eng:
            assert eng.report.rows_outside == 0
            assert eng.counts(qs) == expected, (engine, texts)
            assert eng.counts(qs, method="conditional") == expected, (engine, texts)
            assert eng.counts(qs, method="bitmap") == expected, (engine, texts)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_column_with_no_value_at_all(engine: str) -> None:
    frame = pd.DataFrame({"age": [20, 21, None], "work": [None, None, None], "pay": [1.0, 2.0, 3.0]})
    frame["sex"] = ["F", "M", "F"]
    qs = [parse_where(SMALL, t) for t in ("work IS NULL", "work != 'gov'", "age IS NULL", "TRUE")]
    with open_engine(engine, SMALL, frame) as eng:
        assert eng.counts(qs) == [3, 0, 1, 3]


# -- raw Adult: no row dropped, counts equal pandas' on the raw CSV --------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_issue_example_counts_rows_with_missing_workclass(engine: str, adult_raw_csv: Path) -> None:
    frame = pd.read_csv(adult_raw_csv, skipinitialspace=True)
    text, mask = RAW_QUERIES[0]
    with open_engine(engine, adult_raw_schema(), adult_raw_csv) as eng:
        assert eng.counts([parse_where(adult_raw_schema(), text)]) == [int(mask(frame).sum())]


@pytest.mark.parametrize("engine", ENGINES)
def test_raw_adult_counts_every_row(engine: str, adult_raw_csv: Path) -> None:
    # Independent truth: pandas on the raw CSV ('?' left as empty cells, read as NaN).
    frame = pd.read_csv(adult_raw_csv, skipinitialspace=True)
    expected = [int(mask(frame).sum()) for _, mask in RAW_QUERIES]
    assert expected[1] == len(frame) == 32561
    assert expected[2] == 1836
    example = frame["age"].between(17, 26) & (frame["sex"] == "Female")
    assert int((example & frame["workclass"].isna()).sum()) > 0  # the rows the old code left out
    schema = adult_raw_schema()
    qs = [parse_where(schema, t) for t, _ in RAW_QUERIES]
    with open_engine(engine, schema, adult_raw_csv) as eng:
        assert eng.report.rows_outside == 0
        assert eng.counts(qs) == expected
        assert eng.counts(qs, method="conditional") == expected


# -- the schema's policy for rows outside the domain ----------------------------------------------------
POLICY_FRAME = pd.DataFrame(
    {
        "age": [20.0, 21.0, np.nan, 22.0, 23.0],  # NaN: missing, allowed
        "work": ["gov", None, "gov", "private", "self"],  # None: missing, allowed
        "pay": [5.0, 5.0, 50.0, 50.0, 5.0],
        "sex": ["F", "M", None, "X", "F"],  # None: missing, NOT allowed; 'X' outside the domain
    }
)


@pytest.mark.parametrize("engine", ENGINES)
def test_rows_outside_the_domain_are_an_error_by_default(engine: str) -> None:
    q = parse_where(SMALL, "TRUE")
    with open_engine(engine, SMALL, POLICY_FRAME) as eng, pytest.raises(OutsideDomainError) as err:
        eng.counts([q])
    message = str(err.value)
    assert err.value.attributes == ("sex",)
    assert "'sex'" in message and "schema check" in message and '"missing": true' in message
    assert '"outside": "drop"' in message
    assert not re.search(r"\d", message), message  # names attributes, never counts
    dropping = Schema(SMALL.attributes, outside="drop")
    qs = [parse_where(dropping, t) for t in ("TRUE", "work IS NULL", "age IS NULL", "sex = 'F'")]
    with open_engine(engine, dropping, POLICY_FRAME) as eng:
        # Rows 2 (sex missing) and 3 (sex 'X') are dropped, by the schema's explicit decision.
        assert eng.counts(qs) == [3, 1, 0, 2]
        rep = eng.report
        assert (rep.rows, rep.rows_outside) == (5, 2)
        assert rep.missing == {"age": 1, "work": 1, "pay": 0, "sex": 1}
        assert rep.outside == {"age": 0, "work": 0, "pay": 0, "sex": 1}
        assert rep.problems() == {"sex": {"missing": 1, "outside": 1}}


def test_service_registration_applies_the_policy(tmp_path: Path) -> None:
    from overlapdp.service.datasets import load_dataset

    data = tmp_path / "d.csv"
    POLICY_FRAME.to_csv(data, index=False)
    with pytest.raises(OutsideDomainError) as err:
        load_dataset("d", data, SMALL.to_json(), "pandas")
    assert not re.search(r"\d", str(err.value))
    loaded = load_dataset("d", data, Schema(SMALL.attributes, outside="drop").to_json(), "pandas")
    loaded.close()


# -- infer ---------------------------------------------------------------------------------------------
INFER_FRAME = pd.DataFrame(
    {
        "age": [20, 30, None],
        "race": ["W", None, "B"],
        "gain": [0.0, 7.5, 1.0],
        "hours": [40, 50, 60],
    }
)


def test_infer_missing_value_or_drop() -> None:
    declared: dict[str, Any] = {
        "bounds": {"age": (0, 99), "hours": (1, 99)},
        "edges": {"gain": [0, 1, 10]},
        "categories": {"race": ["W", "B"]},
    }
    s = infer_schema(INFER_FRAME, **declared)
    assert [a.missing for a in s] == [True, True, False, False] and s.outside == "error"
    d = infer_schema(INFER_FRAME, missing="drop", **declared)
    assert not any(a.missing for a in d) and d.outside == "drop"


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "d.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def test_cli_infer_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write(tmp_path, INFER_FRAME)
    base = ["schema", "infer", "--data", str(data), "--bounds", "age=0:99", "--bounds", "hours=1:99"]
    base += ["--edges", "gain=0,1,10", "--categories", "race=W,B"]
    for extra in ([], ["--missing", "value"]):
        code, out, err = run([*base, *extra], capsys)
        assert code == 0, err
        doc = json.loads(out)
        assert [a.get("missing", False) for a in doc["attributes"]] == [True, True, False, False]
        assert "outside" not in doc and "age, race" in err
    code, out, err = run([*base, "--missing", "drop"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["outside"] == "drop" and not any("missing" in a for a in doc["attributes"])
    code, out, err = run([*base, "--missing", "ignore"], capsys)
    assert code == 2 and "--missing" in err and out == ""


def test_cli_infer_names_every_undeclared_column_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], adult_raw_csv: Path
) -> None:
    code, out, err = run(["schema", "infer", "--data", str(adult_raw_csv), "--categories-from-data"], capsys)
    assert code == 2 and out == ""
    numeric = ["age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"]
    text = " ".join(err.split())  # the console may wrap the line
    assert "columns " + ", ".join(repr(n) for n in numeric) + " are numeric" in text, text


# -- schema check (NOT private) and the private commands (no exact figures) -----------------------------
def test_cli_schema_check_prints_exact_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], adult_raw_csv: Path
) -> None:
    frame = pd.read_csv(adult_raw_csv, skipinitialspace=True)
    shipped = tmp_path / "raw.json"
    adult_raw_schema().save(shipped)
    code, out, err = run(["schema", "check", str(shipped), "--data", str(adult_raw_csv), "--json"], capsys)
    assert code == 0, err
    assert "NOT PRIVATE" in err
    doc = json.loads(out)
    assert doc["private"] is False and doc["fits"] is True and doc["rows_outside"] == 0
    for name in ("workclass", "occupation", "native_country"):
        assert doc["missing"][name] == int(frame[name].isna().sum()) > 0
    # The same schema without "missing": true: every row with an empty cell lies outside, exit 1.
    strict = Schema(tuple(dataclasses.replace(a, missing=False) for a in adult_raw_schema()))
    strict_file = tmp_path / "strict.json"
    strict.save(strict_file)
    outside = int(frame.isna().any(axis=1).sum())
    assert outside == 2399
    for engine in ENGINES:
        code, out, err = run(
            ["schema", "check", str(strict_file), "--data", str(adult_raw_csv), "--engine", engine], capsys
        )
        assert code == 1
        assert "NOT PRIVATE" in err and "not private" in out.lower()
        assert f"{outside} of {len(frame)} rows" in " ".join(out.split())
        assert "1836" in out


def test_private_commands_print_no_exact_out_of_domain_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(7)
    n, outside = 5000, 4093
    frame = pd.DataFrame({"age": rng.integers(18, 26, n).astype(float), "sex": rng.choice(["F", "M"], n)})
    frame.loc[: outside - 1, "age"] = 99.0  # outside 18..25
    data = _write(tmp_path, frame)
    attributes = [
        {"name": "age", "type": "int", "min": 18, "max": 25},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
    ]
    schema_file = tmp_path / "s.json"
    schema_file.write_text(json.dumps({"attributes": attributes, "outside": "drop"}))
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "young", "where": "age < 21"}\n{"id": "f", "where": "sex = \'F\'"}\n')
    common = ["--schema", str(schema_file), "--data", str(data), "--queries", str(queries)]
    commands = [
        ["answer", *common, "--budget", "1", "--definition", "pure"],
        ["answer", *common, "--budget", "1", "--definition", "pure", "--json"],
        ["count", *common, "--exact"],
        ["count", *common, "--exact", "--json"],
    ]
    for args in commands:
        code, out, err = run(args, capsys)
        assert code == 0, err
        printed = out + err
        assert not re.search(rf"\b{outside}\b", printed), (args, printed)
        assert "outside the schema" not in printed and "missing" not in printed, (args, printed)
    # With the default policy the commands refuse, naming the attribute and no figure.
    schema_file.write_text(json.dumps({"attributes": attributes}))
    for args in commands:
        code, out, err = run(args, capsys)
        assert code == 2 and out == ""
        assert "'age'" in err and "schema check" in " ".join(err.split())
        assert not re.search(rf"\b{outside}\b", err), err


def test_answer_shows_a_missing_witness_value_as_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The worst row of a workload on the missing value is reported as SQL writes it, not Python's None.
    frame = pd.DataFrame({"work": ["a", None, "b", None], "age": [20.0, 30.0, 40.0, 50.0]})
    data = _write(tmp_path, frame)
    attributes = [
        {"name": "work", "type": "categorical", "values": ["a", "b"], "missing": True},
        {"name": "age", "type": "int", "min": 18, "max": 60},
    ]
    schema_file = tmp_path / "s.json"
    schema_file.write_text(json.dumps({"attributes": attributes}))
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "n", "where": "work IS NULL"}\n{"id": "m", "where": "work IS NULL AND age < 40"}\n'
    )
    args = ["answer", "--schema", str(schema_file), "--data", str(data), "--queries", str(queries)]
    code, out, err = run([*args, "--budget", "1", "--definition", "pure"], capsys)
    assert code == 0, err
    witness = " ".join(out.split()).split("witness row")[1]
    assert "work = NULL" in witness and "None" not in witness
