"""Branch and bound over some attributes with a dense grid over the others (MATH.md 7.4, 7.6).

When the segment grid over every active attribute is too large, split the attributes: a group ``G``
whose grid fits (the attributes carrying the most load first) and the rest ``R``. The search fixes the
atoms of ``R`` one attribute at a time; a node holds the queries still compatible with the atoms fixed
so far. Its bound is the largest cell of the grid over ``G`` of those queries with their constraints on
the unfixed ``R`` attributes IGNORED: every row below the node is covered by a subset of what that
projected grid counts at its ``G`` cell, so the bound is never below the truth. When every ``R``
attribute is fixed nothing is ignored and the grid's maximum is exact. Best-first order; each node's
grid is computed lazily when the node is first popped. Past the deadline the largest open bound is a
safe upper bound.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import AttributeSegments, BoolArray, Compiled, IntArray
from overlapdp.overlap.branch import AtomTable, BranchOutcome
from overlapdp.overlap.grid import GridPlan
from overlapdp.overlap.result import FloatArray

# Cells of the per-node grid: one node then costs a few tens of milliseconds at most.
NODE_GRID_LIMIT = 1 << 22
_REL = 1e-12


def compress(c: Compiled, tables: Sequence[AtomTable]) -> Compiled:
    """The workload on the kept atoms only (distinct, non-dominated segments), still exact for the maximum.

    A dominated segment never beats the segment dominating it (monotone comp), so the maximum over
    rows made of kept segments is the maximum. Every kept segment lies in at most one interval of a
    query, so an interval ``[lo, hi)`` becomes the kept segments inside it, again one interval in kept
    order, and every query still counts once at every kept cell it covers. ``cuts`` of the result give
    the first value of each kept segment, so ``row()`` maps a kept cell to raw value indices.
    """
    attrs = []
    for a, t in zip(c.attributes, tables, strict=True):
        kept: IntArray = np.sort(t.segment)
        lo = np.searchsorted(kept, a.lo).astype(np.int64)
        hi = np.searchsorted(kept, a.hi).astype(np.int64)
        keep = hi > lo
        cuts = np.append(a.cuts[kept], a.cuts[-1]).astype(np.int64)
        # Queries left with no interval still constrain the attribute (they cover no kept segment).
        mask = a.mask if keep.all() else a.constrained
        attrs.append(AttributeSegments(a.position, cuts, a.query[keep], lo[keep], hi[keep], mask, c.t))
    return Compiled(c.schema, c.t, c.live, tuple(attrs), c.single_interval)


def kept_tables(tables: Sequence[AtomTable]) -> list[AtomTable]:
    """The atom tables re-indexed so that atom ``k`` is kept segment ``k`` of :func:`compress`."""
    out = []
    for t in tables:
        order = np.argsort(t.segment)
        out.append(AtomTable(t.member[order], np.arange(order.shape[0], dtype=np.int64)))
    return out


@dataclass(frozen=True)
class Split:
    grid: list[int]
    rest: list[int]


def choose_split(c: Compiled, loads_live: FloatArray, limit: int = NODE_GRID_LIMIT) -> Split | None:
    """Grid attributes by load carried per grid cell spent; None when fewer than one fits."""
    live = c.live
    score = []
    for j, a in enumerate(c.attributes):
        carried = float(loads_live[a.constrained[live]].sum())
        score.append((carried / math.log2(a.size + 1), j))
    grid: list[int] = []
    cells = 1
    for _, j in sorted(score, reverse=True):
        size = c.attributes[j].size + 1
        if cells * size <= limit:
            grid.append(j)
            cells *= size
    if not grid:
        return None
    rest = [j for _, j in sorted(score, reverse=True) if j not in grid]
    return Split(sorted(grid), rest)


def grid_branch(
    c: Compiled,
    tables: Sequence[AtomTable],
    loads_live: FloatArray,
    split: Split,
    *,
    deadline: float | None = None,
    node_limit: int | None = None,
    stop: Callable[[], bool] | None = None,
    rel: float = _REL,
    plan: GridPlan | None = None,
) -> BranchOutcome:
    """Maximise the total load over rows; ``cell`` in the outcome is in segment indices of ``c``.

    ``stop`` is asked before every node; when it says True the search ends as at the deadline (used
    when another solver running alongside has proved the optimum). Nodes are pruned at
    ``best * (1 + rel)`` (``rel=0`` when the float sums are exact, MATH.md 7.8); ``plan`` is the
    ``GridPlan(c, split.grid)`` when the caller has built it already.
    """
    live = c.live
    n_live = live.shape[0]
    plan = GridPlan(c, split.grid) if plan is None else plan
    seg_member = {j: c.attributes[j].membership(live) for j in split.grid}
    rest = split.rest
    weights_full = np.zeros(c.t)
    positive = loads_live > 0
    counter = itertools.count()
    best = -1.0
    best_cell: tuple[int, ...] | None = None
    nodes = 0

    def evaluate(mask: BoolArray, fixed: tuple[int, ...]) -> float:
        """Projected grid bound of the node; also tries the row it points at as an incumbent."""
        nonlocal best, best_cell
        weights_full[:] = 0.0
        weights_full[live[mask]] = loads_live[mask]
        grid = plan.loads(weights_full)
        flat = int(np.argmax(grid))
        bound = float(grid.reshape(-1)[flat])
        gcell = np.unravel_index(flat, grid.shape)
        # A concrete row: the grid cell, the fixed atoms, and greedy atoms for the unfixed attributes.
        inside = mask & positive
        for j, s in zip(split.grid, gcell, strict=True):
            inside &= seg_member[j][int(s)]
        chosen = list(fixed)
        for j in rest[len(fixed) :]:
            member = tables[j].member
            gain = member[:, inside].astype(np.float64) @ loads_live[inside]
            a = int(np.argmax(gain))
            chosen.append(a)
            inside &= member[a]
        value = float(loads_live[inside].sum())
        if value > best:
            cell = [0] * len(c.attributes)
            for j, s in zip(split.grid, gcell, strict=True):
                cell[j] = int(s)
            for j, a in zip(rest, chosen, strict=True):
                cell[j] = int(tables[j].segment[a])
            best, best_cell = value, tuple(cell)
        return bound

    def slack(v: float) -> float:
        return v + rel * max(abs(v), 1e-300)

    root = np.ones(n_live, dtype=bool)
    # Entries: (-bound, tiebreak, evaluated, mask, fixed atoms of rest[:len(fixed)]).
    heap: list[tuple[float, int, bool, BoolArray, tuple[int, ...]]] = [
        (-float(loads_live.sum()), next(counter), False, root, ())
    ]
    while heap:
        negb, _, done, mask, fixed = heap[0]
        if -negb <= slack(best):
            heap.clear()
            break
        if best_cell is not None and (
            (deadline is not None and _clock.now() > deadline)
            or (node_limit is not None and nodes >= node_limit)
            or (stop is not None and stop())
        ):
            break
        heapq.heappop(heap)
        nodes += 1
        if not done:
            bound = min(-negb, evaluate(mask, fixed))
            if len(fixed) == len(rest):
                continue  # a leaf: evaluate() already recorded its exact maximum as an incumbent
            if bound > slack(best):
                heapq.heappush(heap, (-bound, next(counter), True, mask, fixed))
            continue
        j = rest[len(fixed)]
        member = tables[j].member
        seen: set[bytes] = set()
        for a in range(member.shape[0]):
            child = mask & member[a]
            b = float(loads_live[child].sum())
            if b <= slack(best):
                continue
            key = np.packbits(child).tobytes()
            if key in seen:
                continue
            seen.add(key)
            heapq.heappush(heap, (-min(b, -negb), next(counter), False, child, (*fixed, a)))
    if heap:
        return BranchOutcome(best_cell, best, max(best, -heap[0][0]), False, nodes)
    return BranchOutcome(best_cell, best, best, True, nodes)
