"""Tight composition of (epsilon, delta)-DP mechanisms (MATH.md 5).

- :func:`kov_delta` / :func:`kov_epsilon`: the exact optimal composition of k identical (epsilon, delta)
  mechanisms (Kairouz, Oh, Viswanath 2015, Thm. 3.3): the k-fold product of the dominating pair, whose
  profile is $1-(1-\\delta)^k(1-\\delta_{RR}(\\varepsilon'))$ with
  $\\delta_{RR}(\\varepsilon')=\\sum_{\\ell}\\binom{k}{\\ell}\\frac{\\max(0,e^{(k-\\ell)\\varepsilon}-e^{\\varepsilon'}e^{\\ell\\varepsilon})}{(1+e^\\varepsilon)^k}$
  (at $\\varepsilon'=(k-2i)\\varepsilon$ this is the theorem's $\\delta_i$). Evaluated in log space (lgamma and
  log-sum-exp), so k in the millions works; a relative margin of 1e-9 covers the round-off.
- :func:`compose_approx`: the tightest certified composition of a list of mechanisms or guarantees:
  KOV when they are identical (epsilon, delta) guarantees, else pessimistic PLD composition with identical
  mechanisms grouped.
- :func:`advanced_composition`: Dwork-Rothblum-Vadhan 2010 (MATH.md 5.3), for reference and filters.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import ApproxDP, BudgetError, PureDP, check_delta
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP
from overlapdp.privacy.pld import DEFAULT_H, DEFAULT_TAIL, PLD, compose_all

_KOV_MARGIN = 1e-9


def _log_delta_rr(eps: float, k: int, at: float) -> float:
    """log of delta_RR(at) for the k-fold composition of eps-randomized response (log space)."""
    if eps == 0:
        return -math.inf
    ells = np.arange(0, k + 1, dtype=float)
    losses = (k - 2 * ells) * eps
    sel = losses > at
    if not np.any(sel):
        return -math.inf
    ells = ells[sel]
    losses = losses[sel]
    lbinom = np.array([math.lgamma(k + 1) - math.lgamma(x + 1) - math.lgamma(k - x + 1) for x in ells])
    # term = C(k,l) e^{(k-l) eps} (1 - e^{at - loss}) / (1+e^eps)^k
    log_norm = k * (eps + math.log1p(math.exp(-eps)))  # log (1+e^eps)^k, stable
    terms = lbinom + (k - ells) * eps + np.log(-np.expm1(at - losses)) - log_norm
    m = float(terms.max())
    return m + math.log(float(np.exp(terms - m).sum()))


def kov_delta(epsilon: float, delta: float, k: int, at: float) -> float:
    """Exact delta at ``at`` of the k-fold optimal composition of (epsilon, delta)-DP (KOV Thm. 3.3)."""
    g = ApproxDP(epsilon, delta)
    if k < 0 or int(k) != k:
        raise BudgetError(f"a composition count must be a non-negative integer, got {k!r}")
    if k == 0:
        return 0.0
    d_rr = math.exp(_log_delta_rr(g.epsilon, int(k), at))
    # 1 - (1-delta)^k (1 - d_rr), with (1-delta)^k in log space
    keep = math.exp(k * math.log1p(-g.delta)) if g.delta > 0 else 1.0
    return min(1.0, (1 - keep * (1 - d_rr)) * (1 + _KOV_MARGIN))


def kov_epsilon(epsilon: float, delta: float, k: int, target: float) -> float:
    """Smallest epsilon' with kov_delta(epsilon') <= target (inf if k*delta alone already exceeds it)."""
    check_delta(target)
    if k == 0:
        return 0.0
    if 1 - math.exp(k * math.log1p(-delta)) >= target:
        return math.inf
    return conv.invert_decreasing(lambda e: kov_delta(epsilon, delta, k, e), target, 0.0, k * epsilon)


def advanced_composition(epsilon: float, delta: float, k: int, delta_slack: float) -> ApproxDP:
    """$\\varepsilon'=\\sqrt{2k\\ln(1/\\delta')}\\varepsilon+k\\varepsilon(e^\\varepsilon-1)$, $\\delta_{tot}=k\\delta+\\delta'$
    (Dwork, Rothblum, Vadhan 2010; MATH.md 5.3); capped by basic composition k*epsilon."""
    check_delta(delta_slack)
    e = math.sqrt(2 * k * math.log(1 / delta_slack)) * epsilon + k * epsilon * math.expm1(epsilon)
    return ApproxDP(min(e, k * epsilon), k * delta + delta_slack)


@dataclass(frozen=True, eq=False)
class Composition:
    """The certified (epsilon, delta) profile of a composition, with the method that produced it."""

    method: str
    pld: PLD | None = field(default=None, repr=False)
    kov: tuple[float, float, int] | None = None
    pure_epsilon: float | None = None

    def delta_at(self, epsilon: float) -> float:
        if self.kov is not None:
            e, d, k = self.kov
            return kov_delta(e, d, k, epsilon)
        assert self.pld is not None
        return self.pld.delta_at(epsilon)

    def epsilon_at(self, delta: float) -> float:
        if self.kov is not None:
            e, d, k = self.kov
            return kov_epsilon(e, d, k, delta)
        assert self.pld is not None
        eps = self.pld.epsilon_at(delta)
        # basic composition is always valid too: never report more than the plain sum for pure ledgers
        if self.pure_epsilon is not None:
            eps = min(eps, self.pure_epsilon)
        return eps


def compose_approx(
    items: Sequence[object], *, h: float = DEFAULT_H, tail: float = DEFAULT_TAIL
) -> Composition:
    """The tightest composition this package certifies of ``items``: :class:`ApproxDP` / :class:`PureDP`
    guarantees or :class:`~overlapdp.privacy.mechanisms.Mechanism` descriptions.

    Identical (epsilon, delta) guarantees (or opaque mechanisms) use KOV's exact formula; anything else
    is a pessimistic PLD composition (MATH.md 5.4), identical mechanisms grouped and composed by repeated
    squaring. Sequential composition; for concurrent use see :mod:`overlapdp.privacy.concurrent`.
    """
    mechs: list[Mechanism] = []
    for it in items:
        if isinstance(it, Mechanism):
            mechs.append(it)
        elif isinstance(it, ApproxDP):
            mechs.append(OpaqueApproxDP(it.epsilon, it.delta))
        elif isinstance(it, PureDP):
            mechs.append(OpaqueApproxDP(it.epsilon, 0.0))
        else:
            raise BudgetError(f"cannot compose {type(it).__name__} as (epsilon, delta)-DP")
    if not mechs:
        raise BudgetError("nothing to compose")
    pures = [m.pure() for m in mechs]
    # basic composition's sum, rounded up (fsum rounds to nearest: ten 0.1 give 1.0 < 10 * Fraction(0.1))
    pure_eps = PureDP.compose(p for p in pures if p is not None).epsilon if all(pures) else None
    groups = Counter(m.key for m in mechs)
    if len(groups) == 1 and isinstance(mechs[0], OpaqueApproxDP):
        o = mechs[0]
        return Composition("kov", kov=(o.epsilon, o.delta, len(mechs)), pure_epsilon=pure_eps)
    first: dict[tuple[object, ...], Mechanism] = {}
    for m in mechs:
        first.setdefault(m.key, m)
    plds = [first[key].pld(h) for key in groups]
    pld = compose_all(plds, [groups[key] for key in groups], tail)
    return Composition("pld", pld=pld, pure_epsilon=pure_eps)
