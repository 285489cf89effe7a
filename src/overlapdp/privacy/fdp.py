"""f-DP numerics: trade-off functions, their tensor product and lower convex envelope, safely
(Dong, Roth, Su 2022; MATH.md 2, 5).

A trade-off function f maps a type-I error alpha to the smallest type-II error of any test; a LOWER f
means MORE privacy loss, so "safe" here means: every numerical f is a lower bound of the true one.
Everything goes through privacy profiles: for any epsilon, $f(\\alpha)\\ge 1-\\delta(\\varepsilon)-e^\\varepsilon\\alpha$
(the hockey-stick divergence bounds every test), so the maximum of these lines over a finite epsilon grid
is a convex, piecewise-linear LOWER bound of f (chords of samples of f would lie above it and are never
used; MATH.md 5.5). The lower convex envelope of several f_i has profile $\\max_i\\delta_i$ (MATH.md 2.3), so
:func:`lce` is exact in profile terms and a safe piecewise-linear lower bound as a curve.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import ApproxDP, BudgetError, PureDP
from overlapdp.privacy.pld import DEFAULT_H, PLD, compose_all
from overlapdp.privacy.profile import PrivacyProfile, approx_pair_atoms, gaussian_profile, laplace_profile
from overlapdp.validation import check_positive

_GRID_POINTS = 2001


class TradeOff(PrivacyProfile):
    """A symmetric trade-off function with a known (or safely bounded) privacy profile."""

    @abstractmethod
    def __call__(self, alpha: np.ndarray | float) -> np.ndarray:
        """f(alpha), elementwise (a safe lower bound where the class says so)."""

    def pld(self, h: float = DEFAULT_H) -> PLD:
        """A pessimistic PLD with this trade-off (connect-the-dots from the profile)."""
        lo, hi = self.loss_range()
        return PLD.from_profile(self.profile, lo, hi, h)


# Relative margin on the closed-form profiles of the Gaussian and Laplace trade-offs: their float
# evaluation is off by a few ulps either way (far in the Gaussian tail log_ndtr by up to ~1e-11
# relative; ``conversions.gdp_delta`` has the same margin), and a profile must never be below the true
# delta (against mpmath about half the points of a grid were, by an ulp or two).
_PROFILE_MARGIN = 1e-9


def _up(delta: np.ndarray) -> np.ndarray:
    """A float profile rounded to the safe side: widened by ``_PROFILE_MARGIN``, at most 1."""
    return np.asarray(np.minimum(1.0, np.asarray(delta) * (1 + _PROFILE_MARGIN)))


def _alpha(alpha: np.ndarray | float) -> np.ndarray:
    return np.asarray(np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0))


@dataclass(frozen=True)
class ApproxTradeOff(TradeOff):
    """$f_{\\varepsilon,\\delta}(\\alpha)=\\max\\{0,1-\\delta-e^\\varepsilon\\alpha,e^{-\\varepsilon}(1-\\delta-\\alpha)\\}$ (exact)."""

    epsilon: float
    delta: float = 0.0

    def __call__(self, alpha: np.ndarray | float) -> np.ndarray:
        a = _alpha(alpha)
        e, d = self.epsilon, self.delta
        return np.asarray(np.maximum(0.0, np.maximum(1 - d - math.exp(e) * a, math.exp(-e) * (1 - d - a))))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return np.array([conv.approx_delta(self.epsilon, self.delta, float(x)) for x in np.ravel(epsilons)])

    def loss_range(self) -> tuple[float, float]:
        return (-self.epsilon, self.epsilon)

    def pld(self, h: float = DEFAULT_H) -> PLD:
        """The dominating pair's atoms rounded UP to the grid (as ``OpaqueApproxDP(epsilon, delta).pld``)."""
        g = ApproxDP(self.epsilon, self.delta)  # validates, as the mechanism would
        return PLD.from_atoms(*approx_pair_atoms(g.epsilon, g.delta), h)


