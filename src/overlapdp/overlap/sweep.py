"""Two active attributes, every coverage one interval (boxes): sweep the first attribute's segments and
keep the second's loads in a segment tree with lazy range add and a global maximum (Imai and Asano
1983; MATH.md 7.3), $O(t\\log t)$.

With ``ints`` (exact integer loads, MATH.md 7.8: used when float sums could be inexact) the same
sweep runs on Python integers, so the maximum and its cell are exact.

At each segment boundary of the first attribute the boxes that end there are removed and those that
start there are added; the tree's root then holds the largest load of any cell in that column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from overlapdp.overlap._compiled import Compiled
from overlapdp.overlap.result import FloatArray


class MaxAddTree:
    """Range add on ``[l, r)`` and global max with its position, over ``n`` leaves (iterative, lazy).

    ``top[v]`` is the maximum of ``v``'s subtree including the pending adds stored at ``v`` itself.
    """

    def __init__(self, n: int, exact: bool = False) -> None:
        size = 1
        while size < n:
            size *= 2
        self.size = size
        zero: float = 0 if exact else 0.0
        self.top: list[float] = [zero] * (2 * size)
        self.lazy: list[float] = [zero] * (2 * size)
        # Padding leaves: below every real leaf (loads are >= 0) and never added to.
        pad = -1 if exact else float("-inf")
        for i in range(size + n, 2 * size):
            self.top[i] = pad
        for i in range(size - 1, 0, -1):
            self.top[i] = max(self.top[2 * i], self.top[2 * i + 1])

    def add(self, lo: int, hi: int, value: float) -> None:
        top, lazy = self.top, self.lazy
        lo += self.size
        hi += self.size
        l0, r0 = lo, hi - 1
        while lo < hi:
            if lo & 1:
                top[lo] += value
                lazy[lo] += value
                lo += 1
            if hi & 1:
                hi -= 1
                top[hi] += value
                lazy[hi] += value
            lo >>= 1
            hi >>= 1
        for i in (l0 >> 1, r0 >> 1):
            while i:
                a, b = top[2 * i], top[2 * i + 1]
                top[i] = (a if a > b else b) + lazy[i]
                i >>= 1

    @property
    def maximum(self) -> float:
        return self.top[1]

    def argmax(self) -> int:
        top = self.top
        v = 1
        while v < self.size:
            v = 2 * v if top[2 * v] >= top[2 * v + 1] else 2 * v + 1
        return v - self.size


def sweep_2d(
    c: Compiled, loads: FloatArray, ints: Sequence[int] | None = None
) -> tuple[float, tuple[int, int]]:
    """Largest cell load and its segment pair; needs exactly two active attributes, one interval each.
    With ``ints`` (one non-negative integer per query) the sweep adds those exactly instead."""
    ax, ay = c.attributes
    t = c.t
    # Interval per query on each attribute (the full range when it does not constrain it).
    xlo = np.zeros(t, dtype=np.int64)
    xhi = np.full(t, ax.size, dtype=np.int64)
    xlo[ax.query], xhi[ax.query] = ax.lo, ax.hi
    ylo = np.zeros(t, dtype=np.int64)
    yhi = np.full(t, ay.size, dtype=np.int64)
    ylo[ay.query], yhi[ay.query] = ay.lo, ay.hi
    live = c.live[loads[c.live] > 0]
    tree = MaxAddTree(ay.size, exact=ints is not None)
    # Events sorted by x; removals (at hi) before additions (at lo) at the same x.
    ex = np.concatenate([xhi[live], xlo[live]])
    kind = np.concatenate([np.zeros(live.size, dtype=np.int64), np.ones(live.size, dtype=np.int64)])
    who = np.concatenate([live, live])
    order = np.lexsort((kind, ex))
    best: float = 0 if ints is not None else 0.0
    cell = (0, 0)
    ex_l, kind_l, who_l = ex[order].tolist(), kind[order].tolist(), who[order].tolist()
    ylo_l, yhi_l = ylo.tolist(), yhi.tolist()
    w_l: list[float] = list(ints) if ints is not None else loads.tolist()
    n = len(ex_l)
    i = 0
    while i < n:
        x = ex_l[i]
        while i < n and ex_l[i] == x:
            q = who_l[i]
            tree.add(ylo_l[q], yhi_l[q], w_l[q] if kind_l[i] else -w_l[q])
            i += 1
        if x < ax.size and tree.maximum > best:
            best, cell = tree.maximum, (x, tree.argmax())
    return best, cell
