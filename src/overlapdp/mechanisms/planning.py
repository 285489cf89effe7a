"""Planning a release without touching data: each query's share of the budget, its noise and error bar,
and what the same workload costs under every accounting (MATH.md 2.10; issue "planning a release").

- :func:`plan_release`: a total budget, spread evenly (``B / gamma``) or by the optimal allocation of
  :mod:`overlapdp.mechanisms.allocation`; each query's noise and half-width at the confidence level; the
  total noise variance the same workload would carry under sequential composition (``B / t`` each),
  partition-based parallel composition (families of pairwise disjoint queries each charged once, what a
  Tumult Analytics or OpenDP user declares at best), even overlap shares and the plan.
- :func:`budget_for_error`: the smallest total budget that answers every query within ``+-k`` at the
  level (equal targets make equal shares optimal: every share ``B / gamma``, MATH.md 2.10's minimax).

The noise is the one :func:`~overlapdp.mechanisms.answering.answer_workload` draws for a count of
sensitivity 1 (discrete Laplace under pure DP, discrete Gaussian under zCDP and GDP); the variances are
those distributions' own (``Noise.variance``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from overlapdp.errors import AnswerError, BudgetError
from overlapdp.mechanisms.allocation import Allocation, Objective, allocate
from overlapdp.mechanisms.calibration import CountBudget, noise_for
from overlapdp.privacy.definitions import check_neighbouring
from overlapdp.privacy.measures import AdditiveMeasure, count_measure
from overlapdp.query import PredicateQuery
from overlapdp.validation import check_level, check_positive

AllocationKind = Literal["even", "optimal"]


@dataclass(frozen=True)
class ReleasePlan:
    """Per-query ``shares`` (the definition's unit), noise standard deviations and half-widths of the
    error bars at ``level``; ``totals``: the workload's total noise variance under each accounting at the
    same guarantee (``sequential``, ``partitions``, ``even overlap``, and ``optimal overlap`` when
    planned); ``allocation``: the optimal allocation's certificate (None for even shares)."""

    definition: str
    budget: float
    level: float
    allocation_kind: AllocationKind
    ids: tuple[str, ...]
    shares: tuple[float, ...]
    stds: tuple[float, ...]
    half_widths: tuple[int, ...]
    gamma: int
    families: int
    totals: dict[str, float] = field(default_factory=dict)
    allocation: Allocation | None = None
    neighbouring: str = "add_remove"  # the relation the shares are for (MATH.md 2.9)

    def to_json(self) -> dict[str, Any]:
        return {
            "definition": self.definition,
            "budget": self.budget,
            "level": self.level,
            "allocation": self.allocation_kind,
            "gamma": self.gamma,
            "families": self.families,
            "neighbouring": self.neighbouring,
            "queries": [
                {"id": i, "share": s, "noise_std": d, "error_bar": w}
                for i, s, d, w in zip(self.ids, self.shares, self.stds, self.half_widths, strict=True)
            ],
            "total_variance": dict(self.totals),
            "certificate": None
            if self.allocation is None
            else {
                "worst_row": self.allocation.worst_row,
                "method": self.allocation.method,
                "objective_lower_bound": self.allocation.lower,
                "gap": self.allocation.gap,
            },
        }


def partition_families(queries: Sequence[PredicateQuery]) -> int:
    """How many families of pairwise disjoint queries a greedy colouring of the overlap graph finds
    (largest degree first): partition-based parallel composition charges each family once."""
    qs = list(queries)
    order = sorted(range(len(qs)), key=lambda i: -sum(1 for o in qs if not qs[i].disjoint(o)))
    colours: list[list[PredicateQuery]] = []
    for i in order:
        for c in colours:
            if all(qs[i].disjoint(o) for o in c):
                c.append(qs[i])
                break
        else:
            colours.append([qs[i]])
    return len(colours)


def _measure(definition: str) -> AdditiveMeasure[Any, Any]:
    return count_measure(definition, AnswerError)


def _budget(definition: str, share: float) -> CountBudget:
    budget: CountBudget = _measure(definition).budget(share, {})
    return budget


def _even(definition: str, budget: float, payers: int) -> float:
    from overlapdp.mechanisms.answering import even_share

    return even_share(definition, budget, payers)  # type: ignore[arg-type]


def plan_release(
    queries: Sequence[PredicateQuery],
    budget: float,
    definition: str,
    *,
    allocation: AllocationKind = "optimal",
    objective: Objective = "variance",
    level: float = 0.95,
    effort: float | None = 10.0,
    neighbouring: str = "add_remove",
) -> ReleasePlan:
    """Each query's share, noise and error bar (module docstring), and the comparison with the other
    accountings at the same guarantee. Draws no noise and reads no data."""
    measure = _measure(definition)
    if allocation not in ("even", "optimal"):
        raise AnswerError(f"allocation must be 'even' or 'optimal', got {allocation!r}")
    b = check_positive(budget, "budget", error=AnswerError)
    lv = check_level(level)
    qs = list(queries)
    if not qs:
        raise AnswerError("the workload has no queries")
    check_neighbouring(neighbouring, AnswerError)
    gamma = _gamma(qs, effort)
    fam = partition_families(qs)
    # replace-one neighbours: a pair of rows pays both rows' charges (MATH.md 2.9), half the additive budget
    half = 1.0 if neighbouring != "replace" else (math.sqrt(2.0) if measure.comp == "l2" else 2.0)

    def total(shares: Sequence[float]) -> float:
        return sum(noise_for(_budget(definition, s)).variance for s in shares)

    def even_of(payers: int, pair: float = half) -> list[float]:
        return [_even(definition, b / pair, payers)] * len(qs)

    totals: dict[str, float] = {}
    # sequential composition charges each query once whatever the relation (a count's and a sum's noise
    # is calibrated to that relation's sensitivity), so it is not halved; a partition cell and a row's
    # overlap are: a replaced row may leave one cell (row) and join another
    for name, payers, pair in (
        ("sequential", len(qs), 1.0),
        ("partitions", fam, half),
        ("even overlap", gamma, half),
    ):
        try:
            totals[name] = total(even_of(payers, pair))
        except BudgetError:  # a share too small to calibrate: infinite noise
            totals[name] = math.inf
    plan: Allocation | None = None
    if allocation == "optimal":
        plan = allocate(qs, b, definition, objective=objective, neighbouring=neighbouring, effort=effort)
        shares = list(plan.shares)
    else:
        shares = even_of(gamma)
    try:
        noises = [noise_for(_budget(definition, s)) for s in shares]
    except BudgetError as exc:
        raise BudgetError(f"budget = {b!r} is too small: a per-query share {exc}") from None
    if plan is not None:
        totals["optimal overlap"] = sum(n.variance for n in noises)
    return ReleasePlan(
        definition=definition,
        budget=b,
        level=lv,
        allocation_kind=allocation,
        ids=tuple(str(q.id) for q in qs),
        shares=tuple(shares),
        stds=tuple(math.sqrt(n.variance) for n in noises),
        half_widths=tuple(n.half_width(lv) for n in noises),
        gamma=gamma,
        families=fam,
        totals=totals,
        allocation=plan,
        neighbouring=neighbouring,
    )


def budget_for_error(
    queries: Sequence[PredicateQuery],
    half_width: int,
    definition: str,
    *,
    level: float = 0.95,
    effort: float | None = 10.0,
    neighbouring: str = "add_remove",
) -> tuple[float, float, int]:
    """The smallest total budget (to about 1e-9 relative, rounded up) whose plan answers every query of
    the workload within ``+-half_width`` at ``level``: ``(budget, per-query share, gamma)``. Equal
    targets: the minimax plan gives every query ``B / gamma`` (``B / sqrt(gamma)`` in GDP's mu), so the
    share is the smallest whose noise's half-width is at most the target (bisection on the exact
    noise distributions), and the budget composes ``gamma`` of them (``2 * gamma`` under replace-one
    neighbours, whose pair of rows pays both rows' shares: MATH.md 2.9)."""
    measure = _measure(definition)
    if isinstance(half_width, bool) or not isinstance(half_width, int) or half_width < 0:
        raise AnswerError(f"the error target must be a whole number of rows >= 0, got {half_width!r}")
    lv = check_level(level)
    check_neighbouring(neighbouring, AnswerError)
    qs = list(queries)
    if not qs:
        raise AnswerError("the workload has no queries")
    gamma = _gamma(qs, effort)
    payers = gamma * (2 if neighbouring == "replace" else 1)

    def fine(share: float) -> bool:
        try:
            return noise_for(_budget(definition, share)).half_width(lv) <= half_width
        except BudgetError:
            return False

    lo, hi = 1e-9, 1.0
    while not fine(hi):
        lo, hi = hi, hi * 2
        if hi > 1e12:
            raise AnswerError(f"no budget answers within +-{half_width} at {lv:g}")
    for _ in range(200):
        if hi / lo < 1 + 1e-9:
            break
        mid = math.sqrt(lo * hi)
        if fine(mid):
            hi = mid
        else:
            lo = mid
    share = hi
    total = share * (math.sqrt(payers) if measure.comp == "l2" else payers)
    # the total rounded up until its even share is at least the share found (even_share rounds down)
    while _even(definition, total, payers) < share:
        total = math.nextafter(total, math.inf)
    return total, _even(definition, total, payers), gamma


def error_target(
    queries: Sequence[PredicateQuery],
    half_width: int,
    definition: str,
    *,
    level: float = 0.95,
    effort: float | None = 10.0,
    neighbouring: str = "add_remove",
) -> dict[str, Any]:
    """:func:`budget_for_error` as the CLI's JSON and the service's answer give it: ``budget``,
    ``per_query`` and ``gamma`` with what was asked."""
    total, share, gamma = budget_for_error(
        queries, half_width, definition, level=level, effort=effort, neighbouring=neighbouring
    )
    return {
        "definition": definition,
        "target_error": half_width,
        "level": level,
        "budget": total,
        "per_query": share,
        "gamma": gamma,
        "neighbouring": neighbouring,
    }


def _gamma(queries: Sequence[PredicateQuery], effort: float | None) -> int:
    """The workload's maximum overlap, or the floor of its safe upper bound when the search stops early
    (overlaps are integers: the floor of a safe bound is safe; never the lower bound)."""
    from overlapdp.overlap import max_overlap

    res = max_overlap(queries, comp="count", effort=effort)
    return max(1, math.floor(float(res.value if res.exact else res.upper) + 1e-9))


__all__ = [
    "AllocationKind",
    "ReleasePlan",
    "budget_for_error",
    "error_target",
    "partition_families",
    "plan_release",
]