@dataclass(frozen=True)
class GaussianTradeOff(TradeOff):
    """$G_\\mu(\\alpha)=\\Phi(\\Phi^{-1}(1-\\alpha)-\\mu)$ (exact); its profile is the exact GDP profile of mu
    (MATH.md 5.8) rounded up by a relative 1e-9, never below the true delta."""

    mu: float

    def __call__(self, alpha: np.ndarray | float) -> np.ndarray:
        # scipy.special takes ~0.2 s to import: imported where used (DESIGN.md)
        from scipy.special import ndtr, ndtri

        a = _alpha(alpha)
        return np.asarray(ndtr(ndtri(1 - a) - self.mu))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        if self.mu == 0:
            return np.zeros(np.shape(epsilons))
        # mu itself (1 / (1 / mu) can be one ulp BELOW mu), and the float result rounded up
        return _up(gaussian_profile(check_positive(self.mu, "Gaussian DP mu"), epsilons))

    def loss_range(self) -> tuple[float, float]:
        m = self.mu
        return (m * m / 2 - 9 * m, m * m / 2 + 9 * m)


@dataclass(frozen=True)
class LaplaceTradeOff(TradeOff):
    """Trade-off of Lap(0,1) vs Lap(eps0,1) (Dong-Roth-Su 2022, Appendix): $1-e^{\\varepsilon_0}\\alpha$ for
    $\\alpha<e^{-\\varepsilon_0}/2$, $e^{-\\varepsilon_0}/(4\\alpha)$ up to 1/2, $e^{-\\varepsilon_0}(1-\\alpha)$ beyond (exact); its
    profile is the exact Laplace profile of eps0 rounded up by a relative 1e-9, never below the true delta."""

    eps0: float

    def __call__(self, alpha: np.ndarray | float) -> np.ndarray:
        a = _alpha(alpha)
        e = self.eps0
        t = math.exp(-e)
        with np.errstate(divide="ignore"):
            mid = t / (4 * np.maximum(a, 1e-300))
        return np.asarray(np.where(a < t / 2, 1 - a / t, np.where(a <= 0.5, mid, t * (1 - a))))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        # eps0 itself (1 / (1 / eps0) can be one ulp BELOW eps0), and the float result rounded up
        return _up(laplace_profile(check_positive(self.eps0, "Laplace eps0"), epsilons))

    def loss_range(self) -> tuple[float, float]:
        return (-self.eps0, self.eps0)


