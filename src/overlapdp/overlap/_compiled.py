"""A workload flattened into numpy arrays: per active attribute, the intervals of every query's coverage
cut into elementary segments (MATH.md 7.4).

Segments are the pieces between consecutive interval endpoints; every query covers a segment entirely
or not at all, so any maximum over domain rows equals the maximum over segment tuples (exact). Queries
whose coverage is empty on some attribute (contradictions) cover no row and are dropped. Attributes no
query constrains are dropped too (every query covers all of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp.overlap.result import SchemaMismatchError
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class AttributeSegments:
    """Segments of one active attribute and each constraining query's coverage in segment indices.

    Segment ``s`` holds the value indices ``cuts[s] .. cuts[s+1]-1``. Interval ``k`` belongs to query
    ``query[k]`` and covers segments ``lo[k] .. hi[k]-1``; a query that does not constrain the attribute
    has no interval here and covers every segment.
    """

    position: int
    cuts: IntArray
    query: IntArray
    lo: IntArray
    hi: IntArray
    constrained: BoolArray

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
        for a in self.attributes:
            v = row[a.position]
            vlo = a.cuts[a.lo]
            vhi = a.cuts[a.hi]
            hit = np.zeros(self.t, dtype=bool)
            inside = (vlo <= v) & (v < vhi)
            hit[a.query[inside]] = True
            ok &= hit | ~a.constrained
        return np.flatnonzero(ok).astype(np.int64)


def check_schema(queries: Sequence[PredicateQuery], schema: Schema | None) -> Schema | None:
    """The workload's schema; every query must be over it (:class:`SchemaMismatchError` otherwise)."""
    if schema is None:
        if not queries:
            return None
        schema = queries[0].schema
    for i, q in enumerate(queries):
        if not isinstance(q, PredicateQuery):
            raise SchemaMismatchError(f"item #{i} of the workload is not a predicate query")
        if q.schema is not schema and q.schema != schema:
            raise SchemaMismatchError(
                f"query {q.id!r} (#{i}) is over another schema ({', '.join(q.schema.names)}) "
                f"than the workload ({', '.join(schema.names)})"
            )
    return schema


def compile_workload(queries: Sequence[PredicateQuery], schema: Schema) -> Compiled:
    """Flatten ``queries`` (already checked to be over ``schema``) into segments per active attribute."""
    t = len(queries)
    void = np.zeros(t, dtype=bool)
    per_attr: dict[int, tuple[list[int], list[int], list[int]]] = {}
    single = True
    # The hot loop of large workloads: plain lists, bound methods looked up once per attribute.
    for i, q in enumerate(queries):
        for pos, cov in q.constraints:
            ivs = cov.intervals
            if not ivs:
                void[i] = True
                continue
            entry = per_attr.get(pos)
            if entry is None:
                entry = per_attr[pos] = ([], [], [])
            if len(ivs) == 1:
                entry[0].append(i)
                lo, hi = ivs[0]
                entry[1].append(lo)
                entry[2].append(hi)
            else:
                single = False
                for lo, hi in ivs:
                    entry[0].append(i)
                    entry[1].append(lo)
                    entry[2].append(hi)
    attrs: list[AttributeSegments] = []
    for pos in sorted(per_attr):
        qs_l, los_l, his_l = per_attr[pos]
        qa = np.asarray(qs_l, dtype=np.int64)
        lo_a = np.asarray(los_l, dtype=np.int64)
        hi_a = np.asarray(his_l, dtype=np.int64)
        keep = ~void[qa]
        qa, lo_a, hi_a = qa[keep], lo_a[keep], hi_a[keep]
        if qa.size == 0:
            continue
        n = schema.attributes[pos].size
        ends = np.sort(np.concatenate([np.array([0, n], dtype=np.int64), lo_a, hi_a]))
        cuts = ends[np.concatenate([[True], ends[1:] != ends[:-1]])]
        constrained = np.zeros(t, dtype=bool)
        constrained[qa] = True
        attrs.append(
            AttributeSegments(
                pos,
                cuts,
                qa,
                np.searchsorted(cuts, lo_a).astype(np.int64),
                np.searchsorted(cuts, hi_a).astype(np.int64),
                constrained,
            )
        )
    live = np.flatnonzero(~void).astype(np.int64)
    return Compiled(schema, t, live, tuple(attrs), single)
