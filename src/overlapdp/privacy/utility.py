"""Utility gain of overlap-aware accounting (MATH.md 2.6).

For a workload Q of t counting queries (weights w_q, default 1) and a total budget B spread in proportion
to the weights: sequential accounting charges $\\mathrm{comp}(Q)$ and gives query q the share
$B w_q/\\mathrm{comp}(Q)$; overlap-aware accounting charges only the worst row, $\\gamma_w(Q)$, and gives
$B w_q/\\gamma_w(Q)$. The budget gain is $U=1-\\gamma_w(Q)/\\mathrm{comp}(Q)$. Noise follows:

- pure DP (Laplace, comp = sum): scale $\\Delta/\\varepsilon_q$, expected $|\\text{noise}|$ = scale; noise
  shrinks by the factor $\\gamma_w/\\mathrm{comp}$.
- zCDP (Gaussian, comp = sum of rho): $\\sigma_q=\\Delta/\\sqrt{2\\rho_q}$, $E|N|=\\sigma\\sqrt{2/\\pi}$; noise
  shrinks by $\\sqrt{\\gamma_w/\\mathrm{comp}}$.
- GDP (Gaussian, comp = l2 of mu): $\\sigma_q=\\Delta/\\mu_q$; noise shrinks by $\\gamma_{l2}/\\|w\\|_2$.

The maximum overlap comes from :func:`overlapdp.overlap.max_overlap`; when it is not exact its safe
UPPER bound is used, so the overlap-aware budgets stay valid (and the gain is under-stated, not over).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from overlapdp.privacy.definitions import BudgetError
from overlapdp.privacy.measures import count_measure
from overlapdp.validation import check_positive

Definition = Literal["pure", "zcdp", "gdp"]


@dataclass(frozen=True)
class UtilityGain:
    """Per-query budgets and mean expected absolute noise, sequential vs overlap-aware."""

    definition: str
    queries: int
    budget: float
    comp: float  # comp(Q): what sequential accounting charges per unit budget share
    gamma: float  # gamma_w(Q) (a safe upper bound when not exact)
    exact: bool
    sequential_budget: float  # mean per-query budget (epsilon, rho or mu)
    overlap_budget: float
    sequential_noise: float  # mean expected |noise| per query
    overlap_noise: float

    @property
    def gain(self) -> float:
        """U = 1 - gamma_w(Q)/comp(Q) (MATH.md 2.6)."""
        return 1 - self.gamma / self.comp

    @property
    def noise_reduction(self) -> float:
        """1 - overlap noise / sequential noise."""
        return 1 - self.overlap_noise / self.sequential_noise

    def as_dict(self) -> dict[str, Any]:
        return {
            "definition": self.definition,
            "queries": self.queries,
            "budget": self.budget,
            "comp": self.comp,
            "gamma": self.gamma,
            "exact": self.exact,
            "sequential_budget": self.sequential_budget,
            "overlap_budget": self.overlap_budget,
            "sequential_noise": self.sequential_noise,
            "overlap_noise": self.overlap_noise,
            "gain": self.gain,
            "noise_reduction": self.noise_reduction,
        }


def utility_gain(
    queries: Sequence[Any],
    budget: float,
    *,
    definition: Definition = "pure",
    weights: Sequence[float] | None = None,
    sensitivity: float = 1.0,
    effort: Any = None,
) -> UtilityGain:
    """Per-query budget and expected absolute noise under both accountings, and U (MATH.md 2.6)."""
    from overlapdp.overlap import max_overlap

    b = check_positive(budget, "budget")
    qs = list(queries)
    if not qs:
        raise BudgetError("the utility gain of an empty workload is undefined")
    w = [float(x) for x in weights] if weights is not None else [float(getattr(q, "weight", 1.0)) for q in qs]
    if len(w) != len(qs) or any(not math.isfinite(x) or x <= 0 for x in w):
        raise BudgetError("utility gain needs one positive finite weight per query")
    m = count_measure(definition)
    # the weights composed as a row covered by every query would compose them (sum, or l2 for GDP)
    comp_q = math.sqrt(math.fsum(x * x for x in w)) if m.comp == "l2" else math.fsum(w)
    res = max_overlap(qs, weights=w, comp=m.comp, effort=effort)
    gamma = float(res.value if res.exact else res.upper)
    seq = [b * x / comp_q for x in w]
    ovl = [b * x / gamma for x in w]
    noise_seq = [m.expected_abs_noise(share, sensitivity) for share in seq]
    noise_ovl = [m.expected_abs_noise(share, sensitivity) for share in ovl]
    n = len(qs)
    return UtilityGain(
        definition=definition,
        queries=n,
        budget=b,
        comp=comp_q,
        gamma=gamma,
        exact=bool(res.exact),
        sequential_budget=math.fsum(seq) / n,
        overlap_budget=math.fsum(ovl) / n,
        sequential_noise=math.fsum(noise_seq) / n,
        overlap_noise=math.fsum(noise_ovl) / n,
    )
