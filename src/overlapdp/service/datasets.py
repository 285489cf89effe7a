"""Registered data sets held open: schema and the engine that counts them (``overlapdp.engine``).

Engines are not promised to be safe for concurrent use (DuckDB's connection is not), so each data set's
engine is used under its own lock. Exact counts never leave the service without noise.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from overlapdp.engine import ENGINES, Engine, open_engine
from overlapdp.errors import DataError, OverlapDPError
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

#: The engine a data set is registered with unless another is named.
DEFAULT_ENGINE = "duckdb"


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise DataError(f"engine {engine!r} is not available; use one of {', '.join(ENGINES)}")
    return engine


class LoadedDataset:
    """A data set ready to count."""

    def __init__(self, name: str, schema: Schema, engine: Engine) -> None:
        self.name = name
        self.schema = schema
        self.engine = engine
        self._lock = threading.Lock()

    @property
    def rows(self) -> int:
        return self.engine.rows

    def counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        with self._lock:
            return self.engine.counts(list(queries))

    def count(self, query: PredicateQuery) -> int:
        return self.counts([query])[0]

    def close(self) -> None:
        with self._lock:
            self.engine.close()


def load_dataset(name: str, path: str | Path, schema_json: Any, engine: str) -> LoadedDataset:
    """Open the file with the engine; errors name the file and the attribute, never a value."""
    check_engine(engine)
    schema = Schema.from_json(schema_json)
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {str(p)!r} does not exist or is not a file")
    try:
        opened = open_engine(engine, schema, p)
    except OverlapDPError:
        raise
    except Exception as exc:  # the engine's own error text may quote the file's contents
        raise DataError(
            f"engine {engine!r} cannot read data file {str(p)!r} ({type(exc).__name__})"
        ) from None
    try:
        opened.report  # noqa: B018  (reads the file once now: a bad file fails at registration)
    except OverlapDPError:
        opened.close()
        raise
    except Exception as exc:
        opened.close()
        raise DataError(
            f"engine {engine!r} cannot read data file {str(p)!r} ({type(exc).__name__})"
        ) from None
    return LoadedDataset(name, schema, opened)
