"""The one place for parameter checks: each check returns the value as the type the caller needs, or
raises an :class:`~overlapdp.errors.OverlapDPError` subclass whose message names the field and the
value it got.

A bool is refused everywhere (``True`` is an ``int`` and ``float(True) == 1.0``, so ``epsilon=True``
would otherwise pass as 1), and so is an integer beyond the float range (``float(10**400)`` raises a
bare ``OverflowError``, here a named error). Weights (:func:`check_weight`, :func:`check_weights`),
privacy parameters (:func:`check_positive`, :func:`check_probability`), bounds (:func:`check_finite`),
counts (:func:`check_int`) and confidence levels (:func:`check_level`) are all checked here.

The error class defaults to the one the parameter's area raises (:class:`~overlapdp.errors.BudgetError`
for privacy parameters, :class:`~overlapdp.errors.WeightError` for weights,
:class:`~overlapdp.errors.MechanismError` for integers such as a sensitivity,
:class:`~overlapdp.errors.LevelError` for a confidence level); callers pass ``error=`` where their own
area's class is documented. The error classes themselves are defined in :mod:`overlapdp.errors`, the
one exception tree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from overlapdp.errors import BudgetError, LevelError, MechanismError, OverlapDPError, WeightError

if TYPE_CHECKING:  # numpy is imported by the one check that takes arrays
    import numpy as np

ErrorType = type[OverlapDPError]
#: Longest text of a refused value put in a message (a 400-digit integer is named by its length).
_SHOWN = 80


def shown(value: Any) -> str:
    """``repr(value)`` for a message, cut to a readable length."""
    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    if isinstance(value, int):
        return f"an integer of {len(str(abs(value)))} digits"
    return text[: _SHOWN - 3] + "..."


def check_number(value: Any, field: str, *, error: ErrorType = BudgetError) -> float:
    """``value`` as a float (any real number, even NaN or infinite); refuses a bool or a non-number,
    text included (``float("0.5")`` would turn a string into a charge the HTTP API refuses)."""
    if isinstance(value, bool | str | bytes | bytearray):
        raise error(f"{field} must be a number, got {type(value).__name__} {shown(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer (or Fraction) beyond the float range
        raise error(f"{field} must be a finite number, got {shown(value)}") from None
    except (TypeError, ValueError):
        raise error(f"{field} must be a number, got {type(value).__name__} {shown(value)}") from None


def check_finite(value: Any, field: str, *, error: ErrorType = BudgetError) -> float:
    """``value`` as a finite float (not NaN, not infinite, not a bool)."""
    v = check_number(value, field, error=error)
    if not math.isfinite(v):
        raise error(f"{field} must be a finite number, got {shown(value)}")
    return v


def check_seconds(value: Any, field: str, *, error: ErrorType = MechanismError) -> float:
    """A time allowance in seconds: a non-negative number, infinity allowed (no limit), NaN refused."""
    v = check_number(value, field, error=error)
    if not v >= 0:
        raise error(f"{field} must be a non-negative number of seconds or None, got {shown(value)}")
    return v


def check_weight(value: Any, field: str, *, error: ErrorType = WeightError) -> float:
    """A weight: a finite non-negative float (:class:`~overlapdp.errors.WeightError` by default)."""
    v = check_number(value, field, error=error)
    if not math.isfinite(v) or v < 0:
        raise error(f"{field} must be a finite non-negative number, got {shown(value)}")
    return v


def check_weights(
    values: Any, count: int, field_of: Callable[[int], str], *, error: ErrorType = WeightError
) -> np.ndarray:
    """``count`` weights as a float array (each :func:`check_weight`, vectorised); ``field_of(i)`` names
    the i-th in a message. A sequence numpy cannot take as floats (a string, an integer beyond the float
    range) is checked item by item, so the message names the first bad one."""
    import numpy as np

    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        items = list(values)
        for i, v in enumerate(items):
            check_weight(v, field_of(i), error=error)
        raise error("weights must be numbers") from None
    if arr.ndim != 1 or arr.shape[0] != count:
        raise error(f"expected one weight per query ({count}), got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i = int(bad[0])
        raise error(f"{field_of(i)} must be a finite non-negative number, got {float(arr[i])!r}")
    return arr


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
        raise error(f"{field} must be a {kind} finite number, got {shown(value)}")
    return v


def check_probability(
    value: Any, field: str, *, allow_zero: bool = False, error: ErrorType = BudgetError
) -> float:
    """``value`` as a float in ``(0, 1)`` (``allow_zero``: ``[0, 1)``), as a delta must be."""
    v = check_positive(value, field, allow_zero=True, error=error)
    if v >= 1 or (v == 0 and not allow_zero):
        raise error(f"{field} must lie in {'[0' if allow_zero else '(0'}, 1), got {shown(value)}")
    return v


def check_level(value: Any, field: str = "the confidence level") -> float:
    """A confidence level: a float strictly between 0 and 1, else :class:`~overlapdp.errors.LevelError`
    (both an :class:`~overlapdp.errors.AnswerError` and a :class:`~overlapdp.errors.MechanismError`:
    the one level check of workloads and mechanisms alike)."""
    try:
        lv = check_number(value, field, error=LevelError)
    except OverlapDPError:
        raise LevelError(f"{field} must be a number in (0, 1), got {shown(value)}") from None
    if not 0 < lv < 1:
        raise LevelError(f"{field} must lie strictly between 0 and 1, got {shown(value)}")
    return lv


def check_int(
    value: Any,
    field: str,
    *,
    minimum: int | None = 1,
    maximum: int | None = None,
    error: ErrorType = MechanismError,
    what: str = "",
) -> int:
    """``value`` as an int of at least ``minimum`` (None: any) and at most ``maximum`` (None: any); a
    bool, a float (even ``2.0``), a numpy integer or a string is refused. ``what`` is said after the
    requirement (e.g. ``" here"``)."""
    if minimum is not None and maximum is not None:
        need = f"an integer from {minimum} to {maximum}"
    elif minimum is None:
        need = "an integer"
    elif minimum == 1:
        need = "a positive integer"
    elif minimum == 0:
        need = "a non-negative integer"
    else:
        need = f"an integer >= {minimum}"
    # A Python int only: the exact samplers and JSON round trips need one.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise error(f"{field} must be {need}{what}, got {shown(value)}")
    return value


__all__ = [
    "check_finite",
    "check_int",
    "check_level",
    "check_number",
    "check_positive",
    "check_probability",
    "check_seconds",
    "check_weight",
    "check_weights",
    "shown",
]
