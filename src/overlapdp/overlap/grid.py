"""Dense segment grid: every query adds its load on a box of segments through inclusion-exclusion corners,
then cumulative sums along each axis give the load of every cell (MATH.md section 7: cost
$O(t\\,2^d+\\prod_j m_j)$). With one active attribute this is the sorted-endpoint sweep.

A query whose coverage is several intervals on some attribute is the union of the boxes of the
product of its interval lists (disjoint, so their loads add exactly once). A query with so many boxes
that corners would cost more than its cells is added cell by cell instead.
"""

from __future__ import annotations

import numpy as np

from overlapdp.overlap.compiled import Compiled, IntArray
from overlapdp.overlap.result import FloatArray

# Largest grid (cells, times components) the dense route will allocate: 16M float64 values = 128 MB.
GRID_LIMIT = 1 << 24
# More active attributes than this makes 2^d corners per box too many.
MAX_GRID_DIMENSIONS = 12


def grid_feasible(c: Compiled, components: int = 1) -> bool:
    """Whether the dense grid fits the memory limit."""
    if len(c.attributes) > MAX_GRID_DIMENSIONS:
        return False
    cells = 1
    for a in c.attributes:
        cells *= a.size + 1
    return cells * components <= GRID_LIMIT


def _query_intervals(c: Compiled) -> tuple[list[IntArray], list[IntArray], list[IntArray], list[IntArray]]:
    """Per attribute: interval count per query, first interval per query, and all lo / hi sorted by query.

    Queries that do not constrain an attribute get one virtual interval covering all its segments.
    """
    t = c.t
    counts, starts, los, his = [], [], [], []
    for a in c.attributes:
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


def grid_loads(c: Compiled, loads: FloatArray) -> FloatArray:
    """The load of every cell of the segment grid, one array of shape ``sizes + (k,)`` for ``(t, k)`` loads."""
    d = len(c.attributes)
    sizes = [a.size for a in c.attributes]
    k = loads.shape[1]
    shape = [s + 1 for s in sizes]
    strides = np.ones(d, dtype=np.int64)
    for j in range(d - 2, -1, -1):
        strides[j] = strides[j + 1] * shape[j + 1]
    total = int(np.prod(shape)) if d else 1
    live = c.live
    counts, starts, los, his = _query_intervals(c)
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
    first = np.concatenate([[0], np.cumsum(nb)[:-1]]).astype(np.int64)
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
    out = np.zeros((*shape, k), dtype=np.float64)
    flat_out = out.reshape(total, k)
    w = loads[rep]
    for mask in range(1 << d):
        # The corner of every box for this inclusion-exclusion mask; one pass for all components.
        flat = np.zeros(rep.shape[0], dtype=np.int64)
        sign = 1.0
        for j in range(d):
            if mask >> j & 1:
                flat += box_hi[j] * strides[j]
                sign = -sign
            else:
                flat += box_lo[j] * strides[j]
        if k == 1:
            flat_out[:, 0] += np.bincount(flat, weights=sign * w[:, 0], minlength=total)
        else:
            np.add.at(flat_out, flat, sign * w)
    for j in range(d):
        np.cumsum(out, axis=j, out=out)
    grid = out[tuple(slice(0, s) for s in sizes)]
    for qi in np.flatnonzero(direct):
        index = []
        for j in range(d):
            s0 = starts[j][qi]
            parts = [np.arange(los[j][s0 + m], his[j][s0 + m]) for m in range(counts[j][qi])]
            index.append(np.concatenate(parts))
        grid[np.ix_(*index)] += loads[qi]
    return grid


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
