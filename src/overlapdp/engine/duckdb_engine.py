"""DuckDB, the embedded default: CSV / Parquet files, DataFrames, or a table in a DuckDB database file.

The schema mapping is pushed into SQL (CASE expressions, a balanced comparison tree for bins) and, by
default, materialised once into a compact temporary table of value indices, so a workload reads the
data once and later workloads read only the small encoded table. With ``materialize=False`` the mapping
is a view evaluated by every query (for a database table too large to copy).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt

from overlapdp.engine import sql
from overlapdp.engine.base import DEFAULT_HISTOGRAM_LIMIT
from overlapdp.engine.bitmaps import CHUNK_ROWS
from overlapdp.engine.sql_engine import SqlEngine
from overlapdp.errors import DataError
from overlapdp.schema import Schema

_serial = itertools.count()
_database: tuple[int, duckdb.DuckDBPyConnection] | None = None
_database_lock = threading.Lock()


def _connection() -> duckdb.DuckDBPyConnection:
    """A new connection to this process's in-memory database. Opening a database costs ~20-30 ms (a
    third of opening and answering two queries on Adult), a connection to an open one ~0.1 ms; each
    engine keeps its own connection, so its temporary tables and registered frames stay its own (DuckDB
    scopes both to the connection) and go when it closes. Re-opened after a fork: a child never uses
    its parent's database."""
    global _database
    with _database_lock:
        if _database is None or _database[0] != os.getpid():
            _database = (os.getpid(), duckdb.connect())
        return _database[1].cursor()


