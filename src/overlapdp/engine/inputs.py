"""Every kind of table the Python API accepts, and the one place that opens an engine on it.

:func:`open_data` turns a pandas DataFrame, a Polars DataFrame or LazyFrame, a pyarrow Table or
RecordBatch, or a DuckDB relation into an :class:`~overlapdp.engine.Engine` on a schema. Every entry point
that takes data (:func:`~overlapdp.mechanisms._noisy_counts`, the interactive mechanisms and their
concurrent composition through :meth:`~overlapdp.mechanisms.Counter.of`,
:func:`~overlapdp.engine.exact_counts`, :func:`~overlapdp.mechanisms.answering.answer_workload` and
:func:`~overlapdp.engine.open_engine`) goes through it, so they all accept the same inputs and refuse the
rest with the same :class:`~overlapdp.errors.UnsupportedDataError`.

Each kind is counted by its natural engine, never by copying rows into Python objects:

- pandas: :class:`~overlapdp.engine.PandasEngine` (the schema's own reference mapping, numpy counts);
- Polars (eager or lazy): :class:`~overlapdp.engine.PolarsEngine` (a LazyFrame is collected once, only
  its encoded columns);
- Arrow: :class:`~overlapdp.engine.DuckDBEngine`, which scans the Arrow buffers in place;
- a Spark DataFrame: the Spark engine, on its cluster;
- a DuckDB relation: DuckDB, on the relation's OWN connection (a relation over an in-memory database
  cannot be read from another connection); the encoded table is a temporary table there, dropped by
  :meth:`~overlapdp.engine.Engine.close`.

Kinds are recognised by :func:`overlapdp.tables.data_kind` from the module and name of the object's
classes, so that checking a type never imports Polars, pyarrow or DuckDB (they are imported only to open
an engine of that kind). Which rows lie
outside the domain, and how queries are counted, is the engines' business (:mod:`overlapdp.engine.base`):
every engine gives the same exact integers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from overlapdp.errors import DataError
from overlapdp.tables import ACCEPTED, DataKind, column_names, data_kind, unsupported

__all__ = ["ACCEPTED", "DataKind", "data_kind", "open_data", "unsupported"]

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

    from overlapdp.engine.base import Engine
    from overlapdp.query import PredicateQuery
    from overlapdp.schema import Schema


def _present(data: Any, kind: DataKind, schema: Schema) -> list[str]:
    """The schema's columns that the data has (a missing one is reported by the engine, by name)."""
    have = set(column_names(data))
    return [n for n in schema.names if n in have]


def _project(relation: Any, cols: list[str]) -> Any:
    """A DuckDB relation narrowed to ``cols`` (by name: a name such as ``income>50K`` is not parsed)."""
    import duckdb

    return relation.select(*(duckdb.ColumnExpression(c) for c in cols)) if cols else relation


def _as_pandas(data: Any, kind: DataKind, schema: Schema) -> Any:
    # Only the schema's columns are converted: the rest of a wide table is never copied.
    cols = _present(data, kind, schema)
    if kind == "pandas":
        return data
    if kind == "polars":
        return data.select(cols).to_pandas()
    if kind == "polars-lazy":
        return data.select(cols).collect().to_pandas()
    if kind in ("arrow", "arrow-batch"):
        return data.select(cols).to_pandas()
    assert kind == "duckdb"
    return _project(data, cols).df()


def _as_polars(data: Any, kind: DataKind, schema: Schema) -> Any:
    import polars as pl

    if kind in ("polars", "polars-lazy"):
        return data
    cols = _present(data, kind, schema)
    if kind == "pandas":
        return pl.from_pandas(data[cols])
    if kind in ("arrow", "arrow-batch"):
        return pl.from_arrow(data.select(cols))  # zero-copy where the Arrow types allow
    assert kind == "duckdb"
    return _project(data, cols).pl()


def _as_arrow(data: Any, kind: DataKind, schema: Schema) -> Any:
    import pyarrow as pa

    cols = _present(data, kind, schema)
    if kind == "arrow":
        return data
    if kind == "arrow-batch":
        return pa.Table.from_batches([data])
    if kind == "pandas":
        return pa.Table.from_pandas(data[cols], preserve_index=False)
    if kind == "polars":
        return data.select(cols).to_arrow()
    if kind == "polars-lazy":
        return data.select(cols).collect().to_arrow()
    assert kind == "duckdb"
    rel = _project(data, cols)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


