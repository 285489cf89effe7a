"""Exact branch and bound over attributes (MATH.md 7.6).

A row is one atom per active attribute; the queries covering it are the intersection over attributes
of the queries covering the chosen atom. The search fixes attributes one at a time, keeping the set
``C`` of queries still compatible with the atoms fixed so far (a boolean vector, numpy-vectorised).

- Atoms: segments with identical membership merge; an atom whose queries are a subset of another
  atom's queries is dominated (choosing the other never lowers a monotone comp) and is dropped.
- Bound: any row below a node is covered by a subset of ``C`` and, for every unfixed attribute ``j``,
  by a subset of ``C`` intersected with the queries of the atom it takes on ``j``; so
  $\\min_j \\max_a \\mathrm{comp}(C\\cap S_j(a))$ is an upper bound (it is never below the true value).
- Leaf: when, for every unfixed attribute, some atom is covered by every query of ``C`` that carries
  load, the row taking those atoms attains ``comp(C)`` exactly, so the node is solved.
- Best-first: the node with the largest bound is expanded next, so the first solved node whose value
  is at least every open bound is optimal. Past the time limit the largest open bound is a SAFE upper
  bound (every unexplored row lies below some open node).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import AttributeSegments, BoolArray, Compiled, IntArray
from overlapdp.overlap.result import FloatArray

# Relative slack when comparing float bounds with the incumbent (sums of loads in different orders).
_REL = 1e-12


@dataclass(frozen=True)
class AtomTable:
    """Atoms of one attribute restricted to the live queries.

    ``member[a, c]`` says whether live query ``c`` covers atom ``a``; ``segment[a]`` is a segment in it.
    """

    member: BoolArray
    segment: IntArray

    @property
    def size(self) -> int:
        return int(self.member.shape[0])

    @cached_property
    def as_float(self) -> FloatArray:
        """``member`` as float64 for matrix products (built on first use: 8 bytes per entry)."""
        return self.member.astype(np.float64)


def atom_tables(c: Compiled, dominance_budget: float = 4e8) -> list[AtomTable]:
    """Merge alike segments and drop dominated atoms, per active attribute."""
    return [atom_table(c, a, dominance_budget) for a in c.attributes]


def constrained_membership(c: Compiled, a: AttributeSegments) -> tuple[IntArray, BoolArray]:
    """The positions (in ``c.live``) of the live queries constraining ``a`` and their membership
    (segments x those queries); every other live query covers every segment."""
    cols = np.flatnonzero(a.constrained[c.live])
    return cols, a.membership(c.live[cols])


def atom_table(
    c: Compiled,
    a: AttributeSegments,
    dominance_budget: float = 4e8,
    membership: tuple[IntArray, BoolArray] | None = None,
) -> AtomTable:
    """The atoms of one attribute ``a`` of ``c`` (one step of :func:`atom_tables`, so that a caller
    with a deadline can check it between attributes); ``membership``: :func:`constrained_membership`
    when the caller has it already."""
    # Only the live queries constraining ``a`` tell its segments apart (the others cover every
    # segment, a column of ones in every atom): atoms, merging and dominance are decided on those
    # columns alone, O(segments x constraining queries) rather than x every live query, which on a
    # wide sparse workload (thousands of attributes, a few queries each) is most of the work.
    cols, sub = constrained_membership(c, a) if membership is None else membership
    if cols.size:
        # Rows as bytes: hashing them finds the distinct ones (first occurrence kept, in segment order).
        packed = np.packbits(sub, axis=1)
        seen: dict[bytes, int] = {}
        for s, key in enumerate(map(bytes, packed)):
            seen.setdefault(key, s)
        first = np.fromiter(sorted(seen.values()), dtype=np.int64, count=len(seen))
    else:
        first = np.zeros(1, dtype=np.int64)
    sub = sub[first]
    segment = first
    n = sub.shape[0]
    if n > 1 and float(n) * n * max(1, int(c.live.shape[0])) <= dominance_budget:
        # Containment on the constraining columns is containment on all (the others are all ones).
        mf = sub.astype(np.float32)
        inter = mf @ mf.T
        size = mf.sum(axis=1)
        np.fill_diagonal(inter, -1.0)
        # Distinct atoms: containment of a in b means |a & b| == |a| (and b is strictly larger).
        dominated = (inter >= size[:, None] - 0.5).any(axis=1)
        if dominated.all():  # cannot happen for distinct rows; keep one to stay safe
            dominated[int(np.argmax(size))] = False
        sub = sub[~dominated]
        segment = segment[~dominated]
    member = np.ones((sub.shape[0], c.live.shape[0]), dtype=bool)
    member[:, cols] = sub
    return AtomTable(member, segment)


@dataclass
class BranchOutcome:
    """Best row found (segments per active attribute), its load total, and the safe bound."""

    cell: tuple[int, ...] | None
    best: float
    upper: float
    exact: bool
    nodes: int


Bounder = Callable[[BoolArray], float]


def branch_and_bound(
    c: Compiled,
    tables: Sequence[AtomTable],
    loads: FloatArray | None,
    *,
    set_value: Callable[[IntArray], float] | None = None,
    set_upper: Callable[[IntArray], float] | None = None,
    deadline: float | None = None,
    node_limit: int | None = None,
    rel: float = _REL,
) -> BranchOutcome:
    """Maximise the total load (or ``set_value``) over rows; see the module docstring.

    ``loads`` (one per live query, non-negative) selects the additive form; otherwise ``set_value`` and
    ``set_upper`` take arrays of live positions. Stops at ``deadline`` (``_clock.now()``) or after
    ``node_limit`` expansions with ``exact=False`` and the largest open bound as ``upper``. A node is
    pruned when its bound is at most ``best * (1 + rel)``: ``rel=0`` when the float sums are exact
    (:mod:`overlapdp.overlap.exactness`), else the caller adds ``rel * best`` to its error bound.
    """
    d = len(tables)
    n_live = c.live.shape[0]
    additive = loads is not None
    if additive:
        assert loads is not None
        w = loads
        positive = w > 0
    else:
        assert set_value is not None and set_upper is not None
        w = np.ones(n_live, dtype=np.float64)
        positive = np.ones(n_live, dtype=bool)

    def value_of(mask: BoolArray) -> float:
        if additive:
            return float(w[mask].sum())
        assert set_value is not None
        return float(set_value(np.flatnonzero(mask)))

    def upper_of(mask: BoolArray) -> float:
        if additive:
            return float(w[mask].sum())
        assert set_upper is not None
        return float(set_upper(np.flatnonzero(mask)))

    counter = itertools.count()
    best = -1.0
    best_cell: tuple[int, ...] | None = None
    nodes = 0

    def expand(
        mask: BoolArray, fixed: tuple[int, ...]
    ) -> tuple[float, list[tuple[float, BoolArray, tuple[int, ...]]] | None, tuple[int, ...] | None]:
        """Refined bound; children (bound, mask, fixed) or, when solved, None and the full cell."""
        free = [j for j in range(d) if fixed[j] < 0]
        pos = mask & positive
        idx = np.flatnonzero(pos)
        need = idx.shape[0]
        col_w = w[idx]
        best_j, best_max, best_loads = -1, np.inf, None
        completion = list(fixed)
        solved = True
        for j in free:
            sub = tables[j].as_float[:, idx] if need < n_live else tables[j].as_float
            cnt = sub.sum(axis=1) if need < n_live else sub @ pos.astype(np.float64)
            top = int(np.argmax(cnt))
            if cnt[top] >= need - 0.5:
                completion[j] = top
                continue
            solved = False
            ld = sub @ col_w if need < n_live else sub @ (w * pos)
            m = float(ld.max())
            if m < best_max or (m == best_max and tables[j].size < tables[best_j].size):
                best_j, best_max, best_loads = j, m, ld
        if solved:
            return value_of(mask), None, tuple(completion)
        assert best_loads is not None
        children = []
        member = tables[best_j].member
        seen: set[bytes] = set()
        for a in np.argsort(-best_loads, kind="stable"):
            child = mask & member[a]
            key = np.packbits(child).tobytes()
            if key in seen:
                continue
            seen.add(key)
            b = float(best_loads[a]) if additive else upper_of(child)
            nf = list(fixed)
            nf[best_j] = int(a)
            children.append((b, child, tuple(nf)))
        bound = best_max if additive else upper_of(mask)
        return bound, children, None

    root = np.ones(n_live, dtype=bool)
    root_fixed = tuple([-1] * d)
    heap: list[tuple[float, int, BoolArray, tuple[int, ...]]] = [
        (-upper_of(root), next(counter), root, root_fixed)
    ]
    # A greedy dive first gives an incumbent (a lower bound with a witness) quickly.
    dive: tuple[BoolArray, tuple[int, ...]] | None = (root, root_fixed)
    expired = False
    while dive is not None:
        mask, fixed = dive
        nodes += 1
        _, children, cell = expand(mask, fixed)
        if cell is not None:
            v = value_of(mask)
            if v > best:
                best, best_cell = v, cell
            dive = None
        else:
            assert children
            top = max(children, key=lambda ch: ch[0])
            dive = (top[1], top[2])
        if deadline is not None and _clock.now() > deadline:
            expired = True  # the search below stops at once, without reading the clock again
            break

    def slack(v: float) -> float:
        return v + rel * max(abs(v), 1e-300)

    while heap:
        negb, _, mask, fixed = heap[0]
        if -negb <= slack(best):
            heap.clear()
            break
        if expired or (
            (deadline is not None and _clock.now() > deadline)
            or (node_limit is not None and nodes >= node_limit)
        ):
            break
        heapq.heappop(heap)
        nodes += 1
        bound, children, cell = expand(mask, fixed)
        if cell is not None:
            if bound > best:
                best, best_cell = bound, cell
            continue
        if bound <= slack(best):
            continue
        assert children is not None
        for b, child, nf in children:
            if b > slack(best):
                heapq.heappush(heap, (-b, next(counter), child, nf))
    if heap:
        upper = max(best, -heap[0][0])
        return BranchOutcome(best_cell, best, upper, False, nodes)
    return BranchOutcome(best_cell, best, best, True, nodes)
