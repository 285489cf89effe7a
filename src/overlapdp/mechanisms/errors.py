"""Errors raised by the mechanisms, re-exported from :mod:`overlapdp.errors` (where they are defined,
in the one exception tree) so that this import path keeps working.

Budgets that are not positive finite numbers raise :class:`overlapdp.privacy.BudgetError`.
"""

from __future__ import annotations

from overlapdp.errors import (
    BudgetExceededError,
    CoverageError,
    InsecureRandomnessError,
    MechanismError,
    SnapshotError,
)

__all__ = [
    "BudgetExceededError",
    "CoverageError",
    "InsecureRandomnessError",
    "MechanismError",
    "SnapshotError",
]
