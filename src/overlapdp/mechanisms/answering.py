"""Spend one total budget on a whole workload of counts, evenly, and release noisy answers with error bars.

The budget ``B`` is spread evenly over the ``t`` queries under one of two accountings (MATH.md 2.4, 2.6):

- sequential: every query pays, so each gets ``B/t`` (pure DP epsilon, zCDP rho) or ``B/sqrt(t)``
  (Gaussian DP mu, whose comp is the l2 norm);
- overlap-aware: a row only pays for the queries covering it (MATH.md 2.2, Theorem 6 of Smith et al.), so
  the largest equal per-query budget whose maximum overlap stays within ``B`` is ``B/gamma`` (pure, zCDP)
  or ``B/sqrt(gamma)`` (GDP), where ``gamma`` is the maximum overlap (comp ``count``,
  :func:`overlapdp.overlap.max_overlap`). When ``max_overlap`` gives up, its SAFE UPPER bound is used
  (never the lower: that would under-report the loss); since overlaps are integers, its floor is safe.

Per-query budgets are then rounded DOWN until the composition over ``gamma`` (resp. ``t``) queries is
within ``B`` in exact rational arithmetic, so floating point never over-spends.

Noise: the exact samplers of :mod:`overlapdp.mechanisms` (discrete Laplace for pure DP, discrete Gaussian
for zCDP and GDP; MATH.md 6.2). A GDP ``mu`` is DECLARED and accounted as ``mu^2/2``-zCDP (the guarantee CKS
2020 prove for the discrete Gaussian; :mod:`overlapdp.mechanisms.calibration`), and its budget ``B`` as
``B^2/2``-zCDP. Guarantees are composed with the definitions' own ``compose`` (MATH.md 2.4): sequentially
over all ``t`` queries, overlap-aware over the ``gamma`` queries covering the worst row.

Every plan also states its guarantee as (epsilon, delta) at a ``delta`` (default :data:`DEFAULT_DELTA`
for zCDP and GDP; pure DP is (epsilon, 0)-DP and needs none), by the tightest conversion implemented for
the declared definition (MATH.md 5.8: pure DP's randomized-response profile, Canonne-Kamath-Steinke for
zCDP, which GDP budgets are declared as). A budget may instead be given as a target ``epsilon`` at
``delta``: :func:`calibrate_budget` finds the largest total budget whose conversion is at most it.

Sums and means (:mod:`overlapdp.mechanisms.sums`): a query whose aggregate is a clipped sum or mean
gets the SAME per-query budget as a count; its noise is calibrated to the sum's sensitivity (declared
bounds, add/remove: ``max(|lo|, |hi|)`` in units of the step; replace-one: ``max(hi - lo, |lo|, |hi|)``), so its privacy parameter, and hence its
weight in the per-row accounting, is that per-query budget, like a count's (MATH.md 2.8, weighted
overlap: a row pays the parameters of the queries covering it, whatever they aggregate). A mean spends
half on a noisy sum and half on a noisy count of the same rows and is charged once.

Everything that can be wrong with the input is checked BEFORE any noise is drawn: :func:`plan_answers`
validates the budget, definition, accounting and level and computes ``gamma``; the caller then opens the
data (bad files and columns fail there) and :func:`answer_workload` counts and only then adds noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import TYPE_CHECKING, Any, cast

from overlapdp import display, validation
from overlapdp.engine.inputs import open_data as open_table
from overlapdp.errors import AnswerError as AnswerError
from overlapdp.exact import float_up, sqrt_up
from overlapdp.mechanisms._noisy_counts import NoisyAnswer, add_noise
from overlapdp.mechanisms.answer_options import DEFAULT_EFFORT as DEFAULT_EFFORT
from overlapdp.mechanisms.answer_options import Accounting as Accounting
from overlapdp.mechanisms.answer_options import Definition as Definition
from overlapdp.mechanisms.calibration import CountBudget, declared_guarantee, noise_for
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.mechanisms.sums import NoisyMean, NoisySum, add_mean_noise, add_sum_noise, split_budget
from overlapdp.privacy.definitions import GDP, ZCDP, BudgetError, PureDP, check_delta, check_neighbouring
from overlapdp.privacy.measures import DEFAULT_DELTA as DEFAULT_DELTA
from overlapdp.privacy.measures import Measure, count_measure
from overlapdp.privacy.neighbouring import Neighbouring
from overlapdp.query.aggregate import COUNT, Aggregate, Clipping
from overlapdp.tables import data_kind
from overlapdp.validation import check_positive

if TYPE_CHECKING:  # the CLI imports this module for its constants: keep the search and engines out
    import pandas as pd

    from overlapdp.engine.base import Engine
    from overlapdp.mechanisms.consistency import ConsistentAnswers
    from overlapdp.query import PredicateQuery
    from overlapdp.query.groupby import GroupLabels

ACCOUNTINGS: tuple[Accounting, ...] = ("overlap", "sequential")


def _measure(definition: str) -> Measure[Any]:
    """The measure of a workload's ``definition``: one whose budget one count's noise is calibrated to
    (:func:`overlapdp.privacy.measures.count_measure`: pure DP, zCDP, GDP; :class:`AnswerError` listing
    them otherwise)."""
    return count_measure(definition, AnswerError)


def check_budget(value: Any) -> float:
    """A total budget must be a positive finite number (:class:`BudgetError` otherwise)."""
    return check_positive(value, "the budget")


def _declared_value(definition: Definition, per_query: float) -> Fraction:
    """The per-query loss that is charged, as an exact rational (epsilon, or rho for zCDP and GDP)."""
    g = declared_guarantee(count_budget(definition, per_query))
    return Fraction(g.epsilon if isinstance(g, PureDP) else g.rho)


def count_budget(definition: Definition, value: float) -> CountBudget:
    """The budget ``value`` of ``definition`` (in its unit) as one count's noise takes it."""
    return cast(CountBudget, _measure(definition).budget(value, {}))


