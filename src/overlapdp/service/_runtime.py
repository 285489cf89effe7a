"""The service's narrow interface to accounting, noise, interactive mechanisms and counting.

Everything the service needs from ``overlapdp.overlap``, ``overlapdp.privacy``, ``overlapdp.mechanisms``
and ``overlapdp.engine`` goes through this module:

- :data:`SERVED`: the definitions a data set can be served under, derived from the
  library's measures (:data:`overlapdp.privacy.measures.MEASURES`): pure DP, zCDP, GDP, RDP at one order,
  tCDP and approximate DP, each with its amount and fixed parameters (:func:`check_params`), and
  :func:`epsilon_delta`, the (epsilon, delta) line of an amount (MATH.md 5.8);
- :func:`mechanism_for` and :func:`load_of`: the mechanism answering one counting query under the data
  set's privacy definition and the per-row load it puts on each row it covers;
- :class:`ServiceFilter`: a thin adapter over the library's one overlap-aware per-row (individual)
  filter, :class:`overlapdp.privacy.privacy_filter.PrivacyFilter`: a charge is admitted iff every row's
  composition of the loads of the charges covering it stays within the budget, decided in EXACT
  arithmetic of the declared float loads (MATH.md 2.7: pure DP (Rogers, Roth,
  Ullman, Vadhan 2016), zCDP, tCDP and RDP with per-row loads (Feldman and Zrnic 2021), GDP (Smith and
  Thakurta 2022; here the zCDP filter at rho = mu^2/2), approximate DP by the adaptive advanced / basic
  rule (Whitehouse et al. 2023));
- :data:`MAX_AMOUNT`, :func:`check_amount` and :func:`mechanism_for`: the ranges of budgets and
  per-query parameters (every calibrated noise scale finite and representable,
  :mod:`overlapdp.mechanisms.calibration`);
- :func:`noisy_counts`: released answers with exact integer noise from the OS CSPRNG and error bars
  (:func:`overlapdp.mechanisms.add_noise`, served mode: a seeded generator is refused);
- sessions: :class:`overlapdp.mechanisms.SparseVector` and :class:`overlapdp.mechanisms.GuessAndCheck`,
  whose secret state (noisy threshold, answers so far) is kept durably in the ledger between steps;
- :func:`global_guarantee`: the bound over all analysts together by concurrent composition (MATH.md 3.7,
  :func:`overlapdp.privacy.concurrent.concurrent_composition`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.errors import NeedsTrial, TimeBudgetExceeded
from overlapdp.mechanisms import (
    GuessAndCheck,
    MechanismError,
    SnapshotError,
    SparseVector,
    ThresholdState,
    add_noise,
    noise_for,
)
from overlapdp.overlap import _clock
from overlapdp.privacy import BudgetError
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, PureDP, check_delta
from overlapdp.privacy.measures import DEFAULT_DELTA, MEASURES, AdditiveMeasure, FilterOptions, Measure
from overlapdp.privacy.mechanisms import Mechanism as PrivacyMechanism
from overlapdp.privacy.odometer import whole_domain
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Aggregate
from overlapdp.schema import Schema
from overlapdp.service import _heap
from overlapdp.validation import check_finite, check_positive

#: The definitions a data set can be served under: the library's measures (one source of truth), each
#: carrying its served amount, fixed parameters and operations (:mod:`overlapdp.privacy.measures`).
SERVED: dict[str, Measure[Any]] = {m.name: m for m in MEASURES}
#: Every per-query parameter name a request may carry (each measure's :attr:`Measure.amount`).
AMOUNTS: tuple[str, ...] = tuple(dict.fromkeys(m.amount for m in MEASURES))


def served(definition: str) -> Measure[Any]:
    """The measure a data set of ``definition`` is served under (:class:`BudgetError` naming the served
    definitions otherwise)."""
    m = SERVED.get(definition) if isinstance(definition, str) else None
    if m is None:
        raise BudgetError(f"privacy definition {definition!r} is not served; use one of {', '.join(SERVED)}")
    return m


def check_definition(definition: str) -> str:
    served(definition)
    return definition


def check_params(definition: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """A data set's fixed parameters, validated, with their defaults: ``delta`` (every definition,
    default :data:`DEFAULT_DELTA`), the measure's :attr:`~Measure.fixed` ones (tCDP ``omega``, RDP
    ``alpha``: required, > 1) and its :attr:`~Measure.options` (approximate DP ``composition``: only
    ``"advanced"``, the filter valid under adaptive choice; ``"optimal"`` is refused with
    :class:`AdaptivityError`, MATH.md 2.7)."""
    m = served(definition)
    given = {k: v for k, v in (given or {}).items() if v is not None}
    allowed = {"delta", *m.fixed, *(name for name, _ in m.options)}
    for k in given:
        if k not in allowed:
            raise BudgetError(
                f"a {definition} data set has no parameter {str(k)[:40]!r}; its parameters are "
                + ", ".join(repr(a) for a in sorted(allowed))
            )
    out: dict[str, Any] = {"delta": check_delta(check_finite(given.get("delta", DEFAULT_DELTA), "delta"))}
    if out["delta"] == 0:
        raise BudgetError("delta must be greater than 0 (the delta of the data set's (epsilon, delta) lines)")
    for name in m.fixed:
        if name not in given:
            raise BudgetError(f"a {definition} data set needs {name!r} (a number > 1)")
        v = check_finite(given[name], name)
        if not (1 < v <= MAX_AMOUNT):
            raise BudgetError(
                f"{name} must be a number > 1 and at most {MAX_AMOUNT:.0e}, got {given[name]!r}"
            )
        out[name] = v
    for name, default in m.options:  # checked by building the filter's rule once (raises on a bad one)
        value = given.get(name, default)
        m.rule(m.budget(1.0, out), 1.0, FilterOptions(**{name: value}))
        out[name] = value
    return out


def budget_of(definition: str, amount: float, params: Mapping[str, Any]) -> Any:
    """The library budget of ``amount`` under the data set's definition and parameters."""
    return served(definition).budget(amount, params)


def epsilon_delta(definition: str, params: Mapping[str, Any], amount: float) -> dict[str, float]:
    """``amount`` of the data set's definition as (epsilon, delta)-DP at the data set's delta (MATH.md 5.8,
    5.9, :meth:`Measure.epsilon_line`, each safe): pure DP is epsilon itself; zCDP, tCDP (orders up to
    omega) and one-order RDP by the RDP conversion (Balle et al. 2020 Thm. 21); GDP as the
    ``mu^2/2``-zCDP the discrete Gaussian is declared as; approximate DP: the filter's epsilon already
    holds at the budget's delta."""
    return {"epsilon": _epsilon_at(definition, _key(params), float(amount)), "delta": float(params["delta"])}


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


