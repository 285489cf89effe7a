"""What DuckDB and Spark share: the mapping pushed into SQL, the histogram and conditional-sum queries."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from overlapdp.engine import sql
from overlapdp.engine.base import DEFAULT_HISTOGRAM_LIMIT, DomainReport, Engine
from overlapdp.errors import DataError
from overlapdp.overlap.atoms import Atoms
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Clipping
from overlapdp.schema import Schema

# Conditional sums per SQL statement: large enough to share the scan, small enough to compile fast.
CONDITIONAL_CHUNK = 200


class SqlEngine(Engine):
    """An engine whose table is a SQL relation; the encoded table is ``self._table``.

    The encoded table holds one value-index column ``c{j}`` per attribute (a missing value the schema
    allows has the attribute's missing index; ``-2`` missing where not allowed, ``-1`` outside the
    domain) and the flag ``ok`` (every attribute inside the domain).
    """

    dialect: sql.Dialect

    def __init__(self, schema: Schema, *, histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT) -> None:
        super().__init__(schema, histogram_limit=histogram_limit)
        self._table = ""
        # The raw relation and its column kinds (schema order), for sums over raw numbers.
        self._sum_source: tuple[str, list[sql.ColumnKind]] | None = None

    # -- engine specifics ----------------------------------------------------------------------------
    @abstractmethod
    def _rows(self, query: str) -> list[tuple[Any, ...]]:
        """Run a query and return its rows."""

    def _arrays(self, query: str, columns: int) -> list[npt.NDArray[np.int64]]:
        """Run a query and return its columns as int64 arrays (engines override with a columnar fetch)."""
        rows = self._rows(query)
        return [np.asarray([r[j] for r in rows], dtype=np.int64) for j in range(columns)]

    # -- shared set-up -------------------------------------------------------------------------------
    def _kinds(self, columns: Sequence[tuple[str, str]], what: str) -> list[sql.ColumnKind]:
        """Column kinds in schema order; missing columns are an error naming them."""
        types = dict(columns)
        missing = [a.name for a in self.schema if a.name not in types]
        if missing:
            raise DataError(
                f"column(s) {', '.join(repr(m) for m in missing)} named in the schema are missing from {what}"
            )
        kinds: list[sql.ColumnKind] = []
        for attr in self.schema:
            kind = sql.column_kind(types[attr.name])
            sql.check_kind(attr, attr.name, kind, types[attr.name])
            kinds.append(kind)
        return kinds

    def _check_numbers(self, kinds: Sequence[sql.ColumnKind], source: str) -> None:
        """Text in a numeric attribute's column is an error naming the column (values never echoed)."""
        checks = [
            (attr.name, expr)
            for attr, kind in zip(self.schema, kinds, strict=True)
            if (expr := sql.numeric_check(self.dialect, attr, attr.name, kind)) is not None
        ]
        if not checks:
            return
        row = self._rows(f"SELECT {', '.join(e for _, e in checks)} FROM {source}")[0]
        for (name, _), bad in zip(checks, row, strict=True):
            if int(bad or 0) > 0:
                attr = self.schema.attribute(name)
                raise DataError(
                    f"column {name!r}: {int(bad)} value(s) are not numbers, but the schema declares "
                    f"it {attr.kind}"
                )

    # -- Engine --------------------------------------------------------------------------------------
    def _compute_report(self) -> DomainReport:
        row = self._rows(sql.report_select(self.dialect, self.schema, self._table))[0]
        allowed = (a.name for a in self.schema if a.missing)
        return DomainReport.from_counts(self.schema.names, row, allowed)

    def _histogram(self, atoms: Atoms) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        k = len(atoms.attributes)
        if k == 0:
            n = int(self._rows(f"SELECT count(*) FROM {self._table} WHERE ok")[0][0])
            return np.zeros((1, 0), dtype=np.int64), np.asarray([n], dtype=np.int64)
        exprs = ", ".join(
            f"{sql.atom_expression(f'c{a.position}', a.value_atom)} AS a{i}"
            for i, a in enumerate(atoms.attributes)
        )
        query = f"SELECT {exprs}, count(*) AS n FROM {self._table} WHERE ok {self.dialect.group_by(k)}"
        cols = self._arrays(query, k + 1)
        cells = np.stack(cols[:k], axis=1) if cols[0].size else np.zeros((0, k), dtype=np.int64)
        return cells.astype(np.int64, copy=False), cols[k]

    def _conditional_sums(self, queries: Sequence[PredicateQuery], clipping: Clipping) -> list[int]:
        # pandas comes with the aggregates module: imported where a sum is asked for (DESIGN.md)
        from overlapdp.engine.aggregates import sums_select

        if self._sum_source is None:
            raise DataError(f"the {self.name} engine cannot compute sums")
        source, kinds = self._sum_source
        out: list[int] = []
        for start in range(0, len(queries), CONDITIONAL_CHUNK):
            chunk = queries[start : start + CONDITIONAL_CHUNK]
            row = self._rows(sums_select(self.dialect, self.schema, kinds, source, clipping, chunk))[0]
            out.extend(int(v or 0) for v in row)
        return out

    def _conditional_counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        out: list[int] = []
        for start in range(0, len(queries), CONDITIONAL_CHUNK):
            chunk = queries[start : start + CONDITIONAL_CHUNK]
            sums = ", ".join(self.dialect.count_if(sql.query_condition(q.constraints)) for q in chunk)
            row = self._rows(f"SELECT {sums} FROM {self._table} WHERE ok")[0]
            out.extend(int(v or 0) for v in row)
        return out
