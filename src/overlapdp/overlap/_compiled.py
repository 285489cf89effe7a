"""A workload flattened into numpy arrays: per active attribute, the intervals of every query's coverage
cut into elementary segments (MATH.md 7.4).

Segments are the pieces between consecutive interval endpoints; every query covers a segment entirely
or not at all, so any maximum over domain rows equals the maximum over segment tuples (exact). Queries
whose coverage is empty on some attribute (contradictions) cover no row and are dropped. Attributes no
query constrains are dropped too (every query covers all of them).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from operator import attrgetter, is_
from struct import Struct
from typing import overload

import numpy as np
import numpy.typing as npt

from overlapdp.overlap.result import SchemaMismatchError
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Attributes of at most this many values (or of at most 8 values per endpoint, up to the cap: 160 MB of
# mark and int32 counts) are ranked by a dense mark + prefix count (O(n + m), no sort).
DENSE_RANK_LIMIT = 1 << 22
DENSE_RANK_CAP = 1 << 25


@dataclass(frozen=True)
class AttributeSegments:
    """Segments of one active attribute and each constraining query's coverage in segment indices.

    Segment ``s`` holds the value indices ``cuts[s] .. cuts[s+1]-1``. Interval ``k`` belongs to query
    ``query[k]`` and covers segments ``lo[k] .. hi[k]-1``; a query that does not constrain the attribute
    has no interval here and covers every segment. Intervals are listed in query order (``query`` is
    sorted) and only live queries have any.
    """

    position: int
    cuts: IntArray
    query: IntArray
    lo: IntArray
    hi: IntArray
    # ``constrained[q]``: query q constrains the attribute. None: exactly the queries with an interval
    # here, among ``t``; the mask is then built when read (O(t)), never stored, so a workload over
    # thousands of attributes does not hold an attributes x queries table.
    mask: BoolArray | None
    t: int = 0

    @property
    def constrained(self) -> BoolArray:
        """Boolean per query of the workload: does it constrain this attribute."""
        if self.mask is not None:
            return self.mask
        out = np.zeros(self.t, dtype=bool)
        out[self.query] = True
        return out

    @property
    def size(self) -> int:
        return int(self.cuts.shape[0]) - 1

    def membership(self, live: IntArray) -> BoolArray:
        """Boolean ``(segments, len(live))`` matrix: does query ``live[c]`` cover segment ``s``."""
        t = int(self.constrained.shape[0])
        col = np.full(t, -1, dtype=np.int64)
        col[live] = np.arange(live.shape[0])
        out = np.zeros((self.size, live.shape[0]), dtype=bool)
        out[:, ~self.constrained[live]] = True
        # Difference array along segments, then cumulative sum: O(intervals + segments * queries).
        keep = col[self.query] >= 0
        diff = np.zeros((self.size + 1, live.shape[0]), dtype=np.int32)
        np.add.at(diff, (self.lo[keep], col[self.query[keep]]), 1)
        np.add.at(diff, (self.hi[keep], col[self.query[keep]]), -1)
        out |= np.cumsum(diff, axis=0)[:-1] > 0
        return out

    def value_of(self, segment: int) -> int:
        """A value index inside ``segment`` (its first)."""
        return int(self.cuts[segment])


@dataclass(frozen=True)
class _FlatIntervals:
    """All intervals of a compiled workload: attribute index, query, value bounds ``[vlo, vhi)``, and
    per query the number of attributes it constrains."""

    attribute: IntArray
    query: IntArray
    vlo: IntArray
    vhi: IntArray
    need: IntArray


@dataclass(frozen=True)
class Compiled:
    """The workload in array form; ``live`` are the queries that cover at least one row."""

    schema: Schema
    t: int
    live: IntArray
    attributes: tuple[AttributeSegments, ...]
    single_interval: bool

    @property
    def active(self) -> tuple[int, ...]:
        return tuple(a.position for a in self.attributes)

    @property
    def grid_cells(self) -> int:
        out = 1
        for a in self.attributes:
            out *= a.size
        return out

    def row(self, segments: Sequence[int]) -> tuple[int, ...]:
        """A full domain point in the given segment tuple; inactive attributes take value 0."""
        row = [0] * len(self.schema)
        for a, s in zip(self.attributes, segments, strict=True):
            row[a.position] = a.value_of(int(s))
        return tuple(row)

    def covering(self, row: Sequence[int]) -> IntArray:
        """Indices of the queries covering the domain point ``row``, decided from the raw intervals.

        Independent of how the maximum was found (it reads value indices, not segments): a query covers
        the row iff on every attribute it constrains the row's value lies in one of its intervals.
        """
        ok = np.zeros(self.t, dtype=bool)
        ok[self.live] = True
        if not self.attributes:
            return np.flatnonzero(ok).astype(np.int64)
        flat = self._flat
        values = np.fromiter(
            (row[a.position] for a in self.attributes), dtype=np.int64, count=len(self.attributes)
        )
        v = values[flat.attribute]
        inside = (flat.vlo <= v) & (v < flat.vhi)
        # A query's intervals on one attribute are disjoint: it covers the row iff it is inside one
        # interval on each attribute it constrains.
        hits = np.bincount(flat.query[inside], minlength=self.t)
        ok &= hits == flat.need
        return np.flatnonzero(ok).astype(np.int64)

    @cached_property
    def _flat(self) -> _FlatIntervals:
        """Every attribute's intervals in one set of arrays (for :meth:`covering`)."""
        attrs = self.attributes
        counts = np.fromiter((a.query.shape[0] for a in attrs), dtype=np.int64, count=len(attrs))
        attribute = np.repeat(np.arange(len(attrs), dtype=np.int64), counts)
        query = np.concatenate([a.query for a in attrs])
        vlo = np.concatenate([a.cuts[a.lo] for a in attrs])
        vhi = np.concatenate([a.cuts[a.hi] for a in attrs])
        # Queries constraining an attribute without an interval left on it (atoms dropped them) cover
        # no row through it: they count as needed and never hit.
        need = np.zeros(self.t, dtype=np.int64)
        for a in attrs:
            if a.mask is not None:
                need += a.mask
        first = np.ones(query.shape[0], dtype=bool)
        first[1:] = (attribute[1:] != attribute[:-1]) | (query[1:] != query[:-1])
        masked = np.fromiter((a.mask is not None for a in attrs), dtype=bool, count=len(attrs))
        need += np.bincount(query[first & ~masked[attribute]], minlength=self.t)
        return _FlatIntervals(attribute, query, vlo, vhi, need)


