"""Spend one total budget on a whole workload of counts, evenly, and release noisy answers with error bars.

The budget ``B`` is spread evenly over the ``t`` queries under one of two accountings (MATH.md section 2,
"Utility gain" and the closed forms of comp):

- sequential: every query pays, so each gets ``B/t`` (pure DP epsilon, zCDP rho) or ``B/sqrt(t)``
  (Gaussian DP mu, whose comp is the l2 norm);
- overlap-aware: a row only pays for the queries covering it (MATH.md 2, Theorem 6 of Smith et al.), so
  the largest equal per-query budget whose maximum overlap stays within ``B`` is ``B/gamma`` (pure, zCDP)
  or ``B/sqrt(gamma)`` (GDP), where ``gamma`` is the maximum overlap (comp ``count``,
  :func:`overlapdp.overlap.max_overlap`). When ``max_overlap`` gives up, its SAFE UPPER bound is used
  (never the lower: that would under-report the loss); since overlaps are integers, its floor is safe.

Per-query budgets are then rounded DOWN until the composition over ``gamma`` (resp. ``t``) queries is
within ``B`` in exact rational arithmetic, so floating point never over-spends.

Noise: the exact samplers of :mod:`overlapdp.mechanisms` (discrete Laplace for pure DP, discrete Gaussian
for zCDP and GDP; MATH.md 6). A GDP ``mu`` is DECLARED and accounted as ``mu^2/2``-zCDP (the guarantee CKS
2020 prove for the discrete Gaussian; :mod:`overlapdp.mechanisms.calibration`), and its budget ``B`` as
``B^2/2``-zCDP. Guarantees are composed with the definitions' own ``compose`` (MATH.md 2): sequentially
over all ``t`` queries, overlap-aware over the ``gamma`` queries covering the worst row.

Everything that can be wrong with the input is checked BEFORE any noise is drawn: :func:`plan_answers`
validates the budget, definition, accounting and level and computes ``gamma``; the caller then opens the
data (bad files and columns fail there) and :func:`answer_workload` counts and only then adds noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from overlapdp.errors import OverlapDPError
from overlapdp.mechanisms.calibration import CountBudget, declared_guarantee, noise_for
from overlapdp.mechanisms.noisy_counts import NoisyAnswer, add_noise
from overlapdp.mechanisms.randomness import RngLike
from overlapdp.privacy.definitions import GDP, ZCDP, BudgetError, PureDP, check_positive

if TYPE_CHECKING:  # the CLI imports this module for its constants: keep the search and engines out
    from overlapdp.engine.base import DomainReport, Engine
    from overlapdp.query import PredicateQuery

Definition = Literal["pure", "zcdp", "gdp"]
Accounting = Literal["overlap", "sequential"]
DEFINITIONS: tuple[Definition, ...] = ("pure", "zcdp", "gdp")
ACCOUNTINGS: tuple[Accounting, ...] = ("overlap", "sequential")
#: Default time limit (seconds) of the maximum-overlap search; past it its safe upper bound is used.
DEFAULT_EFFORT = 30.0


class AnswerError(OverlapDPError):
    """A bad request to answer a workload (definition, accounting, level, empty workload)."""


def check_budget(value: Any) -> float:
    """A total budget must be a positive finite number (:class:`BudgetError` otherwise)."""
    return check_positive("the budget", value)


def check_level(value: Any) -> float:
    try:
        lv = float(value)
    except (TypeError, ValueError):
        raise AnswerError(f"the confidence level must be a number in (0, 1), got {value!r}") from None
    if not 0 < lv < 1:
        raise AnswerError(f"the confidence level must lie strictly between 0 and 1, got {value!r}")
    return lv


def _declared_value(definition: Definition, per_query: float) -> Fraction:
    """The per-query loss that is charged, as an exact rational (epsilon, or rho for zCDP and GDP)."""
    g = declared_guarantee(_budget_object(definition, per_query))
    return Fraction(g.epsilon if isinstance(g, PureDP) else g.rho)


def _total_limit(definition: Definition, budget: float) -> Fraction:
    """The total budget in the units that are charged (GDP mu ``B`` is ``B^2/2``-zCDP)."""
    b = Fraction(budget)
    return b * b / 2 if definition == "gdp" else b


def _budget_object(definition: Definition, value: float) -> CountBudget:
    if definition == "pure":
        return PureDP(value)
    if definition == "zcdp":
        return ZCDP(value)
    return GDP(value)


def even_share(definition: Definition, budget: float, payers: int) -> float:
    """The largest equal per-query budget such that ``payers`` queries compose within ``budget``.

    ``B/n`` for pure DP and zCDP, ``B/sqrt(n)`` for GDP (MATH.md 2, closed forms of comp), rounded down
    until the declared charges of ``n`` queries sum to at most the total in exact arithmetic.
    """
    if payers < 1:
        raise AnswerError("a budget is shared among at least one query")
    share = budget / payers if definition != "gdp" else budget / math.sqrt(payers)
    limit = _total_limit(definition, budget)
    for _ in range(10_000):
        if payers * _declared_value(definition, share) <= limit:
            return share
        share = math.nextafter(share, 0.0) if _ < 8 else share * (1 - 1e-12)
    raise AnswerError("could not find a per-query budget within the total (internal error)")


@dataclass(frozen=True)
class AnswerPlan:
    """How the budget is spent: the maximum overlap, and the per-query budget under each accounting."""

    definition: Definition
    accounting: Accounting
    budget: float
    level: float
    queries: int
    gamma: int  # the maximum overlap, or the floor of its safe upper bound when not exact
    gamma_exact: bool
    gamma_lower: int
    overlap_algorithm: str
    witness: dict[str, Any] | None
    sequential_share: float
    overlap_share: float

    @property
    def per_query(self) -> float:
        return self.overlap_share if self.accounting == "overlap" else self.sequential_share

    @property
    def per_query_budget(self) -> CountBudget:
        return _budget_object(self.definition, self.per_query)

    def guarantees(self) -> dict[str, dict[str, float]]:
        """The guarantee of releasing every query with the chosen per-query budget: composed over all
        ``t`` queries (sequential) and over the ``gamma`` queries of the worst row (overlap-aware,
        MATH.md 2), with the definitions' own composition."""
        g = declared_guarantee(self.per_query_budget)
        out: dict[str, dict[str, float]] = {}
        for name, n in (("sequential", self.queries), ("overlap", self.gamma)):
            if isinstance(g, PureDP):
                out[name] = {"epsilon": PureDP.compose([g] * n).epsilon}
            else:
                out[name] = {"rho": ZCDP.compose([g] * n).rho}
        return out

    def noise_std(self, share: float) -> float:
        return math.sqrt(noise_for(_budget_object(self.definition, share)).variance)

    @property
    def noise_reduction(self) -> float:
        """1 - (noise std under overlap-aware shares) / (noise std under sequential shares), from the
        exact discrete noise distributions."""
        try:
            seq = self.noise_std(self.sequential_share)
        except BudgetError:  # the sequential share would need noise beyond the supported scale
            seq = math.inf
        if seq == 0 or math.isinf(seq):
            # No noise either way (huge budgets), or too much to calibrate sequentially: the ratio of
            # the continuous scales, gamma/t (Laplace) or sqrt(gamma/t) (Gaussian).
            ratio = self.gamma / self.queries
            return 0.0 if seq == 0 else 1 - (ratio if self.definition == "pure" else math.sqrt(ratio))
        return 1 - self.noise_std(self.overlap_share) / seq

    def to_json(self) -> dict[str, Any]:
        unit = {"pure": "epsilon", "zcdp": "rho", "gdp": "mu"}[self.definition]
        per_query: dict[str, Any] = {unit: self.per_query}
        declared = declared_guarantee(self.per_query_budget)
        if self.definition == "gdp":
            assert isinstance(declared, ZCDP)
            per_query["declared_zcdp_rho"] = declared.rho
        out: dict[str, Any] = {
            "definition": self.definition,
            "budget": {unit: self.budget},
            "accounting": self.accounting,
            "queries": self.queries,
            "gamma": self.gamma,
            "gamma_exact": self.gamma_exact,
            "gamma_lower": self.gamma_lower,
            "overlap_algorithm": self.overlap_algorithm,
            "per_query": per_query,
            "sequential_share": self.sequential_share,
            "overlap_share": self.overlap_share,
            "noise": noise_for(self.per_query_budget).describe(),
            "noise_std": self.noise_std(self.per_query),
            "guarantee": self.guarantees(),
            "witness": self.witness,
            "noise_reduction": self.noise_reduction,
            "level": self.level,
        }
        if self.definition == "gdp":
            out["budget"]["declared_zcdp_rho"] = float(_total_limit("gdp", self.budget))
            out["note"] = (
                "the discrete Gaussian is declared and accounted as mu^2/2-zCDP (CKS 2020); "
                "guarantees are in zCDP rho"
            )
        return out


