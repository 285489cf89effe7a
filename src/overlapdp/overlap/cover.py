"""A safe upper bound from a cover of the loads by query sets: a certificate the caller may hold.

MATH.md 7.11: if sets of queries ``S_j`` with amounts ``a_j >= 0`` cover every query's load up to a
factor ``r`` (``w_q <= r * sum_{j: q in S_j} a_j``), and no row is covered by more than ``g_j`` queries of
``S_j``, then no row's load exceeds ``r * sum_j g_j a_j``; a query in no set adds its load in full. The
planner's packing plans (MATH.md 2.10.1) are such covers with ``g_j = 1`` (pairwise disjoint queries)
and the whole workload at the count bound; a search that cannot prove their maximum within its limit
(thousands of small queries: the count maximum alone is not proved in a minute) checks them at once.

Nothing of the cover is trusted: each ``g_j`` is found here from the workload's own intervals (1 when
the set's queries are pairwise disjoint, else the number of colours of a greedy colouring of the pairs
that meet, at least the set's maximum overlap: MATH.md 1.10), ``r`` is computed in exact rationals
from the loads, and the amounts only weigh the sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from overlapdp.errors import CompError
from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import BoolArray, Compiled
from overlapdp.overlap.bounds import COLOURING_LIMIT, greedy_colouring


@dataclass(frozen=True)
class Cover:
    """Sets of queries (positions in the workload's list) and a non-negative amount for each: a claim
    that every query's load is at most the sum of the amounts of the sets holding it (checked, never
    trusted: :func:`cover_bound`). Amounts are in the loads' unit (epsilon, rho, mu^2); a uniform
    factor between the two is absorbed by the bound."""

    sets: tuple[tuple[int, ...], ...]
    amounts: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.sets) != len(self.amounts):
            raise CompError(
                f"a cover needs one amount per set: {len(self.sets)} sets, {len(self.amounts)} amounts"
            )
        for a in self.amounts:
            if not (a >= 0 and a < float("inf")):
                raise CompError(f"a cover's amounts must be finite and non-negative, got {a!r}")

    def shifted(self, offset: int) -> Cover:
        """The same cover for a ledger that holds ``offset`` other charges before the workload's (a
        plan's cover names its queries from 0): those charges, in no set, count in full."""
        if offset < 0:
            raise CompError(f"a cover's offset must be non-negative, got {offset}")
        return Cover(tuple(tuple(int(i) + offset for i in s) for s in self.sets), self.amounts)

    def checked(self, t: int) -> None:
        """Every position names one of the workload's ``t`` queries."""
        for s in self.sets:
            for i in s:
                if not 0 <= int(i) < t:
                    raise CompError(f"a cover's set names query #{i}, outside the workload of {t}")


def meeting_pairs(c: Compiled, deadline: float | None = None) -> BoolArray | None:
    """``meet[a, b]``: live queries ``c.live[a]`` and ``c.live[b]`` share a row (diagonal False), from
    the raw segments of each attribute (two products of value sets meet iff they meet on every
    attribute; common segments counted in float32, exact below 2^24). None past ``deadline`` or over
    :data:`~overlapdp.overlap.bounds.COLOURING_LIMIT` live queries."""
    n = int(c.live.size)
    if n > COLOURING_LIMIT:
        return None
    meet = np.ones((n, n), dtype=bool)
    for a in c.attributes:
        if deadline is not None and _clock.now() > deadline:
            return None
        cols = np.flatnonzero(a.constrained[c.live])
        if cols.size == 0:
            continue
        m = a.membership(c.live[cols])
        part = ~m.all(axis=0)  # a query covering every segment meets everyone on this attribute
        if not part.any():
            continue
        idx = cols[part]
        mf = m[:, part].astype(np.float32)
        meet[np.ix_(idx, idx)] &= (mf.T @ mf) > 0.5
    np.fill_diagonal(meet, False)
    return meet


def cover_bound(
    c: Compiled, loads: Sequence[Fraction], cover: Cover, deadline: float | None = None
) -> Fraction | None:
    """The bound of MATH.md 7.11 on the largest row load, ``loads`` the exact load of each query of the
    workload (count: 1; sum: the weight; l2: its square); None when there are too many live queries for
    the pairs, or past ``deadline`` (a colouring it cuts ends with singletons: weaker, still safe).
    The smaller of two safe forms: ``r * sum_j g_j a_j`` with ``r``
    the largest ratio of a covered query's load to its cover, and ``sum_j g_j a_j`` plus every covered
    query's excess over its cover; both plus the loads of queries in no set."""
    meet = meeting_pairs(c, deadline)
    if meet is None:
        return None
    n = int(c.live.size)
    pos = np.full(c.t, -1, dtype=np.int64)
    pos[c.live] = np.arange(n)
    held = [Fraction(0)] * n
    weighed = Fraction(0)  # sum_j g_j a_j
    for s, amount in zip(cover.sets, cover.amounts, strict=True):
        if deadline is not None and _clock.now() > deadline:
            return None
        members = np.unique(pos[np.asarray(s, dtype=np.int64)]) if len(s) else np.zeros(0, dtype=np.int64)
        members = members[members >= 0]  # a query covering no row loads none
        if members.size == 0 or amount == 0:
            continue
        sub = meet[np.ix_(members, members)]
        g = 1 if not sub.any() else int(greedy_colouring(sub, deadline).max()) + 1
        a = Fraction(amount)
        weighed += g * a
        for i in members.tolist():
            held[i] += a
    ratio = Fraction(0)
    excess = Fraction(0)
    alone = Fraction(0)
    for i, q in enumerate(c.live.tolist()):
        w = loads[q]
        if w <= 0:
            continue
        if held[i] <= 0:
            alone += w
            continue
        ratio = max(ratio, w / held[i])
        excess += max(Fraction(0), w - held[i])
    return min(ratio * weighed, weighed + excess) + alone
