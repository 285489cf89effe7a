"""Numbers for people: short decimals, rounded to the side that never flatters privacy.

A float such as ``0.5 - 0.30000000000000004`` prints as ``0.19999999999999996`` and a rational noise
scale as ``5000001/1000000``; neither is how a person reads a budget. :func:`decimal` prints a value
(float, int or exact :class:`~fractions.Fraction`) with at most ``digits`` significant digits, rounded
in a chosen direction with exact decimal arithmetic, so that the printed figure is on a known side of
the true one: a privacy loss or a spent budget is rounded UP (:func:`spent`), a remaining budget DOWN
(:func:`remaining`); the printed figures never show less loss or more budget left than there is.
"""

from __future__ import annotations

import decimal as _dec
import math
from fractions import Fraction
from typing import Literal

Rounding = Literal["nearest", "up", "down"]
_MODES = {"nearest": _dec.ROUND_HALF_EVEN, "up": _dec.ROUND_CEILING, "down": _dec.ROUND_FLOOR}


def decimal(value: float | int | Fraction, digits: int = 6, rounding: Rounding = "nearest") -> str:
    """``value`` with at most ``digits`` significant digits, trailing zeros dropped, plain notation
    for magnitudes from 1e-4 up to 10^digits and ``1.5e-07`` style beyond; ``inf``, ``-inf``, ``nan``
    as such. ``rounding`` ``"up"`` / ``"down"`` round towards +inf / -inf (exactly: the printed number
    is >= / <= the value), except that a float whose shortest repr has at most ``digits`` digits is
    printed as that repr (``1.7e-06``, not ``1.70001e-06``): it converts back to the identical float."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    ctx = _dec.Context(prec=digits, rounding=_MODES[rounding])
    if isinstance(value, Fraction):
        d = ctx.divide(_dec.Decimal(value.numerator), _dec.Decimal(value.denominator))
    else:
        short = _dec.Decimal(repr(value) if isinstance(value, float) else value)
        # A float whose shortest round-trip form fits is printed as that form (it denotes the very same
        # float); otherwise its exact binary value is rounded in the chosen direction.
        d = short if len(short.as_tuple().digits) <= digits else ctx.plus(_dec.Decimal(value))
    if d.is_zero():
        return "0"
    d = d.normalize(ctx)
    exp = d.adjusted()
    if -4 <= exp < digits:
        text = format(d, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    sign, digs, _ = d.as_tuple()
    mant = "".join(map(str, digs))
    mant = mant[0] + ("." + mant[1:] if len(mant) > 1 else "")
    return f"{'-' if sign else ''}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def spent(value: float | int | Fraction, digits: int = 6) -> str:
    """A privacy loss, guarantee or spent budget: rounded up (never shows less loss than there is)."""
    return decimal(value, digits, "up")


def remaining(value: float | int | Fraction, digits: int = 6) -> str:
    """A remaining budget: rounded down (never shows more left than there is)."""
    return decimal(value, digits, "down")


#: How each definition's native value is named in tables and reports.
DEFINITION_NAMES = {
    "pure": "pure ε",
    "zcdp": "zCDP ρ",
    "gdp": "GDP μ",
    "rdp": "Rényi DP",
    "tcdp": "tCDP (ρ, ω)",
    "approx": "(ε, δ) PLD",
}


def guarantee(value: float | tuple[float, ...], *, pair: bool = False) -> str:
    """A definition's native value for people, rounded up: a number; with ``pair`` (tCDP, the measure's
    :attr:`~overlapdp.privacy.measures.Measure.native_pair`) the pair ``ρ = …, ω = …`` (ω is a lower
    limit: rounded down); an RDP curve by its number of orders (the JSON lists them)."""
    if isinstance(value, tuple):
        if pair and len(value) == 2:
            return f"ρ = {spent(value[0])}, ω = {remaining(value[1])}"
        return f"curve ({len(value)} orders)"
    return spent(value)