def even_share(definition: Definition, budget: float, payers: int) -> float:
    """The largest equal per-query budget such that ``payers`` queries compose within ``budget``.

    ``B/n`` for pure DP and zCDP, ``B/sqrt(n)`` for GDP (MATH.md 2.4), rounded down
    until the declared charges of ``n`` queries sum to at most the total in exact arithmetic.
    """
    if payers < 1:
        raise AnswerError("a budget is shared among at least one query")
    m = _measure(definition)
    share = m.equal_share(budget, payers)
    limit = m.declared_total(budget)
    for _ in range(10_000):
        if payers * _declared_value(definition, share) <= limit:
            return share
        share = math.nextafter(share, 0.0) if _ < 8 else share * (1 - 1e-12)
    raise AnswerError("could not find a per-query budget within the total (internal error)")


def budget_guarantee(definition: Definition, budget: float) -> PureDP | ZCDP:
    """What a total budget is declared as: epsilon-DP, rho-zCDP, or for GDP ``mu`` the ``mu^2/2``-zCDP of
    the discrete Gaussian (rounded up; module doc). Every plan's guarantee is within it (:func:`even_share`)."""
    return declared_guarantee(count_budget(definition, budget))


def resolve_delta(definition: str, delta: float | None) -> float | None:
    """The delta of the (epsilon, delta) statement: as given, else :data:`DEFAULT_DELTA`, except for pure
    DP, which is (epsilon, 0)-DP and needs none (None)."""
    if delta is not None:
        return check_delta(delta)
    return DEFAULT_DELTA if _measure(definition).needs_delta else None


def _value(g: PureDP | ZCDP) -> float:
    return g.epsilon if isinstance(g, PureDP) else g.rho


def _epsilon_of(g: PureDP | ZCDP, delta: float | None) -> float:
    """epsilon at ``delta`` (safe, MATH.md 5.8); a pure guarantee with no delta is its own epsilon."""
    if delta is None:
        assert isinstance(g, PureDP), "zCDP needs a delta"
        return g.epsilon
    return g.epsilon_at(delta)


def calibrate_budget(definition: str, epsilon: Any, delta: float | None = None) -> float:
    """The largest total budget (to a relative 1e-12, then rounded down to 6 significant digits, so that
    it prints as it is) whose guarantee, converted to (epsilon, delta) at ``delta`` (:func:`resolve_delta`),
    is at most ``epsilon``.

    Pure DP: ``epsilon`` itself (an epsilon-DP budget is (epsilon, delta)-DP at every delta). zCDP: the
    largest ``rho`` whose Canonne-Kamath-Steinke conversion (2020, Prop. 12; MATH.md 5.8; the tightest
    conversion of a zCDP guarantee implemented here, :meth:`ZCDP.epsilon_at`) is at most ``epsilon``; GDP:
    the largest ``mu`` whose declared ``mu^2/2``-zCDP converts within ``epsilon`` (the discrete Gaussian is
    not known to be ``mu``-GDP, so GDP's own, tighter profile is not used). Found by bisection whose lower
    end always satisfies the check with the very conversion the plan reports, so the returned budget's
    (epsilon, delta) never exceeds ``epsilon``; :class:`BudgetError` when even the smallest budget does.
    """
    target = check_positive(epsilon, "epsilon")
    m = _measure(definition)
    d = cast(Definition, definition)
    if not m.needs_delta:  # an epsilon-DP budget is (epsilon, delta)-DP at every delta
        return target
    dl = resolve_delta(d, delta)

    def fits(b: float) -> bool:
        try:
            return _epsilon_of(budget_guarantee(d, b), dl) <= target
        except BudgetError:  # beyond the representable (mu^2/2 not a float): does not fit
            return False

    return largest_fitting(
        fits,
        target,
        1e300,
        f"epsilon = {epsilon!r} at delta = {dl:g} is below what the conversion certifies for any "
        f"{m.amount} > 0; ask for a larger epsilon or delta",
    )


