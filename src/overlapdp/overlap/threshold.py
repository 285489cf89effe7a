"""Exact threshold decision: does some row of a box pay more than a threshold? (MATH.md 7.9)

The question a privacy filter asks near its budget (MATH.md 2.7.1) is a decision, not an optimisation:
given charges (each a product of value sets, one per attribute, with a load) and the coverage of a new
one, is there a row of that coverage whose load does not fit? This module answers it exactly by a
depth-first branch and bound over the attributes' values:

- the values of each attribute that every charge treats alike are merged into atoms;
- a node is a box (a set of atoms per attribute); its charges are those meeting it;
- bounds, cheapest first: the per-attribute load tables (a row's load is at most the largest load of a
  value on any one attribute), then the LP relaxation of the one-hot model, solved by HiGHS (highspy;
  the first solve starts at the bound of each charge's load on its most selective attribute, then
  warm from node to node), made a rigorous bound through its duals: for ANY multipliers
  $\\mu_{ia}\\ge0$, $\\max_{x\\in R}L(x)\\le\\sum_i(w_i-\\sum_a\\mu_{ia})^++\\sum_a\\max_{v\\in R_a}\\sum_i\\mu_{ia}[v\\in C_{i,a}]$
  (Lagrangian relaxation of $y_i\\le\\sum_{v\\in C_{i,a}}x_{a,v}$; MATH.md 7.9), evaluated in floats and
  widened past their round-off, so the solver's tolerances never make a bound unsafe;
- when every load is a multiple of a common unit (equal epsilons, dyadic ones), so is every row's load,
  and a bound is rounded down to a multiple of it before the test (a bound of 24.7 units proves 24);
- the LP's solution, rounded to a row (the heaviest value of each attribute), is tried first, at the
  root improved by coordinate ascent (each attribute in turn moved to its heaviest value given the
  others), and so is the row of the tables' heaviest values: a row that does not fit ends the search
  with a refusal (its load summed exactly); the heaviest row weighed that fits is reported
  (``Problem.heaviest``);
- the dual simplex stops once its dual bound is below the threshold, or on loads that are multiples
  of the unit below the next multiple above it (HiGHS's objective bound): its duals are still
  multipliers, and the bound is recomputed from them;
- branching: the node's multipliers bound every child at once (one attribute fixed to one value);
  the search splits the attribute with the fewest children that neither this bound nor the value's
  table clears (fail first), one child per such value, the LP's favourite first; the other values are
  proved at once (without highspy: the fewest values whose table exceeds the threshold);
- on loads that are multiples of the unit, toulbar2 joins a decision not settled within
  ``WCSP_JOIN_SECONDS`` of its processor time (or given up), in a child process: the first row of load
  at least the smallest multiple that does not fit, or a complete search's proof that there is none
  (:class:`_Toulbar2`).

Every prune compares an exact upper bound (a Fraction) with the caller's exact test; a leaf (every charge
of the box holding all of it) is summed with Fractions. The answer is therefore exact whatever the
floats do. Without highspy the same search runs on the tables alone (exact, slower).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.errors import SearchGaveUp
from overlapdp.exact import exact_sum, float_up
from overlapdp.overlap import _clock, branch, wcsp
from overlapdp.query import PredicateQuery

BoolArray = np.ndarray
FloatArray = np.ndarray

# Float round-off of a bound computed from n loads and k attributes is far below this relative margin
# per term (4 (n + k + 2) 2^-53, for n + k < 2^40); see _widened.
_U = 2.0**-53
# Float pre-checks of a bound: its float (already above the exact value) times _UP covers the roundings
# of the check itself; only bounds within _BAND (relative) of the largest fitting float are settled
# exactly.
_UP = 1 + 2.0**-50
_BAND = 1 + 1e-9
_TINY_BAND = 2.0**-1000
# Loads below this (relative to the heaviest, after scaling by a power of two) are raised to it for the
# LP (an upper bound; keeps HiGHS away from subnormals).
_FLOOR = 2.0**-900


def common_unit(values: Sequence[Fraction]) -> Fraction | None:
    """The largest Fraction of which every positive value is an integer multiple (their gcd), or None
    when there is no positive value."""
    g: Fraction | None = None
    for v in values:
        if v <= 0:
            continue
        if g is None:
            g = v
            continue
        den = g.denominator * v.denominator // math.gcd(g.denominator, v.denominator)
        g = Fraction(
            math.gcd(g.numerator * (den // g.denominator), v.numerator * (den // v.denominator)), den
        )
    return g


def unit_gcd(g: Fraction | None, v: Fraction) -> Fraction | None:
    """:func:`common_unit` of ``g``'s values and ``v``, incrementally."""
    return common_unit([x for x in (g, v) if x is not None])


@dataclass
class Problem:
    """A decision instance: charges (rows of ``cover``: one boolean block per attribute, side by side)
    with float ``loads`` (for bounds) and exact ones, restricted to a box."""

    cover: BoolArray  # charges x cells
    loads: FloatArray  # float, each >= 0 (the nearest float of the exact load, or above it)
    exact: Sequence[Fraction]
    offsets: np.ndarray  # cell offset of each attribute, and the total at the end
    box: BoolArray  # cells
    unit: Fraction | None = None
    #: a float near the largest load that fits (speeds up finding it; any value is safe)
    hint: float | None = None
    stats: dict[str, int] = field(default_factory=dict)
    #: multipliers (rows of ``cover`` x attributes, in load units, any float dtype) kept from earlier
    #: decisions over these charges: any non-negative ones bound every row (MATH.md 7.9), so the search
    #: tries them at its root before its first LP, and writes that LP's multipliers back (None: neither)
    warm: np.ndarray | None = None
    #: (written by the search) the heaviest row it weighed that fits, with its exact load: a decision
    #: that admits makes that row the likeliest to be full for the next charge (None: none weighed)
    heaviest: tuple[tuple[int, ...], Fraction] | None = None
    #: (written by the search) the row it found that does not fit, with its exact load (None: none, or
    #: found by toulbar2, which gives no load)
    over: tuple[tuple[int, ...], Fraction] | None = None
    #: whether to try the kept multipliers before setting the search up (a caller that sees them fail
    #: there again and again may stop paying for the try; either way the decision is the same)
    precheck: bool = True


