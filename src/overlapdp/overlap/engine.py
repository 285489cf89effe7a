"""``max_overlap``: the maximum (weighted) overlap of a workload, its witness row, chosen algorithm.

MATH.md 1.8 (per-row view) $\\gamma_w(Q)=\\max_{x}\\mathrm{comp}(\\{q: x\\in C_q\\})$, section 7 for the
algorithms. The route is picked from the workload's shape:

1. no query, or no active attribute: trivial;
2. the dense segment grid when it fits in memory (one active attribute: the endpoint sweep);
3. two active attributes with one interval each: sweep plus a lazy max/add segment tree;
4. otherwise atoms (alike segments merged, dominated ones dropped): the dense grid over the atoms if it
   fits; else a few nodes of branch and bound over attributes (:mod:`overlapdp.overlap.branch`, which
   also serves :class:`SetComp`); then the hard cases:

   - value sets: the LP branch and bound (:mod:`overlapdp.overlap.threshold`, MATH.md 7.9) for up to
     ``LPBRANCH_SECONDS``, with toulbar2 alongside it from the start on ``WCSP_BEFORE_LP_QUERIES`` queries
     or more, else from ``WCSP_JOIN_SECONDS`` into it (quick solves never start a child process); a proof
     by toulbar2 stops it;
   - toulbar2 on a cost function network (:mod:`overlapdp.overlap.wcsp`; loads must be integer
     multiples of one unit) in a child process, which proves hard workloads, value sets or boxes on
     many attributes, far sooner than HiGHS;
   - alongside it, in this process: a short try of HiGHS (scipy ``milp``) on value sets, and a
     best-first search over some attributes with a dense grid over the others
     (:mod:`overlapdp.overlap._gridbranch`, the fastest on many boxes over few attributes); the first
     to prove the optimum stops the others. On workloads under ``WCSP_FIRST_QUERIES`` queries HiGHS
     goes first instead (it proves most small ones before a child process has started);
   - HiGHS again for the time left (to the end without an effort limit, so the answer is then exact).

The effort limit (DESIGN.md): ``effort`` seconds fix ONE deadline at the call (wall clock,
:mod:`overlapdp.overlap._clock`), passed down to every stage and solver, never restarted. Each stage
keeps its own cap (the constants below) whether or not there is a limit, and the deadline only cuts it
short, so a workload that finishes within the limit runs exactly the same stages, in the same time, as
without one. Every loop compares the clock with the deadline at each node; HiGHS (whose start-up ignores
its time limit) runs in a thread abandoned at the deadline; toulbar2's child process gets the time left
and is stopped at the deadline. Past it, the bounds not yet taken (the colouring bound,
toulbar2's report) get a grace of ``GRACE_SHARE`` of the effort, themselves stopped when it ends.

Magnitudes (MATH.md 7.8): every route runs on loads normalised by a power of two near the largest
weight (:mod:`overlapdp.overlap.magnitude`), so sums cannot overflow and ``l2`` squares cannot underflow;
a value beyond the largest float raises :class:`~overlapdp.overlap.magnitude.MagnitudeError`.
Float sums may round (non-dyadic weights, or more than 2^53 units): then each route's float error is
bounded and float ties are resolved on integers, or the answer is a safe bound with ``exact=False``
(:mod:`overlapdp.overlap.exactness`): ``exact`` means the value is the smallest float >= the maximum.

Every answer is checked from its witness: the queries covering the witness row are found again from the
raw intervals and their comp is ``lower``, computed exactly from the original weights and rounded up. If the effort limit stops the search, ``value`` is the SAFE
UPPER BOUND (the smallest of the search frontier's bound, the solver's dual bound, a colouring bound and
the comp of all queries) and ``exact`` is False (DESIGN.md: never under-report).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal, get_args

import numpy as np

from overlapdp.exact import float_up, sqrt_up
from overlapdp.overlap import _clock, parts, wcsp
from overlapdp.overlap import boxes as box_route
from overlapdp.overlap._compiled import Compiled, IntArray, QueryIds, check_schema, compile_workload
from overlapdp.overlap._gridbranch import (
    NODE_GRID_LIMIT,
    Split,
    choose_split,
    compress,
    grid_branch,
    kept_tables,
)
from overlapdp.overlap.bounds import colouring_bound
from overlapdp.overlap.branch import (
    AtomTable,
    atom_table,
    atom_tables,
    branch_and_bound,
    constrained_membership,
)
from overlapdp.overlap.cover import Cover, cover_bound
from overlapdp.overlap.exactness import (
    U,
    certify,
    dyadic_exact,
    exact_branch,
    grid_bound,
    grid_error,
    grid_exact,
    load_error,
    sum_error,
)
from overlapdp.overlap.grid import GRID_LIMIT, GridPlan, grid_feasible, grid_maximum
from overlapdp.overlap.magnitude import Loads, MagnitudeError, check_representable, exact_total
from overlapdp.overlap.milp import solve_milp
from overlapdp.overlap.result import (
    Comp,
    CompError,
    FloatArray,
    LazyTuple,
    OverlapResult,
    SetComp,
    check_vectors,
    check_weights,
    combine_components,
    comp_name,
)
from overlapdp.overlap.sweep import sweep_2d
from overlapdp.overlap.threshold import Maximum, Problem, common_unit
from overlapdp.overlap.threshold import maximum as lp_maximum
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.validation import check_seconds

Algorithm = Literal["auto", "grid", "sweep2d", "boxes", "gridbranch", "branch", "lpbranch", "milp", "wcsp"]

# Past the deadline, the bounds still to take (colouring, toulbar2's report) get this share of the effort.
GRACE_SHARE = 0.02
# Value sets: the LP branch and bound (overlap/threshold.py, MATH.md 7.9) gets this long before the
# other solvers take over (a stage cap, the same with or without an effort limit).
LPBRANCH_SECONDS = 5.0
# Largest queries x atoms table it takes (bytes of booleans), and most live queries: its root LP grows
# superlinearly (3 000 mixed Adult queries: 1.6-3.3 s before the first branch), where toulbar2 and the
# grid branch do better.
LPBRANCH_TABLE_LIMIT = 50_000_000
LPBRANCH_MAX_QUERIES = 1_500
# Search nodes before the solver takes over (when the comp is additive and no deadline stops it first).
BRANCH_NODE_LIMIT = 50
MILP_FIRST_SECONDS = 5.0
# Wide sparse workloads: HiGHS's first try is their main search (its LP bound is tight there), so it
# gets this long before toulbar2 takes over; a restart loses its tree (the 10^200-row shape, 500 ranges
# on 3 of 100 attributes: proved by one HiGHS solve in ~20 s, while 5 s of it, toulbar2 and HiGHS again
# left [160, 165] after 30 s).
SPARSE_MILP_SECONDS = 60.0
# ... and under an effort limit it stops this share of the time left before the deadline: HiGHS past
# the deadline is abandoned, its best row and bound lost (seed 3 of that shape: [1, 195] after 30 s).
SPARSE_MILP_MARGIN = 0.1
# When toulbar2 can take the workload, HiGHS's first try is this short (on large workloads, alongside
# toulbar2; on small ones, before it).
MILP_BEFORE_WCSP_SECONDS = 0.2
MILP_SMALL_BEFORE_WCSP_SECONDS = 1.0
# From this many live queries toulbar2 starts before HiGHS's short try (which then runs alongside it);
# below, HiGHS goes first, as it usually proves small workloads before a child process has started.
WCSP_FIRST_QUERIES = 1000
# Value sets: from WCSP_BEFORE_LP_QUERIES live queries toulbar2 starts before the LP branch and bound
# (which runs alongside it); on fewer, it joins once the LP search has run WCSP_JOIN_SECONDS without a
# proof, so a quick solve (an admission's, say) never starts a child process. On 500-1 000 mixed Adult
# queries the LP search proves skewed and Adult-like workloads in 0.05-0.4 s but took 0.7-6.3 s on
# wide and half-domain ones, which toulbar2 proves in 0.1-0.4 s.
WCSP_BEFORE_LP_QUERIES = 500
WCSP_JOIN_SECONDS = 0.25
# toulbar2 on float loads rounded up (a bound, not a proof) gets this long at most.
WCSP_BOUND_SECONDS = 10.0
# HiGHS slices shorter than these find nothing (not even the root LP on 2 000 queries over 14
# attributes): they are skipped.
MILP_MIN_SECONDS = 0.1
MILP_LAST_SECONDS = 0.5
# Without an effort limit, the grid-branch search gets this many seconds before HiGHS takes over.
GRIDBRANCH_SECONDS = 10.0
# On box workloads the grid-branch search goes first, for up to this many seconds without an effort limit.
BOX_GRIDBRANCH_SECONDS = 120.0
# Largest segments x queries boolean table the searches build (bytes), and the largest for which the
# pure branch and bound (float64 copies of the table) is tried.
TABLE_LIMIT = 200_000_000
BRANCH_TABLE_LIMIT = 25_000_000
# A part of a split workload takes its raw segment grid up to this many cells; past it, its atoms.
PART_GRID_CELLS = 1 << 16
# Wide sparse workloads (see _sparse): from this many active attributes, with at most one in this many
# (query, attribute) pairs constrained.
SPARSE_ATTRIBUTES = 32
SPARSE_SHARE = 8
# HiGHS's optimality tolerance as the route's error (MATH.md 7.8): relative and absolute (in
# its units, 1e6 per the largest load), as milp.py widens its dual bound.
_MILP_REL = 1e-6
_MILP_ABS = 2e-6


def max_overlap(
    queries: Sequence[PredicateQuery],
    weights: Any = None,
    comp: Comp = "count",
    *,
    effort: float | None = None,
    schema: Schema | None = None,
    algorithm: Algorithm = "auto",
    cover: Cover | None = None,
) -> OverlapResult:
    """The maximum (weighted) overlap $\\gamma_w$ of ``queries`` (MATH.md 1, 2, 7).

    ``weights`` default to each query's ``.weight`` (ignored for ``count``); for ``comp="vector"`` give
    one weight vector per query (each component is maximised on its own, with its own witness).
    ``effort`` is a wall-clock limit in seconds from this call (None: none); past it the answer is a safe
    upper bound with ``exact=False`` (module docstring: how far past; DESIGN.md). An answer found within
    the limit is the one found without a limit. ``algorithm`` forces a route (for tests and benchmarks); ``"auto"`` picks one.
    ``cover`` (``count``, ``sum``, ``l2``): a :class:`~overlapdp.overlap.cover.Cover` of the loads, e.g. a
    packing plan's (MATH.md 7.11), checked on the workload and weighed before the search; when the
    search is cut, the answer is the smaller of the two bounds (exact when the cover's meets the row).
    """
    name = comp_name(comp)
    queries = list(queries)
    sch = check_schema(queries, schema)
    if effort is not None:
        effort = check_seconds(effort, "effort", error=CompError)
    if algorithm not in get_args(Algorithm):
        raise CompError(f"unknown algorithm {algorithm!r}")
    if cover is not None and name not in ("count", "sum", "l2"):
        raise CompError(f"a cover bounds the count, sum and l2 comps, not {name!r}")
    ids = QueryIds(queries)
    t = len(queries)
    limit = None
    if effort is not None:
        at = _clock.now() + float(effort)
        limit = _Limit(at, at + GRACE_SHARE * float(effort))
    deadline = None if limit is None else limit.deadline
    if name == "vector":
        vectors = check_vectors(weights, t, ids)
        if sch is None:
            return _empty(np.zeros(vectors.shape[1] if vectors.ndim == 2 else 0))
        return _vector(queries, sch, vectors, limit, algorithm)
    if name == "count":
        w = np.ones(t)
        if weights is not None:
            check_weights(weights, t, ids)
    else:
        w = check_weights([q.weight for q in queries] if weights is None else weights, t, ids)
    if sch is None:
        return _empty(0.0)
    c = compile_workload(queries, sch)
    if isinstance(comp, SetComp):
        return _set_comp(queries, c, comp, deadline)
    assert name in ("count", "sum", "l2")
    # Normalised loads (MATH.md 7.8): no route sums past the float range or squares to 0.
    lw = Loads.of(name, w, ids)  # type: ignore[arg-type]
    covered = None
    if cover is not None:
        cover.checked(t)
        # before the search, within the limit: the cut search's answer is then at most this bound
        exact_loads = [
            Fraction(1) if name == "count" else Fraction(x) ** (2 if name == "l2" else 1) for x in w.tolist()
        ]
        covered = cover_bound(c, exact_loads, cover, deadline)
    res = _scalar(queries, c, lw, limit, algorithm)
    if covered is None or res.exact:
        return res
    up = sqrt_up(covered) if name == "l2" else float_up(covered)
    if up >= float(res.value):
        return res
    # the smallest float >= the cover's bound pins the maximum when the witness row reaches it
    return replace(res, value=up, upper=up, exact=up <= float(res.lower), algorithm=f"{res.algorithm}+cover")


@dataclass(frozen=True)
class _Limit:
    """The effort limit of one call: its ``deadline`` and the end of the ``grace`` for the bounds still
    to take past it (both ``_clock.now()`` times)."""

    deadline: float
    grace: float


def _solve_compiled(
    c: Compiled,
    comp: Comp,
    w: FloatArray,
    ids: Sequence[str | None],
    effort: float | None,
    started: float,
    algorithm: Algorithm,
) -> OverlapResult:
    """:func:`max_overlap`'s search on a workload compiled elsewhere (the array input,
    :mod:`overlapdp.overlap.arrays`); the effort limit runs from ``started`` (``_clock.now()`` at
    the caller's entry). The result's ids are the caller's to set (no query objects here)."""
    limit = None
    if effort is not None:
        at = started + float(effort)
        limit = _Limit(at, at + GRACE_SHARE * float(effort))
    if isinstance(comp, SetComp):
        return _set_comp((), c, comp, None if limit is None else limit.deadline)
    name = comp_name(comp)
    assert name in ("count", "sum", "l2")
    return _scalar((), c, Loads.of(name, w, ids), limit, algorithm)  # type: ignore[arg-type]


def _empty(value: float | FloatArray) -> OverlapResult:
    return OverlapResult(value, True, value, value, None, None, (), "empty")


def _ids(queries: Sequence[PredicateQuery], indices: IntArray) -> LazyTuple[str]:
    """The ids of the queries at ``indices``, listed only when read (per-query Python work)."""

    def make() -> tuple[str, ...]:
        return tuple(queries[i].id if queries[i].id is not None else f"#{i}" for i in indices.tolist())

    return LazyTuple(int(indices.shape[0]), make)


def _finish(
    queries: Sequence[PredicateQuery],
    c: Compiled,
    row: tuple[int, ...] | None,
    lw: Loads,
    exact: bool,
    upper_load: float,
    algorithm: str,
    may_prove: bool = False,
) -> OverlapResult:
    """The result from a witness row: covering queries and ``lower`` recomputed from raw intervals.

    ``exact``: the row is PROVEN a maximum in exact arithmetic (``upper_load`` ignored). Otherwise
    ``upper_load`` is a safe bound on the maximum in scaled units, float errors included (MATH.md 7.8);
    with ``may_prove`` the result is exact when that bound pins the value to ``lower``.
    """
    if row is None:
        # The search stopped before any row: any point of the heaviest query is a witness.
        row = c.row(_cell_of_query(c, int(c.live[np.argmax(lw.loads[c.live])])))
    covering = c.covering(row)
    lower = lw.compose(covering)
    upper = lower
    if not exact:
        upper, proven = certify(lw, covering, upper_load, lower)
        exact = proven and may_prove
    return _at_row(queries, c, row, covering, lower, upper, exact, algorithm)


def _at_row(
    queries: Sequence[PredicateQuery],
    c: Compiled,
    row: tuple[int, ...],
    covering: np.ndarray,
    lower: float,
    upper: float,
    exact: bool,
    algorithm: str,
) -> OverlapResult:
    """A scalar result whose witness is ``row``, covered by exactly the queries ``covering``."""
    return OverlapResult(
        value=upper,
        exact=exact,
        upper=upper,
        lower=lower,
        witness=c.schema.row(row),
        witness_row=row,
        queries=_ids(queries, covering),
        algorithm=algorithm,
        query_indices=LazyTuple(int(covering.shape[0]), lambda: tuple(covering.tolist())),
    )


def _cell_of_query(c: Compiled, qi: int) -> tuple[int, ...]:
    cell = []
    for a in c.attributes:
        hit = np.flatnonzero(a.query == qi)
        cell.append(int(a.lo[hit[0]]) if hit.size else 0)
    return tuple(cell)


def _scalar(
    queries: Sequence[PredicateQuery],
    c: Compiled,
    lw: Loads,
    limit: _Limit | None,
    algorithm: str,
    *,
    part: bool = False,
) -> OverlapResult:
    """The scalar routes; ``part``: ``c`` is one part of a split workload (MATH.md 7.10), whose raw
    segment grid is taken only when small (its atoms' grid, in :func:`_search`, is usually far smaller)."""
    deadline = None if limit is None else limit.deadline
    if c.live.size == 0 or not c.attributes:
        return _finish(queries, c, c.row(tuple(0 for _ in c.attributes)), lw, True, 0.0, "trivial")
    d = len(c.attributes)
    name = "sweep" if d == 1 else "grid"
    if algorithm == "grid" and grid_feasible(c):
        return _grid(queries, c, c, lw, name)
    if algorithm == "auto":
        # A small dense grid first; else independent parts (MATH.md 7.10), each a workload of its own,
        # before a large grid (a split is a few passes over the intervals, a grid of millions of cells
        # a cumulative sum per axis); a part's large grid is left to its atoms (in _search).
        if grid_feasible(c, GRID_LIMIT // PART_GRID_CELLS):
            return _grid(queries, c, c, lw, name)
        found = parts.split(c)
        if found is not None:
            return _by_parts(queries, c, found, lw, limit)
        if not part and grid_feasible(c):
            return _grid(queries, c, c, lw, name)
    if algorithm == "sweep2d" or (algorithm == "auto" and d == 2 and c.single_interval):
        if not (d == 2 and c.single_interval):
            raise CompError("sweep2d needs two active attributes and one interval per query")
        # Float sums are exact for dyadic loads; otherwise the sweep runs on exact integers (MATH.md 7.8).
        exact_floats = dyadic_exact(lw, float(lw.loads[c.live].sum()))
        _, cell2 = sweep_2d(c, lw.loads, None if exact_floats else lw.units[0])
        return _finish(queries, c, c.row(cell2), lw, True, 0.0, "sweep2d")
    # -- boxes route: boxes / value sets over few atoms, exact weighted depth (overlapdp.overlap.boxes).
    # Its searches compare integer loads bounding the exact ones from above, scaled once per workload
    # so that the cell search's float sums (intermediates at most 2^g times the total load, g <=
    # GRID_AXES) are exact, and weigh every row above their threshold on the exact integers (MATH.md
    # 7.5, 7.8): `integral`. Only when no such scaling exists is the cell search certified against its
    # error bound.
    total = float(lw.loads[c.live].sum())
    axes = min(len(c.attributes), box_route.GRID_AXES)
    box_bound = math.ldexp(total, axes)
    box_floats_exact = dyadic_exact(lw, box_bound)
    if algorithm == "boxes" or (
        algorithm == "auto"
        and (box_floats_exact or c.live.size <= box_route.CLIQUE_QUERIES)
        and not _sparse(c)
        and box_route.applies(c)
    ):
        if not box_route.applies(c):
            raise CompError("the boxes route needs a one-interval attribute and few value-set atoms")
        out = box_route.max_depth(c, lw.loads, deadline, lw.exact, box_floats_exact)
        row = None if out.cell is None else c.row(out.cell)
        if out.exact and (out.integral or box_floats_exact):
            return _finish(queries, c, row, lw, True, 0.0, "boxes")
        if out.integral:
            # Stopped by the limit; its bound is on the exact integers, rounded up: no float error.
            return _finish(queries, c, row, lw, False, max(out.upper, out.best), "boxes", True)
        ops = c.live.size * (1 << axes) + sum(a.size for a in c.attributes) + 1
        err = 2 * U * ops * box_bound * (1 + 1e-9) + load_error(lw, c.live)
        try:
            res = _finish(queries, c, row, lw, False, max(out.upper, out.best) + err, "boxes", out.exact)
            if res.exact or not out.exact:
                return res
        except MagnitudeError:
            if not out.exact:
                raise
        # Not pinned by the bound (or the bound left the float range): rows within the float error may
        # tie, which the general search resolves exactly (its tie-band search).
        algorithm = "auto"
    # -- end of the boxes route.
    return _search(queries, c, lw, limit, algorithm)


def _by_parts(
    queries: Sequence[PredicateQuery], c: Compiled, found: parts.Parts, lw: Loads, limit: _Limit | None
) -> OverlapResult:
    """The maximum as the sum of the parts' maxima plus the free queries' loads (MATH.md 7.10).

    Each part is a workload of its own (its loads normalised on their own, MATH.md 7.8), under the
    call's one deadline. The witness joins the parts' witnesses and the conflict-free attributes'
    fixed values; its covering queries and ``lower`` are recomputed from the raw intervals as for any
    route. It is exact when every part is; otherwise ``upper`` adds the parts' safe bounds exactly.
    """
    row = [0] * len(c.schema)
    for p, v in zip(found.fixed_positions.tolist(), found.fixed_values.tolist(), strict=True):
        row[p] = v
    exact = True
    uppers: list[float] = []
    used: dict[str, None] = {}
    for part in found.parts:
        w = np.ones(part.queries.shape[0]) if lw.weights is None else lw.weights[part.queries]
        sub = Loads.of(lw.name, w, parts.Picked(lw.ids, part.queries))
        res = _scalar((), part.compiled, sub, limit, "auto", part=True)
        assert res.witness_row is not None
        for p, v in zip(part.positions.tolist(), res.witness_row, strict=True):
            row[p] = v
        exact = exact and res.exact
        uppers.append(float(res.upper))
        used[res.algorithm] = None
    witness = tuple(row)
    covering = c.covering(witness)
    lower = lw.compose(covering)
    upper = lower
    if not exact:
        # The parts' bounds (each at least its part's maximum) and the free queries' exact loads.
        free = lw.weights[found.free].tolist() if lw.weights is not None else [1.0] * found.free.shape[0]
        upper = max(lower, _parts_bound(lw, uppers, free))
    algorithm = f"parts({len(found.parts)}: {'+'.join(used) or 'free'})"
    return _at_row(queries, c, witness, covering, lower, upper, exact, algorithm)


def _parts_bound(lw: Loads, uppers: Sequence[float], free: Sequence[float]) -> float:
    """``comp`` of the parts' bounds and the free weights, exactly, rounded up (MATH.md 7.10): for
    ``count`` and ``sum`` the sum, for ``l2`` the root of the sum of squares."""
    if lw.name == "l2":
        value = sqrt_up(sum((Fraction(u) ** 2 for u in uppers), Fraction(0)) + exact_total("l2", free))
    else:
        value = float_up(sum((Fraction(u) for u in uppers), Fraction(0)) + exact_total("sum", free))
    return check_representable(value, lw._heaviest(None))


def _grid(
    queries: Sequence[PredicateQuery], c: Compiled, grid_of: Compiled, lw: Loads, algorithm: str
) -> OverlapResult:
    """The dense grid of ``grid_of`` (``c`` or its atoms): exact where floats are, else the tie band
    resolved on integers (:func:`~overlapdp.overlap.exactness.grid_exact`)."""
    cell, bound = grid_exact(grid_of, lw)
    return _finish(queries, c, grid_of.row(cell), lw, bound is None, bound or 0.0, algorithm, True)


def _sparse(c: Compiled) -> bool:
    """Whether the workload is wide and sparse: at least ``SPARSE_ATTRIBUTES`` active attributes and
    at most ``1 / SPARSE_SHARE`` of the (query, attribute) pairs constrained."""
    d = len(c.attributes)
    if d < SPARSE_ATTRIBUTES:
        return False
    pairs = sum(int(a.query.shape[0]) for a in c.attributes)
    return pairs * SPARSE_SHARE <= d * int(c.live.shape[0])


def _time_left(deadline: float | None) -> bool:
    return deadline is None or _clock.now() < deadline


def _worth(deadline: float | None, seconds: float) -> bool:
    """Whether at least ``seconds`` are left (always, without a deadline)."""
    return deadline is None or deadline - _clock.now() >= seconds


def _until(deadline: float | None, cap: float) -> float:
    """A stage's own deadline: ``cap`` seconds from now, the same with or without an effort limit,
    cut short by the limit's ``deadline``."""
    end = _clock.now() + cap
    return end if deadline is None else min(end, deadline)


def _search(
    queries: Sequence[PredicateQuery], c: Compiled, lw: Loads, limit: _Limit | None, algorithm: str
) -> OverlapResult:
    """Atoms, then: the atom grid if it fits, else grid-branch / branch and bound, then HiGHS."""
    deadline = None if limit is None else limit.deadline
    grace = None if limit is None else limit.grace
    loads = lw.loads[c.live]
    total = float(loads.sum())
    # Error of any float sum of live loads (MATH.md 7.8): zero when floats are exact.
    exact_sums = dyadic_exact(lw, total)
    err_sum = 0.0 if exact_sums else sum_error(lw, c.live, c.live.size)
    segments = sum(a.size for a in c.attributes)
    if segments * c.live.size > TABLE_LIMIT:
        # Too large even to tabulate atoms: only the trivial safe bound (every query covers the row).
        return _finish(queries, c, None, lw, False, total + err_sum, "trivial-bound")
    tables = []
    # The per-attribute table bound (MATH.md 2.7.1): a row's load is at most the heaviest atom of any one
    # attribute; taken as each attribute's atoms are built, it is the bound returned if the limit runs
    # out before any search (never the count of every query when one attribute is tabulated).
    table_bound = total
    members: list[tuple[IntArray, np.ndarray]] = []
    for a in c.attributes:
        if not _time_left(deadline):
            # The limit ran out while the tables were built: the bounds so far, at once (queries that
            # constrain only attributes not yet tabulated count in full there: still a bound).
            bound = min(table_bound, _assignment_bound(members, loads))
            return _finish(queries, c, None, lw, False, bound + err_sum, "table-bound")
        cols, sub = constrained_membership(c, a)
        members.append((cols, sub))
        if sub.size:
            # every query not constraining the attribute covers each of its segments
            free = total - float(loads[cols].sum())
            table_bound = min(table_bound, free + float((sub.astype(np.float64) @ loads[cols]).max()))
    table_bound = min(table_bound, _assignment_bound(members, loads))
    for a, m in zip(c.attributes, members, strict=True):
        if not _time_left(deadline):
            return _finish(queries, c, None, lw, False, table_bound + err_sum, "table-bound")
        tables.append(atom_table(c, a, membership=m))
    c2 = compress(c, tables)
    t2 = kept_tables(tables)
    if algorithm in ("auto", "grid") and grid_feasible(c2):
        return _grid(queries, c, c2, lw, "grid (atoms)")
    if algorithm == "grid":
        raise CompError("the dense grid does not fit the memory limit for this workload")
    safe = [table_bound]
    row: tuple[int, ...] | None = None
    best = -1.0
    used: list[str] = []

    def offer(cell: tuple[int, ...] | None, value: float) -> None:
        nonlocal row, best
        if cell is not None and value > best:
            row, best = c2.row(cell), value

    # Extra error of the grid-branch bounds, once its plan is known (MATH.md 7.8).
    grid_err = 0.0
    # The searches prune without slack: a pruned row's exact value is at most the incumbent plus the
    # float error of the sums (err_sum, grid_err), which the proofs below add.
    rel = 0.0

    def proved(err: float) -> OverlapResult:
        """The optimum proved in floats by a route whose float optimum is within ``err`` of the true
        one: exact when the bound pins the witness's exact value (certify), else when the exact search
        over the tie band settles it (small workloads, within its node limit and the effort limit)."""
        try:
            res: OverlapResult | None = _finish(
                queries, c, row, lw, False, max(best, 0.0) + err, "+".join(used), True
            )
        except MagnitudeError:
            # The bound left the float range although the maximum may not have: the exact search
            # settles it on integers (or the refusal stands).
            if not small or row is None:
                raise
            res = None
        if res is not None and (res.exact or not small):
            return res
        nums, k = lw.units
        live_nums = [nums[i] for i in c.live.tolist()]
        assert row is not None
        witness = sum(nums[i] for i in c.covering(row).tolist())
        found = exact_branch(t2, loads, live_nums, k, err_sum, witness, deadline=deadline)
        if found is None:
            if res is None:
                raise MagnitudeError(
                    f"{lw._heaviest(None)}: the bound on the maximum overlap exceeds the largest float"
                )
            return res
        cell, _ = found
        better = row if cell is None else c2.row(cell)
        return _finish(queries, c, better, lw, True, 0.0, "+".join(used))

    def milp_err() -> float:
        top = float(loads.max()) if loads.size else 0.0
        return _MILP_REL * max(best, 0.0) + _MILP_ABS * top / 1e6 + err_sum + 2 * U * max(best, 0.0)

    def run_milp(until: float | None) -> bool:
        used.append("milp")
        left = None if until is None else max(until - _clock.now(), 0.0)
        # Under a limit HiGHS (whose start-up ignores its time limit) is abandoned at the deadline.
        m = solve_milp(t2, loads, left, give_up=deadline)
        offer(m.cell, m.best)
        if not m.exact:
            safe.append(m.upper)
        return m.exact

    small = sum(t.size for t in t2) * c.live.size <= BRANCH_TABLE_LIMIT
    # Wide and sparse (thousands of attributes, a few per query): the branch and bound's nodes and the
    # boxes' grids cost O(attributes x queries) each and rarely prune; HiGHS and toulbar2 prove them.
    sparse = _sparse(c)
    if algorithm == "branch" or (algorithm == "auto" and small and not sparse):
        # Cheap first try: easy instances (a clear winner, few queries) end within a few nodes.
        used.append("branch")
        node_limit = None if algorithm == "branch" else BRANCH_NODE_LIMIT
        out = branch_and_bound(
            c2,
            t2,
            loads,
            deadline=deadline,
            node_limit=node_limit,
            rel=rel,
        )
        offer(out.cell, out.best)
        if out.exact:
            return proved(err_sum)
        safe.append(out.upper)
    # Whether toulbar2 applies; its network is built only when it is started (after HiGHS's try on
    # small workloads, which usually proves them first: admissions run this path for every query).
    integral = None
    if algorithm in ("auto", "wcsp"):
        integral = _wcsp_loads(loads)
        if algorithm == "wcsp" and integral is None:
            if not wcsp.available():
                raise CompError(
                    "the toulbar2 route needs the 'solvers' extra: pip install 'overlapdp[solvers]'"
                )
            raise CompError("the toulbar2 route needs loads that are integer multiples of one unit")
    # toulbar2 in its own process (another core): the stages below run alongside it, and the first to
    # prove the optimum ends the others.
    run: wcsp.Run | None = None
    run_until: float | None = None
    unit = 1.0
    wcsp_tried = False

    def start_wcsp() -> None:
        nonlocal run, run_until, unit, wcsp_tried
        wcsp_tried = True
        # (wcsp.start refuses with less time left than a child needs to start: the network is not built.)
        if not _worth(deadline, wcsp.STARTUP_SECONDS):
            return
        chosen = integral
        if chosen is None and algorithm == "auto" and wcsp.available():
            # Other float loads: toulbar2 on the loads rounded UP to a fine unit, for a safe upper
            # bound within a unit per covering query, and rows (MATH.md 7.6); never a proof, so the
            # stages beside it are not stopped by it, and its run has a cap of its own.
            chosen = wcsp.ceiling_loads(loads)
        if chosen is None:
            return
        used.append("wcsp" if integral is not None else "wcsp-bound")
        weights, unit = chosen
        pb = wcsp.build(t2, weights)
        # Only rows are trusted, not reported objectives: the incumbent is recounted from its row.
        # (Rounded-up loads: floored, a lower bound on the row's rounded load whatever the float sum.)
        held = 0.0 if row is None else float(lw.loads[c.covering(row)].sum()) / unit
        incumbent = round(held) if integral is not None else max(0, math.floor(held) - 1)
        # Until the deadline (or to the end): the same search with or without a limit; a bound's run
        # has a cap of its own.
        run_until = deadline if integral is not None else _until(deadline, WCSP_BOUND_SECONDS)
        started = wcsp.start(pb, incumbent, run_until)
        if isinstance(started, wcsp.Run):
            run = started

    def settled() -> bool:
        """Whether toulbar2 has proved the optimum (the stages alongside it then stop)."""
        return run is not None and integral is not None and run.proved()

    try:
        # toulbar2 runs alongside the LP branch and bound: from the start on large workloads, else once
        # the LP search has taken WCSP_JOIN_SECONDS (before, it started only after the LP's 5 s stage).
        alongside = algorithm == "auto" and integral is not None and not sparse
        if alongside and c.live.size >= WCSP_BEFORE_LP_QUERIES:
            start_wcsp()
        lp_began = _clock.now()

        def lp_stop() -> bool:
            if alongside and not wcsp_tried and _clock.now() - lp_began >= WCSP_JOIN_SECONDS:
                start_wcsp()
            return settled()

        if algorithm == "lpbranch" or (
            algorithm == "auto"
            and not c.single_interval
            and sum(t.size for t in t2) * c.live.size <= LPBRANCH_TABLE_LIMIT
            and c.live.size <= LPBRANCH_MAX_QUERIES
            and _time_left(deadline)
            and not settled()
        ):
            # Value sets: the LP branch and bound, exact on the normalised loads (MATH.md 7.9); its best
            # row is certified from the original weights by proved().
            used.append("lpbranch")
            until = deadline if algorithm == "lpbranch" else _until(deadline, LPBRANCH_SECONDS)
            lpb = _lp_maximum(t2, loads, until, lp_stop)
            if lpb.row is not None:
                offer(lpb.row, float_up(lpb.load))
            if lpb.exact and row is not None:
                return proved(0.0)
            safe.append(float_up(lpb.upper))
            if algorithm == "lpbranch":
                bound = min(safe) + err_sum
                return _finish(queries, c, row, lw, False, bound, "+".join(used))
        split = None
        if algorithm in ("auto", "gridbranch") and _time_left(deadline) and not settled():
            # The per-node grid scales with the workload, so small workloads do not pay for a huge grid.
            cells = NODE_GRID_LIMIT if algorithm == "gridbranch" else min(NODE_GRID_LIMIT, 512 * c.live.size)
            split = choose_split(c2, loads, cells)
        if split is not None and not split.rest:
            # Only when forced (tests): the whole grid fits, so branch on one attribute anyway.
            if len(split.grid) < 2:
                return _grid(queries, c, c2, lw, "grid (atoms)")
            split = Split(split.grid[:-1], [split.grid[-1]])
        # Boxes (one interval per attribute) suit the grid-branch search and not HiGHS, whose LP
        # relaxation is weak on them.
        boxes = c.single_interval and not sparse

        def quick_milp() -> bool:
            """HiGHS's try: it solves small and medium value-set workloads in milliseconds."""
            if settled() or not (
                algorithm == "milp"
                or (algorithm == "auto" and not boxes and _worth(deadline, MILP_MIN_SECONDS))
            ):
                return False
            if algorithm == "milp":
                until = deadline
            elif sparse:
                until = _until(deadline, SPARSE_MILP_SECONDS)
                if deadline is not None:
                    until = min(until, deadline - SPARSE_MILP_MARGIN * (deadline - _clock.now()))
            elif integral is not None and c.live.size >= WCSP_FIRST_QUERIES:
                until = _until(deadline, MILP_BEFORE_WCSP_SECONDS)  # short: toulbar2 runs alongside
            elif integral is not None:
                until = _until(deadline, MILP_SMALL_BEFORE_WCSP_SECONDS)
            else:
                until = _until(deadline, MILP_FIRST_SECONDS)
            return (until is None or until - _clock.now() >= MILP_MIN_SECONDS) and run_milp(until)

        # Small workloads (an admission's restricted solve, say) go to HiGHS first: it usually proves
        # them before a child process would have started. Large ones start toulbar2 first, unless wide
        # and sparse (HiGHS proved the 3 327 queries over 1 744 attributes of a 10 000-attribute
        # workload in 1.4 s, toulbar2 in 3 s).
        if (c.live.size < WCSP_FIRST_QUERIES or sparse) and quick_milp():
            return proved(milp_err())
        if not wcsp_tried:
            start_wcsp()
        if c.live.size >= WCSP_FIRST_QUERIES and not sparse and quick_milp():
            return proved(milp_err())
        searchable = (
            split is not None and bool(split.rest) and (len(split.grid) > 1 or algorithm == "gridbranch")
        )
        if searchable and _time_left(deadline) and not settled():
            assert split is not None
            used.append("gridbranch")
            if run is not None and integral is not None:
                until = run_until  # alongside toulbar2, stopped when it proves the optimum
            elif algorithm != "auto":
                until = deadline
            elif boxes:
                until = _until(deadline, BOX_GRIDBRANCH_SECONDS)
            else:
                until = _until(deadline, GRIDBRANCH_SECONDS)
            plan = GridPlan(c2, split.grid)
            g_bound = grid_bound(plan, lw.loads)
            g_exact = exact_sums and dyadic_exact(lw, g_bound)
            grid_err = 0.0 if g_exact else grid_error(plan, g_bound)
            gb = grid_branch(
                c2,
                t2,
                loads,
                split,
                deadline=until,
                stop=None if run is None or integral is None else run.proved,
                rel=0.0,
                plan=plan,
            )
            offer(gb.cell, gb.best)
            if gb.exact:
                return proved(err_sum + grid_err)
            safe.append(gb.upper)
        if run is not None and integral is None:
            # rounded-up loads: the row is weighed on the real loads, the optimum is only a bound
            ws = run.outcome(grace)
            if ws.cell is not None:
                offer(ws.cell, float(lw.loads[c.covering(c2.row(ws.cell))].sum()))
            top = ws.best if ws.exact else ws.upper
            if top is not None:
                safe.append(top * unit)
        elif run is not None:
            ws = run.outcome(grace)
            offer(ws.cell, ws.best * unit)
            if ws.exact:
                # toulbar2 is exact on the integer multiples; the product by the unit rounds once
                # unless float sums of the loads are exact (then so is that product).
                return proved(0.0 if exact_sums else 2 * U * max(best, 0.0) + load_error(lw, c.live))
            if ws.upper is not None:
                safe.append(ws.upper * unit)
    finally:
        if run is not None:
            run.cancel()  # a no-op once its outcome is read; otherwise no orphan solver is left running
    if algorithm == "auto" and _worth(deadline, MILP_LAST_SECONDS) and run_milp(deadline):
        # HiGHS again for the time left (to the end when there is no effort limit: then exact).
        return proved(milp_err())
    # Not proved (the limit ran out): the colouring bound, within the grace past the deadline.
    col = colouring_bound(t2, loads, grace)
    if col is not None:
        safe.append(col)
    # Every safe bound is a float sum of live loads (the grid-branch frontier: a grid's maximum).
    bound = min(safe) + err_sum + grid_err
    return _finish(queries, c, row, lw, False, bound, "+".join(used) or "bound")


def _assignment_bound(members: Sequence[tuple[IntArray, np.ndarray]], loads: FloatArray) -> float:
    """The assignment bound of MATH.md 2.7.1 on per-attribute memberships (the positions of the live
    queries constraining the attribute, and segments x those queries): each query counts on ONE
    attribute it constrains (the one whose segments it holds the smallest share of), so a row's load
    is at most the loads of the queries constraining nothing plus, per attribute, the heaviest segment
    of the queries assigned to it. A float sum of live loads (its error is the caller's ``err_sum``)."""
    n = loads.shape[0]
    best = np.ones(n)  # share of the segments held on the attribute chosen so far (1: everything)
    pick = np.full(n, -1)
    for a, (cols, sub) in enumerate(members):
        if cols.size == 0 or sub.shape[0] == 0:
            continue
        share = sub.mean(axis=0)
        better = share < best[cols]
        best[cols[better]] = share[better]
        pick[cols[better]] = a
    bound = float(loads[pick < 0].sum())
    for a, (cols, sub) in enumerate(members):
        mine = pick[cols] == a
        if mine.any():
            bound += float((sub[:, mine].astype(np.float64) @ loads[cols[mine]]).max())
    return bound


def _lp_maximum(
    tables: Sequence[AtomTable],
    loads: FloatArray,
    until: float | None,
    stop: Callable[[], bool] | None = None,
) -> Maximum:
    """The heaviest cell of the atom ``tables`` (live queries' ``loads``, normalised) by the LP branch
    and bound of :mod:`overlapdp.overlap.threshold`: exact on these loads, or a safe bound at ``until``
    (or once ``stop()`` says True)."""
    cover = np.concatenate([t.member.T for t in tables], axis=1)
    offsets = np.concatenate([[0], np.cumsum([t.size for t in tables])]).astype(np.int64)
    exact = [Fraction(x) for x in loads.tolist()]
    pb = Problem(cover, loads, exact, offsets, np.ones(int(offsets[-1]), dtype=bool), unit=common_unit(exact))
    return lp_maximum(pb, deadline=until, stop=stop)


def _wcsp_loads(loads: FloatArray) -> tuple[IntArray, float] | None:
    """The loads as integer multiples of one unit for toulbar2, or None when that route does not apply."""
    return wcsp.integral_loads(loads) if wcsp.available() else None


def _set_comp(
    queries: Sequence[PredicateQuery], c: Compiled, comp: SetComp, deadline: float | None
) -> OverlapResult:
    """A user-supplied monotone set function: branch and bound with ``comp.upper`` as the bound."""
    live = c.live

    def value(idx: IntArray) -> float:
        return float(comp.value(live[idx].tolist()))

    def upper(idx: IntArray) -> float:
        return float(comp.upper(live[idx].tolist()))

    if live.size == 0 or not c.attributes:
        row = c.row(tuple(0 for _ in c.attributes))
        exact, bound = True, 0.0
        algorithm = "trivial"
    else:
        # Conflict-free attributes fixed first (MATH.md 7.10 (i), valid for any monotone comp): on a
        # wide schema the search then runs over the few attributes where queries conflict.
        reduced = parts.drop_conflict_free(c)
        c1, fixed = (c, {}) if reduced is None else reduced
        if c1.attributes:
            tables = atom_tables(c1)
            c2 = compress(c1, tables)
            out = branch_and_bound(
                c2, kept_tables(tables), None, set_value=value, set_upper=upper, deadline=deadline
            )
            exact, bound = out.exact, out.upper
            row = c2.row(out.cell) if out.cell is not None else c.row(_cell_of_query(c, int(live[0])))
        else:  # every attribute conflict-free: the fixed row is covered by every live query
            exact, bound = True, 0.0
            row = c.row(tuple(0 for _ in c.attributes))
        if fixed:
            point = list(row)
            for p, v in fixed.items():
                point[p] = v
            row = tuple(point)
        algorithm = "branch"
    covering = c.covering(row)
    lower = float(comp.value(covering.tolist()))
    upper_v = lower if exact else max(lower, min(bound, float(comp.upper(live.tolist()))))
    return _at_row(queries, c, row, covering, lower, upper_v, exact, algorithm)


def _vector(
    queries: Sequence[PredicateQuery],
    schema: Schema,
    vectors: FloatArray,
    limit: _Limit | None,
    algorithm: str,
) -> OverlapResult:
    """One ``sum`` maximum per component (RDP orders, MATH.md 2.4), each with its own witness."""
    c = compile_workload(queries, schema)
    k = vectors.shape[1]
    ids = [q.id for q in queries]
    # Each component normalised on its own (MATH.md 7.8): RDP orders span many magnitudes.
    lws = [Loads.of("sum", np.ascontiguousarray(vectors[:, j]), ids) for j in range(k)]
    scaled = np.stack([lw.loads for lw in lws], axis=1) if k else vectors
    parts: list[OverlapResult] = []
    if algorithm in ("auto", "grid") and c.live.size and c.attributes and grid_feasible(c, 1):
        # As many components per dense grid as fit the memory limit (RDP has dozens of orders).
        chunk = max(1, min(k, next(n for n in range(k, 0, -1) if n == 1 or grid_feasible(c, n))))
        name = "sweep" if len(c.attributes) == 1 else "grid"
        plan = GridPlan(c)
        for start in range(0, k, chunk):
            block = scaled[:, start : start + chunk]
            for j, (_, cell) in enumerate(grid_maximum(c, block), start=start):
                if dyadic_exact(lws[j], grid_bound(plan, lws[j].loads)):
                    parts.append(_finish(queries, c, c.row(cell), lws[j], True, 0.0, name))
                else:  # float ties possible: this component's band resolved exactly (MATH.md 7.8)
                    parts.append(_grid(queries, c, c, lws[j], name))
    else:
        for j in range(k):
            parts.append(_scalar(queries, c, lws[j], limit, algorithm))
    return combine_components(parts)


def composed(values: Sequence[float], comp: str) -> float:
    """``comp`` of explicit weights (for references and tests): count, sum or l2."""
    if comp == "count":
        return float(len(values))
    if comp == "l2":
        return math.sqrt(math.fsum(v * v for v in values))
    return math.fsum(values)