def largest_fitting(fits: Callable[[float], bool], target: float, cap: float, refusal: str) -> float:
    """The largest amount in (0, ``cap``] with ``fits`` (monotone: true up to some amount), to a
    relative 1e-12, by doubling from ``max(1, target)`` then bisection whose lower end always fits,
    rounded DOWN to a short decimal (6 significant digits, :mod:`overlapdp.display`): the budget
    printed is the budget used, so it can be typed back in (a service's budget or quota) and shares
    computed from it stay within it; smaller than the bisection's, so it still fits.
    :class:`BudgetError` (``refusal``) when no positive amount fits."""
    lo, hi = 0.0, max(1.0, target)
    while fits(hi) and hi < cap:
        lo, hi = hi, hi * 2
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi or hi - lo <= 1e-12 * hi:
            break
        if fits(mid):
            lo = mid
        else:
            hi = mid
    if not lo > 0:
        raise BudgetError(refusal)
    short = float(display.remaining(lo))
    return min(short if short > 0 else lo, cap)


@dataclass(frozen=True)
class AnswerPlan:
    """How the budget is spent: the maximum overlap, and the per-query budget under each accounting."""

    definition: Definition
    accounting: Accounting
    budget: float
    level: float
    queries: int
    gamma: int  # the maximum overlap, or the floor of its safe upper bound when not exact
    gamma_exact: bool
    gamma_lower: int
    overlap_algorithm: str
    witness: dict[str, Any] | None
    sequential_share: float
    overlap_share: float
    delta: float | None = None  # of the (epsilon, delta) statement; None: pure DP, (epsilon, 0)
    target_epsilon: float | None = None  # the --epsilon the budget was calibrated to, if any
    #: the optimal allocation's per-query shares (MATH.md 2.10), or None: every query ``per_query``
    shares: tuple[float, ...] | None = None
    #: with ``shares``: the certified bound of the worst row's additive cost (<= the budget's) and how
    #: the plan was certified (``Allocation.method``)
    worst_row: float | None = None
    allocation_method: str | None = None
    #: the neighbour relation the guarantees are for (MATH.md 2.9): under ``"replace"`` a pair of rows
    #: pays the charges of both, so the overlap-aware side composes ``2 * gamma`` shares (the doubling
    #: bound) and sums are calibrated to their replace-one sensitivity
    neighbouring: Neighbouring = "add_remove"

    def __repr__(self) -> str:
        """The dataclass's fields, each privacy figure rounded as the CLI prints it (:mod:`overlapdp.display`):
        the budget, the shares and the epsilon asked down (a budget of ``0.1 + 0.2`` shows as ``0.3``, never
        ``0.30000000000000004``, and a figure typed back is admitted), the certified worst row and delta up."""
        shown: dict[str, Callable[[float], str]] = {
            "budget": display.remaining,
            "sequential_share": display.remaining,
            "overlap_share": display.remaining,
            "target_epsilon": display.remaining,
            "worst_row": display.spent,
            "delta": display.spent,
        }

        def one(name: str, value: Any) -> str:
            if name == "shares" and value is not None:
                return "(" + ", ".join(display.remaining(v) for v in value) + ")"
            if name in shown and isinstance(value, float | int) and not isinstance(value, bool):
                return shown[name](value)
            return repr(value)

        body = ", ".join(f"{f.name}={one(f.name, getattr(self, f.name))}" for f in fields(self))
        return f"AnswerPlan({body})"

    @property
    def payers(self) -> int:
        """How many even shares the worst neighbouring pair pays under overlap-aware accounting:
        ``gamma`` (add/remove: one row) or ``2 * gamma`` (replace-one: two rows, MATH.md 2.9)."""
        return self.gamma * (2 if self.neighbouring == "replace" else 1)

    @property
    def allocation(self) -> str:
        return "even" if self.shares is None else "optimal"

    def budget_of(self, i: int) -> CountBudget:
        """Query ``i``'s budget: its own share under the optimal allocation, else the even share."""
        return self.per_query_budget if self.shares is None else count_budget(self.definition, self.shares[i])

    def _composed(self) -> dict[str, list[PureDP | ZCDP]]:
        """Each side's declared guarantee as one composed value: every query (sequential) and the worst
        row (overlap-aware: ``gamma`` even shares, or the allocation's certified worst row)."""
        if self.shares is None:
            g = declared_guarantee(self.per_query_budget)
            return {"sequential": [g] * self.queries, "overlap": [g] * self.payers}
        every = [declared_guarantee(self.budget_of(i)) for i in range(self.queries)]
        assert self.worst_row is not None
        # the worst pair of rows under replace-one pays at most twice the worst row (MATH.md 2.9)
        pair = Fraction(self.worst_row) * (2 if self.neighbouring == "replace" else 1)
        worst: PureDP | ZCDP
        if isinstance(every[0], PureDP):
            worst = PureDP(float_up(pair))
        elif isinstance(self.per_query_budget, GDP):
            worst = ZCDP(float_up(pair / 2))  # declared rho = mu^2 / 2 per query
        else:
            worst = ZCDP(float_up(pair))
        return {"sequential": every, "overlap": [worst]}

    @property
    def per_query(self) -> float:
        return self.overlap_share if self.accounting == "overlap" else self.sequential_share

    @property
    def per_query_budget(self) -> CountBudget:
        return count_budget(self.definition, self.per_query)

    def guarantees(self) -> dict[str, dict[str, float]]:
        """The guarantee of releasing every query with the chosen per-query budget: composed over all
        ``t`` queries (sequential) and over the ``gamma`` queries of the worst row (overlap-aware,
        MATH.md 2.4), with the definitions' own composition."""
        out: dict[str, dict[str, float]] = {}
        for name, gs in self._composed().items():
            if isinstance(gs[0], PureDP):
                out[name] = {"epsilon": PureDP.compose(cast(list[PureDP], gs)).epsilon}
            elif isinstance(self.per_query_budget, GDP):
                # In GDP's own unit (mu composes in l2, MATH.md 2.4), and the declared zCDP it stands for.
                if self.shares is None:
                    mu = GDP.compose([GDP(self.per_query)] * len(gs)).mu
                elif name == "overlap":
                    assert self.worst_row is not None
                    mu = sqrt_up(Fraction(self.worst_row) * (2 if self.neighbouring == "replace" else 1))
                else:
                    mu = GDP.compose([GDP(x) for x in self.shares]).mu
                out[name] = {"mu": mu, "declared_zcdp_rho": ZCDP.compose(cast(list[ZCDP], gs)).rho}
            else:
                out[name] = {"rho": ZCDP.compose(cast(list[ZCDP], gs)).rho}
        return out

    def epsilon_delta(self) -> dict[str, float]:
        """Both guarantees as (epsilon, delta) at :attr:`delta` (0 for pure DP without one), by the
        declared definition's tightest conversion (MATH.md 5.8). A guarantee within the total budget (the
        overlap-aware one always, the sequential one under sequential accounting) also holds the budget's
        own conversion; the smaller of two valid bounds is reported, so a calibrated plan never states
        more than its target epsilon."""
        whole = budget_guarantee(self.definition, self.budget)
        out: dict[str, float] = {"delta": 0.0 if self.delta is None else self.delta}
        for name, gs in self._composed().items():
            composed: PureDP | ZCDP = (
                PureDP.compose(cast(list[PureDP], gs))
                if isinstance(gs[0], PureDP)
                else ZCDP.compose(cast(list[ZCDP], gs))
            )
            eps = _epsilon_of(composed, self.delta)
            if _value(composed) <= _value(whole):
                eps = min(eps, _epsilon_of(whole, self.delta))
            out[name] = eps
        return out

    def noise_std(self, share: float) -> float:
        return math.sqrt(noise_for(count_budget(self.definition, share)).variance)

    @property
    def noise_reduction(self) -> float:
        """1 - (noise std under overlap-aware shares) / (noise std under sequential shares), from the
        exact discrete noise distributions."""
        try:
            seq = self.noise_std(self.sequential_share)
        except BudgetError:  # the sequential share would need noise beyond the supported scale
            seq = math.inf
        if seq == 0 or math.isinf(seq):
            # No noise either way (huge budgets), or too much to calibrate sequentially: the ratio of
            # the continuous scales, gamma/t (Laplace) or sqrt(gamma/t) (Gaussian).
            ratio = min(1.0, self.payers / self.queries)
            laplace = isinstance(self.per_query_budget, PureDP)
            return 0.0 if seq == 0 else 1 - (ratio if laplace else math.sqrt(ratio))
        return 1 - self.mean_noise_std / seq

    def noise_reduction_vs(self, payers: int) -> float:
        """1 - (this plan's noise std) / (the std of an even share over ``payers`` charges), from the
        exact discrete noise distributions; e.g. ``payers`` = :func:`parallel_payers`, the charges of
        partition-based parallel composition (a GROUP BY charged once)."""
        try:
            other = self.noise_std(even_share(self.definition, self.budget, payers))
        except BudgetError:  # the other share would need noise beyond the supported scale
            return 1.0
        return 0.0 if other == 0 else 1 - self.mean_noise_std / other

    @property
    def mean_noise_std(self) -> float:
        """The root mean square of the queries' noise standard deviations (the even share's std when
        every query has it)."""
        if self.shares is None:
            return self.noise_std(self.per_query)
        return math.sqrt(sum(self.noise_std(x) ** 2 for x in self.shares) / len(self.shares))

    def to_json(self) -> dict[str, Any]:
        unit = _measure(self.definition).amount
        per_query: dict[str, Any] = {unit: self.per_query}
        if self.shares is not None:  # each query its own share: the range here, each one in "allocation"
            per_query = {f"{unit}_min": min(self.shares), f"{unit}_max": max(self.shares)}
        declared = declared_guarantee(self.per_query_budget)
        gdp = isinstance(self.per_query_budget, GDP)
        if gdp:
            assert isinstance(declared, ZCDP)
            per_query["declared_zcdp_rho"] = declared.rho
        out: dict[str, Any] = {
            "definition": self.definition,
            "neighbouring": self.neighbouring,
            "budget": {unit: self.budget},
            "accounting": self.accounting,
            "queries": self.queries,
            "gamma": self.gamma,
            "gamma_exact": self.gamma_exact,
            "gamma_lower": self.gamma_lower,
            "overlap_algorithm": self.overlap_algorithm,
            "per_query": per_query,
            "sequential_share": self.sequential_share,
            "overlap_share": self.overlap_share,
            "noise": noise_for(self.per_query_budget).describe()
            if self.shares is None
            else "per query, calibrated to its share (see allocation)",
            "noise_std": self.mean_noise_std,
            "guarantee": self.guarantees(),
            "epsilon_delta": self.epsilon_delta(),
            "witness": self.witness,
            "noise_reduction": self.noise_reduction,
            "level": self.level,
        }
        if gdp:
            out["budget"]["declared_zcdp_rho"] = float(_measure(self.definition).declared_total(self.budget))
            out["note"] = (
                "the discrete Gaussian is declared and accounted as zCDP with ρ = μ²/2 (CKS 2020); "
                "(ε, δ) is converted from that ρ"
            )
        if self.target_epsilon is not None:
            out["target_epsilon"] = self.target_epsilon
        out["allocation"] = {"kind": self.allocation}
        if self.shares is not None:
            out["allocation"].update(
                {"shares": list(self.shares), "worst_row": self.worst_row, "method": self.allocation_method}
            )
        return out


