"""Privacy definitions as small immutable values (MATH.md sections 2 and 5).

Each value is the guarantee of one mechanism (or of a composition). Composition, conversion to
(epsilon, delta) and mechanism costs are added by the accounting modules; the constructors here only
validate: every parameter must be a finite number in its range, or :class:`BudgetError` is raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from overlapdp.errors import OverlapDPError


class BudgetError(OverlapDPError):
    """A privacy parameter or budget is not a positive finite number (or delta is outside (0, 1))."""


def _positive(name: str, value: float, *, allow_zero: bool = True) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BudgetError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise BudgetError(
            f"{name} must be a {'non-negative' if allow_zero else 'positive'} finite number, got {value!r}"
        )
    return v


def _probability(name: str, value: float) -> float:
    v = _positive(name, value)
    if v >= 1:
        raise BudgetError(f"{name} must lie in [0, 1), got {value!r}")
    return v


@dataclass(frozen=True)
class PureDP:
    """epsilon-DP."""

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon))


@dataclass(frozen=True)
class ApproxDP:
    """(epsilon, delta)-DP."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon))
        object.__setattr__(self, "delta", _probability("delta", self.delta))


@dataclass(frozen=True)
class ZCDP:
    """rho-zero-concentrated DP (Bun and Steinke 2016)."""

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _positive("rho", self.rho))


@dataclass(frozen=True)
class GDP:
    """mu-Gaussian DP (Dong, Roth, Su 2022)."""

    mu: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _positive("mu", self.mu))


@dataclass(frozen=True)
class RDP:
    """Rényi DP: epsilon(alpha) at each order of a fixed grid (orders > 1)."""

    orders: tuple[float, ...]
    epsilons: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.orders:
            raise BudgetError("an RDP order grid must not be empty")
        if len(self.orders) != len(self.epsilons):
            raise BudgetError("RDP needs one epsilon per order")
        orders = tuple(_positive("RDP order", a) for a in self.orders)
        if any(a <= 1 for a in orders):
            raise BudgetError("RDP orders must be > 1")
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "epsilons", tuple(_positive("RDP epsilon", e) for e in self.epsilons))
