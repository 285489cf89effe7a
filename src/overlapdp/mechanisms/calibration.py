"""From a per-query budget to a noise distribution, and from a noise distribution back to the
guarantee it gives (MATH.md 6.2).

- pure DP ``epsilon``: discrete Laplace of scale ``t = Delta/epsilon`` is ``(Delta/t)``-DP;
- zCDP ``rho``: discrete Gaussian with ``sigma^2 = Delta^2/(2 rho)`` is ``Delta^2/(2 sigma^2)``-zCDP
  (CKS 2020, Theorem 4);
- GDP ``mu``: the discrete Gaussian with ``sigma = Delta/mu`` is calibrated as asked, and DECLARED as
  ``mu^2/2``-zCDP, the guarantee CKS prove for it (a proof that the discrete Gaussian is exactly
  ``mu``-GDP is not known to us, and a guarantee is never claimed without one).

Parameters are rounded towards MORE noise (:mod:`overlapdp.mechanisms.rationals`), so the noise's
true guarantee is never weaker than the declared one, which is computed from the requested budget.

Ranges: a per-query budget whose noise would be wider than :data:`~overlapdp.mechanisms.noise.MAX_SCALE`
(``2^40``, about ``1.1e12``: Laplace scale ``t`` or Gaussian ``sigma``) is refused with a
:class:`BudgetError` naming the parameter, so every calibrated scale is a finite, representable number:
for sensitivity ``Delta``, ``epsilon >= Delta 2^-40`` (about ``9.1e-13``), ``rho >= Delta^2 2^-81``
(about ``4.1e-25``) and ``mu >= Delta 2^-40``. Large budgets
need no limit (the noise is then at least ``10^-6`` wide, see :func:`gaussian_sigma2`).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from functools import lru_cache
from typing import TypeAlias

from overlapdp.exact import float_up
from overlapdp.mechanisms.errors import MechanismError
from overlapdp.mechanisms.noise import MAX_SCALE, DiscreteGaussianNoise, DiscreteLaplaceNoise, Noise
from overlapdp.mechanisms.rationals import MAX_DENOMINATOR, round_up
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.validation import check_int, check_positive

PrivacyDefinition: TypeAlias = PureDP | ApproxDP | ZCDP | GDP | RDP
#: Budgets a noisy count can be calibrated to.
CountBudget: TypeAlias = PureDP | ZCDP | GDP | ApproxDP

# Keep the discrete Gaussian's integers within the vectorised sampler's 64-bit range when possible.
_GAUSS_DEN_BUDGET = 2.0**54
_GAUSS_NUM_BUDGET = 2.0**30


def check_sensitivity(sensitivity: int) -> int:
    """Counts move by whole rows: the sensitivity must be a positive integer (exact samplers need it)."""
    return check_int(sensitivity, "sensitivity", minimum=1, error=MechanismError)


def _too_small(name: str, value: float, smallest: Fraction) -> BudgetError:
    return BudgetError(
        f"{name} = {value!r} is too small: its noise would be wider than 2^40; "
        f"the smallest supported {name} here is {float_up(smallest):.4g}"
    )


def laplace_scale(epsilon: float, sensitivity: int = 1, *, name: str = "epsilon") -> Fraction:
    """``t >= Delta/epsilon`` as a short rational (rounded up); :class:`BudgetError` naming ``name``
    when ``t`` would exceed :data:`MAX_SCALE` (``epsilon < Delta 2^-40``)."""
    eps = check_positive(epsilon, name)
    exact_sensitivity = Fraction(check_sensitivity(sensitivity))
    if exact_sensitivity / Fraction(eps) > MAX_SCALE:
        raise _too_small(name, epsilon, exact_sensitivity / MAX_SCALE)
    return round_up(exact_sensitivity / Fraction(eps))


def gaussian_sigma2(sigma2: Fraction) -> Fraction:
    """``sigma^2`` rounded UP to a rational whose integers suit the vectorised sampler.

    A tiny ``sigma^2`` (a huge rho or mu) gets the largest denominator (the noise then has
    ``sigma^2 >= 10^-6``, more than asked, so the declared guarantee still holds)."""
    if sigma2 > MAX_SCALE * MAX_SCALE:
        raise BudgetError("sigma^2 must be at most 2^80")
    s2 = float(sigma2)
    if s2 <= 0 or not math.isfinite(s2):  # below the float range: the largest denominator
        return round_up(sigma2, max_denominator=MAX_DENOMINATOR, name="sigma^2")
    t = math.sqrt(s2) + 1
    limit = min(math.sqrt(_GAUSS_DEN_BUDGET / (2 * s2 * t * t)), _GAUSS_NUM_BUDGET / s2)
    den = MAX_DENOMINATOR if not limit < MAX_DENOMINATOR else max(1, int(limit))
    return round_up(sigma2, max_denominator=den, name="sigma^2")


def laplace_for(epsilon: float, sensitivity: int = 1, *, name: str = "epsilon") -> DiscreteLaplaceNoise:
    """Discrete Laplace noise that makes a sensitivity-``Delta`` count ``epsilon``-DP."""
    return DiscreteLaplaceNoise(laplace_scale(epsilon, sensitivity, name=name))


def gaussian_for_rho(rho: float, sensitivity: int = 1, *, name: str = "rho") -> DiscreteGaussianNoise:
    """Discrete Gaussian noise that makes a sensitivity-``Delta`` count ``rho``-zCDP; :class:`BudgetError`
    naming ``name`` when ``sigma`` would exceed :data:`MAX_SCALE` (``rho < Delta^2 2^-81``)."""
    r = check_positive(rho, name)
    sensitivity = check_sensitivity(sensitivity)
    sigma2 = Fraction(sensitivity * sensitivity) / (2 * Fraction(r))
    if sigma2 > MAX_SCALE * MAX_SCALE:
        raise _too_small(name, rho, Fraction(sensitivity * sensitivity) / (2 * MAX_SCALE * MAX_SCALE))
    return DiscreteGaussianNoise(gaussian_sigma2(sigma2))


def gaussian_for_mu(mu: float, sensitivity: int = 1, *, name: str = "mu") -> DiscreteGaussianNoise:
    """Discrete Gaussian noise with ``sigma = Delta/mu`` (declared as ``mu^2/2``-zCDP, see module doc);
    :class:`BudgetError` naming ``name`` when ``sigma`` would exceed :data:`MAX_SCALE`."""
    m = _declarable_mu(name, mu)
    sensitivity = check_sensitivity(sensitivity)
    sigma2 = Fraction(sensitivity * sensitivity) / (Fraction(m) * Fraction(m))
    if sigma2 > MAX_SCALE * MAX_SCALE:
        raise _too_small(name, mu, Fraction(sensitivity) / MAX_SCALE)
    return DiscreteGaussianNoise(gaussian_sigma2(sigma2))


def noise_for(budget: CountBudget, sensitivity: int = 1) -> Noise:
    """The noise a per-query ``budget`` buys for a count of the given sensitivity.

    Memoised (budgets are frozen values and the noise is immutable): a noisy count per call would
    otherwise redo the rational calibration for every answer. ``typed=True`` keeps ``True`` apart from
    ``1``, so a boolean sensitivity is still refused; errors are never cached.
    """
    try:
        return _noise_for_cached(budget, sensitivity)
    except TypeError:  # an unhashable argument: not a budget; the uncached path names the problem
        return _noise_for(budget, sensitivity)


@lru_cache(maxsize=1024, typed=True)
def _noise_for_cached(budget: CountBudget, sensitivity: int) -> Noise:
    return _noise_for(budget, sensitivity)


def _noise_for(budget: CountBudget, sensitivity: int) -> Noise:
    if isinstance(budget, PureDP):
        return laplace_for(budget.epsilon, sensitivity)
    if isinstance(budget, ApproxDP):
        if budget.delta != 0:
            raise MechanismError(
                "noisy counts are calibrated to PureDP, ZCDP or GDP budgets; "
                "an ApproxDP budget with delta > 0 is not supported (convert it first)"
            )
        return laplace_for(budget.epsilon, sensitivity)
    if isinstance(budget, ZCDP):
        return gaussian_for_rho(budget.rho, sensitivity)
    if isinstance(budget, GDP):
        return gaussian_for_mu(budget.mu, sensitivity)
    raise MechanismError(f"cannot calibrate noise to a {type(budget).__name__} budget")


def guarantee_of(noise: Noise, sensitivity: int = 1) -> PureDP | ZCDP:
    """The guarantee the noise itself gives a sensitivity-``Delta`` count (floats rounded UP).

    Discrete Laplace of scale ``t``: ``(Delta/t)``-DP; discrete Gaussian: ``Delta^2/(2 sigma^2)``-zCDP
    (MATH.md 6.2).
    """
    sensitivity = check_sensitivity(sensitivity)
    if isinstance(noise, DiscreteLaplaceNoise):
        return PureDP(float_up(sensitivity / noise.scale))
    return ZCDP(float_up(Fraction(sensitivity * sensitivity) / (2 * noise.sigma2)))


def declared_guarantee(budget: CountBudget) -> PureDP | ZCDP:
    """What a count calibrated to ``budget`` is declared (and charged) as.

    The requested value itself (the noise was rounded towards more noise), except GDP ``mu``, declared
    as ``mu^2/2``-zCDP (see the module doc).
    """
    if isinstance(budget, PureDP):
        return budget
    if isinstance(budget, ApproxDP):
        return PureDP(budget.epsilon)
    if isinstance(budget, ZCDP):
        return budget
    if isinstance(budget, GDP):
        mu = _declarable_mu("mu", budget.mu)
        return ZCDP(float_up(Fraction(mu) * Fraction(mu) / 2))
    raise MechanismError(f"cannot calibrate noise to a {type(budget).__name__} budget")


def _declarable_mu(name: str, mu: float) -> float:
    """A GDP ``mu`` whose declared ``mu^2/2``-zCDP is a float (``mu <= 1.8e154``)."""
    m = check_positive(mu, name)
    if Fraction(m) * Fraction(m) / 2 > Fraction(sys.float_info.max):
        raise BudgetError(f"{name} = {mu!r} is too large: the declared rho = {name}^2/2 is not a float")
    return m
