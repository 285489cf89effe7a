"""The pandas engine encodes categoricals vectorised, with the same codes as one lookup per cell.

Truth: each cell looked up by hand in the schema's value list (the per-cell rule: exact match, else
the text of a non-text value, missing for None / NaN / NA), for every way pandas holds a text column
(object, Python strings, Arrow strings, category); and the counts of the pandas engine equal Polars'
and DuckDB's on the same rows. Work is counted, not timed: the Python lookups are one per distinct
value, not one per row.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import polars as pl
import pytest

from overlapdp.engine.encoding import encode_frame
from overlapdp.engine.inputs import open_data
from overlapdp.query import parse_where
from overlapdp.schema import CategoricalAttribute, IntAttribute, Schema
from overlapdp.schema.attributes import MISSING, OUTSIDE

VALUES = ("Female", "Male", "Bogotá", "1")
CELLS = ["Female", "Male", None, "Bogotá", "female", "Male", float("nan"), "1", "Other", "Female"]


def _by_hand(cell: object, values: tuple[object, ...], missing: bool) -> int:
    if cell is None or cell is pd.NA or (isinstance(cell, float) and math.isnan(cell)):
        return len(values) if missing else MISSING
    for i, v in enumerate(values):
        if type(v) is type(cell) and v == cell:
            return i
    if not isinstance(cell, str):
        for i, v in enumerate(values):
            if v == str(cell):
                return i
    return OUTSIDE


@pytest.mark.parametrize("dtype", ["object", "string[python]", "string[pyarrow]", "category"])
@pytest.mark.parametrize("missing", [False, True])
def test_codes_equal_the_per_cell_rule(dtype: str, missing: bool) -> None:
    attr = CategoricalAttribute("c", VALUES, missing=missing)
    series = pd.Series(CELLS, dtype=dtype)
    want = [_by_hand(None if pd.isna(c) else c, VALUES, missing) for c in CELLS]
    assert attr.encode(series).tolist() == want


def test_mixed_python_objects_keep_the_text_fallback() -> None:
    """1 and 1.0 are equal in Python but their texts differ ('1', '1.0'): a column of mixed objects
    is encoded cell by cell (factorising would merge them)."""
    attr = CategoricalAttribute("c", ("1", "1.0", "True"))
    series = pd.Series([1, 1.0, True, None, "1", 2], dtype=object)
    assert attr.encode(series).tolist() == [0, 1, 2, MISSING, 0, OUTSIDE]
    numbers = CategoricalAttribute("n", (1, 2, "3"))
    assert numbers.encode(pd.Series([1.0, 2.0, 3.0, float("nan")])).tolist() == [0, 1, OUTSIDE, MISSING]
    assert numbers.encode(pd.Series([3, 1, 7])).tolist() == [2, 0, OUTSIDE]


def test_lookups_are_per_distinct_value(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    original = CategoricalAttribute._code_of

    def counted(self: CategoricalAttribute, v: object) -> int:
        calls["n"] += 1
        return original(self, v)

    monkeypatch.setattr(CategoricalAttribute, "_code_of", counted)
    attr = CategoricalAttribute("c", VALUES)
    big = pd.Series(CELLS * 5_000, dtype=object)
    codes = attr.encode(big)
    assert calls["n"] <= len({c for c in CELLS if isinstance(c, str)})
    assert codes.tolist() == [_by_hand(c, VALUES, False) for c in CELLS] * 5_000


def test_engines_agree_on_text_columns() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    schema = Schema(
        (
            IntAttribute("age", 17, 90),
            CategoricalAttribute("sex", ("Female", "Male"), missing=True),
            CategoricalAttribute("city", ("Bogotá", "Köln", "Málaga", "Zürich")),
        ),
        outside="drop",
    )
    sex = rng.choice(np.array(["Female", "Male", None], dtype=object), n, p=[0.45, 0.45, 0.1])
    city = rng.choice(np.array(["Bogotá", "Köln", "Málaga", "Zürich", "Paris"], dtype=object), n)
    frame = pd.DataFrame({"age": rng.integers(10, 95, n), "sex": sex, "city": city})
    queries = [
        parse_where(schema, w)
        for w in (
            "sex = 'Female' AND age BETWEEN 20 AND 39",
            "sex IS NULL",
            "city IN ('Köln', 'Zürich') AND age >= 50",
            "NOT (city = 'Bogotá')",
        )
    ]
    inside = frame["age"].between(17, 90) & frame["city"].isin(["Bogotá", "Köln", "Málaga", "Zürich"])
    by_hand = [
        int((inside & (frame["sex"] == "Female") & frame["age"].between(20, 39)).sum()),
        int((inside & frame["sex"].isna()).sum()),
        int((inside & frame["city"].isin(["Köln", "Zürich"]) & (frame["age"] >= 50)).sum()),
        int((inside & (frame["city"] != "Bogotá")).sum()),
    ]
    inputs = {
        "pandas": [frame, frame.astype({"sex": "string[pyarrow]", "city": "category"})],
        "polars": [pl.from_pandas(frame)],
        "duckdb": [frame],
    }
    for engine, frames in inputs.items():
        for data in frames:
            with open_data(data, schema, engine=engine) as eng:
                assert eng.counts(queries) == by_hand, engine
    table = encode_frame(schema, frame)
    assert table.codes.flags.f_contiguous  # each attribute's column is contiguous
    assert int(table.in_domain.sum()) == int(inside.sum())