@functools.lru_cache(maxsize=4096)
def _epsilon_at(definition: str, key: tuple[tuple[str, Any], ...], amount: float) -> float:
    return served(definition).epsilon_line(amount, dict(key))


#: Largest budget, quota or per-query parameter the service takes. It keeps every sum of loads the
#: filters form finite (10^15 times any realistic number of charges is far below the float range), and
#: no privacy is left at such values anyway.
MAX_AMOUNT = 1e15


def check_amount(name: str, value: Any) -> float:
    """A budget or per-query parameter: a positive finite number at most :data:`MAX_AMOUNT`."""
    v = check_positive(value, name)
    if v > MAX_AMOUNT:
        raise BudgetError(f"{name} must be at most {MAX_AMOUNT:.0e}, got {value!r}")
    return v


@dataclass(frozen=True)
class ServedMechanism:
    """The mechanism answering one count (sensitivity 1 under add/remove) and what it is charged.

    ``parameter`` is the query's amount in the data set's definition, which is also its per-row load
    (MATH.md 2.4). The noise (MATH.md 6.2; calibration by ``overlapdp.mechanisms``, which rounds scales
    up so that the declared guarantee holds) is the measure's :meth:`~Measure.calibrated`:

    - pure DP and approximate DP: the discrete Laplace of ``epsilon`` (an (epsilon, 0) charge);
    - zCDP and tCDP: the discrete Gaussian of ``rho`` (Canonne, Kamath, Steinke 2020), rho-zCDP, which is
      (rho, inf)-tCDP (MATH.md 5.9): every charge meets the budget's omega;
    - GDP: the discrete Gaussian with sigma = 1/mu, DECLARED as mu^2/2-zCDP (no proof that it is mu-GDP is
      known, :mod:`overlapdp.mechanisms.calibration`); the GDP filter's exact per-row test
      sum mu^2 <= B^2 is the zCDP filter at rho = mu^2/2 exactly, so the data set is B^2/2-zCDP;
    - RDP of order alpha: the discrete Gaussian of rho = epsilon_alpha / alpha rounded DOWN, whose
      (alpha, alpha rho)-RDP is within the declared epsilon_alpha.
    """

    definition: str
    parameter: float
    alpha: float = 0.0

    @property
    def guarantee(self) -> PureDP | ZCDP | GDP:
        """What the noise is calibrated to."""
        return served(self.definition).calibrated(self.parameter, {"alpha": self.alpha})

    def to_json(self) -> dict[str, Any]:
        m = served(self.definition)
        out: dict[str, Any] = {"name": m.noise, "definition": self.definition, m.amount: self.parameter}
        if "alpha" in m.fixed:
            out["alpha"] = self.alpha
            out["rho"] = self.guarantee.rho  # type: ignore[union-attr]
        return out


def mechanism_for(
    definition: str, parameter: float, params: Mapping[str, Any] | None = None
) -> ServedMechanism:
    """The mechanism for a per-query parameter, refused (:class:`BudgetError` naming the parameter)
    unless it lies in the service's range and its noise scale is representable
    (:func:`overlapdp.mechanisms.noise_for`: epsilon >= 2^-40, rho >= 2^-81)."""
    m = served(definition)
    alpha = float((params or {}).get("alpha", 0.0)) if "alpha" in m.fixed else 0.0
    mech = ServedMechanism(definition, check_amount(m.amount, parameter), alpha)
    try:
        noise_for(mech.guarantee)  # raises before anything is counted or drawn
    except BudgetError as exc:
        if "alpha" in m.fixed:  # the message names rho: say which amount it came from
            raise BudgetError(
                f"{m.amount} = {parameter!r} is too small at alpha = {alpha!r} ({exc})"
            ) from None
        raise
    return mech


def load_of(definition: str, parameter: float) -> float:
    """The additive per-row load of one charge: the query's amount itself (epsilon, rho, mu or
    epsilon_alpha: each definition's per-row loads compose by its ``comp``, MATH.md 2.4)."""
    served(definition)
    return float(parameter)


def pure_to_definition(definition: str, epsilon: float, params: Mapping[str, Any] | None = None) -> float:
    """An epsilon-DP mechanism's (a session's) cost in the data set's amount, rounded UP from the exact
    value (:meth:`Measure.from_pure`, MATH.md 5.8, 5.9): pure and approximate DP: epsilon; zCDP and tCDP:
    rho = eps^2/2 (Bun and Steinke 2016 Prop. 3.3; omega = inf); GDP: mu = epsilon, whose declared
    mu^2/2-zCDP is that same rho; RDP of order alpha: min(eps, alpha eps^2/2) (Mironov 2017 Prop. 3)."""
    return served(definition).from_pure(epsilon, params or {})


# -- filters --------------------------------------------------------------------------------------

_ids = itertools.count()
_uids = itertools.count()


@dataclass(frozen=True)
class Charged(PrivacyMechanism):
    """One charge as the service records it: its load under the data set's definition, declared
    exactly as the float the ledger holds (an ``epsilon``-DP, ``rho``-zCDP, ``mu``-GDP or
    (alpha, ``epsilon_alpha``)-RDP guarantee; an approximate-DP charge is (epsilon, 0)). ``alpha``: the
    data set's RDP order."""

    definition: str
    load: float
    alpha: float = 0.0
    name = "charge"

    @functools.cached_property
    def guarantee(self) -> PureDP | ZCDP | GDP | RDP:
        return served(self.definition).charged(self.load, {"alpha": self.alpha})

    def pure(self) -> PureDP | None:
        g = self.guarantee
        return g if isinstance(g, PureDP) else None

    def zcdp(self) -> ZCDP | None:
        g = self.guarantee
        return g if isinstance(g, ZCDP) else None

    def gdp(self) -> GDP | None:
        g = self.guarantee
        return g if isinstance(g, GDP) else None

    def rdp(self, orders: Sequence[float] = (2.0,)) -> RDP | None:
        g = self.guarantee
        if not isinstance(g, RDP):
            return None
        if tuple(orders) != g.orders:
            raise BudgetError(f"a charge of the data set's order {self.alpha!r} is known at that order only")
        return g

    def epsilon_at(self, delta: float) -> float:
        return self.guarantee.epsilon_at(delta)

    def delta_at(self, epsilon: float) -> float:
        return self.guarantee.delta_at(epsilon)

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return np.array([self.guarantee.delta_at(float(e)) for e in np.atleast_1d(epsilons)])

    def loss_range(self) -> tuple[float, float]:
        if not isinstance(self.guarantee, PureDP):
            raise BudgetError("only a pure-DP charge has a bounded privacy loss")
        return (-self.load, self.load)


