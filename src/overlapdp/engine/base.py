"""The engine interface: a table mapped onto a schema, answering exact counts of many predicate queries.

Every engine (DuckDB, pandas, Polars, Spark) maps each column onto its attribute's value indices
(categorical values to indices, numbers to bins, integers to ``value - min``, a missing value to the
attribute's missing index when the schema allows it), exactly as in :mod:`overlapdp.engine.encoding`.
A row with a missing value the schema does not allow or a value outside the domain on ANY attribute
does not fit the domain. The schema's ``"outside"`` policy decides: ``"error"`` (the default) makes
:meth:`Engine.counts` raise :class:`~overlapdp.errors.OutsideDomainError` naming the attributes, with no
counts; ``"drop"`` keeps such rows in the row count but outside every query's coverage (also a query with
no conditions). How many such rows there are, per attribute, is the data owner's :class:`DomainReport`
(``overlapdp schema check``); the private commands and the service never show it.

Exact counts are NOT private: they are the inputs of the mechanisms, or the data owner's own view.

The batch path (:meth:`Engine.counts`) reads the data once per workload: it groups the in-domain rows by
the workload's per-attribute atoms (MATH.md 7.4; a query covers a value iff it covers the value's
atom) into a histogram inside the engine, then answers every query from the histogram in numpy
(:mod:`overlapdp.engine.batch`). When the histogram could be too large (more cells than
``histogram_limit``), it counts with row bitmaps over the engine's code columns
(:mod:`overlapdp.engine.bitmaps`; DuckDB, pandas and Polars export them, for workloads of at least 50
queries) or with conditional sums evaluated by the engine in chunks. Every path gives the same exact
integers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from overlapdp.engine.batch import answer_from_histogram, histogram_columns
from overlapdp.engine.bitmaps import bitmap_counts, needed_positions
from overlapdp.errors import DataError, OutsideDomainError
from overlapdp.overlap.atoms import Atoms, compute_atoms
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Clipping, check_summable
from overlapdp.schema import Schema

Method = Literal["auto", "histogram", "conditional", "bitmap"]

#: Above this many possible histogram cells (min of the atom grid and the in-domain rows), counts
#: fall back to conditional sums.
DEFAULT_HISTOGRAM_LIMIT = 5_000_000
# Histogram cells x signatures always worth answering from the histogram (about a second of numpy).
_HISTOGRAM_WORK = 20_000_000
# Row bitmaps pay for reading the code columns out of the engine once many queries share them.
_BITMAP_MIN_QUERIES = 50
# Histogram cell visits per bitmap word from which bitmaps are preferred (measured on Adult, 32 561 rows:
# 50 queries on 4 random attributes, 47 signatures, histogram 39 ms, bitmaps 6.2 ms; 200 of them 93 ms /
# 10.5 ms; one signature of 3 attributes stays on the histogram).
_BITMAP_PREFERRED = 8


@dataclass(frozen=True)
class DomainReport:
    """What the data owner must know about rows that do not fit the schema (exact: NOT private).

    ``missing[a]`` counts rows whose value on attribute ``a`` is missing (NULL / NaN / empty cell),
    whether the schema allows it (``a`` in ``missing_allowed``: the row fits, with the missing value) or
    not; ``outside[a]`` counts rows whose value is present but not in the attribute's domain (an unknown
    category, a number outside the bins or the integer range, a non-integral number in an int attribute).
    ``rows_outside`` counts rows with at least one value that does not fit: a present value outside the
    domain or a missing value the schema does not allow.
    """

    rows: int
    rows_outside: int
    missing: dict[str, int] = field(default_factory=dict)
    outside: dict[str, int] = field(default_factory=dict)
    missing_allowed: frozenset[str] = frozenset()

    @classmethod
    def from_counts(
        cls, names: Sequence[str], counts: Sequence[Any], missing_allowed: Iterable[str] = ()
    ) -> DomainReport:
        """From one row of counts: all rows, rows outside, then missing and outside per attribute in
        turn (the layout the SQL and Polars report queries select); NULL counts are 0."""
        v = [int(x or 0) for x in counts]
        return cls(
            rows=v[0],
            rows_outside=v[1],
            missing={n: v[2 + 2 * j] for j, n in enumerate(names)},
            outside={n: v[3 + 2 * j] for j, n in enumerate(names)},
            missing_allowed=frozenset(missing_allowed),
        )

    @property
    def rows_inside(self) -> int:
        return self.rows - self.rows_outside

    def problems(self) -> dict[str, dict[str, int]]:
        """Attributes with values that do not fit: ``{name: {"missing": m, "outside": o}}``, where ``m``
        counts only missing values the schema does not allow."""
        out: dict[str, dict[str, int]] = {}
        for name in self.missing:
            m = 0 if name in self.missing_allowed else self.missing.get(name, 0)
            o = self.outside.get(name, 0)
            if m or o:
                out[name] = {"missing": m, "outside": o}
        return out

    def describe(self) -> str:
        """One line for the data owner (counts and attribute names only, never data values)."""
        if not self.rows_outside:
            return f"all {self.rows} rows lie inside the schema's domain"
        parts = [
            f"{name}: {p['missing']} missing (not allowed), {p['outside']} outside the domain"
            for name, p in self.problems().items()
        ]
        return f"{self.rows_outside} of {self.rows} rows lie outside the schema's domain ({'; '.join(parts)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "rows_outside": self.rows_outside,
            "missing": dict(self.missing),
            "missing_allowed": sorted(self.missing_allowed),
            "outside": dict(self.outside),
        }


class Engine(ABC):
    """A table mapped onto ``schema``; exact counts of predicate queries over it.

    Subclasses provide the mapping report, a grouped histogram of atom tuples and conditional counts;
    this class plans a workload and answers it.
    """

    #: Short name used by the CLI (``--engine``).
    name: str = "engine"

    def __init__(self, schema: Schema, *, histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT) -> None:
        self.schema = schema
        self.histogram_limit = histogram_limit
        self._report: DomainReport | None = None

    # -- what subclasses implement -------------------------------------------------------------------
    @abstractmethod
    def _compute_report(self) -> DomainReport:
        """Row count and per-attribute missing / out-of-domain counts."""

    @abstractmethod
    def _histogram(self, atoms: Atoms) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """In-domain rows grouped by atom tuple over ``atoms.attributes`` (in that order).

        Returns ``(cells, weights)``: ``cells[h, k]`` is the atom of attribute ``atoms.attributes[k]`` in
        cell ``h`` and ``weights[h]`` its number of rows; with no active attribute, one cell (or none).
        """

    @abstractmethod
    def _conditional_counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        """Exact counts of non-contradictory queries by conditional sums over the in-domain rows."""

    def _code_chunks(self, positions: Sequence[int]) -> Iterable[dict[int, npt.NDArray[np.integer]]] | None:
        """The in-domain rows' value indices on ``positions``, in chunks, for the bitmap path; None when
        the engine does not export them (it then counts by conditional sums)."""
        return None

    def _conditional_sums(self, queries: Sequence[PredicateQuery], clipping: Clipping) -> list[int]:
        """Exact clipped sums (in units of ``clipping.step``) of non-contradictory queries over the
        in-domain rows (:mod:`overlapdp.engine.aggregates`); engines that cannot sum say so."""
        raise DataError(f"the {self.name} engine cannot compute sums")

    def close(self) -> None:
        """Release engine resources (connections, cached tables); the engine is unusable afterwards."""
        return None

    # -- the public interface ------------------------------------------------------------------------
    @property
    def report(self) -> DomainReport:
        """Rows, and rows outside the domain per attribute (computed once)."""
        if self._report is None:
            self._report = self._compute_report()
        return self._report

    @property
    def rows(self) -> int:
        """Total number of rows, including those outside the domain."""
        return self.report.rows

    def check_fits(self) -> None:
        """Apply the schema's ``"outside"`` policy: with ``"error"`` (the default), rows that do not fit
        the domain raise :class:`~overlapdp.errors.OutsideDomainError` naming the attributes, without any
        count (the figures are the data owner's, from ``overlapdp schema check``)."""
        rep = self.report
        if not rep.rows_outside or self.schema.outside != "error":
            return
        problems = rep.problems()
        missing = [n for n, p in problems.items() if p["missing"]]
        outside = [n for n, p in problems.items() if p["outside"]]
        found = []
        if missing:
            found.append(f"missing values on {_names(missing)}, which the schema does not allow")
        if outside:
            found.append(f"values outside the domain of {_names(outside)}")
        raise OutsideDomainError(
            f'the data has {" and ".join(found)}; the schema\'s policy is "outside": "error". '
            "See the figures with 'overlapdp schema check SCHEMA --data FILE' (not private: for the data "
            'owner), then allow missing values with "missing": true on the attribute, widen the domain, '
            'or state "outside": "drop" in the schema to leave such rows out of every count',
            attributes=tuple(problems),
        )

    def counts(self, queries: Sequence[PredicateQuery], *, method: Method = "auto") -> list[int]:
        """Exact count of each query: in-domain rows whose values lie in the query's coverage.

        Raises :class:`~overlapdp.errors.OutsideDomainError` when rows do not fit the domain and the
        schema's policy is ``"outside": "error"`` (:meth:`check_fits`).

        ``method="auto"`` groups by atoms when the histogram is small enough and otherwise counts with
        row bitmaps (:mod:`overlapdp.engine.bitmaps`, for engines that export their code columns and
        workloads of at least 50 queries) or conditional sums; ``"histogram"`` / ``"conditional"`` /
        ``"bitmap"`` force a path (for tests).
        """
        qs = list(queries)
        if not qs:
            return []
        self.check_fits()
        for q in qs:
            if q.schema is not self.schema and q.schema != self.schema:
                raise DataError(
                    f"query {q.id or q.describe()!r} was built on another schema than the engine's data"
                )
        if method not in ("auto", "histogram", "conditional", "bitmap"):
            raise ValueError(f"unknown counting method {method!r}")
        if method == "conditional":
            return self._counts_conditional(qs)
        if method == "bitmap":
            return self._counts_bitmap(qs)
        atoms = compute_atoms(qs, self.schema)
        if method == "auto" and not self._histogram_fits(atoms, qs):
            if len(qs) >= _BITMAP_MIN_QUERIES:
                return self._counts_bitmap(qs)
            return self._counts_conditional(qs)
        cells, weights = self._histogram(atoms)
        answers = answer_from_histogram(atoms, cells, weights, histogram_columns(atoms, qs))
        return [int(a) for a in answers]

    def sums(self, queries: Sequence[PredicateQuery], clipping: Clipping) -> list[int]:
        """Exact clipped sum of ``clipping.column`` over each query's rows, as integers in units of
        ``clipping.step`` (:mod:`overlapdp.engine.aggregates`, MATH.md 6.4): the rows a count of the query
        counts, each contributing ``min(max(floor(v/step + 1/2), L), H)``. NOT private."""
        qs = list(queries)
        for q in qs:
            if q.schema is not self.schema and q.schema != self.schema:
                raise DataError(
                    f"query {q.id or q.describe()!r} was built on another schema than the engine's data"
                )
        check_summable(self.schema, clipping.column)
        out = [0] * len(qs)
        live = [i for i, q in enumerate(qs) if not q.is_contradiction]
        if live:
            got = self._conditional_sums([qs[i] for i in live], clipping)
            for i, s in zip(live, got, strict=True):
                out[i] = int(s or 0)
        return out

    def _histogram_fits(self, atoms: Atoms, queries: Sequence[PredicateQuery]) -> bool:
        """Whether the histogram path is expected to be cheaper than conditional sums.

        The histogram has at most ``min(atom grid, in-domain rows)`` cells, and answering from it touches
        every cell about once per distinct set of constrained attributes (signature); conditional sums
        touch every row once per query. The histogram must also fit ``histogram_limit`` cells.
        """
        rows = self.report.rows_inside
        cells = min(atoms.grid_size, rows)
        if cells > self.histogram_limit:
            return False
        signatures = len({q.active for q in queries})
        if len(queries) >= _BITMAP_MIN_QUERIES:
            # many signatures (mixed attributes: each touches every cell again) against row bitmaps, one
            # 64-row word per row chunk and constrained attribute of each query
            words = sum(len(q.active) for q in queries) * (rows // 64 + 1)
            if signatures * cells > _BITMAP_PREFERRED * words:
                return False
        return signatures * cells <= max(_HISTOGRAM_WORK, len(queries) * rows // 10)

    def _counts_bitmap(self, qs: list[PredicateQuery]) -> list[int]:
        chunks = self._code_chunks(needed_positions(qs))
        if chunks is None:
            return self._counts_conditional(qs)
        return bitmap_counts(chunks, qs)

    def _counts_conditional(self, qs: list[PredicateQuery]) -> list[int]:
        out = [0] * len(qs)
        live = [i for i, q in enumerate(qs) if not q.is_contradiction]
        if live:
            got = self._conditional_counts([qs[i] for i in live])
            for i, c in zip(live, got, strict=True):
                out[i] = int(c)
        return out

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {len(self.schema)} attributes>"


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)