class _RelationConnection:
    """The connection a DuckDB relation belongs to, reached through the relation itself.

    DuckDB exposes no handle on a relation's connection, and a relation over an in-memory database
    cannot be scanned from another connection; ``relation.query(alias, sql)`` runs any statement on the
    relation's own connection with the relation visible as ``alias``. This is the part of the
    connection interface :class:`~overlapdp.engine.DuckDBEngine` uses (``sql``, ``execute``, ``close``).
    """

    def __init__(self, relation: Any, alias: str) -> None:
        self._relation = relation
        self._alias = alias

    def sql(self, query: str) -> Any:
        return self._relation.query(self._alias, query)

    def execute(self, query: str, parameters: Any = None) -> Any:
        if parameters:
            raise DataError("parameterised statements cannot run on a DuckDB relation's connection")
        return self._relation.query(self._alias, query)

    def close(self) -> None:  # the connection is the caller's: never closed here
        return None


def _duckdb_relation_engine(schema: Schema, relation: Any, options: dict[str, Any]) -> Engine:
    from overlapdp.engine.duckdb_engine import DuckDBEngine, _serial

    if options.get("connection") is not None:
        raise DataError("a DuckDB relation is counted on its own connection; do not pass connection=")
    options = {k: v for k, v in options.items() if k != "connection"}
    alias = f"overlapdp_relation_{next(_serial)}"
    con = cast("duckdb.DuckDBPyConnection", _RelationConnection(relation, alias))
    return DuckDBEngine(schema, alias, connection=con, label="the DuckDB relation", **options)


def require_polars() -> None:
    """The polars engine's extra, checked before anything is converted (one error naming it)."""
    from importlib.util import find_spec

    from overlapdp._optional import missing_extra

    if find_spec("polars") is None:
        raise missing_extra("polars", "the polars engine", "polars")


def open_data(data: object, schema: Schema, *, engine: str | None = None, **options: Any) -> Engine:
    """An engine over in-memory ``data`` mapped onto ``schema``: the one entry for every data input.

    With ``engine=None`` each kind goes to its natural engine (module docstring); a named engine
    (``"duckdb"``, ``"pandas"``, ``"polars"``, ``"spark"``) gets the data converted to what it reads,
    column by column (only the schema's columns). An :class:`~overlapdp.engine.Engine` is returned as it
    is (its schema must be ``schema``). ``options`` go to the engine's constructor. Anything else raises
    :class:`~overlapdp.errors.UnsupportedDataError`, which lists the accepted kinds.

    The caller owns the engine: close it (``with open_data(...) as eng``) to release its connection.
    """
    kind = data_kind(data)
    if kind is None or kind == "encoded":
        raise unsupported(data)
    if kind == "engine":
        from overlapdp.engine.base import Engine

        assert isinstance(data, Engine)
        if data.schema != schema:
            raise DataError("the engine was opened on another schema than the queries'")
        return data
    name = engine
    if name is None:
        name = {"pandas": "pandas", "polars": "polars", "polars-lazy": "polars", "spark": "spark"}.get(
            kind, "duckdb"
        )
    if kind == "spark" and name != "spark":
        # Collecting a cluster's table into one process is not a conversion to do behind a user's back.
        raise DataError(f"a Spark DataFrame is counted by the spark engine, not {name!r}")
    if name == "pandas":
        from overlapdp.engine.pandas_engine import PandasEngine

        return PandasEngine(schema, _as_pandas(data, kind, schema), **options)
    if name == "polars":
        require_polars()
        from overlapdp.engine.polars_engine import PolarsEngine

        return PolarsEngine(schema, _as_polars(data, kind, schema), **options)
    if name == "duckdb":
        if kind == "duckdb":
            return _duckdb_relation_engine(schema, data, options)
        from overlapdp.engine.duckdb_engine import DuckDBEngine

        # DuckDB scans pandas, Polars (eager and lazy) and Arrow in place.
        return DuckDBEngine.from_frame(schema, data, **options)
    if name == "spark":
        try:
            from overlapdp.engine.spark_engine import SparkEngine
        except ImportError:  # pragma: no cover - pyspark is a declared dependency
            raise DataError("the spark engine needs pyspark (pip install pyspark) and Java") from None
        frame = data if kind in ("pandas", "spark") else _as_arrow(data, kind, schema)
        return SparkEngine.from_frame(schema, frame, **options)
    from overlapdp.engine.registry import ENGINES

    raise DataError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def table_counts(queries: Sequence[PredicateQuery], data: object) -> list[int]:
    """Exact counts of ``queries`` on ``data`` (:func:`overlapdp.engine.exact.exact_counts`, imported
    here so that pandas is loaded only when an encoded table is counted)."""
    from overlapdp.engine.exact import exact_counts

    return exact_counts(queries, data)
