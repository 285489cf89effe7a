"""zero-concentrated DP (rho): :class:`ZCDPMeasure` (MATH.md 2.4, 5.8)."""

from __future__ import annotations

import math

from overlapdp.privacy.definitions import ZCDP
from overlapdp.privacy.measures.base import (
    AdditiveMeasure,
    Value,
)
from overlapdp.privacy.mechanisms import Mechanism


class ZCDPMeasure(AdditiveMeasure[ZCDP, ZCDP]):
    """rho-zCDP: per-row sum of rho (Bun-Steinke 2016 Lemma 2.3; MATH.md 2.4)."""

    name = "zcdp"
    label = "zCDP"
    budget_type = ZCDP
    parameters = ("rho",)

    def guarantee_of(self, m: Mechanism) -> ZCDP | None:
        return m.zcdp()

    def weight(self, g: ZCDP) -> float:
        return g.rho

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return ZCDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: ZCDP) -> float:
        return budget.rho

    amount = "rho"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Gaussian of sigma = sensitivity / sqrt(2 rho): E|Y| = sigma sqrt(2/pi)."""
        return sensitivity / math.sqrt(2 * share) * math.sqrt(2 / math.pi)