@dataclass(frozen=True)
class ProfileTradeOff(TradeOff):
    """A trade-off function known through a (safe, upper-bound) privacy profile; as a curve it is the
    maximum over ``grid`` of the lines $1-\\delta(\\varepsilon_j)-e^{\\varepsilon_j}\\alpha$: a convex, piecewise-linear
    LOWER bound of the true f (MATH.md 5.5)."""

    profile_fn: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    lo: float
    hi: float
    grid: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    source: PLD | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.grid.size == 0:
            span = max(self.hi - self.lo, 1e-9)
            grid = np.linspace(self.lo - 0.01 * span, self.hi + 0.01 * span, _GRID_POINTS)
            object.__setattr__(self, "grid", grid)

    @staticmethod
    def from_mechanism(mech: PrivacyProfile) -> ProfileTradeOff:
        """The trade-off of a mechanism (any :class:`PrivacyProfile`) from its profile and loss range."""
        lo, hi = mech.loss_range()
        return ProfileTradeOff(mech.profile, lo, hi)

    @staticmethod
    def from_pld(pld: PLD) -> ProfileTradeOff:
        ls = pld.losses
        lo, hi = (float(ls[0]), float(ls[-1])) if ls.size else (0.0, 0.0)

        def prof(e: np.ndarray) -> np.ndarray:
            return np.array([pld.delta_at(float(x)) for x in np.ravel(e)])

        # a grid of the PLD's own breakpoints (subsampled): the lines there are exact for the PLD
        grid = ls if ls.size <= _GRID_POINTS else np.linspace(lo, hi, _GRID_POINTS)
        return ProfileTradeOff(prof, lo, hi, np.asarray(grid), pld)

    def __call__(self, alpha: np.ndarray | float) -> np.ndarray:
        a = _alpha(alpha)
        deltas = np.asarray(self.profile_fn(self.grid))
        # lines 1 - delta_j - e^{eps_j} alpha, maximised over j, clamped at 0
        lines = (1 - deltas)[None, :] - np.exp(self.grid)[None, :] * np.ravel(a)[:, None]
        out = np.maximum(0.0, lines.max(axis=1))
        return np.asarray(out.reshape(np.shape(a)))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return np.asarray(self.profile_fn(np.asarray(epsilons, dtype=float)))

    def loss_range(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    def pld(self, h: float = DEFAULT_H) -> PLD:
        if self.source is not None and math.isclose(self.source.h, h):
            return self.source
        return super().pld(h)


def tensor(fs: Sequence[TradeOff], h: float = DEFAULT_H) -> ProfileTradeOff:
    """The tensor product $f_1\\otimes\\dots\\otimes f_k$ (composition, Dong-Roth-Su 2022 Thm. 3.2) through
    pessimistic PLDs: a safe lower bound. GDP factors compose exactly: use :meth:`GDP.compose` for them."""
    if not fs:
        raise BudgetError("the tensor product of no trade-off functions is undefined")
    return ProfileTradeOff.from_pld(compose_all([f.pld(h) for f in fs]))


def lce(fs: Sequence[TradeOff]) -> ProfileTradeOff:
    """The lower convex envelope of several trade-off functions (parallel composition, Theorem 5 of Smith
    et al. 2022; MATH.md 2.3), via $\\delta_{\\mathrm{lce}}(\\varepsilon)=\\max_i\\delta_i(\\varepsilon)$: exact as a profile,
    a safe piecewise-linear lower bound as a curve."""
    if not fs:
        raise BudgetError("the lower convex envelope of no trade-off functions is undefined")
    fl = list(fs)

    def prof(e: np.ndarray) -> np.ndarray:
        return np.asarray(np.max(np.stack([np.asarray(f.profile(e), dtype=float) for f in fl]), axis=0))

    lo = min(f.loss_range()[0] for f in fl)
    hi = max(f.loss_range()[1] for f in fl)
    return ProfileTradeOff(prof, lo, hi)


@dataclass(frozen=True)
class CLTApproximation:
    """The GDP central-limit approximation of a composition of pure-DP mechanisms (Dong-Roth-Su 2022,
    Thm. 3.5 / Cor. 3.6; MATH.md 2.4). ``mu`` is an APPROXIMATION (error O(1/n)), never a guarantee;
    ``safe`` is the guarantee that holds (basic composition, $f_{\\sum\\varepsilon_i,0}$)."""

    mu: float
    safe: PureDP
    approximate: bool = True

    def tradeoff(self) -> GaussianTradeOff:
        return GaussianTradeOff(self.mu)

    def safe_tradeoff(self) -> ApproxTradeOff:
        return ApproxTradeOff(self.safe.epsilon, 0.0)


def gdp_clt(epsilons: Sequence[float]) -> CLTApproximation:
    """$\\mu=\\frac{2\\sum_i\\varepsilon_i\\tanh(\\varepsilon_i/2)}{\\sqrt{\\sum_i\\varepsilon_i^2\\mathrm{sech}^2(\\varepsilon_i/2)}}$
    beside the safe $\\varepsilon'=\\sum\\varepsilon_i$ (MATH.md 2.4)."""
    es = [PureDP(e).epsilon for e in epsilons]
    if not es:
        raise BudgetError("the CLT approximation needs at least one mechanism")
    num = 2 * math.fsum(e * math.tanh(e / 2) for e in es)
    den = math.sqrt(math.fsum((e / math.cosh(e / 2)) ** 2 for e in es))
    return CLTApproximation(num / den if den > 0 else 0.0, PureDP(math.fsum(es)))
