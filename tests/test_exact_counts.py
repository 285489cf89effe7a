"""Exact counts on UCI Adult (integer-coded and raw) against independent pandas boolean masks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from overlapdp.engine import encode_frame, exact_counts
from overlapdp.errors import DataError
from overlapdp.query import Workload, parse_where
from overlapdp.samples import adult_raw_schema, adult_schema

Mask = Callable[[pd.DataFrame], "pd.Series[bool]"]

CODED: list[tuple[str, Mask]] = [
    ("age BETWEEN 20 AND 29", lambda d: d["age"].between(20, 29)),
    ("age < 10", lambda d: d["age"] < 10),
    ("age >= 60", lambda d: d["age"] >= 60),
    ("age > 30 AND age <= 31", lambda d: (d["age"] > 30) & (d["age"] <= 31)),
    ("age != 5", lambda d: d["age"] != 5),
    ("sex = 1", lambda d: d["sex"] == 1),
    ("race IN (1, 2, 4)", lambda d: d["race"].isin([1, 2, 4])),
    ("race NOT IN (0)", lambda d: ~d["race"].isin([0])),
    ("NOT (race = 0 OR race = 1)", lambda d: ~d["race"].isin([0, 1])),
    (
        '"education-num" >= 13 AND "income>50K" = 1',
        lambda d: (d["education-num"] >= 13) & (d["income>50K"] == 1),
    ),
    (
        '"hours-per-week" BETWEEN 35 AND 45 AND sex = 0',
        lambda d: d["hours-per-week"].between(35, 45) & (d["sex"] == 0),
    ),
    ('"capital-gain" > 0', lambda d: d["capital-gain"] > 0),
    (
        '"marital-status" IN (0, 2) AND relationship = 3',
        lambda d: d["marital-status"].isin([0, 2]) & (d["relationship"] == 3),
    ),
    ('"native-country" = 0 AND age < 20', lambda d: (d["native-country"] == 0) & (d["age"] < 20)),
    (
        "occupation IN (1, 3, 5, 7) AND workclass != 0",
        lambda d: d["occupation"].isin([1, 3, 5, 7]) & (d["workclass"] != 0),
    ),
    ("fnlwgt < 50 AND fnlwgt >= 10", lambda d: d["fnlwgt"].between(10, 49)),
    ("(age < 5 OR age > 70) AND sex = 0", lambda d: ((d["age"] < 5) | (d["age"] > 70)) & (d["sex"] == 0)),
    ("age > 70 AND age < 5", lambda d: (d["age"] > 70) & (d["age"] < 5)),
    ("TRUE", lambda d: d["age"] >= 0),
]

RAW: list[tuple[str, Mask]] = [
    ("age BETWEEN 30 AND 39 AND race = 'White'", lambda d: d["age"].between(30, 39) & (d["race"] == "White")),
    ("sex = 'Female' AND income = '>50K'", lambda d: (d["sex"] == "Female") & (d["income"] == ">50K")),
    ("workclass IN ('Private', 'State-gov')", lambda d: d["workclass"].isin(["Private", "State-gov"])),
    ("workclass NOT IN ('Private')", lambda d: d["workclass"].notna() & (d["workclass"] != "Private")),
    ("capital_gain >= 5000", lambda d: d["capital_gain"] >= 5000),
    ("capital_gain < 1", lambda d: d["capital_gain"] == 0),
    ("capital_gain >= 1 AND capital_gain < 5000", lambda d: d["capital_gain"].between(1, 4999)),
    ("capital_loss >= 1000 AND sex = 'Male'", lambda d: (d["capital_loss"] >= 1000) & (d["sex"] == "Male")),
    ("fnlwgt >= 100000 AND fnlwgt < 200000", lambda d: d["fnlwgt"].between(100000, 199999)),
    (
        "education IN ('Bachelors', 'Masters', 'Doctorate')",
        lambda d: d["education"].isin(["Bachelors", "Masters", "Doctorate"]),
    ),
    (
        "education_num >= 13 AND hours_per_week > 50",
        lambda d: (d["education_num"] >= 13) & (d["hours_per_week"] > 50),
    ),
    (
        "native_country != 'United-States'",
        lambda d: d["native_country"].notna() & (d["native_country"] != "United-States"),
    ),
    (
        "occupation = 'Sales' AND occupation = 'Exec-managerial'",
        lambda d: (d["occupation"] == "Sales") & (d["occupation"] == "Exec-managerial"),
    ),
    (
        "marital_status = 'Never-married' AND age < 25",
        lambda d: (d["marital_status"] == "Never-married") & (d["age"] < 25),
    ),
    (
        "NOT (relationship = 'Husband') AND race != 'White'",
        lambda d: (d["relationship"] != "Husband") & (d["race"] != "White"),
    ),
]


def _in_domain(frame: pd.DataFrame) -> pd.Series[bool]:
    return frame.notna().all(axis=1)


@pytest.mark.parametrize("case", range(len(CODED)))
def test_coded_adult_counts(adult_frame: pd.DataFrame, case: int) -> None:
    where, mask = CODED[case]
    q = parse_where(adult_schema(), where)
    assert exact_counts([q], adult_frame) == [int(mask(adult_frame).sum())]


def test_raw_adult_counts_in_one_batch(adult_raw_frame: pd.DataFrame) -> None:
    schema = adult_raw_schema()
    workload = Workload.of(schema, [w for w, _ in RAW])
    # The shipped schema allows missing workclass, occupation and native_country: no row is dropped,
    # and a comparison (also != and NOT IN, SQL's three-valued logic) never matches a missing value.
    expected = [int(mask(adult_raw_frame).sum()) for _, mask in RAW]
    table = encode_frame(schema, adult_raw_frame)
    assert exact_counts(workload, table) == expected
    assert table.rows == len(adult_raw_frame)
    assert table.out_of_domain == 0 and int((~_in_domain(adult_raw_frame)).sum()) > 0


def test_missing_column_and_unmappable_values() -> None:
    schema = adult_schema()
    frame = pd.DataFrame({"age": [1, 2]})
    with pytest.raises(DataError, match="'workclass'"):
        encode_frame(schema, frame)
    small = adult_raw_schema()
    raw = pd.DataFrame({a.name: [None] for a in small})
    raw["age"] = ["forty"]
    with pytest.raises(DataError, match="column 'age': 1 value"):
        encode_frame(small, raw)


def test_out_of_domain_rows_match_no_query() -> None:
    schema = adult_schema()
    frame = pd.DataFrame({a.name: np.zeros(3, dtype=int) for a in schema})
    frame.loc[1, "age"] = 85  # outside 0..84
    frame.loc[2, "race"] = -1
    table = encode_frame(schema, frame)
    assert table.out_of_domain == 2
    assert table.out_of_domain_by_attribute["age"] == 1
    assert exact_counts([parse_where(schema, "TRUE")], table) == [1]
