"""SQL for the engines that run SQL (DuckDB, Spark): the schema mapping, atom mapping and conditions.

Each attribute's column is mapped to its value index by a CASE expression pushed into the engine:
a missing value (NULL or NaN) maps to the attribute's missing index (the last) when the schema allows
it and to ``-2`` otherwise, a present value outside the domain to ``-1``. The
semantics are those of :meth:`overlapdp.schema.Attribute.encode` (the pandas reference):

- int ``min..max``: a finite integral number ``v`` in range maps to ``v - min``;
- binned: ``v`` in ``[edges[0], edges[-1])`` maps to its bin (a balanced tree of comparisons);
- categorical: equal values map to their index; on a numeric column a text category matches the
  number's text (``1`` matches ``'1'``), as pandas' lookup of ``str(v)`` does; on a text column only
  text categories match.

Literals in the generated SQL come from the schema and the queries, never from the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from overlapdp.errors import DataError
from overlapdp.schema import (
    Attribute,
    BinnedAttribute,
    CategoricalAttribute,
    IndexSet,
    IntAttribute,
    Schema,
)
from overlapdp.schema.attributes import MISSING, OUTSIDE

ColumnKind = Literal["int", "float", "string", "bool", "other"]


@dataclass(frozen=True)
class Dialect:
    """The few places where DuckDB's and Spark's SQL differ."""

    name: Literal["duckdb", "spark"]

    def quote(self, column: str) -> str:
        if self.name == "spark":
            return "`" + column.replace("`", "``") + "`"
        return '"' + column.replace('"', '""') + '"'

    def to_double(self, expr: str, kind: ColumnKind) -> str:
        if kind == "string":
            return f"TRY_CAST({expr} AS DOUBLE)"
        return f"CAST({expr} AS DOUBLE)"

    def is_nan(self, expr: str) -> str:
        return f"isnan({expr})"

    def is_finite(self, expr: str) -> str:
        if self.name == "spark":
            return f"(NOT isnan({expr}) AND abs({expr}) < double('Infinity'))"
        return f"isfinite({expr})"

    def to_text(self, expr: str) -> str:
        return f"CAST({expr} AS {'STRING' if self.name == 'spark' else 'VARCHAR'})"

    def count_if(self, condition: str) -> str:
        return f"count_if({condition})"

    def group_by(self, n: int) -> str:
        return "GROUP BY " + ", ".join(str(i + 1) for i in range(n)) if n else ""


DUCKDB = Dialect("duckdb")
SPARK = Dialect("spark")


def column_kind(type_name: str) -> ColumnKind:
    """Classify an engine's column type name (DuckDB or Spark spelling)."""
    t = type_name.strip().lower()
    if t in {"boolean", "bool"}:
        return "bool"
    ints = ("tinyint", "smallint", "integer", "int", "bigint", "hugeint", "long", "short", "byte")
    base = t.split("(")[0]
    if base in ints or base in {f"u{x}" for x in ints} or base == "uhugeint":
        return "int"
    if base in {"float", "double", "real", "decimal", "numeric"}:
        return "float"
    if base in {"varchar", "string", "text", "char"}:
        return "string"
    if base in {'"null"', "null", "void"}:
        # A column with no value at all (every cell missing): mapped like text, every row missing.
        return "string"
    return "other"


