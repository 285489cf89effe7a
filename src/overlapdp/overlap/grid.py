"""Dense segment grid: every query adds its load on a box of segments through inclusion-exclusion corners,
then cumulative sums along each axis give the load of every cell (MATH.md 7.4: cost
$O(t\\,2^d+\\prod_j m_j)$). With one active attribute this is the sorted-endpoint sweep.

A query whose coverage is several intervals on some attribute is the union of the boxes of the
product of its interval lists (disjoint, so their loads add exactly once). A query with so many boxes
that corners would cost more than its cells is added cell by cell instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from overlapdp.overlap._compiled import Compiled, IntArray
from overlapdp.overlap.result import FloatArray

# Largest grid (cells, times components) the dense route will allocate: 16M float64 values = 128 MB.
GRID_LIMIT = 1 << 24
# More active attributes than this makes 2^d corners per box too many.
MAX_GRID_DIMENSIONS = 12
# Up to this many grid axes a box's 2^d corners cost no more than the cell-by-cell rule's threshold
# (4 cells + 2000), so box workloads skip that test.
_FAST_DIMENSIONS = 10


def grid_feasible(c: Compiled, components: int = 1) -> bool:
    """Whether the dense grid fits the memory limit."""
    if len(c.attributes) > MAX_GRID_DIMENSIONS:
        return False
    cells = 1
    for a in c.attributes:
        cells *= a.size + 1
    return cells * components <= GRID_LIMIT


def _query_intervals(
    c: Compiled, dims: Sequence[int]
) -> tuple[list[IntArray], list[IntArray], list[IntArray], list[IntArray]]:
    """Per attribute: interval count per query, first interval per query, and all lo / hi sorted by query.

    Queries that do not constrain an attribute get one virtual interval covering all its segments.
    """
    t = c.t
    counts, starts, los, his = [], [], [], []
    for j in dims:
        a = c.attributes[j]
        free = np.flatnonzero(~a.constrained)
        q = np.concatenate([a.query, free])
        lo = np.concatenate([a.lo, np.zeros(free.shape[0], dtype=np.int64)])
        hi = np.concatenate([a.hi, np.full(free.shape[0], a.size, dtype=np.int64)])
        order = np.argsort(q, kind="stable")
        cnt = np.bincount(q, minlength=t).astype(np.int64)
        counts.append(cnt)
        starts.append(np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64))
        los.append(lo[order])
        his.append(hi[order])
    return counts, starts, los, his


class GridPlan:
    """The corner scatter of a workload on a dense grid over some of its active attributes.

    ``attributes`` are positions into ``c.attributes``; queries' constraints on other attributes are
    ignored (the grid is then the load of the PROJECTED workload, an upper bound of the true one). Built
    once; :meth:`loads` then costs one ``bincount`` over the corners and a cumulative sum per axis.
    """

    def __init__(self, c: Compiled, attributes: Sequence[int] | None = None) -> None:
        dims = list(range(len(c.attributes))) if attributes is None else list(attributes)
        self.dims = dims
        d = len(dims)
        self.sizes = [c.attributes[j].size for j in dims]
        self.shape = [s + 1 for s in self.sizes]
        strides = np.ones(d, dtype=np.int64)
        for j in range(d - 2, -1, -1):
            strides[j] = strides[j + 1] * self.shape[j + 1]
        self.total = int(np.prod(self.shape)) if d else 1
        live = c.live
        if c.single_interval and d <= _FAST_DIMENSIONS:
            # Boxes (one interval per query and attribute): each live query is one box, read straight
            # from the attribute arrays; no query is added cell by cell (2^d corners cost less).
            rep = live
            box_lo, box_hi = _single_boxes(c, dims)
            self.direct: list[tuple[int, tuple[IntArray, ...]]] = []
        else:
            rep, box_lo, box_hi = self._boxes(c, dims)
        # Corner k of a box takes hi on the attributes whose bit is set in k, lo on the others, and the
        # sign (-1)^(bits set): built by doubling, one attribute at a time (corner-major, then box).
        flat = np.zeros((1, rep.shape[0]), dtype=np.int64)
        sign = np.ones(1)
        for j in range(d):
            flat = np.concatenate([flat + box_lo[j] * strides[j], flat + box_hi[j] * strides[j]])
            sign = np.concatenate([sign, -sign])
        self.flat = flat.reshape(-1)
        # Box k's owner is rep[k]; every corner of it carries corner_sign[corner] * that query's weight.
        self.rep = rep
        self.corner_sign = sign

    @property
    def owner(self) -> IntArray:
        """The query owning each corner entry (``flat``'s order)."""
        return np.tile(self.rep, self.corner_sign.shape[0])

    @property
    def sign(self) -> FloatArray:
        """The sign of each corner entry (``flat``'s order)."""
        return np.repeat(self.corner_sign, self.rep.shape[0])

    def corner_values(self, weights: FloatArray) -> FloatArray:
        """``sign * weights[owner]``: the signed weight of every corner entry."""
        return (self.corner_sign[:, None] * weights[self.rep][None, :]).reshape(-1)

    def _boxes(self, c: Compiled, dims: list[int]) -> tuple[IntArray, list[IntArray], list[IntArray]]:
        """The boxes of the corner-route queries (owner, lo, hi per axis); fills ``self.direct`` with
        the queries whose boxes are so many that they are added cell by cell."""
        d = len(dims)
        live = c.live
        counts, starts, los, his = _query_intervals(c, dims)
        boxes = np.ones(c.t, dtype=np.int64)
        cells = np.ones(c.t, dtype=np.float64)
        for j in range(d):
            boxes *= counts[j]
            width = np.bincount(np.repeat(np.arange(c.t), counts[j]), weights=his[j] - los[j], minlength=c.t)
            cells *= width
        corner_cost = boxes.astype(np.float64) * (1 << d)
        direct = np.zeros(c.t, dtype=bool)
        direct[live] = corner_cost[live] > 4 * cells[live] + 2000
        corner_q = live[~direct[live]]
        # Enumerate the boxes of the corner-route queries: mixed-radix digits over their interval lists.
        nb = boxes[corner_q]
        rep = np.repeat(corner_q, nb)
        first = (np.cumsum(nb) - nb).astype(np.int64)
        r = np.arange(rep.shape[0], dtype=np.int64) - np.repeat(first, nb)
        box_lo: list[IntArray] = []
        box_hi: list[IntArray] = []
        radix = np.ones(rep.shape[0], dtype=np.int64)
        for j in range(d - 1, -1, -1):
            cnt = counts[j][rep]
            digit = (r // radix) % cnt
            radix = radix * cnt
            idx = starts[j][rep] + digit
            box_lo.append(los[j][idx])
            box_hi.append(his[j][idx])
        box_lo.reverse()
        box_hi.reverse()
        # Queries added cell by cell: their index arrays per grid axis.
        self.direct = []
        for qi in np.flatnonzero(direct).tolist():
            index = []
            for j in range(d):
                s0 = starts[j][qi]
                parts = [np.arange(los[j][s0 + m], his[j][s0 + m]) for m in range(counts[j][qi])]
                index.append(np.concatenate(parts))
            self.direct.append((qi, tuple(np.ix_(*index))))
        return rep, box_lo, box_hi

    def loads(self, weights: FloatArray) -> FloatArray:
        """Cell loads (shape ``sizes``) for per-query ``weights`` (length ``t``; 0 drops a query)."""
        acc = np.bincount(self.flat, weights=self.corner_values(weights), minlength=self.total).astype(
            np.float64, copy=False
        )
        out = acc.reshape(self.shape)
        for j in range(len(self.shape)):
            np.cumsum(out, axis=j, out=out)
        grid = out[tuple(slice(0, s) for s in self.sizes)]
        for qi, index in self.direct:
            if weights[qi] != 0:
                grid[index] += weights[qi]
        return grid


def _single_boxes(c: Compiled, dims: Sequence[int]) -> tuple[list[IntArray], list[IntArray]]:
    """Per grid axis, the segment bounds of every live query's box (the whole axis where unconstrained)."""
    live = c.live
    box_lo: list[IntArray] = []
    box_hi: list[IntArray] = []
    for j in dims:
        a = c.attributes[j]
        if a.query.shape[0] == live.shape[0]:
            # Every live query has one interval here (intervals are listed in query order): the arrays are it.
            box_lo.append(a.lo)
            box_hi.append(a.hi)
            continue
        # Unconstrained: the whole axis. Constrained but with no interval left (atoms dropped them in
        # :func:`~overlapdp.overlap._gridbranch.compress`): an empty box, whose corners cancel.
        lo = np.zeros(c.t, dtype=np.int64)
        hi = np.where(a.constrained, 0, a.size).astype(np.int64)
        lo[a.query] = a.lo
        hi[a.query] = a.hi
        box_lo.append(lo[live])
        box_hi.append(hi[live])
    return box_lo, box_hi


def grid_loads(c: Compiled, loads: FloatArray) -> FloatArray:
    """The load of every cell of the segment grid, one array of shape ``sizes + (k,)`` for ``(t, k)`` loads."""
    plan = GridPlan(c)
    k = loads.shape[1]
    out = np.empty((*plan.sizes, k), dtype=np.float64)
    for comp in range(k):
        out[..., comp] = plan.loads(np.ascontiguousarray(loads[:, comp]))
    return out


def grid_maximum(c: Compiled, loads: FloatArray) -> list[tuple[float, tuple[int, ...]]]:
    """Per component of ``loads`` (shape ``(t, k)``): the largest cell load and its segment tuple."""
    grid = grid_loads(c, loads)
    out = []
    sizes = tuple(a.size for a in c.attributes)
    for comp in range(loads.shape[1]):
        g = grid[..., comp]
        flat = int(np.argmax(g))
        cell = tuple(int(v) for v in np.unravel_index(flat, sizes)) if sizes else ()
        out.append((float(g.reshape(-1)[flat]), cell))
    return out
