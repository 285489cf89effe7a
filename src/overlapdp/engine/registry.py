"""Open an engine by name on a file or a DataFrame (what the CLI's ``--engine`` selects)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from overlapdp.errors import DataError

if TYPE_CHECKING:  # the CLI reads ENGINES for its help: importing this module must stay cheap
    from overlapdp.engine.base import Engine
    from overlapdp.schema import Schema

EngineName = Literal["duckdb", "pandas", "polars", "spark"]
ENGINES: tuple[EngineName, ...] = ("duckdb", "pandas", "polars", "spark")


def open_engine(name: str, schema: Schema, data: str | Path | Any, **options: Any) -> Engine:
    """An engine of kind ``name`` over ``data``: a CSV / Parquet path or an in-memory frame.

    ``options`` go to the engine's constructor (``spark=`` a session, ``histogram_limit=``, ...).
    Engines are imported lazily so that PySpark is only loaded when asked for.
    """
    if name not in ENGINES:
        raise DataError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    is_path = isinstance(data, str | Path)
    if name == "duckdb":
        from overlapdp.engine.duckdb_engine import DuckDBEngine

        return (
            DuckDBEngine.from_path(schema, data, **options)
            if is_path
            else DuckDBEngine.from_frame(schema, data, **options)
        )
    if name == "pandas":
        from overlapdp.engine.pandas_engine import PandasEngine

        return (
            PandasEngine.from_path(schema, data, **options)
            if is_path
            else PandasEngine.from_frame(schema, data, **options)
        )
    if name == "polars":
        from overlapdp.engine.polars_engine import PolarsEngine

        return (
            PolarsEngine.from_path(schema, data, **options)
            if is_path
            else PolarsEngine.from_frame(schema, data, **options)
        )
    try:
        from overlapdp.engine.spark_engine import SparkEngine
    except ImportError:  # pyspark is the 'spark' extra
        raise DataError(
            "the spark engine needs the 'spark' extra and Java: pip install 'overlapdp[spark]'"
        ) from None
    return (
        SparkEngine.from_path(schema, data, **options)
        if is_path
        else SparkEngine.from_frame(schema, data, **options)
    )
