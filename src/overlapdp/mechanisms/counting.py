"""Where an interactive mechanism gets its exact counts: a small interface so data engines plug in.

A :class:`Counter` answers ``q(D)`` for predicate queries. It is built from a plain function
``PredicateQuery -> int``, an :class:`~overlapdp.engine.EncodedTable` (through
:func:`overlapdp.engine.exact_counts`), an :class:`~overlapdp.engine.Engine`, or any table
:func:`overlapdp.engine.inputs.open_data` accepts: pandas, Polars (eager or lazy), Arrow (Table or
RecordBatch), a DuckDB relation, a Spark DataFrame, each counted by its natural engine, many queries in
one pass. Nothing here adds noise.

Tables are opened and counted by the engine layer, one step down the data flow (DESIGN.md):
:func:`overlapdp.engine.inputs.open_data` and :func:`overlapdp.engine.inputs.table_counts` (light: no
engine or data-frame library is imported until a table is read).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from overlapdp.engine.inputs import open_data as open_table
from overlapdp.engine.inputs import table_counts as exact_table_counts
from overlapdp.mechanisms.errors import MechanismError
from overlapdp.query import PredicateQuery
from overlapdp.tables import data_kind, unsupported

if TYPE_CHECKING:  # pandas and the engines are imported when a table is counted
    from overlapdp.engine.base import Engine, Method
    from overlapdp.schema import Schema

CountFunction: TypeAlias = Callable[[PredicateQuery], int]
#: A Counter, a count function, an EncodedTable, an Engine, or a pandas / Polars / Arrow / DuckDB /
#: Spark table (checked at run time by :func:`overlapdp.engine.inputs.data_kind`; those libraries are
#: optional to the type checker's view, hence ``Any``).
DataLike: TypeAlias = Any

# A few queries: conditional sums beat building the atom histogram (the service measured about 2x on
# DuckDB for one query on Adult); a batch reads the data once through the histogram.
_CONDITIONAL_UP_TO = 4


class _TableCounts:
    """Exact counts from an engine opened on a table the first time queries on a schema arrive.

    The engine is opened lazily because the schema comes with the queries; it is kept (the table is
    encoded once, not per query) and serves one thread at a time (a DuckDB connection is not safe for
    concurrent use). Engines this object opened are closed when it is collected.
    """

    def __init__(self, data: Any) -> None:
        self._data = data
        self._engines: dict[Schema, Engine] = {}
        self._lock = threading.Lock()
        owned = self._engines if data_kind(data) != "engine" else {}
        weakref.finalize(self, _close_all, owned)

    def many(self, queries: Sequence[PredicateQuery]) -> list[int]:
        qs = list(queries)
        if not qs:
            return []
        schema = qs[0].schema
        method: Method = "conditional" if len(qs) <= _CONDITIONAL_UP_TO else "auto"
        with self._lock:
            engine = self._engines.get(schema)
            if engine is None:
                engine = open_table(self._data, schema)
                self._engines[schema] = engine
            return engine.counts(qs, method=method)


def _close_all(engines: dict[Schema, Engine]) -> None:
    for engine in engines.values():
        # At collection time the caller's connection (a DuckDB relation's) may be closed already.
        with contextlib.suppress(Exception):
            engine.close()


class Counter:
    """Exact counts of predicate queries from one data source."""

    def __init__(self, count_one: CountFunction, count_many: Callable[[Sequence[PredicateQuery]], list[int]]):
        self._one = count_one
        self._many = count_many

    def count(self, query: PredicateQuery) -> int:
        value = self._one(query)
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                as_int = int(value)
            except (TypeError, ValueError):
                raise MechanismError(
                    f"the count function returned {type(value).__name__}, not an integer"
                ) from None
            if as_int != value:
                raise MechanismError("the count function returned a non-integer count")
            value = as_int
        return value

    def count_many(self, queries: Sequence[PredicateQuery]) -> list[int]:
        return [int(v) for v in self._many(queries)]

    @staticmethod
    def of(data: DataLike) -> Counter:
        """A counter for a count function, an existing counter, an encoded table, an engine, or a table
        of any kind :func:`overlapdp.engine.inputs.open_data` accepts (read when first counted).

        Anything else raises :class:`~overlapdp.errors.UnsupportedDataError` listing the accepted kinds.
        """
        if isinstance(data, Counter):
            return data
        kind = data_kind(data)
        if kind == "encoded":
            table = data

            def many(qs: Sequence[PredicateQuery]) -> list[int]:
                return exact_table_counts(qs, table)

            return Counter(lambda q: many([q])[0], many)
        if kind is not None:
            counts = _TableCounts(data)
            return Counter(lambda q: counts.many([q])[0], counts.many)
        if callable(data):
            fn = data
            return Counter(fn, lambda qs: [fn(q) for q in qs])
        raise unsupported(
            data, extra=", an EncodedTable, an Engine, a Counter or a count function (PredicateQuery -> int)"
        )
