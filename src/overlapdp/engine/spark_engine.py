"""Apache Spark through PySpark, for data that outgrows one machine.

The same SQL as DuckDB's (:mod:`overlapdp.engine.sql`, Spark dialect) runs on a temporary view; the
encoded table is cached by default, so a workload is one scan of the cached codes. A local session
(``local[2]``) serves tests and one machine; a cluster is reached through its master URL
(``spark://host:7077``, ``yarn``, ...), see :func:`spark_session`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from overlapdp.engine import sql
from overlapdp.engine.base import DEFAULT_HISTOGRAM_LIMIT
from overlapdp.engine.sql_engine import SqlEngine
from overlapdp.errors import DataError
from overlapdp.schema import Schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_serial = itertools.count()


def spark_session(master: str = "local[2]", app_name: str = "overlapdp", **conf: str) -> SparkSession:
    """A Spark session with a small footprint: 2 shuffle partitions, no UI, quiet logs.

    ``master`` is ``local[N]`` on one machine or a cluster's master URL; extra ``conf`` entries are
    passed through (``spark.executor.memory`` ...). Reuses a running session when there is one.
    """
    from pyspark.sql import SparkSession

    settings = {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": "1g",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _spark_errors() -> tuple[type[BaseException], ...]:
    from pyspark.errors import PySparkException

    try:
        from py4j.protocol import Py4JJavaError

        return (PySparkException, Py4JJavaError)
    except ImportError:  # pragma: no cover
        return (PySparkException,)


#: Java's names of the charsets :mod:`overlapdp.files` detects (Python's codec names otherwise).
_JAVA_CHARSETS = {
    "utf-8": "UTF-8",
    "utf-8-sig": "UTF-8",
    "utf-16": "UTF-16",
    "cp1252": "windows-1252",
    "iso8859-1": "ISO-8859-1",
}


class SparkEngine(SqlEngine):
    """Exact counts with Spark SQL over a Spark DataFrame (a file, a catalog table, a pandas frame)."""

    name = "spark"
    dialect = sql.SPARK

    def __init__(
        self,
        schema: Schema,
        frame: DataFrame,
        *,
        cache: bool = True,
        histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT,
        label: str = "the data",
    ) -> None:
        super().__init__(schema, histogram_limit=histogram_limit)
        self.spark = frame.sparkSession
        self._label = label
        n = next(_serial)
        source = f"overlapdp_source_{n}"
        try:
            frame.createOrReplaceTempView(source)
            kinds = self._kinds(frame.dtypes, label)
            self._check_numbers(kinds, source)
            encoded = self.spark.sql(sql.encoded_select(self.dialect, schema, kinds, source))
            if cache:
                encoded = encoded.cache()
            self._encoded = encoded
            self._table = f"overlapdp_encoded_{n}"
            encoded.createOrReplaceTempView(self._table)
            self._source = source
            self._sum_source = (source, kinds)
        except _spark_errors() as exc:
            raise DataError(f"cannot read {label} with Spark ({type(exc).__name__})") from None

    # -- constructors --------------------------------------------------------------------------------
    @classmethod
    def from_path(
        cls,
        schema: Schema,
        path: str | Path,
        *,
        spark: SparkSession | None = None,
        encoding: str | None = None,
        sep: str | None = None,
        **kwargs: Any,
    ) -> SparkEngine:
        """CSV / TSV (header, types inferred; encoding and separator declared or, for a file, detected:
        :mod:`overlapdp.files`) or Parquet by suffix."""
        from overlapdp.files import check_encoding, check_separator, csv_format, is_parquet

        p = Path(path)
        if not p.exists():
            raise DataError(f"data file {str(p)!r} does not exist")
        if p.is_file() and p.stat().st_size == 0:
            raise DataError(f"data file {str(p)!r} is empty")
        session = spark or spark_session()
        try:
            if is_parquet(p) or (p.is_dir() and encoding is None and sep is None):
                frame = (
                    session.read.parquet(str(p))
                    if is_parquet(p)
                    else session.read.csv(str(p), header=True, inferSchema=True, ignoreLeadingWhiteSpace=True)
                )
            else:
                if p.is_file():
                    fmt = csv_format(p, encoding=encoding, sep=sep)
                    enc, delim = fmt.encoding, fmt.sep
                else:  # a folder of parts: as declared
                    enc = check_encoding(encoding) if encoding else "utf-8"
                    delim = check_separator(sep) if sep else ","
                frame = session.read.csv(
                    str(p),
                    header=True,
                    inferSchema=True,
                    ignoreLeadingWhiteSpace=True,
                    sep=delim,
                    encoding=_JAVA_CHARSETS.get(enc, enc),
                )
        except _spark_errors() as exc:
            raise DataError(f"cannot read data file {str(p)!r} with Spark ({type(exc).__name__})") from None
        return cls(schema, frame, label=f"data file {str(p)!r}", **kwargs)

    @classmethod
    def from_table(
        cls, schema: Schema, table: str, *, spark: SparkSession | None = None, **kwargs: Any
    ) -> SparkEngine:
        """A table of the Spark catalog (Hive, Delta, a registered view)."""
        session = spark or spark_session()
        if not session.catalog.tableExists(table):
            raise DataError(f"Spark has no table {table!r}")
        return cls(schema, session.table(table), label=f"Spark table {table!r}", **kwargs)

    @classmethod
    def from_frame(
        cls, schema: Schema, frame: Any, *, spark: SparkSession | None = None, **kwargs: Any
    ) -> SparkEngine:
        """A Spark DataFrame as is; a pandas / Polars frame or Arrow table is shipped to Spark via Arrow."""
        if hasattr(frame, "sparkSession"):
            return cls(schema, frame, **kwargs)
        import pyarrow as pa

        session = spark or spark_session()
        if hasattr(frame, "to_arrow"):
            table = frame.to_arrow()
        elif isinstance(frame, pa.Table):
            table = frame
        else:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        try:
            sdf = session.createDataFrame(table)
        except (TypeError, ValueError) as exc:
            raise DataError(f"cannot ship the DataFrame to Spark ({type(exc).__name__})") from None
        except _spark_errors() as exc:
            raise DataError(f"cannot ship the DataFrame to Spark ({type(exc).__name__})") from None
        return cls(schema, sdf, label="the DataFrame", **kwargs)

    # -- SqlEngine -----------------------------------------------------------------------------------
    def _rows(self, query: str) -> list[tuple[Any, ...]]:
        try:
            return [tuple(r) for r in self.spark.sql(query).collect()]
        except _spark_errors() as exc:
            raise DataError(
                f"Spark could not evaluate a query over {self._label} ({type(exc).__name__})"
            ) from None

    def _arrays(self, query: str, columns: int) -> list[npt.NDArray[np.int64]]:
        rows = self._rows(query)
        if not rows:
            return [np.zeros(0, dtype=np.int64) for _ in range(columns)]
        mat = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)
        return [mat[:, j] for j in range(columns)]

    def close(self) -> None:
        if getattr(self, "_table", ""):
            self._encoded.unpersist()
            self.spark.catalog.dropTempView(self._table)
            self.spark.catalog.dropTempView(self._source)
