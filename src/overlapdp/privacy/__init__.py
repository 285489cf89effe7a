"""Privacy definitions, composition, conversion and the overlap-aware accountant (DESIGN.md step 4)."""

from overlapdp.privacy.definitions import GDP, RDP, ZCDP, ApproxDP, BudgetError, PureDP

__all__ = ["GDP", "RDP", "ZCDP", "ApproxDP", "BudgetError", "PureDP"]
