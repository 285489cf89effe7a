"""Exact arithmetic and the safe side of a float: the one place these helpers live.

A privacy figure computed exactly (a :class:`~fractions.Fraction`, or an integer sum) is reported as a
float rounded to the side that never flatters privacy: a loss or a spend UP (:func:`float_up`,
:func:`sqrt_up`, :func:`sum_up`), a room or a per-query share DOWN (:func:`float_down`,
:func:`sqrt_down`). Exact sums of many Fractions whose denominators are powers of two (floats,
exactly) are taken on integers (:func:`exact_sum`), far quicker than adding Fractions one by one.
MATH.md 7.8.

Every layer uses these (overlap, privacy, mechanisms, service); the module imports nothing of the
package, so it sits at the bottom of the package order with :mod:`overlapdp.errors` and
:mod:`overlapdp.validation`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from fractions import Fraction

#: The largest float.
MAX_FLOAT = sys.float_info.max
# Extra bits carried by the integer square root of an exact value before rounding up.
_SQRT_GUARD_BITS = 64


def float_up(x: Fraction) -> float:
    """The smallest float >= ``x`` (inf when ``x`` exceeds the largest float)."""
    try:
        f = float(x)
    except OverflowError:
        return math.inf if x > 0 else -MAX_FLOAT
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def float_down(x: Fraction) -> float:
    """The largest float <= ``x`` (the largest float when ``x`` exceeds it; -inf below -that)."""
    try:
        f = float(x)
    except OverflowError:
        return MAX_FLOAT if x > 0 else -math.inf
    if Fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def sqrt_up(x: Fraction) -> float:
    """The smallest float >= sqrt(``x``), from an integer square root with guard bits."""
    if x <= 0:
        return 0.0
    num, den = x.numerator, x.denominator
    g = _SQRT_GUARD_BITS
    # sqrt(num / den) = sqrt(num * den * 4**g) / (den * 2**g); the ceiling of the integer root is >= it.
    radicand = num * den << (2 * g)
    r = math.isqrt(radicand)
    if r * r < radicand:
        r += 1
    return float_up(Fraction(r, den << g))


def sqrt_down(x: Fraction) -> float:
    """The largest float <= sqrt(``x``) (a room left, never more than there is)."""
    root = sqrt_up(x)
    while root > 0 and Fraction(root) ** 2 > x:
        root = math.nextafter(root, 0.0)
    return root


def exact_sum(values: Sequence[Fraction]) -> Fraction:
    """The exact sum of Fractions (on integers when the denominators all divide the largest one, as
    those of floats, powers of two, do)."""
    if not values:
        return Fraction(0)
    den = max(v.denominator for v in values)
    if any(den % v.denominator for v in values):
        return sum(values, Fraction(0))
    return Fraction(sum(v.numerator * (den // v.denominator) for v in values), den)


def sum_up(values: Iterable[float | Fraction]) -> float:
    """The exact sum of ``values`` rounded UP to a float (``math.fsum`` rounds to nearest, which can be
    below: ten 0.1 sum to 1.0 < 10 * Fraction(0.1)); inf beyond the float range."""
    return float_up(sum((Fraction(v) for v in values), Fraction(0)))


def fsum_up(values: Sequence[float]) -> float:
    """The exact sum of floats rounded UP, quickly: ``math.fsum`` is correctly rounded, and the sign of
    the correctly rounded ``exact - fsum`` says whether it was rounded down (then one float up). When
    fsum overflows the sum is taken exactly (:func:`sum_up`; inf beyond the float range)."""
    try:
        total = math.fsum(values)
        if math.isfinite(total):
            if math.fsum([*values, -total]) > 0:
                total = math.nextafter(total, math.inf)
            return total
    except OverflowError:
        pass
    return sum_up(values)


__all__ = ["MAX_FLOAT", "exact_sum", "float_down", "float_up", "fsum_up", "sqrt_down", "sqrt_up", "sum_up"]
