"""Privacy filters inside the mechanisms: admit a charge only if the total stays within a budget.

:class:`SequentialFilter` sums costs exactly (as rationals, so float rounding can never let the total
pass the budget): pure DP sums epsilons, zCDP sums rhos (Bun and Steinke 2016; valid adaptively as a
filter, Feldman and Zrnic 2021; MATH.md 2.7). It ignores coverage, so it is safe (sequential
composition) but not overlap-aware; the overlap-aware accountant lives in :mod:`overlapdp.privacy`.
"""

from __future__ import annotations

from fractions import Fraction

from overlapdp.mechanisms.calibration import PrivacyDefinition
from overlapdp.mechanisms.errors import BudgetExceededError, MechanismError
from overlapdp.privacy.definitions import ZCDP, PureDP


def _amount(value: PrivacyDefinition) -> tuple[type, Fraction]:
    if isinstance(value, PureDP):
        return PureDP, Fraction(value.epsilon)
    if isinstance(value, ZCDP):
        return ZCDP, Fraction(value.rho)
    raise MechanismError(f"a sequential filter handles PureDP or ZCDP values, not {type(value).__name__}")


class SequentialFilter:
    """Sum of PureDP epsilons (or of ZCDP rhos) kept at most ``total``."""

    def __init__(self, total: PureDP | ZCDP) -> None:
        self.kind, self._total = _amount(total)
        self.total = total
        self._spent = Fraction(0)

    def _cost(self, cost: PrivacyDefinition) -> Fraction:
        kind, amount = _amount(cost)
        if kind is not self.kind:
            raise MechanismError(f"cannot charge a {kind.__name__} cost to a {self.kind.__name__} budget")
        return amount

    def can_charge(self, cost: PrivacyDefinition) -> bool:
        return self._spent + self._cost(cost) <= self._total

    def charge(self, cost: PrivacyDefinition) -> None:
        amount = self._cost(cost)
        if self._spent + amount > self._total:
            raise BudgetExceededError(
                f"charging {cost} would pass the budget {self.total} (spent {float(self._spent):.6g}); nothing charged"
            )
        self._spent += amount

    @property
    def spent(self) -> float:
        return float(self._spent)

    @property
    def remaining(self) -> float:
        return float(self._total - self._spent)