def literal(value: object) -> str:
    """A SQL literal for a schema value (strings quoted with '' escaping)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError("a schema value is not a finite number")
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def numeric_check(dialect: Dialect, attr: Attribute, column: str, kind: ColumnKind) -> str | None:
    """A count of present values that are not numbers, for a numeric attribute on a text column."""
    if isinstance(attr, CategoricalAttribute) or kind != "string":
        return None
    q = dialect.quote(column)
    return dialect.count_if(f"{q} IS NOT NULL AND TRY_CAST({q} AS DOUBLE) IS NULL")


def check_kind(attr: Attribute, column: str, kind: ColumnKind, type_name: str) -> None:
    """Reject column types that cannot be mapped at all (dates on a numeric attribute, ...)."""
    if kind == "other":
        raise DataError(
            f"column {column!r} has type {type_name}, which cannot be mapped onto the {attr.kind} "
            f"attribute {attr.name!r}"
        )


def code_expression(dialect: Dialect, attr: Attribute, column: str, kind: ColumnKind) -> str:
    """The value index of ``column`` (missing: the missing index or ``-2``; ``-1`` outside the domain)."""
    absent = _absent(attr)
    q = dialect.quote(column)
    if isinstance(attr, CategoricalAttribute):
        return _categorical(dialect, attr, q, kind)
    if kind == "bool":
        q = f"CAST({q} AS INTEGER)"
        kind = "int"
    if isinstance(attr, IntAttribute):
        if kind == "int":
            return (
                f"CASE WHEN {q} IS NULL THEN {absent} "
                f"WHEN {q} >= {attr.min} AND {q} <= {attr.max} THEN CAST({q} AS BIGINT) - ({attr.min}) "
                f"ELSE {OUTSIDE} END"
            )
        v = dialect.to_double(q, kind)
        return (
            f"CASE WHEN {v} IS NULL OR {dialect.is_nan(v)} THEN {absent} "
            f"WHEN {dialect.is_finite(v)} AND {v} = floor({v}) AND {v} >= {attr.min} AND {v} <= {attr.max} "
            f"THEN CAST({v} AS BIGINT) - ({attr.min}) ELSE {OUTSIDE} END"
        )
    assert isinstance(attr, BinnedAttribute)
    v = dialect.to_double(q, kind) if kind != "int" else q
    edges = [float(e) for e in attr.edges]
    missing = f"{v} IS NULL" if kind == "int" else f"{v} IS NULL OR {dialect.is_nan(v)}"
    return (
        f"CASE WHEN {missing} THEN {absent} "
        f"WHEN {v} >= {edges[0]!r} AND {v} < {edges[-1]!r} THEN {_bin_tree(v, edges, 0, len(edges) - 1)} "
        f"ELSE {OUTSIDE} END"
    )


def _bin_tree(v: str, edges: list[float], lo: int, hi: int) -> str:
    """Bin index of ``v`` known to lie in ``[edges[lo], edges[hi])``, by halving."""
    if hi - lo == 1:
        return str(lo)
    mid = (lo + hi) // 2
    return f"CASE WHEN {v} < {edges[mid]!r} THEN {_bin_tree(v, edges, lo, mid)} ELSE {_bin_tree(v, edges, mid, hi)} END"


def _categorical(dialect: Dialect, attr: CategoricalAttribute, q: str, kind: ColumnKind) -> str:
    whens: list[str] = []
    if kind == "string":
        for i, value in enumerate(attr.values):
            if isinstance(value, str):
                whens.append(f"WHEN {q} = {literal(value)} THEN {i}")
    else:
        text = dialect.to_text(q)
        numbers: dict[object, int] = {}
        for i, value in enumerate(attr.values):
            if isinstance(value, str):
                whens.append(f"WHEN {text} = {literal(value)} THEN {i}")
            elif not isinstance(value, bool) and kind != "bool":
                numbers.setdefault(value, i)
            elif isinstance(value, bool) and kind == "bool":
                whens.append(f"WHEN {q} = {literal(value)} THEN {i}")
        # Numbers first: pandas looks a value up as itself before trying its text.
        whens = [f"WHEN {q} = {literal(value)} THEN {i}" for value, i in numbers.items()] + whens
    missing = f"{q} IS NULL" if kind != "float" else f"{q} IS NULL OR {dialect.is_nan(q)}"
    body = " ".join(whens)
    return f"CASE WHEN {missing} THEN {_absent(attr)} {body} ELSE {OUTSIDE} END"


def _absent(attr: Attribute) -> int:
    """The code of a missing value: the missing index where the schema allows it, else ``MISSING``."""
    return attr.null_index if attr.null_index is not None else MISSING


def encoded_select(dialect: Dialect, schema: Schema, kinds: Sequence[ColumnKind], source: str) -> str:
    """``SELECT c0, ..., c{m-1}, ok FROM source``: value indices and the in-domain flag."""
    codes = ", ".join(
        f"CAST({code_expression(dialect, a, a.name, k)} AS {_code_type(a.size)}) AS c{j}"
        for j, (a, k) in enumerate(zip(schema, kinds, strict=True))
    )
    ok = " AND ".join(f"c{j} >= 0" for j in range(len(schema))) or "TRUE"
    return f"SELECT *, ({ok}) AS ok FROM (SELECT {codes} FROM {source}) AS mapped"


def _code_type(size: int) -> str:
    """The narrowest integer type holding ``-2..size-1`` (narrow codes scan faster)."""
    if size < 32_000:
        return "SMALLINT"
    return "INTEGER" if size < 2**31 - 1 else "BIGINT"


def report_select(dialect: Dialect, schema: Schema, table: str) -> str:
    """One aggregate: rows, rows outside the domain, and per attribute missing / outside counts."""
    parts = ["count(*)", dialect.count_if("NOT ok")]
    for j, attr in enumerate(schema):
        parts.append(dialect.count_if(f"c{j} = {_absent(attr)}"))
        parts.append(dialect.count_if(f"c{j} = {OUTSIDE}"))
    return f"SELECT {', '.join(parts)} FROM {table}"


def atom_expression(code: str, value_atom: npt.NDArray[np.int64]) -> str:
    """The atom of a value index, as a balanced tree over the runs of equal atoms."""
    starts = [0, *(int(i) for i in np.flatnonzero(np.diff(value_atom)) + 1)]
    atoms = [int(value_atom[s]) for s in starts]
    return _run_tree(code, starts, atoms, 0, len(starts))


def _run_tree(code: str, starts: list[int], atoms: list[int], lo: int, hi: int) -> str:
    if hi - lo == 1:
        return str(atoms[lo])
    mid = (lo + hi) // 2
    return (
        f"CASE WHEN {code} < {starts[mid]} THEN {_run_tree(code, starts, atoms, lo, mid)} "
        f"ELSE {_run_tree(code, starts, atoms, mid, hi)} END"
    )


def condition(code: str, values: IndexSet) -> str:
    """``code`` in ``values`` (value indices)."""
    singles: list[str] = []
    ranges: list[str] = []
    for lo, hi in values.intervals:
        if hi - lo == 1:
            singles.append(str(lo))
        elif hi - lo == 2:
            singles.extend((str(lo), str(lo + 1)))
        else:
            ranges.append(f"{code} BETWEEN {lo} AND {hi - 1}")
    if len(singles) == 1:
        ranges.append(f"{code} = {singles[0]}")
    elif singles:
        ranges.append(f"{code} IN ({', '.join(singles)})")
    if not ranges:
        return "FALSE"
    return ranges[0] if len(ranges) == 1 else "(" + " OR ".join(ranges) + ")"


def query_condition(constraints: Sequence[tuple[int, IndexSet]]) -> str:
    """A query's conjunction over the code columns (``TRUE`` for no constraint)."""
    if not constraints:
        return "TRUE"
    return " AND ".join(condition(f"c{pos}", cov) for pos, cov in constraints)
