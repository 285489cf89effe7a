"""Cheap, always-valid upper bounds on the rows' loads, for the filter's lazy admission (MATH.md 2.7.1).

The filter (:mod:`overlapdp.privacy.privacy_filter`) admits a charge at once when these bounds show every
row stays within budget, and decides exactly (a threshold search on the admitted charges' coverages, here
too, or the overlap index) only when they do not. Nothing here decides alone: every bound is an upper
bound of the exact (Fraction) loads once widened by :func:`widen`.

- :class:`Bounds` (one per track): per attribute ``a`` and value ``v`` the float sum ``cells[a][v]`` of
  the loads of the charges that constrain ``a`` and hold ``v``, plus ``base[a]``, the sum of the loads of
  the charges that leave ``a`` free. A charge covering a row ``x`` holds ``x_a`` on every attribute, so
  ``load(x) <= base[a] + cells[a][x_a]`` for EVERY ``a``; the maximum over a region is at most the minimum
  over the attributes of the region's largest such value. That bound is weak when charges constrain few
  of many attributes (each table then holds most of the total), so a second one assigns each charge to
  ONE attribute it constrains, ``share[a][v]`` summing the loads of the charges assigned to ``a`` that
  hold ``v``: a charge covering ``x`` holds ``x_a`` on its assigned ``a``, so ``load(x) <= everywhere +
  sum_a share[a][x_a]`` (``everywhere``: the charges constraining nothing), and the maximum over a region
  is at most the sum over the attributes of the region's largest share. Any assignment is valid; each
  charge goes where it raises the bound least (ties: the attribute it covers the smallest part of). A
  charge costs one slice update per attribute it constrains, plus one. Inside a savepoint every update
  journals the slices it overwrites (never a copy of the arrays), so a rollback restores the bounds bit
  for bit.
- :class:`Members` (single scalar track): the admitted charges' coverages as boolean rows, one matrix per
  attribute, with their exact loads: :meth:`Members.exceeds` decides whether some row of a region pays
  more than a threshold (branch and bound on the same per-attribute bound restricted to the box, leaves
  summed with Fractions), and :meth:`Members.load_at` gives a known row's exact load (quick refusals).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.exact import exact_sum
from overlapdp.overlap.threshold import Problem, exceeds, unit_gcd
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

# Loads outside this range are not stored as their nearest float: below it, the float bound uses the
# floor itself (an upper bound; no sum then loses relative precision to subnormals); above it, infinity
# (the bound then never settles a region holding such a charge, the exact route decides).
_TINY = Fraction(1, 2**900)
_HUGE = Fraction(2**900)
_TINY_F = float(_TINY)
_F32_MAX = float(np.finfo(np.float32).max)
# the threshold decisions over which Members weighs whether trying the kept multipliers first pays
_TRIES = 32
# rows whose exact loads Members keeps (twice the filter's known rows: they rotate)
_AT_ROWS = 128


def up_float(x: Fraction) -> float:
    """A float for the bounds: the nearest float of ``x`` (relative error 2^-53, see :func:`widen`),
    the floor ``2^-900`` for positive loads below it, infinity above ``2^900``."""
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if 2.0**-899 < f < 2.0**899:  # then x is well inside (2^-900, 2^900): its nearest float
        return f
    if x <= 0:
        return 0.0
    if x < _TINY:
        return _TINY_F
    if x > _HUGE:
        return float("inf")
    return float(x)


def widen(v: float, n: int) -> Fraction | None:
    """An exact upper bound of the true sum a float bound ``v`` stands for: the float is a sum of at most
    ``n`` non-negative floats each within 2^-53 of its exact load (or above it), summed in any order, so
    the exact sum is at most ``v (1 + 4 (n + 2) 2^-53)`` (for ``n < 2^40``). None when ``v`` is infinite."""
    if not np.isfinite(v):
        return None
    return Fraction(v) * (1 + Fraction(4 * (n + 2), 2**53))


class Cover:
    """A query's coverage as numpy indices per constrained attribute (a slice for one interval)."""

    __slots__ = ("_d", "_free", "empty", "parts")

    def __init__(self, q: PredicateQuery) -> None:
        attrs = q.schema.attributes
        cons = q.constraints
        self._d = len(attrs)
        self._free: np.ndarray | None = None
        self.empty = any(not c.intervals for _, c in cons)  # a contradiction
        self.parts: list[tuple[int, slice | np.ndarray]] = []
        if not self.empty:
            for p, cov in cons:
                iv = cov.intervals
                if len(iv) == 1:
                    if iv[0][0] == 0 and iv[0][1] == attrs[p].size:
                        continue  # the whole attribute
                    self.parts.append((p, slice(iv[0][0], iv[0][1])))
                else:
                    self.parts.append((p, cov.to_array()))  # several disjoint intervals: never whole

    @property
    def free(self) -> np.ndarray:
        """Per attribute, whether the query leaves it free (built on first use)."""
        if self._free is None:
            free = np.ones(self._d, dtype=bool)
            if self.parts:
                free[[p for p, _ in self.parts]] = False
            self._free = free
        return self._free


