"""Maximum weighted depth of boxes, and value sets over few atoms (MATH.md 7.5).

A query with one interval on every attribute is a box; boxes are Helly (pairwise meeting boxes share a
point), so the maximum overlap is the deepest point of the arrangement, and also the heaviest clique of
the graph of meeting pairs. Two searches:

The clique search (the default, up to ``CLIQUE_QUERIES`` boxes): the set of boxes each box meets, as a
Python integer bitset built from sorted endpoints (:func:`meeting_sets`, no n x n array), then branch
and bound over cliques in the manner of Tomita's MCQ with weighted greedy colourings as bounds
(:func:`max_clique`), on integer search loads that bound the EXACT loads from above (:class:`_Judge`:
the exact integers on dyadic loads, else scaled once per workload with numpy so that float sums of
them are exact); every row above the threshold is weighed on the exact integers
(:class:`~overlapdp.overlap.magnitude.ExactLoads`), so the answer is exact whatever the weights, and
the witness row is the largest lower end of the clique's boxes on every attribute. ``auto`` keeps the
cell search for dense graphs (more than ``CLIQUE_DENSITY`` of the pairs meet: a colouring then proves
little) and hands it the search past ``CLIQUE_NODES`` nodes (``CLIQUE_WEIGHTED_NODES`` when the loads
differ: weighted colourings prune little); the cell search judges rows the same way.

The cell search: a best-first divide and conquer over cells of the (compressed) coordinate space in the
style of Chan's depth algorithm ("Klee's measure problem made easy", FOCS 2013):

- Coordinates are first compressed per attribute to the pieces between a left and a right endpoint
  (:func:`compress_axis`; some kept piece is covered by a superset of the queries of any piece).
- A cell keeps the boxes that cross it and the total load ``base`` of the boxes that cover it
  entirely; boxes that miss it are dropped.
- Bound (never below the cell's maximum): the attributes are partitioned into groups whose
  compressed grids fit ``BOUND_CELLS``, and every crossing box is charged to ONE group (the one where
  it covers the smallest fraction of the cell, its extent on the other attributes ignored):
  ``base + sum over groups of the group grid's maximum`` (``1[x in b] <= 1[x_G in b_G]``, and each
  box is counted once).
- Shrink: a point deeper than the best row has, in every group ``G``, a grid value above
  ``best - base - sum of the other groups' maxima``; the cell shrinks to the span of those pieces on
  every attribute of ``G`` (boxes that now miss it are dropped, those that now cover it join ``base``)
  and is bounded again. Close to the best row this span is small: it is what prunes most. A shrink
  that sheds few crossing boxes (at most 1 - ``_SHRINK_REBOUND`` of them) is split at once under the
  bound it came from (valid on any part of the cell): a new bound would be about as loose.
- Leaf: a cell whose compressed grid fits ``LEAF_CELLS`` is solved exactly (inclusion-exclusion
  corners, prefix sums).
- Split: otherwise at the median boundary of the boxes crossing the cell on two attributes or more
  (slabs, crossing on one, are exact in the bound), on the attribute whose crossings the grouped bound
  ignored most.
- Incumbent: coordinate ascent from the centres of a few boxes, then every cell's best point.

Best-first on the bound: the search stops when no open cell can beat the best row found (exact when
float sums of the loads are: every prune compares without slack), or at the deadline, when the largest
open bound is a SAFE upper bound.

Value sets: attributes on which some query has several intervals are enumerated over their atoms
(:func:`overlapdp.overlap.branch.atom_tables`); each combination of atoms is a box problem on the
other attributes restricted to the queries compatible with it (the clique search's candidates: the
meeting sets are built once). Combinations are visited by decreasing compatible load, which is also
their upper bound (exact integers), and the search stops when it drops to the best row.

Only additive loads (count, sum, l2 after squaring, one component of a vector at a time) are handled;
a :class:`~overlapdp.overlap.result.SetComp` stays with the branch and bound.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from overlapdp.exact import float_up
from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import AttributeSegments, BoolArray, Compiled, IntArray
from overlapdp.overlap.branch import atom_tables
from overlapdp.overlap.magnitude import ExactLoads
from overlapdp.overlap.result import FloatArray

# Cells of a leaf's exact grid (compressed pieces): a leaf then costs a few milliseconds at most.
LEAF_CELLS = 1 << 17
# Cells of each group's grid in the bound of a larger cell.
BOUND_CELLS = 1 << 16
# Most axes of any grid the route builds: every axis has at least 2 pieces and no grid exceeds
# max(LEAF_CELLS, BOUND_CELLS) cells (a group over it is one attribute), so a box has at most
# 2^GRID_AXES signed corners, whatever the number of attributes (the engine's float-error bound).
GRID_AXES = max(LEAF_CELLS, BOUND_CELLS).bit_length() - 1
# Coordinate-ascent starts for the first incumbent (one per 16 boxes, at most this many).
ASCENT_STARTS = 24
# Largest product of atoms over the enumerated (value-set) attributes, and the largest
# combinations x queries table built to rank them.
COMBO_LIMIT = 1 << 14
COMBO_TABLE_LIMIT = 50_000_000
# The pair-graph route (MATH.md 7.5): the most boxes it takes (its meeting sets hold n^2 bits), the
# density of meeting pairs above which the cell search goes first on dyadic loads (the colourings of
# dense graphs prove little), and its nodes before the cell search takes over on them.
CLIQUE_QUERIES = 20_000
CLIQUE_DENSITY = 0.7
CLIQUE_NODES = 100_000
# The same on loads that are not all equal: weighted colourings prune little (8 Adult attributes,
# t = 1 000, U[0.01, 1] weights: 100 000 nodes took 3.4-5.5 s of CPU and then the cell search, which
# alone proves it in 1.6 s; 5 attributes: 0.18 s alone against 3.9-4.9 s).
CLIQUE_WEIGHTED_NODES = 1_000
# Up to this many boxes, and when more than this share of the pairs meet, the clique search's bits
# follow a degeneracy order from a dense table of the meeting pairs (n^2 bytes); on sparser graphs
# the order matters little (kept as it is); on more boxes, the decreasing degree.
PEEL_QUERIES = 4_000
# Up to this many boxes the meeting sets are built as numpy words (n^2 / 8 bytes a table).
WORD_QUERIES = 4_096
PEEL_DENSITY = 0.1
# Grids whose axes are all this short and at most this many are summed by rotation (_prefix_sums).
_ROTATE_AXIS = 64
_ROTATE_AXES = 8
# A shrink that leaves more than this share of the crossing boxes is taken without a new bound: the
# shrunk cell is queued with its parent's bound (still valid on a subset) and split (_Depth.run).
_SHRINK_REBOUND = 0.95
# Relative margin for the coordinate ascent to move (an incumbent only: the search's prunes compare
# exactly, MATH.md 7.8).
_REL = 1e-12


@dataclass(frozen=True)
class BoxOutcome:
    """``cell`` (segment indices of the compiled workload, or None) attains ``best``; ``upper`` is safe."""

    cell: tuple[int, ...] | None
    best: float
    upper: float
    exact: bool
    nodes: int
    # Every comparison was made on exact integers (the loads' ExactLoads), whatever the floats.
    integral: bool = False


def _single(a: AttributeSegments) -> bool:
    """Whether every query has at most one interval on this attribute."""
    return a.query.size == 0 or int(np.bincount(a.query).max()) <= 1


def applies(c: Compiled) -> bool:
    """Whether the route takes this workload: some box attribute, and few combinations of the others.

    The segment count bounds the atom count, so the product of segment counts over the value-set
    attributes is a cheap conservative test of the enumeration's size.
    """
    if not c.attributes or c.live.size == 0:
        return False
    combos = 1
    boxes = 0
    for a in c.attributes:
        if _single(a):
            boxes += 1
        else:
            combos *= a.size
    return boxes > 0 and combos <= COMBO_LIMIT and combos * c.live.size <= COMBO_TABLE_LIMIT


def _slack(v: float) -> float:
    return v + _REL * max(abs(v), 1e-300)


def compress_axis(lo: IntArray, hi: IntArray, m: int) -> tuple[IntArray, IntArray, IntArray]:
    """Segments between a left and a right endpoint, and the intervals in their indices.

    Between consecutive endpoints the coverage is constant; a piece not starting at a left endpoint
    is covered by a subset of the piece before it, and one not ending at a right endpoint by a subset
    of the piece after it, so some kept piece is covered by a superset of any piece. Returns the
    kept segments (their first segment in the original indices) and every interval's new ``lo, hi``
    (never empty: the piece of an interval ending at its own right endpoint is kept).
    """
    start = np.zeros(m + 1, dtype=bool)
    end = np.zeros(m + 1, dtype=bool)
    start[lo] = True
    end[hi] = True
    start[0] = end[m] = True
    b = np.flatnonzero(start | end)
    keep = start[b[:-1]] & end[b[1:]]
    kept = b[:-1][keep].astype(np.int64)
    return kept, np.searchsorted(kept, lo).astype(np.int64), np.searchsorted(kept, hi).astype(np.int64)


def _prefix_sums(grid: FloatArray) -> FloatArray:
    """Cumulative sums along every axis (``grid`` is overwritten; the sums are returned).

    A sum along the leading axis of a C-ordered array is one vectorised add per index over contiguous
    rows; along a later axis the same adds run over short strided pieces, and ``np.cumsum`` on a
    short last axis pays a loop per row. So when every axis is short (``_ROTATE_AXIS``) the grid is
    summed along its leading axis, then transposed to bring the next one to the front, ``ndim``
    times (back to its own order: about 1.7x faster on the cell search's 3-6-axis grids); otherwise
    along every axis but the last by index and along the last with ``np.cumsum``. Either way each
    entry is the same sequential float sum, axis after axis."""
    shape = grid.shape
    if 3 <= grid.ndim <= _ROTATE_AXES and max(shape) <= _ROTATE_AXIS:
        for _ in range(grid.ndim):
            rows = grid.reshape(grid.shape[0], -1)
            for i in range(1, rows.shape[0]):
                rows[i] += rows[i - 1]
            grid = np.ascontiguousarray(rows.T).reshape(*grid.shape[1:], grid.shape[0])
        return grid
    for k in range(grid.ndim - 1):
        lead: tuple[slice | int, ...] = (slice(None),) * k
        for i in range(1, shape[k]):
            grid[(*lead, i)] += grid[(*lead, i - 1)]
    np.cumsum(grid, axis=grid.ndim - 1, out=grid)
    return grid


@functools.cache
def _corner_signs(g: int) -> tuple[BoolArray, FloatArray]:
    """The ``2^g`` corners of a box on ``g`` axes (True: the upper end) and their inclusion-exclusion
    signs."""
    bits = ((np.arange(1 << g)[:, None] >> np.arange(g)[None, :]) & 1).astype(bool)
    bits.flags.writeable = False
    sign = np.where(bits.sum(axis=1) % 2 == 1, -1.0, 1.0)
    sign.flags.writeable = False
    return bits, sign


class _Depth:
    """Best-first divide and conquer for the deepest point of weighted boxes ``[lo, hi)`` in ``[0, m)``."""

    def __init__(
        self,
        lo: IntArray,
        hi: IntArray,
        sizes: IntArray,
        w: FloatArray,
        judge: Callable[[IntArray], float] | None = None,
    ) -> None:
        """With ``judge``, ``w`` need only bound the true loads from above: rows above the threshold
        are handed to ``judge`` (points as rows of a matrix), which weighs them exactly, keeps the
        best, and returns the new threshold (no row whose ``w`` total is at most it beats the best)."""
        self.lo, self.hi, self.sizes, self.w = lo, hi, sizes, w
        self.d = int(lo.shape[1])
        self.nodes = 0
        self.judge = judge

    def _ascend(self, point: IntArray) -> tuple[float, IntArray]:
        """Coordinate ascent from ``point`` over all boxes: a better incumbent (a row, never a bound)."""
        d = self.d
        point = point.copy()
        inside = (self.lo <= point) & (self.hi > point)
        cnt = inside.sum(axis=1)
        value = float(self.w[cnt == d].sum())
        for _ in range(4):
            moved = False
            for j in range(d):
                others = cnt - inside[:, j] == d - 1
                m = int(self.sizes[j])
                f = np.cumsum(
                    np.bincount(
                        np.concatenate([self.lo[others, j], self.hi[others, j]]),
                        np.concatenate([self.w[others], -self.w[others]]),
                        minlength=m + 1,
                    )[:m]
                )
                x = int(np.argmax(f))
                if f[x] > _slack(value) and x != point[j]:
                    point[j] = x
                    inside[:, j] = (self.lo[:, j] <= x) & (self.hi[:, j] > x)
                    cnt = inside.sum(axis=1)
                    value = float(self.w[cnt == d].sum())
                    moved = True
            if not moved:
                break
        return value, point

    def _value(self, idx: IntArray, point: IntArray) -> float:
        inside = np.all((self.lo[idx] <= point) & (self.hi[idx] > point), axis=1)
        return float(self.w[idx][inside].sum())

    def _grid(
        self, clo: IntArray, chi: IntArray, lc: IntArray, hc: IntArray
    ) -> tuple[list[IntArray], int, IntArray, IntArray]:
        """Per attribute the cell's pieces that can hold a maximum (:func:`compress_axis`, all
        attributes at once), their grid's size, and every box's first and past-last piece."""
        size = chi - clo
        off = np.zeros(self.d, dtype=np.int64)
        off[1:] = np.cumsum(size + 1)[:-1]
        total = int(off[-1] + size[-1] + 1)
        rel_lo = off + (lc - clo)
        rel_hi = off + (hc - clo)
        start = np.zeros(total, dtype=bool)
        end = np.zeros(total, dtype=bool)
        start[rel_lo.reshape(-1)] = True
        end[rel_hi.reshape(-1)] = True
        start[off] = True
        end[off + size] = True
        # As compress_axis on each attribute: a piece is kept when it starts at a left endpoint and
        # ends at a right one. The last position of an attribute never starts a kept piece (no box
        # starts at the cell's end), so no piece straddles two attributes.
        b = np.flatnonzero(start | end)
        flat = b[:-1][start[b[:-1]] & end[b[1:]]]
        bounds = np.searchsorted(flat, off)
        kept = [
            flat[bounds[j] : (bounds[j + 1] if j + 1 < self.d else flat.size)] - off[j] for j in range(self.d)
        ]
        cells = 1
        for k in kept:
            cells *= int(k.size)
        # Pieces before a position (np.searchsorted on each attribute's pieces, all at once).
        before = np.zeros(total + 1, dtype=np.int64)
        before[flat + 1] = 1
        np.cumsum(before, out=before)
        first = before[off]
        return kept, cells, before[rel_lo] - first, before[rel_hi] - first

    def _project(
        self, clo: IntArray, pl: IntArray, ph: IntArray, w: FloatArray, kept: list[IntArray], dims: list[int]
    ) -> tuple[float, IntArray, FloatArray | None, list[int]]:
        """Dense grid over the compressed pieces of ``dims`` (the boxes, given by their first and
        past-last pieces ``pl, ph``, projected on them; exact when ``dims`` holds every attribute a
        box crosses): its maximum, the point (other attributes at the cell's first piece), the grid
        itself and the attributes of its axes."""
        point = clo + np.array([int(k[0]) for k in kept], dtype=np.int64)
        # The largest axis last: the prefix sums below run fastest that way.
        gdims = sorted((j for j in dims if kept[j].size > 1), key=lambda j: int(kept[j].size))
        if not gdims:
            return float(w.sum()), point, None, gdims
        g = len(gdims)
        shape = [int(kept[j].size) for j in gdims]
        strides = np.ones(g, dtype=np.int64)
        for k in range(g - 2, -1, -1):
            strides[k] = strides[k + 1] * shape[k + 1]
        gl = pl[:, gdims]
        gh = ph[:, gdims]
        bits, sign = _corner_signs(g)
        corners = np.where(bits[:, None, :], gh[None, :, :], gl[None, :, :])
        # Corners past the last piece change no cell of the grid (no padding: it would multiply the
        # cells by up to 2 per attribute).
        inside = np.all(corners < np.array(shape), axis=2)
        weights = sign[:, None] * w[None, :]
        sums = np.bincount(
            (corners[inside] @ strides), weights=weights[inside], minlength=int(np.prod(shape))
        )
        grid = np.asarray(sums, dtype=np.float64).reshape(shape)
        grid = _prefix_sums(grid)
        flat = int(np.argmax(grid))
        cell = np.unravel_index(flat, grid.shape)
        for k, j in enumerate(gdims):
            point[j] = clo[j] + int(kept[j][cell[k]])
        return float(grid.reshape(-1)[flat]), point, grid, gdims

    def _cut(self, clo: IntArray, chi: IntArray, idx: IntArray, order: list[int]) -> tuple[int, int] | None:
        """The first attribute of ``order`` where boxes of ``idx`` crossing the cell on two attributes
        or more end inside it, and the median of those ends (strictly inside the cell); None if none."""
        lc = np.maximum(self.lo[idx], clo)
        hc = np.minimum(self.hi[idx], chi)
        inner_lo, inner_hi = lc > clo, hc < chi
        nonslab = (inner_lo | inner_hi).sum(axis=1) > 1
        for j in order:
            lcj, hcj = lc[nonslab, j], hc[nonslab, j]
            inner = np.concatenate([lcj[inner_lo[nonslab, j]], hcj[inner_hi[nonslab, j]]])
            if inner.size:
                return j, int(np.partition(inner, inner.size // 2)[inner.size // 2])
        return None

    def run(self, floor: float, deadline: float | None) -> tuple[IntArray | None, float, float, bool]:
        """``(point, best, upper, exact)``: the deepest point if deeper than ``floor`` (else None)."""
        d = self.d
        best = floor
        best_point: IntArray | None = None
        counter = itertools.count()
        clo0 = np.zeros(d, dtype=np.int64)
        chi0 = self.sizes.astype(np.int64)
        full = np.all((self.lo <= clo0) & (self.hi >= chi0), axis=1)
        heap: list[tuple[float, int, float, IntArray, IntArray, IntArray, int, int]] = []

        unweighed = -math.inf  # the largest search load of a row left unweighed at the deadline

        def offer(value: float, point: IntArray) -> None:
            nonlocal best, best_point
            if value > best:
                if self.judge is None:
                    best, best_point = value, point
                else:
                    best, best_point = max(best, self.judge(point[None, :])), point

        def push(clo: IntArray, chi: IntArray, idx: IntArray, base: float) -> None:
            """Bound the cell; solve it at once when its grid is small, else queue it with its cut."""
            nonlocal best, best_point, unweighed
            self.nodes += 1
            if idx.size == 0:
                offer(base, clo.copy())
                return
            # The crossing boxes clipped to the cell; a slab crosses it on one attribute only.
            lc = np.maximum(self.lo[idx], clo)
            hc = np.minimum(self.hi[idx], chi)
            w = self.w[idx]
            part = (lc > clo) | (hc < chi)
            kept, cells, pl, ph = self._grid(clo, chi, lc, hc)
            nonslab = part.sum(axis=1) > 1
            counts = (lc[nonslab] > clo).sum(axis=0) + (hc[nonslab] < chi).sum(axis=0)
            if cells > BOUND_CELLS:
                # A relaxed bound first: much cheaper than the exact grid, and often enough to prune.
                # Attributes in groups whose grids fit (most crossed first); every box goes to the
                # group where the region it covers is the smallest fraction of the cell, its extent
                # on the other attributes ignored. Each box is counted once, in one group's grid, so
                # the sum of the groups' maxima bounds the depth.
                groups: list[list[int]] = []
                size = BOUND_CELLS + 1
                for j in np.argsort(-counts, kind="stable").tolist():
                    if size * kept[j].size > BOUND_CELLS:
                        groups.append([])
                        size = 1
                    groups[-1].append(j)
                    size *= int(kept[j].size)
                frac = np.where(part, (hc - lc) / np.maximum(chi - clo, 1), 1.0)
                score = np.stack([np.prod(frac[:, g], axis=1) for g in groups], axis=1)
                owner = np.argmin(score, axis=1)
                point = clo.copy()
                top = 0.0
                ignored = np.zeros(self.d)
                grids: list[tuple[float, FloatArray | None, list[int]]] = []
                for k, g in enumerate(groups):
                    sel = owner == k
                    if not sel.any():
                        continue
                    gtop, gpoint, grid, gdims = self._project(clo, pl[sel], ph[sel], w[sel], kept, g)
                    grids.append((gtop, grid, gdims))
                    top += gtop
                    point[g] = gpoint[g]
                    others = np.ones(self.d, dtype=bool)
                    others[g] = False
                    ignored += w[sel] @ (part[sel] & others)
                offer(base + self._value(idx, point), point)
                bound = top
                if base + bound <= best:
                    return
                # Only the pieces where a group's grid can still lift the total above the best
                # row can hold a better point (the other groups at their maxima): shrink the
                # cell to their span on every attribute of the group.
                nlo, nhi = clo.copy(), chi.copy()
                for gtop, grid, gdims in grids:
                    if grid is None:
                        continue
                    feas = grid > best - base - (top - gtop)
                    for k, jj in enumerate(gdims):
                        ax = tuple(x for x in range(len(gdims)) if x != k)
                        hits = np.flatnonzero(feas.any(axis=ax) if ax else feas)
                        kj = kept[jj]
                        nlo[jj] = clo[jj] + int(kj[hits[0]])
                        if hits[-1] + 1 < kj.size:
                            nhi[jj] = clo[jj] + int(kj[hits[-1] + 1])
                if np.any(nlo > clo) or np.any(nhi < chi):
                    meets = np.all((self.lo[idx] < nhi) & (self.hi[idx] > nlo), axis=1)
                    sub = idx[meets]
                    covers = np.all((self.lo[sub] <= nlo) & (self.hi[sub] >= nhi), axis=1)
                    nidx = sub[~covers]
                    nbase = base + float(self.w[sub[covers]].sum())
                    if nidx.size > _SHRINK_REBOUND * idx.size:
                        # Little was shed: a new bound would be about as loose. Split the shrunk
                        # cell under this bound (valid on any part of the cell).
                        at = self._cut(nlo, nhi, nidx, np.argsort(-ignored, kind="stable").tolist())
                        if at is not None:
                            heapq.heappush(heap, (-(base + bound), next(counter), nbase, nlo, nhi, nidx, *at))
                            return
                    push(nlo, nhi, nidx, nbase)
                    return
            if cells <= max(LEAF_CELLS, BOUND_CELLS):
                # Small enough: the cell's exact maximum on its full grid.
                _, point, grid, gdims = self._project(clo, pl, ph, w, kept, list(range(self.d)))
                offer(base + self._value(idx, point), point)
                if self.judge is not None and grid is not None:
                    # Every other piece above the threshold may be heavier in the true loads.
                    flat = grid.reshape(-1)
                    cand = np.flatnonzero(flat > best - base)
                    cand = cand[np.argsort(-flat[cand], kind="stable")]
                    step = 1
                    while cand.size:
                        if deadline is not None and _clock.now() > deadline:
                            # Out of time: the pieces left are bounded by their search loads
                            # (by decreasing value: the first is the largest).
                            unweighed = max(unweighed, base + float(flat[cand[0]]))
                            break
                        take, cand = cand[:step], cand[step:]
                        where = np.stack(np.unravel_index(take, grid.shape), axis=1)
                        points = np.tile(point, (take.size, 1))
                        for k, j in enumerate(gdims):
                            points[:, j] = clo[j] + kept[j][where[:, k]]
                        best = max(best, self.judge(points))
                        best_point = points[0]
                        cand = cand[flat[cand] > best - base]
                        step = min(4 * step, 64)
                return
            # Cut the attribute whose crossings the bound ignored most (they are what loosens it).
            j = int(np.argmax(ignored)) if ignored.max() > 0 else int(np.argmax(counts))
            lcj, hcj = lc[nonslab, j], hc[nonslab, j]
            inner = np.concatenate([lcj[lcj > clo[j]], hcj[hcj < chi[j]]])
            if inner.size == 0:
                j = int(np.argmax([k.size for k in kept]))
                inner = clo[j] + kept[j][1:]
            cut = int(np.partition(inner, inner.size // 2)[inner.size // 2])
            heapq.heappush(heap, (-(base + bound), next(counter), base, clo, chi, idx, j, cut))

        # A good incumbent first (the search proves far fewer cells when it is the optimum early):
        # coordinate ascent from the centres of some boxes, heaviest first, spread over the rest.
        order = np.argsort(-self.w, kind="stable")
        starts = order[
            np.unique(np.linspace(0, order.size - 1, min(ASCENT_STARTS, order.size // 16)).astype(int))
        ]
        for b in starts.tolist():
            value, point = self._ascend((self.lo[b] + self.hi[b] - 1) // 2)
            offer(value, point)
        push(clo0, chi0, np.flatnonzero(~full), float(self.w[full].sum()))
        while heap:
            negb, _, base, clo, chi, idx, j, cut = heap[0]
            if -negb <= best:
                heap.clear()
                break
            if deadline is not None and _clock.now() > deadline:
                break
            heapq.heappop(heap)
            for a, b in ((int(clo[j]), cut), (cut, int(chi[j]))):
                c_lo, c_hi = clo.copy(), chi.copy()
                c_lo[j], c_hi[j] = a, b
                meets = (self.lo[idx, j] < b) & (self.hi[idx, j] > a)
                sub = idx[meets]
                covers = np.all((self.lo[sub] <= c_lo) & (self.hi[sub] >= c_hi), axis=1)
                push(c_lo, c_hi, sub[~covers], base + float(self.w[sub[covers]].sum()))
        if heap or unweighed > best:
            return best_point, best, max(best, unweighed, -heap[0][0] if heap else best), False
        return best_point, best, best, True


# -- the pair-graph route ------------------------------------------------------------------------------


def meeting_sets(lo: IntArray, hi: IntArray, sizes: IntArray, bit: IntArray) -> list[int]:
    """For every box, the boxes it meets (shares a point with, itself excluded) as a Python integer
    whose bit ``bit[b]`` stands for box ``b``; the list is indexed by bit.

    Boxes meet when their intervals overlap on every attribute. On attribute ``j``, box ``a`` overlaps
    the boxes with ``lo < hi[a]`` (a prefix of the boxes sorted by ``lo``) that have ``hi > lo[a]`` (a
    suffix of them sorted by ``hi``): the prefix and suffix unions are built once per attribute (one
    big-integer OR per box), then each box costs two ANDs on the attributes it constrains (a box
    spanning an attribute overlaps every box there). No n x n array is built. Up to ``WORD_QUERIES``
    boxes the same unions are numpy words (``n x n/64``), accumulated and gathered in C."""
    n, d = lo.shape
    if n <= WORD_QUERIES:
        return _meeting_words(lo, hi, sizes, bit)
    one = [1 << b for b in bit.tolist()]
    full = (1 << n) - 1
    meets = [full] * n
    for j in range(d):
        lj, hj = lo[:, j], hi[:, j]
        cons = np.flatnonzero((lj > 0) | (hj < sizes[j]))
        if cons.size == 0:
            continue
        by_lo = np.argsort(lj, kind="stable")
        by_hi = np.argsort(hj, kind="stable")
        # prefix[r]: the first r boxes by lo; suffix[r]: the boxes from the r-th on by hi.
        prefix = [0, *itertools.accumulate((one[b] for b in by_lo.tolist()), operator.or_)]
        suffix = [*reversed([*itertools.accumulate((one[b] for b in by_hi[::-1].tolist()), operator.or_)]), 0]
        before = np.searchsorted(lj[by_lo], hj, side="left").tolist()  # boxes with lo < hi[a]
        after = np.searchsorted(hj[by_hi], lj, side="right").tolist()  # first box with hi > lo[a]
        for a in cons.tolist():
            meets[a] &= prefix[before[a]] & suffix[after[a]]
    out = [0] * n
    for a, b in enumerate(bit.tolist()):
        out[b] = meets[a] & ~one[a]
    return out


def _meeting_words(lo: IntArray, hi: IntArray, sizes: IntArray, bit: IntArray) -> list[int]:
    """:func:`meeting_sets` with the prefix and suffix unions as rows of 64-bit words. Every box takes
    its prefix and suffix on every attribute (a box spanning the attribute takes all boxes twice)."""
    n = lo.shape[0]
    nw = (n + 63) // 64
    rows = np.arange(n)
    word = bit // 64
    one = np.zeros((n, nw), dtype=np.uint64)
    one[rows, word] = np.left_shift(np.uint64(1), (bit % 64).astype(np.uint64))
    meets = np.tile(np.bitwise_or.reduce(one, axis=0), (n, 1))
    prefix = np.zeros((n + 1, nw), dtype=np.uint64)
    suffix = np.zeros((n + 1, nw), dtype=np.uint64)
    lo_t, hi_t = np.ascontiguousarray(lo.T), np.ascontiguousarray(hi.T)
    for j in np.flatnonzero(np.any((lo > 0) | (hi < sizes), axis=0)).tolist():
        lj, hj = lo_t[j], hi_t[j]
        by_lo = np.argsort(lj, kind="stable")
        by_hi = np.argsort(hj, kind="stable")
        # prefix[r]: the first r boxes by lo; suffix[r]: the boxes from the r-th on by hi.
        np.bitwise_or.accumulate(one[by_lo], axis=0, out=prefix[1:])
        suffix[:n] = np.bitwise_or.accumulate(one[by_hi[::-1]], axis=0)[::-1]
        before = np.searchsorted(lj[by_lo], hj, side="left")  # boxes with lo < hi[a]
        after = np.searchsorted(hj[by_hi], lj, side="right")  # first box with hi > lo[a]
        meets &= prefix[before]
        meets &= suffix[after]
    meets[rows, word] &= ~one[rows, word]
    out = np.empty_like(meets)
    out[bit] = meets
    raw = out.astype("<u8").tobytes()
    width = 8 * nw
    return [int.from_bytes(raw[i * width : (i + 1) * width], "little") for i in range(n)]


def _colour(cand: int, meets: list[int], w: Sequence[float], need: float) -> tuple[list[int], list[float]]:
    """Greedy colouring of the candidate bits in bit order: independent sets of pairwise disjoint boxes
    taken in turn. A clique has at most one box of each set, so the sum of the sets' heaviest weights
    up to a box's set bounds every clique among the boxes coloured up to it (``bounds``, one per box
    of ``verts``, non-decreasing). Boxes whose bound is at most ``need`` are not listed: a clique
    among them cannot lift the chosen boxes above the best one (MCS's pruning of colour classes)."""
    verts: list[int] = []
    bounds: list[float] = []
    acc: float = 0
    rest = cand
    while rest:
        free = rest
        top: float = 0
        members: list[int] = []
        while free:
            low = free & -free
            v = low.bit_length() - 1
            free &= ~(meets[v] | low)
            rest ^= low
            members.append(v)
            if w[v] > top:
                top = w[v]
        acc += top
        if acc > need:
            verts.extend(members)
            bounds.extend([acc] * len(members))
    return verts, bounds


@dataclass(frozen=True)
class CliqueOutcome:
    """``members`` (bits, or None when no clique beats the floor) weigh ``best``; ``upper`` is safe."""

    members: list[int] | None
    best: float
    upper: float
    exact: bool
    nodes: int


def max_clique(
    meets: list[int],
    w: Sequence[float],
    cand: int,
    floor: float,
    deadline: float | None = None,
    node_limit: int | None = None,
    judge: Callable[[list[int]], float] | None = None,
) -> CliqueOutcome:
    """The heaviest clique of the candidate bits heavier than ``floor`` (weights ``w`` by bit, bits
    ordered heaviest first; Python integers make every comparison exact). Branch and bound in the
    manner of Tomita's MCQ with weighted greedy colourings as bounds, depth first with an explicit
    stack; a node is a candidate set. At the deadline or past ``node_limit`` nodes, ``upper`` is the
    largest colouring bound still open.

    With ``judge``, ``w`` only need to bound the true weights from above: each maximal clique heavier
    than the threshold goes to ``judge`` (which weighs it exactly and keeps the best), and the
    threshold becomes its answer, a value every clique no heavier in ``w`` cannot beat; ``best`` and
    ``members`` are then the threshold and the last clique judged."""
    best = floor
    members: list[int] | None = None
    nodes = 0
    verts, bounds = _colour(cand, meets, w, best)
    # Frames: [weight of the chosen boxes, candidates left, colouring order, bounds, next index, box].
    stack: list[list[Any]] = [[0, cand, verts, bounds, len(verts) - 1, -1]]
    while stack:
        f = stack[-1]
        i = f[4]
        if i < 0 or f[0] + f[3][i] <= best:
            stack.pop()
            continue
        if (node_limit is not None and nodes >= node_limit) or (
            deadline is not None and _clock.now() > deadline
        ):
            upper = max(g[0] + g[3][g[4]] for g in stack if g[4] >= 0)
            return CliqueOutcome(members, best, max(upper, best), False, nodes)
        v = f[2][i]
        f[4] = i - 1
        nodes += 1
        weight = f[0] + w[v]
        sub = f[1] & meets[v]
        f[1] &= ~(1 << v)
        if sub:
            vs, bs = _colour(sub, meets, w, best - weight)
            stack.append([weight, sub, vs, bs, len(vs) - 1, v])
        elif weight > best:
            members = [g[5] for g in stack[1:]] + [v]
            best = weight if judge is None else max(best, judge(members))
    return CliqueOutcome(members, best, best, True, nodes)


def _bitset(mask: BoolArray) -> int:
    """The Python integer whose bit ``k`` is ``mask[k]``."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def _peeled(member: npt.NDArray[np.uint8], w: FloatArray) -> IntArray:
    """An approximate degeneracy order by weighted degree, densest core first: repeatedly the eighth
    (at least 16) of the remaining boxes of least weighted degree (their own weight plus their
    neighbours') is removed and the degrees updated, then the removal order is reversed."""
    m = member.shape[0]
    table = member.astype(np.float32)
    wf = w.astype(np.float32)
    degree = table @ wf + wf
    alive = np.ones(m, dtype=bool)
    removed: list[IntArray] = []
    left = m
    while left:
        cand = np.flatnonzero(alive)
        k = max(16, left // 8)
        pick = cand[np.argpartition(degree[cand], k - 1)[:k]] if k < cand.size else cand
        pick = pick[np.argsort(degree[pick], kind="stable")]
        removed.append(pick)
        alive[pick] = False
        degree -= wf[pick] @ table[pick]
        left -= int(pick.size)
    return np.concatenate(removed)[::-1].copy()


@dataclass(frozen=True)
class _Graph:
    """The meeting sets of the live queries that carry load, bits heaviest first."""

    meets: list[int]
    weights: Sequence[float]
    bit: IntArray  # per live query, its bit (-1: carries no load)
    query: IntArray  # per bit, its live query
    lo: IntArray
    hi: IntArray
    node_limit: int | None

    @staticmethod
    def of(
        lo: IntArray,
        hi: IntArray,
        sizes: IntArray,
        ints: Sequence[float],
        approx: FloatArray,
        carrying: BoolArray,
        route: str,
        floats_exact: bool,
    ) -> _Graph | None:
        """The graph when the route applies (None: the cell search instead): at most ``CLIQUE_QUERIES``
        boxes. On dyadic loads (where the cell search is exact too) ``auto`` keeps the cell search for
        dense graphs, and gives the clique search ``CLIQUE_NODES`` nodes before it takes over.
        ``ints`` are the loads the search compares, ``approx`` the same as floats (the order only)."""
        idx = np.flatnonzero(carrying)
        m = int(idx.size)
        if route == "cells" or m == 0:
            return None
        if m > CLIQUE_QUERIES:
            return None
        heuristic = route == "auto" and floats_exact
        # Bits in a degeneracy order, densest core first (BBMC's initial order; measured up to 6x
        # fewer nodes than by weight or volume on 2 000 boxes), from the meeting sets in any order.
        if m <= PEEL_QUERIES:
            # Largest boxes first: on sparse graphs (below) their greedy colourings then take fewer
            # classes (5 Adult attributes, narrow boxes, t = 400: 570 boxes coloured, not 2 326).
            volume = np.prod((hi[idx] - lo[idx]) / sizes, axis=1)
            pre = np.argsort(-volume, kind="stable")
        else:
            pre = np.arange(m, dtype=np.int64)
        prebits = np.empty(m, dtype=np.int64)
        prebits[pre] = np.arange(m)
        first = meeting_sets(lo[idx], hi[idx], sizes, prebits)
        degrees = [x.bit_count() for x in first]
        pairs = sum(degrees)
        if heuristic and pairs > CLIQUE_DENSITY * m * m:
            return None
        # The float loads, not the integers: those of weights spanning many binary orders of magnitude
        # exceed the float range (float() of them raised OverflowError).
        wf = np.array(approx[idx], dtype=np.float64)
        wf /= max(float(wf.max()), 1e-300)
        # (On sparse graphs the order matters less: the first pass's, by decreasing volume.)
        if m <= PEEL_QUERIES and pairs > PEEL_DENSITY * m * m:
            width = (m + 7) // 8
            rows = np.frombuffer(b"".join(x.to_bytes(width, "little") for x in first), dtype=np.uint8)
            member = np.unpackbits(rows.reshape(m, width), axis=1, count=m, bitorder="little")
            # Rows and columns by box (the degeneracy order breaks ties by box, as measured).
            member = member[np.ix_(prebits, prebits)]
            order = _peeled(member, wf)
            # The sets in the new order by permuting the table (cheaper than a second pass).
            packed = np.packbits(member[np.ix_(order, order)], axis=1, bitorder="little")
            meets = [int.from_bytes(r.tobytes(), "little") for r in packed]
            bits = np.empty(m, dtype=np.int64)
            bits[order] = np.arange(m)
        elif m <= PEEL_QUERIES:
            order, bits, meets = pre, prebits, first
        else:
            order = np.argsort(-np.array(degrees), kind="stable")
            bits = np.empty(m, dtype=np.int64)
            bits[order] = np.arange(m)
            meets = meeting_sets(lo[idx], hi[idx], sizes, bits)
        bit = np.full(lo.shape[0], -1, dtype=np.int64)
        bit[idx] = bits
        weights = [ints[r] for r in idx[order].tolist()]
        query = idx[order]
        equal = len(set(weights)) <= 1
        budget = CLIQUE_NODES if equal else CLIQUE_WEIGHTED_NODES
        return _Graph(meets, weights, bit, query, lo, hi, budget if heuristic else None)

    def bits(self, sub: IntArray) -> int:
        mask = np.zeros(self.query.shape[0], dtype=bool)
        mask[self.bit[sub]] = True
        return _bitset(mask)

    def point(self, members: list[int]) -> IntArray:
        """A point common to the boxes of a clique (Helly): the largest ``lo`` on every attribute."""
        rows = self.query[np.array(members, dtype=np.int64)]
        point: IntArray = self.lo[rows].max(axis=0)
        assert bool(np.all(point < self.hi[rows].min(axis=0)))
        return point


class _Judge:
    """Weighs rows exactly and keeps the heaviest (MATH.md 7.5).

    The searches compare loads ``ints`` (one per live query, integers unless ``exact`` is None) with
    ``ints[q] * div >= exact[q]`` (the exact integer loads ``nums / 2**k``), and the cell search
    ``floats = ints * 2**-shift``, exact float sums. On dyadic loads these are the exact integers
    themselves. On other loads, scaled to integers once with numpy: the exact ones over their greatest
    common divisor when that keeps float sums exact (equal weights: ties stay ties), else
    ``ceil(load * 2**s)``, a bound from above (``div = 2**(k - s)``). A row is weighed on the exact
    integers whenever its search load passes the threshold ``best // div``, and no row at or below
    the threshold beats ``best`` (its exact load is at most ``div`` times its search load). Without
    ``exact`` the floats are compared as they are (``div`` 0).
    """

    def __init__(
        self,
        lo: IntArray,
        hi: IntArray,
        live: IntArray,
        exact: ExactLoads | None,
        ints: Sequence[float],
        floats: FloatArray,
        div: int,
        shift: int,
        floats_exact: bool,
        identity: bool = False,
    ) -> None:
        self.lo, self.hi, self.live, self.exact = lo, hi, live, exact
        # The search loads are the exact ones (or no exact ones exist): a clique's weight is exact.
        self.identity = identity
        self._pending: tuple[_Graph, list[int]] | None = None
        self.ints, self.floats, self.div, self.shift = ints, floats, div, shift
        self.floats_exact = floats_exact
        self.best: int | float = -1
        self.point: IntArray | None = None
        self.combo = 0
        self.sub = np.zeros(0, dtype=np.int64)
        self._ci = 0
        self.weighed = 0

    @staticmethod
    def of(
        lo: IntArray,
        hi: IntArray,
        live: IntArray,
        lw: FloatArray,
        exact: ExactLoads | None,
        floats_exact: bool,
        carrying: BoolArray,
        axes: int,
    ) -> _Judge:
        if exact is None:
            return _Judge(lo, hi, live, None, lw.tolist(), lw, 0, 0, True, True)
        every = exact.nums  # (a property: read once)
        nums = [every[i] for i in live.tolist()]
        if floats_exact:
            return _Judge(lo, hi, live, exact, nums, lw, 1, exact.k, True, True)
        # Float sums of the search loads are exact when their total times 2^axes (the cell search's
        # largest intermediate, MATH.md 7.8) stays below 2^53.
        limit = 1 << (52 - axes)
        g = math.gcd(*(nums[i] for i in np.flatnonzero(carrying).tolist()))
        if g > 0 and sum(nums) // g < limit:
            ints = [x // g for x in nums]
            return _Judge(lo, hi, live, exact, ints, np.array(ints, dtype=np.float64), g, 0, True)
        n = int(lw.shape[0])
        s = min(exact.k, 52 - axes - math.frexp(float(lw.sum()) + n)[1])
        if s >= 0:
            # lw >= nums / 2**k (normalised loads are exact or rounded up), so ceil(lw 2^s) 2^(k-s)
            # bounds each exact load; the total is below (sum lw + n) 2^s < 2^(52 - axes).
            up = np.ceil(np.ldexp(lw, s))
            ints = up.astype(np.int64).tolist()
            if sum(ints) < limit:
                return _Judge(lo, hi, live, exact, ints, up, 1 << (exact.k - s), 0, True)
        return _Judge(lo, hi, live, exact, nums, lw, 1, exact.k, False)

    def start(self, combo: int, sub: IntArray) -> None:
        """The next combination of value-set atoms and its compatible (live) queries."""
        self._ci, self.sub = combo, sub

    def threshold(self) -> int | float:
        """In search loads: a row at or below it is no heavier than the best row (exactly)."""
        if self.div == 0 or self.best < 0:
            return self.best
        return int(self.best) // self.div

    def float_threshold(self) -> float:
        t = self.threshold()
        return float(t) if self.shift == 0 or t < 0 else float(Fraction(int(t), 1 << self.shift))

    def lift(self, up: int | float) -> int | float:
        """A bound on search loads as a bound on the exact loads."""
        return up if self.div == 0 else int(up) * self.div

    def lift_float(self, up: float) -> int | float:
        if self.div == 0:
            return up
        return self.lift(math.ceil(Fraction(up) * (1 << self.shift)))

    def rows(self, points: IntArray) -> float:
        """Weigh rows (segment indices per box attribute) exactly over the current queries, keep
        the heaviest, and return the new threshold."""
        sub = self.sub
        cover = np.all(
            (self.lo[sub][None, :, :] <= points[:, None, :])
            & (self.hi[sub][None, :, :] > points[:, None, :]),
            axis=2,
        )
        self.weighed += int(points.shape[0])
        totals: Sequence[float]
        if self.exact is None:
            totals = (cover.astype(np.float64) @ self.floats[sub]).tolist()
        else:
            totals = self.exact.totals(cover, self.live[sub])
        i = max(range(len(totals)), key=lambda r: totals[r])
        if totals[i] > self.best:
            self.best, self.point, self.combo, self._pending = totals[i], points[i].copy(), self._ci, None
        return self.threshold()

    def clique(self, graph: _Graph, members: list[int]) -> float:
        """Weigh a clique's common point (Helly); its weight itself when the search loads are exact
        (the point, built once at the end, is covered by at least these boxes)."""
        if not self.identity:
            return self.rows(graph.point(members)[None, :])
        weight = sum(graph.weights[b] for b in members)
        if weight > self.best:
            self.best, self.combo, self._pending, self.point = weight, self._ci, (graph, members), None
        return self.threshold()

    @property
    def found(self) -> bool:
        return self.point is not None or self._pending is not None

    def witness(self) -> IntArray | None:
        if self._pending is not None:
            graph, members = self._pending
            self.point, self._pending = graph.point(members), None
        return self.point

    def rows_float(self, points: IntArray) -> float:
        self.rows(points)
        return self.float_threshold()


def _cells(
    lo: IntArray,
    hi: IntArray,
    sizes: IntArray,
    w: FloatArray,
    sub: IntArray,
    floor: float,
    deadline: float | None,
    judge: Callable[[IntArray], float] | None = None,
) -> tuple[IntArray | None, float, float, bool, int]:
    """The cell search (:class:`_Depth`) on the boxes ``sub``: ``(point, best, upper, exact, nodes)``,
    the point (segment indices per box attribute) None when no row beats ``floor``. Every box
    attribute is compressed for these boxes; those they all span drop out. ``judge`` (see
    :class:`_Depth`) receives points as segment indices per box attribute."""
    keep_dims: list[int] = []
    kept_segs: list[IntArray] = []
    clo: list[IntArray] = []
    chi: list[IntArray] = []
    for k in range(lo.shape[1]):
        kept, a_lo, a_hi = compress_axis(lo[sub, k], hi[sub, k], int(sizes[k]))
        if kept.size > 1:
            keep_dims.append(k)
            clo.append(a_lo)
            chi.append(a_hi)
        kept_segs.append(kept)
    first = np.array([int(kept[0]) for kept in kept_segs], dtype=np.int64)

    def original(points: IntArray) -> IntArray:
        out = np.tile(first, (points.shape[0], 1))
        for x, k in enumerate(keep_dims):
            out[:, k] = kept_segs[k][points[:, x]]
        return out

    inner = None if judge is None else (lambda points: judge(original(points)))
    if not keep_dims:
        total = float(w[sub].sum())
        found = np.zeros(0, dtype=np.int64) if total > floor else None
        if found is not None and judge is not None:
            judge(first[None, :])
        p, value, up, ok, nodes = found, max(total, floor), total, True, 0
    else:
        solver = _Depth(
            np.stack(clo, axis=1),
            np.stack(chi, axis=1),
            np.array([kept_segs[k].size for k in keep_dims], dtype=np.int64),
            w[sub],
            inner,
        )
        p, value, up, ok = solver.run(floor, deadline)
        nodes = solver.nodes
    if p is None:
        return None, value, up, ok, nodes
    point = np.array([int(kept[0]) for kept in kept_segs], dtype=np.int64)
    for k, x in zip(keep_dims, p.tolist(), strict=True):
        point[k] = int(kept_segs[k][x])
    return point, value, up, ok, nodes


# -- the route -----------------------------------------------------------------------------------------


def max_depth(
    c: Compiled,
    loads: FloatArray,
    deadline: float | None = None,
    exact: ExactLoads | None = None,
    floats_exact: bool = True,
    route: Literal["auto", "clique", "cells"] = "auto",
) -> BoxOutcome:
    """The largest total of ``loads`` (one per query, length ``c.t``, non-negative) over rows.

    Needs :func:`applies`. With ``exact`` (the same loads as integers: ``loads`` are ``nums / 2**k``,
    or rounded up from them) the pair-graph route compares those integers, exactly whatever the
    floats, and the cell search (float grids) runs only when ``floats_exact`` (float sums of the loads
    are exact, MATH.md 7.8); without ``exact`` every route compares the floats. ``route`` forces one
    route (tests). Exact unless ``deadline`` passes first; then ``upper`` is a safe bound.
    """
    live = c.live
    n = live.shape[0]
    col = np.full(c.t, -1, dtype=np.int64)
    col[live] = np.arange(n)
    lw = loads[live]
    box = [j for j, a in enumerate(c.attributes) if _single(a)]
    enum = [j for j in range(len(c.attributes)) if j not in box]
    sizes = np.array([c.attributes[j].size for j in box], dtype=np.int64)
    lo = np.zeros((n, len(box)), dtype=np.int64)
    hi = np.tile(sizes, (n, 1))
    for k, j in enumerate(box):
        a = c.attributes[j]
        lo[col[a.query], k] = a.lo
        hi[col[a.query], k] = a.hi
    # Combinations of atoms of the value-set attributes, with the queries compatible with each.
    masks = np.ones((1, n), dtype=bool)
    combo = np.zeros((1, 0), dtype=np.int64)
    segs: list[IntArray] = []
    if enum:
        tables = atom_tables(replace(c, attributes=tuple(c.attributes[j] for j in enum)))
        for t in tables:
            segs.append(t.segment)
            masks = (masks[:, None, :] & t.member[None, :, :]).reshape(-1, n)
            combo = np.concatenate(
                [np.repeat(combo, t.size, axis=0), np.tile(np.arange(t.size), combo.shape[0])[:, None]],
                axis=1,
            )
    masks &= lw > 0
    # Every comparison on integers (exact loads) or on the floats. A combination's load is its bound.
    ub: Sequence[float] = (
        exact.totals(masks, live) if exact is not None else (masks.astype(np.float64) @ lw).tolist()
    )
    order = sorted(range(len(ub)), key=lambda i: -ub[i])
    carrying = np.asarray(masks.any(axis=0), dtype=bool)
    judge = _Judge.of(lo, hi, live, lw, exact, floats_exact, carrying, min(len(box), GRID_AXES))
    graph = _Graph.of(lo, hi, sizes, judge.ints, lw, carrying, route, judge.floats_exact)

    nodes = 0
    upper: int | float = -1
    done = True
    integral = exact is not None
    seen: set[bytes] = set()
    for rank, ci in enumerate(order):
        if ub[ci] <= judge.best:
            break
        if judge.found and deadline is not None and _clock.now() > deadline:
            upper, done = ub[ci], False
            break
        key = np.packbits(masks[ci]).tobytes()
        if key in seen:
            continue
        seen.add(key)
        sub = np.flatnonzero(masks[ci])
        judge.start(ci, sub)
        up: int | float = judge.best
        ok = True
        if graph is not None:
            cq = max_clique(
                graph.meets,
                graph.weights,
                graph.bits(sub),
                judge.threshold(),
                deadline,
                graph.node_limit,
                lambda members: judge.clique(graph, members),
            )
            nodes += cq.nodes
            up, ok = judge.lift(cq.upper), cq.exact
            # Past its node budget (exact floats only), the cell search takes over from its best row.
            cells = not ok and graph.node_limit is not None and cq.nodes >= graph.node_limit
        else:
            cells = True
        if cells:
            # (On loads the judge could not make exact in floats, the engine certifies the result.)
            integral = integral and judge.floats_exact
            _, _, cell_up, ok, cell_nodes = _cells(
                lo, hi, sizes, judge.floats, sub, judge.float_threshold(), deadline, judge.rows_float
            )
            nodes += cell_nodes
            up = judge.lift_float(cell_up)
        if not ok:
            done = False
            rest = ub[order[rank + 1]] if rank + 1 < len(order) else -1
            upper = max(up, rest)
            break
    best = judge.best
    best_cell: tuple[int, ...] | None = None
    point = judge.witness()
    if point is not None:
        cell = [0] * len(c.attributes)
        for k, j in enumerate(box):
            cell[j] = int(point[k])
        for k, j in enumerate(enum):
            cell[j] = int(segs[k][combo[judge.combo, k]])
        best_cell = tuple(cell)
    else:
        # Nothing carries load (or nothing was reached): any row, value 0 when nothing carries load.
        best = 0 if max(ub, default=0) <= 0 else best
    if done:
        upper = best
    top = max(upper, best)

    def as_float(v: float) -> float:
        # (Integers of wide-ranging weights exceed the float range; their quotient does not.)
        return v if exact is None else float(Fraction(int(v), 1 << exact.k))

    best_f = as_float(best)
    upper_f = float(top) if exact is None else float_up(Fraction(int(top), 1 << exact.k))
    # Integral: every row was weighed on the exact integers (the searches' loads bound them above).
    return BoxOutcome(best_cell, best_f, max(upper_f, best_f), done, nodes, integral)