#: A savepoint of a :class:`ServiceFilter`: the library filter it was opened on (a snapshot's replica
#: may have been adopted since), that filter's own savepoint, the log's length and the budget then.
Savepoint = tuple[PrivacyFilter, tuple[int, tuple[int, ...]], int, float]

#: Replicas kept per filter for the next snapshot (each holds a copy of the filter's charges).
_POOL = 2
#: Longest wait (seconds) for a pooled replica before building a new one while _POOL are lent out.
_POOL_WAIT = 1.0


def check_deadline(deadline: float | None) -> None:
    """:class:`TimeBudgetExceeded` once ``deadline`` has passed. Deadlines are read on the overlap
    searches' clock (:func:`overlapdp.overlap._clock.now`, ``time.monotonic``): the effort a search is
    given is the time left on it, and a test drives both with one replacement."""
    if deadline is not None and _clock.now() > deadline:
        raise _out_of_time()


def _out_of_time() -> TimeBudgetExceeded:
    return TimeBudgetExceeded(
        "the request's time budget ran out before its admission could be decided; nothing was "
        "charged (retry, or split the batch)"
    )


@dataclass(frozen=True)
class DryRun:
    """What :meth:`ServiceFilter.dry_run` found: the spend before and after the charges (exact when
    ``exact``, else safe upper bounds) and whether :meth:`ServiceFilter.try_all` would admit them (always
    the exact decision)."""

    before: float
    after: float
    admitted: bool
    exact: bool


#: The share of the time left that each spend figure of a dry run may search for its exact value.
_SPEND_SHARE = 0.15


@dataclass(frozen=True)
class FilterSnapshot:
    """An immutable view of a :class:`ServiceFilter` taken under the data set's admission lock: the
    charges it held, in order (query, load, times), its budget and the generation of its log.

    The log is append-only except for rollbacks of requests that failed; a rollback that cuts below
    the length of a snapshot handed out starts a new generation, so "same filter, same generation" means
    the snapshot's charges are still a prefix of the filter's, and the charges added since are exactly
    the log's suffix (:meth:`ServiceFilter.delta`)."""

    owner: int
    generation: int
    charges: tuple[tuple[PredicateQuery | None, float, int], ...]
    budget: float
    #: Every row of these charges was known within the budget (:attr:`PrivacyFilter.known_within`).
    within: bool = False


@dataclass
class Trial:
    """A batch tried against a snapshot on a private replica, off the admission lock.

    ``admitted``: the filter's EXACT decision on the snapshot's state (the same charges, the same
    budget, the library's filter). When admitted, ``replica`` holds the snapshot plus the batch (its
    savepoint ``mark`` opened before the batch) and ``upper`` is a safe upper bound on its worst row's
    load (pure DP, zCDP and GDP; None otherwise), so that under the lock only the charges admitted since
    need a look (:meth:`ServiceFilter.settle`)."""

    owner: ServiceFilter
    snapshot: FilterSnapshot
    admitted: bool
    replica: ServiceFilter | None = None
    mark: Savepoint | None = None
    upper: float | tuple[Fraction, Fraction] | None = None
    adopted: bool = False
    #: A trial decided in a worker process (:meth:`ServiceFilter.from_worker`): the charges the
    #: snapshot holds beyond the state the worker decided on (its ``upper`` bounds that state plus the
    #: batch, so :meth:`ServiceFilter.settles` counts them with those landed since). Such a trial is
    #: never brought up to date here (no search in the server's process): it is decided again there.
    extra: tuple[tuple[PredicateQuery | None, float, int], ...] = ()
    remote: bool = False


