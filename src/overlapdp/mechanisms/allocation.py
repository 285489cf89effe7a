"""Overlap-aware budget allocation: each query's share chosen so that every row affords its charges
(MATH.md 2.10).

Even shares give every query ``B / gamma``; but a row pays only for the queries covering it, so queries
that share their rows with few others can take more. The optimal split minimises the weighted error

    minimise  sum_q w_q Var_q(e_q)   subject to   sum_{q covers x} cost(e_q) <= B   for every row x,

a convex problem (Var is ``c / e^2`` for Laplace noise at epsilon ``e``, ``c / rho`` for Gaussian noise
at zCDP ``rho``, ``c / mu^2`` at GDP ``mu``; the per-row costs add: epsilon, rho, mu^2), whose
constraints are the domain's rows: far too many to write down. It is solved by constraint generation:

- the restricted problem on the rows found so far is solved through its dual, smooth and concave in the
  rows' multipliers ``lambda >= 0``, by SciPy's L-BFGS-B (no extra dependency; each restricted problem
  has at most a few thousand constraints; a few hundred steps a round, warm from the last round: the
  dual's value at ANY multipliers is a proven LOWER bound of the optimum, reported beside the plan);
- rows over the budget at the current shares are looked for first by a cheap climb (coordinate ascent
  from many rows at once; every row it finds over the budget is added), then by the exact threshold
  decision of :mod:`overlapdp.overlap.threshold` (MATH.md 7.9) on the workload's coverage tables, the
  engine's separation oracle;
- a plan is certified in one of three ways, and the certified plan of least objective is returned
  (even shares among them, so never worse than even): a *packing plan*
  (:mod:`overlapdp.mechanisms._packings`, MATH.md 2.10.1), within budget by construction and built
  first, without any row search; the rows' plan scaled by ``1 / (1 + m)`` once the decision proves
  that no row exceeds ``B (1 + m)`` (margins from the largest worth proving down to ``tol``: loads are
  linear in the shares, so every row is then within ``B``); or, when nothing could be proven, the
  rows' plan scaled by the engine's certified upper bound of the worst row
  (:func:`~overlapdp.overlap.max_overlap`, a safe bound);
- the constraint generation stops when the decision proves ``tol``, when the best certified plan is
  within ``tol`` of the dual's lower bound (the stopping rule of MATH.md 2.10), or at its share of the
  effort.

``objective="relative"`` minimises the LARGEST weighted variance instead, in closed form (one overlap
search; where it is cut, its bound tightened by the threshold decision). The shares are per-query budgets in the definition's unit (epsilon, rho, mu); the line weights
are importance weights (for ``"relative"``, ``w_q = 1 / n_q^2`` with an expected count ``n_q`` makes it
the largest relative variance).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal

import numpy as np

from overlapdp.errors import AnswerError, SearchGaveUp
from overlapdp.exact import float_down, float_up, sqrt_down
from overlapdp.mechanisms._packings import PACKING_MAX, overlap_graph, packing_plan
from overlapdp.overlap.bounds import greedy_colouring
from overlapdp.overlap.cover import Cover
from overlapdp.privacy.definitions import check_neighbouring
from overlapdp.query import PredicateQuery
from overlapdp.validation import check_positive

Objective = Literal["variance", "relative"]
#: Rounds of constraint generation at most (the plan is then scaled to the certified bound).
MAX_ROUNDS = 200
#: Largest (queries x values of the constrained attributes) coverage table built for the climb and
#: the threshold decision; wider workloads use :func:`~overlapdp.overlap.max_overlap` alone.
MAX_CELLS = 50_000_000
#: The margins over the limit a certification tries to prove, largest first (Planner.prove): a wider
#: margin is easier to prove and costs (1 + margin)^p in the objective.
_MARGINS = (1e-3, 1e-2, 5e-2, 0.1, 0.2)
#: The share of a certification's time its first (largest, most likely) margin gets.
_FIRST = 0.75
#: Beyond the ladder, a margin this fraction of the largest one worth proving (Planner.worth).
_COARSE = 0.6
#: The share of the effort the packing plan's column generation may use (MATH.md 2.10.1), and the one
#: the constraint generation may use before the plan is certified (both counted from the start).
_PACKING = 0.3
_LOOP = 0.6
#: Rows a climb finds at even shares within this fraction of the heaviest are held from the start.
_HEAVY = 0.8
#: Iterations of L-BFGS-B per restricted problem: each round's solve is warm from the last, and any
#: multipliers give a lower bound, so a round need not solve its problem to the end.
_SOLVE_ITERATIONS = 300
#: objective="relative": the share of the effort its weighted search may use before the threshold
#: decision tightens a cut search's bound, the decision's margins over the heaviest row seen (widest
#: first), and how many decisions at most.
_RELATIVE_SEARCH = 0.6
_RELATIVE_MARGINS = (0.05, 0.01, 1e-3)
_RELATIVE_TRIES = 8
#: A scaled share's float rounding is below 2^-53 relative: a factor this far below 1 absorbs it.
_SHRINK = 1.0 - 2.0**-50


@dataclass(frozen=True)
class Allocation:
    """A plan's per-query ``shares`` (epsilon, rho or mu) and its ``objective`` (the weighted sum of
    variances, or the largest weighted variance, for unit sensitivity and unit noise constants, in the
    caller's weights); ``lower``, a proven lower bound of the best objective any plan can reach (the
    dual's value: ``objective / lower - 1`` is the largest possible loss to the true optimum); that of
    even shares ``B / gamma`` at the same guarantee (``even_objective``); the certified bound of the
    worst row's cost ``worst_row`` (<= the budget, in the additive unit: epsilon, rho, mu^2) and whether
    it is that row's exact cost; how many rows and rounds the constraint generation used, and
    ``method``."""

    shares: tuple[float, ...]
    objective: float
    lower: float
    even_objective: float
    worst_row: float
    exact: bool
    rows: int
    rounds: int
    #: how the plan was certified: "optimal" (every row proven within budget at the optimum found,
    #: shares scaled by the proven margin), "scaled to the certified bound", or even shares
    method: str = "optimal"
    #: the plan's certificate when it has one (packing plans and even shares, in the additive unit):
    #: sets of queries and amounts covering every query's cost, which an odometer checks and weighs
    #: (``Odometer.report(..., cover=...)``, MATH.md 7.11) where its search alone is cut
    cover: Cover | None = field(default=None, compare=False, repr=False)

    @property
    def gain(self) -> float:
        """How many times lower the objective is than with even shares."""
        return self.even_objective / self.objective if self.objective > 0 else math.inf

    @property
    def gap(self) -> float:
        """The relative distance to the optimum at most (0 when proven optimal)."""
        return max(0.0, self.objective / self.lower - 1.0) if self.lower > 0 else math.inf


def allocate(
    queries: Sequence[PredicateQuery],
    budget: float,
    definition: str,
    *,
    weights: Sequence[float] | None = None,
    objective: Objective = "variance",
    neighbouring: str = "add_remove",
    effort: float | None = 10.0,
    tol: float = 1e-4,
) -> Allocation:
    """The optimal per-query shares of ``budget`` (module docstring; MATH.md 2.10): within budget on
    every row (proven), no worse than even shares. ``weights`` default to each query's ``.weight``;
    replace-one neighbours halve the budget (a pair of rows pays at most both rows' charges: the
    doubling bound of MATH.md 2.9). ``effort``: seconds for the whole plan (about: 10% finds gamma, the
    packing plan until 30%, constraint generation until 60%, its certification until 85%, the engine's
    bound until 95%; each phase may end early, and a search out of time answers with its safe bound, so
    the plan is within budget either way); None: no limit.

    The problem is homogeneous in the budget, so it is solved at budget 1 and the plan scaled (shares
    rounded down, exactly): the same plan at every magnitude, none of the solver's powers of tiny or
    huge shares overflowing."""
    import scipy.optimize  # noqa: F401 - loaded before the limit: threadpoolctl limits loaded libraries
    from threadpoolctl import threadpool_limits

    b = check_positive(budget, "budget", error=AnswerError)
    # one BLAS thread: the restricted problems are small, and OpenBLAS's threads on small matrices cost
    # more than they give (150x slower L-BFGS-B on a loaded 2-core machine)
    with threadpool_limits(1, user_api="blas"):
        planner = _Planner(queries, 1.0, definition, weights, objective, neighbouring, effort, tol)
        unit = planner.plan()
    return unit if b == 1.0 else _scaled(unit, b, planner)


def _scaled(unit: Allocation, budget: float, planner: _Planner) -> Allocation:
    """The plan at budget 1 as the plan at ``budget``: shares times the budget, rounded down (every
    row's cost scales by ``budget^k``, k = 2 for GDP's mu, so it stays within the budget, exactly); the
    certified worst row and the certificate's amounts rounded up; the objectives scale by
    ``budget^(-k p)``."""
    k = 2 if planner.squared else 1
    b = Fraction(budget)
    additive = b**k / (2 if planner.limit < 1 else 1)
    if not sys.float_info.min <= float_up(additive) < math.inf:
        raise AnswerError(
            f"budget {budget!r} is beyond the range this planner computes in: each row's additive "
            f"budget ({'mu^2' if planner.squared else 'the budget'}"
            f"{', halved for replace-one neighbours' if planner.limit < 1 else ''}) leaves the float range"
        )
    shares = tuple(float_down(Fraction(x) * b) for x in unit.shares)
    if not all(x > 0 for x in shares):
        raise AnswerError(
            "a share underflows to 0 in floating point at this budget: scale the budget up, or the "
            "weights closer together"
        )

    def objective(x: float) -> float:
        if not math.isfinite(x):
            return x
        try:
            return float(Fraction(x) * b ** (-k * planner.p))
        except OverflowError:
            return math.inf

    cover = unit.cover
    if cover is not None:
        cover = Cover(cover.sets, tuple(float_up(Fraction(a) * b**k) for a in cover.amounts))
    return replace(
        unit,
        shares=shares,
        objective=objective(unit.objective),
        lower=objective(unit.lower),
        even_objective=objective(unit.even_objective),
        worst_row=float_up(Fraction(unit.worst_row) * b**k),
        cover=cover,
    )


class _Planner:
    def __init__(
        self,
        queries: Sequence[PredicateQuery],
        budget: float,
        definition: str,
        weights: Sequence[float] | None,
        objective: Objective,
        neighbouring: str,
        effort: float | None,
        tol: float,
    ) -> None:
        from overlapdp.privacy.measures import count_measure

        # the definitions a count's noise is calibrated to; Var ~ 1 / s^p with s the additive cost
        # (epsilon; rho; mu^2, the share being its square root when the measure composes in l2)
        measure = count_measure(definition, AnswerError)
        if objective not in ("variance", "relative"):
            raise AnswerError(f"objective must be 'variance' or 'relative', got {objective!r}")
        check_neighbouring(neighbouring, AnswerError)
        b = check_positive(budget, "budget", error=AnswerError)
        self.qs = list(queries)
        if not self.qs:
            raise AnswerError("the workload has no queries")
        w = np.array([q.weight for q in self.qs] if weights is None else list(weights), dtype=float)
        if w.shape != (len(self.qs),) or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise AnswerError("weights must be one positive finite number per query")
        self.p, self.squared = measure.noise_power, measure.comp == "l2"
        # the additive budget of each row: epsilon, rho, or mu^2 (GDP), halved for replace-one neighbours
        self.limit = (b * b if self.squared else b) / (2.0 if neighbouring == "replace" else 1.0)
        # importance is relative: solve on weights scaled to at most 1, report in the caller's
        self.scale = float(w.max())
        self.w = w / self.scale
        self.objective = objective
        self.effort = effort
        self.start = 0.0  # the plan's start on the overlap clock (set by plan())
        self.tol = tol
        self.table = _Coverage.build(self.qs)
        # the best plan certified so far: its objective, its costs, how it was certified, its certified
        # worst row and whether that is exact
        self.best: tuple[float, np.ndarray, str, float, bool, Cover | None] | None = None
        self.margin: float | None = None

    # -- the overlap engine -------------------------------------------------------------------------
    def certified(self, costs: np.ndarray, until: float = 0.95) -> tuple[float, bool, tuple[int, ...]]:
        """A safe upper bound of the worst row's cost (its exact value when the flag says so) and the
        queries covering the row found, searched until ``until`` of the effort."""
        from overlapdp.overlap import max_overlap

        res = max_overlap(self.qs, weights=costs.tolist(), comp="sum", effort=self.left(0.05, until=until))
        return float(res.value if res.exact else res.upper), bool(res.exact), tuple(res.query_indices)

    def tightened(self, costs: np.ndarray, members: tuple[int, ...], up: float) -> tuple[float, float]:
        """A certified bound of the worst row's cost below ``up`` where the threshold decision proves
        one (MATH.md 2.10, minimax): from the heaviest row seen, levels ``(1 + m)`` above it, the widest
        margin first; a row over a level raises the row seen and the level is tried again from it; a
        decision out of time ends the ladder (a smaller margin is harder still). ``up`` when none is
        proven; needs the coverage tables. With it, the cost of the heaviest row seen (a lower bound
        of the worst row's)."""
        assert self.table is not None
        seen = math.fsum(costs[list(members)].tolist())
        best = up
        margins = list(_RELATIVE_MARGINS)
        for _ in range(_RELATIVE_TRIES):
            if not margins:
                break
            level = seen * (1 + margins[0])
            if level >= best:
                margins.pop(0)
                continue
            seconds = self.left(until=0.95)
            if seconds is not None and seconds <= 0:
                break
            try:
                row = self.table.over(costs, level, seconds)
            except SearchGaveUp:
                break
            if row is None:
                best = level  # every row within it, exactly
                margins.pop(0)
            else:
                seen = max(seen, math.fsum(costs[list(row)].tolist()))
        return best, seen

    def left(self, floor: float = 0.0, until: float = 1.0) -> float | None:
        """Seconds left until ``until`` of the effort (at least ``floor`` of it); None: no limit."""
        if self.effort is None:
            return None
        from overlapdp.overlap import _clock

        return max(self.effort * floor, self.start + self.effort * until - _clock.now())

    def over_by_bound(self, costs: np.ndarray, limit: float) -> tuple[int, ...] | None:
        """Without coverage tables: None when the engine's certified bound is within ``limit``, the row
        it found when that is over, else :class:`SearchGaveUp` (the bound alone cannot say)."""
        up, exact, members = self.certified(costs)
        if up <= limit:
            return None
        if exact:
            return members
        raise SearchGaveUp("the engine's bound is over the limit")

    def prove(
        self, costs: np.ndarray, seconds: float | None, most: float = math.inf
    ) -> tuple[int, ...] | None:
        """Certify ``costs`` by the threshold decision (MATH.md 7.9: is there a row over ``limit (1 +
        m)``?) for margins ``m`` below ``most`` (a larger one would lose to the best plan certified so
        far), the largest first (the easiest to prove, and at once a plan), then down to ``tol`` (the
        optimum itself), the first search with ``_FIRST`` of the time, each next one with half the time left
        (the last with all of it), until one gives
        up (a smaller margin is harder still). Every plan proven, ``costs / (1 + m)``, is offered as a
        certified plan; the smallest margin proven is kept in ``self.margin`` (None: none). Returns the
        covering queries of a row found over a threshold (the constraint generation's next row: a row
        over ``limit (1 + m)`` rules out every smaller margin too), else None. ``seconds``: the time for
        all the searches."""
        from overlapdp.overlap import _clock

        ladder = sorted({self.tol, *(m for m in _MARGINS if m > self.tol)})
        margins = [m for m in ladder if m < most]
        if math.isfinite(most) and _COARSE * most > max(margins, default=0.0):
            # a coarse margin that still beats the certified plan: provable where the ladder's are not
            margins.append(_COARSE * most)
        self.margin = None
        end = None if seconds is None else _clock.now() + seconds
        for i, margin in enumerate(reversed(margins)):
            effort = None
            if end is not None:
                left = max(end - _clock.now(), 0.0)
                effort = left if i == len(margins) - 1 else left * (_FIRST if i == 0 else 0.5)
            try:
                if self.table is None:
                    found = self.over_by_bound(costs, self.limit * (1 + margin))
                else:
                    found = self.table.over(costs, self.limit * (1 + margin), effort)
            except SearchGaveUp:
                break
            if found is not None:
                return found
            # every row <= limit (1 + margin): scaled by 1 / (1 + margin), every row <= limit (loads are
            # linear; _SHRINK absorbs the floats' rounding)
            self.margin = margin
            how = "optimal" if margin <= self.tol else f"optimal, scaled by a proven margin {margin:g}"
            self.offer(costs * (_SHRINK / (1 + margin)), self.limit, False, how)
        return None

    def offer(
        self, costs: np.ndarray, worst: float, exact: bool, how: str, cover: Cover | None = None
    ) -> None:
        """A certified plan (every row within ``worst`` <= the limit; ``cover``: its certificate, when it
        has one): kept when it beats the best."""
        obj = _objective(self.w, costs, self.p, self.objective)
        if self.best is None or obj < self.best[0]:
            self.best = (obj, costs, how, worst, exact, cover)

    # -- the plan -------------------------------------------------------------------------------------
    def out_of(self, until: float) -> bool:
        """Whether ``until`` of the effort has passed."""
        return self.effort is not None and (self.left(until=until) or 0.0) <= 0

    def worth(self, objective: float) -> float:
        """The largest margin m whose plan, scaled by 1 / (1 + m), would still beat the best plan
        certified so far (the objective grows as (1 + m)^p); infinite when there is none."""
        if self.best is None or objective <= 0:
            return math.inf
        return float((self.best[0] / objective) ** (1.0 / self.p) - 1.0)

    def plan(self) -> Allocation:
        from overlapdp.overlap import _clock, max_overlap

        qs, limit, p = self.qs, self.limit, self.p
        self.start = _clock.now()
        gamma_res = max_overlap(qs, comp="count", effort=None if self.effort is None else self.effort * 0.1)
        gamma = max(1, math.floor(float(gamma_res.value if gamma_res.exact else gamma_res.upper) + 1e-9))
        graph = None
        if self.table is not None and len(qs) <= PACKING_MAX:
            # the queries covering a row meet pairwise, so a proper colouring's number of colours bounds
            # gamma too (MATH.md 1.10): lower than the engine's cut bound on many small queries (1 000
            # narrow ones: 64 colours, the count search's bound 69-70 in its 10%)
            graph = overlap_graph(self.table.tables)
            gamma = min(gamma, int(greedy_colouring(graph).max()) + 1)
        self.gamma = gamma
        self.even_obj = _objective(self.w, np.full(len(qs), limit / gamma * _SHRINK), p, self.objective)
        if self.objective == "relative":
            # equal weighted variances: s_q proportional to w_q^(1/p), scaled to the worst row (optimal:
            # every plan with a smaller largest weighted variance costs more on that row)
            shape = self.w ** (1.0 / p)
            up, exact, members = self.certified(shape, 0.95 if self.table is None else _RELATIVE_SEARCH)
            how = "relative (closed form)"
            seen = math.fsum(shape[list(members)].tolist())
            if not exact and self.table is not None:
                tighter, seen = self.tightened(shape, members, up)
                if tighter < up:
                    up, how = tighter, "relative (closed form, worst row bounded by the threshold decision)"
            if up <= 0:
                # no query covers a row: any shares fit; each takes the whole budget at most
                up = seen = float(shape.max())
            # the optimum scales the same shape to the true worst row, at least the heaviest row seen:
            # the objective there bounds it from below (the plan's gap, 0 only when the row is proven)
            lower = _objective(self.w, shape * (limit / max(seen, up * 2.0**-52)), p, self.objective)
            return self.finish(
                shape * (limit / up) * _SHRINK, limit, False, rows=1, rounds=1, lower=lower, method=how
            )
        # 1. a plan certified by construction (MATH.md 2.10.1): the plan the rows' plan must beat
        self.best = None
        if self.table is not None and len(qs) <= PACKING_MAX:
            packed = packing_plan(
                self.table.tables, self.w, p, limit, gamma, lambda: self.out_of(_PACKING), graph
            )
            if packed is not None:
                how = f"packings ({packed.columns} columns)"
                self.offer(packed.costs, limit, False, how, Cover(packed.sets, packed.amounts))
        # 2. constraint generation on the rows
        held = _Held(len(qs))
        # the even plan's worst row and one row inside each query (each query must be in a constraint,
        # or its share would be unbounded)
        held.add(gamma_res.query_indices)
        inside = self.table.rows_inside() if self.table is not None else _rows_inside(qs)
        for j, members in enumerate(inside):
            held.add(members or (j,))
        starts = self.table.random_rows() if self.table is not None else None
        lam: np.ndarray | None = None
        lower = 0.0
        costs = np.full(len(qs), limit / gamma)
        if self.table is not None and starts is not None:
            # and the heaviest rows a climb finds at even shares: the first restricted plans are then
            # far less over the budget (fewer rounds)
            starts, loads, patterns = self.table.climb(starts, costs)
            for i in np.flatnonzero(loads >= _HEAVY * float(loads.max())):
                held.add(np.flatnonzero(patterns[i]).tolist())
        # the rows' plan with the lowest objective once scaled to the heaviest row seen: the one to certify
        candidate: tuple[float, np.ndarray] | None = None
        proved = False  # the loop ended on a certification of its last plan
        rounds = 0
        for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007 - reported
            if self.out_of(_LOOP):
                break  # out of time: certify what there is
            a = held.matrix()
            costs, lam, dual = _restricted(a, self.w, p, limit, lam)
            lower = max(lower, dual)
            if self.best is not None and self.best[0] <= lower * (1 + self.tol):
                break  # stopping rule: the certified plan is within tol of the optimum (the dual's bound)
            # feasible on the rows held (the dual solve is approximate), so every violated row is new
            costs = costs * (limit / max(float((a @ costs).max()), 1e-300))
            added = 0
            heaviest = limit
            if self.table is not None and starts is not None:
                starts, loads, patterns = self.table.climb(starts, costs)
                heaviest = max(limit, float(loads.max()))
                for i in np.flatnonzero(loads > limit * (1 + self.tol)):
                    added += held.add(np.flatnonzero(patterns[i]).tolist())
            scaled = costs * (limit / heaviest)
            obj = _objective(self.w, scaled, p, self.objective)
            if candidate is None or obj < candidate[0]:
                candidate = (obj, scaled)
            if added == 0:
                most = self.worth(_objective(self.w, costs, p, self.objective))
                found = self.prove(costs, self.left(0.05, until=_LOOP), most)
                if found is None:
                    # proven (or not worth proving): done; every search gave up: the final try below
                    # has more time
                    proved = self.margin is not None or most <= self.tol
                    break
                if not held.add(found):  # pragma: no cover - a held row is within the limit
                    break
                if self.table is not None and starts is not None:
                    starts = self.table.with_row(starts, found)
            lam = np.concatenate([lam, np.full(held.size - lam.size, 0.0)])
        if not proved and candidate is not None:
            # the loop ended early (time, rounds, or the stopping rule): one more try to certify the
            # best rows' plan, if a proven margin could make it beat the certified plan
            costs = candidate[1]
            self.prove(costs, self.left(0.1, until=0.85), self.worth(candidate[0]))
        if self.margin is None and self.worth(_objective(self.w, costs, p, self.objective)) > self.tol:
            # nothing proven: the engine's certified bound of the worst row (skipped when even the
            # unscaled plan loses to the certified one: no bound can help it)
            up, exact, _ = self.certified(costs)
            if up <= limit:
                self.offer(costs, up, exact, "optimal (engine's bound)")
            else:
                self.offer(costs * ((limit / up) * _SHRINK), limit, False, "scaled to the certified bound")
        assert self.best is not None  # the engine's bound is tried whenever nothing else was certified
        obj, best, how, worst, exact, cover = self.best
        if obj <= lower * (1 + self.tol) and how != "optimal":
            how += f", within {self.tol:g} of the optimum"
        return self.finish(best, worst, exact, held.size, rounds, lower, how, cover)

    def finish(
        self,
        costs: np.ndarray,
        worst: float,
        exact: bool,
        rows: int,
        rounds: int,
        lower: float | None = None,
        method: str = "optimal",
        cover: Cover | None = None,
    ) -> Allocation:
        # GDP: mu rounded down so that its square, the additive cost, is at most the cost planned, and
        # 2^-40 below it, so that the declared zCDP rho = mu^2/2 of each query, rounded up to a float,
        # still sums to at most B^2/2 on every row (each rounding is below 2^-52 relative)
        shares = (
            np.array([sqrt_down(Fraction(float(c)) * (1 - Fraction(1, 2**40))) for c in costs])
            if self.squared
            else costs
        )
        obj = _objective(self.w, shares**2 if self.squared else shares, self.p, self.objective)
        if obj > self.even_obj:
            # the certified bound was too loose for the plan to beat even shares: give even shares,
            # B / gamma each (every row holds at most gamma queries), the promise "never worse"
            even = np.full(len(self.qs), self.limit / self.gamma * _SHRINK)
            shares = (
                np.array([sqrt_down(Fraction(float(c)) * (1 - Fraction(1, 2**40))) for c in even])
                if self.squared
                else even
            )
            obj, worst, exact, method = (
                self.even_obj,
                self.limit,
                False,
                "even shares (no better plan proven)",
            )
            cover = self.even_cover()
        if not all(0 < float(x) < math.inf for x in shares):
            # (planned at budget 1: weights spanning ~300 orders of magnitude) a share of 0 would be a
            # query with no budget, an infinite error bar
            raise AnswerError(
                "a share underflows to 0 in floating point: the weights span more orders of magnitude "
                "than this planner computes in; bring them closer together"
            )
        return Allocation(
            shares=tuple(float(x) for x in shares),
            objective=obj * self.scale,
            lower=(obj if lower is None else min(lower, obj)) * self.scale,
            even_objective=self.even_obj * self.scale,
            worst_row=float_up(Fraction(worst)),
            exact=exact,
            rows=rows,
            rounds=rounds,
            method=method,
            cover=cover,
        )

    def even_cover(self) -> Cover:
        """Even shares' certificate: the whole workload at ``B / gamma`` (MATH.md 2.10, (iv))."""
        return Cover((tuple(range(len(self.qs))),), (self.limit / self.gamma * _SHRINK,))


class _Held:
    """The rows' constraints found so far, one per distinct set of covering queries."""

    def __init__(self, t: int) -> None:
        self.t = t
        self.rows: list[np.ndarray] = []
        self.seen: set[tuple[int, ...]] = set()

    @property
    def size(self) -> int:
        return len(self.rows)

    def add(self, members: Sequence[int]) -> bool:
        key = tuple(sorted(int(m) for m in members))
        if not key or key in self.seen:
            return False
        self.seen.add(key)
        row = np.zeros(self.t)
        row[list(key)] = 1.0
        self.rows.append(row)
        return True

    def matrix(self) -> np.ndarray:
        return np.array(self.rows)


class _Coverage:
    """The workload's 0/1 coverage tables over the values of the attributes it constrains (queries x
    values, one table per attribute): the climb's and the threshold decision's input."""

    STARTS = 128

    def __init__(self, sizes: list[int], tables: list[np.ndarray], seed: int = 0) -> None:
        self.sizes = sizes
        self.tables = tables  # bool
        self.ftables = [t.astype(np.float32) for t in tables]
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(cls, qs: Sequence[PredicateQuery]) -> _Coverage | None:
        from overlapdp.overlap.threshold import coverage_tables

        schema = qs[0].schema
        attrs = {pos for q in qs for pos, _ in q.constraints}
        if not attrs or len(qs) * sum(schema.attributes[a].size for a in attrs) > MAX_CELLS:
            return None
        _, sizes, tables = coverage_tables(qs)
        return cls(sizes, tables)

    def over(self, costs: np.ndarray, limit: float, effort: float | None) -> tuple[int, ...] | None:
        """The threshold decision (MATH.md 7.9): the queries covering a row of cost above ``limit``
        (exact sums of the float costs), or None when every row is within it."""
        from overlapdp.overlap import _clock
        from overlapdp.overlap.threshold import tables_exceed

        deadline = None if effort is None else _clock.now() + effort
        row = tables_exceed(self.tables, [Fraction(float(c)) for c in costs], Fraction(limit), deadline)
        if row is None:
            return None
        return tuple(self.covering(np.array(row)[None, :])[0].nonzero()[0].tolist())

    def covering(self, rows: np.ndarray) -> np.ndarray:
        """(rows x queries) whether each query covers each row (value indices per table)."""
        out = np.ones((rows.shape[0], self.tables[0].shape[0]), dtype=bool)
        for i, t in enumerate(self.tables):
            out &= t[:, rows[:, i]].T
        return out

    def rows_inside(self) -> list[tuple[int, ...]]:
        """:func:`_rows_inside` on the tables (one matrix product, not t^2 ``covers`` calls)."""
        rows = np.stack([t.argmax(axis=1) for t in self.tables], axis=1)
        empty = np.zeros(self.tables[0].shape[0], dtype=bool)
        for t in self.tables:
            empty |= ~t.any(axis=1)  # a contradiction holds no row
        cov = self.covering(rows)
        return [() if empty[j] else tuple(np.flatnonzero(cov[j]).tolist()) for j in range(len(rows))]

    def random_rows(self) -> np.ndarray:
        return np.stack([self.rng.integers(0, n, self.STARTS) for n in self.sizes], axis=1)

    def with_row(self, starts: np.ndarray, members: Sequence[int]) -> np.ndarray:
        """The starts and a row inside every query of ``members`` (where the next climb starts)."""
        row = [int(np.argmax(t[list(members)].all(axis=0))) for t in self.tables]
        return np.vstack([starts, np.array(row)[None, :]])

    def climb(self, starts: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Coordinate ascent from the last ``STARTS`` rows of ``starts`` and as many fresh random rows:
        each attribute in turn set to its value of largest load given the others. It only proposes
        constraints (the threshold decision ends the search), so its misses cost rounds, never safety.
        Returns the rows reached, their loads and the 0/1 patterns of the queries covering them."""
        rows = np.vstack([starts[-self.STARTS :], self.random_rows()])
        c = costs.astype(np.float32)
        k = len(self.tables)
        cov = np.stack([self.ftables[i][:, rows[:, i]].T for i in range(k)])  # (k, R, t)
        sat = cov.sum(axis=0)
        for _ in range(8):
            moved = False
            for i in range(k):
                others = (sat - cov[i]) > k - 1.5  # every other attribute satisfied
                best = np.argmax((others * c) @ self.ftables[i], axis=1)
                if np.any(best != rows[:, i]):
                    moved = True
                    rows[:, i] = best
                    sat -= cov[i]
                    cov[i] = self.ftables[i][:, best].T
                    sat += cov[i]
            if not moved:
                break
        patterns = sat > k - 0.5
        return rows, patterns.astype(np.float64) @ costs, patterns


def _rows_inside(qs: Sequence[PredicateQuery]) -> list[tuple[int, ...]]:
    """For each query, the queries covering one row inside it (its lowest value on each attribute)."""
    schema = qs[0].schema
    out: list[tuple[int, ...]] = []
    for q in qs:
        if q.is_contradiction:
            out.append(())
            continue
        cons = dict(q.constraints)
        row = tuple(cons[p].min() if p in cons else 0 for p in range(len(schema.attributes)))
        out.append(tuple(j for j, o in enumerate(qs) if o.covers(row)))
    return out


def _restricted(
    a: np.ndarray, w: np.ndarray, p: int, limit: float, lam0: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """The optimum on the rows ``a`` (rows x queries, 0/1), by its dual: with ``s = a^T lambda``, the
    inner minimum is at ``cost_q = (p w_q / s_q)^(1/(p+1))`` and the dual ``C sum_q (w_q s_q^p)^(1/(p+1))
    - limit sum lambda`` is concave; maximised over ``lambda >= 0`` by L-BFGS-B (MATH.md 2.10), at most
    ``_SOLVE_ITERATIONS`` steps from ``lam0``. Returns the costs, the multipliers and the dual's value
    at them (a lower bound of the full problem's optimum for ANY multipliers >= 0: the restricted
    problem drops constraints)."""
    import scipy.sparse as sp
    from scipy.optimize import minimize

    k = 1.0 / (p + 1)
    const = p ** (-p * k) + p**k
    # (a floor on s keeps a query whose rows all have lambda 0 at a large finite share, which its rows'
    # gradients then pull back)
    floor = 1e-12
    # rows cover a small part of a large workload: sparse products are several times cheaper
    am = sp.csr_matrix(a)
    at = am.T.tocsr()

    def costs_of(lam: np.ndarray) -> np.ndarray:
        return np.asarray((p * w / (at @ lam + floor)) ** k)

    def neg_dual(lam: np.ndarray) -> tuple[float, np.ndarray]:
        s = at @ lam + floor
        value = const * float(np.sum((w * s**p) ** k)) - limit * float(lam.sum())
        return -value, -(am @ ((p * w / s) ** k) - limit)

    start = np.full(a.shape[0], 1.0) if lam0 is None else np.maximum(lam0, 0.0)
    res = minimize(
        neg_dual,
        start,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * a.shape[0],
        options={"maxiter": _SOLVE_ITERATIONS, "ftol": 1e-13, "gtol": 1e-9},
    )
    lam = np.asarray(res.x)
    # the dual without the floor (s = 0 contributes 0: the inner minimum of w c^-p + 0 c is 0)
    s = at @ lam
    dual = const * float(np.sum((w * s**p) ** k)) - limit * float(lam.sum())
    return costs_of(lam), lam, dual


def _objective(w: np.ndarray, costs: np.ndarray, p: int, objective: Objective) -> float:
    var = w / costs**p
    return float(var.max() if objective == "relative" else var.sum())


__all__ = ["Allocation", "Objective", "allocate"]
