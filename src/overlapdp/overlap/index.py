"""``OverlapIndex``: the maximum (weighted) overlap kept up to date as queries are added and removed.

The accountant's admission test (MATH.md 2.7 as a per-row filter) asks "what would
the maximum be if this query were added?". With the per-row view (MATH.md 1.8) the answer is
$\\max(\\gamma_w(Q),\\ f(w_q)+\\max_{x\\in C_q}\\mathrm{load}_Q(x))$ under the outer $g$, because only rows
inside $C_q$ change. So ``peek`` needs the largest load inside the new query's coverage only.

Dense mode (the usual one): a numpy array of loads over the raw values of the attributes queried so far
(grown when a query touches a new attribute, as long as it has at most ``dense_limit`` cells); add is a
box-slice update, peek is a max over the query's box. Remove (rare: rolling back a reservation) rebuilds
the array from the remaining queries, so loads are only ever sums of non-negative terms (subtracting
would cancel catastrophically) and rescans it.

Generic mode (when the dense array would be too large): ``peek`` solves the workload restricted to the
new query's coverage with :func:`max_overlap`; ``remove`` of a witness query recomputes from scratch.
Exact unless the engine's effort limit stops it, in which case the index reports a safe upper bound with
``exact=False``.

Savepoints (:meth:`OverlapIndex.savepoint`, :meth:`rollback`, :meth:`release`): while one is open, every
``add`` keeps an undo record (the prior values of the cells it wrote and of the best-cell bookkeeping), so
a trial admission of several queries is undone in time proportional to what it wrote, never by a rebuild.

Magnitudes (MATH.md 7.8): the stored loads are normalised per component, divided by $2^E$ for the
largest weight exponent $E$ held so far (squared after scaling for ``l2``, rounded up where inexact),
so no sum overflows and no square underflows; a heavier query re-normalises the index (the dense array is
rebuilt). Values are recomputed from the witness: the reported value is the exact comp of the ORIGINAL
weights of the queries covering the witness row, rounded up to a float (:class:`MagnitudeError` when it
exceeds the largest float). The location of the maximum is found on float sums, so with real weights it
is exact up to floating-point rounding (about 1e-12 relative). Not thread-safe.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap.engine import max_overlap
from overlapdp.overlap.magnitude import (
    check_finite,
    compose_up,
    exact_total,
    exponent,
    scale_up,
    square_up,
    unscale_up,
)
from overlapdp.overlap.result import (
    CompError,
    DuplicateQueryError,
    FloatArray,
    OverlapResult,
    SchemaMismatchError,
    UnknownQueryError,
    WeightError,
    check_weight,
    combine_components,
    comp_name,
)
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema

# Cells (times components) of the dense load array: 4M float64 values = 32 MB.
DENSE_LIMIT = 1 << 22
# A query with more boxes than this (product of its interval counts) is indexed with np.ix_.
_MAX_BOXES = 16
# Cells of a float tie band the index values one by one before it reports the safe bound instead.
_BAND_LIMIT = 256

Region = tuple[Any, ...]


@dataclass
class _Undo:
    """How to undo one ``add`` (see :meth:`OverlapIndex._undo_record`)."""

    id: str
    empty: bool
    k: int | None
    dense: bool
    generic: OverlapResult | None
    cached: OverlapResult | None
    load: Any = None
    axes: int = 0
    member: list[np.ndarray] | None = None
    best: Any = None
    best_cell: list[tuple[int, ...] | None] | None = None
    cells: list[tuple[Region, Any]] | None = None
    # A heavier weight re-normalises every held load (MATH.md 7.8): the exponents, the entries' loads and
    # the slots' loads before it (the dense array itself is then saved whole in ``load``).
    renorm: tuple[np.ndarray | None, dict[str, FloatArray], FloatArray | None] | None = None
    # A peek's re-normalisation (no query added): undone like an add's, with no entry to remove.
    peek: bool = False


@dataclass
class _Entry:
    query: PredicateQuery
    weight: float | FloatArray
    raw: FloatArray  # the weight per component (1 for count), shape (k,)
    load: FloatArray  # normalised f(w) per component, shape (k,)
    slot: int


class OverlapIndex:
    """Incremental maximum (weighted) overlap over a growing set of queries (see the module docstring).

    ``comp`` is ``"count"``, ``"sum"``, ``"l2"`` or ``"vector"`` (weights are vectors of one length,
    each component maximised on its own); a :class:`SetComp` is accepted and answered by recomputation:
    its functions then receive indices into the held queries in insertion order (:meth:`ids`), with a
    peeked query last.
    """

    def __init__(
        self,
        schema: Schema,
        comp: Any = "sum",
        *,
        dense_limit: int = DENSE_LIMIT,
        effort: float | None = None,
    ) -> None:
        self._name = comp_name(comp)
        self._comp = comp
        self._schema = schema
        self._dense_limit = int(dense_limit)
        self._effort = effort
        self._entries: dict[str, _Entry] = {}
        self._k: int | None = None if self._name == "vector" else 1
        # Per component: the exponent E the stored loads are divided by (None until the first weight).
        self._shift: np.ndarray | None = None
        # Per component, what tells whether the float cell sums are exact (MATH.md 7.8): how
        # many held loads have each unit exponent (a load is a multiple of 2^unit), how many are not
        # the exact normalised weight (rounded), and an upper bound on the sum of the loads.
        self._units: list[dict[int, int]] = []
        self._rounded = np.zeros(0, dtype=np.int64)
        self._total = np.zeros(0)
        self._reset_dense()
        self._generic_result: OverlapResult | None = None
        self._cached: OverlapResult | None = None
        # Undo records of the adds made since the outermost open savepoint (None: no savepoint open).
        self._journal: list[_Undo] | None = None
        self._marks: list[int] = []  # journal length at each open savepoint, outermost first

    # -- public ------------------------------------------------------------------------------------
    @property
    def schema(self) -> Schema:
        return self._schema

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, id: object) -> bool:
        return id in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def ids(self) -> list[str]:
        """Ids of the held queries in insertion order."""
        return list(self._entries)

    @property
    def value(self) -> float | FloatArray:
        return self.result().value

    @property
    def witness(self) -> dict[str, Any] | None:
        return self.result().witness

    @property
    def effort(self) -> float | None:
        """Seconds each search may take (the engine's effort limit, wall clock from the call; a peek's
        searches share one limit); past it the result is a safe upper bound, not exact. None: no
        limit."""
        return self._effort

    @effort.setter
    def effort(self, seconds: float | None) -> None:
        self._effort = seconds
        # a result a limit cut short (a bound) is searched again under the new one when next asked
        if self._generic_result is not None and not self._generic_result.exact:
            self._generic_result = None
            self._cached = None
        if self._cached is not None and not self._cached.exact:
            self._cached = None

    @property
    def dense(self) -> bool:
        """Whether the dense load array is in use (else peek solves a restricted workload)."""
        return self._dense

    def result(self) -> OverlapResult:
        """The current maximum with its witness."""
        if self._cached is None:
            self._cached = self._compute_result()
        return self._cached

    def add(self, query: PredicateQuery, weight: Any = None) -> OverlapResult:
        """Add ``query`` (its ``id`` must be set and new) with ``weight`` (default ``query.weight``)."""
        self.insert(query, weight)
        return self.result()

    def insert(self, query: PredicateQuery, weight: Any = None, *, defer: bool = False) -> None:
        """:meth:`add` without computing the new result (it is computed when next asked for: replaying
        many queries then costs no witness recomputation per query).

        ``defer``: in generic mode, do not search the query's coverage now; the maximum is recomputed
        from scratch, once, when next asked for (a caller inserting many queries at once, such as the
        filter bringing its lazily admitted charges in, then pays one search instead of one per query).
        Undo records are kept as without it."""
        if query.id is None:
            raise DuplicateQueryError("a query added to an OverlapIndex needs an id")
        if query.id in self._entries:
            raise DuplicateQueryError(f"the index already holds a query with id {query.id!r}")
        w, raw = self._check(query, weight)
        undo = None
        if self._journal is not None:
            undo = self._undo_record(query, raw)
            self._journal.append(undo)
        if self._k is None:
            self._k = int(raw.size)
            self._reset_dense()
        load = self._normalised(raw)
        if self._name == "set":
            self._store(query, w, raw, load, slot=-1)
            self._generic_result = None
            self._cached = None
            return
        if self._dense and not self._ensure_axes(query):
            self._to_generic()
        if self._dense:
            slot = self._alloc_slot(query, load, raw)
            self._store(query, w, raw, load, slot)
            # (the undo record already holds the regions when the array kept its shape)
            regions = (
                [r for r, _ in undo.cells]
                if undo is not None and undo.cells is not None
                else self._regions(query)
            )
            for region in regions:
                self._load[region] += load
            covers_best = any(self._best_cell[c] is not None and self._in(query, c) for c in range(self._kk))
            # (where the float cell sums may round, a near tie may change the witness: MATH.md 7.8)
            if self._improve(regions) or covers_best or self._near_best(regions):
                self._cached = None
        elif defer:
            self._store(query, w, raw, load, slot=-1)
            self._generic_result = None
            self._cached = None
        else:
            new = self._generic_peek(query, raw, load)
            self._store(query, w, raw, load, slot=-1)
            self._generic_result = new
            self._cached = None

    def peek(self, query: PredicateQuery, weight: Any = None) -> OverlapResult:
        """The result ``add(query, weight)`` would give, without adding (no id needed)."""
        w, raw = self._check(query, weight)
        if self._name == "set" or self._k is None:
            return self._recompute(extra=(query, w))
        # Re-normalising for a heavier weight changes only the representation, not the held state;
        # inside a savepoint it is journaled all the same, since a rollback restores loads saved in the
        # representation of their time (and undo records saved earlier are in the old one).
        if self._journal is not None and (
            self._shift is None or not bool(np.all(self._exponents(raw[None, :]) <= self._shift))
        ):
            self._journal.append(self._peek_record())
        load = self._normalised(raw)
        if self._dense and self._fits(query):
            return self._dense_peek(query, raw, load)
        return self._generic_peek(query, raw, load)

    def remove(self, id: str) -> None:
        """Remove the query with this id (for example to roll back a reservation).

        Inside a savepoint only the query added last may be removed (its add is undone)."""
        if self._journal is not None:
            while self._journal and self._journal[-1].peek:  # a later peek's re-normalisation
                self._undo(self._journal.pop())
            if not self._journal or self._journal[-1].id != id:
                raise UnknownQueryError("inside a savepoint only the query added last can be removed")
            self._undo(self._journal.pop())
            return
        entry = self._entries.pop(id, None)
        if entry is None:
            raise UnknownQueryError(f"the index holds no query with id {id!r}")
        self._account(entry, -1)
        if not self._entries:
            self._shift = None
            self._reset_dense()
            self._generic_result = None
            self._cached = None
            return
        if self._name == "set":
            self._generic_result = None
            self._cached = None
            return
        if self._dense:
            self._used[entry.slot] = False
            self._slot_load[entry.slot] = 0.0
            self._slot_raw[entry.slot] = 0.0
            self._free.append(entry.slot)
            # Rebuild from the remaining queries instead of subtracting: (x + big) - big is not x in
            # floats (it is 0 once big >= 2^53 x), which would hide rows and under-report the maximum.
            # Normalised again to the remaining weights (the removed one may have been the heaviest).
            self._shift = None
            self._renormalise(self._exponents(np.array([e.raw for e in self._entries.values()])))
            self._cached = None
        else:
            current = self._generic_result
            if current is None or not current.witness_row or entry.query.covers(current.witness_row):
                self._generic_result = self._recompute()
                self._cached = None

    # -- validation --------------------------------------------------------------------------------
    def _check(self, query: PredicateQuery, weight: Any) -> tuple[float | FloatArray, FloatArray]:
        if not isinstance(query, PredicateQuery):
            raise SchemaMismatchError("only predicate queries can be added to an OverlapIndex")
        if query.schema is not self._schema and query.schema != self._schema:
            raise SchemaMismatchError(f"query {query.id!r} is over another schema than the index")
        what = f"query {query.id!r}"
        if self._name == "vector":
            if weight is None:
                raise CompError(f"{what}: the vector comp needs a weight vector")
            try:
                vec = np.asarray(weight, dtype=np.float64)
            except (TypeError, ValueError):
                raise WeightError(f"{what}: a vector weight must hold numbers") from None
            if vec.ndim != 1 or vec.size == 0:
                raise WeightError(f"{what}: a vector weight must be a non-empty list of numbers")
            if self._k is not None and vec.size != self._k:
                raise WeightError(f"{what}: weight vector has length {vec.size}, the index uses {self._k}")
            bad = np.flatnonzero(~np.isfinite(vec) | (vec < 0))
            if bad.size:
                raise WeightError(
                    f"{what}: component {int(bad[0])} of the weight must be a finite non-negative number"
                )
            return vec.copy(), vec.copy()
        w = check_weight(query.weight if weight is None else weight, what)
        if self._name == "count":
            return w, np.ones(1)
        return w, np.array([w])

    def _store(
        self, query: PredicateQuery, w: float | FloatArray, raw: FloatArray, load: FloatArray, slot: int
    ) -> None:
        assert query.id is not None
        entry = _Entry(query, w, raw, load, slot)
        self._entries[query.id] = entry
        self._account(entry, +1)

    # -- exactness of the float cell sums (MATH.md 7.8) ---------------------------------------------------
    def _load_units(self, raw: FloatArray, load: FloatArray) -> list[int | None]:
        """Per component, the unit exponent of the normalised load (it is a multiple of 2^unit), or None
        when the stored load is not the exact normalised weight (rounded up below the normal range, or
        a square that rounded)."""
        out: list[int | None] = []
        for c in range(load.size):
            x = float(load[c])
            if self._name != "count":
                assert self._shift is not None
                shift = int(self._shift[c])
                scaled = math.ldexp(float(raw[c]), -shift)
                if math.ldexp(scaled, shift) != float(raw[c]) or (
                    self._name == "l2" and Fraction(scaled) ** 2 != Fraction(x)
                ):
                    out.append(None)
                    continue
            out.append(-(x.as_integer_ratio()[1].bit_length() - 1))
        return out

    def _account(self, entry: _Entry, sign: int) -> None:
        """Count ``entry``'s load in (+1) or out (-1) of the exactness bookkeeping; the sum bound is
        only ever raised (it stays an upper bound) until :meth:`_recount`."""
        k = entry.load.size
        if len(self._units) != k:
            self._units = [{} for _ in range(k)]
            self._rounded = np.zeros(k, dtype=np.int64)
            self._total = np.zeros(k)
        if not self._entries and sign < 0:
            self._recount()
            return
        for c, unit in enumerate(self._load_units(entry.raw, entry.load)):
            if unit is None:
                self._rounded[c] += sign
            elif entry.load[c] > 0:
                counts = self._units[c]
                counts[unit] = counts.get(unit, 0) + sign
                if counts[unit] == 0:
                    del counts[unit]
            if sign > 0:
                self._total[c] = math.nextafter(self._total[c] + float(entry.load[c]), math.inf)

    def _recount(self) -> None:
        self._units = []
        self._rounded = np.zeros(0, dtype=np.int64)
        self._total = np.zeros(0)
        for e in self._entries.values():
            self._account(e, +1)

    def _float_error(self, c: int, extra: tuple[FloatArray, FloatArray] | None, located: float) -> float:
        """0 when every float cell sum of component ``c`` (with a peeked query's ``(raw, load)`` rows
        in ``extra``) is exact: all loads exact multiples of 2^u, their total below 2^(53+u) units.
        Else a bound on how far a cell's exact sum may lie from its float (either way) for cells near
        the float maximum ``located``: a cell is a sequential float sum of at most n + 1 non-negative
        loads, off by at most gamma_(n+1) times its value (Higham), plus the loads' own rounding."""
        if self._name == "count":
            return 0.0
        n = len(self._entries)
        total = float(self._total[c]) if c < self._total.size else 0.0
        rounded = int(self._rounded[c]) if c < self._rounded.size else 0
        units = list(self._units[c]) if c < len(self._units) else []
        if extra is not None:
            n += 1
            total = math.nextafter(total + float(extra[1][c]), math.inf)
            unit = self._load_units(extra[0], extra[1])[c]
            if unit is None:
                rounded += 1
            elif extra[1][c] > 0:
                units.append(unit)
        if rounded == 0 and total < math.ldexp(1.0, 53 + min(units, default=0)):
            return 0.0
        return 4 * (n + 2) * 2.0**-53 * min(total, 2 * located) * (1 + 1e-9) + (n + 2) * 2.0**-1073

    def _near_best(self, regions: list[Region]) -> bool:
        """Whether, where the float cell sums may round, a touched region now lies within their error
        of the held maximum (a float tie: the witness must be settled again, MATH.md 7.8)."""
        for c in range(self._kk):
            err = self._float_error(c, None, float(self._best[c]))
            if err <= 0:
                continue
            for region in regions:
                vals, _ = self._region_max(region)
                if vals[c] + 2 * err >= self._best[c]:
                    return True
        return False

    def _band(
        self, c: int, located: float, err: float, extra: PredicateQuery | None, extra_load: float
    ) -> list[tuple[int, ...]] | None:
        """The cells whose exact value may be within the float error of the maximum ``located``: every
        cell whose float is at least ``located - 2 err``, and inside a peeked query's coverage every
        cell that reaches it with the query's load ``extra_load``; None when they are too many to
        value one by one."""
        g = self._load[..., c]
        thr = located - 2 * err
        found: set[tuple[int, ...]] = {tuple(int(v) for v in h) for h in np.argwhere(g >= thr)}
        if extra is not None and len(found) <= _BAND_LIMIT:
            for region in self._regions(extra):
                sub = self._load[region][..., c]
                for h in np.argwhere(sub + extra_load >= thr):
                    found.add(self._global_cell(region, tuple(int(v) for v in h)))
                if len(found) > _BAND_LIMIT:
                    break
        return None if len(found) > _BAND_LIMIT else sorted(found)

    def _global_cell(self, region: Region, local: tuple[int, ...]) -> tuple[int, ...]:
        """Global cell coordinates of ``local`` coordinates inside ``region`` (as :meth:`_region_max`)."""
        out = []
        for ax, part in enumerate(region):
            if isinstance(part, slice):
                out.append(int(part.start) + int(local[ax]))
            else:
                out.append(int(np.asarray(part).reshape(-1)[int(local[ax])]))
        return tuple(out)

    # -- magnitudes (MATH.md 7.8) --------------------------------------------------------------------
    def _exponents(self, raws: np.ndarray) -> np.ndarray:
        """Per component, $E$ with every weight $< 2^E$ (rows of ``raws`` are weights per component)."""
        if self._name == "count" or raws.size == 0:
            return np.zeros(self._kk, dtype=np.int64)
        return np.array([exponent(raws[:, c]) for c in range(raws.shape[1])], dtype=np.int64)

    def _load_of(self, raw: FloatArray) -> FloatArray:
        """The normalised load of weights ``raw`` under the current exponents."""
        if self._name == "count":
            return raw.astype(np.float64, copy=True)
        assert self._shift is not None
        scaled = np.array([scale_up(raw[c : c + 1], int(self._shift[c]))[0] for c in range(raw.size)])
        return square_up(scaled) if self._name == "l2" else scaled

    def _normalised(self, raw: FloatArray) -> FloatArray:
        """``raw``'s load, after re-normalising the index when ``raw`` is heavier than the exponents allow."""
        self._renormalise(self._exponents(raw[None, :]))
        return self._load_of(raw)

    def _renormalise(self, wanted: np.ndarray) -> None:
        """Raise the exponents to at least ``wanted`` (set them when unset) and reload every entry."""
        if self._shift is not None and bool(np.all(wanted <= self._shift)):
            return
        self._shift = wanted.copy() if self._shift is None else np.maximum(self._shift, wanted)
        for e in self._entries.values():
            e.load = self._load_of(e.raw)
            if self._dense and e.slot >= 0:
                self._slot_load[e.slot] = e.load
        self._recount()
        if self._dense and self._entries and self._name != "set":
            self._load.fill(0.0)
            for e in self._entries.values():
                for region in self._regions(e.query):
                    self._load[region] += e.load
            for c in range(self._kk):
                self._rescan(c)

    # -- dense mode --------------------------------------------------------------------------------
    @property
    def _kk(self) -> int:
        return self._k if self._k is not None else 1

    def _reset_dense(self) -> None:
        k = self._kk
        self._dense = True
        self._axes: list[int] = []
        self._sizes: list[int] = []
        self._load: FloatArray = np.zeros((k,), dtype=np.float64)
        self._best = np.zeros(k)
        self._best_cell: list[tuple[int, ...] | None] = [None] * k
        self._member: list[np.ndarray] = []
        cap = 64
        self._used = np.zeros(cap, dtype=bool)
        self._slot_load = np.zeros((cap, k), dtype=np.float64)
        self._slot_raw = np.zeros((cap, k), dtype=np.float64)  # the original weights, for exact values
        self._slot_id: list[str | None] = [None] * cap
        self._free: list[int] = list(range(cap - 1, -1, -1))

    def _fits(self, query: PredicateQuery) -> bool:
        cells = self._load.size
        for p in query.active:
            if p not in self._axes:
                cells *= self._schema.attributes[p].size
        return cells <= self._dense_limit

    def _ensure_axes(self, query: PredicateQuery) -> bool:
        """Grow the dense array to the query's attributes; False if it would exceed the limit."""
        if not self._fits(query):
            return False
        for p in query.active:
            if p in self._axes:
                continue
            n = self._schema.attributes[p].size
            self._load = np.repeat(self._load[..., None, :], n, axis=-2)
            self._axes.append(p)
            self._sizes.append(n)
            self._best_cell = [None if c is None else (*c, 0) for c in self._best_cell]
            self._member.append(np.ones((self._used.shape[0], n), dtype=bool))
        return True

    def _to_generic(self) -> None:
        current = self.result()
        self._dense = False
        self._generic_result = current
        self._load = np.zeros((self._kk,))
        self._member = []

    def _alloc_slot(self, query: PredicateQuery, load: FloatArray, raw: FloatArray) -> int:
        if not self._free:
            cap = self._used.shape[0]
            self._used = np.concatenate([self._used, np.zeros(cap, dtype=bool)])
            self._slot_load = np.concatenate([self._slot_load, np.zeros((cap, self._kk))])
            self._slot_raw = np.concatenate([self._slot_raw, np.zeros((cap, self._kk))])
            self._slot_id.extend([None] * cap)
            self._member = [np.concatenate([m, np.ones((cap, m.shape[1]), dtype=bool)]) for m in self._member]
            self._free = list(range(2 * cap - 1, cap - 1, -1))
        slot = self._free.pop()
        self._used[slot] = True
        self._slot_load[slot] = load
        self._slot_raw[slot] = raw
        self._slot_id[slot] = query.id
        for ax, p in enumerate(self._axes):
            self._member[ax][slot] = query.coverage(p).mask(self._sizes[ax])
        return slot

    def _regions(self, query: PredicateQuery) -> list[Region]:
        """Index tuples (basic slices, or one np.ix_) that together cover the query's coverage once."""
        covs: list[IndexSet] = [query.coverage(p) for p in self._axes]
        if any(not c for c in covs) or query.is_contradiction:
            return []
        n_boxes = math.prod(len(c.intervals) for c in covs)
        if n_boxes <= _MAX_BOXES:
            lists = [[slice(lo, hi) for lo, hi in c.intervals] for c in covs]
            out: list[Region] = [()]
            for options in lists:
                out = [(*r, s) for r in out for s in options]
            return out
        return [np.ix_(*(c.to_array() for c in covs))]

    def _region_max(self, region: Region) -> tuple[FloatArray, list[tuple[int, ...]]]:
        """Largest load per component inside ``region`` and where (global cell coordinates)."""
        sub = self._load[region]
        k = self._kk
        shape = sub.shape[:-1]
        flat = sub.reshape(-1, k)
        arg = flat.argmax(axis=0)
        vals = flat[arg, np.arange(k)]
        cells = []
        for c in range(k):
            local = np.unravel_index(int(arg[c]), shape) if shape else ()
            cell = []
            for ax, part in enumerate(region):
                if isinstance(part, slice):
                    cell.append(int(part.start) + int(local[ax]))
                else:
                    cell.append(int(part.reshape(-1)[int(local[ax])]))
            cells.append(tuple(cell))
        return vals, cells

    def _improve(self, regions: list[Region]) -> bool:
        changed = False
        for region in regions:
            vals, cells = self._region_max(region)
            for c in range(self._kk):
                if self._best_cell[c] is None or vals[c] > self._best[c]:
                    self._best[c], self._best_cell[c] = vals[c], cells[c]
                    changed = True
        if not regions:
            for c in range(self._kk):
                if self._best_cell[c] is None:
                    self._rescan(c)
                    changed = True
        return changed

    def _rescan(self, c: int) -> None:
        g = self._load[..., c]
        flat = int(np.argmax(g))
        self._best[c] = float(g.reshape(-1)[flat])
        self._best_cell[c] = tuple(int(v) for v in np.unravel_index(flat, g.shape)) if g.ndim else ()

    def _in(self, query: PredicateQuery, c: int) -> bool:
        cell = self._best_cell[c]
        assert cell is not None
        return all(v in query.coverage(p) for p, v in zip(self._axes, cell, strict=True))

    def _dense_peek(self, query: PredicateQuery, raw: FloatArray, load: FloatArray) -> OverlapResult:
        # Attributes the query constrains but no stored query does: loads are constant along them,
        # so the best row inside C_q takes the best cell over the known axes and any value of C_q there.
        if query.is_contradiction:
            return self.result() if self._entries else self._generic_peek(query, raw, load)
        regions = self._regions(query)
        k = self._kk
        best_new = np.full(k, -np.inf)
        cells: list[tuple[int, ...] | None] = [None] * k
        for region in regions:
            vals, where = self._region_max(region)
            for c in range(k):
                if vals[c] > best_new[c]:
                    best_new[c], cells[c] = vals[c], where[c]
        new_total = best_new + load
        wins = [
            c
            for c in range(k)
            if self._best_cell[c] is None
            or new_total[c] > self._best[c]
            or (new_total[c] == self._best[c] and self._in(query, c))
        ]
        # Where the float cell sums may round, a row within their error of the maximum may be the
        # heavier one (a float tie): those components are settled by the exact tie band (MATH.md 7.8).
        ties = [
            c
            for c in range(k)
            if c not in wins
            and cells[c] is not None
            and (err := self._float_error(c, (raw, load), float(self._best[c]))) > 0
            and new_total[c] + 2 * err >= self._best[c]
        ]
        if not wins and not ties:
            return self.result()
        parts = self._parts(self.result())
        for c in wins + ties:
            cell = cells[c]
            assert cell is not None
            row = self._row(cell, query)
            located = max(
                float(new_total[c]), float(self._best[c]) if self._best_cell[c] is not None else 0.0
            )
            parts[c] = self._result_at(row, c, query, raw, located=located, extra_load=load)
        if k > 1 or self._name == "vector":
            return combine_components(parts)
        return parts[0]

    def _parts(self, result: OverlapResult) -> list[OverlapResult]:
        """One scalar result per component (an empty index has none stored)."""
        if self._name != "vector":
            return [result]
        if result.components:
            return list(result.components)
        return [OverlapResult(0.0, True, 0.0, 0.0, None, None, (), "empty")] * self._kk

    def _row(self, cell: tuple[int, ...], query: PredicateQuery | None = None) -> tuple[int, ...]:
        row = [0] * len(self._schema)
        for p, v in zip(self._axes, cell, strict=True):
            row[p] = v
        if query is not None:
            for p, cov in query.constraints:
                if p not in self._axes and cov:
                    row[p] = cov.min()
        return tuple(row)

    def _covering_slots(self, row: tuple[int, ...]) -> np.ndarray:
        mask = self._used.copy()
        for ax, p in enumerate(self._axes):
            mask &= self._member[ax][:, row[p]]
        return np.flatnonzero(mask)

    def _result_at(
        self,
        row: tuple[int, ...],
        c: int,
        extra: PredicateQuery | None = None,
        extra_raw: Any = None,
        *,
        located: float | None = None,
        extra_load: Any = None,
    ) -> OverlapResult:
        """The exact result at ``row`` for component ``c`` (plus a peeked query, when given): the comp
        of the original weights covering it, rounded up (MATH.md 7.8).

        ``located``: the float maximum (normalised units) at which the dense array located ``row``.
        Where the float cell sums may round, another row within their error may be heavier (a float
        tie): the rows of the tie band are valued exactly and the heaviest is the witness; past
        ``_BAND_LIMIT`` of them the value is the safe bound ``located + error``, ``exact=False``
        (MATH.md 7.8)."""
        if located is not None and self._dense:
            peeked = None if extra is None else (np.asarray(extra_raw, dtype=float), np.asarray(extra_load))
            err = self._float_error(c, peeked, located)
            if err > 0:
                band = self._band(c, located, err, extra, float(peeked[1][c]) if peeked else 0.0)
                if band is None:
                    base = self._result_at(row, c, extra, extra_raw)
                    assert self._shift is not None
                    name = "l2" if self._name == "l2" else "sum"
                    bound = unscale_up(
                        name, math.nextafter(located + err, math.inf), int(self._shift[c]), "index"
                    )
                    v = max(bound, float(base.value))
                    return replace(base, value=v, upper=v, exact=v == float(base.value))
                rows = [row] + [
                    self._row(cell, extra)
                    if extra is not None and self._cell_in(extra, cell)
                    else self._row(cell)
                    for cell in band
                ]
                row = max(rows, key=lambda r: self._exact_at(r, c, extra, extra_raw))
        if self._dense:
            slots = self._covering_slots(row)
            ids = [self._slot_id[s] for s in slots.tolist()]
            weights = self._slot_raw[slots, c].tolist()
        else:
            ids, weights = [], []
            for qid, e in self._entries.items():
                if e.query.covers(row):
                    ids.append(qid)
                    weights.append(float(e.raw[c]))
        if extra is not None and extra.covers(row):
            ids.append(extra.id if extra.id is not None else "#new")
            weights.append(float(extra_raw[c]))
        name = "l2" if self._name == "l2" else "count" if self._name == "count" else "sum"
        value = compose_up(name, weights)
        if not math.isfinite(value):
            heavy = max(range(len(weights)), key=weights.__getitem__)
            check_finite(value, f"query {ids[heavy]!r} (weight {weights[heavy]!r})")
        algorithm = "index" if self._dense else "index-generic"
        return OverlapResult(
            value=value,
            exact=True,
            upper=value,
            lower=value,
            witness=self._schema.row(row),
            witness_row=row,
            queries=tuple(str(i) for i in ids),
            algorithm=algorithm,
        )

    def _cell_in(self, query: PredicateQuery, cell: tuple[int, ...]) -> bool:
        return all(v in query.coverage(p) for p, v in zip(self._axes, cell, strict=True))

    def _exact_at(
        self, row: tuple[int, ...], c: int, extra: PredicateQuery | None, extra_raw: Any
    ) -> Fraction:
        """The exact comp load (sum of f(w) of the original weights) of component ``c`` at ``row``."""
        if self._dense:
            weights = self._slot_raw[self._covering_slots(row), c].tolist()
        else:
            weights = [float(e.raw[c]) for e in self._entries.values() if e.query.covers(row)]
        if extra is not None and extra.covers(row):
            weights.append(float(np.asarray(extra_raw, dtype=float).reshape(-1)[c]))
        if self._name == "count":
            return Fraction(len(weights))
        return exact_total("l2" if self._name == "l2" else "sum", weights)

    def _compute_result(self) -> OverlapResult:
        if not self._entries:
            k = self._kk
            if self._name == "vector":
                z = np.zeros(k if self._k is not None else 0)
                return OverlapResult(z, True, z, z, None, None, (), "empty")
            return OverlapResult(0.0, True, 0.0, 0.0, None, None, (), "empty")
        if self._name == "set" or not self._dense:
            if self._generic_result is None:
                self._generic_result = self._recompute()
            return self._generic_result
        parts = []
        for c in range(self._kk):
            cell = self._best_cell[c]
            if cell is None:
                self._rescan(c)
                cell = self._best_cell[c]
            assert cell is not None
            parts.append(self._result_at(self._row(cell), c, located=float(self._best[c])))
        if self._name == "vector":
            return combine_components(parts)
        return parts[0]

    # -- generic mode ------------------------------------------------------------------------------
    def _weights_of(self, entries: list[_Entry]) -> Any:
        if self._name == "vector":
            return [np.asarray(e.weight) for e in entries]
        return [float(e.weight) for e in entries]

    def _left(self, started: float) -> float | None:
        """The effort left of an operation that began at ``started`` (``_clock.now()``)."""
        if self._effort is None:
            return None
        return max(0.0, self._effort - (_clock.now() - started))

    def _recompute(self, extra: tuple[PredicateQuery, Any] | None = None) -> OverlapResult:
        entries = list(self._entries.values())
        queries = [e.query for e in entries]
        weights = self._weights_of(entries)
        if extra is not None:
            queries.append(extra[0])
            weights.append(extra[1])
        return max_overlap(queries, weights, self._comp, effort=self._effort, schema=self._schema)

    def _generic_peek(self, query: PredicateQuery, raw: FloatArray, load: FloatArray) -> OverlapResult:
        """max(current, f(w_q) + max load inside C_q), the second from the restricted workload. The
        effort limit holds for the whole peek: its searches share it, each given the time left."""
        started = _clock.now()
        current = self.result()
        if query.is_contradiction:
            if self._entries:
                return current
            zero = self._result_at(tuple(0 for _ in self._schema.attributes), 0)
            return combine_components([zero] * self._kk) if self._name == "vector" else zero
        restricted: list[PredicateQuery] = []
        rloads: list[FloatArray] = []
        mine = dict(query.constraints)
        for e in self._entries.values():
            cons = e.query.constraints
            if not any(p in mine for p, _ in cons):
                # No attribute in common (the usual case on a wide schema): the two constraint lists
                # side by side, without re-intersecting each coverage.
                if e.query.is_contradiction:
                    continue
                restricted.append(PredicateQuery(self._schema, tuple(sorted(cons + query.constraints))))
                rloads.append(e.load)
                continue
            if e.query.disjoint(query):
                continue
            covs = dict(cons)
            for p, cov in query.constraints:
                covs[p] = covs[p] & cov if p in covs else cov
            restricted.append(PredicateQuery.from_coverages(self._schema, covs))
            rloads.append(e.load)
        k = self._kk
        parts = self._parts(current)
        changed = False
        for c in range(k):
            inside = max_overlap(
                restricted,
                [float(v[c]) for v in rloads],
                "sum",
                effort=self._left(started),
                schema=self._schema,
            )
            cur = parts[c]
            # The current bound in the normalised units of the loads (rounded up).
            assert self._shift is not None
            cur_scaled = scale_up(np.array([float(cur.upper)]), int(self._shift[c]))
            cur_upper = float((square_up(cur_scaled) if self._name == "l2" else cur_scaled)[0])
            cand_upper = float(inside.upper) + float(load[c])
            # The same comparison exactly (MATH.md 7.8): float sums may round a heavier
            # candidate down to a tie; both bounds in the normalised units (squares for l2).
            unit = Fraction(2) ** (int(self._shift[c]) * (2 if self._name == "l2" else 1))
            cand_bound = (Fraction(float(inside.upper)) + Fraction(float(load[c]))) * unit
            if self._name == "l2":
                # squares are rounded to nearest: each at least (1 - 2^-53) times the true square
                cand_bound /= 1 - Fraction(1, 2**53)
            row = inside.witness_row
            if row is None or not query.covers(row):
                # No stored query carries load inside C_q there: any point of C_q is as good.
                point = [0] * len(self._schema)
                for p, cov in query.constraints:
                    point[p] = cov.min()
                row = tuple(point)
            covers_current = cur.witness_row is not None and query.covers(cur.witness_row)
            if (
                self._entries
                and not covers_current
                and cur.exact
                and cur.witness_row is not None
                and (cand_bound <= self._exact_at(cur.witness_row, c, None, None) or self._name == "count")
                and cand_upper <= cur_upper
            ):
                continue
            if cand_upper <= cur_upper and self._entries and not covers_current and not cur.exact:
                continue
            changed = True
            # The best attained row: the candidate inside C_q, or the current witness (now with q).
            # (the rows compared on their exact loads first: one result built, for the better one)
            options = [row]
            if cur.witness_row is not None and self._entries:
                options.append(cur.witness_row)
            best = self._result_at(
                max(options, key=lambda r: self._exact_at(r, c, query, raw)), c, query, raw
            )
            if inside.exact and cur.exact:
                parts[c] = best
                continue
            up = math.nextafter(max(cur_upper, cand_upper), math.inf)
            name = "l2" if self._name == "l2" else "sum"
            up_v = max(unscale_up(name, up, int(self._shift[c]), f"query {query.id!r}"), float(best.lower))
            parts[c] = OverlapResult(
                value=up_v,
                exact=False,
                upper=up_v,
                lower=best.lower,
                witness=best.witness,
                witness_row=best.witness_row,
                queries=best.queries,
                algorithm="index-generic",
            )
        if not changed:
            return current
        return combine_components(parts) if self._name == "vector" else parts[0]

    # -- savepoints ---------------------------------------------------------------------------------
    def savepoint(self) -> int:
        """Open a (nested) savepoint; the returned token is given to :meth:`rollback` or :meth:`release`
        (closing a savepoint closes the ones opened inside it too)."""
        if self._journal is None:
            self._journal = []
        self._marks.append(len(self._journal))
        return len(self._marks) - 1

    def rollback(self, token: int) -> None:
        """Undo every add made since the savepoint ``token`` was opened, and close it."""
        if self._journal is None or not 0 <= token < len(self._marks):
            raise UnknownQueryError("no such savepoint is open")
        mark = self._marks[token]
        while len(self._journal) > mark:
            self._undo(self._journal.pop())
        self.release(token)

    def release(self, token: int) -> None:
        """Close the savepoint ``token``, keeping its adds (undo records go with the outermost one)."""
        if not 0 <= token < len(self._marks):
            raise UnknownQueryError("no such savepoint is open")
        del self._marks[token:]
        if not self._marks:
            self._journal = None

    def _undo_record(self, query: PredicateQuery, raw: FloatArray) -> _Undo:
        """What ``add(query)`` is about to change, saved so that :meth:`_undo` can restore it exactly."""
        assert query.id is not None
        u = _Undo(
            id=query.id,
            empty=not self._entries,
            k=self._k,
            dense=self._dense,
            generic=self._generic_result,
            cached=self._cached,
        )
        if u.empty:
            return u
        renorm = self._shift is not None and not bool(np.all(self._exponents(raw[None, :]) <= self._shift))
        if renorm:
            assert self._shift is not None
            u.renorm = (
                self._shift.copy(),
                {i: e.load.copy() for i, e in self._entries.items()},
                self._slot_load.copy() if self._dense else None,
            )
        if self._name == "set" or not self._dense:
            return u
        # re-normalising rewrites the array in place: then it is saved whole, by value
        u.load = self._load.copy() if renorm else self._load
        u.axes = len(self._axes)
        u.member = self._member
        u.best = self._best.copy()
        u.best_cell = list(self._best_cell)
        if not renorm and self._fits(query) and all(p in self._axes for p in query.active):
            # The array keeps its shape: only the cells the query covers change (saved by value).
            u.cells = [(region, self._load[region].copy()) for region in self._regions(query)]
        return u

    def _peek_record(self) -> _Undo:
        """How to undo a re-normalisation by :meth:`peek` (the whole representation, by value)."""
        u = _Undo(
            id="",
            empty=False,
            k=self._k,
            dense=self._dense,
            generic=self._generic_result,
            cached=self._cached,
            peek=True,
        )
        u.renorm = (
            None if self._shift is None else self._shift.copy(),
            {i: e.load.copy() for i, e in self._entries.items()},
            self._slot_load.copy() if self._dense else None,
        )
        if self._name != "set" and self._dense:
            u.load = self._load.copy()
            u.axes = len(self._axes)
            u.member = self._member
            u.best = self._best.copy()
            u.best_cell = list(self._best_cell)
        return u

    def _undo(self, u: _Undo) -> None:
        entry = None if u.peek else self._entries.pop(u.id)
        if entry is not None:
            self._account(entry, -1)
        if u.empty:
            self._k = u.k
            self._shift = None
            self._reset_dense()
            self._generic_result = None
            self._cached = None
            return
        if entry is not None and entry.slot >= 0:
            self._used[entry.slot] = False
            self._slot_load[entry.slot] = 0.0
            self._slot_raw[entry.slot] = 0.0
            self._slot_id[entry.slot] = None
            self._free.append(entry.slot)
        if u.renorm is not None:
            shift, loads, slot_load = u.renorm
            self._shift = shift
            for i, e in self._entries.items():
                e.load = loads[i]
            self._recount()
            if slot_load is not None:
                n = slot_load.shape[0]
                self._slot_load[:n] = slot_load
        if u.dense and u.load is not None:
            if u.cells is not None:
                for region, before in u.cells:
                    self._load[region] = before
            else:  # the array grew new axes, or the index left dense mode: the old array is untouched
                self._load = u.load
                del self._axes[u.axes :]
                del self._sizes[u.axes :]
                # Member masks: the old list when the index left dense mode; else those of the old axes
                # (possibly re-allocated with more slots, which stay free).
                if not self._dense:
                    assert u.member is not None
                    self._member = u.member
                else:
                    self._member = self._member[: u.axes]
            assert u.best_cell is not None
            self._best = u.best
            self._best_cell = u.best_cell
        self._dense = u.dense
        self._generic_result = u.generic
        self._cached = u.cached