class ServiceFilter:
    """The service's thin adapter over :class:`overlapdp.privacy.privacy_filter.PrivacyFilter`, the one
    overlap-aware per-row filter of the library (MATH.md 2.7): a charge is admitted iff
    every row's load stays within the budget in EXACT arithmetic of the declared float loads.

    Loads are the data set's amount (epsilon, rho, mu, epsilon_alpha). The filter is the library's for
    the definition's budget: per-row sums for pure DP (Rogers, Roth, Ullman, Vadhan 2016), zCDP, tCDP and
    one-order RDP (Feldman and Zrnic 2021), sum mu^2 <= B^2 for GDP, and for approximate DP the adaptive
    (advanced / basic combined) rule of :mod:`overlapdp.privacy.privacy_filter` (the optimal composition
    is refused for adaptive use, :func:`check_params`). A batch is admitted all or nothing
    (:meth:`try_all`: a savepoint, each charge through the filter, a rollback on the first refusal);
    committed charges read back from the ledger go through :meth:`record`, which never refuses, so a
    restart replays the same exact loads through the same filter and reproduces the spend exactly. The
    budget may change (an admin raises or lowers it).

    Snapshots (nobody waits for someone else's search): every charge the filter holds is also kept in
    an append-only log. :meth:`snapshot` (under the admission lock, O(charges) copying, no search)
    freezes it; :meth:`trial` (off the lock) tries a batch on a PRIVATE replica of the snapshot, a
    library filter of its own that no other thread touches, kept in a small pool and brought up to date
    by recording only the charges added since it was built; :meth:`settle` (under the lock again)
    turns the trial into the decision :meth:`try_all` would take now, looking only at the charges added
    since the snapshot, and when admitted adopts the replica as the filter (a pointer swap, no search).
    Only the thread holding the admission lock ever changes this filter.
    """

    def __init__(
        self, schema: Schema, definition: str, budget: float, params: Mapping[str, Any] | None = None
    ) -> None:
        self.schema = schema
        self.definition = check_definition(definition)
        self.measure = served(definition)
        self.params = (
            dict(params) if params is not None else check_params(definition, _defaults(self.measure))
        )
        self._alpha = float(self.params.get("alpha", 0.0))
        self._budget = float(budget)
        self._filter = PrivacyFilter(schema, budget_of(definition, budget, self.params))
        self._filter_budget = self._budget  # the budget ``_filter`` was last given
        self._everything = whole_domain(schema)
        self._log: list[tuple[PredicateQuery | None, float, int]] = []
        self._generation = 0
        self._pinned = 0  # the longest snapshot handed out
        self._pool: list[ServiceFilter] = []
        # Library filters replaced by an adopted replica, with the log length whose charges each holds,
        # the generation and budget then: recycled into the pool once no savepoint can need them.
        self._retired: list[tuple[PrivacyFilter, int, int, float]] = []
        self._pool_lock = threading.Lock()  # guards the list only; a replica is used by one thread
        self._pool_cond = threading.Condition(self._pool_lock)  # a replica was given back
        self._lent = 0  # replicas handed out and neither given back nor adopted
        self._uid = next(_uids)  # a snapshot's owner (never reused, unlike id())

    @property
    def budget(self) -> float:
        return self._budget

    @budget.setter
    def budget(self, amount: float) -> None:
        if amount != self._budget:
            self._budget = float(amount)
            self._sync_budget()

    def _sync_budget(self) -> None:
        if self._filter_budget != self._budget:
            self._filter.set_budget(self.measure.budget(self._budget, self.params))
            self._filter_budget = self._budget

    def _charge(self, load: float) -> Charged:
        return Charged(self.definition, load, self._alpha)

    def try_all(
        self, charges: Sequence[tuple[PredicateQuery | None, float]], deadline: float | None = None
    ) -> bool:
        """Admit every charge or none (each one sees those before it). Past ``deadline`` nothing is
        admitted and :class:`TimeBudgetExceeded` is raised: checked between charges, and each charge's
        overlap search is cut where the time left runs out (:meth:`PrivacyFilter.search_effort`); a
        refusal no row proves (:attr:`Admission.proven`) from a cut search raises it too, so a refusal
        found on the bound of a cut search is never given as the answer."""
        sp = self._filter.savepoint() if len(charges) > 1 else None  # a refused single leaves nothing
        try:
            for query, load in charges:
                check_deadline(deadline)
                with self._effort(deadline):
                    a = self._filter.try_charge(
                        self._charge(load), query or self._everything, f"c{next(_ids)}"
                    )
                if not a.admitted:
                    if sp is not None:
                        self._filter.rollback(sp)
                        sp = None
                    if deadline is not None and not a.proven and not a.exact:
                        # refused on the bound of a search the time limit cut (the engine may stop a
                        # little before the deadline itself): not the uncut filter's answer
                        raise _out_of_time()
                    check_deadline(deadline)
                    return False
        except BaseException:
            if sp is not None:
                self._filter.rollback(sp)
            raise
        if sp is not None:
            self._filter.release(sp)
        self._log.extend((q, load, 1) for q, load in charges)
        return True

    def _effort(self, deadline: float | None) -> AbstractContextManager[None]:
        """The filter's searches limited to the time left before ``deadline`` (none without one)."""
        if deadline is None:
            return contextlib.nullcontext()
        return self._filter.search_effort(max(0.0, deadline - _clock.now()))

    def try_on_bounds(self, charges: Sequence[tuple[PredicateQuery | None, float]]) -> bool | None:
        """Admit every charge when the filter's lazy bounds alone clear each one (after those before
        it), with no overlap search (:meth:`PrivacyFilter.try_on_bounds`): True, the decision
        :meth:`try_all` takes. None, nothing changed, when one of them needs a search to decide."""
        sp = self._filter.savepoint()
        try:
            for query, load in charges:
                a = self._filter.try_on_bounds(
                    self._charge(load), query or self._everything, f"c{next(_ids)}"
                )
                if a is None:
                    self._filter.rollback(sp)
                    return None
        except BaseException:
            self._filter.rollback(sp)
            raise
        self._filter.release(sp)
        self._log.extend((q, load, 1) for q, load in charges)
        return True

    def record(self, query: PredicateQuery | None, load: float, times: int = 1) -> None:
        """Add ``times`` committed charges of ``load`` on ``query`` (never refused)."""
        self._filter.record(self._charge(load), query or self._everything, f"c{next(_ids)}", times=times)
        self._log.append((query, load, times))

    def record_many(self, charges: Sequence[tuple[PredicateQuery | None, float, int]]) -> None:
        """:meth:`record` of each ``(query, load, times)`` in order, in one pass (a ledger replay)."""
        self._filter.record_many(
            [
                (self._charge(load), query or self._everything, f"c{next(_ids)}", times)
                for query, load, times in charges
            ]
        )
        self._log.extend(charges)

    def savepoint(self) -> Savepoint:
        return (self._filter, self._filter.savepoint(), len(self._log), self._filter_budget)

    def rollback(self, savepoint: Savepoint) -> None:
        inner, mark, n, budget = savepoint
        if inner is not self._filter:
            # a replica was adopted since the savepoint: the filter it was opened on is put back (it
            # was left untouched since the swap)
            self._filter, self._filter_budget = inner, budget
        inner.rollback(mark)
        del self._log[n:]
        if n < self._pinned:  # a snapshot's charges are no longer a prefix of the log
            self._generation += 1
        # the filter put back is live again; filters retired after the cut hold charges undone since
        self._retired = [r for r in self._retired if r[0] is not inner and r[1] <= n]
        self._sync_budget()

    def release(self, savepoint: Savepoint) -> None:
        savepoint[0].release(savepoint[1])

    # -- snapshots ---------------------------------------------------------------------------------
    def snapshot(self) -> FilterSnapshot:
        """The filter's charges and budget now (call under the data set's admission lock)."""
        self._pinned = max(self._pinned, len(self._log))
        self._sync_budget()
        within = self._filter.known_within
        return FilterSnapshot(self._uid, self._generation, tuple(self._log), self._budget, within)

    def charges_since(self, snap: FilterSnapshot) -> list[tuple[PredicateQuery | None, float, int]] | None:
        """The charges added since ``snap`` (None if its charges are no longer a prefix, or it is not
        this filter's)."""
        if snap.owner != self._uid or snap.generation != self._generation:
            return None
        return self._log[len(snap.charges) :]

    def _replica(self, snap: FilterSnapshot, deadline: float | None) -> ServiceFilter:
        """A private filter holding exactly the snapshot's charges: one from the pool whose charges are
        a prefix of the snapshot's, caught up by recording the rest, or a new one."""
        best = None
        with self._pool_cond:
            # Many requests near one budget try at once (a race for the last of it): rebuilding a
            # replica from every charge costs far more than waiting a moment for a pooled one to come
            # back, so wait (up to _POOL_WAIT, within the deadline) before building a new one.
            wait_until = _clock.now() + _POOL_WAIT
            if deadline is not None:
                wait_until = min(wait_until, deadline)
            while True:
                for r in self._pool:
                    fits = r._generation == snap.generation and len(r._log) <= len(snap.charges)
                    if fits and (best is None or len(r._log) > len(best._log)):
                        best = r
                if best is not None or self._lent < _POOL:
                    break
                left = wait_until - _clock.now()
                if left <= 0:
                    break
                self._pool_cond.wait(left)
            if best is not None:
                self._pool.remove(best)
            self._lent += 1
        replica = best or ServiceFilter(self.schema, self.definition, snap.budget, self.params)
        replica._join(snap.generation, snap.budget)
        missing = snap.charges[len(replica._log) :]
        _heap.grew(len(missing))  # (off the lock: a pooled replica lives on, like the filters)
        try:
            # in one pass (:meth:`PrivacyFilter.record_many`: no search per charge, the same filter)
            check_deadline(deadline)
            replica.record_many(list(missing))
            check_deadline(deadline)
            if snap.within:
                # the same charges and budget as the filter that knew every row within it: no search
                # of the whole domain to show it again before the trial's first decision
                replica._filter.assume_within()
        except BaseException:
            # what it holds is still a prefix of the log: the next trial goes on from there
            self._give_back(replica)
            raise
        return replica

    def recycle(self) -> None:
        """Under the admission lock, once the group that adopted replicas is closed (no savepoint can
        put the filters they replaced back): those filters become replicas in the pool, each holding
        a prefix of the log, so the next trial catches up by recording only the charges added since
        (a double buffer: no replica is rebuilt from scratch after each adoption)."""
        retired, self._retired = self._retired, []
        for inner, n, generation, budget in retired:
            if inner is self._filter or generation != self._generation:
                continue
            replica = ServiceFilter.__new__(ServiceFilter)
            replica._become_replica(self, inner, n, budget)
            self._give_back(replica, lent=False)

    def _join(self, generation: int, budget: float) -> None:
        """This replica now stands for a snapshot of ``generation`` with ``budget``."""
        self._generation = generation
        self.budget = budget

    def _become_replica(self, owner: ServiceFilter, inner: PrivacyFilter, n: int, budget: float) -> None:
        """Initialise this (new, uninitialised) object as a replica of ``owner`` over the retired library
        filter ``inner``, which holds the first ``n`` charges of the owner's log."""
        self.__dict__.update(owner.__dict__)
        self._filter, self._filter_budget, self._budget = inner, budget, budget
        self._log = owner._log[:n]
        self._retired, self._pool, self._pool_lock = [], [], threading.Lock()
        self._pool_cond, self._lent = threading.Condition(self._pool_lock), 0
        self._pinned = 0
        self._uid = next(_uids)

    def _give_back(self, replica: ServiceFilter, *, lent: bool = True) -> None:
        with self._pool_cond:
            if lent:
                self._lent = max(0, self._lent - 1)
            self._pool_cond.notify()
            # replicas of an older generation can never be caught up again
            self._pool = [r for r in self._pool if r._generation == replica._generation]
            self._pool.append(replica)
            if len(self._pool) > _POOL:  # keep the longest (least to catch up)
                self._pool.sort(key=lambda r: len(r._log))
                del self._pool[0]

    def trial(
        self,
        snap: FilterSnapshot,
        charges: Sequence[tuple[PredicateQuery | None, float]],
        deadline: float | None = None,
        *,
        bound: bool = True,
    ) -> Trial:
        """Try ``charges`` on a private replica of ``snap`` (off the admission lock; reads only the
        snapshot). The replica is kept in the trial when admitted (:meth:`settle`, :meth:`finish`)."""
        if snap.owner != self._uid:
            raise ValueError("a snapshot is tried on the filter it was taken of")
        replica = self._replica(snap, deadline)
        mark = replica.savepoint()
        try:
            ok = replica.try_all(charges, deadline)
            # a safe bound, no search (the lazy tables): an exact spend would bring every pending
            # charge into the overlap index, tens of seconds with 10 000 held; when the bound is too
            # loose for the charges landed since, settle() decides by try_all instead
            upper = None
            if ok and bound:
                with replica._effort(deadline):  # (the bound searches when the tables cannot bound)
                    upper = replica._settle_bound()
                check_deadline(deadline)
        except BaseException:
            replica.rollback(mark)
            self._give_back(replica)
            raise
        if not ok:
            replica.rollback(mark)
            self._give_back(replica)
            return Trial(self, snap, False)
        return Trial(self, snap, True, replica, mark, upper)

    def settles(self, trial: Trial) -> bool:
        """Whether :meth:`settle` can decide ``trial`` now with no overlap search (under the lock; changes
        nothing): the snapshot's charges are still a prefix of the log, the budget is the same, and
        the trial was refused (loads only grow), or nothing landed since, or what landed fits with the
        replica's worst-row bound (:func:`_fits_with`). Otherwise the trial is brought up to date off
        the lock (:meth:`advance`) and comes back."""
        added = self.charges_since(trial.snapshot)
        if added is None or trial.snapshot.budget != self._budget:
            return False
        pending = [*trial.extra, *added]
        if not trial.admitted or not pending:
            return True
        return self.measure.fits_with(trial.upper, pending, self._budget, self.params)

    def settle(
        self,
        trial: Trial,
        charges: Sequence[tuple[PredicateQuery | None, float]],
        deadline: float | None = None,
    ) -> bool:
        """Under the admission lock: admit ``charges`` (added, as :meth:`try_all` would) or refuse them,
        the decision :meth:`try_all` takes now, from ``trial`` and the charges added since its snapshot,
        with NO overlap search (call only when :meth:`settles`; :class:`NeedsTrial` otherwise).

        - Nothing added since: the trial's decision is the filter's on this very state; an admitted
          trial's replica is adopted.
        - Charges added since (other analysts', other instances'): a refusal stands (loads only grow,
          and the filter's test is on the worst row); an admission stands when the replica's worst row
          plus the sum of the loads added since fits the budget exactly (a row's load is the sum of the
          loads covering it, MATH.md 1.8: pure DP and zCDP; GDP: the worst row's square plus the squares
          added since against the budget's square); those few charges are recorded into the
          replica, which is adopted.
        - Otherwise (the budget changed, a rollback cut the snapshot, other definitions, or the bound
          does not show it) the caller brings the trial up to date off the lock (:meth:`advance`): a
          search here would hold up every analyst of the data set."""
        if not self.settles(trial):
            raise NeedsTrial
        if not trial.admitted:
            return False
        added = self.charges_since(trial.snapshot)
        assert trial.replica is not None and trial.mark is not None and added is not None
        replica = trial.replica
        replica.release(trial.mark)
        trial.mark = None
        for q, load, times in added:
            with replica._effort(
                deadline
            ):  # (pending in the lazy tables: a record searches only without them)
                replica.record(q, load, times)
        # settles() showed every row of the new state within the budget (the trial's decision on this
        # very state, or the worst-row bound plus the loads added since, MATH.md 1.8): known, so the
        # next trial's first decision does not search the whole domain for it
        replica._filter.assume_within()
        # adopt: the replica's library filter holds exactly this filter's charges plus the batch
        self._retired.append((self._filter, len(self._log), self._generation, self._filter_budget))
        del self._retired[:-_POOL]
        self._filter, self._filter_budget = replica._filter, replica._filter_budget
        self._sync_budget()
        self._log.extend((q, load, 1) for q, load in charges)
        trial.adopted = True
        with self._pool_cond:  # (the replica became the filter: it is no longer lent)
            self._lent = max(0, self._lent - 1)
            self._pool_cond.notify()
        return True

    def from_worker(
        self,
        snap: FilterSnapshot,
        charges: Sequence[tuple[PredicateQuery | None, float]],
        admitted: bool,
        upper: float | tuple[Fraction, Fraction] | None,
        extra: Sequence[tuple[PredicateQuery | None, float, int]],
        deadline: float | None = None,
    ) -> Trial:
        """Off the lock: the trial of ``charges`` on ``snap`` from a worker process's EXACT decision on a
        state X of this filter that ``snap`` contains (the same budget; the ledger's charges up to
        the sequence number the worker had read), ``extra`` being the charges of ``snap`` not in X,
        and ``upper`` (admitted only) the worker's safe bound on X's worst row with ``charges`` added.
        No search here (DESIGN.md, "Admission in worker processes"):

        - refused on X: refused on ``snap`` (loads only grow, and the test is on every row);
        - admitted on X, nothing extra: admitted on ``snap`` (the same state); with extra charges, it
          stands only while ``upper`` plus every load added beyond X fits the budget exactly
          (:meth:`settles`, MATH.md 1.8), else the request is decided again by a worker.

        An admitted trial's replica holds ``snap`` plus ``charges``, recorded (never refused), so that
        :meth:`settle` adopts it as it adopts a local trial's."""
        if snap.owner != self._uid:
            raise ValueError("a snapshot is tried on the filter it was taken of")
        if not admitted:
            return Trial(self, snap, False, remote=True)
        replica = self._replica(snap, deadline)
        mark = replica.savepoint()
        try:
            check_deadline(deadline)
            # in one pass (no search: the lazy tables take them, or the index defers its search)
            replica.record_many([(q, load, 1) for q, load in charges])
            check_deadline(deadline)
        except BaseException:
            replica.rollback(mark)
            self._give_back(replica)
            raise
        return Trial(self, snap, True, replica, mark, upper, extra=tuple(extra), remote=True)

    def advance(
        self,
        trial: Trial,
        snap: FilterSnapshot,
        charges: Sequence[tuple[PredicateQuery | None, float]],
        deadline: float | None = None,
    ) -> Trial:
        """Off the lock: ``trial`` brought up to ``snap``, a later snapshot of this filter, so that
        :meth:`settle` has only what lands after ``snap`` left to look at. An admitted trial's replica
        (its snapshot plus the batch) is offered the charges added between the two snapshots, each
        through the filter's own test (:meth:`try_all`): all admitted, every row of the new snapshot
        plus the batch is within the budget, so the batch is admitted on ``snap``; one refused, some
        row of it is over the budget, and so is that row with every charge of ``snap`` and the batch:
        refused (a row's load only grows). Either is the decision admitting the batch one charge at a
        time on ``snap`` takes (the test is on every row, so the order does not matter). A refused
        trial stays refused; a trial whose snapshot is no longer a prefix of ``snap`` (a rollback cut
        it) or whose budget changed is tried again on ``snap`` from a replica (:meth:`trial`)."""
        if snap.owner != self._uid:
            raise ValueError("a trial is advanced to a snapshot of the filter it was taken of")
        old = trial.snapshot
        stale = old.owner != snap.owner or old.generation != snap.generation or old.budget != snap.budget
        if stale or trial.adopted:
            ServiceFilter.finish(trial)
            return self.trial(snap, charges, deadline)
        if not trial.admitted:
            return Trial(self, snap, False)
        assert trial.replica is not None and trial.mark is not None
        replica = trial.replica
        try:
            for q, load, times in snap.charges[len(old.charges) :]:
                for _ in range(times):
                    check_deadline(deadline)
                    if not replica.try_all([(q, load)], deadline):
                        ServiceFilter.finish(trial)
                        return Trial(self, snap, False)
            with replica._effort(deadline):
                upper = replica._settle_bound()
            check_deadline(deadline)
        except BaseException:
            ServiceFilter.finish(trial)
            raise
        out = Trial(self, snap, True, replica, trial.mark, upper)
        trial.replica, trial.mark = None, None  # (handed over: finishing the old trial leaves it alone)
        return out

    def dry_run(
        self,
        snap: FilterSnapshot,
        charges: Sequence[tuple[PredicateQuery | None, float]],
        deadline: float | None = None,
    ) -> DryRun:
        """On a private replica of ``snap`` (off the lock): whether :meth:`try_all` would admit
        ``charges`` (exact, within ``deadline``), and the spend after and before recording them, each
        exact when its search ends within a share of the time left (:meth:`spend_within`), else a safe
        upper bound, so that a large request still gets its figures in time. Nothing stays."""
        replica = self._replica(snap, deadline)
        mark = replica.savepoint()
        open_mark = True
        try:
            ok = replica.try_all(charges, deadline)  # admitted: the charges are in
            if not ok:
                for q, load in charges:
                    check_deadline(deadline)
                    with replica._effort(deadline):
                        replica.record(q, load)
            after, after_exact = replica.spend_within(deadline, _SPEND_SHARE)
            replica.rollback(mark)
            open_mark = False
            before, before_exact = replica.spend_within(deadline, _SPEND_SHARE)
        finally:
            if open_mark:
                replica.rollback(mark)
            self._give_back(replica)
        # loads only grow: the true spend before is at most the true one after, so at most ``after``
        return DryRun(min(before, after), after, ok, before_exact and after_exact)

    def spend(self, snap: FilterSnapshot) -> float:
        """The exact spend (:meth:`max_load`) of ``snap``'s charges, on a private replica: off the
        admission lock, so a report's overlap search holds nobody up."""
        replica = self._replica(snap, None)
        try:
            return replica.max_load()
        finally:
            self._give_back(replica)

    @staticmethod
    def finish(trial: Trial) -> None:
        """Return a trial's replica to its filter's pool unless it was adopted (off the lock, by the
        request that made the trial)."""
        if trial.replica is None or trial.adopted:
            return
        if trial.mark is not None:
            trial.replica.rollback(trial.mark)
            trial.mark = None
        trial.owner._give_back(trial.replica)
        trial.replica = None

    def max_load(self, deadline: float | None = None) -> float:
        """The spend in the data set's amount: the worst row's load, its exact value rounded up (a safe
        upper bound when the index is not exact), :meth:`PrivacyFilter.spent`; GDP: sqrt of the worst
        row's sum of mu^2; RDP: the worst row's sum at the one order; approximate DP: the filter's
        epsilon at the budget's delta (:meth:`PrivacyFilter.value`).

        ``deadline`` (a ``_clock.now()`` time): the overlap search is cut there (the engine's effort
        limit) and :class:`TimeBudgetExceeded` raised once it has passed, so a request's time budget
        holds inside the search too."""
        if len(self._filter) == 0:
            return 0.0
        check_deadline(deadline)
        seconds = None if deadline is None else max(0.0, deadline - _clock.now())
        with self._filter.search_effort(seconds):
            out = self._spent()
        check_deadline(deadline)  # (a search cut at the deadline gave a bound: not an answer)
        return out

    def _spent(self) -> float:
        return self.measure.served_spent(self._filter)

    def spend_within(self, deadline: float | None, share: float = 1.0) -> tuple[float, bool]:
        """(:meth:`max_load`, True) when its search ends within ``share`` of the time left before
        ``deadline``; else (a safe upper bound of it, False): the smaller of the cut search's bound and
        the lazy tables' worst-row bound (pure DP, zCDP, GDP). For the figures a request reports; raises
        :class:`TimeBudgetExceeded` only when the deadline has already passed."""
        if len(self._filter) == 0:
            return 0.0, True
        check_deadline(deadline)
        seconds = None if deadline is None else share * max(0.0, deadline - _clock.now())
        with self._filter.search_effort(seconds):
            # the lazy tables' bound first: the exact search brings the pending charges into the index,
            # after which spent_bound() is that search's own result
            bound = self._filter.spent_bound() if self.measure.bounded else math.inf
            out = self._spent()
            exact = self._filter.value_is_exact()
        return (out, True) if exact else (min(out, bound), False)

    def max_load_bound(self) -> float:
        """A safe upper bound on :meth:`max_load` with no overlap search while the filter keeps its lazy
        tables (MATH.md 2.7.1): pure DP, zCDP, GDP and tCDP :meth:`PrivacyFilter.spent_bound`; RDP and
        approximate DP from the tables' per-track bounds (:meth:`PrivacyFilter.track_bounds`;
        approximate DP: the smaller of the basic and the advanced rule at them, MATH.md 5.6). Without
        tables (a domain too large for them) the index's spend. The ``remaining`` of an answer is
        computed from it, so it is never more than what is truly left."""
        return self.figures_bound(self._budget)[0]

    def figures_bound(self, quota: float) -> tuple[float, float]:
        """(:meth:`max_load_bound`, the room left under ``quota`` after it): safe (a spend never below
        the worst row's, a room never above what one more charge on every row may carry) and with no
        overlap search while the lazy tables are kept (what an answer reports, under the lock)."""
        m = self.measure
        if len(self._filter) == 0:
            return 0.0, m.remaining(quota, 0.0, self.params)
        tracks = self._filter.track_bounds() if m.tracked else None
        if tracks is not None:
            return m.track_figures(tracks, quota, self.params)
        spent = m.served_bound(self._filter, self.max_load)
        return spent, m.remaining(quota, spent, self.params)

    def _settle_bound(self) -> float | tuple[Fraction, Fraction] | None:
        """What :func:`_fits_with` settles a trial with (no search while the tables are kept): a bound
        on the worst row's sum (GDP: its root), or for approximate DP the per-track bounds (sum of
        epsilons, sum of squares); None when there is none."""
        if self.measure.joint:
            tracks = self._filter.track_bounds()
            return None if tracks is None else (tracks[2], tracks[0])
        return self.max_load_bound()

    def joint_figures(self, snap: FilterSnapshot, quota: float) -> tuple[float, float] | None:
        """Approximate DP: the worst row's own spend and the smallest room over the rows of ``snap``'s
        charges (every row pattern, :func:`overlapdp.privacy.approx_rooms.joint_figures`; off the lock),
        or None when their grid is too large (or another definition)."""
        charges = [(q or self._everything, load, times) for q, load, times in snap.charges]
        return self.measure.joint_figures(self.schema, charges, quota, self.params)

    def account(self, snap: FilterSnapshot, quota: float) -> tuple[float, float]:
        """The spend of ``snap``'s charges and the room left under ``quota`` (off the lock, for
        reports). Approximate DP: the worst row's own combined figure and the smallest room over the
        rows (:func:`overlapdp.privacy.approx_rooms.joint_figures`, every row pattern) when the charges' grid
        is small enough, else the filter's value (the rules at the per-track maxima, a safe bound) and
        the larger of the rooms the two safe bounds give. Others: :meth:`spend` and :func:`remaining`."""
        m = self.measure
        if m.joint:
            joint = self.joint_figures(snap, quota)
            if joint is not None:
                return joint
            spent = self.spend(snap)
            room = m.remaining(quota, spent, self.params)
            replica = self._replica(snap, None)
            try:
                tracks = replica._filter.track_bounds()
            finally:
                self._give_back(replica)
            if tracks is not None:
                room = max(room, m.track_figures(tracks, quota, self.params)[1])
            return spent, room
        spent = self.spend(snap)
        return spent, m.remaining(quota, spent, self.params)

    def __len__(self) -> int:
        return len(self._filter)


