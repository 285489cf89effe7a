"""Where an interactive mechanism gets its exact counts: a small interface so data engines plug in.

A :class:`Counter` answers ``q(D)`` for predicate queries. It is built from a plain function
``PredicateQuery -> int``, or from a pandas DataFrame / :class:`~overlapdp.engine.EncodedTable` (through
:func:`overlapdp.engine.exact_counts`, many queries in one pass). Nothing here adds noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from overlapdp.mechanisms.errors import MechanismError
from overlapdp.query import PredicateQuery

if TYPE_CHECKING:  # pandas and the engines are imported when a table is counted
    import pandas as pd

    from overlapdp.engine import EncodedTable

CountFunction: TypeAlias = Callable[[PredicateQuery], int]
DataLike: TypeAlias = "Counter | CountFunction | pd.DataFrame | EncodedTable"


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
        """A counter for a function, a DataFrame, an encoded table, or an existing counter."""
        if isinstance(data, Counter):
            return data
        import pandas as pd

        from overlapdp.engine import EncodedTable, exact_counts

        if isinstance(data, pd.DataFrame | EncodedTable):
            table = data

            def many(qs: Sequence[PredicateQuery]) -> list[int]:
                return exact_counts(qs, table)

            return Counter(lambda q: many([q])[0], many)
        if callable(data):
            fn = data
            return Counter(fn, lambda qs: [fn(q) for q in qs])
        raise MechanismError(
            f"data must be a count function, a DataFrame or an EncodedTable, got {type(data).__name__}"
        )
