"""Bridges from the mechanisms' declared guarantees and noise to the privacy package's accountant
(:class:`overlapdp.privacy.privacy_filter.PrivacyFilter`, the overlap-aware per-row filter; MATH.md 2.7, 3).

The filter charges :class:`~overlapdp.privacy.mechanisms.Mechanism` descriptions over a coverage. Every
description built here is at least as costly as the truth under every definition the accountant uses:

- a declared ``PureDP(eps)`` / ``ApproxDP(eps, delta)``: the dominating pair of every such mechanism
  (``OpaqueApproxDP``, MATH.md 5.4);
- a declared ``GDP(mu)``: the Gaussian mechanism with ``mu`` (it IS the trade-off function ``G_mu``);
- a declared ``ZCDP(rho)``: :class:`DeclaredZCDP`, which states ``rho`` and ``rho``'s RDP curve, the
  zCDP-to-(epsilon, delta) conversion as its profile (CKS 2020, MATH.md 5.8), and refuses to build a PLD
  (a connect-the-dots PLD from a conversion bound is not known to be safe);
- the noise of a noisy count: the privacy package's exact discrete Laplace / Gaussian descriptions with
  the scale rounded DOWN (less noise than actually used, so never an under-report).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from overlapdp.exact import float_down, float_up
from overlapdp.mechanisms.calibration import PrivacyDefinition, check_sensitivity
from overlapdp.mechanisms.errors import BudgetExceededError, MechanismError
from overlapdp.mechanisms.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, Noise
from overlapdp.privacy import conversions as conv
from overlapdp.privacy import mechanisms as pm
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.privacy.pld import DEFAULT_H, PLD
from overlapdp.privacy.privacy_filter import Admission, PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema


@pm.costed_by_fields
@dataclass(frozen=True)
class DeclaredZCDP(pm.Mechanism):
    """A mechanism known only to be ``rho``-zCDP (e.g. an interactive mechanism's declaration)."""

    rho: float
    name = "declared_zcdp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", ZCDP(self.rho).rho)

    def zcdp(self) -> ZCDP:
        return ZCDP(self.rho)

    def rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP:
        return ZCDP(self.rho).to_rdp(orders)  # alpha rho, rounded up

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return np.array([conv.zcdp_delta(self.rho, float(e)) if e > 0 else 1.0 for e in np.asarray(epsilons)])

    def delta_at(self, epsilon: float) -> float:
        return conv.zcdp_delta(self.rho, float(epsilon)) if epsilon > 0 else 1.0

    def epsilon_at(self, delta: float) -> float:
        return conv.zcdp_epsilon(self.rho, delta)

    def loss_range(self) -> tuple[float, float]:
        return (-self.epsilon_at(1e-12), self.epsilon_at(1e-12))

    def pld(self, h: float = DEFAULT_H) -> PLD:
        raise BudgetError("a mechanism known only to be zCDP has no safe PLD; account it in zCDP or RDP")


def declared_mechanism(guarantee: PrivacyDefinition) -> pm.Mechanism:
    """The accountant's description of a mechanism that declares ``guarantee`` (see the module doc)."""
    if isinstance(guarantee, PureDP):
        return pm.OpaqueApproxDP(guarantee.epsilon, 0.0)
    if isinstance(guarantee, ApproxDP):
        return pm.OpaqueApproxDP(guarantee.epsilon, guarantee.delta)
    if isinstance(guarantee, ZCDP):
        return DeclaredZCDP(guarantee.rho)
    if isinstance(guarantee, GDP):
        return pm.Gaussian(float_down_ratio(1.0, guarantee.mu), 1.0)
    raise MechanismError(f"cannot charge a declared {type(guarantee).__name__} guarantee")


def noise_mechanism(noise: Noise, sensitivity: int = 1) -> pm.Mechanism:
    """The accountant's description of one noisy count with this noise (scale rounded down: safe)."""
    sensitivity = check_sensitivity(sensitivity)
    if isinstance(noise, DiscreteLaplaceNoise):
        return pm.DiscreteLaplace(float_down(noise.scale), sensitivity)
    assert isinstance(noise, DiscreteGaussianNoise)
    sigma = math.nextafter(math.sqrt(float_down(noise.sigma2)), 0.0)
    if sigma > 1e5:  # beyond the exact accountant's range: its zCDP declaration, rounded up
        return DeclaredZCDP(float_up(Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2)))
    return pm.DiscreteGaussian(sigma, sensitivity)


def float_down_ratio(a: float, b: float) -> float:
    """``a / b`` rounded down (so that ``a / result >= b``)."""
    return math.nextafter(a / b, 0.0)


class OverlapFilter:
    """The privacy package's per-row filter behind the mechanisms' small filter interface: a charge is
    admitted iff every row's composed cost stays within ``budget`` (MATH.md 2.7); refused charges change
    nothing."""

    def __init__(self, schema: Schema, budget: PureDP | ZCDP | GDP | ApproxDP) -> None:
        self.schema = schema
        self.filter = PrivacyFilter(schema, budget)
        self._n = 0

    def try_charge(self, mechanism: pm.Mechanism, query: PredicateQuery | None) -> Admission:
        self._n += 1
        return self.filter.try_charge(mechanism, query, id=f"charge-{self._n}")

    def charge(self, mechanism: pm.Mechanism, query: PredicateQuery | None) -> Admission:
        adm = self.try_charge(mechanism, query)
        if not adm.admitted:
            raise BudgetExceededError(
                f"charging {mechanism.name} would pass the budget {self.filter.budget} "
                f"(value with it {adm.value}); nothing charged"
            )
        return adm