def _check_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist")
    if p.is_dir():
        raise DataError(f"data file {str(p)!r} is a directory")
    if p.stat().st_size == 0:
        raise DataError(f"data file {str(p)!r} is empty")
    return p


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBEngine(SqlEngine):
    """Exact counts with DuckDB over any relation DuckDB can read.

    ``source`` is a SQL table expression (``read_parquet('x.parquet')``, ``db.main.t``, a registered
    view); prefer the constructors :meth:`from_csv`, :meth:`from_parquet`, :meth:`from_frame`,
    :meth:`from_database` and :meth:`from_path`.
    """

    name = "duckdb"
    dialect = sql.DUCKDB

    def __init__(
        self,
        schema: Schema,
        source: str,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        materialize: bool = True,
        histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT,
        label: str = "the data",
        csv_retry: str | None = None,
        own: bool = False,
    ) -> None:
        super().__init__(schema, histogram_limit=histogram_limit)
        self._own = connection is None or own
        self.con = _connection() if connection is None else connection
        self._label = label
        try:
            self._setup(source, materialize)
        except DataError:
            self.close()
            raise
        except (duckdb.ConversionException, duckdb.InvalidInputException):
            if csv_retry is None:
                self.close()
                raise DataError(f"cannot read {label}: a value does not fit its column's type") from None
            # The CSV sniffer typed a column from a sample; read it again with every row sniffed, so
            # that a text value in a numeric column is reported by name below.
            try:
                self._setup(csv_retry, materialize)
            except DataError:
                self.close()
                raise
            except duckdb.Error as exc:
                self.close()
                # e.g. bytes that are not UTF-8 in a file declared as UTF-8; never DuckDB's dump of lines
                raise DataError(
                    f"cannot read {label} ({type(exc).__name__}): check its --encoding and --sep"
                ) from None
        except duckdb.Error as exc:
            self.close()
            # DuckDB's messages can quote data lines: report only the kind of failure.
            raise DataError(f"cannot read {label} ({type(exc).__name__})") from None

    def _setup(self, source: str, materialize: bool) -> None:
        rel = self.con.sql(f"SELECT * FROM {source}")
        columns = [(c, str(t)) for c, t in zip(rel.columns, rel.types, strict=True)]
        kinds = self._kinds(columns, self._label)
        self._check_numbers(kinds, source)
        table = f"overlapdp_encoded_{next(_serial)}"
        select = sql.encoded_select(self.dialect, self.schema, kinds, source)
        kind = "TABLE" if materialize else "VIEW"
        self.con.execute(f"CREATE OR REPLACE TEMP {kind} {table} AS {select}")
        self._table = table
        self._materialized = materialize
        self._sum_source = (source, kinds)

    # -- constructors --------------------------------------------------------------------------------
    @classmethod
    def from_csv(
        cls,
        schema: Schema,
        path: str | Path,
        *,
        encoding: str | None = None,
        sep: str | None = None,
        **kwargs: Any,
    ) -> DuckDBEngine:
        """A CSV / TSV file, its encoding and separator declared or detected (:mod:`overlapdp.files`).
        DuckDB scans UTF-8 itself; a file in another encoding is decoded by pandas and scanned in memory."""
        from overlapdp.files import csv_format

        p = _check_file(path)
        fmt = csv_format(p, encoding=encoding, sep=sep)
        if not fmt.utf8:
            from overlapdp.schema import read_table

            frame = read_table(p, encoding=fmt.encoding, sep=fmt.sep)
            return cls._scan(schema, frame, f"data file {str(p)!r}", kwargs)
        lit = _sql_string(str(p))
        options = f"header = true, delim = {_sql_string(fmt.sep)}"
        return cls(
            schema,
            f"read_csv({lit}, {options})",
            label=f"data file {str(p)!r}",
            csv_retry=f"read_csv({lit}, {options}, sample_size = -1)",
            **kwargs,
        )

    @classmethod
    def from_parquet(cls, schema: Schema, path: str | Path, **kwargs: Any) -> DuckDBEngine:
        p = _check_file(path)
        return cls(schema, f"read_parquet({_sql_string(str(p))})", label=f"data file {str(p)!r}", **kwargs)

    @classmethod
    def from_path(
        cls,
        schema: Schema,
        path: str | Path,
        *,
        encoding: str | None = None,
        sep: str | None = None,
        **kwargs: Any,
    ) -> DuckDBEngine:
        """Parquet (by suffix ``.parquet`` / ``.pq`` or its magic bytes), else CSV / TSV."""
        from overlapdp.files import is_parquet

        if is_parquet(_check_file(path)):
            return cls.from_parquet(schema, path, **kwargs)
        return cls.from_csv(schema, path, encoding=encoding, sep=sep, **kwargs)

    @classmethod
    def from_frame(cls, schema: Schema, frame: Any, **kwargs: Any) -> DuckDBEngine:
        """A pandas or Polars DataFrame or an Arrow table (scanned in place by DuckDB)."""
        return cls._scan(schema, frame, "the DataFrame", kwargs)

    @classmethod
    def _scan(cls, schema: Schema, frame: Any, label: str, kwargs: dict[str, Any]) -> DuckDBEngine:
        given = kwargs.pop("connection", None)
        connection = given or _connection()
        view = f"overlapdp_frame_{next(_serial)}"
        try:
            connection.register(view, frame)
        except Exception as exc:
            if given is None:
                connection.close()
            raise DataError(
                f"cannot scan a {type(frame).__name__} with DuckDB ({type(exc).__name__})"
            ) from None
        return cls(schema, view, connection=connection, label=label, own=given is None, **kwargs)

    @classmethod
    def from_database(cls, schema: Schema, database: str | Path, table: str, **kwargs: Any) -> DuckDBEngine:
        """A table in an existing DuckDB database file, attached read-only."""
        p = _check_file(database)
        given = kwargs.pop("connection", None)
        # a database file is attached to a connection of its own database (ATTACH is database-wide)
        connection = given or duckdb.connect()
        alias = f"overlapdp_db_{next(_serial)}"
        try:
            connection.execute(f"ATTACH {_sql_string(str(p))} AS {alias} (READ_ONLY)")
        except duckdb.Error as exc:
            raise DataError(f"cannot open DuckDB database {str(p)!r} ({type(exc).__name__})") from None
        found = connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
            [alias, table],
        ).fetchone()
        views = connection.execute(
            "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND view_name = ?",
            [alias, table],
        ).fetchone()
        if not (found and found[0]) and not (views and views[0]):
            raise DataError(f"DuckDB database {str(p)!r} has no table {table!r}")
        source = f'{alias}.main."{table.replace(chr(34), chr(34) * 2)}"'
        return cls(
            schema,
            source,
            connection=connection,
            label=f"table {table!r} of {str(p)!r}",
            own=given is None,
            **kwargs,
        )

    # -- SqlEngine -----------------------------------------------------------------------------------
    def _rows(self, query: str) -> list[tuple[Any, ...]]:
        return self.con.execute(query).fetchall()

    def _arrays(self, query: str, columns: int) -> list[npt.NDArray[np.int64]]:
        got = self.con.execute(query).fetchnumpy()
        return [np.asarray(v, dtype=np.int64) for v in got.values()][:columns]

    def _code_chunks(self, positions: Sequence[int]) -> Iterable[dict[int, npt.NDArray[np.integer]]]:
        cols = ", ".join(f"c{p}" for p in positions)
        reader = self.con.sql(f"SELECT {cols} FROM {self._table} WHERE ok").to_arrow_reader(CHUNK_ROWS)
        for batch in reader:
            yield {p: batch.column(k).to_numpy() for k, p in enumerate(positions)}

    def close(self) -> None:
        if self._own:
            self.con.close()
        elif self._table:
            kind = "TABLE" if self._materialized else "VIEW"
            self.con.execute(f"DROP {kind} IF EXISTS {self._table}")
