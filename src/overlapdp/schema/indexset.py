"""Compact immutable sets of value indices: sorted, disjoint, non-adjacent half-open intervals.

An attribute with ``n`` values has value indices ``0..n-1``. A predicate's coverage is a subset of them.
Ranges are one interval; value sets are a few; a negated range is two. Interval lists stay small for
the predicates people write, whatever the domain size, and their boundaries are exactly what the overlap
engine needs to build per-attribute atoms (MATH.md 7.4).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class IndexSet:
    """A set of integer indices stored as sorted disjoint half-open intervals ``[lo, hi)``."""

    intervals: tuple[tuple[int, int], ...] = ()

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def empty() -> IndexSet:
        return _EMPTY

    @staticmethod
    def interval(lo: int, hi: int) -> IndexSet:
        """``[lo, hi)``; empty when ``hi <= lo``."""
        return IndexSet(((lo, hi),)) if hi > lo else _EMPTY

    @staticmethod
    def full(n: int) -> IndexSet:
        return IndexSet.interval(0, n)

    @staticmethod
    def from_indices(indices: Iterable[int]) -> IndexSet:
        values = sorted(set(int(i) for i in indices))
        out: list[tuple[int, int]] = []
        for v in values:
            if out and out[-1][1] == v:
                out[-1] = (out[-1][0], v + 1)
            else:
                out.append((v, v + 1))
        return IndexSet(tuple(out))

    @staticmethod
    def from_intervals(intervals: Iterable[tuple[int, int]]) -> IndexSet:
        """Normalise any list of ``[lo, hi)`` intervals (overlapping, unsorted, empty ones allowed)."""
        items = sorted((int(lo), int(hi)) for lo, hi in intervals if hi > lo)
        out: list[tuple[int, int]] = []
        for lo, hi in items:
            if out and lo <= out[-1][1]:
                if hi > out[-1][1]:
                    out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return IndexSet(tuple(out))

    # -- queries --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(hi - lo for lo, hi in self.intervals)

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.intervals:
            yield from range(lo, hi)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int | np.integer):
            return False
        i = int(index)
        # Few intervals in practice; a binary search would not pay for itself.
        return any(lo <= i < hi for lo, hi in self.intervals)

    def min(self) -> int:
        if not self.intervals:
            raise ValueError("empty IndexSet has no minimum")
        return self.intervals[0][0]

    def is_full(self, n: int) -> bool:
        return self.intervals == ((0, n),) or (n == 0 and not self.intervals)

    def is_interval(self) -> bool:
        return len(self.intervals) <= 1

    def to_array(self) -> npt.NDArray[np.int64]:
        if not self.intervals:
            return np.zeros(0, dtype=np.int64)
        if len(self.intervals) == 1:
            return np.arange(*self.intervals[0], dtype=np.int64)
        if len(self) <= 256:  # a few values (a value set): one array from a list, not one per interval
            return np.array([i for lo, hi in self.intervals for i in range(lo, hi)], dtype=np.int64)
        return np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in self.intervals])

    def mask(self, n: int) -> npt.NDArray[np.bool_]:
        """A boolean vector of length ``n`` that is True on the members."""
        out = np.zeros(n, dtype=bool)
        for lo, hi in self.intervals:
            out[max(lo, 0) : min(hi, n)] = True
        return out

    # -- algebra --------------------------------------------------------------------------------
    def intersect(self, other: IndexSet) -> IndexSet:
        a, b = self.intervals, other.intervals
        i = j = 0
        out: list[tuple[int, int]] = []
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo < hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return IndexSet(tuple(out))

    def isdisjoint(self, other: IndexSet) -> bool:
        a, b = self.intervals, other.intervals
        i = j = 0
        while i < len(a) and j < len(b):
            if max(a[i][0], b[j][0]) < min(a[i][1], b[j][1]):
                return False
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return True

    def union(self, other: IndexSet) -> IndexSet:
        return IndexSet.from_intervals(self.intervals + other.intervals)

    def complement(self, n: int) -> IndexSet:
        """Members of ``0..n-1`` not in this set."""
        out: list[tuple[int, int]] = []
        prev = 0
        for lo, hi in self.intervals:
            if lo > prev:
                out.append((prev, min(lo, n)))
            prev = max(prev, hi)
        if prev < n:
            out.append((prev, n))
        return IndexSet.from_intervals(out)

    def __and__(self, other: IndexSet) -> IndexSet:
        return self.intersect(other)

    def __or__(self, other: IndexSet) -> IndexSet:
        return self.union(other)

    def __repr__(self) -> str:
        parts = [str(lo) if hi == lo + 1 else f"{lo}..{hi - 1}" for lo, hi in self.intervals]
        return "IndexSet{" + ", ".join(parts) + "}"


_EMPTY = IndexSet(())
