"""Safe upper bounds that need no search: the pairwise-overlap graph and a proper colouring of it.

MATH.md 1.10: $\\gamma\\le\\omega(G_Q)\\le\\chi(G_Q)$. For weights: a proper colouring splits the
queries into classes of pairwise DISJOINT queries (no edge inside a class), so any row is covered by
at most one query of each class. Hence the load of any row is at most
$\\sum_{\\text{classes}} \\max_{q\\in\\text{class}} f(w_q)$, a safe bound for ``count`` (the number of
colours), ``sum`` and, after the outer square root, ``l2``. (The largest class weight alone, or a
heuristic clique, is NOT a bound: it can be below the truth.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from overlapdp.overlap._compiled import BoolArray, IntArray
from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.result import FloatArray

# The adjacency matrix is t x t booleans; above this many live queries the colouring bound is skipped.
COLOURING_LIMIT = 4000


def overlap_matrix(tables: Sequence[AtomTable]) -> BoolArray:
    """``adj[a, b]``: live queries a and b overlap (share a row); the diagonal is False.

    Two queries overlap iff on every attribute they share an atom (coverages are products).
    """
    n = tables[0].member.shape[1] if tables else 0
    adj = np.ones((n, n), dtype=bool)
    for t in tables:
        mf = t.member.astype(np.float32)
        adj &= (mf.T @ mf) > 0.5
    np.fill_diagonal(adj, False)
    return adj


def greedy_colouring(adj: BoolArray) -> IntArray:
    """A proper colouring (largest degree first, smallest free colour); ``colour[v]`` per vertex."""
    n = adj.shape[0]
    colour = np.full(n, -1, dtype=np.int64)
    for v in np.argsort(-adj.sum(axis=1), kind="stable"):
        used = colour[adj[v]]
        used = np.unique(used[used >= 0])
        # Smallest colour not used by a neighbour.
        free = np.flatnonzero(np.arange(used.size + 1) != np.append(used, -1)[: used.size + 1])
        colour[v] = int(free[0]) if free.size else used.size
    return colour


def colouring_bound(tables: Sequence[AtomTable], loads: FloatArray) -> float | None:
    """$\\sum_{\\text{classes}}\\max f(w)$ over a greedy colouring; None when there are too many queries."""
    n = loads.shape[0]
    if n == 0:
        return 0.0
    if n > COLOURING_LIMIT:
        return None
    colour = greedy_colouring(overlap_matrix(tables))
    top = np.zeros(int(colour.max()) + 1)
    np.maximum.at(top, colour, loads)
    return float(top.sum())