QuotaFilter = ServiceFilter


#: The share of the time left that a batch's own overlap cost may search for its exact value.
_BATCH_SHARE = 0.25


def batch_cost(
    schema: Schema,
    charges: Sequence[tuple[PredicateQuery | None, float]],
    definition: str = "pure",
    deadline: float | None = None,
) -> dict[str, Any]:
    """What a batch costs on its own in the data set's amount: overlap-aware (the worst row's
    composition, MATH.md 2.4) and sequential, from the exact sums of the loads rounded up: sums, except
    GDP (sqrt of the sum of mu^2). Approximate DP: basic composition (the sum of epsilons, a safe bound).
    ``exact`` False: the overlap search did not end within a quarter of the time left before ``deadline``, and
    ``overlap`` is a safe upper bound."""
    m = served(definition)
    # a row's composition: GDP's l2 on its own filter, every other amount a plain sum (pure DP's)
    l2 = isinstance(m, AdditiveMeasure) and m.comp == "l2"
    alone = ServiceFilter(schema, m.name if l2 else "pure", 1.0)  # record() never refuses
    for query, load in charges:
        check_deadline(deadline)  # (TimeBudgetExceeded past it)
        alone.record(query, load)
    sequential = alone.measure.sequential([x for _, x in charges])
    overlap, exact = alone.spend_within(deadline, _BATCH_SHARE)
    return {"overlap": overlap, "sequential": sequential, "exact": exact}


