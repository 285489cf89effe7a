"""A privacy profile delta(epsilon) and its inverse, shared by mechanisms and trade-off functions.

MATH.md section 5: $\\delta(\\varepsilon)=1+f^*(-e^\\varepsilon)$; epsilon(delta) is found by a bisection that
stops on the safe (larger epsilon) side.
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
