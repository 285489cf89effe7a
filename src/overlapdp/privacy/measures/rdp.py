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
    _order_like,
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
    # Served (the service keeps one number per budget, quota and charge): a data set fixes either ONE
    # order ``alpha``, its amount then epsilon_alpha (Mironov 2017, (alpha, epsilon)-RDP, the curve of
    # that one order), or a CURVE of ``orders``, its amount then rho: every served charge is a discrete
    # Gaussian of rho (a session is charged rho = eps^2/2, Bun and Steinke 2016), whose curve alpha rho
    # loads each row it covers per order, and budgets and quotas are the Gaussian curves alpha B of their
    # amounts, kept at EVERY order (MATH.md 2.7.2: with Gaussian curves "some order" admits the same and
    # would pay its union bound).
    amount: ClassVar[str] = "epsilon_alpha"
    fixed: ClassVar[tuple[str, ...]] = ("alpha",)
    alternatives: ClassVar[tuple[str, ...]] = ("orders",)
    tracked: ClassVar[bool] = True
    #: Most orders a served curve may have (each is one component of every per-row load).
    MAX_SERVED_ORDERS: ClassVar[int] = 64

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

    # -- served ------------------------------------------------------------------------------------------
    def amount_of(self, params: Mapping[str, Any]) -> str:
        return "rho" if _curve(params) else self.amount

    def check_fixed(self, given: Mapping[str, Any], definition: str, limit: float) -> dict[str, Any]:
        """Exactly one of ``alpha`` (one order, a number > 1) and ``orders`` (a curve: a list of 1 to
        :attr:`MAX_SERVED_ORDERS` distinct numbers > 1, kept sorted as a list)."""
        if ("alpha" in given) == ("orders" in given):
            raise BudgetError(
                f"a {definition} data set needs either 'alpha' (one order, > 1) or 'orders' (a list of "
                "orders > 1, served as a curve), not both"
            )
        if "alpha" in given:
            return super().check_fixed(given, definition, limit)
        raw = given["orders"]
        if isinstance(raw, str | bytes) or not isinstance(raw, Sequence) or not raw:
            raise BudgetError(f"orders must be a non-empty list of numbers > 1, got {str(raw)[:60]!r}")
        if len(raw) > self.MAX_SERVED_ORDERS:
            raise BudgetError(f"orders may list at most {self.MAX_SERVED_ORDERS} orders, got {len(raw)}")
        orders = sorted(_order_like(a, "each order", limit) for a in raw)
        if len(set(orders)) != len(orders):
            raise BudgetError("orders must be distinct")
        return {"orders": orders}

    def budget(self, amount: float, params: Mapping[str, Any]) -> RDP:
        orders = _curve(params)
        if orders:  # the Gaussian curve of rho = amount, computed as a charge's (rounded up)
            return ZCDP(amount).to_rdp(orders)
        return RDP((params["alpha"],), (amount,))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> ZCDP:
        """One order: the discrete Gaussian of rho = epsilon_alpha / alpha rounded DOWN, whose (alpha,
        alpha rho)-RDP is within the declared epsilon_alpha. A curve: the discrete Gaussian of rho."""
        if _curve(params):
            return ZCDP(parameter)
        return ZCDP(float_down(Fraction(parameter) / Fraction(params["alpha"])))

    def charged(self, load: float, params: Mapping[str, Any]) -> RDP | ZCDP:
        """One order: (alpha, load)-RDP; a curve: load-zCDP, charged by its curve on the orders."""
        if _curve(params):
            return ZCDP(load)
        return RDP((params["alpha"],), (load,))

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """One order: min(eps, alpha eps^2/2) at the order alpha (Mironov 2017 Prop. 3; Bun and Steinke
        2016). A curve: rho = eps^2/2 (Bun and Steinke 2016 Prop. 3.3), its curve alpha rho."""
        if _curve(params):
            return super().from_pure(epsilon, params)
        alpha = Fraction(params["alpha"])
        return float_up(min(Fraction(epsilon), alpha * Fraction(epsilon) ** 2 / 2))

    def served_spent(self, filt: Any, params: Mapping[str, Any]) -> float:
        """One order: the worst row's sum there. A curve: the smallest rho whose Gaussian curve is above
        the worst row's at every order, max over the orders of epsilon(alpha) / alpha, rounded up."""
        v = filt.value()
        orders = _curve(params)
        if orders and isinstance(v, tuple):
            return _gaussian_above(orders, [Fraction(x) for x in v])
        return float(v[0] if isinstance(v, tuple) else v)

    def served_bound(self, filt: Any, search: Callable[[], float]) -> float:
        return search()

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """One order: a plain sum per row. A curve: the spend as :meth:`served_spent` from the per-order
        bounds, and the room per order (:func:`_room`)."""
        orders = _curve(params)
        if orders:
            loads = list(tracks[0])
            return _gaussian_above(orders, loads), _room(orders, self.budget(quota, params), loads)
        spent = float_up(tracks[0][0])
        return spent, self.remaining(quota, spent, params)

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """A curve: the largest rho whose curve, added at every order to the worst row's (at most
        alpha times ``spent``), stays within the quota's curve in the filter's exact test."""
        orders = _curve(params)
        if orders:
            s = Fraction(spent)
            return _room(orders, self.budget(quota, params), [Fraction(a) * s for a in orders])
        return super().remaining(quota, spent, params)

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """A curve: at every order, alpha times ``upper`` (a bound of the worst row's spend in rho) plus
        the curves of the loads added (as the filter holds them) within the budget's curve, exactly."""
        orders = _curve(params)
        if not orders:
            return super().fits_with(upper, added, budget, params)
        if upper is None or isinstance(upper, tuple):
            return False
        limit = self.budget(budget, params).epsilons
        for k, a in enumerate(orders):
            total = Fraction(a) * Fraction(upper)
            for _, load, times in added:
                total += Fraction(ZCDP(load).to_rdp((a,)).epsilons[0]) * times
            if total > Fraction(limit[k]):
                return False
        return True

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


def _curve(params: Mapping[str, Any]) -> tuple[float, ...] | None:
    """A served data set's orders when it is served as a curve, else None (one order ``alpha``)."""
    orders = params.get("orders")
    return tuple(float(a) for a in orders) if orders else None


def _gaussian_above(orders: Sequence[float], loads: Sequence[Fraction]) -> float:
    """The smallest float rho with alpha rho >= each order's load: max of load / alpha, rounded up."""
    return max((float_up(x / Fraction(a)) for a, x in zip(orders, loads, strict=True)), default=0.0)


def _room(orders: Sequence[float], budget: RDP, loads: Sequence[Fraction]) -> float:
    """The largest float rho (0.0 when none) such that at every order the worst row's ``loads`` plus the
    charge's curve, computed as the filter holds it (:meth:`ZCDP.to_rdp`, rounded up), fit ``budget``
    exactly: what one more Gaussian charge on the worst row may carry."""
    best = math.inf
    for a, b, x in zip(orders, budget.epsilons, loads, strict=True):
        left = Fraction(b) - x
        if left <= 0:
            return 0.0
        r = float_down(left / Fraction(a))
        while r > 0 and Fraction(ZCDP(r).to_rdp((a,)).epsilons[0]) > left:
            r = math.nextafter(r, 0.0)
        best = min(best, r)
    return best if math.isfinite(best) else 0.0