def make_filter(
    schema: Schema, definition: str, budget: float, params: Mapping[str, Any] | None = None
) -> ServiceFilter:
    return ServiceFilter(schema, definition, budget, params)


def _defaults(m: Measure[Any]) -> dict[str, Any]:
    """Parameters for a filter built without a data set's (tests, :func:`batch_cost`)."""
    return {"omega": math.inf, "alpha": 2.0} if m.fixed else {}


def remaining(definition: str, quota: float, spent: float, params: Mapping[str, Any] | None = None) -> float:
    """What is left of ``quota`` once ``spent`` (an upper bound of the worst row's spend) is paid, in the
    data set's amount, rounded DOWN (never more than what is truly left): :meth:`Measure.remaining`
    (GDP: sqrt(quota^2 - spent^2); approximate DP: the smaller of the basic and advanced rooms)."""
    return served(definition).remaining(quota, spent, params or {})


# -- noise ----------------------------------------------------------------------------------------


def noisy_counts(true_counts: Sequence[int], mechanism: ServedMechanism) -> list[dict[str, Any]]:
    """Release each count plus exact integer noise (OS CSPRNG, served mode) with a 95% interval."""
    answers = add_noise(list(true_counts), mechanism.guarantee, level=0.95, served=True)
    return [
        {"count": a.value, "stddev": a.std, "ci95": [a.low, a.high], "noise": a.noise.describe()}
        for a in answers
    ]