def plan_answers(
    queries: Sequence[PredicateQuery],
    budget: float | None,
    definition: str,
    accounting: str = "overlap",
    *,
    level: float = 0.95,
    effort: float | None = DEFAULT_EFFORT,
    delta: float | None = None,
    epsilon: float | None = None,
    allocation: str = "even",
    objective: str = "variance",
    neighbouring: str = "add_remove",
) -> AnswerPlan:
    """Validate the request and share the budget (see the module docstring); draws no noise.

    ``allocation="optimal"`` (overlap-aware accounting only) gives each query its own share, chosen
    where the rows can afford it (:func:`overlapdp.mechanisms.allocation.allocate`, MATH.md 2.10: every
    row within the budget, never worse than even shares), with the line weights as importance weights
    and ``objective`` "variance" (least weighted total) or "relative" (least largest weighted).

    The total is either ``budget`` (in the definition's unit: epsilon, rho or mu) or, given ``epsilon``
    instead, the largest budget whose (epsilon, delta) at ``delta`` is at most it (:func:`calibrate_budget`).

    ``neighbouring="replace"`` states every guarantee for replace-one neighbours (MATH.md 2.9): a pair
    of rows pays the charges covering either, so the overlap-aware even share is the one of ``2 * gamma``
    payers (the doubling bound; ``B/(2 gamma)``, or ``B/sqrt(2 gamma)`` for GDP) and the optimal
    allocation keeps every row within half the additive budget; a count's sensitivity is 1 under both
    relations, so sequential shares do not change; a sum's noise is calibrated to its replace-one
    sensitivity (:meth:`overlapdp.query.aggregate.Clipping.sensitivity`).
    """
    if (budget is None) == (epsilon is None):
        raise BudgetError(
            "give the budget either as --budget (epsilon, rho or mu, in the definition's unit) "
            "or as --epsilon (with --delta), not both and not neither"
        )
    _measure(definition)
    dl = resolve_delta(definition, delta)
    b = check_budget(budget) if budget is not None else calibrate_budget(definition, epsilon, dl)
    if accounting not in ACCOUNTINGS:
        raise AnswerError(f"unknown accounting {accounting!r}; choose one of {', '.join(ACCOUNTINGS)}")
    lv = validation.check_level(level)
    qs = list(queries)
    if not qs:
        raise AnswerError("the workload has no queries")
    d = cast(Definition, definition)
    from overlapdp.overlap import max_overlap

    res = max_overlap(qs, comp="count", effort=effort)
    # Overlaps are integers: the floor of a safe upper bound is still safe; never use the lower bound.
    gamma = max(1, math.floor(float(res.value if res.exact else res.upper) + 1e-9))
    relation = check_neighbouring(neighbouring, AnswerError)
    seq = even_share(d, b, len(qs))
    ovl = even_share(d, b, gamma * (2 if neighbouring == "replace" else 1))
    used = ovl if accounting == "overlap" else seq
    if allocation not in ("even", "optimal"):
        raise AnswerError(f"unknown allocation {allocation!r}; choose one of even, optimal")
    shares: tuple[float, ...] | None = None
    plan = None
    if allocation == "optimal":
        if accounting != "overlap":
            raise AnswerError("the optimal allocation is overlap-aware: use it with accounting 'overlap'")
        from overlapdp.mechanisms.allocation import allocate

        if objective not in ("variance", "relative"):
            raise AnswerError(f"unknown objective {objective!r}; choose one of variance, relative")
        plan = allocate(qs, b, d, objective=cast(Any, objective), neighbouring=neighbouring, effort=effort)
        shares = plan.shares
    try:  # every calibrated noise scale must be finite and representable (mechanisms.calibration)
        for x in (used,) if shares is None else dict.fromkeys(shares):
            noise_for(count_budget(d, x))
    except BudgetError as exc:
        raise BudgetError(f"budget = {b!r} is too small: its per-query share {exc}") from None
    return AnswerPlan(
        definition=d,
        accounting=accounting,
        budget=b,
        level=lv,
        queries=len(qs),
        gamma=gamma,
        gamma_exact=bool(res.exact),
        gamma_lower=math.floor(float(res.lower) + 1e-9),
        overlap_algorithm=res.algorithm,
        witness=res.witness,
        sequential_share=seq,
        overlap_share=ovl,
        delta=dl,
        target_epsilon=None if epsilon is None else check_positive(epsilon, "epsilon"),
        shares=shares,
        worst_row=None if plan is None else plan.worst_row,
        allocation_method=None if plan is None else plan.method,
        neighbouring=relation,
    )