def plan_answers(
    queries: Sequence[PredicateQuery],
    budget: float,
    definition: str,
    accounting: str = "overlap",
    *,
    level: float = 0.95,
    effort: float | None = DEFAULT_EFFORT,
) -> AnswerPlan:
    """Validate the request and share the budget (see the module docstring); draws no noise."""
    b = check_budget(budget)
    if definition not in DEFINITIONS:
        raise AnswerError(f"unknown definition {definition!r}; choose one of {', '.join(DEFINITIONS)}")
    if accounting not in ACCOUNTINGS:
        raise AnswerError(f"unknown accounting {accounting!r}; choose one of {', '.join(ACCOUNTINGS)}")
    lv = check_level(level)
    qs = list(queries)
    if not qs:
        raise AnswerError("the workload has no queries")
    d: Definition = definition
    from overlapdp.overlap import max_overlap

    res = max_overlap(qs, comp="count", effort=effort)
    # Overlaps are integers: the floor of a safe upper bound is still safe; never use the lower bound.
    gamma = max(1, math.floor(float(res.value if res.exact else res.upper) + 1e-9))
    seq = even_share(d, b, len(qs))
    ovl = even_share(d, b, gamma)
    used = ovl if accounting == "overlap" else seq
    try:  # every calibrated noise scale must be finite and representable (mechanisms.calibration)
        noise_for(_budget_object(d, used))
    except BudgetError as exc:
        raise BudgetError(f"budget = {budget!r} is too small: its per-query share {exc}") from None
    return AnswerPlan(
        definition=d,
        accounting=accounting,
        budget=b,
        level=lv,
        queries=len(qs),
        gamma=gamma,
        gamma_exact=bool(res.exact),
        gamma_lower=math.floor(float(res.lower) + 1e-9),
        overlap_algorithm=res.algorithm,
        witness=res.witness,
        sequential_share=seq,
        overlap_share=ovl,
    )


