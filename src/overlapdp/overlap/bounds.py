"""Safe upper bounds that need no search: the pairwise-overlap graph and a proper colouring of it.

MATH.md 1.10: $\\gamma\\le\\omega(G_Q)\\le\\chi(G_Q)$. For weights: a proper colouring splits the
queries into classes of pairwise DISJOINT queries (no edge inside a class), so any row is covered by
at most one query of each class. Hence the load of any row is at most
$\\sum_{\\text{classes}} \\max_{q\\in\\text{class}} f(w_q)$, a safe bound for ``count`` (the number of
colours), ``sum`` and, after the outer square root, ``l2``. (The largest class weight alone, or a
heuristic clique, is NOT a bound: it can be below the truth.)

Under a deadline the colouring may stop part way: each query not yet coloured is then a class of its
own (a partial proper colouring extended by singletons is still proper), so the bound stays safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import BoolArray, IntArray
from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.result import FloatArray

# The adjacency matrix is t x t booleans; above this many live queries the colouring bound is skipped.
COLOURING_LIMIT = 4000


def overlap_matrix(tables: Sequence[AtomTable], deadline: float | None = None) -> BoolArray | None:
    """``adj[a, b]``: live queries a and b overlap (share a row); the diagonal is False.

    Two queries overlap iff on every attribute they share an atom (coverages are products).
    None when ``deadline`` (``_clock.now()``) passes first (checked between attributes).
    """
    n = tables[0].member.shape[1] if tables else 0
    adj = np.ones((n, n), dtype=bool)
    for t in tables:
        if deadline is not None and _clock.now() > deadline:
            return None
        # Only queries that leave out some atom of this attribute can be disjoint on it.
        part = np.flatnonzero(~t.member.all(axis=0))
        if part.size == 0:
            continue
        mf = t.member[:, part].astype(np.float32)
        adj[np.ix_(part, part)] &= (mf.T @ mf) > 0.5
    np.fill_diagonal(adj, False)
    return adj


def greedy_colouring(adj: BoolArray, deadline: float | None = None) -> IntArray:
    """A proper colouring (largest degree first, smallest free colour); ``colour[v]`` per vertex.

    Past ``deadline`` (checked every 16 vertices) the vertices not yet coloured get fresh colours of
    their own, one each: still a proper colouring.
    """
    n = adj.shape[0]
    colour = np.full(n, -1, dtype=np.int64)
    for k, v in enumerate(np.argsort(-adj.sum(axis=1), kind="stable")):
        if deadline is not None and k % 16 == 0 and _clock.now() > deadline:
            rest = np.flatnonzero(colour < 0)
            colour[rest] = int(colour.max()) + 1 + np.arange(rest.size)
            break
        used = colour[adj[v]]
        used = np.unique(used[used >= 0])
        # Smallest colour not used by a neighbour.
        free = np.flatnonzero(np.arange(used.size + 1) != np.append(used, -1)[: used.size + 1])
        colour[v] = int(free[0]) if free.size else used.size
    return colour


def colouring_bound(
    tables: Sequence[AtomTable], loads: FloatArray, deadline: float | None = None
) -> float | None:
    """$\\sum_{\\text{classes}}\\max f(w)$ over a greedy colouring; None when there are too many queries
    or ``deadline`` passes before the overlap graph is built (past it, the colouring is finished with
    singletons: a weaker bound, still safe)."""
    n = loads.shape[0]
    if n == 0:
        return 0.0
    if n > COLOURING_LIMIT:
        return None
    adj = overlap_matrix(tables, deadline)
    if adj is None:
        return None
    colour = greedy_colouring(adj, deadline)
    top = np.zeros(int(colour.max()) + 1)
    np.maximum.at(top, colour, loads)
    return float(top.sum())
