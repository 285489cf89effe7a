"""The library's exact per-row filter with the log of its charges: the part of the service's filter
that admits, records and reports (:class:`LoggedFilter`); snapshots, trials and replicas build on it
in :mod:`overlapdp.service.filters`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from overlapdp.errors import TimeBudgetExceeded
from overlapdp.overlap import _clock
from overlapdp.privacy import BudgetError
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, PureDP
from overlapdp.privacy.mechanisms import Mechanism as PrivacyMechanism
from overlapdp.privacy.mechanisms import costed_by_fields
from overlapdp.privacy.odometer import whole_domain
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.service.definitions import _defaults, budget_of, check_params, served

if TYPE_CHECKING:
    from overlapdp.service.filters import ServiceFilter

_ids = itertools.count()
_uids = itertools.count()


@costed_by_fields
@dataclass(frozen=True)
class Charged(PrivacyMechanism):
    """One charge as the service records it: its load under the data set's definition, declared
    exactly as the float the ledger holds (an ``epsilon``-DP, ``rho``-zCDP, ``mu``-GDP or
    (alpha, ``epsilon_alpha``)-RDP guarantee; an approximate-DP charge is (epsilon, 0)). ``alpha``: the
    data set's RDP order; ``orders``: its orders when it is served as a curve (the charge is then
    ``load``-zCDP, charged by its curve alpha ``load`` at those orders)."""

    definition: str
    load: float
    alpha: float = 0.0
    orders: tuple[float, ...] = ()
    name = "charge"

    @functools.cached_property
    def guarantee(self) -> PureDP | ZCDP | GDP | RDP:
        params: dict[str, Any] = {"orders": self.orders} if self.orders else {"alpha": self.alpha}
        return served(self.definition).charged(self.load, params)

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
        if self.orders and isinstance(g, ZCDP):  # (a curve's charge: its Gaussian curve at any orders)
            return g.to_rdp(orders)
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


class LoggedFilter:
    """The library's one overlap-aware per-row filter, :class:`overlapdp.privacy.privacy_filter.PrivacyFilter`
    (MATH.md 2.7), in the data set's amount, with the append-only log of its charges: a charge is
    admitted iff every row's load stays within the budget in EXACT arithmetic of the declared float loads.

    Loads are the data set's amount (epsilon, rho, mu, epsilon_alpha). The filter is the library's for
    the definition's budget: per-row sums for pure DP (Rogers, Roth, Ullman, Vadhan 2016), zCDP, tCDP and
    one-order RDP (Feldman and Zrnic 2021), sum mu^2 <= B^2 for GDP, and for approximate DP the adaptive
    (advanced / basic combined) rule of :mod:`overlapdp.privacy.privacy_filter` (the optimal composition
    is refused for adaptive use, :func:`check_params`). A batch is admitted all or nothing
    (:meth:`try_all`: a savepoint, each charge through the filter, a rollback on the first refusal);
    committed charges read back from the ledger go through :meth:`record`, which never refuses, so a
    restart replays the same exact loads through the same filter and reproduces the spend exactly. The
    budget may change (an admin raises or lowers it). Every charge is also kept in the log, of which
    :class:`~overlapdp.service.filters.ServiceFilter` takes snapshots.
    """

    def __init__(
        self, schema: Schema, definition: str, budget: float, params: Mapping[str, Any] | None = None
    ) -> None:
        self.schema = schema
        self.measure = served(definition)
        self.definition = definition
        self.params = (
            dict(params) if params is not None else check_params(definition, _defaults(self.measure))
        )
        self._alpha = float(self.params.get("alpha", 0.0))
        self._orders = tuple(float(a) for a in self.params.get("orders") or ())
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
        # rows the filter and its replicas keep for quick refusals, offered to every replica a trial
        # takes and gathered back from it (each replica's library filter keeps its own list)
        self._known: list[tuple[int, ...]] = []
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
        return Charged(self.definition, load, self._alpha, self._orders)

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
        return self.measure.served_spent(self._filter, self.params)

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

    def __len__(self) -> int:
        return len(self._filter)