class _Atoms:
    """Per relevant attribute, the box's values grouped by which charges hold them."""

    def __init__(self, cover: BoolArray, offsets: np.ndarray, box: BoolArray) -> None:
        self.attrs: list[int] = []
        self.tables: list[BoolArray] = []  # per relevant attribute: charges x atoms
        self.values: list[list[int]] = []  # per relevant attribute: a value index of each atom
        self.fixed: dict[int, int] = {}  # irrelevant attribute -> a value of the box
        nattrs = len(offsets) - 1
        cols = np.flatnonzero(box)
        attr = np.searchsorted(offsets, cols, side="right") - 1  # each column's attribute
        sub = cover[:, cols]
        # One key per value: its attribute (4 bytes, big-endian: attributes in order), then the charges
        # holding it as bits. One np.unique over them (as one void column, several times cheaper than
        # np.unique(axis=0)) gives every attribute's distinct values at once, each attribute's in the
        # same order as a np.unique of its own packed columns, and the first value of each.
        packed = np.packbits(sub, axis=0).T
        key = np.empty((cols.size, 4 + packed.shape[1]), dtype=np.uint8)
        key[:, :4] = attr.astype(">u4").view(np.uint8).reshape(-1, 4)
        key[:, 4:] = packed
        _, first = np.unique(key.view(np.dtype((np.void, key.shape[1]))).reshape(-1), return_index=True)
        bounds = np.searchsorted(attr[first], np.arange(nattrs + 1)).tolist()
        whole = np.asarray(sub[:, first].all(axis=0)).tolist()
        local = (cols - offsets[attr]).tolist()
        for p in range(nattrs):
            mine = first[bounds[p] : bounds[p + 1]]
            if mine.size == 1 and whole[bounds[p]]:  # every charge holds all of it
                self.fixed[p] = local[int(mine[0])]
                continue
            self.attrs.append(p)
            self.tables.append(sub[:, mine])
            self.values.append([local[i] for i in mine.tolist()])

    def row(self, choice: Sequence[int], nattrs: int) -> tuple[int, ...]:
        out = [0] * nattrs
        for p, v in self.fixed.items():
            out[p] = v
        for j, p in enumerate(self.attrs):
            out[p] = self.values[j][choice[j]]
        return tuple(out)


