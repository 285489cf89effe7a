"""Random workloads for the engine tests, each condition with its own pandas mask over the raw columns
(the truth is computed WITHOUT the schema mapping), and a frame with out-of-domain and missing values.

Used by test_engines.py (DuckDB, pandas, Polars) and test_engine_spark.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import BinnedAttribute, CategoricalAttribute, IntAttribute, Schema

Mask = Callable[[pd.DataFrame], "pd.Series[bool]"]


# -- random workloads with their own pandas masks ------------------------------------------------------
def _q(name: str) -> str:
    return '"' + name + '"'


def _lit(v: Any) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else repr(v)


def random_condition(rng: random.Random, attr: Any) -> tuple[str, Mask]:
    """One condition on ``attr`` as SQL text and as an independent pandas mask over the raw column.

    Values lie in the domain and every range covers some value (anything else is an error, see
    test_query_limits.py); range bounds may still lie just outside the domain."""
    n = attr.name
    c = _q(n)
    if attr.missing and rng.random() < 0.25:
        # SQL semantics, computed on the raw column: NaN / None is the missing value.
        if rng.random() < 0.5:
            return f"{c} IS NULL", lambda d: d[n].isna()
        return f"{c} IS NOT NULL", lambda d: d[n].notna()
    if isinstance(attr, CategoricalAttribute):
        pool = list(attr.values)
        vals = rng.sample(pool, rng.randint(1, min(4, len(pool))))
        op = rng.choice(["=", "!=", "IN", "NOT IN"])
        if op in ("=", "!="):
            v = vals[0]
            if op == "=":
                return f"{c} = {_lit(v)}", lambda d: d[n] == v
            # Three-valued logic: != is never true of a missing value (pandas' != would say True).
            return f"{c} != {_lit(v)}", lambda d: (d[n] != v) & d[n].notna()
        text = f"{c} {op} ({', '.join(_lit(v) for v in vals)})"
        if op == "IN":
            return text, lambda d: d[n].isin(vals)
        return text, lambda d: ~d[n].isin(vals) & d[n].notna()
    if isinstance(attr, BinnedAttribute):
        edges = list(attr.edges)
        a, b = sorted(rng.sample(range(len(edges)), 2))
        lo, hi = edges[a], edges[b]
        op = rng.choice(["range", "<", ">="])
        if op == "range":
            return f"{c} >= {lo} AND {c} < {hi}", lambda d: (d[n] >= lo) & (d[n] < hi)
        if op == "<":
            return f"{c} < {hi}", lambda d: d[n] < hi
        return f"{c} >= {lo}", lambda d: d[n] >= lo
    assert isinstance(attr, IntAttribute)
    lo_d, hi_d = attr.min - 2, attr.max + 2
    op = rng.choice(["between", "<", ">=", ">", "=", "!=", "IN", "NOT IN"])
    x, y = sorted((rng.randint(lo_d, attr.max), rng.randint(attr.min, hi_d)))
    if op in ("=", "!="):
        x = rng.randint(attr.min, attr.max)
    if op == "<":
        y = max(y, attr.min + 1)
    if op == ">":
        x = min(x, attr.max - 1)
    if op == "between":
        return f"{c} BETWEEN {x} AND {y}", lambda d: d[n].between(x, y)
    if op == "<":
        return f"{c} < {y}", lambda d: d[n] < y
    if op == ">=":
        return f"{c} >= {x}", lambda d: d[n] >= x
    if op == ">":
        return f"{c} > {x}", lambda d: d[n] > x
    if op == "=":
        return f"{c} = {x}", lambda d: d[n] == x
    if op == "!=":
        return f"{c} != {x}", lambda d: (d[n] != x) & d[n].notna()
    vals = [rng.randint(attr.min, attr.max) for _ in range(rng.randint(1, 5))]
    text = f"{c} {op} ({', '.join(str(v) for v in vals)})"
    if op == "IN":
        return text, lambda d: d[n].isin(vals)
    return text, lambda d: ~d[n].isin(vals) & d[n].notna()


def random_workload(
    schema: Schema, count: int, seed: int, max_conditions: int = 3
) -> list[tuple[str, list[Mask]]]:
    """``count`` conjunctions of 0..max_conditions conditions on distinct attributes."""
    rng = random.Random(seed)
    out: list[tuple[str, list[Mask]]] = []
    for _ in range(count):
        k = rng.randint(0, max_conditions)
        attrs = rng.sample(list(schema.attributes), k)
        parts = [random_condition(rng, a) for a in attrs]
        out.append((" AND ".join(p[0] for p in parts) or "TRUE", [p[1] for p in parts]))
    return out


def inside_domain(schema: Schema, frame: pd.DataFrame) -> pd.Series:
    """Rows whose every value lies in the schema's declared domain (from the declarations, not encode)."""
    ok = pd.Series(True, index=frame.index)
    for attr in schema:
        col = frame[attr.name]
        # A missing value fits where the schema allows one.
        allowed = col.isna() if attr.missing else pd.Series(False, index=frame.index)
        if isinstance(attr, CategoricalAttribute):
            ok &= col.isin(list(attr.values)) | allowed
        elif isinstance(attr, IntAttribute):
            num = pd.to_numeric(col)
            ok &= (num.between(attr.min, attr.max) & (num == np.floor(num))) | allowed
        else:
            num = pd.to_numeric(col)
            ok &= ((num >= attr.edges[0]) & (num < attr.edges[-1])) | allowed
    return ok


