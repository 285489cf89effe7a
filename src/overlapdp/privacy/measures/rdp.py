"""Renyi DP (a curve over orders): :class:`RDPMeasure` (MATH.md 2.4, 5.8)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from overlapdp.exact import float_down, float_up
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import RDP, ZCDP, BudgetError, check_rdp_rule
from overlapdp.privacy.measures._checks import (
    _vector_check,
)
from overlapdp.privacy.measures.base import (
    AdditiveMeasure,
    Comp,
    FilterOptions,
    FilterRule,
    TrackSpec,
    Value,
    _need,
)
from overlapdp.privacy.mechanisms import Mechanism


@dataclass(frozen=True)
class RDPMeasure(AdditiveMeasure[RDP, RDP]):
    """Rényi DP on a fixed order grid: per order, the per-row sum of epsilon(alpha) (Mironov 2017 Prop. 1;
    MATH.md 2.4: the maximum may sit at a different row for each order)."""

    orders: tuple[float, ...] = field(default=tuple(conv.DEFAULT_ORDERS))
    name: ClassVar[str] = "rdp"
    label: ClassVar[str] = "Rényi DP"
    budget_type: ClassVar[type] = RDP
    parameters: ClassVar[tuple[str, ...]] = ("orders", "epsilons")
    comp: ClassVar[Comp] = "vector"
    # Served: the library's RDP budget is a curve on an order grid; the service keeps one number per
    # budget, quota and charge, so it serves Renyi DP of ONE order alpha fixed by the data set (Mironov
    # 2017, (alpha, epsilon)-RDP): the curve of that one order.
    amount: ClassVar[str] = "epsilon_alpha"
    fixed: ClassVar[tuple[str, ...]] = ("alpha",)
    tracked: ClassVar[bool] = True

    def for_orders(self, orders: Sequence[float]) -> RDPMeasure:
        return RDPMeasure(tuple(orders))

    def for_budget(self, budget: RDP) -> RDPMeasure:
        return self.for_orders(budget.orders)

    def grid(self) -> tuple[float, ...]:
        return self.orders

    def check_options(self, options: FilterOptions) -> None:
        check_rdp_rule(options.rdp_rule)

    def guarantee_of(self, m: Mechanism) -> RDP | None:
        return m.rdp(self.orders)

    def weight(self, g: RDP) -> tuple[float, ...]:
        return g.epsilons

    def native(self, load: np.ndarray, shift: int = 0) -> Value:
        return tuple(float(v) for v in load)

    def best_component(self, load: np.ndarray, delta: float) -> int:
        """The order minimising the conversion (Balle et al. 2020 Thm. 21; MATH.md 5.8)."""
        a = np.asarray(self.orders)
        vals = load + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
        return int(np.argmin(vals))

    def to_epsilon(self, value: Value, delta: float) -> float:
        """The conversion minimised over the orders whose epsilon is finite (inf when none is)."""
        assert isinstance(value, tuple)
        kept = [(a, e) for a, e in zip(self.orders, value, strict=True) if math.isfinite(e)]
        if not kept:
            return math.inf
        return RDP(tuple(a for a, _ in kept), tuple(e for _, e in kept)).epsilon_at(delta)

    def budget_value(self, budget: RDP) -> tuple[float, ...]:
        return budget.epsilons

    def budget(self, amount: float, params: Mapping[str, Any]) -> RDP:
        return RDP((params["alpha"],), (amount,))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> ZCDP:
        """The discrete Gaussian of rho = epsilon_alpha / alpha rounded DOWN, whose (alpha, alpha rho)-RDP
        is within the declared epsilon_alpha."""
        return ZCDP(float_down(Fraction(parameter) / Fraction(params["alpha"])))

    def charged(self, load: float, params: Mapping[str, Any]) -> RDP:
        return RDP((params["alpha"],), (load,))

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """min(eps, alpha eps^2/2) at the order alpha (Mironov 2017 Prop. 3; Bun and Steinke 2016)."""
        alpha = Fraction(params["alpha"])
        return float_up(min(Fraction(epsilon), alpha * Fraction(epsilon) ** 2 / 2))

    def served_spent(self, filt: Any) -> float:
        v = filt.value()
        return float(v[0] if isinstance(v, tuple) else v)

    def served_bound(self, filt: Any, search: Callable[[], float]) -> float:
        return search()

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """A plain sum per row at the one order."""
        spent = float_up(tracks[0][0])
        return spent, self.remaining(quota, spent, params)

    def infinite(self) -> Value:
        return tuple(math.inf for _ in self.orders)

    def check_reset(self, old: RDP, new: RDP) -> None:
        if new.orders != old.orders:
            raise BudgetError("an RDP filter's budget can change only on the same orders")

    def rule(self, budget: RDP, factor: float, options: FilterOptions) -> FilterRule:
        """On the budget's own order grid, exactly at the budget (MATH.md 2.7.2):

        - ``rdp_rule="every"``: per order, every row's sum within the budget's epsilon(alpha), each order
          alone the individual Rényi filter of Feldman and Zrnic 2021 (MATH.md 2.7), so every row's run
          is (alpha, B_alpha)-RDP at every order at once;
        - ``rdp_rule="some"``: while at SOME order every row's sum is within budget, decided at the
          per-order maxima over all rows (one order for every row); the run is then (epsilon,
          sum over the orders of delta_alpha(epsilon))-DP, :meth:`RDP.epsilon_at` with ``rule="some"``.

        Replace-one neighbours: at the doubled per-order maxima (MATH.md 2.9)."""
        orders = budget.orders
        some = check_rdp_rule(options.rdp_rule, BudgetError) == "some"
        fx = Fraction(int(factor))
        bounds = tuple(Fraction(e) for e in budget.epsilons)
        pick = any if some else all
        return FilterRule(
            tracks=(
                TrackSpec(
                    "vector",
                    lambda m: list(_need(m.rdp(orders), m, self.label).epsilons),
                    lambda m: tuple(Fraction(e) for e in _need(m.rdp(orders), m, self.label).epsilons),
                ),
            ),
            check=_vector_check(factor, np.array(budget.epsilons), some=some),
            exact_ok=lambda v: pick(fx * x <= b for x, b in zip(v[0], bounds, strict=True)),
            at_maxima=some,
        )
