"""Pure DP (epsilon): :class:`PureMeasure` (MATH.md 2.4, 2.7)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from overlapdp.privacy.definitions import PureDP
from overlapdp.privacy.measures.base import (
    AdditiveMeasure,
    Value,
)
from overlapdp.privacy.mechanisms import Mechanism


class PureMeasure(AdditiveMeasure[PureDP, PureDP]):
    """Pure epsilon-DP: per-row sum of epsilons (MATH.md 2.4)."""

    name = "pure"
    noise_power = 2
    label = "pure DP"
    budget_type = PureDP
    parameters = ("epsilon",)

    def guarantee_of(self, m: Mechanism) -> PureDP | None:
        return m.pure()

    def weight(self, g: PureDP) -> float:
        return g.epsilon

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return PureDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: PureDP) -> float:
        return budget.epsilon

    amount = "epsilon"
    needs_delta = False
    noise = "discrete_laplace"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Laplace of scale sensitivity / epsilon: E|Y| is the scale."""
        return sensitivity / share

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        return max(float(amount), 0.0)

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> PureDP:
        """The discrete Laplace of epsilon (MATH.md 6.2)."""
        return PureDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> PureDP:
        return PureDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        return epsilon
