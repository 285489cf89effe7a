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
    """An engine of kind ``name`` over ``data``: a CSV / Parquet path or an in-memory table of any
    kind :func:`overlapdp.engine.inputs.open_data` accepts (pandas, Polars, Arrow, a DuckDB relation).

    ``options`` go to the engine's constructor (``spark=`` a session, ``histogram_limit=``, ...); for a
    file, ``encoding=`` and ``sep=`` declare its text encoding and separator (detected when left out,
    :mod:`overlapdp.files`).
    Engines are imported lazily so that PySpark is only loaded when asked for.
    """
    if name not in ENGINES:
        raise DataError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if not isinstance(data, str | Path):
        if options.pop("encoding", None) is not None or options.pop("sep", None) is not None:
            raise DataError("encoding and sep describe a file; an in-memory table has neither")
        # Every in-memory kind (pandas, Polars, Arrow, a DuckDB relation) through the one dispatch.
        from overlapdp.engine.inputs import open_data

        return open_data(data, schema, engine=name, **options)
    if name == "duckdb":
        from overlapdp.engine.duckdb_engine import DuckDBEngine

        return DuckDBEngine.from_path(schema, data, **options)
    if name == "pandas":
        from overlapdp.engine.pandas_engine import PandasEngine

        return PandasEngine.from_path(schema, data, **options)
    if name == "polars":
        from overlapdp.engine.inputs import require_polars

        require_polars()
        from overlapdp.engine.polars_engine import PolarsEngine

        return PolarsEngine.from_path(schema, data, **options)
    try:
        from overlapdp.engine.spark_engine import SparkEngine
    except ImportError:  # pyspark is the 'spark' extra
        raise DataError(
            "the spark engine needs the 'spark' extra and Java: pip install 'overlapdp[spark]'"
        ) from None
    return SparkEngine.from_path(schema, data, **options)
