"""Gaussian DP (mu, composed in l2): :class:`GDPMeasure` (MATH.md 2.4, 5.8)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.exact import float_up, sqrt_down
from overlapdp.overlap.magnitude import unscale_up
from overlapdp.privacy.definitions import GDP, ZCDP
from overlapdp.privacy.measures._checks import (
    _exact_scalar,
    _gdp_check,
)
from overlapdp.privacy.measures.base import (
    AdditiveMeasure,
    FilterOptions,
    FilterRule,
    TrackSpec,
    Value,
    _need,
)
from overlapdp.privacy.mechanisms import Mechanism


class GDPMeasure(AdditiveMeasure[GDP, GDP]):
    """mu-GDP: per-row $\\sqrt{\\sum\\mu^2}$ (Dong-Roth-Su 2022 Cor. 3.3; MATH.md 2.4); the loads are mu,
    squared after normalising by a power of two so that they neither underflow nor overflow (MATH.md 7.8)."""

    name = "gdp"
    label = "Gaussian DP"
    budget_type = GDP
    parameters = ("mu",)
    comp = "l2"

    def guarantee_of(self, m: Mechanism) -> GDP | None:
        return m.gdp()

    def weight(self, g: GDP) -> float:
        return g.mu

    def native(self, load: np.ndarray, shift: int = 0) -> Value:
        # mu = 2^shift sqrt(load), rounded up (the loads are normalised squares).
        return unscale_up("l2", float(load[0]), shift, "Gaussian DP mu")

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return GDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: GDP) -> float:
        return budget.mu

    amount = "mu"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Gaussian of sigma = sensitivity / mu: E|Y| = sigma sqrt(2/pi)."""
        return sensitivity / share * math.sqrt(2 / math.pi)

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        """As the ``mu^2/2``-zCDP the discrete Gaussian is declared as (GDP's own profile is not claimed:
        :mod:`overlapdp.mechanisms.calibration`)."""
        if amount <= 0:
            return 0.0
        return float(ZCDP(float_up(Fraction(amount) ** 2 / 2)).epsilon_at(float(params["delta"])))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> GDP:
        """The discrete Gaussian of sigma = 1/mu, declared as mu^2/2-zCDP (MATH.md 6.2)."""
        return GDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> GDP:
        return GDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """mu = epsilon, whose declared mu^2/2-zCDP is the eps^2/2 of an epsilon-DP mechanism."""
        return epsilon

    def declared_total(self, amount: float) -> Fraction:
        return Fraction(amount) ** 2 / 2

    def equal_share(self, amount: float, payers: int) -> float:
        return amount / math.sqrt(payers)

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """sqrt(quota^2 - spent^2), rounded down: rows compose as sqrt(sum mu^2) (MATH.md 2.4), so a
        quota of 1 with 0.6 spent leaves 0.8, not 0.4."""
        if not spent < quota:
            return 0.0
        return sqrt_down(Fraction(quota) ** 2 - Fraction(spent) ** 2)

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """A row's sum of mu^2 (the service's filters: add/remove neighbours) within the budget's square."""
        if upper is None or isinstance(upper, tuple):
            return False
        squares = Fraction(upper) ** 2 + sum(
            (Fraction(load) ** 2 * times for _, load, times in added), Fraction(0)
        )
        return squares <= Fraction(budget) ** 2

    def sequential(self, loads: Sequence[float]) -> float:
        """mu composes in l2 (Dong-Roth-Su 2022 Cor. 3.3; MATH.md 2.4)."""
        total = sum((Fraction(x) ** 2 for x in loads), Fraction(0))
        return GDP.compose([GDP(x) for x in loads]).mu if total > 0 else 0.0

    def rule(self, budget: GDP, factor: float, options: FilterOptions) -> FilterRule:
        """Per-row $\\sum\\mu^2\\le B^2$ (Smith and Thakurta 2022, fully adaptive GDP; MATH.md 2.7), the exact
        test on the squares of the declared mu."""
        return FilterRule(
            tracks=(
                TrackSpec(
                    "l2",
                    lambda m: _need(m.gdp(), m, self.label).mu,
                    lambda m: Fraction(_need(m.gdp(), m, self.label).mu) ** 2,
                    squared=True,
                ),
            ),
            check=_gdp_check(factor, budget.mu),
            exact_ok=_exact_scalar(factor, Fraction(budget.mu) ** 2),
            limit=Fraction(budget.mu) ** 2 / int(factor),
        )