class _LP:
    """The LP relaxation of the one-hot model over the atoms, kept in one HiGHS instance whose column
    bounds change from node to node (the dual simplex restarts from the last basis)."""

    def __init__(self, tables: list[BoolArray], w: FloatArray) -> None:
        import highspy

        n = len(w)
        self.n = n
        self.k = [t.shape[1] for t in tables]
        self.off = np.concatenate([[0], np.cumsum(self.k)]).astype(np.int64)
        nx = int(self.off[-1])
        self.ncol = n + nx
        inf = highspy.kHighsInf
        # rows y_j - sum of x over the atoms j holds <= 0 (one per charge and attribute it holds part
        # of; by attribute, then charge), built rowwise with numpy at once; then one row sum of x = 1
        # per attribute
        k = len(tables)
        table = np.concatenate(tables, axis=1) if k else np.zeros((n, 0), dtype=bool)
        # atoms of each attribute each charge holds; a charge holding them all constrains nothing there
        held = np.add.reduceat(table, self.off[:-1], axis=1) if nx else np.zeros((n, 0), np.int64)
        constrains = held < np.asarray(self.k, dtype=np.int64)
        pa, pj = np.nonzero(constrains.T)
        self.pj, self.pa = pj.astype(np.int64), pa.astype(np.int64)
        self.npairs = npairs = int(pj.size)
        # the held atoms of every pair (a charge, an attribute it constrains), by pair then atom: per
        # attribute over its own atoms only (the pairs of an attribute are consecutive)
        first_pair = np.searchsorted(pa, np.arange(k + 1))
        parts_r: list[np.ndarray] = []
        parts_c: list[np.ndarray] = []
        for a in range(k):
            lo, hi = int(self.off[a]), int(self.off[a + 1])
            r, c = np.nonzero(table[pj[first_pair[a] : first_pair[a + 1]], lo:hi])
            parts_r.append(r + first_pair[a])
            parts_c.append(c + lo)
        rr = np.concatenate(parts_r) if k else np.zeros(0, np.int64)
        cc = np.concatenate(parts_c) if k else np.zeros(0, np.int64)
        counts = held[pj, pa]
        begin = np.concatenate([[0], np.cumsum(counts + 1)[:-1]]).astype(np.int64)
        index = np.empty(npairs + rr.size + nx, dtype=np.int32)
        value = np.full(index.size, -1.0)
        index[begin] = pj
        value[begin] = 1.0
        first = np.cumsum(counts) - counts
        index[begin[rr] + 1 + (np.arange(rr.size) - first[rr])] = n + cc
        index[npairs + rr.size :] = np.arange(n, n + nx)
        value[npairs + rr.size :] = 1.0
        lengths = np.concatenate([counts + 1, np.asarray(self.k, dtype=np.int64)])
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        nrows = self.npairs + len(tables)
        rows_lo = np.concatenate([np.full(self.npairs, -inf), np.ones(len(tables))])
        rows_up = np.concatenate([np.zeros(self.npairs), np.ones(len(tables))])
        # the plain binding: highspy.Highs adds Python callbacks and prints a banner on stdout
        h = getattr(highspy, "_Highs", highspy.Highs)()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("simplex_strategy", 1)  # dual simplex: warm after bound changes
        h.setOptionValue("threads", 1)
        h.setOptionValue("presolve", "off")  # node re-solves start from the last basis
        # the model from arrays (a HighsLp's fields are copied element by element from Python: ~0.3
        # ms a search); every column continuous
        status = h.passModel(
            self.ncol,
            nrows,
            int(index.size),
            int(highspy.MatrixFormat.kRowwise),
            int(highspy.ObjSense.kMinimize),
            0.0,
            np.concatenate([-w, np.zeros(nx)]),
            np.zeros(self.ncol),
            np.ones(self.ncol),
            rows_lo,
            rows_up,
            starts,
            index,
            value,
            np.zeros(self.ncol, dtype=np.int32),
        )
        if status == highspy.HighsStatus.kError:  # pragma: no cover - the arrays are consistent
            raise RuntimeError(f"HiGHS refused the threshold LP: {status}")
        self.h = h
        self.cols = np.arange(self.ncol, dtype=np.int32)
        self.lower = np.zeros(self.ncol)
        self.upper = np.ones(self.ncol)
        self._start(w, held, constrains, rr, cc, highspy)

    def _start(
        self,
        w: FloatArray,
        held: np.ndarray,
        constrains: BoolArray,
        rr: np.ndarray,
        cc: np.ndarray,
        highspy: Any,
    ) -> None:
        """Start the dual simplex from a dual feasible basis instead of the slack basis: each charge's
        whole load on one attribute it constrains, the one where it holds the smallest share of the
        atoms (its most selective), and per attribute the atom those loads pile highest on. These are
        multipliers of MATH.md 7.9 (an assignment bound), and the basis that prices them (each charge's
        y and each attribute's heaviest atom basic, the assigned rows tight) is dual feasible, so the
        first solve starts at that bound rather than at the total load: 3-10x fewer iterations on the
        near-budget streams' root solves (benchmarks/README.md). Any basis HiGHS refuses leaves the
        slack basis (only the start changes; the bounds come from the duals it ends with). ``held``:
        charges x attributes, the atoms each holds; ``constrains``: where it holds some but not all;
        ``rr, cc``: the pairs' held atoms (pair index, atom column)."""
        n, k = self.n, len(self.k)
        if self.npairs == 0:
            return
        status = highspy.HighsBasisStatus
        share = held / np.asarray(self.k)
        assign = np.argmin(np.where(constrains, share, np.inf), axis=1)
        some: BoolArray = np.asarray(constrains.any(axis=1))
        # 0 at lower, 1 basic, 2 at upper (the statuses' order below)
        cols = np.zeros(self.ncol, dtype=np.int8)
        cols[:n] = np.where(some, 1, 2)  # a charge constraining nothing stays at y = 1
        # each charge's one pair on its assigned attribute; each atom's load from those pairs' atoms
        assigned = self.pa == assign[self.pj]
        mine = assigned[rr]
        load = np.bincount(cc[mine], weights=w[self.pj[rr[mine]]], minlength=int(self.off[-1]))
        # the first heaviest atom of every attribute
        attr_of = np.repeat(np.arange(k), self.k)
        top = np.flatnonzero(load == np.maximum.reduceat(load, self.off[:-1])[attr_of])
        _, firsts = np.unique(attr_of[top], return_index=True)
        cols[n + top[firsts]] = 1
        rows = np.ones(self.npairs + k, dtype=np.int8)
        rows[: self.npairs][assigned] = 2  # y_i - sum of x <= 0 tight: its multiplier w_i
        rows[self.npairs :] = 0  # the attributes' equality rows, nonbasic
        names = np.array([status.kLower, status.kBasic, status.kUpper], dtype=object)
        basis = highspy.HighsBasis()
        basis.col_status = names[cols].tolist()
        basis.row_status = names[rows].tolist()
        basis.valid = True
        self.h.setBasis(basis)

    def solve(
        self,
        alive: BoolArray,
        masks: list[BoolArray],
        deadline: float | None = None,
        enough: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Multipliers (charges x attributes, >= 0) and the primal x per atom, or None when HiGHS has no
        dual values. Stopped at the ``deadline`` (HiGHS's own time limit), its dual values are still
        multipliers, so still a valid bound (MATH.md 7.9), only a weaker one. With ``enough``, the dual
        simplex also stops once its bound is below it (HiGHS's objective bound): its iterates stay dual
        feasible from the warm basis on, and any duals are multipliers; the bound is recomputed from them
        anyway, and the primal x is then only a hint for branching."""
        upper = np.concatenate([alive.astype(float), *[m.astype(float) for m in masks]])
        diff = np.flatnonzero(upper != self.upper)
        if diff.size:  # only what changed: HiGHS keeps more of its factorisation
            self.h.changeColsBounds(
                int(diff.size), diff.astype(np.int32), self.lower[: diff.size], upper[diff]
            )
            self.upper = upper
        left = math.inf if deadline is None else max(deadline - _clock.now(), 1e-3)
        self.h.setOptionValue("time_limit", left)
        # HiGHS minimises -w.y: a dual objective above -enough proves the box clear
        self.h.setOptionValue("objective_bound", math.inf if enough is None else -enough)
        self.h.run()
        import highspy

        status = self.h.getModelStatus()
        done = highspy.HighsModelStatus
        if status not in (done.kOptimal, done.kTimeLimit, done.kObjectiveBound):
            return None
        sol = self.h.getSolution()
        if not sol.dual_valid:
            return None
        duals = np.asarray(sol.row_dual)[: self.npairs]
        mu = np.zeros((self.n, len(self.k)))
        # HiGHS minimises -w.y; a row y - sum x <= 0 has a dual <= 0, whose negation is the multiplier
        mu[self.pj, self.pa] = np.maximum(-duals, 0.0)
        mu[~np.isfinite(mu)] = 0.0
        return mu, np.asarray(sol.col_value)[self.n :]


def _highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:  # pragma: no cover - highspy is a dependency
        return False
    return True


def exceeds(
    pb: Problem,
    fits: Callable[[Fraction], bool],
    *,
    max_nodes: int,
    deadline: float | None = None,
) -> tuple[int, ...] | None:
    """A row of ``pb.box`` whose exact load does not ``fits``, or None when every row of the box fits
    (module docstring; MATH.md 7.9). ``fits`` must be monotone (a load that fits, every smaller one
    fits). Raises :class:`SearchGaveUp` past ``max_nodes`` nodes or the ``deadline``
    (:func:`overlapdp.overlap._clock.now`), unless toulbar2, beside the branch and bound on loads that
    are multiples of the unit, answers by then."""
    cleared = _cleared_at_once(pb, fits) if pb.precheck else None
    if cleared is not None:
        pb.stats["pre"] = pb.stats.get("pre", 0) + 1
    if cleared:
        return None
    search = _Search(pb, fits)
    # the root need not take the kept multipliers' bound again (the one taken here may be a little
    # weaker, with the multipliers on attributes the box's atoms leave whole: a root LP then proves
    # what the root's would have)
    search.root_warm = cleared is None
    found: list[tuple[int, ...]] = []

    def on_row(row: tuple[int, ...], load: Fraction) -> bool:
        found.append(row)
        pb.over = (row, load)
        return True

    beside = _Toulbar2(search, deadline) if _toulbar2_may_join(search) else None
    try:
        cut = search.run(on_row, max_nodes, deadline, None if beside is None else beside.poll)
        if found:
            return found[0]
        if beside is not None and (beside.answered or (cut is not None and beside.wait())):
            return beside.row
        if cut is not None:
            raise SearchGaveUp
        return None
    finally:
        pb.heaviest = search.heaviest
        if beside is not None:
            beside.cancel()


def _cleared_at_once(pb: Problem, fits: Callable[[Fraction], bool]) -> bool | None:
    """Whether the kept multipliers' Lagrangian bound (MATH.md 7.9) already shows that every row of the
    box fits, taken on the charges' coverages as they are (no atoms, no scaling, no largest fitting
    float: the search's set-up costs more than this bound), over the live charges that hold a value of
    the box on each attribute it narrows (those meeting it, and any holding no value at all of an
    attribute the box leaves whole: the bound holds over any superset), widened to an exact upper bound as the search does (rounded down to the unit) and tested
    with ``fits``. Summed attribute by attribute, heaviest first, it stops once past a float clearly
    above the largest load that fits (``pb.hint`` plus a unit; any hint is safe: it only ends this
    test sooner). Only finite loads below 2^600 (no sum overflows). False: tried, settles nothing (the
    search decides, its root trying the tables); None: not tried."""
    loads, cover, box, offsets = pb.loads, pb.cover, pb.box, pb.offsets
    if pb.warm is None:
        return None
    starts = offsets[:-1]
    live = loads > 0
    if not live.any() or not np.isfinite(loads).all() or float(loads.max()) >= 2.0**600:
        return None
    in_box = np.add.reduceat(box, starts)
    if not in_box.all():  # an empty box: the search says so
        return None
    meets = live
    for a in np.flatnonzero(in_box < np.diff(offsets)).tolist():
        lo, hi = int(offsets[a]), int(offsets[a + 1])
        meets = meets & cover[:, lo:hi][:, box[lo:hi]].any(axis=1)
    idx = np.flatnonzero(meets)
    n, d = int(idx.size), len(starts)
    if n == 0:
        return None
    sub, w = cover[idx], loads[idx]
    mu = np.asarray(pb.warm[idx], dtype=np.float64)
    mu = np.where(np.isfinite(mu) & (mu > 0), mu, 0.0)
    unit_f = float(pb.unit) if pb.unit is not None else 0.0
    hint = pb.hint if pb.hint is not None and math.isfinite(pb.hint) else math.inf
    past = (hint + unit_f) * 1.000001 if hint >= 0 else -math.inf
    # sums of non-negative products of exact floats, as in _lagrangian, whose round-off bound this shares
    total = float(np.maximum(w - mu.sum(axis=1), 0.0).sum())
    weights = mu.sum(axis=0)
    for a in np.argsort(-weights).tolist():
        if total > past:
            return False
        if weights[a] > 0:
            lo, hi = int(offsets[a]), int(offsets[a + 1])
            total += float((mu[:, a] @ sub[:, lo:hi])[box[lo:hi]].max())
    if not total <= past:  # (and not finite)
        return False
    err = 4 * (n + d + 4) * _U * (float(w.sum()) + float(mu.sum()) + total)
    bound = Fraction(total) * Fraction(1 + 4 * (n + d + 2) * _U) + Fraction(err)
    if pb.unit is not None:
        bound = (bound // pb.unit) * pb.unit
    if not fits(bound):
        return False
    pb.stats["warm"] = pb.stats.get("warm", 0) + 1
    return True


#: toulbar2 joins a threshold decision (loads multiples of one unit) whose branch and bound has run this
#: long without an answer: a quick decision never starts a child process. Its start-up costs ~0.2 s of
#: CPU: on a single analyst's stream (the idle second core) 0.1 s was a little better, but in the served
#: process near a quota (8 analysts, both cores busy) 0.1 s cost ~10% of the decisions a second and 0.25 s
#: none (benchmarks/README.md, near_budget.py and service.py nearquota). Counted in the search thread's
#: processor time (``_clock.cpu``), not wall time: on a busy server a quick decision's wall time grows
#: with the load, and children started for it would only add to the load.
WCSP_JOIN_SECONDS = 0.25


def _toulbar2_may_join(search: _Search) -> bool:
    return search.unit is not None and search.n > 0 and search.k > 0 and wcsp.available()


class _Toulbar2:
    """toulbar2 beside one threshold decision's branch and bound (MATH.md 7.6, 7.9), on the same box.

    The question becomes a cost function network over the box's atoms with the charges' loads in
    units (exact integers, the loads being multiples of the unit): "a row of load at least L", L the
    smallest multiple of the unit that does not fit. A row toulbar2 reports is weighed exactly and
    believed only when it does not fit; a complete search that found none proves every row of the box
    fits (integer costs: nothing rounded). Anything else (an error, a stop at the deadline) is no
    answer, and the branch and bound decides alone."""

    def __init__(self, search: _Search, deadline: float | None) -> None:
        self.search = search
        self.deadline = deadline
        self.began = _clock.cpu()
        self.run: wcsp.Run | None = None
        self.kept: list[np.ndarray] = []
        self.tried = False
        self.answered = False
        self.row: tuple[int, ...] | None = None

    def poll(self) -> bool:
        """Whether toulbar2 has answered (the branch and bound then stops); starts it once the branch
        and bound has run :data:`WCSP_JOIN_SECONDS` of processor time. Never blocks."""
        if self.answered:
            return True
        if not self.tried:
            if _clock.cpu() - self.began < WCSP_JOIN_SECONDS:
                return False
            self.tried = True
            self._start()
        if self.run is None:
            return self.answered
        outcome = self.run.poll()
        if outcome is None:
            return False
        self.run = None
        return self._settle(outcome)

    def wait(self) -> bool:
        """After the branch and bound gave up (its node limit or the deadline): wait for toulbar2
        until the deadline (to its end when there is none), started now if it was not yet; whether it
        answered."""
        if not self.tried:
            self.tried = True
            self._start()
        if self.run is None:
            return self.answered
        outcome, self.run = self.run.outcome(), None
        return self._settle(outcome)

    def cancel(self) -> None:
        if self.run is not None:
            self.run.cancel()
            self.run = None

    def _start(self) -> None:
        s = self.search
        unit = s.unit
        assert unit is not None
        units = [e / unit for e in s.exact]
        if any(u.denominator != 1 for u in units):
            return
        # the total in Python integers: a numpy int64 sum wraps past 2^63 (loads 1.0 beside 1e-3 share
        # the unit 2^-62) and would let toulbar2 decide on wrapped costs
        total = sum(u.numerator for u in units)
        if total >= wcsp.MAX_TOTAL:
            return
        ks = np.array([u.numerator for u in units], dtype=np.int64)
        # L: the smallest multiple of the unit that does not fit (fits is monotone), by bisection on
        # the exact rule (at most ~50 tests, whatever the floats say)
        lo, hi = 0, total + 1  # not fits(hi * unit) is taken as given: above every row's load
        while lo < hi:
            mid = (lo + hi) // 2
            if s.fits(mid * unit):
                lo = mid + 1
            else:
                hi = mid
        level = lo
        if level > total:
            self.answered, self.row = True, None  # even every charge together fits
            return
        # an atom whose charges all hold another atom too is never needed: that one's row pays at
        # least as much (toulbar2's variables keep only the undominated atoms)
        self.kept = [_undominated(t) for t in s.atoms.tables]
        tables = [
            branch.AtomTable(np.ascontiguousarray(t[:, keep].T), np.zeros(keep.size, dtype=np.int64))
            for t, keep in zip(s.atoms.tables, self.kept, strict=True)
        ]
        started = wcsp.start(wcsp.build(tables, ks), level, self.deadline, first=True)
        if isinstance(started, wcsp.Run):
            self.run = started

    def _settle(self, outcome: wcsp.WcspOutcome) -> bool:
        s = self.search
        if outcome.cell is None:
            if not outcome.exact:
                return False
            self.answered, self.row = True, None  # a complete search found no row of load >= L
            return True
        # a row of load >= L (found before the search ended, or at its end)
        choice = [int(keep[v]) for keep, v in zip(self.kept, outcome.cell, strict=True)]
        held = np.ones(s.n, dtype=bool)
        for j, v in enumerate(choice):
            held &= s.atoms.tables[j][:, v]
        load = s.exact_load(held)
        if s.fits(load):
            return False  # not a row that fails: no answer (the branch and bound goes on)
        self.answered, self.row = True, s.atoms.row(choice, s.nattrs)
        return True


def _dominated(t: np.ndarray) -> BoolArray:
    """Per column of ``t`` (charges x values, 0/1 floats), whether its charges are all held by another
    column too (of equal columns, all but the first): dropping these keeps a row of the largest load."""
    outside = t.T @ (1.0 - t)  # [a, b]: charges holding a but not b
    sub = outside == 0
    np.fill_diagonal(sub, False)
    ties = sub & sub.T
    return np.asarray((sub & ~ties).any(axis=1) | np.tril(ties, -1).any(axis=1))


def _undominated(table: BoolArray) -> np.ndarray:
    """The atoms (columns of ``table``: charges x atoms, all distinct) whose charges are not all held by
    another atom: for every row through a dropped atom, the row through the atom holding its charges
    pays at least as much, so the largest load (and any row of load >= L) is found among these."""
    return np.flatnonzero(~_dominated(table.astype(np.float64)))


@dataclass(frozen=True)
class Maximum:
    """The heaviest row of a box: ``row`` (None when no charge meets the box), its exact ``load``, and
    ``upper``, an exact bound on every row's load (equal to ``load`` when ``exact``)."""

    row: tuple[int, ...] | None
    load: Fraction
    upper: Fraction
    exact: bool


def maximum(
    pb: Problem,
    *,
    max_nodes: int | None = None,
    deadline: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> Maximum:
    """The maximum load over the rows of ``pb.box`` by the same branch and bound, the threshold being
    the best row found so far (a prune made under a lower threshold stays valid under a higher one, so
    one pass is exact; MATH.md 7.9). Past ``max_nodes`` or the ``deadline``, or once ``stop()`` says True
    (asked before every node: another solver has proved the optimum), the answer is the best row and a
    safe bound (``exact=False``): the largest bound of the boxes still open."""
    best: list[Fraction] = [Fraction(-1)]
    found: list[tuple[int, ...]] = []

    def fits(load: Fraction) -> bool:
        return load <= best[0]

    search = _Search(pb, fits)

    def better(row: tuple[int, ...], load: Fraction) -> bool:
        best[0] = load
        found[:] = [row]
        search.retheta()
        return False

    open_bound = search.run(better, max_nodes, deadline, stop)
    if not found:  # every charge misses the box (all rows 0), or the search stopped at once
        row = search.any_row()
        if open_bound is None:
            return Maximum(row, Fraction(0), Fraction(0), True)
        return Maximum(row, Fraction(0), open_bound, False)
    if open_bound is None:
        return Maximum(found[0], best[0], best[0], True)
    return Maximum(found[0], best[0], max(best[0], open_bound), False)


# a box of the search: charges alive, atoms per attribute, its parent's multipliers
_Node = tuple[BoolArray, list[BoolArray], np.ndarray | None]


class _Search:
    """One branch and bound over the box of a :class:`Problem` (see the module docstring)."""

    def __init__(self, pb: Problem, fits: Callable[[Fraction], bool]) -> None:
        self.fits = fits
        cover, box, offsets = pb.cover, pb.box, pb.offsets
        self.box, self.offsets = box, offsets
        self.nattrs = len(offsets) - 1
        self.stats = pb.stats
        live = pb.loads > 0
        meets = live
        if live.any():
            meets = np.logical_or.reduceat(cover & box, offsets[:-1], axis=1).all(axis=1) & live
        idx = np.flatnonzero(meets)
        self.idx = idx
        self.warm = pb.warm
        self.n = n = int(idx.size)
        raw = pb.loads[idx]
        self.exact = [pb.exact[i] for i in idx.tolist()]
        self.atoms = _Atoms(cover[idx], offsets, box)
        self.unit = pb.unit
        self.hint = None if pb.hint is None or not math.isfinite(pb.hint) else Fraction(pb.hint)
        self.k = k = len(self.atoms.tables)
        # Float work is in units of a power of two at or above the heaviest load (exact unless a quotient
        # is subnormal: such loads are raised to a floor, an upper bound), so no sum overflows or
        # underflows.
        self.finite = finite = bool(np.isfinite(raw).all())
        top = float(raw.max()) if finite and n else 1.0
        shift = math.frexp(top)[1] if top > 0 else 0
        self.shift = shift
        self.scale = Fraction(2) ** shift
        self.w = np.maximum(np.ldexp(raw, -shift), np.where(raw > 0, _FLOOR, 0.0)) if finite else raw
        self.widen_rel = Fraction(1 + 4 * (n + k + 2) * _U)
        self.wf = [t.astype(np.float64) for t in self.atoms.tables]
        self.rel_f = math.nextafter(float(self.widen_rel), math.inf)
        # the unit in scaled units when it is a float exactly (dyadic loads; None: no float rounding)
        self.unit_s: float | None = None
        if self.unit is not None:
            u = self.unit / self.scale
            uf = float(u) if self.finite and Fraction(2) ** -1000 < u < Fraction(2) ** 1000 else 0.0
            if uf > 0 and Fraction(uf) == u:
                self.unit_s = uf
        self.theta = 0.0
        self.retheta()
        self.heaviest: tuple[tuple[int, ...], Fraction] | None = None
        self.root_warm = True  # whether the root takes the kept multipliers' bound (exceeds() may have)

    def retheta(self) -> None:
        """The largest float load (scaled) that fits: branching prefers values whose table exceeds it."""
        total = float(self.w.sum()) if self.finite else 0.0
        hint = None if self.hint is None else float(self.hint / self.scale)
        self.theta = _largest_fitting(lambda t: self.fits(t * self.scale), total, hint)

    def any_row(self) -> tuple[int, ...]:
        return _first_row(self.box, self.offsets)

    def warm_start(self) -> np.ndarray | None:
        """The kept multipliers of this search's charges, scaled (MATH.md 7.9: any non-negative ones are
        valid; those on attributes the box leaves out are dropped). None without kept multipliers or
        with non-finite loads."""
        if self.warm is None or not self.finite or self.k == 0:
            return None
        mu = np.ldexp(self.warm[self.idx][:, self.atoms.attrs].astype(np.float64), -self.shift)
        mu[~(mu > 0) | ~np.isfinite(mu)] = 0.0  # (nan, inf and negatives: none)
        return mu

    def keep(self, mu: np.ndarray) -> None:
        """Keep a root LP's multipliers ``mu`` (scaled) for the next decisions over these charges, on the
        box's attributes only (a charge's others stay as they were: any values are valid, and clearing
        whole rows would cost a wide schema's every attribute per search)."""
        if self.warm is None:
            return
        with np.errstate(over="ignore"):  # past a narrower dtype's range: inf, read back as none
            self.warm[self.idx[:, None], np.asarray(self.atoms.attrs)[None, :]] = np.ldexp(mu, self.shift)

    def exact_load(self, alive: BoolArray) -> Fraction:
        return exact_sum([self.exact[i] for i in np.flatnonzero(alive).tolist()])

    def upper(self, ub: float, extra: float = 0.0) -> Fraction | None:
        """An exact bound from a float bound ``ub`` in scaled units plus an absolute float error
        ``extra`` (rounded down to the unit), or None when it is not finite."""
        if not self.finite or not math.isfinite(ub) or not math.isfinite(extra):
            return None
        bound = (Fraction(ub) * self.widen_rel + Fraction(extra)) * self.scale
        if self.unit is not None:
            bound = (bound // self.unit) * self.unit
        return bound

    def clear(self, ub: float, extra: float = 0.0) -> bool:
        """Whether a float bound ``ub`` (scaled, plus an absolute float error ``extra``) shows that every
        row of its box fits. In floats first: a float above the exact bound (rounded down to the unit)
        that is at most ``theta``, the largest float that fits, fits (``fits`` is monotone); one clearly
        above it is not proved here (the search goes on); only the band between is settled exactly."""
        if not self.finite or not math.isfinite(ub) or not math.isfinite(extra):
            return False
        b = (ub * self.rel_f + extra) * _UP
        if self.unit_s is not None:
            b = math.floor(math.nextafter(b / self.unit_s, math.inf)) * self.unit_s
        if b <= self.theta:
            return True
        if b > self.theta * _BAND + _TINY_BAND:
            return False
        bound = self.upper(ub, extra)
        return bound is not None and self.fits(bound)

    def run(
        self,
        on_row: Callable[[tuple[int, ...], Fraction], bool],
        max_nodes: int | None,
        deadline: float | None,
        stop: Callable[[], bool] | None = None,
    ) -> Fraction | None:
        """Search; ``on_row(row, load)`` is told of each row found that does not fit and says whether to
        stop. None when the search ended (or was stopped); past the node limit or the deadline, or once
        ``stop()`` says True, an exact bound on every row of the boxes left open (``fits`` may have
        changed since they were pushed)."""
        atoms, k, fits, stats = self.atoms, self.k, self.fits, self.stats
        tables, wf, w, nattrs = atoms.tables, self.wf, self.w, self.nattrs
        if self.n == 0:
            if not fits(Fraction(0)):
                on_row(self.any_row(), Fraction(0))
            return None
        if k == 0:  # every charge meeting the box holds all of it: one load
            load = self.exact_load(np.ones(self.n, dtype=bool))
            if not fits(load):
                on_row(atoms.row([], nattrs), load)
            return None
        lp: _LP | None = None
        use_lp = self.finite and _highs_available()
        nodes = 0
        masks0 = [np.ones(t.shape[1], dtype=bool) for t in tables]
        # each node carries its parent's multipliers: their bound is valid in the child too (MATH.md
        # 7.9), and often clears it without an LP solve
        stack: list[_Node] = [(np.ones(self.n, dtype=bool), masks0, self.warm_start())]
        try:
            while stack:
                if (
                    (max_nodes is not None and nodes >= max_nodes)
                    or (deadline is not None and _clock.now() > deadline)
                    or (stop is not None and stop())
                ):
                    return self._open_bound(stack)
                # a child's charges are its parent's that hold its value: exactly those meeting it
                alive, masks, inherited = stack.pop()
                nodes += 1
                if not alive.any():
                    if not fits(Fraction(0)) and on_row(
                        atoms.row([int(np.flatnonzero(m)[0]) for m in masks], nattrs), Fraction(0)
                    ):
                        return None
                    continue
                wa = np.where(alive, w, 0.0)
                if self.clear(float(wa.sum())):
                    continue
                # weights near the float range make inf/nan sums here; clear() refuses a non-finite
                # bound, so they only send the search on to the exact loads
                with np.errstate(invalid="ignore", over="ignore"):
                    counts = [np.where(masks[j], wa @ wf[j], -1.0) for j in range(k)]
                tops = [float(c.max()) for c in counts]
                if self.clear(min(tops)):
                    continue
                # a leaf: every charge alive holds every atom of the box on every attribute
                if all(tables[j][alive][:, masks[j]].all() for j in range(k)):
                    load = self.exact_load(alive)
                    if not fits(load) and on_row(
                        atoms.row([int(np.flatnonzero(m)[0]) for m in masks], nattrs), load
                    ):
                        return None
                    continue
                xs: list[np.ndarray] | None = None
                mu_node = inherited
                if inherited is not None and (nodes > 1 or self.root_warm):
                    bound, err = _lagrangian(inherited, w, alive, wf, masks)
                    if self.clear(bound, err):
                        key = "inherited" if nodes > 1 else "warm"
                        stats[key] = stats.get(key, 0) + 1
                        continue
                if lp is None and use_lp:  # built when first needed: easy boxes never pay for it
                    lp = _LP(tables, w)
                if lp is not None:
                    enough = self._enough()
                    got = lp.solve(alive, masks, deadline, enough)
                    stats["lp"] = stats.get("lp", 0) + 1
                    if got is not None:
                        mu, x = got
                        mu_node = mu
                        if nodes == 1:
                            self.keep(mu)
                        bound, err = _lagrangian(mu, w, alive, wf, masks)
                        if self.clear(bound, err):
                            continue
                        xs = [x[int(lp.off[j]) : int(lp.off[j + 1])] for j in range(k)]
                # the LP's favourite row (or the heaviest values): a row that does not fit, found early
                choice = []
                for j in range(k):
                    pref = counts[j] if xs is None else np.where(masks[j], xs[j] + 1e-9 * counts[j], -1.0)
                    choice.append(int(np.argmax(pref)))
                load = self.exact_load(alive & self._holders(choice))
                if nodes == 1 and self.finite and fits(load):  # (deeper: near a local best already)
                    # from the LP's row, then from the tables' heaviest values (another basin)
                    starts: list[tuple[list[int], Fraction | None]] = [(choice, load)]
                    if xs is not None:
                        starts.append(([int(np.argmax(c)) for c in counts], None))
                    for start, known in starts:
                        row, row_load = self._climb(start, alive, masks, known)
                        if row_load > load:
                            choice, load = row, row_load
                        if not fits(load):
                            break
                # (when the threshold rose instead, this box is searched on under the new one)
                if not fits(load):
                    if on_row(atoms.row(choice, nattrs), load):
                        return None
                elif self.heaviest is None or load > self.heaviest[1]:
                    self.heaviest = (atoms.row(choice, nattrs), load)
                cleared: BoolArray | None = None
                if mu_node is None:
                    pick = self._branching(masks, counts, tops)
                else:
                    pick, cleared = self._branching_lagrangian(mu_node, alive, masks, counts)
                if pick < 0:  # pragma: no cover - every attribute down to one atom is a leaf
                    continue
                c = counts[pick]
                values = np.flatnonzero(masks[pick])
                # a value whose alive charges all hold another value too: every row through it is
                # matched by a row through that one paying at least as much (MATH.md 7.9)
                values = values[~_dominated(wf[pick][alive][:, values])]
                children = [
                    v
                    for v in values.tolist()
                    if not self.clear(float(c[v])) and (cleared is None or not cleared[v])
                ]
                pref = c if xs is None else xs[pick] + 1e-9 * c
                children.sort(key=lambda v: float(pref[v]))  # pushed first = explored last
                col = tables[pick]
                for v in children:
                    child = list(masks)
                    m = np.zeros_like(masks[pick])
                    m[v] = True
                    child[pick] = m
                    stack.append((alive & col[:, v], child, mu_node))
            return None
        finally:
            stats["nodes"] = stats.get("nodes", 0) + nodes

    def _enough(self) -> float | None:
        """The dual bound at which the LP may stop (HiGHS's objective bound; None: none): just below the
        threshold, or, on loads that are multiples of the unit, just below the next multiple above it
        (a bound of 24.9 units proves 24: the float pre-check rounds it down, :meth:`clear`). Only where
        the dual simplex stops changes; the bound is recomputed from its duals either way (MATH.md
        7.9), and a stop the recomputed bound does not confirm only leaves the node to be split."""
        if self.theta <= 0:
            return None
        if self.unit_s is None:
            return self.theta * (1 - 1e-9)
        return (math.floor(self.theta / self.unit_s) + 1) * self.unit_s * (1 - 1e-7)

    def _holders(self, choice: Sequence[int]) -> BoolArray:
        """The charges holding the row ``choice`` (an atom per attribute)."""
        held = np.ones(self.n, dtype=bool)
        for j, v in enumerate(choice):
            held &= self.atoms.tables[j][:, v]
        return held

    def _climb(
        self,
        start: list[int],
        alive: BoolArray,
        masks: list[BoolArray],
        load: Fraction | None = None,
        rounds: int = 4,
    ) -> tuple[list[int], Fraction]:
        """A row of the box at least as heavy as ``start`` (an atom per attribute), by coordinate ascent:
        each attribute in turn moves to its atom of the largest load given the others, for at most
        ``rounds`` rounds or until no move gains; the row and its exact load (``load``, the start's when
        known, is returned as it is when no move gains). Floats only guide the moves (the load is summed
        exactly), and it proves nothing: it finds rows that do not fit (a refusal shown by a row)
        without branching."""
        k, tables, wf = self.k, self.atoms.tables, self.wf
        choice = list(start)
        hits = np.zeros(self.n, dtype=np.int64)  # per charge, the attributes on which it holds the row
        for j in range(k):
            hits += tables[j][:, choice[j]]
        wa = np.where(alive, self.w, 0.0)
        moved = False
        for _ in range(rounds):
            gained = False
            for j in range(k):
                own = tables[j][:, choice[j]]
                gain = np.where(masks[j], np.where(hits - own == k - 1, wa, 0.0) @ wf[j], -1.0)
                v = int(np.argmax(gain))
                if gain[v] > gain[choice[j]] * (1 + 1e-9):
                    hits += tables[j][:, v].astype(np.int64) - own
                    choice[j] = v
                    gained = moved = True
            if not gained:
                break
        if not moved and load is not None:
            return choice, load
        return choice, self.exact_load(alive & (hits == k))

    def _branching_lagrangian(
        self, mu: np.ndarray, alive: BoolArray, masks: list[BoolArray], counts: list[np.ndarray]
    ) -> tuple[int, BoolArray | None]:
        """Fail first by the node's multipliers: the attribute with the fewest values whose child is
        cleared neither by its table nor by these multipliers' bound (then the smallest total excess of
        those bounds over the threshold), and which of its values that bound clears (MATH.md 7.9; on the
        40 hardest float decisions of two streams, 26% fewer LP solves than by the tables alone)."""
        child = _child_bounds(mu, self.w, alive, self.wf, masks)
        theta = self.theta
        best: tuple[int, float] | None = None
        pick = -1
        for j in range(self.k):
            if masks[j].sum() < 2:
                continue
            bounds = child.values[j]
            need = masks[j] & (counts[j] > theta) & (bounds > theta)
            key = (int(need.sum()), float((bounds - theta)[need].sum()))
            if best is None or key < best:
                best, pick = key, j
        if pick < 0:
            return pick, None
        cleared = np.zeros(masks[pick].size, dtype=bool)
        for v in np.flatnonzero(masks[pick]).tolist():
            total = float(child.values[pick][v])
            cleared[v] = self.clear(total, child.error(total))
        return pick, cleared

    def _branching(self, masks: list[BoolArray], counts: list[np.ndarray], tops: list[float]) -> int:
        """Fail first: the attribute with the fewest values whose table may exceed the threshold, then
        the lowest table; -1 when every attribute is down to one atom."""
        best: tuple[int, float] | None = None
        pick = -1
        for j in range(self.k):
            if masks[j].sum() < 2:
                continue
            key = (int((counts[j] > self.theta).sum()), -tops[j])
            if best is None or key < best:
                best, pick = key, j
        return pick

    def _open_bound(self, stack: list[_Node]) -> Fraction:
        """An exact bound on every row of the open boxes: per box the smaller of its tables' bound and
        its parent's Lagrangian bound (MATH.md 7.9), the largest over the boxes (the total load when a
        float bound is not finite)."""
        total = exact_sum(self.exact)
        out = Fraction(0)
        for alive, masks, inherited in stack:
            for j in range(self.k):
                if not masks[j].all():
                    alive = alive & self.atoms.tables[j][:, masks[j]].any(axis=1)
            wa = np.where(alive, self.w, 0.0)
            ub = min(float(np.where(masks[j], wa @ self.wf[j], -1.0).max()) for j in range(self.k))
            bound = self.upper(ub)
            if inherited is not None:
                lag, err = _lagrangian(inherited, self.w, alive, self.wf, masks)
                other = self.upper(lag, err)
                if other is not None and (bound is None or other < bound):
                    bound = other
            out = max(out, total if bound is None else min(bound, total))
        return out


def _lagrangian(
    mu: np.ndarray, w: FloatArray, alive: BoolArray, tables: list[np.ndarray], masks: list[BoolArray]
) -> tuple[float, float]:
    """The Lagrangian bound of a box for multipliers ``mu`` (MATH.md 7.9) in floats, and an absolute
    bound on its round-off (the inputs are exact floats; each term is a sum of non-negative products).
    ``tables`` are the atoms' tables as 0/1 floats (a boolean one would be converted at every call)."""
    m = mu * alive[:, None]
    wa = np.where(alive, w, 0.0)
    s = m.sum(axis=1)
    first = np.maximum(wa - s, 0.0).sum()
    second = 0.0
    # LP duals are sparse: an attribute without multipliers adds 0
    for j in np.flatnonzero(m.any(axis=0)).tolist():
        col = m[:, j] @ tables[j]
        second += float(col[masks[j]].max())
    total = float(first) + second
    k = len(tables)
    n = int(alive.sum())
    # every intermediate is within (n + k + 2) roundings of a non-negative sum of at most these terms
    scale = float(wa.sum()) + float(m.sum()) + total
    err = 4 * (n + k + 4) * _U * scale
    return total, err


@dataclass
class _ChildBounds:
    """Per attribute ``j`` and value ``v`` of a box, the Lagrangian bound (MATH.md 7.9) of the sub-box
    that fixes attribute ``j`` to ``v``, for one set of multipliers, in floats (``values``), with the
    absolute round-off bound ``error(value)``."""

    values: list[np.ndarray]
    scale: float
    terms: int

    def error(self, value: float) -> float:
        return 4 * (self.terms + 4) * _U * (self.scale + value)


def _child_bounds(
    mu: np.ndarray, w: FloatArray, alive: BoolArray, tables: list[np.ndarray], masks: list[BoolArray]
) -> _ChildBounds:
    """:class:`_ChildBounds` of the box (``alive`` charges, ``masks`` per attribute) for ``mu``: the
    multipliers stay valid in a sub-box and over a superset of its charges (MATH.md 7.9), so fixing
    attribute ``j`` to ``v`` only replaces that attribute's largest column by the column of ``v``. Every
    value is a float sum of non-negative floats (never a difference), as in :func:`_lagrangian`."""
    m = mu * alive[:, None]
    wa = np.where(alive, w, 0.0)
    first = float(np.maximum(wa - m.sum(axis=1), 0.0).sum())
    k = len(tables)
    cols = [np.where(masks[j], m[:, j] @ tables[j], 0.0) for j in range(k)]
    tops = [float(c.max()) for c in cols]
    values = []
    for j in range(k):
        rest = first
        for a in range(k):
            if a != j:
                rest += tops[a]
        values.append(np.where(masks[j], rest + cols[j], -1.0))
    return _ChildBounds(values, float(wa.sum()) + float(m.sum()), int(alive.sum()) + k)


def _largest_fitting(fits: Callable[[Fraction], bool], hi: float, hint: float | None = None) -> float:
    """The largest float ``t`` in [0, hi] with ``fits(t)`` (bisection on the floats' order, from a
    bracket found by galloping from ``hint`` when given), or -1.0 when 0 does not fit; branching reads
    it as the threshold, and the float pre-check of a bound trusts it (it fits, exactly)."""
    if not fits(Fraction(0)):
        return -1.0
    if not math.isfinite(hi) or fits(Fraction(hi)):
        return hi
    hi_i = int(np.float64(hi).view(np.int64))
    lo_i = 0
    if hint is not None and 0 < hint < hi:
        h = int(np.float64(hint).view(np.int64))
        step = 1
        if fits(Fraction(_bits(h))):
            lo_i = h
            while lo_i + step < hi_i and fits(Fraction(_bits(lo_i + step))):
                lo_i += step
                step *= 2
            hi_i = min(hi_i, lo_i + step)
        else:
            hi_i = h
            while hi_i - step > 0 and not fits(Fraction(_bits(hi_i - step))):
                hi_i -= step
                step *= 2
            lo_i = max(0, hi_i - step)
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if fits(Fraction(_bits(mid))):
            lo_i = mid
        else:
            hi_i = mid
    return _bits(lo_i)


def _bits(i: int) -> float:
    return float(np.int64(i).view(np.float64))


def _first_row(box: BoolArray, offsets: np.ndarray) -> tuple[int, ...]:
    return tuple(int(np.flatnonzero(box[offsets[p] : offsets[p + 1]])[0]) for p in range(len(offsets) - 1))


__all__ = ["Maximum", "Problem", "common_unit", "exceeds", "maximum", "unit_gcd"]


def coverage_tables(queries: Sequence[PredicateQuery]) -> tuple[list[int], list[int], list[BoolArray]]:
    """The workload's 0/1 coverage tables over the values of the attributes it constrains: the
    attributes' positions, their sizes, and per attribute a (queries x values) table."""
    schema = queries[0].schema
    attrs = sorted({pos for q in queries for pos, _ in q.constraints})
    sizes = [schema.attributes[a].size for a in attrs]
    col = {a: i for i, a in enumerate(attrs)}
    tables = [np.ones((len(queries), n), dtype=bool) for n in sizes]
    for j, q in enumerate(queries):
        for pos, cov in q.constraints:
            tables[col[pos]][j] = cov.mask(sizes[col[pos]])
    return attrs, sizes, tables


def tables_exceed(
    tables: Sequence[BoolArray], loads: Sequence[Fraction], limit: Fraction, deadline: float | None
) -> tuple[int, ...] | None:
    """The threshold decision over the whole domain of coverage ``tables`` (one per attribute, queries x
    values): the value index per table of a row whose exact load is over ``limit``, or None when every
    row is within it (MATH.md 7.9); :class:`SearchGaveUp` past ``deadline``. The loads and the limit
    are divided by one power of two near the largest (exact), and the search's floats are the scaled
    loads rounded UP, so no load underflows to a float below it or overflows (squares of tiny or huge
    GDP mus: MATH.md 7.8)."""
    sizes = [t.shape[1] for t in tables]
    cover = np.concatenate(list(tables), axis=1)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    top = max([*loads, limit, Fraction(0)])
    scale = Fraction(1)
    if top > 0:
        scale = Fraction(2) ** -(top.numerator.bit_length() - top.denominator.bit_length())
    scaled = [x * scale for x in loads]
    level = limit * scale
    floats = np.array([float_up(x) for x in scaled])
    box = np.ones(int(offsets[-1]), dtype=bool)
    pb = Problem(cover, floats, scaled, offsets, box, unit=common_unit(scaled))
    return exceeds(pb, lambda load: load <= level, max_nodes=10**9, deadline=deadline)
