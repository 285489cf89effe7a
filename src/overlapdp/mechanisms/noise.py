"""The two noise distributions on the integers, exact sampling and exact error bars (MATH.md 6.2).

:class:`DiscreteLaplaceNoise` (scale ``t``): pmf ``(e^{1/t}-1)/(e^{1/t}+1) e^{-|y|/t}``; added to a count of
sensitivity ``Delta`` it is ``(Delta/t)``-DP (CKS 2020, and Ghosh, Roughgarden, Sundararajan 2009).

:class:`DiscreteGaussianNoise` (variance parameter ``sigma^2``): pmf proportional to ``e^{-y^2/(2 sigma^2)}``;
added to a count of sensitivity ``Delta`` it is ``Delta^2/(2 sigma^2)``-zCDP (CKS 2020, Theorem 4).

Both are symmetric about 0, so a noisy count ``a = q(D) + Y`` gives the interval ``[a - w, a + w]`` for
``q(D)``, with coverage exactly ``P(|Y| <= w)``; :meth:`half_width` returns the smallest ``w`` whose
coverage is at least the requested level, computed from the exact distribution: the discrete Laplace
tail in closed form ``P(|Y| > w) = 2 q^{w+1}/(1+q)`` with ``q = e^{-1/t}``; the discrete Gaussian by
summing its pmf (for ``sigma > 10^5``, where the sum gets long, by the bound
``P(|Y| > w) <= 2 Phi(-w/sigma)``, valid because the normaliser is at least ``sigma sqrt(2 pi)`` by
Poisson summation and the tail sum is at most the Gaussian integral; that interval is conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache

import numpy as np
import numpy.typing as npt

from overlapdp.display import decimal
from overlapdp.mechanisms.errors import MechanismError
from overlapdp.mechanisms.randomness import RandomSource
from overlapdp.mechanisms.rationals import as_positive_fraction
from overlapdp.mechanisms.samplers import (
    discrete_gaussian_batch,
    discrete_gaussian_scalar,
    discrete_laplace_batch,
    discrete_laplace_scalar,
)
from overlapdp.validation import check_level

_SUMMED_SIGMA_LIMIT = 1e5
#: Largest noise scale (discrete Laplace ``t``, discrete Gaussian ``sigma``) that is sampled and described.
#: ``2^40`` (about ``1.1e12``): beyond it the float error bars lose their accuracy (``1 - e^{-1/t}`` keeps
#: about 4 of its 16 digits at ``t = 2^40`` and none near ``2^54``) and draws could leave 64-bit integers; a
#: noise that large hides any count a table can hold, so a budget that needs it is refused as too small
#: (:mod:`.calibration`).
MAX_SCALE = 2**40
# Parameters whose integers the vectorised samplers handle without falling back element by element.
_POOLED_LIMIT = 1 << 31


@dataclass(frozen=True)
class DiscreteLaplaceNoise:
    """The discrete Laplace distribution of rational scale ``t`` (exact)."""

    scale: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", as_positive_fraction("scale", self.scale))
        if self.scale > MAX_SCALE:
            raise MechanismError(
                "the discrete Laplace scale is above the largest supported, 2^40: "
                "the privacy parameter that asks for it is too small"
            )

    @property
    def _q(self) -> float:
        return math.exp(-1.0 / float(self.scale))

    @cached_property
    def _pool_key(self) -> tuple[str, int, int] | None:
        """The pool that serves single draws, or None when the integers are too large to vectorise.
        (Computed once: ``sample`` is called once per noisy answer.)"""
        s, r = self.scale.numerator, self.scale.denominator
        return None if s >= _POOLED_LIMIT or r >= _POOLED_LIMIT else ("discrete Laplace", s, r)

    def sample(self, source: RandomSource) -> int:
        """One exact draw (from the source's pool of vectorised draws when the integers are small)."""
        key = self._pool_key
        if key is None:
            return discrete_laplace_scalar(source, self.scale.numerator, self.scale.denominator)
        _, s, r = key
        return source.pooled(key, lambda n: discrete_laplace_batch(source, s, r, n))

    def sample_many(self, source: RandomSource, n: int) -> npt.NDArray[np.int64]:
        return discrete_laplace_batch(source, self.scale.numerator, self.scale.denominator, n)

    def pmf(self, y: npt.ArrayLike) -> npt.NDArray[np.float64]:
        q = self._q
        return np.asarray((1 - q) / (1 + q) * np.power(q, np.abs(np.asarray(y, dtype=np.float64))))

    def tail_abs(self, w: int) -> float:
        """``P(|Y| > w)`` in closed form, ``2 q^{w+1} / (1 + q)``."""
        if w < 0:
            return 1.0
        return 2.0 * math.exp(-(w + 1) / float(self.scale)) / (1 + self._q)

    @property
    def variance(self) -> float:
        q = self._q
        return 2 * q / (1 - q) ** 2

    def half_width(self, level: float) -> int:
        """The smallest ``w`` with ``P(|Y| <= w) >= level``."""
        return _laplace_half_width(self, check_level(level))

    def _half_width(self, level: float) -> int:
        alpha = 1 - level
        # Solve 2 q^{w+1}/(1+q) <= alpha with log q = -1/t, then correct float rounding both ways.
        w = max(0, math.ceil(-math.log(alpha * (1 + self._q) / 2) * float(self.scale)) - 1)
        while self.tail_abs(w) > alpha:
            w += 1
        while w > 0 and self.tail_abs(w - 1) <= alpha:
            w -= 1
        return w

    def describe(self) -> str:
        """For people: the scale as a decimal of at most 10 significant digits (exact in ``scale``)."""
        return f"discrete Laplace, scale {decimal(self.scale, 10)}"


@dataclass(frozen=True)
class DiscreteGaussianNoise:
    """The discrete Gaussian ``N_Z(0, sigma^2)`` with rational ``sigma^2`` (exact)."""

    sigma2: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma2", as_positive_fraction("sigma^2", self.sigma2))
        if self.sigma2 > MAX_SCALE * MAX_SCALE:
            raise MechanismError(
                "the discrete Gaussian sigma is above the largest supported, 2^40: "
                "the privacy parameter that asks for it is too small"
            )

    @property
    def sigma(self) -> float:
        return math.sqrt(float(self.sigma2))

    @cached_property
    def _pool_key(self) -> tuple[str, int, int] | None:
        """The pool that serves single draws, or None when the integers are too large to vectorise."""
        a, b = self.sigma2.numerator, self.sigma2.denominator
        return None if a >= _POOLED_LIMIT or b >= _POOLED_LIMIT else ("discrete Gaussian", a, b)

    def sample(self, source: RandomSource) -> int:
        """One exact draw (from the source's pool of vectorised draws when the integers are small)."""
        key = self._pool_key
        if key is None:
            return discrete_gaussian_scalar(source, self.sigma2.numerator, self.sigma2.denominator)
        _, a, b = key
        return source.pooled(key, lambda n: discrete_gaussian_batch(source, a, b, n))

    def sample_many(self, source: RandomSource, n: int) -> npt.NDArray[np.int64]:
        return discrete_gaussian_batch(source, self.sigma2.numerator, self.sigma2.denominator, n)

    @cached_property
    def _half_pmf(self) -> npt.NDArray[np.float64] | None:
        """``P(Y = y)`` for ``y = 0 .. M`` (summed exactly), or None when sigma is too large to sum."""
        sigma = self.sigma
        if sigma > _SUMMED_SIGMA_LIMIT:
            return None
        # Beyond 40 sigma + 40 the remaining mass is below e^{-800}: zero in double precision.
        m = math.ceil(40 * sigma) + 40
        ys = np.arange(m + 1, dtype=np.float64)
        w = np.exp(-(ys * ys) / (2.0 * float(self.sigma2)))
        z = w[0] + 2.0 * w[1:].sum()
        return np.asarray(w / z)

    def pmf(self, y: npt.ArrayLike) -> npt.NDArray[np.float64]:
        ay = np.abs(np.asarray(y, dtype=np.int64))
        half = self._half_pmf
        if half is None:
            s2 = float(self.sigma2)
            return np.asarray(np.exp(-(ay.astype(np.float64) ** 2) / (2 * s2)) / math.sqrt(2 * math.pi * s2))
        out = np.zeros(ay.shape, dtype=np.float64)
        inside = ay < half.size
        out[inside] = half[ay[inside]]
        return out

    @property
    def variance(self) -> float:
        half = self._half_pmf
        if half is None:
            return float(self.sigma2)  # an upper bound (the discrete Gaussian's variance is < sigma^2)
        ys = np.arange(half.size, dtype=np.float64)
        return float(2.0 * (ys * ys * half).sum())

    def tail_abs(self, w: int) -> float:
        """``P(|Y| > w)`` (by summation; an upper bound for sigma > 10^5)."""
        if w < 0:
            return 1.0
        half = self._half_pmf
        if half is None:
            return float(2.0 * (1.0 - _phi(w / self.sigma)))
        if w + 1 >= half.size:
            return 0.0
        return float(2.0 * half[w + 1 :].sum())

    def half_width(self, level: float) -> int:
        """The smallest ``w`` with ``P(|Y| <= w) >= level`` (memoised by ``(sigma^2, level)``: a noisy count
        per call would otherwise sum the pmf again for every answer)."""
        return _gaussian_half_width(self.sigma2, check_level(level))

    def _half_width(self, level: float) -> int:
        alpha = 1 - level
        half = self._half_pmf
        if half is None:
            # scipy.special takes ~0.2 s to import: imported where used (DESIGN.md)
            from scipy.special import ndtri

            return math.ceil(self.sigma * float(-ndtri(alpha / 2)))
        # tails[w] = P(|Y| > w), summed from the far end for accuracy in small tails.
        tails = 2.0 * np.cumsum(half[::-1])[::-1]
        tails = np.append(tails[1:], 0.0)
        return int(np.argmax(tails <= alpha))

    def describe(self) -> str:
        """For people: sigma^2 as a decimal of at most 10 significant digits (exact in ``sigma2``)."""
        return f"discrete Gaussian, sigma^2 {decimal(self.sigma2, 10)}"


@lru_cache(maxsize=1024)
def _laplace_half_width(noise: DiscreteLaplaceNoise, level: float) -> int:
    return noise._half_width(level)


@lru_cache(maxsize=1024)
def _gaussian_half_width(sigma2: Fraction, level: float) -> int:
    # Keyed by the parameters, not the noise object: the object's summed pmf (up to 4 million floats)
    # is dropped with it instead of being kept alive by the cache.
    return DiscreteGaussianNoise(sigma2)._half_width(level)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


Noise = DiscreteLaplaceNoise | DiscreteGaussianNoise
