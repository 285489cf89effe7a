"""When float sums locate the maximum exactly, and what to report when they may not (MATH.md 7.8).

The routes add normalised loads (:mod:`overlapdp.overlap.magnitude`) in floating point. Two rows whose
exact values differ can tie in floats (weights ``1e16`` and ``1``, or ``0.1`` and ``0.3``), and a route
may then return the lighter one; its value, recomputed exactly and rounded up, would be BELOW the true
maximum. The rule applied here:

- Dyadic-exact: when every stored load equals its exact scaled value, is an integer multiple of a common
  $2^{-k}$, and every intermediate of the route is at most $B<2^{53}$ such units (``B`` per route: the
  sum of the loads, or for the dense grid the sum of the absolute corner entries plus the loads), every
  float operation is exact: the float optimum is the exact maximum (counts, integer, half, quarter
  weights: the common case).
- Otherwise each route supplies an absolute error bound ``A`` (scaled units) such that the true maximum
  is at most ``F + A`` where ``F`` is its float optimum (sums: Higham's 2 n u times the sum of the loads; HiGHS: its
  optimality tolerance, relative 1e-6, as milp.py widens its dual bound). The dense grid then resolves
  the band exactly: every cell whose float value is at least ``F - 3A`` is evaluated on integers and
  the exact maximum taken (:func:`grid_exact`); the 2-D sweep runs on Python integers. The search routes are exact when the safe bound ``F + A``, rounded down
  to a multiple of the unit, and the witness's exact value round up to the same float
  (:func:`certify`); otherwise a depth-first search over the tie band with exact integer leaf values
  settles it (:func:`exact_branch`, within a node limit), or the safe bound is reported with
  ``exact=False``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from overlapdp.exact import MAX_FLOAT, float_up, sqrt_up
from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import AttributeSegments, BoolArray, Compiled, IntArray
from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.grid import GridPlan
from overlapdp.overlap.magnitude import Loads, MagnitudeError
from overlapdp.overlap.result import FloatArray

# Unit roundoff of binary64 (round to nearest).
U = 2.0**-53
# Largest candidates x queries x limbs the exact band evaluation of the dense grid may cost.
BAND_WORK_LIMIT = 200_000_000
# Largest segments x queries membership table (booleans) it builds; past it, cover per candidate chunk.
BAND_TABLE_LIMIT = 1 << 24
# Nodes of the exact tie-band search of the other routes before it gives up (the answer is then the
# safe bound with exact=False).
EXACT_NODE_LIMIT = 5_000
EXACT_SECONDS = 1.0


def dyadic_exact(lw: Loads, bound: float) -> bool:
    """Whether float arithmetic on ``lw.loads`` is exact for a route whose intermediates are at most
    ``bound`` in absolute value (scaled units): see the module docstring."""
    if not lw.loads_exact:
        return False
    k = lw.unit_exponent
    limit = math.ldexp(1.0, 53 - k) if 53 - k > -1074 else 0.0
    return bound * (1 + 1e-12) < limit


def load_error(lw: Loads, live: IntArray | None = None) -> float:
    """A bound on |sum of stored loads - sum of exact loads| over any set of queries (scaled units):
    scaled weights are exact or rounded up from below the normal range, squares within 2^-53."""
    if lw.loads_exact:
        return 0.0
    loads = lw.loads if live is None else lw.loads[live]
    return 2 * U * float(loads.sum()) + int(loads.shape[0]) * 2.0**-1073


def sum_error(lw: Loads, live: IntArray, terms: int) -> float:
    """Absolute error bound of a float sum (in any order, or a dot product with 0/1 entries) of at most
    ``terms`` of the live loads, plus the loads' own rounding: ``2 n u S`` (Higham's gamma_n, n u < 1/2)."""
    total = float(lw.loads[live].sum())
    return 2 * max(terms, 1) * U * total * (1 + 1e-9) + load_error(lw, live)


def grid_bound(plan: GridPlan, loads: FloatArray) -> float:
    """``B`` of the dense grid on ``loads``: the largest magnitude of any intermediate (the sum of the
    absolute corner entries plus the loads added cell by cell bounds every bin, prefix sum and cell)."""
    corner = float(np.abs(plan.corner_values(loads)).sum()) if plan.flat.size else 0.0
    direct = [qi for qi, _ in plan.direct]
    direct_total = float(loads[direct].sum()) if direct else 0.0
    return (corner + direct_total) * (1 + 1e-9)


def grid_error(plan: GridPlan, bound: float) -> float:
    """The dense grid's arithmetic error bound ``2 u n B`` (Higham's gamma_n), ``n`` the additions any
    corner entry goes through: its bin's accumulation, one cumulative sum per axis, the queries added
    cell by cell."""
    largest_bin = int(np.bincount(plan.flat).max()) if plan.flat.size else 0
    ops = largest_bin + sum(plan.shape) + len(plan.direct) + 1
    return 2 * U * ops * bound


def heaviest(lw: Loads, sets: Sequence[IntArray]) -> int:
    """The index of the query set (indices into the weights) with the largest EXACT load, the first of
    equals. ``sum``: ``math.fsum`` of the original weights is correctly rounded, and rounding is
    monotone, so a strictly larger rounded total is a strictly larger exact one; only sets tied after
    rounding are compared on integers (:attr:`Loads.exact`). ``l2`` is compared on integers, ``count``
    by size. No Python step per query of the workload, one per query of the sets."""
    if len(sets) == 1:
        return 0
    if lw.weights is None:
        return max(range(len(sets)), key=lambda i: int(sets[i].shape[0]))
    tied = list(range(len(sets)))
    if lw.name == "sum":
        try:
            rounded = [math.fsum(lw.weights[s].tolist()) for s in sets]
        except OverflowError:  # a total past the float range: compared on integers
            rounded = []
        if rounded:
            top = max(rounded)
            tied = [i for i, r in enumerate(rounded) if r == top]
            if len(tied) == 1:
                return tied[0]
    if len(tied) > 1:
        # Float totals of the scaled loads first (each load and each sum off by < n 2^-53 relative, and
        # far from underflow after normalisation): a set more than 1e-9 below the top cannot be the
        # exact maximum, so only the band is compared on integers (all of them was one exact total
        # per set, minutes on a long ledger's RDP report).
        approx = [float(lw.loads[sets[i]].sum()) for i in tied]
        top = max(approx)
        slack = top * 1e-9 + len(lw.loads) * 2.0**-1022
        tied = [i for i, a in zip(tied, approx, strict=True) if a >= top - slack]
    totals = [lw.exact.total(sets[i]) for i in tied]
    return tied[max(range(len(tied)), key=totals.__getitem__)]


def heaviest_rows(lw: Loads, cover: BoolArray, live: IntArray) -> int:
    """:func:`heaviest` of the sets ``live[row]`` for the rows of the boolean matrix ``cover`` (rows x
    ``len(live)``), without a Python step per row: float totals by one matrix product, the band within
    1e-9 of the top (as :func:`heaviest`: a set below it cannot be the exact maximum) compared on exact
    integers limb by limb (:meth:`ExactLoads.argmax_total`), the first of equals. Equal loads leave
    thousands of distinct sets in the band (an RDP report on 65 charges compared 6 million Python
    integer totals: 44 s)."""
    rows = int(cover.shape[0])
    if rows <= 1:
        return 0
    if lw.weights is None:
        return int(np.argmax(cover.sum(axis=1)))
    approx = cover.astype(np.float64) @ lw.loads[live]
    top = float(approx.max())
    if not math.isfinite(top):
        return heaviest(lw, [live[row] for row in cover])
    slack = top * 1e-9 + len(lw.loads) * 2.0**-1022
    band = np.flatnonzero(approx >= top - slack)
    if band.size == 1:
        return int(band[0])
    return int(band[lw.exact.argmax_total(cover[band], live)])


def grid_exact(c: Compiled, lw: Loads) -> tuple[tuple[int, ...], float | None]:
    """The dense grid of ``c`` (all its active attributes) on the loads of ``lw``: a maximising cell and
    ``None`` when that cell is PROVEN an exact maximum (dyadic-exact, or the band resolved on
    integers), else the float maximum plus its error bound as a safe bound in scaled units."""
    plan = GridPlan(c)
    grid = plan.loads(lw.loads)
    sizes = tuple(a.size for a in c.attributes)
    flat = int(np.argmax(grid))
    best_cell = tuple(int(v) for v in np.unravel_index(flat, sizes)) if sizes else ()
    top = float(grid.reshape(-1)[flat])
    bound = grid_bound(plan, lw.loads)
    if dyadic_exact(lw, bound):
        return best_cell, None
    err = grid_error(plan, bound) + load_error(lw, c.live)
    # 3 err, not 2: the subtraction itself may round up by at most u * top <= err / 2.
    cand = np.flatnonzero(grid.reshape(-1) >= top - 3 * err)
    if cand.size * max(c.live.size, 1) > BAND_WORK_LIMIT:
        return best_cell, top + err
    # The (segments x live) membership tables when there are many candidates and they are small; else
    # each candidate chunk's cover straight from the intervals (a 1-D workload of 20 000 ranges has
    # 40 000 segments: a 3 GB table; a few candidates, the usual case, need no pass over every segment).
    segments = sum(a.size for a in c.attributes)
    members = (
        [a.membership(c.live) for a in c.attributes]
        if segments * c.live.size <= BAND_TABLE_LIMIT and cand.size > segments
        else None
    )
    chunk_size = 4096 if members is not None else max(1, min(4096, BAND_TABLE_LIMIT // max(c.live.size, 1)))
    winners: list[tuple[tuple[int, ...], IntArray]] = []
    for start in range(0, cand.size, chunk_size):
        chunk = cand[start : start + chunk_size]
        cells = np.unravel_index(chunk, sizes)
        cover = np.ones((chunk.size, c.live.size), dtype=bool)
        if members is not None:
            for m, idx in zip(members, cells, strict=True):
                cover &= m[idx]
        else:
            for a, idx in zip(c.attributes, cells, strict=True):
                cover &= _segment_cover(a, c.live, np.asarray(idx, dtype=np.int64))
        i = heaviest_rows(lw, cover, c.live)
        winners.append((tuple(int(x[i]) for x in cells), c.live[cover[i]]))
    return winners[heaviest(lw, [s for _, s in winners])][0], None


def _segment_cover(a: AttributeSegments, live: IntArray, segments: IntArray) -> BoolArray:
    """``(len(segments), len(live))``: does live query ``c`` cover segment ``segments[k]`` of ``a``, from
    its intervals (the rows of ``a.membership(live)`` at ``segments``, without the whole table)."""
    t = int(a.constrained.shape[0])
    col = np.full(t, -1, dtype=np.int64)
    col[live] = np.arange(live.shape[0])
    out = np.zeros((segments.shape[0], live.shape[0]), dtype=bool)
    out[:, ~a.constrained[live]] = True
    keep = col[a.query] >= 0
    q, lo, hi = col[a.query[keep]], a.lo[keep], a.hi[keep]
    for start in range(0, segments.shape[0], 64):
        s = segments[start : start + 64, None]
        rows, k = np.nonzero((lo[None, :] <= s) & (s < hi[None, :]))
        out[start + rows, q[k]] = True
    return out


def certify(lw: Loads, covering: Sequence[int] | IntArray, bound: float, lower: float) -> tuple[float, bool]:
    """``(upper, exact)`` from the exact value of the witness's queries and a safe bound ``bound`` on the
    maximum in scaled units (a float, exactly as given). The maximum is a multiple of the unit ``2^-k``
    at most ``bound``; ``exact`` when that multiple is the witness's value, or when both round up to the
    same float ``lower`` (then ``upper == lower``). :class:`MagnitudeError` when the bound exceeds the
    float range."""
    k = lw.exact.k
    witness = lw.exact.total(np.asarray(covering, dtype=np.int64))
    scaled = Fraction(max(bound, 0.0))
    cap = max((scaled.numerator << k) // scaled.denominator, witness)
    if cap == witness:
        return lower, True
    if lw.name == "count":
        upper = float(cap)
    else:
        factor = Fraction(2) ** (lw.shift if lw.name == "sum" else 2 * lw.shift)
        value = Fraction(cap, 1 << k) * factor
        upper = float_up(value) if lw.name == "sum" else sqrt_up(value)
    if not math.isfinite(upper):
        raise MagnitudeError(
            f"{lw._heaviest(None)}: the bound on the maximum overlap exceeds the largest float ({MAX_FLOAT:g})"
        )
    return (lower, True) if upper == lower else (max(upper, lower), False)


def exact_branch(
    tables: Sequence[AtomTable],
    loads: FloatArray,
    nums: Sequence[int],
    k: int,
    err: float,
    incumbent: int,
    *,
    deadline: float | None = None,
    node_limit: int | None = None,
) -> tuple[tuple[int, ...] | None, int] | None:
    """The exact maximum over atom tuples (``nums`` units of ``2^-k``), or None past the limits (the
    deadline, ``EXACT_SECONDS``, ``node_limit`` or ``EXACT_NODE_LIMIT`` nodes).

    Depth-first branch and bound as :mod:`overlapdp.overlap.branch` (same bound: for every unfixed
    attribute the best atom's float load), started from the ``incumbent`` (the witness's exact value):
    a node is pruned only when its float bound plus ``err`` (the float error of any sum of loads) is
    below the incumbent, so only the tie band is explored; a solved node's value is its exact integer
    sum. Returns ``(cell, value)`` with ``cell`` None when no row beats the incumbent.
    """
    d = len(tables)
    n_live = loads.shape[0]
    positive = loads > 0
    scale = Fraction(1, 1 << k)
    best = incumbent
    best_cell: tuple[int, ...] | None = None
    nodes = 0
    limit_nodes = EXACT_NODE_LIMIT if node_limit is None else node_limit
    stop_at = _clock.now() + EXACT_SECONDS
    if deadline is not None:
        stop_at = min(stop_at, deadline)

    def threshold() -> float:
        # A float at most (incumbent - err): a node whose float bound is below it cannot beat it.
        t = float(best * scale)
        return t * (1 - 8 * U) - err * (1 + 4 * U)

    stack: list[tuple[BoolArray, tuple[int, ...]]] = [(np.ones(n_live, dtype=bool), tuple([-1] * d))]
    while stack:
        nodes += 1
        if nodes > limit_nodes or _clock.now() > stop_at:  # every node: the effort limit's overrun
            return None
        mask, fixed = stack.pop()
        idx = np.flatnonzero(mask & positive)
        need = idx.shape[0]
        completion = list(fixed)
        solved = True
        best_j, best_max, best_loads = -1, math.inf, None
        for j in range(d):
            if fixed[j] >= 0:
                continue
            sub = tables[j].as_float[:, idx]
            cnt = sub.sum(axis=1)
            top = int(np.argmax(cnt))
            if cnt[top] >= need - 0.5:
                completion[j] = top
                continue
            solved = False
            ld = sub @ loads[idx]
            m = float(ld.max())
            if m < best_max:
                best_j, best_max, best_loads = j, m, ld
        if solved:
            value = sum(nums[i] for i in idx.tolist())
            if value > best:
                best, best_cell = value, tuple(completion)
            continue
        assert best_loads is not None
        limit = threshold()
        member = tables[best_j].member
        for a in np.argsort(best_loads, kind="stable").tolist():  # heaviest popped first
            if float(best_loads[a]) < limit:
                continue
            nf = list(fixed)
            nf[best_j] = int(a)
            stack.append((mask & member[a], tuple(nf)))
    return best_cell, best
