"""The kinds of in-memory table the Python API accepts, recognised without importing their libraries.

:func:`data_kind` names the kind of an object from the module and name of its classes (subclasses
included), so that a type check never imports Polars, pyarrow, DuckDB or PySpark; those are imported only
where a table of that kind is actually read. :func:`unsupported` is the one error every entry point
raises for anything else. Engines are opened on tables by :func:`overlapdp.engine.inputs.open_data`;
:func:`overlapdp.schema.infer_schema` reads column names, types and (where allowed) the values present
through :func:`column_names`, :func:`numeric_columns` and :func:`present_values`.

It imports nothing of the package but its errors, so it sits at the bottom of the package order with
:mod:`overlapdp.errors` (the schema's inference and the engines both use it).
"""

from __future__ import annotations

from typing import Any, Literal

from overlapdp.errors import UnsupportedDataError

DataKind = Literal[
    "pandas", "polars", "polars-lazy", "arrow", "arrow-batch", "duckdb", "spark", "encoded", "engine"
]

#: The tables the message of :class:`~overlapdp.errors.UnsupportedDataError` lists.
ACCEPTED = (
    "a pandas DataFrame, a Polars DataFrame or LazyFrame, a pyarrow Table or RecordBatch, "
    "a DuckDB relation (DuckDBPyRelation), a Spark DataFrame"
)

# (module prefix, class name, kind): a class matches when one of its bases has that module and name.
_KINDS: tuple[tuple[str, str, DataKind], ...] = (
    ("pandas", "DataFrame", "pandas"),
    ("polars", "DataFrame", "polars"),
    ("polars", "LazyFrame", "polars-lazy"),
    ("pyarrow", "Table", "arrow"),
    ("pyarrow", "RecordBatch", "arrow-batch"),
    ("duckdb", "DuckDBPyRelation", "duckdb"),
    ("pyspark.sql", "DataFrame", "spark"),
    ("overlapdp.engine.encoding", "EncodedTable", "encoded"),
    ("overlapdp.engine.base", "Engine", "engine"),
)


def data_kind(data: object) -> DataKind | None:
    """The kind of ``data`` (see :data:`DataKind`), or None when it is none of the accepted kinds."""
    for cls in type(data).__mro__:
        module = cls.__module__ or ""
        for prefix, name, kind in _KINDS:
            if cls.__name__ == name and (module == prefix or module.startswith(prefix + ".")):
                return kind
    return None


def unsupported(data: object, *, what: str = "data", extra: str = "") -> UnsupportedDataError:
    """The one error for an input of a kind no entry point accepts (``extra`` names further kinds the
    caller accepts, such as a count function)."""
    kind = type(data)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return UnsupportedDataError(f"{what} must be {ACCEPTED}{extra}; got {name}")


def _table_kind(data: object) -> DataKind:
    kind = data_kind(data)
    if kind is None or kind in ("encoded", "engine"):
        raise unsupported(data)
    return kind


def column_names(data: Any) -> list[str]:
    """The table's column names, read from its schema (no rows are read)."""
    kind = _table_kind(data)
    if kind == "polars-lazy":
        return [str(c) for c in data.collect_schema().names()]
    if kind in ("arrow", "arrow-batch"):
        return [str(c) for c in data.schema.names]
    return [str(c) for c in data.columns]


def numeric_columns(data: Any) -> set[str]:
    """Columns holding numbers (integers, floats, decimals; not booleans), from the table's types."""
    kind = _table_kind(data)
    if kind == "pandas":
        import pandas as pd

        return {
            str(c)
            for c in data.columns
            if pd.api.types.is_numeric_dtype(data[c]) and not pd.api.types.is_bool_dtype(data[c])
        }
    if kind == "spark":
        from pyspark.sql.types import NumericType

        return {f.name for f in data.schema.fields if isinstance(f.dataType, NumericType)}
    import pyarrow as pa

    if kind in ("arrow", "arrow-batch"):
        schema = data.schema
    elif kind == "polars":
        schema = data.head(0).to_arrow().schema
    elif kind == "polars-lazy":
        schema = data.head(0).collect().to_arrow().schema
    else:  # a DuckDB relation: no rows are fetched
        empty = data.limit(0)
        schema = (empty.to_arrow_table() if hasattr(empty, "to_arrow_table") else empty.arrow()).schema
    return {
        f.name
        for f in schema
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
    }


def present_values(data: Any, column: str) -> list[Any]:
    """The distinct values present in ``column`` (missing values, None and NaN, left out), computed by
    the table's own library; only the distinct values become Python objects."""
    kind = _table_kind(data)
    if kind == "pandas":
        values: list[Any] = data[column].dropna().unique().tolist()
    elif kind in ("polars", "polars-lazy"):
        import polars as pl

        values = data.lazy().select(pl.col(column).drop_nulls().unique()).collect().to_series().to_list()
    elif kind in ("arrow", "arrow-batch"):
        import pyarrow.compute as pc

        values = pc.unique(data.column(column)).drop_null().to_pylist()
    elif kind == "duckdb":
        import duckdb

        values = [r[0] for r in data.select(duckdb.ColumnExpression(column)).distinct().fetchall()]
    else:
        values = [r[0] for r in data.select(column).distinct().collect()]
    # NaN (a float that is not equal to itself) is missing, as pandas' dropna treats it.
    return [v for v in values if v is not None and v == v]


def has_missing(data: Any, column: str) -> bool:
    """Whether ``column`` holds a missing value (None/null, or NaN in a float column), computed by the
    table's own library."""
    kind = _table_kind(data)
    if kind == "pandas":
        return bool(data[column].isna().any())
    if kind in ("polars", "polars-lazy"):
        s = data.lazy().select(column).collect().to_series()
        return bool(s.null_count() > 0 or (s.dtype.is_float() and s.is_nan().any()))
    if kind in ("arrow", "arrow-batch"):
        import pyarrow as pa
        import pyarrow.compute as pc

        col = data.column(column)
        if col.null_count > 0:
            return True
        return bool(pa.types.is_floating(col.type) and pc.any(pc.is_nan(col)).as_py())
    if kind == "duckdb":
        import duckdb

        rel = data.select(duckdb.ColumnExpression(column))
        quoted = '"' + column.replace('"', '""') + '"'
        test = f"{quoted} IS NULL"
        if str(rel.types[0]).upper() in ("FLOAT", "DOUBLE", "REAL"):
            test += f" OR isnan({quoted})"
        return bool(rel.filter(test).limit(1).fetchall())
    from pyspark.sql import functions as F

    cond = F.col(column).isNull()
    if dict(data.dtypes)[column] in ("float", "double"):
        cond = cond | F.isnan(F.col(column))
    return bool(data.filter(cond).limit(1).count())
