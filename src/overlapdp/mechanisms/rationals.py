"""Noise parameters as exact rationals, rounded towards MORE noise (so privacy is never under-reported).

A float such as ``1/0.3`` has no short exact form; the samplers need small integers for speed. A
float is therefore replaced by the nearest rational with a bounded denominator that is AT LEAST the
float's exact value: the noise is then never smaller than asked, so the declared guarantee (computed
from the requested parameter) still holds (MATH.md 6.2). :class:`fractions.Fraction` inputs are
used exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TypeAlias

from overlapdp.mechanisms.errors import MechanismError

RationalLike: TypeAlias = Fraction | int | float

#: Largest denominator used when a float parameter is rounded up.
MAX_DENOMINATOR = 1_000_000


def as_positive_fraction(name: str, value: RationalLike) -> Fraction:
    """``value`` as an exact positive Fraction (floats exactly as stored), or a MechanismError."""
    if isinstance(value, bool):
        raise MechanismError(f"{name} must be a positive finite number, got {value!r}")
    if isinstance(value, Fraction | int):
        frac = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise MechanismError(f"{name} must be a positive finite number, got {value!r}")
        frac = Fraction(value)
    else:
        raise MechanismError(f"{name} must be a number, got {type(value).__name__}")
    if frac <= 0:
        raise MechanismError(f"{name} must be a positive finite number, got {value!r}")
    return frac


def round_up(value: RationalLike, *, max_denominator: int = MAX_DENOMINATOR, name: str = "scale") -> Fraction:
    """A rational ``>= value`` with denominator at most ``max_denominator`` (more noise, never less)."""
    exact = as_positive_fraction(name, value)
    if exact.denominator <= max_denominator:
        return exact
    close = exact.limit_denominator(max_denominator)
    if close >= exact:
        return close
    return Fraction(math.ceil(exact * max_denominator), max_denominator)
