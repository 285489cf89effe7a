"""approximate DP (epsilon, delta; PLD and the advanced rule): :class:`ApproxMeasure` (MATH.md 2.7, 5.8)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from overlapdp.errors import AdaptivityError
from overlapdp.privacy import approx_rooms
from overlapdp.privacy.definitions import ApproxDP, BudgetError, PureDP
from overlapdp.privacy.measures._checks import (
    _advanced_check,
    _exact_advanced,
    _float_advanced,
)
from overlapdp.privacy.measures.base import (
    AccountingContext,
    DefinitionGuarantee,
    FilterOptions,
    FilterRule,
    Measure,
    TrackSpec,
    Value,
)
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP
from overlapdp.query import PredicateQuery


class ApproxMeasure(Measure[ApproxDP]):
    """(epsilon, delta)-DP. The odometer's value is the maximum over maximal overlapping sets of the PLD
    (or KOV) composition's epsilon at delta (MATH.md 2, 5); the filter's, by default, the combined
    advanced / basic composition rule that stays valid under full adaptivity (MATH.md 5.6, see
    :mod:`overlapdp.privacy.privacy_filter`)."""

    name = "approx"
    label = "(epsilon, delta)-DP"
    budget_type = ApproxDP
    parameters = ("epsilon", "delta")

    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        if not all(m.pld_composable for m in mechs):
            return None  # e.g. an OpaqueTCDP: known through a profile bound only, no dominating PLD
        return ctx.approx_guarantee(mechs, queries, delta, earlier)

    def to_epsilon(self, value: Value, delta: float) -> float:
        """The native value is already epsilon at the report's delta."""
        assert isinstance(value, float)
        return value

    def budget_value(self, budget: ApproxDP) -> float:
        return budget.epsilon

    amount = "epsilon"
    options = (("composition", "advanced"),)
    native_is_epsilon = True
    noise = "discrete_laplace"
    tracked = True
    joint = True

    def budget(self, amount: float, params: Mapping[str, Any]) -> ApproxDP:
        return ApproxDP(amount, params["delta"])

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        """The filter's epsilon already holds at the budget's delta."""
        return max(float(amount), 0.0)

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> PureDP:
        """The discrete Laplace of epsilon: an (epsilon, 0) charge."""
        return PureDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> PureDP:
        return PureDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        return epsilon

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """The filter's value is the smaller of the basic and the advanced rule's epsilon (MATH.md 5.6):
        not knowing which rule gave ``spent``, the smaller of the two rooms, quota - spent (basic) and
        the advanced rule's room for a sum of squares whose value is ``spent``; a charge of that size
        passes whichever rule gave it."""
        basic = super().remaining(quota, spent, params)
        if basic == 0.0 or params.get("composition", "advanced") != "advanced":
            return basic
        log_term = 2 * math.log(2 / float(params["delta"]))  # the service's slack delta' = delta / 2

        def root_of(e: float) -> float:  # u with sqrt(log_term) u + u^2 / 2 = e, stably
            return 2 * e / (math.sqrt(log_term + 2 * e) + math.sqrt(log_term))

        u_max, u_now = root_of(quota), root_of(spent)
        advanced = math.sqrt(max(0.0, (u_max - u_now) * (u_max + u_now))) * (1 - 1e-9)  # (float margin)
        return max(0.0, min(basic, advanced))

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """Per-track bounds (sum of epsilons, sum of squares): every row within basic or every row within
        advanced composition (MATH.md 5.6)."""
        if isinstance(upper, tuple):
            return approx_rooms.fits(upper[0], upper[1], added, budget, float(params["delta"]))
        return super().fits_with(upper, added, budget, params)

    def concurrent(self, spends: Sequence[float]) -> float | None:
        """None: the analysts' deltas would add; only the global filter bounds approximate DP."""
        return None

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """The smaller of the basic and the advanced rule at the per-track bounds (MATH.md 5.6)."""
        return approx_rooms.bound_figures(tracks[2], tracks[0], quota, float(params["delta"]))

    def joint_figures(
        self, schema: Any, charges: Sequence[tuple[Any, float, int]], quota: float, params: Mapping[str, Any]
    ) -> tuple[float, float] | None:
        """Every row pattern of the charges (:func:`overlapdp.privacy.approx_rooms.joint_figures`)."""
        return approx_rooms.joint_figures(schema, charges, quota, float(params["delta"]))

    def rule(self, budget: ApproxDP, factor: float, options: FilterOptions) -> FilterRule:
        """Three tracks per row, ``[sum eps^2, sum delta, sum eps]``, and the combined rule on them (the
        module docstring of :mod:`overlapdp.privacy.privacy_filter`; MATH.md 5.6). ``composition="optimal"``
        is refused when ``adaptive`` (:class:`AdaptivityError`)."""
        composition = options.composition
        if composition == "optimal" and options.adaptive:
            raise AdaptivityError(
                "optimal (epsilon, delta) composition needs the parameters fixed in advance; for "
                "adaptively chosen charges use composition='advanced' (Whitehouse et al. 2023 filter)"
            )
        if composition not in ("advanced", "optimal"):
            raise BudgetError(f"composition must be 'advanced' or 'optimal', got {composition!r}")
        if budget.delta <= 0:
            raise BudgetError("an (epsilon, delta) filter needs delta > 0; use a PureDP budget for delta = 0")
        delta_slack = options.delta_slack
        slack = budget.delta / 2 if delta_slack is None else float(delta_slack)
        if not 0 < slack <= budget.delta:
            raise BudgetError(f"delta_slack must lie in (0, {budget.delta}], got {delta_slack!r}")
        optimal = composition == "optimal"
        if optimal and options.neighbouring == "replace":
            raise BudgetError("the optimal (epsilon, delta) filter supports add/remove neighbours only")
        per_mech_delta = options.per_mechanism_delta

        def eps_delta(m: Mechanism) -> tuple[float, float]:
            p = m.pure()
            if p is not None:
                return p.epsilon, 0.0
            if isinstance(m, OpaqueApproxDP):
                return m.epsilon, m.delta
            if per_mech_delta is None:
                raise BudgetError(
                    f"{m.name} has no pure-DP guarantee: give per_mechanism_delta to charge it as (epsilon, delta)"
                )
            g = m.approx(per_mech_delta)
            return g.epsilon, g.delta

        return FilterRule(
            tracks=(
                TrackSpec(
                    "l2", lambda m: eps_delta(m)[0], lambda m: Fraction(eps_delta(m)[0]) ** 2, squared=True
                ),
                TrackSpec("sum", lambda m: eps_delta(m)[1], lambda m: Fraction(eps_delta(m)[1])),
                # basic composition's sum of epsilons: a row may stay within budget by either rule
                # (MATH.md 5.6), so the rule is decided per row, not per track
                TrackSpec("sum", lambda m: eps_delta(m)[0], lambda m: Fraction(eps_delta(m)[0])),
            ),
            check=_advanced_check(factor, budget.epsilon, budget.delta - slack, slack),
            exact_ok=_exact_advanced(factor, budget.epsilon, budget.delta, slack),
            # Add/remove: the rule per row, on the row's own loads (MATH.md 5.6). Replace-one: the rule
            # at the doubled per-track MAXIMA only ("every row passes basic, or every row passes
            # advanced"): a pair pays the charges covering exactly one of its rows, and row x passing
            # by basic composition while x' passes by advanced says nothing of the pair (MATH.md 2.9).
            row_verdict=None
            if options.neighbouring == "replace"
            else _float_advanced(factor, budget.epsilon, budget.delta, slack),
            optimal=optimal,
        )
