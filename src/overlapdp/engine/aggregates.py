"""Exact (NOT private) clipped sums over predicate queries' rows, shared by the engines.

Every engine computes, for each query ``q`` and declared :class:`~overlapdp.query.aggregate.Clipping`
``(column, lo, hi, step)``, the integer

    ``sum over in-domain rows x in C_q of k(v_x)``,  ``k(v) = min(max(floor(v/step + 1/2), L), H)``

with ``v_x`` the row's raw number in ``column`` (as a double; an integer attribute's value is its
integer) and ``(L, H)`` the bounds in units of ``step`` (MATH.md 6.4). The rows are exactly those a count
of ``q`` counts (a row missing or outside the domain on any attribute, including ``column``, matches no
query; so NULLs are skipped as in SQL's ``SUM``). The same IEEE double operations in every engine give
the same integers. Clipping is applied per row before summing, so one row moves the sum by at most
the sensitivity of :meth:`Clipping.sensitivity`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapdp.engine import sql
from overlapdp.engine.encoding import EncodedTable
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Clipping
from overlapdp.schema import Schema


def clip_units(values: npt.ArrayLike, clipping: Clipping) -> npt.NDArray[np.int64]:
    """``k(v)`` of every value; a missing value (NaN) contributes nothing (0), as NULL in SQL's ``SUM``.

    (Today a row missing its value lies outside the domain and matches no query anyway; this keeps
    sums right if missing values become part of a domain.)"""
    lo, hi = clipping.units
    v = np.asarray(values, dtype=np.float64)
    k = np.clip(np.floor(v / float(clipping.step) + 0.5), lo, hi)  # NaN stays NaN; +-inf clip to H, L
    return np.where(np.isnan(k), 0.0, k).astype(np.int64)


def raw_numbers(frame: pd.DataFrame, column: str) -> npt.NDArray[np.float64]:
    """The column as doubles (text that is not a number becomes NaN; such rows are outside the domain)."""
    col = frame[column]
    if col.dtype == bool:
        col = col.astype(np.int64)
    return np.asarray(pd.to_numeric(col, errors="coerce"), dtype=np.float64)


def _exact_total(units: npt.NDArray[np.int64], bound: int) -> int:
    if units.size == 0:
        return 0
    if bound * units.size < 2**62:
        return int(units.sum(dtype=np.int64))
    return sum(int(x) for x in units.tolist())  # too many rows for int64: Python integers


def encoded_sums(
    table: EncodedTable, units: npt.NDArray[np.int64], queries: Sequence[PredicateQuery], clipping: Clipping
) -> list[int]:
    """Sums of ``units`` (one per row of ``table``) over each query's in-domain rows (numpy)."""
    schema = table.schema
    bound = max(abs(b) for b in clipping.units)
    lookups: dict[tuple[int, object], npt.NDArray[np.bool_]] = {}
    out: list[int] = []
    for q in queries:
        mask = table.in_domain.copy()
        for pos, cov in q.constraints:
            lut = lookups.get((pos, cov))
            if lut is None:
                size = schema.attributes[pos].size
                lut = np.zeros(size + 1, dtype=bool)
                lut[:size] = cov.mask(size)
                lookups[(pos, cov)] = lut
            mask &= lut[table.codes[:, pos]]  # -1 / -2 (outside, missing) index trailing False entries
        out.append(_exact_total(units[mask], bound))
    return out


def units_sql(dialect: sql.Dialect, column: str, kind: sql.ColumnKind, clipping: Clipping) -> str:
    """``k(v)`` as a SQL expression over the raw column (doubles, as numpy computes it)."""
    lo, hi = clipping.units
    q = dialect.quote(column)
    if kind == "bool":
        q = f"CAST({q} AS INTEGER)"
    v = f"TRY_CAST({q} AS DOUBLE)" if kind == "string" else f"CAST({q} AS DOUBLE)"
    step = f"CAST({float(clipping.step)!r} AS DOUBLE)"
    x = f"{v} / {step} + CAST(0.5 AS DOUBLE)"
    # floor(min(max(x, L), H)) equals min(max(floor(x), L), H) for integers L, H, and clamping first
    # keeps floor's result small (Spark's floor returns BIGINT, which 1e300 would overflow; the value is
    # computed for rows outside the domain too, before they are filtered out). LEAST / GREATEST skip
    # NULLs in DuckDB and Spark, so a missing value is kept NULL explicitly.
    bounded = f"LEAST(GREATEST({x}, CAST({lo} AS DOUBLE)), CAST({hi} AS DOUBLE))"
    return f"CASE WHEN {v} IS NULL OR {dialect.is_nan(v)} THEN NULL ELSE CAST(floor({bounded}) AS BIGINT) END"


def sums_select(
    dialect: sql.Dialect,
    schema: Schema,
    kinds: Sequence[sql.ColumnKind],
    source: str,
    clipping: Clipping,
    queries: Sequence[PredicateQuery],
) -> str:
    """One aggregate over ``source``: the clipped sum of each query (NULL when no row matches).

    The code columns are those of :func:`overlapdp.engine.sql.encoded_select` (same mapping), with the
    clipped value ``u`` of ``clipping.column`` beside them."""
    inner = sql.encoded_select(dialect, schema, kinds, source)
    j = schema.position(clipping.column)
    u = units_sql(dialect, clipping.column, kinds[j], clipping)
    mapped = inner.replace(f" FROM {source}) AS mapped", f", {u} AS u FROM {source}) AS mapped", 1)
    if mapped == inner:  # the mapping's shape changed: refuse rather than sum the wrong thing
        raise AssertionError("encoded_select no longer has the expected shape")
    parts = ", ".join(f"sum(CASE WHEN {sql.query_condition(q.constraints)} THEN u END)" for q in queries)
    return f"SELECT {parts} FROM ({mapped}) AS enc WHERE ok"