def truth(schema: Schema, frame: pd.DataFrame, workload: list[tuple[str, list[Mask]]]) -> list[int]:
    inside = inside_domain(schema, frame)
    out = []
    for _, masks in workload:
        m = inside.copy()
        for mask in masks:
            m &= mask(frame).fillna(False).astype(bool)
        out.append(int(m.sum()))
    return out


def parsed(schema: Schema, workload: list[tuple[str, list[Mask]]]) -> list[PredicateQuery]:
    return [parse_where(schema, text, id=f"q{i}") for i, (text, _) in enumerate(workload)]


REPORT_SCHEMA = Schema(
    (
        IntAttribute("age", 18, 90),
        CategoricalAttribute("color", ("red", "green")),
        BinnedAttribute("pay", (0.0, 10.0, 100.0)),
    ),
    outside="drop",
)
REPORT_FRAME = pd.DataFrame(
    {
        # 17 below the range, 30.5 not an integer, NaN missing
        "age": [20.0, 17.0, 30.5, np.nan, 40.0, 50.0, 60.0],
        # 'blue' unknown, None missing
        "color": ["red", "red", "green", "green", "blue", None, "red"],
        # 100 at the top edge is outside, -1 below, NaN missing
        "pay": [5.0, 5.0, 50.0, 50.0, 5.0, 100.0, np.nan],
    }
)

SECRET = "Secret-Value-123"


# Raw Adult (strings, missing values as empty cells): SQL text and an independent pandas mask each.
RAW_QUERIES: list[tuple[str, Any]] = [
    # The example: names no attribute with missing values, so rows with missing workclass count.
    ("age BETWEEN 17 AND 26 AND sex = 'Female'", lambda d: d["age"].between(17, 26) & (d["sex"] == "Female")),
    ("TRUE", lambda d: pd.Series(True, index=d.index)),
    ("workclass IS NULL", lambda d: d["workclass"].isna()),
    ("workclass IS NOT NULL", lambda d: d["workclass"].notna()),
    ("workclass IS NULL AND occupation IS NULL", lambda d: d["workclass"].isna() & d["occupation"].isna()),
    (
        "occupation IS NULL AND workclass IS NOT NULL",
        lambda d: d["occupation"].isna() & d["workclass"].notna(),
    ),
    ("workclass != 'Private'", lambda d: d["workclass"].notna() & (d["workclass"] != "Private")),
    ("NOT (workclass = 'Private')", lambda d: d["workclass"].notna() & (d["workclass"] != "Private")),
    (
        "workclass = 'Private' OR workclass IS NULL",
        lambda d: (d["workclass"] == "Private") | d["workclass"].isna(),
    ),
    (
        "native_country NOT IN ('United-States', 'Mexico') AND age < 30",
        lambda d: (
            d["native_country"].notna()
            & ~d["native_country"].isin(["United-States", "Mexico"])
            & (d["age"] < 30)
        ),
    ),
    (
        "native_country IS NULL AND income = '>50K'",
        lambda d: d["native_country"].isna() & (d["income"] == ">50K"),
    ),
]
