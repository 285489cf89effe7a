"""A privacy profile delta(epsilon) and its inverse, shared by mechanisms and trade-off functions.

MATH.md 5.5: $\\delta(\\varepsilon)=1+f^*(-e^\\varepsilon)$; epsilon(delta) is found by a bisection that
stops on the safe (larger epsilon) side.

The closed-form profiles of the Laplace and Gaussian pairs and the atoms of the (epsilon, delta) dominating
pair live here too: both :mod:`overlapdp.privacy.mechanisms` (the mechanisms) and
:mod:`overlapdp.privacy.fdp` (their trade-off functions) evaluate them, and neither imports the other's
classes for it (mechanisms imports fdp; fdp imports only this module and those below it).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import check_delta


class PrivacyProfile(ABC):
    """Anything with a decreasing privacy profile: delta at each epsilon, and epsilon at a delta."""

    @abstractmethod
    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        """delta(epsilon) at each epsilon (exact, or an upper bound where the subclass says so)."""

    @abstractmethod
    def loss_range(self) -> tuple[float, float]:
        """An interval holding (all but a negligible, safely handled part of) the privacy loss."""

    def delta_at(self, epsilon: float) -> float:
        return float(self.profile(np.array([float(epsilon)]))[0])

    def epsilon_at(self, delta: float) -> float:
        """The smallest epsilon with delta(epsilon) <= delta, rounded to the safe side (inf if none)."""
        check_delta(delta)
        _, hi = self.loss_range()
        if self.delta_at(hi) > delta:
            return math.inf
        return conv.invert_decreasing(self.delta_at, delta, 0.0, max(hi, 0.0))


def laplace_profile(eps0: float, epsilons: np.ndarray) -> np.ndarray:
    """Exact profile of Lap(0, b) vs Lap(Delta, b) with $\\varepsilon_0=\\Delta/b$: $1-e^{(\\varepsilon-\\varepsilon_0)/2}$
    on $[-\\varepsilon_0,\\varepsilon_0]$, 0 above, $1-e^\\varepsilon$ below (integrating the privacy loss; MATH.md 5.4)."""
    e = np.asarray(epsilons, dtype=float)
    mid = -np.expm1((np.minimum(e, eps0) - eps0) / 2)
    low = -np.expm1(np.minimum(e, 0.0))
    return np.where(e >= eps0, 0.0, np.where(e < -eps0, low, mid))


def gaussian_profile(mu: float, epsilons: np.ndarray) -> np.ndarray:
    """Exact profile of N(0, 1) vs N(mu, 1) (Balle-Wang 2018, Thm. 8; MATH.md 5.8), in logs so that it
    neither underflows nor cancels: $\\Phi(-\\varepsilon/\\mu+\\mu/2)-e^\\varepsilon\\Phi(-\\varepsilon/\\mu-\\mu/2)$."""
    # scipy.special takes ~0.2 s to import: imported where used (DESIGN.md)
    from scipy.special import log_ndtr

    e = np.asarray(epsilons, dtype=float)
    la = log_ndtr(-e / mu + mu / 2)
    lb = log_ndtr(-e / mu - mu / 2) + e
    # Where both logs are -inf (delta is 0 there) the unselected branch is nan: not an error.
    with np.errstate(invalid="ignore"):
        gap = np.minimum(lb - la, 0.0)
    return np.asarray(np.where(lb >= la, 0.0, np.exp(la) * -np.expm1(gap)))


def approx_pair_atoms(epsilon: float, delta: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The privacy-loss atoms of the (epsilon, delta) dominating pair (Kairouz-Oh-Viswanath 2015;
    MATH.md 5.4): mass delta at +infinity, $(1-\\delta)\\frac{e^\\varepsilon}{1+e^\\varepsilon}$ at epsilon, the rest at
    -epsilon. Returns (losses, probabilities, mass at +infinity)."""
    return (
        np.array([epsilon, -epsilon]),
        np.array([(1 - delta) / (1 + math.exp(-epsilon)), (1 - delta) / (1 + math.exp(epsilon))]),
        delta,
    )