def parallel_payers(ids: Sequence[str | None], groups: dict[str, tuple[str, GroupLabels]]) -> int:
    """How many charges partition-based parallel composition makes for the queries ``ids``: each GROUP BY
    family once (its cells are pairwise disjoint, MATH.md 2.5; Tumult Analytics and OpenDP charge a
    group-by so), every other query once. Overlap-aware accounting never needs more (a row is in at
    most one cell of a family)."""
    families = {groups[i][0] for i in ids if i is not None and i in groups}
    return sum(1 for i in ids if i is None or i not in groups) + len(families)


@dataclass(frozen=True)
class WorkloadAnswers:
    """Noisy answers with error bars and the plan that priced them (no exact figure: how many rows lie
    outside the domain is the data owner's, from ``overlapdp schema check``); ``consistent``: their
    projection onto a non-negative table's answers, when asked for (:mod:`overlapdp.mechanisms.consistency`;
    post-processing, the raw answers are kept as they are).

    ``groups`` maps the id of each GROUP BY cell to its family's id and its group labels
    (:meth:`overlapdp.query.Workload.groups`); the JSON form gives those cells ``"family"`` and
    ``"group"``, and :meth:`frame` one row per cell."""

    answers: list[NoisyAnswer | NoisySum | NoisyMean]
    plan: AnswerPlan
    groups: dict[str, tuple[str, GroupLabels]] = field(default_factory=dict)
    consistent: ConsistentAnswers | None = None

    def to_json(self) -> dict[str, Any]:
        out = []
        for a in self.answers:
            item = _answer_json(a)
            cell = self.groups.get(a.query_id or "")
            if cell is not None:  # a GROUP BY cell: its family and labels right after its id
                item = {"id": item.pop("id"), "family": cell[0], "group": dict(cell[1]), **item}
            out.append(item)
        doc: dict[str, Any] = {"answers": out, "privacy": self.plan.to_json()}
        if self.groups:  # what the peers' parallel composition would give, beside sequential
            payers = self.parallel_payers
            doc["privacy"]["parallel_composition"] = {
                "payers": payers,
                "noise_reduction": self.plan.noise_reduction_vs(payers),
                "note": "each GROUP BY charged once (its cells are disjoint), every other query once",
            }
        if self.consistent is not None:
            doc["consistent"] = self.consistent.to_json()
        return doc

    @property
    def parallel_payers(self) -> int:
        """The charges of partition-based parallel composition (:func:`parallel_payers`)."""
        return parallel_payers([a.query_id for a in self.answers], self.groups)

    def frame(self, family: str | None = None) -> pd.DataFrame:
        """The answers as a pandas DataFrame: with ``family``, one row per cell of that GROUP BY (a
        column per grouped attribute, then ``answer``, ``low``, ``high``, ``level``), empty cells
        included; without, one row per answer (``id``, ``answer``, ``low``, ``high``, ``level``)."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        by: list[str] = []
        for a in self.answers:
            cell = self.groups.get(a.query_id or "")
            if family is not None:
                if cell is None or cell[0] != family:
                    continue
                labels = dict(cell[1])
                by = list(labels)
                head: dict[str, Any] = labels
            else:
                head = {"id": a.query_id}
            rows.append({**head, "answer": a.value, "low": a.low, "high": a.high, "level": a.level})
        if family is not None and not rows:
            known = sorted({f for f, _ in self.groups.values()})
            raise AnswerError(
                f"no GROUP BY {family!r} among the answers (families: {', '.join(known) or 'none'})"
            )
        columns = [*by, "answer", "low", "high", "level"] if family is not None else None
        return pd.DataFrame(rows, columns=columns)


def _answer_json(a: NoisyAnswer | NoisySum | NoisyMean) -> dict[str, Any]:
    """An answer in the CLI's JSON: the answer's own ``to_json`` (one shape, ``answer`` and
    ``error_bar``, for the library and the CLI)."""
    return dict(a.to_json())


def answer_workload(
    engine: Engine | Any,
    queries: Sequence[PredicateQuery],
    plan: AnswerPlan,
    *,
    rng: RngLike = None,
    served: bool = False,
    aggregates: Sequence[Aggregate] | None = None,
    consistent: bool = False,
) -> WorkloadAnswers:
    """Exact counts once from ``engine``, then independent exact noise at the plan's per-query budget.

    ``aggregates`` (one per query, e.g. :attr:`overlapdp.query.Workload.aggregates`; default: a
    workload's own, else all counts) makes some queries clipped sums or means
    (:mod:`overlapdp.mechanisms.sums`): same per-query budget, noise at the sum's sensitivity under the
    plan's neighbour relation.

    ``consistent=True`` also projects the noisy answers onto the answers of a non-negative table
    (:func:`overlapdp.mechanisms.consistency.make_consistent`; with sums and means,
    :func:`~overlapdp.mechanisms.consistency.project_aggregates`: post-processing, no privacy cost,
    weighted total squared error never increased; MATH.md 6.5, 6.5.1). Its cells are enumerated before any counting, so a workload beyond
    the cell limit fails (:class:`~overlapdp.mechanisms.consistency.ConsistencyError`) before noise is drawn.

    ``engine`` is an open :class:`~overlapdp.engine.Engine` or a table of any kind
    :func:`overlapdp.engine.inputs.open_data` accepts (pandas, Polars, Arrow, a DuckDB relation), which
    is opened on the queries' schema with its natural engine and closed afterwards. Counting (where data
    problems surface) happens before any noise is drawn.
    """
    qs = list(queries)
    if len(qs) != plan.queries:
        raise AnswerError("the plan was made for another workload")
    if aggregates is None:
        aggregates = getattr(queries, "aggregates", None) or None
    if aggregates is not None and any(a != COUNT for a in aggregates):
        return _answer_aggregates(
            engine,
            qs,
            list(aggregates),
            plan,
            rng=rng,
            served=served,
            groups=_groups(queries),
            consistent=consistent,
        )
    if consistent:
        from overlapdp.mechanisms.consistency import workload_design

        design = workload_design(qs)
    if data_kind(engine) == "engine":  # an open Engine (overlapdp.engine.base)
        counts = engine.counts(qs)
    else:
        if not qs:
            raise AnswerError("the workload is empty")
        with open_table(engine, qs[0].schema) as opened:
            counts = opened.counts(qs)
    if plan.shares is None:
        noisy = add_noise(
            counts, plan.per_query_budget, level=plan.level, ids=[q.id for q in qs], rng=rng, served=served
        )
    else:  # each query at its own share (one randomness source for all)
        source = resolve_source(rng, served=served)
        noisy = [
            add_noise([c], plan.budget_of(i), level=plan.level, ids=[q.id], rng=source)[0]
            for i, (q, c) in enumerate(zip(qs, counts, strict=True))
        ]
    fitted = None
    if consistent:
        from overlapdp.mechanisms.consistency import project

        fitted = project(
            design, [a.value for a in noisy], [a.noise.variance for a in noisy], ids=[q.id for q in qs]
        )
    answers: list[NoisyAnswer | NoisySum | NoisyMean] = list(noisy)
    return WorkloadAnswers(answers, plan, _groups(queries), fitted)


def _groups(queries: Any) -> dict[str, tuple[str, GroupLabels]]:
    """The GROUP BY cells of a :class:`~overlapdp.query.Workload` (none for a plain list of queries)."""
    from overlapdp.query import Workload

    return queries.groups() if isinstance(queries, Workload) else {}


def check_aggregates(plan: AnswerPlan, aggregates: Sequence[Aggregate]) -> None:
    """Every sum's and mean's noise can be calibrated at the plan's per-query budget (a too-small budget
    for a large sensitivity is a :class:`BudgetError` naming the attribute), before any data is read or
    noise drawn."""
    for i, a in enumerate(aggregates):
        if a.clipping is None:
            continue
        budget = plan.budget_of(i)
        sensitivity = a.clipping.sensitivity(plan.neighbouring)
        part = budget if a.kind == "sum" else split_budget(budget)
        try:
            noise_for(part, sensitivity)
            if a.kind == "mean":
                noise_for(part, 1)
        except BudgetError as exc:
            raise BudgetError(
                f"{a.kind} of {a.clipping.column!r} (sensitivity {sensitivity} steps of {a.clipping.step!r}): {exc}"
            ) from None


def _exact_aggregates(
    eng: Engine, qs: list[PredicateQuery], aggs: list[Aggregate]
) -> tuple[list[int], dict[Clipping, list[int]]]:
    """Exact counts of every query and exact clipped sums (units of step) per clipping, in one place."""
    counts = eng.counts(qs)
    sums: dict[Clipping, list[int]] = {}
    for clip in dict.fromkeys(a.clipping for a in aggs if a.clipping is not None):
        idx = [i for i, a in enumerate(aggs) if a.clipping == clip]
        got = eng.sums([qs[i] for i in idx], clip)
        full = [0] * len(qs)
        for i, v in zip(idx, got, strict=True):
            full[i] = v
        sums[clip] = full
    return counts, sums


def _answer_aggregates(
    engine: Engine | Any,
    qs: list[PredicateQuery],
    aggs: list[Aggregate],
    plan: AnswerPlan,
    *,
    rng: RngLike,
    served: bool,
    groups: dict[str, tuple[str, GroupLabels]],
    consistent: bool = False,
) -> WorkloadAnswers:
    """Counts, sums and means of a mixed workload: all exact values first (data problems surface before
    any noise), then independent noise per query at the plan's per-query budget; with ``consistent``,
    their joint projection (:func:`overlapdp.mechanisms.consistency.project_aggregates`, MATH.md 6.5.1)."""
    if len(aggs) != len(qs):
        raise AnswerError("give one aggregate per query")
    check_aggregates(plan, aggs)
    if consistent:  # the cells first: a workload beyond the limits fails before any noise
        from overlapdp.mechanisms.consistency import workload_design

        design = workload_design(qs)
    if data_kind(engine) == "engine":  # an open Engine (overlapdp.engine.base)
        counts, sums = _exact_aggregates(engine, qs, aggs)
    else:
        if not qs:
            raise AnswerError("the workload is empty")
        with open_table(engine, qs[0].schema) as opened:
            counts, sums = _exact_aggregates(opened, qs, aggs)
    source = resolve_source(rng, served=served)
    answers: list[NoisyAnswer | NoisySum | NoisyMean] = []
    for q, a, i in zip(qs, aggs, range(len(qs)), strict=True):
        budget = plan.budget_of(i)
        if a.clipping is None:
            answers.extend(add_noise([counts[i]], budget, level=plan.level, ids=[q.id], rng=source))
        elif a.kind == "sum":
            answers.extend(
                add_sum_noise(
                    [sums[a.clipping][i]],
                    a.clipping,
                    budget,
                    neighbouring=plan.neighbouring,
                    level=plan.level,
                    ids=[q.id],
                    rng=source,
                )
            )
        else:
            answers.extend(
                add_mean_noise(
                    [sums[a.clipping][i]],
                    [counts[i]],
                    a.clipping,
                    budget,
                    neighbouring=plan.neighbouring,
                    level=plan.level,
                    ids=[q.id],
                    rng=source,
                )
            )
    fitted = None
    if consistent:
        from overlapdp.mechanisms.consistency import project_aggregates

        fitted = project_aggregates(design, answers, ids=[q.id for q in qs])
    return WorkloadAnswers(answers, plan, groups, fitted)