def check_schema(queries: Sequence[PredicateQuery], schema: Schema | None) -> Schema | None:
    """The workload's schema; every query must be over it (:class:`SchemaMismatchError` otherwise).

    The passes over the queries run in C (``map``); each distinct schema OBJECT is compared once, so a
    workload of t queries over one schema costs O(t) pointer reads and one comparison.
    """
    if schema is None:
        if not queries:
            return None
        if not isinstance(queries[0], PredicateQuery):
            raise SchemaMismatchError("item #0 of the workload is not a predicate query")
        schema = queries[0].schema
    if not all(issubclass(k, PredicateQuery) for k in set(map(type, queries))):
        i = next(i for i, q in enumerate(queries) if not isinstance(q, PredicateQuery))
        raise SchemaMismatchError(f"item #{i} of the workload is not a predicate query")
    if all(map(is_, map(_SCHEMA, queries), repeat(schema))):
        return schema  # the usual case: one schema object
    schemas = list(map(_SCHEMA, queries))
    for s in dict(zip(map(id, schemas), schemas, strict=True)).values():
        if s is not schema and s != schema:
            i = next(i for i, x in enumerate(schemas) if x is s)
            q = queries[i]
            raise SchemaMismatchError(
                f"query {q.id!r} (#{i}) is over another schema ({', '.join(q.schema.names)}) "
                f"than the workload ({', '.join(schema.names)})"
            )
    return schema


class QueryIds(Sequence[str | None]):
    """The ids of a workload's queries, read one at a time when needed (error messages name a query by
    its id): no pass over the workload up front."""

    __slots__ = ("_queries",)

    def __init__(self, queries: Sequence[PredicateQuery]) -> None:
        self._queries = queries

    def __len__(self) -> int:
        return len(self._queries)

    @overload
    def __getitem__(self, i: int) -> str | None: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str | None]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str | None] | None:
        if isinstance(i, slice):
            return [q.id for q in self._queries[i]]
        return self._queries[i].id


