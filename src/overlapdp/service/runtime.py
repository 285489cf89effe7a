"""The service's narrow interface to accounting, noise and counting.

Everything the service needs from ``overlapdp.privacy``, ``overlapdp.mechanisms`` and
``overlapdp.engine`` goes through this module, so that the rest of the service does not depend on how
they are implemented:

- :func:`mechanism_for` and :func:`load_of`: the mechanism answering one counting query under the data
  set's privacy definition and the additive per-row load it puts on each row it covers;
- :class:`QuotaFilter`: a per-row (individual) filter: admit a charge iff every row it covers stays within
  the budget (MATH.md section 2, "Adaptive use": valid for pure DP (Rogers, Roth, Ullman, Vadhan 2016)
  and for zCDP with per-row loads (Feldman and Zrnic 2021));
- :func:`noisy_count`: one released answer with its error bars;
- :func:`global_guarantee`: the bound over all analysts together by concurrent composition (MATH.md 3).

TEMPORARY parts are marked below; each says which module replaces it.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from overlapdp.privacy import BudgetError
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

#: Privacy definitions a data set can be served under, and the name of each one's parameter.
DEFINITIONS: dict[str, str] = {"pure": "epsilon", "zcdp": "rho"}


def check_definition(definition: str) -> str:
    if definition not in DEFINITIONS:
        raise BudgetError(
            f"privacy definition {definition!r} is not served; use one of {', '.join(DEFINITIONS)}"
        )
    return definition


def check_amount(name: str, value: Any) -> float:
    """A budget or per-query parameter: a positive finite number."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BudgetError(f"{name} must be a number") from None
    if not math.isfinite(v) or v <= 0:
        raise BudgetError(f"{name} must be a positive finite number, got {value!r}")
    return v


@dataclass(frozen=True)
class Mechanism:
    """The mechanism answering one count (sensitivity 1 under add/remove).

    ``pure``: discrete Laplace with scale ``t = 1/epsilon`` is epsilon-DP (MATH.md 6, Canonne, Kamath,
    Steinke 2020). ``zcdp``: discrete Gaussian with ``sigma^2 = 1/(2 rho)`` is rho-zCDP (MATH.md 6).
    """

    definition: str
    parameter: float

    @property
    def name(self) -> str:
        return "discrete_laplace" if self.definition == "pure" else "discrete_gaussian"

    @property
    def scale(self) -> float:
        """Laplace scale t or Gaussian sigma."""
        if self.definition == "pure":
            return 1.0 / self.parameter
        return math.sqrt(1.0 / (2.0 * self.parameter))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "definition": self.definition,
            DEFINITIONS[self.definition]: self.parameter,
            "scale": self.scale,
        }


def mechanism_for(definition: str, parameter: float) -> Mechanism:
    check_definition(definition)
    return Mechanism(definition, check_amount(DEFINITIONS[definition], parameter))


def load_of(definition: str, parameter: float) -> float:
    """The additive per-row load of one charge: epsilon (pure DP sums, MATH.md 2) or rho (zCDP sums)."""
    check_definition(definition)
    return float(parameter)


def pure_to_definition(definition: str, epsilon: float) -> float:
    """An epsilon-DP interactive mechanism's cost under ``definition`` (pure to zCDP: rho = eps^2/2, MATH.md 5)."""
    check_definition(definition)
    return epsilon if definition == "pure" else epsilon * epsilon / 2.0


# -- filters --------------------------------------------------------------------------------------


class QuotaFilter(Protocol):
    """A per-row filter with budget ``budget`` (in load units)."""

    budget: float

    def peek(self, query: PredicateQuery | None, load: float) -> bool:
        """Would ``load`` on the rows of ``query`` (None: every row) keep every row within the budget?"""
        ...

    def peek_many(self, charges: list[tuple[PredicateQuery | None, float]]) -> bool:
        """Would all of ``charges`` together keep every row within the budget?"""
        ...

    def add(self, query: PredicateQuery | None, load: float) -> None:
        """Record the charge (called for every committed ledger row, in ledger order)."""
        ...

    def max_load(self, query: PredicateQuery | None = None) -> float:
        """The largest load of a row covered by ``query`` (None: of any row): a safe upper bound."""
        ...

    @property
    def exact(self) -> bool:
        """Whether :meth:`max_load` is the exact per-row maximum (False: a safe upper bound)."""
        ...


