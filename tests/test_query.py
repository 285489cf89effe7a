"""Predicate queries: parsed coverage equals an independent SQL engine's answer on every domain point."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.errors import OverlapDPError, QueryError, QuerySyntaxError, WorkloadError
from overlapdp.query import (
    Equals,
    InSet,
    Not,
    PredicateQuery,
    Range,
    Tautology,
    Workload,
    joint_coverage,
    parse_query,
    parse_where,
)
from overlapdp.schema import Schema
from strategies import all_rows, representative, schemas, where_clauses


def sqlite_rows(schema: Schema, where: str) -> set[tuple[int, ...]]:
    """Domain points (as value indices) that SQLite accepts for ``where``: independent truth."""
    con = sqlite3.connect(":memory:")
    cols = ", ".join(f'"{a.name}"' for a in schema)
    con.execute(f"CREATE TABLE d (rid INTEGER, {cols})")
    rows = all_rows(schema)
    con.executemany(
        f"INSERT INTO d VALUES ({', '.join('?' * (len(schema) + 1))})",
        [(i, *(representative(a, v) for a, v in zip(schema, r, strict=True))) for i, r in enumerate(rows)],
    )
    accepted = {rid for (rid,) in con.execute(f"SELECT rid FROM d WHERE {where}")}
    return {rows[i] for i in accepted}


@st.composite
def schema_and_where(draw: st.DrawFn) -> tuple[Schema, str]:
    s = draw(schemas())
    return s, draw(where_clauses(s))


@given(schema_and_where())
def test_coverage_equals_sqlite_on_every_domain_point(case: tuple[Schema, str]) -> None:
    schema, where = case
    q = parse_where(schema, where)
    covered = {r for r in all_rows(schema) if q.covers(r)}
    assert covered == sqlite_rows(schema, where)
    assert q.size == len(covered)
    assert q.is_contradiction == (not covered)


@given(st.data())
def test_disjointness_and_joint_coverage_agree_with_brute_force(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    a = parse_where(schema, data.draw(where_clauses(schema)))
    b = parse_where(schema, data.draw(where_clauses(schema)))
    both = {r for r in all_rows(schema) if a.covers(r) and b.covers(r)}
    assert a.disjoint(b) == (not both) == b.disjoint(a)
    joint = joint_coverage([a, b])
    if joint is None:
        assert not both
    else:
        assert set(itertools.product(*joint)) == both


@given(st.data())
def test_json_form_round_trips(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    q = parse_where(schema, data.draw(where_clauses(schema)), id="x")
    back = parse_query(schema, q.to_json())
    assert back.coverages() == q.coverages()
    assert back.id == "x"


SCHEMA = Schema.from_json(
    {
        "attributes": [
            {"name": "age", "type": "int", "min": 17, "max": 90},
            {"name": "race", "type": "categorical", "values": ["White", "Black", "Other"]},
            {"name": "capital_gain", "type": "binned", "edges": [0, 1, 5000, 100000]},
            {"name": "education-num", "type": "int", "min": 1, "max": 16},
        ]
    }
)


def test_json_conditions_and_builders_agree_with_sql() -> None:
    by_json = parse_query(SCHEMA, {"conditions": {"age": {"range": [30, 39]}, "race": {"in": ["White"]}}})
    by_sql = parse_where(SCHEMA, "age BETWEEN 30 AND 39 AND race = 'White'")
    by_api = PredicateQuery.build(SCHEMA, {"age": Range(30, 39), "race": Equals("White")})
    assert by_json.coverages() == by_sql.coverages() == by_api.coverages()
    q = parse_query(SCHEMA, {"conditions": {"race": {"not": {"eq": "Black"}}, "capital_gain": {"ge": 1}}})
    assert q.coverages() == parse_where(SCHEMA, "race != 'Black' AND capital_gain >= 1").coverages()
    assert PredicateQuery.build(SCHEMA, {"race": Not(InSet(["White", "Other"]))}).coverage(
        "race"
    ) == parse_where(SCHEMA, "race = 'Black'").coverage("race")
    assert PredicateQuery.build(SCHEMA, {"age": Tautology()}).constraints == ()


def test_bounds_outside_the_domain_clip_and_valid_contradictions_stay_legal() -> None:
    # Values outside the domain are errors (test_query_limits.py); a bound outside it only clips.
    assert (
        parse_where(SCHEMA, "age >= 80 AND age <= 500").size
        == parse_where(SCHEMA, "age BETWEEN 80 AND 90").size
        == 11 * 3 * 3 * 16
    )
    assert parse_where(SCHEMA, 'age < 18 AND "education-num" = 3').size == 1 * 3 * 3 * 1
    assert parse_where(SCHEMA, "age BETWEEN -5 AND 500").constraints == ()
    for empty in ("age > 30 AND age < 20", "race = 'White' AND race = 'Black'", "NOT age >= 0", "age IN ()"):
        assert parse_where(SCHEMA, empty).is_contradiction, empty


@pytest.mark.parametrize(
    ("where", "error", "fragment"),
    [
        ("height > 3", QueryError, "unknown attribute 'height'"),
        ("age >", QuerySyntaxError, "cannot parse"),
        ("age BETWEEN AND", QuerySyntaxError, "cannot parse"),
        ("age = 3 OR race = 'White'", QueryError, "OR across attributes (age, race)"),
        ("race < 'White'", QueryError, "'race' is categorical"),
        ("race BETWEEN 'a' AND 'b'", QueryError, "'race' is categorical"),
        ("NOT (age = 3 AND race = 'White')", QueryError, "NOT over several attributes"),
        ("age = 'old'", QueryError, "'age' is numeric"),
        ("capital_gain < 2500", QueryError, "splits the bin [1, 5000)"),
        ("age + 1 > 3", QueryError, "compare an attribute with a constant"),
        ("age = race", QueryError, "quote text values"),
        ("age LIKE '3%'", QueryError, "unsupported condition"),
        ("", QuerySyntaxError, "empty condition"),
    ],
)
def test_bad_conditions(where: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        parse_where(SCHEMA, where, id="q7")
    assert fragment in str(info.value)
    assert "q7" in str(info.value) or isinstance(info.value, QuerySyntaxError)
    assert isinstance(info.value, OverlapDPError)


def test_same_attribute_or_and_flipped_comparisons() -> None:
    q = parse_where(SCHEMA, "(age < 20 OR age > 85) AND 5000 <= capital_gain")
    assert q.coverage("age").intervals == ((0, 3), (69, 74))
    assert q.coverage("capital_gain").intervals == ((2, 3),)
    assert parse_where(SCHEMA, "FALSE").is_contradiction
    assert parse_where(SCHEMA, "TRUE OR age = 3").constraints == ()


def test_workload_jsonl(tmp_path: Path) -> None:
    f = tmp_path / "w.jsonl"
    f.write_text(
        '{"where": "age < 30", "id": "young", "weight": 2}\n'
        "\n# a comment\n"
        '{"conditions": {"race": {"in": ["Black"]}}}\n'
    )
    w = Workload.read_jsonl(SCHEMA, f)
    assert w.ids == ["young", "line4"]
    assert w.weights == [2.0, 1.0]
    for bad, fragment in [
        ('{"where": "age < 30", "weight": -1}', "weight must be a finite non-negative"),
        ('{"where": "age < 30", "weight": "NaN"}', "weight must be a number, got str"),
        ('{"where": "age < 30", "weight": NaN}', "weight must be a finite non-negative"),
        ('{"where": "age < 30"', "line 1: not valid JSON"),
        ('{"where": "age < 30", "conditions": {}}', "exactly one of"),
        ('{"where": "age < 30", "id": "a"}\n{"where": "age < 31", "id": "a"}', "duplicate query id 'a'"),
        ('{"where": "zzz = 1"}', "line 1: query 'line1': unknown attribute 'zzz'"),
    ]:
        f.write_text(bad + "\n")
        with pytest.raises(OverlapDPError) as info:
            Workload.read_jsonl(SCHEMA, f)
        assert fragment in str(info.value), (bad, str(info.value))
    with pytest.raises(WorkloadError, match="cannot read workload file"):
        Workload.read_jsonl(SCHEMA, tmp_path / "missing.jsonl")