def noisy_aggregates(
    true_counts: Sequence[int],
    true_sums: Sequence[int | None],
    aggregates: Sequence[Aggregate],
    mechanism: ServedMechanism,
) -> list[dict[str, Any]]:
    """Counts as :func:`noisy_counts`; a sum or mean by the library's own noise
    (:func:`overlapdp.mechanisms.sums.add_sum_noise` / ``add_mean_noise``, served mode) at the query's
    per-query guarantee ``mechanism.guarantee``, its noise scaled to the sum's add/remove sensitivity
    (MATH.md 2.8, 6.4). So each query, whatever it aggregates, is ``mechanism.parameter``-private for its
    rows and is charged as a count of the same rows (the same per-row load)."""
    from overlapdp.mechanisms.sums import add_mean_noise, add_sum_noise

    out: list[dict[str, Any]] = []
    for i, agg in enumerate(aggregates):
        clip = agg.clipping
        if clip is None:
            out.extend(noisy_counts([true_counts[i]], mechanism))
            continue
        units = true_sums[i]
        assert units is not None
        if agg.kind == "sum":
            (s,) = add_sum_noise([units], clip, mechanism.guarantee, level=0.95, served=True)
            out.append(
                {
                    "aggregate": "sum",
                    **clip.to_json(),
                    "answer": s.value,
                    "stddev": s.std,
                    "ci95": [s.low, s.high],
                    "noise": s.noise.describe(),
                }
            )
            continue
        (m,) = add_mean_noise([units], [true_counts[i]], clip, mechanism.guarantee, level=0.95, served=True)
        out.append(
            {
                "aggregate": "mean",
                **clip.to_json(),
                "answer": m.value,
                "ci95": [m.low, m.high],
                "parts": {
                    "split": "half the query's budget each",
                    "sum": {
                        "answer": m.sum.value,
                        "stddev": m.sum.std,
                        "interval": [m.sum.low, m.sum.high],
                        "level": m.sum.level,
                    },
                    "count": {
                        "answer": m.count.value,
                        "stddev": m.count.std,
                        "interval": [m.count.low, m.count.high],
                        "level": m.count.level,
                    },
                },
            }
        )
    return out


