"""Conversions from each privacy definition to (epsilon, delta) (MATH.md 5.8).

Every function here is SAFE: the epsilon it returns is at least the true infimum over the family of
conversions it implements (any order alpha > 1 gives a valid bound, so a numerical minimisation can only
be loose, never wrong), and the delta it returns is at least the true delta. Inversions of monotone
profiles stop on the side of the bracket where the profile is already below the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from overlapdp.exact import float_up

#: A default grid of Rényi orders (dense where moderate budgets have their optimum, sparse beyond).
DEFAULT_ORDERS: tuple[float, ...] = (
    1.05,
    1.1,
    1.25,
    1.5,
    1.75,
    2.0,
    2.25,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    *[float(a) for a in range(5, 64)],
    80.0,
    96.0,
    128.0,
    192.0,
    256.0,
    384.0,
    512.0,
    1024.0,
)

# A relative safety margin on floating-point results of closed forms (their rounding error is far smaller).
_MARGIN = 1e-12


def invert_decreasing(
    profile: Callable[[float], float], target: float, lo: float, hi: float, *, rel_tol: float = 1e-10
) -> float:
    """The smallest x in [lo, hi] (up to ``rel_tol``) with ``profile(x) <= target``, for a non-increasing
    profile; the returned x always satisfies ``profile(x) <= target`` (the upper end of the final bracket).

    Returns ``lo`` if ``profile(lo) <= target``; raises ValueError if even ``profile(hi) > target``.
    """
    if profile(lo) <= target:
        return lo
    while profile(hi) > target:
        if hi > 1e6:
            raise ValueError("profile does not reach the target")
        hi = hi * 2 + 1
    for _ in range(200):
        if hi - lo <= rel_tol * max(1.0, abs(hi)):
            break
        mid = 0.5 * (lo + hi)
        if profile(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# -- Gaussian DP ----------------------------------------------------------------------------------------
def gdp_delta(mu: float, epsilon: float) -> float:
    """Exact delta(epsilon) of mu-GDP: $\\Phi(-\\varepsilon/\\mu+\\mu/2)-e^\\varepsilon\\Phi(-\\varepsilon/\\mu-\\mu/2)$
    (MATH.md 5.8, Dong-Roth-Su Cor. 2.13), computed in log space so it stays accurate for tiny deltas."""
    if mu == 0:
        return 0.0
    # scipy.special takes ~0.2 s to import: imported where used (DESIGN.md)
    from scipy.special import log_ndtr

    la = float(log_ndtr(-epsilon / mu + mu / 2))
    lb = float(log_ndtr(-epsilon / mu - mu / 2)) + epsilon
    if lb >= la:
        return 0.0
    # log_ndtr far in the tail loses ~1e-11 relative accuracy: a wider margin keeps the value safe
    return max(0.0, math.exp(la) * -math.expm1(lb - la)) * (1 + 1e-9)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with ``gdp_delta(mu, epsilon) <= delta`` (bisection, safe side)."""
    if mu == 0:
        return 0.0
    return invert_decreasing(lambda e: gdp_delta(mu, e), delta, 0.0, mu * mu / 2 + 10 * mu + 1)


# -- zCDP (Canonne, Kamath, Steinke 2020, Prop. 12 / Cor. 13) ------------------------------------------
def _alpha_grid(lo: float = -12.0, hi: float = 14.0, n: int = 400) -> np.ndarray:
    # orders alpha = 1 + e^s: dense near 1 and up to ~1e6, where optima for tiny and huge rho sit
    return np.asarray(1.0 + np.exp(np.linspace(lo, hi, n)))


def _refine_min(fn: Callable[[np.ndarray], np.ndarray], alphas: np.ndarray) -> float:
    """Minimum of fn over alphas, refined around the best point. Every evaluated alpha is a valid bound,
    so the result is the best valid bound found (never below the true infimum)."""
    vals = fn(alphas)
    best = float(np.min(vals))
    i = int(np.argmin(vals))
    lo = alphas[max(i - 1, 0)]
    hi = alphas[min(i + 1, len(alphas) - 1)]
    fine = np.linspace(lo, hi, 401)
    fine = fine[fine > 1.0]
    if fine.size:
        best = min(best, float(np.min(fn(fine))))
    return best