class SequentialFilter:
    """TEMPORARY (replaced by the overlap-aware Accountant of ``overlapdp.privacy``): charges every query
    to every row, i.e. sequential composition. Its load is the sum of all loads, which is at least the
    per-row maximum, so it is safe but does not yet save the overlap. Sums are exact rationals, so
    rounding can never let a charge slip past the budget.
    """

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self._total = Fraction(0)

    def peek(self, query: PredicateQuery | None, load: float) -> bool:
        return self._total + Fraction(load) <= Fraction(self.budget)

    def peek_many(self, charges: list[tuple[PredicateQuery | None, float]]) -> bool:
        return self._total + sum((Fraction(load) for _, load in charges), Fraction(0)) <= Fraction(
            self.budget
        )

    def add(self, query: PredicateQuery | None, load: float) -> None:
        self._total += Fraction(load)

    def max_load(self, query: PredicateQuery | None = None) -> float:
        return _round_up(self._total)

    @property
    def exact(self) -> bool:
        return False


def make_filter(schema: Schema, definition: str, budget: float) -> QuotaFilter:
    check_definition(definition)
    return SequentialFilter(budget)


def _round_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


# -- noise ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoisyAnswer:
    value: int
    stddev: float
    ci95: tuple[float, float]

    def to_json(self) -> dict[str, Any]:
        return {"count": self.value, "stddev": self.stddev, "ci95": list(self.ci95)}


def noisy_count(true_count: int, mechanism: Mechanism) -> NoisyAnswer:
    """Release ``true_count`` plus noise from ``mechanism``; error bars from the noise distribution."""
    noise = _temporary_noise(mechanism)
    value = int(true_count) + noise
    if mechanism.definition == "pure":
        t = mechanism.scale
        q = math.exp(-1.0 / t)
        stddev = math.sqrt(2.0 * q) / (1.0 - q)
        # P(|X| > k) = 2 q^(k+1) / (1 + q) for the discrete Laplace; smallest k with that <= 5 %.
        k = max(0, math.ceil(math.log(0.05 * (1 + q) / 2.0) / math.log(q)) - 1)
        half = float(k)
    else:
        stddev = mechanism.scale  # the discrete Gaussian's variance is at most sigma^2 (CKS 2020)
        half = 1.96 * stddev
    return NoisyAnswer(value, stddev, (value - half, value + half))


def _temporary_noise(mechanism: Mechanism) -> int:
    """TEMPORARY (replaced by the exact samplers of ``overlapdp.mechanisms``): floating-point noise from
    the OS CSPRNG, rounded to an integer. Not exact (MATH.md 6 warns about floating point)."""
    rng = secrets.SystemRandom()
    if mechanism.definition == "pure":
        # Discrete Laplace as the difference of two geometric variables with ratio exp(-1/t).
        p = 1.0 - math.exp(-1.0 / mechanism.scale)

        def geometric() -> int:
            u = 1.0 - rng.random()
            return math.floor(math.log(u) / math.log(1.0 - p)) if p < 1 else 0

        return geometric() - geometric()
    return round(rng.gauss(0.0, mechanism.scale))


def laplace(scale: float) -> float:
    """TEMPORARY (replaced by ``overlapdp.mechanisms``' exact samplers): continuous Laplace noise."""
    rng = secrets.SystemRandom()
    u = rng.random() - 0.5
    return -scale * math.copysign(1.0, u) * math.log(1.0 - 2.0 * abs(u))


# -- interactive mechanisms ----------------------------------------------------------------------