# -- interactive mechanisms ----------------------------------------------------------------------

Count = Callable[[PredicateQuery], int]


def open_session(
    kind: str, params: dict[str, Any], count: Count
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Create a session's mechanism: (public params, secret durable state, epsilon charged when it opens).

    Sparse vector: ``epsilon`` = epsilon_1 + epsilon_2 (Lyu, Su, Li 2017; MATH.md 4.1), stops after
    ``max_positives`` "above" answers. Guess-and-check: epsilon_SVT + c/b (Lyu 2022 App. B; MATH.md 4.2).
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


def global_guarantee(
    definition: str,
    analyst_spent: list[float],
    global_spent: float,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The guarantee for all analysts together, even colluding and interleaving, in the data set's amount,
    with its (epsilon, delta) line.

    Two safe bounds, the smaller reported: the data set's own per-row filter over every charge (filters
    extend to concurrent composition, Haney et al. 2023, MATH.md 3.6), and the concurrent composition of
    the analysts' spends (MATH.md 3), rounded up from the exact value: pure DP sums (Vadhan and Wang
    2021); zCDP and tCDP rho sum (Lyu 2022 Corollary 1; omega is the data set's for every analyst); RDP
    sums at the order (Lyu 2022 Theorem 2); GDP as declared zCDP, mu^2/2 summing, so mu composes in l2.
    Approximate DP: only the global filter (the analysts' deltas would add), ``by_concurrent_composition``
    is left out.
    """
    m = served(definition)
    p = dict(params) if params is not None else _defaults(m)
    composed = m.concurrent([s for s in analyst_spent if s > 0])
    value = global_spent if composed is None else min(global_spent, composed)
    return {
        "definition": definition,
        m.amount: value,
        "by_global_filter": global_spent,
        "by_concurrent_composition": composed,
        "epsilon_delta": epsilon_delta(definition, p, value),
    }
