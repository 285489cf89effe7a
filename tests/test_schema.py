"""Schemas: JSON forms, the compact Adult form, inference with declared bounds, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from overlapdp.errors import DataError, OverlapDPError, SchemaError
from overlapdp.samples import adult_raw_schema, adult_schema
from overlapdp.schema import (
    BinnedAttribute,
    CategoricalAttribute,
    IntAttribute,
    Schema,
    infer_schema,
    read_table,
)

FULL = {
    "attributes": [
        {"name": "age", "type": "int", "min": 17, "max": 90},
        {"name": "race", "type": "categorical", "values": ["White", "Black", "Other"]},
        {"name": "capital_gain", "type": "binned", "edges": [0, 1, 5000, 100000]},
    ]
}


def test_full_form_round_trip() -> None:
    s = Schema.from_json(FULL)
    assert s.names == ("age", "race", "capital_gain")
    assert s.sizes == (74, 3, 3)
    assert s.domain_size == 74 * 3 * 3
    assert Schema.from_json(s.to_json()) == s
    gain = s.attribute("capital_gain")
    assert isinstance(gain, BinnedAttribute)
    assert [gain.index_of(v) for v in (-1, 0, 0.5, 1, 4999, 5000, 99999, 100000)] == [
        None,
        0,
        0,
        1,
        1,
        2,
        2,
        None,
    ]
    assert s.attribute("age").index_of(17) == 0 and s.attribute("age").index_of(91) is None
    assert s.attribute("race").index_of("Black") == 1 and s.attribute("race").index_of("Martian") is None


def test_compact_form_matches_shared_adult_domain(adult_domain_json: Path) -> None:
    s = Schema.load(adult_domain_json)
    raw = json.loads(adult_domain_json.read_text())
    assert list(s.names) == list(raw)
    assert list(s.sizes) == list(raw.values())
    assert all(isinstance(a, IntAttribute) and a.min == 0 for a in s)
    assert s == adult_schema()


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ({"attributes": []}, "at least one attribute"),
        ({"attributes": [{"name": "r", "type": "categorical", "values": []}]}, "'r' is empty"),
        (
            {"attributes": [{"name": "a", "type": "int", "min": 0, "max": 3}] * 2},
            "duplicate attribute name 'a'",
        ),
        ({"attributes": [{"name": "a", "type": "int", "min": 5, "max": 3}]}, "'a': min 5 > max 3"),
        (
            {"attributes": [{"name": "g", "type": "binned", "edges": [0, 10, 5]}]},
            "'g': edges must be strictly",
        ),
        ({"attributes": [{"name": "g", "type": "binned", "edges": [0]}]}, "'g': a binned attribute needs"),
        ({"attributes": [{"name": "g", "type": "float"}]}, "unknown type 'float'"),
        ({"attributes": [{"name": "a", "type": "int", "min": 0}]}, "needs the field 'max'"),
        ({"attributes": [{"type": "int", "min": 0, "max": 1}]}, "needs a non-empty 'name'"),
        ({"age": 0}, "'age' is empty"),
        ({"age": "x"}, "integer size"),
        ([1, 2], "must be a JSON object"),
        (
            {"attributes": [{"name": "c", "type": "categorical", "values": ["x", "x"]}]},
            "'c': duplicate value",
        ),
    ],
)
def test_bad_schemas_raise_one_clear_error(obj: object, fragment: str) -> None:
    with pytest.raises(SchemaError) as info:
        Schema.from_json(obj)
    assert fragment in str(info.value)
    assert isinstance(info.value, OverlapDPError)
    assert "\n" not in str(info.value)


def test_load_reports_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match=r"s\.json"):
        Schema.load(bad)
    with pytest.raises(SchemaError, match="cannot read schema file"):
        Schema.load(tmp_path / "missing.json")


def test_infer_needs_declared_bounds() -> None:
    frame = pd.DataFrame({"age": [20, 30, 95], "race": ["W", "B", "W"], "gain": [0.0, 10.5, 7.0]})
    # Every column that needs a declaration is named in one run.
    with pytest.raises(
        SchemaError,
        match=r"columns 'age', 'gain' are numeric: declare their bounds.*leaks.*'race' holds text",
    ):
        infer_schema(frame)
    with pytest.raises(SchemaError, match=r"column 'age' is numeric: declare its bounds.*leaks"):
        infer_schema(frame, edges={"gain": [0, 5, 20]}, categories={"race": ["W", "B"]})
    with pytest.raises(SchemaError, match="'race' holds text: declare its categories"):
        infer_schema(frame, bounds={"age": (0, 99)}, edges={"gain": [0, 5, 20]})
    s = infer_schema(
        frame, bounds={"age": (0, 99)}, edges={"gain": [0, 5, 20]}, categories={"race": ["W", "B", "A"]}
    )
    assert s.names == ("age", "race", "gain")
    assert isinstance(s.attribute("race"), CategoricalAttribute) and s.attribute("race").size == 3
    # The declared bounds hold even though the data has no row at 0 or 99 (nothing read off the data).
    assert s.attribute("age").size == 100
    s2 = infer_schema(frame, bounds={"age": (0, 99)}, edges={"gain": [0, 5, 20]}, categories_from_data=True)
    assert s2.attribute("race").size == 2
    with pytest.raises(SchemaError, match="'nope' is not a column"):
        infer_schema(frame, bounds={"nope": (0, 1)})


def test_read_table_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.csv.*empty"):
        read_table(empty)
    with pytest.raises(DataError, match="does not exist"):
        read_table(tmp_path / "nope.csv")
    garbage = tmp_path / "bad.parquet"
    garbage.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"bad\.parquet"):
        read_table(garbage)


def test_raw_adult_schema_covers_the_raw_file(adult_raw_frame: pd.DataFrame) -> None:
    s = adult_raw_schema()
    assert set(s.names) == set(adult_raw_frame.columns)
    for a in s:
        codes = a.encode(adult_raw_frame[a.name])
        # Every value fits: the documented missing values ('?' left empty) take the missing index of
        # the three attributes that allow one, and no other attribute has a missing cell.
        assert (codes < 0).sum() == 0, a.name
        missing = int(adult_raw_frame[a.name].isna().sum())
        assert a.missing == (a.name in ("workclass", "occupation", "native_country")), a.name
        assert (codes == a.null_index).sum() == missing and (missing > 0) == a.missing, a.name
