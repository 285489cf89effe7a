"""Errors raised by the mechanisms (all :class:`~overlapdp.errors.OverlapDPError` subclasses).

Budgets that are not positive finite numbers raise :class:`overlapdp.privacy.BudgetError`.
"""

from __future__ import annotations

from overlapdp.errors import OverlapDPError


class MechanismError(OverlapDPError):
    """A mechanism was configured or used wrongly (c < 1, tolerance <= 0, non-integer sensitivity, ...)."""


class InsecureRandomnessError(MechanismError):
    """A seeded (reproducible, hence predictable) generator was passed where a served context needs the
    operating system's CSPRNG (DESIGN.md: a seeded generator exists for tests only)."""


class CoverageError(MechanismError):
    """A query reaches outside the coverage an interactive mechanism declared (it would read rows whose
    privacy loss the mechanism's declaration does not account for)."""


class BudgetExceededError(MechanismError):
    """A mechanism or a child would spend beyond its declared or remaining budget; nothing was charged."""


class SnapshotError(MechanismError):
    """A mechanism state (snapshot) is malformed, or was taken from another mechanism than the one it is
    restored into (another kind, ``c`` or noise scale), or is restored into a mechanism that has
    already answered queries."""