def _segments(n: int, lo: IntArray, hi: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Cuts of an attribute of ``n`` values (``0``, ``n`` and every endpoint, sorted, distinct) and the
    segment indices of ``lo`` and ``hi`` (``cuts[seg] == value``).

    When the attribute is not much larger than the number of endpoints, a mark per value and a prefix
    count rank them in O(n + m) without sorting (as a difference array would); else ``np.unique``.
    """
    m = int(lo.shape[0])
    if n + 1 <= max(DENSE_RANK_LIMIT, min(8 * m, DENSE_RANK_CAP)):
        mark = np.zeros(n + 1, dtype=bool)
        mark[0] = mark[n] = True
        mark[lo] = True
        mark[hi] = True
        cuts = np.flatnonzero(mark).astype(np.int64, copy=False)
        # int32 prefix counts (n < 2^31 here): half the memory traffic of int64, 3x faster measured.
        rank = np.cumsum(mark, dtype=np.int32)
        return cuts, rank[lo].astype(np.int64) - 1, rank[hi].astype(np.int64) - 1
    ends = np.concatenate([np.array([0, n], dtype=np.int64), lo, hi])
    cuts, inverse = np.unique(ends, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64, copy=False)
    return cuts.astype(np.int64, copy=False), inverse[2 : 2 + m], inverse[2 + m :]


def from_intervals(
    schema: Schema,
    t: int,
    void: BoolArray,
    per_attribute: Sequence[tuple[int, IntArray, IntArray, IntArray]],
    single: bool,
) -> Compiled:
    """The compiled workload from interval arrays (no per-query Python work).

    ``per_attribute``: ``(position, query, lo, hi)`` per attribute, interval ``k`` being the value
    indices ``lo[k] .. hi[k]-1`` of query ``query[k]`` (non-empty, inside the attribute); ``void`` marks
    the queries that cover no row (an empty coverage somewhere); ``single``: at most one interval per
    query and attribute.
    """
    attrs: list[AttributeSegments] = []
    entries = []
    for pos, qa, lo_a, hi_a in sorted(per_attribute, key=lambda e: e[0]):
        keep = ~void[qa]
        if not keep.all():
            qa, lo_a, hi_a = qa[keep], lo_a[keep], hi_a[keep]
        if qa.size:
            entries.append((pos, qa, lo_a, hi_a))
    if len(entries) > _PER_ATTRIBUTE_RANKS:
        ranked = _segments_all(schema, entries)
    else:
        ranked = [_segments(schema.attributes[pos].size, lo_a, hi_a) for pos, _, lo_a, hi_a in entries]
    for (pos, qa, _, _), (cuts, seg_lo, seg_hi) in zip(entries, ranked, strict=True):
        attrs.append(AttributeSegments(pos, cuts, qa, seg_lo, seg_hi, None, t))
    live = np.flatnonzero(~void).astype(np.int64)
    return Compiled(schema, t, live, tuple(attrs), single)


# Up to this many active attributes each is ranked on its own (a dense mark when small, as a 1-D
# workload of 100 000 ranges wants); past it, all at once (one lexsort, no Python step per attribute
# beyond slicing: 10 000 attributes took 0.4 s one by one).
_PER_ATTRIBUTE_RANKS = 64


def _segments_all(
    schema: Schema, entries: Sequence[tuple[int, IntArray, IntArray, IntArray]]
) -> list[tuple[IntArray, IntArray, IntArray]]:
    """:func:`_segments` of every attribute of ``entries`` at once: the endpoints of all attributes
    (with each one's ``0`` and size) sorted by (attribute, value) in one lexsort."""
    k = len(entries)
    counts = np.fromiter((e[2].shape[0] for e in entries), dtype=np.int64, count=k)
    sizes = np.fromiter((schema.attributes[e[0]].size for e in entries), dtype=np.int64, count=k)
    owner = np.repeat(np.arange(k, dtype=np.int64), counts)
    lo = np.concatenate([e[2] for e in entries])
    hi = np.concatenate([e[3] for e in entries])
    m = int(lo.shape[0])
    every = np.arange(k, dtype=np.int64)
    attr = np.concatenate([owner, owner, every, every])
    value = np.concatenate([lo, hi, np.zeros(k, dtype=np.int64), sizes])
    order = np.lexsort((value, attr))
    sa, sv = attr[order], value[order]
    new = np.ones(order.shape[0], dtype=bool)
    new[1:] = (sa[1:] != sa[:-1]) | (sv[1:] != sv[:-1])
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.cumsum(new) - 1  # global index of each endpoint's distinct (attribute, value)
    cuts_all = sv[new]
    starts = np.searchsorted(sa[new], every)  # first distinct endpoint of each attribute
    seg_lo = rank[:m] - starts[owner]
    seg_hi = rank[m : 2 * m] - starts[owner]
    bounds = np.concatenate([starts, [cuts_all.shape[0]]])
    first = np.concatenate([[0], np.cumsum(counts)])
    return [
        (
            cuts_all[bounds[j] : bounds[j + 1]],
            seg_lo[first[j] : first[j + 1]],
            seg_hi[first[j] : first[j + 1]],
        )
        for j in range(k)
    ]


def compile_workload(queries: Sequence[PredicateQuery], schema: Schema) -> Compiled:
    """Flatten ``queries`` (already checked to be over ``schema``) into segments per active attribute.

    Each query's intervals are read once and cached on the query object (its ``_overlap_flat`` field) as
    packed ``(position, lo, hi)`` int64 records (:func:`_flat`; a query is immutable, so the cache never
    goes stale); later workloads holding the same objects (a filter's history, the odometer's several
    figures, a re-run) gather them with C-level passes (``map``, ``bytes.join``) and numpy, with no
    Python step per query. The first call pays one Python step per query, as before.
    """
    t = len(queries)
    try:
        blobs = list(map(_CACHED, queries))
    except AttributeError:  # an object unpickled from before the field existed
        blobs = [None]
    if None in blobs:
        blobs = list(map(_flat, queries))
    data = b"".join(blobs)
    records = np.frombuffer(data, dtype=np.int64).reshape(-1, 3)
    if records.shape[0] == t:
        # Every query has at least one record, so t records means one each (the usual ranges).
        query = np.arange(t, dtype=np.int64)
    else:
        counts = np.fromiter(map(len, blobs), dtype=np.int64, count=t) // _RECORD
        query = np.repeat(np.arange(t, dtype=np.int64), counts)
    pos, lo, hi = records[:, 0], records[:, 1], records[:, 2]
    void = np.zeros(t, dtype=bool)
    void[query[lo >= hi]] = True
    # Records are in query order, then by position (constraints are sorted), then by interval: a query
    # with several intervals on one attribute has two adjacent records with the same query and position.
    single = not bool(np.any((query[1:] == query[:-1]) & (pos[1:] == pos[:-1])))
    per_attribute = []
    ok = lo < hi
    if t and bool((pos == pos[0]).all()):
        # One attribute (1-D workloads): no selection per attribute.
        if pos[0] >= 0:
            per_attribute.append((int(pos[0]), query[ok], lo[ok], hi[ok]))
    else:
        # Group the records by attribute (stable: each group stays in query order), O(n log n), rather
        # than one pass over all records per attribute (O(records x attributes) on wide schemas).
        sel = np.flatnonzero(ok & (pos >= 0))
        order = sel[np.argsort(pos[sel], kind="stable")]
        ps = pos[order]
        cut = np.flatnonzero(ps[1:] != ps[:-1]) + 1
        starts = np.concatenate([[0], cut]).tolist()
        ends = np.concatenate([cut, [ps.shape[0]]]).tolist()
        for a, b in zip(starts, ends, strict=True):
            if a < b:
                idx = order[a:b]
                per_attribute.append((int(ps[a]), query[idx], lo[idx], hi[idx]))
    return from_intervals(schema, t, void, per_attribute, single)


# The flat form of a query: one (position, lo, hi) int64 record per interval of each constraint, a
# (position, 0, 0) record for an empty coverage (a contradiction), and for a query with no constraint
# (a tautology) one (-1, 0, 1) record, which constrains nothing: every query has at least one record.
_RECORD = 3 * 8
_KEY = "_overlap_flat"
_CACHED = attrgetter(_KEY)
_PACK3 = Struct("3q").pack
_TAUTOLOGY = _PACK3(-1, 0, 1)
_SCHEMA = attrgetter("schema")


def _flat(q: PredicateQuery) -> bytes:
    """The flat form of ``q`` (see above), computed once and cached on the (frozen) query object."""
    blob: bytes | None = getattr(q, _KEY, None)
    if blob is not None:
        return blob
    cons = q.constraints
    if not cons:
        blob = _TAUTOLOGY
    elif len(cons) == 1 and len(cons[0][1].intervals) == 1:
        # The common case (one range), packed without building a list.
        pos, cov = cons[0]
        blob = _PACK3(pos, *cov.intervals[0])
    else:
        out: list[int] = []
        for pos, cov in cons:
            ivs = cov.intervals
            if not ivs:
                out += (pos, 0, 0)
            for lo, hi in ivs:
                out += (pos, lo, hi)
        blob = array("q", out).tobytes()
    # A declared field of the frozen dataclass (no part in equality, hashing or repr; replace() and
    # new queries start without it), so the write goes around the frozen __setattr__.
    object.__setattr__(q, _KEY, blob)
    return blob