# One journal record: the base, peak, share peak and everywhere arrays before, and the cells and share
# slices overwritten.
_Slices = list[tuple[int, slice | np.ndarray, np.ndarray]]
_Record = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, _Slices, _Slices]


# Up to this many attributes the one-component bound loops over them in Python (cheaper than numpy's
# per-call cost); above it numpy does (the wide schemas).
_FEW_ATTRIBUTES = 64


class Bounds:
    """Per-attribute load tables of one track, ``k`` components (Rényi orders) each bounded on its own
    (see the module docstring; MATH.md 2.7.1)."""

    def __init__(self, schema: Schema, k: int) -> None:
        self.k = k
        self.cells = [np.zeros((a.size, k)) for a in schema.attributes]
        self.peak = np.zeros((len(schema.attributes), k))  # max over v of cells[a][v]
        self.base = np.zeros((len(schema.attributes), k))
        self.share = [np.zeros((a.size, k)) for a in schema.attributes]
        self.speak = np.zeros((len(schema.attributes), k))  # max over v of share[a][v]
        self.everywhere = np.zeros(k)
        # attribute values, for the assignment's tie-break (the smaller covered part first)
        self.sizes = [a.size for a in schema.attributes]
        self.journal: list[_Record] | None = None
        self._top: np.ndarray | None = None  # top() until the tables change
        # one component's per-attribute peak + base, share peak and base as floats (see inside_scalar)
        self._scalars: tuple[list[float], list[float], list[float]] | None = None
        # one component (every definition but Rényi DP): 1-D views of the tables (updated in place
        # everywhere, undo_to too), so the scalar paths index them without a second axis; a copy of
        # these Bounds must make them again (a deep copy or a pickle would part them from the tables)
        self._cells1 = [c[:, 0] for c in self.cells] if k == 1 else []
        self._share1 = [s[:, 0] for s in self.share] if k == 1 else []

    @property
    def terms(self) -> int:
        """How many partial sums a bound adds beyond the charges' loads (for :func:`widen`'s count)."""
        return len(self.sizes) + 2

    def inside(self, cover: Cover) -> np.ndarray:
        """Per component, an upper bound (float, see :func:`widen`) on every row's load in the cover."""
        if cover.empty:  # no row inside
            return np.zeros(self.k)
        if self.k == 1:
            return np.array([self.inside_scalar(cover)])
        best = np.full(self.k, np.inf)
        split = self.everywhere.copy()
        if cover.free.any():
            best = (self.peak[cover.free] + self.base[cover.free]).min(axis=0)
            split += self.speak[cover.free].sum(axis=0)
        for p, idx in cover.parts:
            best = np.minimum(best, self.cells[p][idx].max(axis=0) + self.base[p])
            split += self.share[p][idx].max(axis=0)
        return np.asarray(np.minimum(best, split))

    def inside_scalar(self, cover: Cover) -> float:
        """:meth:`inside` of one component (``k == 1``: every definition but Rényi DP), the same float
        operations without numpy's per-call cost on one-element arrays."""
        if cover.empty:
            return 0.0
        best = math.inf
        if len(self.sizes) > _FEW_ATTRIBUTES:  # numpy over the many free attributes
            split = float(self.everywhere[0])
            free = cover.free
            if free.any():
                best = float((self.peak[free, 0] + self.base[free, 0]).min())
                split += float(self.speak[free, 0].sum())
            base = self.base[:, 0].tolist()
        else:  # the per-attribute scalars as Python floats, kept until the tables change
            if self._scalars is None:
                pb = (self.peak[:, 0] + self.base[:, 0]).tolist()
                self._scalars = (pb, self.speak[:, 0].tolist(), self.base[:, 0].tolist())
            pb, speak, base = self._scalars
            split = float(self.everywhere[0])
            constrained = {p for p, _ in cover.parts}
            for a in range(len(pb)):
                if a not in constrained:
                    if pb[a] < best:
                        best = pb[a]
                    split += speak[a]
        cells, share = self._cells1, self._share1
        for p, idx in cover.parts:
            best = min(best, float(cells[p][idx].max()) + base[p])
            split += float(share[p][idx].max())
        return min(best, split)

    def top(self) -> np.ndarray:
        """Per component, an upper bound on the worst row's load."""
        if not self.cells:
            return np.full(self.k, np.inf)
        if self._top is None:
            self._top = np.asarray(
                np.minimum((self.peak + self.base).min(axis=0), self.speak.sum(axis=0) + self.everywhere)
            )
        return self._top.copy()

    def _assign(self, cover: Cover, load: np.ndarray) -> tuple[int, slice | np.ndarray] | None:
        """The attribute (and values) of ``cover`` whose share the charge joins: the one whose largest
        share it raises least (summed over the components), then the one it covers the smallest part
        of. None when the charge constrains no attribute."""
        best: tuple[float, float] | None = None
        pick = None
        one = float(load[0])
        for p, idx in cover.parts:
            if self.k == 1:  # the same float operations on Python floats (inf - inf: nan, no warning)
                rise = float(self._share1[p][idx].max()) + one - float(self.speak[p, 0])
                if rise < 0.0:
                    rise = 0.0
            else:
                with np.errstate(invalid="ignore"):  # inf - inf (loads past 2^900): nan, any choice valid
                    rise = float(np.maximum(self.share[p][idx].max(axis=0) + load - self.speak[p], 0.0).sum())
            part = (idx.stop - idx.start if isinstance(idx, slice) else len(idx)) / self.sizes[p]
            if best is None or (rise, part) < best:
                best, pick = (rise, part), (p, idx)
        return pick

    def add(self, cover: Cover, load: np.ndarray) -> int | None:
        """Add a charge's load; the attribute its share went to (None: it constrains none, or no row)."""
        if cover.empty:  # covers no row: no row's load changes
            return None
        self._top = self._scalars = None
        pick = self._assign(cover, load)
        if self.journal is not None:
            self.journal.append(
                (
                    self.base.copy(),
                    self.peak.copy(),
                    self.speak.copy(),
                    self.everywhere.copy(),
                    [(p, idx, self.cells[p][idx].copy()) for p, idx in cover.parts],
                    [] if pick is None else [(pick[0], pick[1], self.share[pick[0]][pick[1]].copy())],
                )
            )
        np.add(self.base, load, out=self.base, where=cover.free[:, None])  # (one call: a mask's += is two)
        for p, idx in cover.parts:
            self._grow(self.cells, self._cells1, self.peak, p, idx, load)
        if pick is None:
            self.everywhere = self.everywhere + load
        else:
            self._grow(self.share, self._share1, self.speak, pick[0], pick[1], load)
        return None if pick is None else pick[0]

    def _grow(
        self,
        tables: list[np.ndarray],
        tables1: list[np.ndarray],
        peaks: np.ndarray,
        p: int,
        idx: slice | np.ndarray,
        load: np.ndarray,
    ) -> None:
        """Add ``load`` to attribute ``p``'s values ``idx`` of ``tables`` and raise its peak. One
        component: on the 1-D view with a Python float, the peak as a scalar (no nan reaches the
        tables), bit for bit the generic path's sums."""
        if self.k == 1:
            t = tables1[p]
            t[idx] += float(load[0])
            top = float(t[idx].max())
            if top > peaks[p, 0]:
                peaks[p, 0] = top
        else:
            t = tables[p]
            t[idx] += load
            np.maximum(peaks[p], t[idx].max(axis=0), out=peaks[p])

    def add_many(self, covers: Sequence[Cover], loads: np.ndarray) -> list[int | None]:
        """:meth:`add` of every charge in order (``loads``: one row of ``k`` per cover), leaving the
        tables exactly as the calls one by one would, bit for bit: each cell and base entry takes its
        additions in charge order (one ``np.add.at`` per attribute), the peaks are the largest cells
        touched (cells only grow), and the share assignment, which depends on the shares before each
        charge, runs charge by charge. Inside a savepoint the batch journals ONE record (the arrays it
        changes, whole), so a rollback to a mark taken before it restores the tables bit for bit."""
        m = len(covers)
        picks: list[int | None] = [None] * m
        if m == 0:
            return picks
        self._top = self._scalars = None
        touched = sorted({p for c in covers if not c.empty for p, _ in c.parts})
        if self.journal is not None:
            self.journal.append(
                (
                    self.base.copy(),
                    self.peak.copy(),
                    self.speak.copy(),
                    self.everywhere.copy(),
                    [(p, slice(None), self.cells[p].copy()) for p in touched],
                    [(p, slice(None), self.share[p].copy()) for p in touched],
                )
            )
        # Shares, charge by charge (the assignment reads the shares left by the charges before).
        for i, cover in enumerate(covers):
            if cover.empty:
                continue
            load = loads[i]
            if len(cover.parts) == 1:
                pick: tuple[int, slice | np.ndarray] | None = cover.parts[0]  # the only choice
            else:
                pick = self._assign(cover, load)
            if pick is None:
                self.everywhere = self.everywhere + load
            else:
                p, idx = pick
                self._grow(self.share, self._share1, self.speak, p, idx, load)
                picks[i] = p
        # Cells: per attribute, every (value, charge) pair in charge order (ranges expanded at once).
        spans: dict[int, tuple[list[int], list[int], list[int]]] = {p: ([], [], []) for p in touched}
        listed: dict[int, list[tuple[int, np.ndarray]]] = {p: [] for p in touched}
        free = np.ones((m, len(self.sizes)), dtype=bool)
        fixed_rows: list[int] = []
        fixed_cols: list[int] = []
        for i, cover in enumerate(covers):
            if cover.empty:
                free[i] = False  # covers no row: no base changes
                continue
            for p, idx in cover.parts:
                fixed_rows.append(i)
                fixed_cols.append(p)
                if isinstance(idx, slice):
                    sp = spans[p]
                    sp[0].append(i)
                    sp[1].append(idx.start)
                    sp[2].append(idx.stop)
                else:
                    listed[p].append((i, np.asarray(idx)))
        free[fixed_rows, fixed_cols] = False
        for p in touched:
            owner = np.array(spans[p][0], dtype=np.int64)
            lo = np.array(spans[p][1], dtype=np.int64)
            width = np.array(spans[p][2], dtype=np.int64) - lo
            o = np.repeat(owner, width)
            v = np.arange(o.shape[0], dtype=np.int64) + np.repeat(lo - (np.cumsum(width) - width), width)
            if listed[p]:
                # value sets too: all pairs again sorted by charge (stable), as the calls make them
                o = np.concatenate([o, *[np.full(a.shape[0], i) for i, a in listed[p]]])
                v = np.concatenate([v, *[a for _, a in listed[p]]])
                order = np.argsort(o, kind="stable")
                o, v = o[order], v[order]
            cell = self.cells[p]
            for c in range(self.k):
                np.add.at(cell[:, c], v, loads[o, c])
            np.maximum(self.peak[p], cell[np.unique(v)].max(axis=0), out=self.peak[p])
        # Bases: per attribute, the loads of the charges leaving it free, in charge order (np.nonzero
        # lists the pairs by charge, then attribute; chunks of charges keep the pairs few).
        step = max(1, (1 << 22) // max(1, len(self.sizes)))
        for start in range(0, m, step):
            rows, attrs = np.nonzero(free[start : start + step])
            for c in range(self.k):
                np.add.at(self.base[:, c], attrs, loads[start + rows, c])
        return picks

    def undo_to(self, mark: int) -> None:
        """Restore the tables as they were when the journal had ``mark`` records."""
        assert self.journal is not None
        self._top = self._scalars = None
        while len(self.journal) > mark:
            base, peak, speak, everywhere, slices, shares = self.journal.pop()
            self.base, self.peak, self.speak, self.everywhere = base, peak, speak, everywhere
            for p, idx, before in reversed(slices):
                self.cells[p][idx] = before
            for p, idx, before in shares:
                self.share[p][idx] = before


class Members:
    """The admitted charges' coverages (one boolean row per charge, in ledger order, the attributes'
    values side by side) with their exact and float loads, for the exact threshold search of a single
    scalar track (MATH.md 2.7.1)."""

    def __init__(self, schema: Schema) -> None:
        self.sizes = [a.size for a in schema.attributes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.intp)
        self.starts = self.offsets[:-1]
        self.n = 0
        cap = 64
        self.flat = np.zeros((cap, int(self.offsets[-1])), dtype=bool)
        # per charge, the one attribute it counts on in the assignment bound (Bounds), and per attribute
        # its cells
        self.assign = np.zeros(cap, dtype=np.intp)
        self.segments = np.zeros((len(self.sizes), int(self.offsets[-1])), dtype=bool)
        for p in range(len(self.sizes)):
            self.segments[p, self._seg(p)] = True
        self.loads = np.zeros(cap)
        self.live = np.zeros(cap, dtype=bool)
        # per charge and attribute, the threshold search's last root multipliers (load units): any are
        # valid, and the last ones often clear the next decision without an LP (MATH.md 7.9); until a
        # search has any, a charge's whole load on its attribute of the assignment bound. float32, and
        # only where a row of them is at most a row of coverages (attributes of 4 values or more on
        # average), so a wide binary schema's ledger is not multiplied
        self._warm = 4 * len(self.sizes) <= int(self.offsets[-1])
        self.warm = np.zeros((cap if self._warm else 0, len(self.sizes)), dtype=np.float32)
        self.exact: list[Fraction] = []
        # a common unit of every live load (MATH.md 7.9): each row's load is a multiple of it
        self.unit: Fraction | None = None
        # exact loads of the rows asked for (the filter's known over-budget rows, asked again on every
        # refusal near the budget): kept up to date by add(), dropped by add_many() and truncate();
        # their cells (rows x attributes) to find the ones a new charge covers
        self._at: dict[tuple[int, ...], int] = {}
        self._at_loads: list[Fraction] = []
        self._at_cols = np.zeros((0, len(self.sizes)), dtype=np.intp)
        # the last live loads folded into the unit (a ledger repeats a few loads: add() skips them)
        self._folded: list[Fraction] = []
        # whether each of the last threshold decisions that tried the kept multipliers before setting
        # the search up was settled by them (see exceeds), and the decisions asked since the first
        self._tries: collections.deque[bool] = collections.deque(maxlen=_TRIES)
        self._asked = 0

    def _seg(self, p: int) -> slice:
        return slice(int(self.offsets[p]), int(self.offsets[p + 1]))

    def add(self, q: PredicateQuery, exact: Fraction, attr: int | None = None) -> None:
        """Add an admitted charge; ``attr``: the attribute it counts on in the assignment bound (any is
        valid; None: the first)."""
        if self.n == self.loads.shape[0]:
            self.flat = np.concatenate([self.flat, np.zeros_like(self.flat)])
            self.assign = np.concatenate([self.assign, np.zeros_like(self.assign)])
            self.loads = np.concatenate([self.loads, np.zeros_like(self.loads)])
            self.live = np.concatenate([self.live, np.zeros_like(self.live)])
            if self._warm:
                self.warm = np.concatenate([self.warm, np.zeros_like(self.warm)])
        i = self.n
        row = self.flat[i]
        row[:] = True
        if self._warm:
            self.warm[i] = 0.0
        offsets = self.offsets
        for p, cov in q.constraints:
            lo, hi = int(offsets[p]), int(offsets[p + 1])
            ivs = cov.intervals
            if len(ivs) == 1 and ivs[0][0] >= 0 and ivs[0][1] <= hi - lo:  # one range: two slices
                row[lo : lo + ivs[0][0]] = False
                row[lo + ivs[0][1] : hi] = False
            else:
                row[lo:hi] = cov.mask(hi - lo)
        self.assign[i] = 0 if attr is None else attr
        up = up_float(exact)
        self.loads[i] = up
        # a charge covering no row or loading nothing changes no row: never searched
        live = up > 0 and not q.is_contradiction  # (up_float is 0 exactly when the load is)
        self.live[i] = live
        self._start_warm(i, attr)
        if live:
            # (kept over a truncation: the gcd of more loads still divides each of the fewer; a load
            # folded in before leaves it as it is)
            if not any(exact == x for x in self._folded):  # (Fraction equality: no hashing)
                self.unit = unit_gcd(self.unit, exact)
                self._folded = [exact, *self._folded[:3]]
            if self._at:  # the kept rows' loads: plus this one's where it covers them
                for j in np.flatnonzero(self.flat[i][self._at_cols].all(axis=1)).tolist():
                    self._at_loads[j] += exact
        del self.exact[i:]
        self.exact.append(exact)
        self.n += 1

    def add_many(self, charges: Sequence[tuple[PredicateQuery, Fraction, int | None]]) -> None:
        """:meth:`add` of each ``(query, exact load, attribute)`` in order, with the same rows; one-
        interval coverages are written one attribute at a time for all the charges at once."""
        m = len(charges)
        need = self.n + m
        if need > self.loads.shape[0]:
            cap = max(need, 2 * self.loads.shape[0])
            grow = cap - self.loads.shape[0]
            self.flat = np.concatenate([self.flat, np.zeros((grow, self.flat.shape[1]), dtype=bool)])
            self.assign = np.concatenate([self.assign, np.zeros(grow, dtype=self.assign.dtype)])
            self.loads = np.concatenate([self.loads, np.zeros(grow)])
            self.live = np.concatenate([self.live, np.zeros(grow, dtype=bool)])
            if self._warm:
                self.warm = np.concatenate([self.warm, np.zeros((grow, self.warm.shape[1]), np.float32)])
        start = self.n
        if self._warm:
            self.warm[start:need] = 0.0
        self._forget_rows()
        rows = self.flat[start:need]
        rows[:] = True
        ranges: dict[int, tuple[list[int], list[int], list[int]]] = {}
        floats: dict[Fraction, float] = {}
        for i, (q, exact, attr) in enumerate(charges):
            for p, cov in q.constraints:
                ivs = cov.intervals
                if len(ivs) == 1 and ivs[0][0] >= 0 and ivs[0][1] <= self.sizes[p]:
                    r = ranges.setdefault(p, ([], [], []))
                    r[0].append(i)
                    r[1].append(ivs[0][0])
                    r[2].append(ivs[0][1])
                else:
                    rows[i, self._seg(p)] = cov.mask(self.sizes[p])
            self.assign[start + i] = 0 if attr is None else attr
            up = floats.get(exact)
            if up is None:
                up = floats[exact] = up_float(exact)  # a ledger holds few distinct loads
            self.loads[start + i] = up
            self.live[start + i] = up > 0 and not q.is_contradiction
            self._start_warm(start + i, attr)
        for p, (idx, lo, hi) in ranges.items():
            values = np.arange(self.sizes[p])
            inside = (values >= np.array(lo)[:, None]) & (values < np.array(hi)[:, None])
            rows[np.array(idx), self._seg(p)] = inside
        # the common unit over these loads too, as add() keeps it: the search rounds its bounds down to
        # multiples of it (MATH.md 7.9), so a unit that does not divide a live load is unsafe
        for exact in {e for i, (_, e, _) in enumerate(charges) if self.live[start + i]}:
            self.unit = unit_gcd(self.unit, exact)
        del self.exact[start:]
        self.exact.extend(e for _, e, _ in charges)
        self.n = need

    def _start_warm(self, i: int, attr: int | None) -> None:
        """A new charge's kept multipliers: its whole load on its attribute of the assignment bound."""
        if self._warm and attr is not None:
            v = float(self.loads[i])
            # past float32: inf, which a search reads as none (a cast would warn; errstate costs more)
            self.warm[i, attr] = v if v <= _F32_MAX else math.inf

    def truncate(self, n: int) -> None:
        self._forget_rows()
        self.n = min(self.n, n)
        del self.exact[self.n :]

    def load_at(self, row: Sequence[int]) -> Fraction:
        """The exact load of ``row``: the sum of the loads of the charges covering it (kept, and raised by
        each charge :meth:`add` brings that covers it: the known over-budget rows are asked again on
        every refusal)."""
        key = row if type(row) is tuple else tuple(int(v) for v in row)
        got = self._at.get(key)
        if got is not None:
            return self._at_loads[got]
        cols = (self.starts + np.asarray(key, dtype=np.intp)).tolist()
        hit = self.live[: self.n] & self.flat[: self.n][:, cols].all(axis=1)
        load = exact_sum([self.exact[i] for i in np.flatnonzero(hit).tolist()])
        self._keep_row(key, load, cols)
        return load

    def _keep_row(self, key: tuple[int, ...], load: Fraction, cols: list[int] | None = None) -> None:
        """Keep ``key``'s exact load ``load`` (over every live charge held now) for :meth:`load_at`."""
        if key in self._at:
            return
        if cols is None:
            cols = (self.starts + np.asarray(key, dtype=np.intp)).tolist()
        if len(self._at) >= _AT_ROWS:
            # the newer half stays: the filter's known rows rotate (new ones first, the oldest dropped),
            # and forgetting them all made every known row's next refusal weigh it again
            half = len(self._at_loads) // 2
            self._at = {k: j - half for k, j in self._at.items() if j >= half}
            del self._at_loads[:half]
            self._at_cols = self._at_cols[half:]
        self._at[key] = len(self._at_loads)
        self._at_loads.append(load)
        self._at_cols = np.vstack([self._at_cols, np.array(cols, dtype=np.intp)])

    def _forget_rows(self) -> None:
        self._at.clear()
        self._at_loads.clear()
        self._at_cols = self._at_cols[:0]

    def _row(self, box: np.ndarray) -> tuple[int, ...]:
        return tuple(int(np.flatnonzero(box[self._seg(p)])[0]) for p in range(len(self.sizes)))

    def exceeds(
        self,
        q: PredicateQuery,
        fits: Callable[[Fraction], bool],
        max_nodes: int,
        deadline: float | None = None,
        hint: float | None = None,
        heavy: list[tuple[tuple[int, ...], Fraction]] | None = None,
    ) -> tuple[int, ...] | None:
        """A row inside ``q``'s coverage whose exact load does not ``fits``, or None when every row there
        fits: the exact threshold decision of :mod:`overlapdp.overlap.threshold` (MATH.md 7.9) on the
        admitted charges' coverages, their loads and their common unit. Raises :class:`SearchGaveUp`
        past ``max_nodes`` nodes or the ``deadline``. ``hint``: a float near the largest load that fits.
        ``heavy``, when given, receives the heaviest row the search weighed that fits, with its exact
        load (``Problem.heaviest``), if any."""
        box = np.ones(int(self.offsets[-1]), dtype=bool)
        for p, cov in q.constraints:
            box[self._seg(p)] = cov.mask(self.sizes[p])
        if q.is_contradiction or not np.logical_or.reduceat(box, self.starts).all():
            return None
        n = self.n
        loads = np.where(self.live[:n], self.loads[:n], 0.0)
        # the kept multipliers are tried before the search's set-up while they settle at least 3 of the
        # last 32 tries (each costs ~0.05 ms; each they settle saves ~0.4 ms), and every eighth
        # decision anyway: on the float-epsilon uniform stream they settle 6 of 208
        self._asked += 1
        pre = len(self._tries) < _TRIES or sum(self._tries) >= 3 or self._asked % 8 == 0
        pb = Problem(
            self.flat[:n],
            loads,
            self.exact,
            self.offsets,
            box,
            unit=self.unit,
            hint=hint,
            warm=self.warm[:n] if self._warm else None,
            precheck=pre,
        )
        try:
            return exceeds(pb, fits, max_nodes=max_nodes, deadline=deadline)
        finally:
            if pb.stats.get("pre"):
                self._tries.append(bool(pb.stats.get("warm")))
            # rows the search weighed exactly (over every live charge: the others do not meet the
            # box), kept for load_at: the filter tries them on its next refusals
            for got in (pb.over, pb.heaviest):
                if got is not None:
                    self._keep_row(*got)
            if heavy is not None and pb.heaviest is not None:
                heavy.append(pb.heaviest)


def emax(a: Any, b: Any) -> Any:
    """The larger of two exact loads (componentwise for Rényi DP curves)."""
    if isinstance(a, tuple):
        return tuple(max(x, y) for x, y in zip(a, b, strict=True))
    return max(a, b)
