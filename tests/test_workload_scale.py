"""Reading workloads at scale (issue 22 item 6): each distinct condition is parsed once.

Truth: every line read on its own by ``parse_line`` (no sharing between lines), the reader's result
compared query by query, and its errors compared with the line-by-line ones.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from overlapdp.errors import OverlapDPError
from overlapdp.query import Workload, jsonform, parse_line
from overlapdp.query.aggregate import COUNT
from overlapdp.schema import CategoricalAttribute, IntAttribute, Schema

SCHEMA = Schema(
    (
        IntAttribute("age", 0, 99),
        CategoricalAttribute("sex", ("F", "M")),
        IntAttribute("flag", 0, 1),
    )
)

LINES: list[dict[str, Any]] = [
    {"id": "a", "conditions": {"age": {"range": [10, 20]}}},
    {"id": 7, "conditions": {"age": {"range": [10, 20]}}, "weight": 2},
    {"conditions": {"age": {"range": [10, 20]}}, "weight": 0.5},
    {"id": "b", "conditions": {"flag": {"eq": 1}}},
    {"id": "c", "conditions": {"flag": {"eq": 1.0}}},
    {"id": "d", "conditions": {"flag": {"in": [0]}}},
    {"id": "e", "conditions": {"flag": {"eq": 1}}, "text": "flag = 1"},
    {"id": "f", "where": "age BETWEEN 10 AND 20 AND sex = 'M'"},
    {"id": "g", "where": "age BETWEEN 10 AND 20 AND sex = 'M'", "weight": 3.25},
    {"id": "h", "where": "age BETWEEN 10 AND 20 AND sex = 'F'"},
    {"id": "i", "conditions": {"age": {"range": [10, 20]}, "sex": {"eq": "M"}}},
    {"id": "j", "conditions": {"sex": {"eq": "M"}, "age": {"range": [10, 20]}}},
    {"id": "k", "conditions": {"age": {"range": [10, 20]}}, "aggregate": "count"},
    {"id": "l", "group_by": ["sex"], "where": "age < 30"},
    {"id": "m", "conditions": {"age": {"range": [10, 20]}}},
]


def one_by_one(lines: list[dict[str, Any]]) -> list[Any]:
    out = []
    for n, obj in enumerate(lines, start=1):
        q, agg = parse_line(SCHEMA, obj, id=f"line{n}" if "id" not in obj else None)
        out.append((q, agg))
    return out


def test_shared_conditions_give_the_queries_of_line_by_line_reading() -> None:
    w = Workload.from_lines(SCHEMA, [json.dumps(x) for x in LINES])
    expected = []
    for q, agg in one_by_one(LINES):
        cells = getattr(q, "cells", None)
        expected += [(c, agg) for c in cells] if cells is not None else [(q, agg)]
    assert len(w.queries) == len(expected)
    for i, (got, (want, agg)) in enumerate(zip(w.queries, expected, strict=True)):
        assert got == want
        assert got.text == want.text
        assert w.aggregate(i) == agg
    # The flat form shared between lines is the one each query would compute for itself.
    from overlapdp.overlap._compiled import _flat

    for q in w.queries:
        blob = q._overlap_flat
        object.__setattr__(q, "_overlap_flat", None)
        assert blob is None or _flat(q) == blob


def test_plain_workload_keeps_no_aggregates_and_families_stay() -> None:
    plain = Workload.from_lines(SCHEMA, [json.dumps(x) for x in LINES[:4]])
    assert plain.aggregates == () and plain.families == ()
    mixed = Workload.from_lines(SCHEMA, [json.dumps(x) for x in LINES])
    assert len(mixed.families) == 1
    assert mixed.aggregate(0) == COUNT


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "z", "conditions": {"age": {"range": [10, 20]}}, "weight": -1},
        {"id": "z", "conditions": {"age": {"range": [10, 20]}}, "weight": "2"},
        {"id": "z", "conditions": {"age": {"range": [10, 20]}}, "weight": True},
        {"id": True, "conditions": {"age": {"range": [10, 20]}}},
        {"id": None, "conditions": {"age": {"range": [10, 20]}}},
        {"id": "a", "conditions": {"age": {"range": [10, 20]}}},
        {"id": "z", "where": "age BETWEEN 10 AND 20 AND sex = 'M'", "weight": 1e400},
        {"id": "z", "conditions": {"age": {"range": [10, 20]}}, "wieght": 2},
    ],
)
def test_a_bad_line_after_its_condition_was_seen_fails_as_on_its_own(bad: dict[str, Any]) -> None:
    """The shared path checks ids and weights as the full reader does: a repeated condition with a
    bad weight or id fails with the message of the line read on its own (or of the workload)."""
    # (1e400 is read as an infinite float)
    lines = [json.dumps(x) for x in LINES[:9]] + [json.dumps(bad).replace("Infinity", "1e400")]
    with pytest.raises(OverlapDPError) as shared:
        Workload.from_lines(SCHEMA, lines, source="w")
    with pytest.raises(OverlapDPError) as alone:
        Workload.from_lines(SCHEMA, [lines[0], lines[-1]], source="w")
    assert str(shared.value).replace("line 10", "line 2") == str(alone.value)


def test_each_distinct_condition_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting work, not time: 3 000 lines over 30 distinct ranges parse 30 conditions (it was one
    per line: 100 000 lines took 9 s in the CLI)."""
    calls = 0
    real = jsonform.parse_conditions

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr("overlapdp.query.workload.parse_conditions", counted)
    lines = [
        json.dumps({"id": f"q{i}", "conditions": {"age": {"range": [i % 30, 40 + i % 30]}}})
        for i in range(3000)
    ]
    w = Workload.from_lines(SCHEMA, lines)
    assert len(w) == 3000
    assert calls == 30
