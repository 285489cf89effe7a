"""The one place for parameter checks: each check returns the value as the type the caller needs, or
raises an :class:`~overlapdp.errors.OverlapDPError` subclass whose message names the field and the
value it got.

A bool is refused everywhere (``True`` is an ``int`` and ``float(True) == 1.0``, so ``epsilon=True``
would otherwise pass as 1). The error class defaults to the one the parameter's area raises
(:class:`~overlapdp.errors.BudgetError` for privacy parameters, :class:`~overlapdp.errors.MechanismError`
for integers such as a sensitivity, :class:`~overlapdp.errors.AnswerError` for a confidence level);
callers pass ``error=`` where their own area's class is documented. The error classes themselves are
defined in :mod:`overlapdp.errors`, the one exception tree.
"""

from __future__ import annotations

import math
from typing import Any

from overlapdp.errors import AnswerError, BudgetError, MechanismError, OverlapDPError

ErrorType = type[OverlapDPError]


def check_number(value: Any, field: str, *, error: ErrorType = BudgetError) -> float:
    """``value`` as a float (any real number, even NaN or infinite); refuses a bool or a non-number,
    text included (``float("0.5")`` would turn a string into a charge the HTTP API refuses)."""
    if isinstance(value, bool | str | bytes | bytearray):
        raise error(f"{field} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{field} must be a number, got {value!r}") from None


def check_finite(value: Any, field: str, *, error: ErrorType = BudgetError) -> float:
    """``value`` as a finite float (not NaN, not infinite, not a bool)."""
    v = check_number(value, field, error=error)
    if not math.isfinite(v):
        raise error(f"{field} must be a finite number, got {value!r}")
    return v


def check_positive(
    value: Any, field: str, *, allow_zero: bool = False, error: ErrorType = BudgetError
) -> float:
    """``value`` as a positive finite float (``allow_zero``: non-negative), as a budget or a mechanism's
    scale must be; :class:`~overlapdp.errors.BudgetError` by default."""
    kind = "non-negative" if allow_zero else "positive"
    if isinstance(value, bool):
        raise error(f"{field} must be a {kind} finite number, got {value!r}")
    v = check_number(value, field, error=error)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise error(f"{field} must be a {kind} finite number, got {value!r}")
    return v


def check_probability(
    value: Any, field: str, *, allow_zero: bool = False, error: ErrorType = BudgetError
) -> float:
    """``value`` as a float in ``(0, 1)`` (``allow_zero``: ``[0, 1)``), as a delta must be."""
    v = check_positive(value, field, allow_zero=True, error=error)
    if v >= 1 or (v == 0 and not allow_zero):
        raise error(f"{field} must lie in {'[0' if allow_zero else '(0'}, 1), got {value!r}")
    return v


def check_level(value: Any, field: str = "the confidence level", *, error: ErrorType = AnswerError) -> float:
    """A confidence level: a float strictly between 0 and 1 (:class:`~overlapdp.errors.AnswerError` by
    default; the mechanisms pass :class:`~overlapdp.errors.MechanismError`)."""
    try:
        lv = check_number(value, field, error=error)
    except OverlapDPError:
        raise error(f"{field} must be a number in (0, 1), got {value!r}") from None
    if not 0 < lv < 1:
        raise error(f"{field} must lie strictly between 0 and 1, got {value!r}")
    return lv


def check_int(
    value: Any, field: str, *, minimum: int | None = 1, error: ErrorType = MechanismError, what: str = ""
) -> int:
    """``value`` as an int of at least ``minimum`` (None: any); a bool, a float (even ``2.0``), a numpy
    integer or a string is refused. ``what`` is said after the requirement (e.g. ``" here"``)."""
    if minimum is None:
        need = "an integer"
    elif minimum == 1:
        need = "a positive integer"
    elif minimum == 0:
        need = "a non-negative integer"
    else:
        need = f"an integer >= {minimum}"
    # A Python int only: the exact samplers and JSON round trips need one.
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise error(f"{field} must be {need}{what}, got {value!r}")
    return value


__all__ = [
    "check_finite",
    "check_int",
    "check_level",
    "check_number",
    "check_positive",
    "check_probability",
]
