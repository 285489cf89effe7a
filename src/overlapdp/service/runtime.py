"""The service's narrow interface to accounting, noise, interactive mechanisms and counting.

Everything the service needs from ``overlapdp.overlap``, ``overlapdp.privacy``, ``overlapdp.mechanisms``
and ``overlapdp.engine`` goes through this module:

- :func:`mechanism_for` and :func:`load_of`: the mechanism answering one counting query under the data
  set's privacy definition and the additive per-row load it puts on each row it covers;
- :class:`ServiceFilter`: a thin adapter over the library's one overlap-aware per-row (individual)
  filter, :class:`overlapdp.privacy.privacy_filter.PrivacyFilter`: a charge is admitted iff the maximum over
  rows of the sum of the loads of the charges covering the row stays within the budget, decided in EXACT
  arithmetic of the declared float loads (MATH.md section 2, "Adaptive use": valid for pure DP (Rogers,
  Roth, Ullman, Vadhan 2016) and for zCDP with per-row loads (Feldman and Zrnic 2021));
- :data:`MAX_AMOUNT`, :func:`check_amount` and :func:`mechanism_for`: the ranges of budgets and
  per-query parameters (every calibrated noise scale finite and representable,
  :mod:`overlapdp.mechanisms.calibration`);
- :func:`noisy_counts`: released answers with exact integer noise from the OS CSPRNG and error bars
  (:func:`overlapdp.mechanisms.add_noise`, served mode: a seeded generator is refused);
- sessions: :class:`overlapdp.mechanisms.SparseVector` and :class:`overlapdp.mechanisms.GuessAndCheck`,
  whose secret state (noisy threshold, answers so far) is kept durably in the ledger between steps;
- :func:`global_guarantee`: the bound over all analysts together by concurrent composition (MATH.md 3,
  :func:`overlapdp.privacy.concurrent.concurrent_composition`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.mechanisms import (
    GuessAndCheck,
    MechanismError,
    SnapshotError,
    SparseVector,
    ThresholdState,
    add_noise,
    noise_for,
)
from overlapdp.privacy import BudgetError
from overlapdp.privacy.concurrent import concurrent_composition
from overlapdp.privacy.definitions import ZCDP, PureDP, check_positive
from overlapdp.privacy.mechanisms import Mechanism as PrivacyMechanism
from overlapdp.privacy.odometer import whole_domain
from overlapdp.privacy.privacy_filter import PrivacyFilter
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


#: Largest budget, quota or per-query parameter the service takes. It keeps every sum of loads the
#: filters form finite (10^15 times any realistic number of charges is far below the float range), and
#: no privacy is left at such values anyway.
MAX_AMOUNT = 1e15


def check_amount(name: str, value: Any) -> float:
    """A budget or per-query parameter: a positive finite number at most :data:`MAX_AMOUNT`."""
    v = check_positive(name, value)
    if v > MAX_AMOUNT:
        raise BudgetError(f"{name} must be at most {MAX_AMOUNT:.0e}, got {value!r}")
    return v


@dataclass(frozen=True)
class Mechanism:
    """The mechanism answering one count (sensitivity 1 under add/remove).

    ``pure``: the discrete Laplace calibrated to epsilon; ``zcdp``: the discrete Gaussian calibrated to
    rho (MATH.md 6, Canonne, Kamath, Steinke 2020; calibration by ``overlapdp.mechanisms``, which rounds
    scales up so that the declared guarantee holds).
    """

    definition: str
    parameter: float

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return PureDP(self.parameter) if self.definition == "pure" else ZCDP(self.parameter)

    def to_json(self) -> dict[str, Any]:
        name = "discrete_laplace" if self.definition == "pure" else "discrete_gaussian"
        return {"name": name, "definition": self.definition, DEFINITIONS[self.definition]: self.parameter}


def mechanism_for(definition: str, parameter: float) -> Mechanism:
    """The mechanism for a per-query parameter, refused (:class:`BudgetError` naming the parameter)
    unless it lies in the service's range and its noise scale is representable
    (:func:`overlapdp.mechanisms.noise_for`: epsilon >= 2^-40, rho >= 2^-81)."""
    check_definition(definition)
    mech = Mechanism(definition, check_amount(DEFINITIONS[definition], parameter))
    noise_for(mech.guarantee)  # raises before anything is counted or drawn
    return mech


def load_of(definition: str, parameter: float) -> float:
    """The additive per-row load of one charge: epsilon (pure DP sums, MATH.md 2) or rho (zCDP sums)."""
    check_definition(definition)
    return float(parameter)


def pure_to_definition(definition: str, epsilon: float) -> float:
    """An epsilon-DP mechanism's cost under ``definition`` (pure to zCDP: rho = eps^2/2, MATH.md 5,
    rounded UP to a float so that the charge is never below the exact cost)."""
    check_definition(definition)
    return epsilon if definition == "pure" else _float_up(Fraction(epsilon) ** 2 / 2)


# -- filters --------------------------------------------------------------------------------------

_ids = itertools.count()


@dataclass(frozen=True)
class Charged(PrivacyMechanism):
    """One charge as the service records it: its load under the data set's definition, declared
    exactly as the float the ledger holds (``epsilon``-DP for ``pure``, ``rho``-zCDP for ``zcdp``)."""

    definition: str
    load: float
    name = "charge"

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return PureDP(self.load) if self.definition == "pure" else ZCDP(self.load)

    def pure(self) -> PureDP | None:
        g = self.guarantee
        return g if isinstance(g, PureDP) else None

    def zcdp(self) -> ZCDP | None:
        g = self.guarantee
        return g if isinstance(g, ZCDP) else None

    def epsilon_at(self, delta: float) -> float:
        return self.guarantee.epsilon_at(delta)

    def delta_at(self, epsilon: float) -> float:
        return self.guarantee.delta_at(epsilon)

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return np.array([self.guarantee.delta_at(float(e)) for e in np.atleast_1d(epsilons)])

    def loss_range(self) -> tuple[float, float]:
        if self.definition != "pure":
            raise BudgetError("a zCDP charge has no bounded privacy loss: compose it as zCDP")
        return (-self.load, self.load)


def _budget_of(definition: str, amount: float) -> PureDP | ZCDP:
    return PureDP(amount) if check_definition(definition) == "pure" else ZCDP(amount)


class ServiceFilter:
    """The service's thin adapter over :class:`overlapdp.privacy.privacy_filter.PrivacyFilter`, the one
    overlap-aware per-row filter of the library (MATH.md 2, "Adaptive use"): a charge is admitted iff
    every row's load stays within the budget in EXACT arithmetic of the declared float loads.

    Loads are epsilon (``pure``) or rho (``zcdp``). A batch is admitted all or nothing
    (:meth:`try_all`: a savepoint, each charge through the filter, a rollback on the first refusal);
    committed charges read back from the ledger go through :meth:`record`, which never refuses, so a
    restart replays the same exact loads through the same filter and reproduces the spend exactly. The
    budget may change (an admin raises or lowers it).
    """

    def __init__(self, schema: Schema, definition: str, budget: float) -> None:
        self.schema = schema
        self.definition = check_definition(definition)
        self._budget = float(budget)
        self._filter = PrivacyFilter(schema, _budget_of(definition, budget))
        self._everything = whole_domain(schema)

    @property
    def budget(self) -> float:
        return self._budget

    @budget.setter
    def budget(self, amount: float) -> None:
        if amount != self._budget:
            self._filter.set_budget(_budget_of(self.definition, amount))
            self._budget = float(amount)

    def _charge(self, load: float) -> Charged:
        return Charged(self.definition, load)

    def try_all(self, charges: Sequence[tuple[PredicateQuery | None, float]]) -> bool:
        """Admit every charge or none (each one sees those before it)."""
        if len(charges) == 1:  # a refused charge leaves nothing behind: no savepoint needed
            query, load = charges[0]
            a = self._filter.try_charge(self._charge(load), query or self._everything, f"c{next(_ids)}")
            return a.admitted
        sp = self._filter.savepoint()
        for query, load in charges:
            a = self._filter.try_charge(self._charge(load), query or self._everything, f"c{next(_ids)}")
            if not a.admitted:
                self._filter.rollback(sp)
                return False
        self._filter.release(sp)
        return True

    def record(self, query: PredicateQuery | None, load: float, times: int = 1) -> None:
        """Add ``times`` committed charges of ``load`` on ``query`` (never refused)."""
        self._filter.record(self._charge(load), query or self._everything, f"c{next(_ids)}", times=times)

    def savepoint(self) -> tuple[int, tuple[int, ...]]:
        return self._filter.savepoint()

    def rollback(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        self._filter.rollback(savepoint)

    def release(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        self._filter.release(savepoint)

    def max_load(self) -> float:
        """The worst row's load: its exact value rounded up (a safe upper bound when the index is not
        exact), :meth:`PrivacyFilter.spent`."""
        return self._filter.spent()

    def __len__(self) -> int:
        return len(self._filter)


QuotaFilter = ServiceFilter


def batch_cost(schema: Schema, charges: Sequence[tuple[PredicateQuery | None, float]]) -> dict[str, float]:
    """What a batch costs on its own: overlap-aware (the worst row's load, MATH.md 2) and sequential, both
    from the exact sums of the loads rounded up."""
    alone = ServiceFilter(schema, "pure", 1.0)  # record() never refuses: the budget plays no part
    for query, load in charges:
        alone.record(query, load)
    sequential = _float_up(sum((Fraction(x) for _, x in charges), Fraction(0)))
    return {"overlap": alone.max_load(), "sequential": sequential}


def make_filter(schema: Schema, definition: str, budget: float) -> ServiceFilter:
    return ServiceFilter(schema, definition, budget)


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


# -- noise ----------------------------------------------------------------------------------------


def noisy_counts(true_counts: Sequence[int], mechanism: Mechanism) -> list[dict[str, Any]]:
    """Release each count plus exact integer noise (OS CSPRNG, served mode) with a 95% interval."""
    answers = add_noise(list(true_counts), mechanism.guarantee, level=0.95, served=True)
    return [
        {"count": a.value, "stddev": a.std, "ci95": [a.low, a.high], "noise": a.noise.describe()}
        for a in answers
    ]


# -- interactive mechanisms ----------------------------------------------------------------------

Count = Callable[[PredicateQuery], int]


def open_session(
    kind: str, params: dict[str, Any], count: Count
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Create a session's mechanism: (public params, secret durable state, epsilon charged when it opens).

    Sparse vector: ``epsilon`` = epsilon_1 + epsilon_2 (Lyu, Su, Li 2017; MATH.md 4), stops after
    ``max_positives`` "above" answers. Guess-and-check: epsilon_SVT + c/b (Lyu 2022 App. B; MATH.md 4).
    The charge is the mechanism's declared guarantee (computed from its rounded-up noise scales).
    """
    try:
        mech = _build(kind, params, count)
    except MechanismError as exc:  # a noise scale beyond the supported range
        raise BudgetError(
            f"epsilon is too small for this session's noise with its max_positives / max_failures ({exc})"
        ) from None
    return dict(params), _state_of(mech), float(mech.guarantee.epsilon)


def session_step(
    kind: str, params: dict[str, Any], state: dict[str, Any], count: Count, query: PredicateQuery, arg: float
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """One step on a restored mechanism: (answer, new durable state, closed)."""
    mech = _build(kind, params, count)
    _restore(mech, state)
    if isinstance(mech, SparseVector):
        a = mech.ask(query, arg)
        answer: dict[str, Any] = {"outcome": a.outcome, "above": a.above, "positives_left": a.positives_left}
    else:
        g = mech.check(query, arg)
        answer = {"outcome": g.outcome, "ok": g.outcome == "confirmed", "estimates_left": g.estimates_left}
        if g.estimate is not None:
            answer["estimate"] = g.estimate.value
            answer["ci95"] = [g.estimate.low, g.estimate.high]
    return answer, _state_of(mech), bool(mech.exhausted)


def _build(kind: str, params: dict[str, Any], count: Count) -> SparseVector | GuessAndCheck:
    if kind == "sparse_vector":
        return SparseVector(
            count,
            epsilon=params["epsilon"],
            max_positives=params.get("max_positives", 1),
            monotonic=bool(params.get("monotonic", False)),
            served=True,
        )
    eps_svt = check_amount("epsilon", params.get("epsilon"))
    eps_est = check_amount("epsilon_estimates", params.get("epsilon_estimates", eps_svt))
    return GuessAndCheck.from_budget(
        count,
        epsilon=eps_svt + eps_est,
        estimate_fraction=eps_est / (eps_svt + eps_est),
        tolerance=params["tolerance"],
        max_failures=params.get("max_failures", 1),
        served=True,
    )


# The mechanisms' secret state (threshold noise, answers so far) is persisted in the ledger (sessions
# table) as their own snapshot, so that a session survives a restart and two instances see the same state.
def _state_of(mech: SparseVector | GuessAndCheck) -> dict[str, Any]:
    return mech.state().to_json()


# What the ledger held before snapshots named their mechanism, c and noise scales.
_OLD_STATE = {"threshold_noise", "positives", "queries"}


def _restore(mech: SparseVector | GuessAndCheck, state: dict[str, Any]) -> None:
    if set(state) == _OLD_STATE:
        # An older row: its counters were written by a mechanism built from this session's own params,
        # so that mechanism's identity is this one's.
        state = {**mech.state().to_json(), **state}
    try:
        mech.restore(ThresholdState.from_json(state))
    except SnapshotError as exc:
        # A stored state that does not fit its session is the ledger's fault, not the request's: it
        # fails as an internal error (nothing charged, nothing released), not as a 400.
        raise RuntimeError(f"the session's stored state does not fit its mechanism: {exc}") from None


# -- the guarantee over all analysts ----------------------------------------------------------------


def global_guarantee(definition: str, analyst_spent: list[float], global_spent: float) -> dict[str, Any]:
    """The guarantee for all analysts together, even colluding and interleaving.

    Two safe bounds, the smaller reported: the data set's own per-row filter over every charge (filters
    extend to concurrent composition, Haney et al. 2023, MATH.md 3), and the concurrent composition of
    the analysts' spends (:func:`concurrent_composition`: pure DP sums, Vadhan and Wang 2021; zCDP sums,
    Lyu 2022 Corollary 1).
    """
    check_definition(definition)
    name = DEFINITIONS[definition]
    spent = [s for s in analyst_spent if s > 0]
    if spent:
        members = [PureDP(s) if definition == "pure" else ZCDP(s) for s in spent]
        g = concurrent_composition(members).guarantee
        composed = float(g.epsilon if isinstance(g, PureDP) else g.rho)  # type: ignore[union-attr]
    else:
        composed = 0.0
    return {
        "definition": definition,
        name: min(global_spent, composed),
        "by_global_filter": global_spent,
        "by_concurrent_composition": composed,
    }
