"""The filters' budget tests, in floats and exactly (MATH.md 2.7, 7.8)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.exact import float_up, sqrt_up

# The filter decides in EXACT arithmetic of the declared (float) costs. The overlap index locates the
# worst row on float sums (exact up to about 1e-12 relative): when the witness is this close to the
# budget, the maximum over all row patterns is recomputed with Fractions (or the charge is refused).
NEAR = Fraction(1, 10**9)


# -- the filters' tests ------------------------------------------------------------------------------------
def _scalar_check(factor: float, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
    def check(values: list[Any]) -> tuple[bool, Any]:
        v = factor * float(values[0])
        return v <= b, v

    return check


def _gdp_check(factor: float, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
    def check(values: list[Any]) -> tuple[bool, Any]:
        v = float(values[0])  # the l2 index holds sqrt(sum mu^2), rounded up
        if factor != 1 and math.isfinite(v):
            # sqrt(factor) x v rounded UP (a product rounded to nearest could fall one ulp below)
            v = sqrt_up(Fraction(int(factor)) * Fraction(v) ** 2)
        return v <= b, v

    return check


def _vector_check(
    factor: float, b: np.ndarray, *, some: bool = False
) -> Callable[[list[Any]], tuple[bool, Any]]:
    """Per component ``factor * value <= budget``: at every component, or (``some``) at one of them
    (the Rényi orders' two rules, MATH.md 2.7.2)."""

    def check(values: list[Any]) -> tuple[bool, Any]:
        v = factor * np.asarray(values[0], dtype=float)
        ok = v <= b
        return bool(np.any(ok) if some else np.all(ok)), tuple(float(x) for x in v)

    return check


def _advanced_check(
    factor: float, eps_g: float, delta_g: float, slack: float
) -> Callable[[list[Any]], tuple[bool, Any]]:
    log_term = 2 * math.log(1 / slack)

    def check(values: list[Any]) -> tuple[bool, Any]:
        # the value: the smaller of the two rules' epsilons at the per-track maxima (an upper bound
        # of every row's own smaller one)
        root = math.sqrt(factor) * float(values[0])  # the l2 index holds sqrt(sum eps^2)
        sd = factor * float(values[1])
        e = min(math.sqrt(log_term) * root + root * root / 2, factor * float(values[2]))
        return (e <= eps_g and sd <= delta_g), e

    return check


def _exact_scalar(factor: float, b: Fraction) -> Callable[[list[Any]], bool]:
    fx = Fraction(int(factor))

    def ok(values: list[Any]) -> bool:
        return bool(fx * values[0] <= b)

    return ok


def _exact_advanced(factor: float, eps_g: float, delta_g: float, slack: float) -> Callable[[list[Any]], bool]:
    """The combined filter's rule on one row's loads ``[sum eps^2, sum delta, sum eps]`` (MATH.md 5.6):
    sum delta <= delta_g - delta' exactly, and EITHER sum eps <= eps_g exactly (basic composition)
    OR the advanced-composition epsilon, a transcendental formula evaluated in floats from the sum
    of squares rounded up with a relative margin far above its few ulps of round-off, is <= eps_g.
    The square root is taken of the exact sum (rounded up) and multiplied by sqrt(2 ln(1/delta')):
    the product 2 ln(1/delta') * s2 would lose precision when s2 is subnormal (epsilons < 1e-154)."""
    fx = Fraction(int(factor))
    delta_room = Fraction(delta_g) - Fraction(slack)
    eps_room = Fraction(eps_g)
    root_log = math.sqrt(-2 * math.log(slack))  # log of the exact float slack: accurate to an ulp

    def ok(values: list[Any]) -> bool:
        if not fx * values[1] <= delta_room:
            return False
        if fx * values[2] <= eps_room:
            return True
        total = fx * values[0]
        half = float_up(total / 2)  # inf beyond the float range: then above any budget
        if half > eps_g:
            return False
        e = (root_log * sqrt_up(total) + half) * (1 + 1e-14)
        return e <= eps_g

    return ok


def _float_advanced(
    factor: float, eps_g: float, delta_g: float, slack: float
) -> Callable[[np.ndarray], bool | None]:
    """The combined rule on one row's float sums ``[sum eps^2, sum delta, sum eps]``: True / False when
    they clear / miss every condition by the relative margin ``NEAR`` (far above their round-off),
    None when the row must be summed exactly (``_exact_advanced``)."""
    room = delta_g - slack
    log_term = -2 * math.log(slack)
    up, down = 1 + float(NEAR), 1 - float(NEAR)

    def adv(s2: float) -> float:
        return math.sqrt(log_term * s2) + s2 / 2

    def verdict(s: np.ndarray) -> bool | None:
        s2, sd, s1 = (factor * float(x) for x in s)
        if sd * down > room or (s1 * down > eps_g and adv(s2 * down) > eps_g):
            return False
        if sd * up <= room and (s1 * up <= eps_g or adv(s2 * up) <= eps_g):
            return True
        return None

    return verdict