@dataclass(frozen=True)
class WorkloadAnswers:
    """Noisy answers with error bars, the plan that priced them and the data owner's domain report."""

    answers: list[NoisyAnswer]
    plan: AnswerPlan
    domain: DomainReport

    def to_json(self) -> dict[str, Any]:
        return {
            "answers": [
                {
                    "id": a.query_id,
                    "answer": a.value,
                    "error_bar": {"level": a.level, "low": a.low, "high": a.high},
                }
                for a in self.answers
            ],
            "privacy": self.plan.to_json(),
        }


def answer_workload(
    engine: Engine,
    queries: Sequence[PredicateQuery],
    plan: AnswerPlan,
    *,
    rng: RngLike = None,
    served: bool = False,
) -> WorkloadAnswers:
    """Exact counts once from ``engine``, then independent exact noise at the plan's per-query budget.

    Counting (where data problems surface) happens before any noise is drawn.
    """
    qs = list(queries)
    if len(qs) != plan.queries:
        raise AnswerError("the plan was made for another workload")
    counts = engine.counts(qs)
    domain = engine.report
    answers = add_noise(
        counts,
        plan.per_query_budget,
        level=plan.level,
        ids=[q.id for q in qs],
        rng=rng,
        served=served,
    )
    return WorkloadAnswers(answers, plan, domain)
