"""Concurrent composition of interactive mechanisms (MATH.md 3).

k interactive mechanisms run at once (k analysts, or one analyst's several sparse-vector sessions), an
adversary interleaving its queries arbitrarily and the analysts possibly colluding: the joint guarantee is

- pure DP: $\\sum_i\\varepsilon_i$ (Vadhan and Wang 2021);
- (epsilon_i, delta_i)-DP, mixed with pure DP: every (epsilon, delta) the optimal NON-interactive
  composition satisfies (Lyu 2022, Theorem 1), computed by :func:`overlapdp.privacy.optimal.compose_approx`
  (KOV when homogeneous, a pessimistic PLD otherwise: both upper-bound the optimal composition);
- Rényi DP: order by order $\\sum_i\\varepsilon_i(\\alpha)$ (Lyu 2022, Theorem 2);
- zCDP: $\\sum_i\\rho_i$ (Lyu 2022, Corollary 1); pure-DP members enter as $\\varepsilon^2/2$ and GDP members
  as $\\mu^2/2$ (both imply those zCDP guarantees);
- truncated CDP: $(\\rho_i,\\omega)$-tCDP members compose to $(\\sum_i\\rho_i,\\omega)$-tCDP (Lyu 2022,
  Corollary 1); with different omegas each member is weakened to the smallest one first (tCDP is
  monotone in omega), and zCDP / pure-DP / GDP members enter as $(\\rho,\\infty)$;
- f-DP: the tensor product $\\bigotimes_i f_i$ (Vadhan and Zhang 2023, arXiv 2207.08335), so GDP composes to
  $\\sqrt{\\sum\\mu_i^2}$; a non-interactive mechanism enters through its trade-off function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.privacy.fdp import GaussianTradeOff, ProfileTradeOff, TradeOff, tensor
from overlapdp.privacy.mechanisms import Mechanism
from overlapdp.privacy.optimal import Composition, compose_approx

Member = PureDP | ApproxDP | ZCDP | GDP | RDP | TCDP | TradeOff | Mechanism


@dataclass(frozen=True)
class ConcurrentGuarantee:
    """The joint guarantee of concurrently composed mechanisms, with the theorem that gives it."""

    definition: str
    guarantee: PureDP | ZCDP | GDP | RDP | TCDP | Composition | ProfileTradeOff
    theorem: str

    def epsilon_at(self, delta: float) -> float:
        return self.guarantee.epsilon_at(delta)

    def delta_at(self, epsilon: float) -> float:
        return self.guarantee.delta_at(epsilon)


def concurrent_composition(members: Sequence[Member]) -> ConcurrentGuarantee:
    """The guarantee of running ``members`` concurrently (see the module docstring for each theorem).

    All members must share one family: pure/approximate DP; zCDP (with pure DP and GDP converted); tCDP
    (with zCDP, pure DP and GDP converted to omega = inf); RDP on one order grid; f-DP (GDP, trade-off functions and mechanism descriptions). Mixes outside these raise
    :class:`BudgetError` rather than guess.
    """
    ms = list(members)
    if not ms:
        raise BudgetError("concurrent composition of no mechanisms is undefined")
    if all(isinstance(m, PureDP) for m in ms):
        return ConcurrentGuarantee(
            "pure", PureDP.compose(m for m in ms if isinstance(m, PureDP)), "Vadhan-Wang 2021"
        )
    if all(isinstance(m, PureDP | ApproxDP) for m in ms):
        return ConcurrentGuarantee("approx", compose_approx(ms), "Lyu 2022 Thm. 1 (optimal composition)")
    if all(isinstance(m, GDP) for m in ms):
        return ConcurrentGuarantee(
            "gdp", GDP.compose(m for m in ms if isinstance(m, GDP)), "Vadhan-Zhang 2023 (f-DP)"
        )
    if all(isinstance(m, RDP) for m in ms):
        return ConcurrentGuarantee("rdp", RDP.compose(m for m in ms if isinstance(m, RDP)), "Lyu 2022 Thm. 2")
    if all(isinstance(m, ZCDP | PureDP | GDP) for m in ms):
        # rhos add; ZCDP.compose rounds the exact sum up (fsum rounds to nearest)
        zs = [m if isinstance(m, ZCDP) else m.to_zcdp() for m in ms if isinstance(m, ZCDP | PureDP | GDP)]
        return ConcurrentGuarantee("zcdp", ZCDP.compose(zs), "Lyu 2022 Cor. 1")
    if any(isinstance(m, TCDP) for m in ms) and all(isinstance(m, TCDP | ZCDP | PureDP | GDP) for m in ms):
        ts = [
            m if isinstance(m, TCDP) else m.to_tcdp() for m in ms if isinstance(m, TCDP | ZCDP | PureDP | GDP)
        ]
        return ConcurrentGuarantee("tcdp", TCDP.compose(ts), "Lyu 2022 Cor. 1")
    if all(isinstance(m, TradeOff | Mechanism | GDP) for m in ms):
        fs = [_tradeoff(m) for m in ms if isinstance(m, TradeOff | Mechanism | GDP)]
        return ConcurrentGuarantee("fdp", tensor(fs), "Vadhan-Zhang 2023 (f-DP)")
    kinds = sorted({type(m).__name__ for m in ms})
    raise BudgetError(
        f"cannot compose a mix of {', '.join(kinds)} concurrently; convert them to one definition"
    )


def _tradeoff(m: TradeOff | Mechanism | GDP) -> TradeOff:
    if isinstance(m, GDP):
        return GaussianTradeOff(m.mu)
    if isinstance(m, Mechanism):
        return m.tradeoff()
    return m