def _orders_up_to(max_order: float) -> np.ndarray:
    """The alpha grid cut at ``max_order`` (the largest order a truncated-CDP guarantee covers), with
    ``max_order`` itself when finite (tCDP holds at alpha = omega too: MATH.md 5.9)."""
    grid = _alpha_grid()
    if math.isinf(max_order):
        return grid
    return np.append(grid[grid < max_order], max_order)


def zcdp_epsilon(rho: float, delta: float, max_order: float = math.inf) -> float:
    """epsilon at delta for rho-zCDP: $\\inf_{\\alpha>1}\\alpha\\rho+\\frac{\\ln(1/\\delta)+(\\alpha-1)\\ln(1-1/\\alpha)-\\ln\\alpha}{\\alpha-1}$
    (Canonne-Kamath-Steinke 2020, Prop. 12; MATH.md 5.8), minimised numerically over alpha (safe).

    With a finite ``max_order`` omega the infimum runs over $1<\\alpha\\le\\omega$ only: the conversion of
    (rho, omega)-truncated CDP, which is $(\\alpha,\\alpha\\rho)$-RDP exactly at those orders (Bun, Dwork,
    Rothblum, Steinke 2018; MATH.md 5.9). Every order evaluated is one of them, so the value is safe."""
    if rho == 0:
        return 0.0
    ld = math.log(delta)

    def eps(a: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # a * rho past the float range is inf: that order bounds nothing
            return np.asarray(a * rho + (-ld + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1))

    return max(0.0, _refine_min(eps, _orders_up_to(max_order)) * (1 + _MARGIN))


def zcdp_delta(rho: float, epsilon: float, max_order: float = math.inf) -> float:
    """delta at epsilon for rho-zCDP: $\\inf_{\\alpha>1}\\frac{e^{(\\alpha-1)(\\alpha\\rho-\\varepsilon)}}{\\alpha-1}(1-\\frac1\\alpha)^\\alpha$
    (Canonne-Kamath-Steinke 2020; MATH.md 5.8), minimised numerically over alpha (safe); over
    $1<\\alpha\\le$ ``max_order`` for truncated CDP (as :func:`zcdp_epsilon`)."""
    if rho == 0:
        return 0.0

    def logd(a: np.ndarray) -> np.ndarray:
        return np.asarray((a - 1) * (a * rho - epsilon) + a * np.log1p(-1 / a) - np.log(a - 1))

    return min(1.0, math.exp(_refine_min(logd, _orders_up_to(max_order))) * (1 + _MARGIN))


# -- Rényi DP (Balle et al. 2020, Thm. 21; Asoodeh et al.) --------------------------------------------
def rdp_epsilon(orders: Sequence[float], epsilons: Sequence[float], delta: float) -> float:
    """epsilon at delta for RDP curve: $\\min_\\alpha \\tau_\\alpha+\\ln(1-\\frac1\\alpha)-\\frac{\\ln\\delta+\\ln\\alpha}{\\alpha-1}$
    over the given orders (MATH.md 5.8). Every order gives a valid bound, so the minimum is valid."""
    a = np.asarray(orders, dtype=float)
    t = np.asarray(epsilons, dtype=float)
    vals = t + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return max(0.0, float(np.min(vals)) * (1 + _MARGIN))


def rdp_delta(orders: Sequence[float], epsilons: Sequence[float], epsilon: float) -> float:
    """delta at epsilon for an RDP curve, the inverse of :func:`rdp_epsilon` at each order, minimised:
    $\\delta=\\min_\\alpha e^{(\\alpha-1)(\\tau_\\alpha-\\varepsilon)}(1-\\frac1\\alpha)^{\\alpha-1}/\\alpha$."""
    a = np.asarray(orders, dtype=float)
    t = np.asarray(epsilons, dtype=float)
    logs = (a - 1) * (t - epsilon) + (a - 1) * np.log1p(-1 / a) - np.log(a)
    return min(1.0, math.exp(float(np.min(logs))) * (1 + _MARGIN))


def rdp_target(orders: Sequence[float], epsilon: float, delta: float) -> tuple[float, ...]:
    """Per order the budget $\\tau_\\alpha=\\varepsilon-\\ln(1-\\frac1\\alpha)+\\frac{\\ln\\delta+\\ln\\alpha}{\\alpha-1}$ at
    which that order ALONE converts to exactly ``epsilon`` at ``delta`` (:func:`rdp_epsilon` solved for
    the curve; MATH.md 5.8, 2.7.2), rounded DOWN by an absolute margin far above the float error of its
    three terms (so each order's conversion of the returned value is at most ``epsilon``). Orders whose
    budget is not positive come out as 0.0 (the caller drops them)."""
    out = []
    ld = math.log(delta)
    for a in orders:
        t1 = math.log1p(-1 / a)
        t2 = (ld + math.log(a)) / (a - 1)
        v = epsilon - t1 + t2
        v -= 1e-12 * (abs(epsilon) + abs(t1) + abs(t2))
        out.append(v if v > 0 else 0.0)
    return tuple(out)


def _some_log_terms(orders: Sequence[float], budgets: Sequence[float], epsilon: float) -> np.ndarray:
    a = np.asarray(orders, dtype=float)
    b = np.asarray(budgets, dtype=float)
    return np.asarray((a - 1) * (b - epsilon) + (a - 1) * np.log1p(-1 / a) - np.log(a))


def rdp_some_delta(orders: Sequence[float], budgets: Sequence[float], epsilon: float) -> float:
    """delta at ``epsilon`` of a run stopped by the Rényi filter's "some order" rule with budget curve
    ``budgets`` (MATH.md 2.7.2): the SUM over the orders of each order's conversion
    $e^{(\\alpha-1)(B_\\alpha-\\varepsilon)}(1-\\frac1\\alpha)^{\\alpha-1}/\\alpha$ (a union bound: the order that
    fits at the end depends on the transcript), with a relative safety margin."""
    with np.errstate(over="ignore"):
        logs = _some_log_terms(orders, budgets, epsilon)
        total = float(np.sum(np.exp(logs)))
    return min(1.0, total * (1 + _MARGIN))


def rdp_some_epsilon(orders: Sequence[float], budgets: Sequence[float], delta: float) -> float:
    """The smallest epsilon (bisection, safe side) with :func:`rdp_some_delta` at most ``delta``: the
    (epsilon, delta) guarantee of the "some order" rule's budget curve (MATH.md 2.7.2)."""
    n = len(orders)
    # each order's own conversion at delta / n: there every term is at most delta / n
    top = max(
        b + math.log1p(-1 / a) - (math.log(delta / n) + math.log(a)) / (a - 1)
        for a, b in zip(orders, budgets, strict=True)
    )
    hi = max(0.0, top) * (1 + 1e-9) + 1e-12
    return invert_decreasing(lambda e: rdp_some_delta(orders, budgets, e), delta, 0.0, hi)


# -- (epsilon, delta) as a profile --------------------------------------------------------------------
def approx_delta(epsilon: float, delta: float, at: float) -> float:
    """delta(at) of an (epsilon, delta)-DP guarantee: the profile of its dominating pair (MATH.md 5.4: mass
    delta at infinity, (1-delta)e^eps/(1+e^eps) at eps, (1-delta)/(1+e^eps) at -eps); exact, since that
    pair is itself (epsilon, delta)-DP (Kairouz-Oh-Viswanath 2015)."""
    if at >= epsilon:
        return delta
    p_hi = (1 - delta) / (1 + math.exp(-epsilon))
    # e^-eps / (1 + e^-eps) rather than 1 / (1 + e^eps): e^eps overflows past eps ~ 709
    p_lo = (1 - delta) * math.exp(-epsilon) / (1 + math.exp(-epsilon))
    d = delta + p_hi * -math.expm1(at - epsilon)
    if at < -epsilon:
        d += p_lo * -math.expm1(at + epsilon)
    return min(1.0, d)


def pure_rdp(epsilon: float, orders: Sequence[float]) -> tuple[float, ...]:
    """RDP curve implied by epsilon-DP: $\\min(\\varepsilon, \\alpha\\varepsilon^2/2)$ (Bun-Steinke 2016 Prop. 3.3
    gives eps^2/2-zCDP; eps-DP is (alpha, eps)-RDP for every alpha, Mironov 2017 Prop. 3)."""
    # alpha eps^2 / 2 rounded UP from the exact value (a float product rounds to nearest, and its
    # square underflows below 1e-162); a declared cost is never below the exact one (MATH.md 7.8)
    half = Fraction(epsilon) ** 2 / 2
    return tuple(min(epsilon, float_up(Fraction(a) * half)) for a in orders)