def open_sparse_vector(
    epsilon: float, max_positives: int, monotonic: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sparse vector with one noisy threshold (MATH.md 4, Lyu, Su, Li 2017, Alg. 1): epsilon-DP overall
    with the split eps1 : eps2 = 1 : (2c)^(2/3) (1 : c^(2/3) for monotonic queries).

    TEMPORARY noise (see :func:`laplace`). Returns (params, state); the state is durable in the ledger.
    """
    c = max_positives
    ratio = (c if monotonic else 2 * c) ** (2.0 / 3.0)
    eps1 = epsilon / (1.0 + ratio)
    eps2 = epsilon - eps1
    params = {
        "epsilon": epsilon,
        "epsilon1": eps1,
        "epsilon2": eps2,
        "max_positives": c,
        "monotonic": monotonic,
        "query_scale": (c if monotonic else 2 * c) / eps2,
    }
    state = {"threshold_noise": laplace(1.0 / eps1), "positives": 0, "queries": 0}
    return params, state


def sparse_vector_step(
    params: dict[str, Any], state: dict[str, Any], true_count: int, threshold: float
) -> tuple[bool, dict[str, Any]]:
    """One query: True iff q(D) + nu >= T + rho (MATH.md 4); the caller stops after c positives."""
    nu = laplace(float(params["query_scale"]))
    above = true_count + nu >= threshold + float(state["threshold_noise"])
    new = dict(state)
    new["queries"] = int(state["queries"]) + 1
    if above:
        new["positives"] = int(state["positives"]) + 1
    return above, new


def open_guess_and_check(
    epsilon_svt: float, epsilon_estimates: float, tolerance: float, max_failures: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Guess-and-Check (MATH.md 4, Lyu 2022 App. B): SVT on |q(D) - g| > E with one noisy threshold, and a
    fresh Laplace estimate of scale b = c / epsilon_estimates per failed guess; by concurrent composition
    of the two parts it is (epsilon_svt + c/b) = (epsilon_svt + epsilon_estimates)-DP.

    TEMPORARY noise (see :func:`laplace`).
    """
    c = max_failures
    # |q(D) - g| has sensitivity 1 and is not monotonic in general: eps1 : eps2 = 1 : (2c)^(2/3).
    ratio = (2 * c) ** (2.0 / 3.0)
    eps1 = epsilon_svt / (1.0 + ratio)
    eps2 = epsilon_svt - eps1
    params = {
        "epsilon_svt": epsilon_svt,
        "epsilon_estimates": epsilon_estimates,
        "epsilon": epsilon_svt + epsilon_estimates,
        "tolerance": tolerance,
        "max_failures": c,
        "query_scale": 2 * c / eps2,
        "estimate_scale": c / epsilon_estimates,
    }
    state = {"threshold_noise": laplace(1.0 / eps1), "positives": 0, "queries": 0}
    return params, state


def guess_and_check_step(
    params: dict[str, Any], state: dict[str, Any], true_count: int, guess: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One guess: ``{"ok": true}`` or ``{"ok": false, "estimate": q(D) + Lap(b)}``."""
    nu = laplace(float(params["query_scale"]))
    failed = abs(true_count - guess) + nu >= float(params["tolerance"]) + float(state["threshold_noise"])
    new = dict(state)
    new["queries"] = int(state["queries"]) + 1
    if not failed:
        return {"ok": True}, new
    new["positives"] = int(state["positives"]) + 1
    estimate = true_count + laplace(float(params["estimate_scale"]))
    return {"ok": False, "estimate": estimate, "scale": params["estimate_scale"]}, new


# -- the guarantee over all analysts ----------------------------------------------------------------


def global_guarantee(definition: str, analyst_spent: list[float], global_spent: float) -> dict[str, Any]:
    """The guarantee for all analysts together, even colluding and interleaving.

    Two safe bounds, the smaller reported: the data set's own per-row filter over every charge (filters
    extend to concurrent composition, Haney et al. 2023, MATH.md 3), and the concurrent composition of
    the analysts' spends: pure DP sums (Vadhan and Wang 2021; Lyu 2022 Thm 1 with delta = 0), zCDP
    sums (Lyu 2022 Corollary 1).
    """
    check_definition(definition)
    composed = math.fsum(analyst_spent)
    composed = math.nextafter(composed, math.inf) if analyst_spent else 0.0
    name = DEFINITIONS[definition]
    return {
        "definition": definition,
        name: min(global_spent, composed),
        "by_global_filter": global_spent,
        "by_concurrent_composition": composed,
    }
