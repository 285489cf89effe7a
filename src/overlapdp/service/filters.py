"""The service's filters (DESIGN.md, "Nobody waits for someone else's search"): :class:`ServiceFilter`,
a :class:`~overlapdp.service.logged_filter.LoggedFilter` with immutable snapshots taken under the
admission lock, trials of a batch on private replicas off it, their settlement under it, the dry runs
and reports computed on replicas, and :func:`batch_cost`, what a batch costs on its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from overlapdp.errors import NeedsTrial, TimeBudgetExceeded
from overlapdp.overlap import _clock
from overlapdp.privacy.measures import AdditiveMeasure
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.service import _heap
from overlapdp.service.definitions import served
from overlapdp.service.logged_filter import LoggedFilter, Savepoint, _uids, check_deadline

#: Replicas kept per filter for the next snapshot (each holds a copy of the filter's charges).
_POOL = 2
#: Longest wait (seconds) for a pooled replica before building a new one while _POOL are lent out.
_POOL_WAIT = 1.0
#: Recording many charges into a replica (a large batch admitted by a worker, or a replica catching up
#: with one) is Python work in the server's process, and Python threads share one interpreter lock
#: with no priorities: a lighter request running meanwhile would get about half of it. From
#: _YIELD_MIN charges on, they are recorded _YIELD_SLICE at a time, the thread resting _YIELD_REST
#: times as long as each slice took (it then holds the lock about a third of the time), while the
#: request's deadline leaves room for the rest (:func:`_record_yielding`).
_YIELD_MIN = 256
_YIELD_SLICE = 32
_YIELD_REST = 2.0


@dataclass(frozen=True)
class DryRun:
    """What :meth:`ServiceFilter.dry_run` found: the spend before and after the charges (exact when
    ``exact``, else safe upper bounds) and whether :meth:`ServiceFilter.try_all` would admit them (always
    the exact decision)."""

    before: float
    after: float
    #: None: not decided by the time given to the decision (the figures are still given).
    admitted: bool | None
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


class ServiceFilter(LoggedFilter):
    """The service's filter (one per analyst and data set, one global per data set): a
    :class:`~overlapdp.service.logged_filter.LoggedFilter` whose log can be frozen and tried on.

    Snapshots (nobody waits for someone else's search): every charge the filter holds is also kept in
    an append-only log. :meth:`snapshot` (under the admission lock, O(charges) copying, no search)
    freezes it; :meth:`trial` (off the lock) tries a batch on a PRIVATE replica of the snapshot, a
    library filter of its own that no other thread touches, kept in a small pool and brought up to date
    by recording only the charges added since it was built; :meth:`settle` (under the lock again)
    turns the trial into the decision :meth:`try_all` would take now, looking only at the charges added
    since the snapshot, and when admitted adopts the replica as the filter (a pointer swap, no search).
    Only the thread holding the admission lock ever changes this filter.
    """

    # -- snapshots ---------------------------------------------------------------------------------
    def snapshot(self) -> FilterSnapshot:
        """The filter's charges and budget now (call under the data set's admission lock)."""
        self._pinned = max(self._pinned, len(self._log))
        self._sync_budget()
        within = self._filter.known_within
        return FilterSnapshot(self._uid, self._generation, tuple(self._log), self._budget, within)

    @property
    def known_within(self) -> bool:
        """Whether every row of the filter's charges is known within its budget (call under the lock)."""
        return self._filter.known_within

    def proven_within(self) -> float | None:
        """The budget under which every row of the filter's charges is known within it
        (:attr:`PrivacyFilter.known_within`: after an admission), or None (call under the lock)."""
        self._sync_budget()
        return self._budget if self._filter.known_within else None

    def learn_within(self, budget: float) -> bool:
        """Under the lock: every row of a set of charges holding all of this filter's was shown within
        ``budget`` (a ledger mark, :meth:`LedgerStore.within_marks`; a row's load only grows with more
        charges, MATH.md 1.8), so this filter's rows are within its own budget when that is at least
        ``budget``: known from now on, no search of the whole domain before the next decision."""
        self._sync_budget()
        if self._filter.known_within:
            return True
        if not self._budget >= budget:
            return False
        self._filter.assume_within()
        return True

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
            _record_yielding(replica, list(missing), deadline)
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
        replica._filter.learn_rows(self._known)
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
        finally:
            # what this trial's searches learned, for the next trial's replica (which may be another)
            self._known = replica._filter.known_rows()
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
            # no search: the lazy tables take them, or the index defers its search
            _record_yielding(replica, [(q, load, 1) for q, load in charges], deadline)
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
        decide_by: float | None = None,
    ) -> DryRun:
        """On a private replica of ``snap`` (off the lock): whether :meth:`try_all` would admit
        ``charges`` (its exact decision, or None when it is not reached by ``decide_by``, a time before
        ``deadline``), and the spend after and before recording them, each exact when its search ends
        within a share of the time left (:meth:`spend_within`), else a safe upper bound, so that a
        large request still gets its figures in time. Past ``deadline`` itself,
        :class:`TimeBudgetExceeded`. Nothing stays."""
        replica = self._replica(snap, deadline)
        mark = replica.savepoint()
        open_mark = True
        try:
            ok = verdict_within(
                lambda: replica.try_all(charges, deadline if decide_by is None else decide_by), deadline
            )
            if not ok:  # refused or undecided: nothing of the batch is in yet
                check_deadline(deadline)
                with replica._effort(deadline):
                    # in one pass (the filter record one by one leaves, without a search per charge)
                    replica.record_many([(q, load, 1) for q, load in charges])
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


def _record_yielding(
    replica: ServiceFilter, charges: list[tuple[PredicateQuery | None, float, int]], deadline: float | None
) -> None:
    """``replica.record_many(charges)`` (the same filter as recording them one by one, whatever the
    slices: :meth:`PrivacyFilter.record_many`), checking ``deadline`` before and after. Many charges
    go in slices with a rest after each (``_YIELD_*``), so that the other requests' threads get the
    interpreter most of the time; no rest once resting as long again might leave too little of the
    time budget for the rest (the slices' pace so far)."""
    check_deadline(deadline)
    if len(charges) < _YIELD_MIN:
        replica.record_many(charges)
        check_deadline(deadline)
        return
    busy = 0.0
    for i in range(0, len(charges), _YIELD_SLICE):
        start = _clock.now()
        replica.record_many(charges[i : i + _YIELD_SLICE])
        took = _clock.now() - start
        busy += took
        check_deadline(deadline)
        done = i + _YIELD_SLICE
        if done >= len(charges):
            break
        rest = _YIELD_REST * took
        # what is left at this pace, resting included, and as much again as a margin
        need = 2 * (1 + _YIELD_REST) * busy / done * (len(charges) - done)
        if rest > 0 and (deadline is None or _clock.now() + rest + need < deadline):
            _rest(rest)


def verdict_within(decide: Callable[[], bool], deadline: float | None) -> bool | None:
    """``decide()``, or None when it ran out of the time it was given (its :class:`TimeBudgetExceeded`)
    while ``deadline``, the request's own, has not passed (past it, the error stands)."""
    try:
        return bool(decide())
    except TimeBudgetExceeded:
        check_deadline(deadline)
        return None


def _rest(seconds: float) -> None:
    """Sleep (tests count the rests by replacing it)."""
    time.sleep(seconds)
