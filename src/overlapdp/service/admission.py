"""The query service without HTTP: data sets, analysts, admission and the ledger.

Soundness (DESIGN.md, "Rules that keep it sound"):

- Admission and charge are one atomic step. Every request that spends budget (a query, a batch, opening
  a session, a session step) is admitted inside ONE ledger transaction that holds the data set's
  cross-process lock (:meth:`LedgerStore.admission`). In that transaction the in-memory filters are first
  caught up with every charge other service instances committed since this one last looked, then both the
  analyst's quota filter and the data set's global filter are asked, the noisy answer is drawn, and the
  charge is inserted together with the answer. The answer is handed back only after the commit returned,
  so a crash can lose an answer, never a charge.
- Group commit: requests that arrive while a transaction is running wait in a queue and are admitted
  one after another in the next transaction (each sees the charges of those before it), which pays one
  durable commit for many requests. A request is prepared before it joins a group (parsed, checked,
  counted and its noise drawn), and each admission runs under a savepoint of the ledger and of the
  filters: a request that fails fails alone. When the commit itself fails, the filters are rolled back
  to the group's savepoint (undo records, never a rebuild) and every request of the group gets 503.
- One admission path: the filters are the library's exact :class:`PrivacyFilter` through
  :class:`overlapdp.service.filters.ServiceFilter` (exact at the budget).
- Nobody waits for someone else's search: no overlap search runs under the data set's lock. A
  spending request of up to :attr:`Limits.bounds_max` queries (a single query too) is first tried
  under the lock on each filter's lazy bounds alone (no search; an admission there is the exact
  filter's, never a refusal). A filter they cannot decide, every filter of a larger batch, and
  ``/cost`` are tried outside the lock on private replicas of an immutable snapshot (the charges and
  budget, copied under the lock); ``/cost`` answers as of the snapshot; a spending request is then
  settled under the lock against the charges added since the snapshot only
  (:meth:`ServiceFilter.settle`, no search), or, when a bound cannot show those fit, sent back off the
  lock to bring its trial up to a fresh snapshot (:meth:`ServiceFilter.advance`). The decision is the
  one admitting it under the lock would take. Only the thread holding the admission lock ever changes
  a filter.
- Each request has a time budget (:attr:`Limits.request_seconds`): a request that cannot be decided
  within it gets 503 (:class:`TimeBudgetExceeded`) for itself alone, nothing charged.
- A restart never resets a budget: the filters replay the ledger's charges, never refusing them, so the
  spend is the same as before the restart.
- A request retried with the same idempotency key gets the recorded answers and is not charged again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from overlapdp.errors import Conflict, NeedsTrial, NotFound, OverlapDPError, QuotaExceeded, ServiceError
from overlapdp.mechanisms.consistency import NOTE
from overlapdp.query import PredicateQuery
from overlapdp.service import _heap, definitions, filters, logged_filter, session_mechanisms
from overlapdp.service.auth import AuthError
from overlapdp.service.ledger import AdmissionTransaction, ChargeRecord, NewCharge, SessionRecord
from overlapdp.service.ledger.base import WithinMarks
from overlapdp.service.responses import (
    Answer,
    BatchAnswer,
    ConsistentCounts,
    Cost,
    EpsilonDelta,
    SessionAnswer,
    SessionInfo,
    SessionOpened,
    SessionStep,
)
from overlapdp.service.session_mechanisms import session_json
from overlapdp.service.shared import DatasetState, Pending, R, Result, ServiceBase

log = logging.getLogger("overlapdp.service")


class Admission(ServiceBase):
    """Pending requests admitted in groups, one ledger transaction each (group commit), each decided on
    both filters (bounds, trials off the lock, settlement under it) and recorded with its charge."""

    def _from_worker(self, state: DatasetState, p: Pending, reply: Mapping[str, Any]) -> None:
        """``p``'s trials from a worker's verdicts (:meth:`worker_batch`), against fresh snapshots of
        the filters (DESIGN.md, "Admission in worker processes"). The worker decided on X, each filter's
        share of the ledger's charges up to ``reply["seq"]``; a snapshot taken now holds X (the filters
        hold exactly the committed charges, and the ledger's sequence numbers are committed in order for
        a data set: its admission lock) plus the charges committed since, read back from the ledger,
        which the trial carries (:meth:`ServiceFilter.from_worker`). A verdict on another definition or
        another budget is not used: the request is sent to a worker again (:meth:`_advance`)."""
        _, snaps, top, built_for = self._snapshots_at(state, p.analyst)
        seq = int(reply["seq"])
        if built_for != tuple(reply["built_for"]) or seq > top:
            p.needs = {0, 1}
            self._advance_here(state, p)
            return
        later = [r for r in self.store.loads_since(state.record.name, seq) if r[0] <= top and r[3] > 0]
        # Only their loads matter (the bound holds whatever rows they cover: every measure's fits_with),
        # so they are not parsed: (None, load, times) per distinct load.
        extra = [
            _by_load(load for _, who, _, load in later if who == p.analyst),
            _by_load(load for _, _, _, load in later),
        ]
        pairs = list(zip(p.queries, p.loads, strict=True))
        for which, ((f, snap), (admitted, upper, budget)) in enumerate(
            zip(snaps, reply["verdicts"], strict=True)
        ):
            if budget != snap.budget:
                p.needs.add(which)
                continue
            p.trials[which] = f.from_worker(snap, pairs, bool(admitted), upper, extra[which], p.deadline)
        if p.needs:
            self._advance_here(state, p)

    def _advance(self, state: DatasetState, p: Pending) -> None:
        """A request prepared by a worker process is decided there again, on fresh snapshots (its trials
        are never brought up to date here, which would search in this process: :meth:`_from_worker`);
        any other as :meth:`_advance_here`."""
        if p.worker_job is None or self.dry_runs is None:
            self._advance_here(state, p)
            return
        for which, trial in enumerate(p.trials):
            p.trials[which] = None
            if trial is not None:
                filters.ServiceFilter.finish(trial)
        p.needs = set()
        reply = self.dry_runs.run(p.worker_job, _the(p.deadline))
        self._from_worker(state, p, reply)

    def _advance_here(self, state: DatasetState, p: Pending) -> None:
        """The filters in ``p.needs`` tried off the lock against fresh snapshots (:meth:`ServiceFilter.trial`),
        or the trials the request has brought up to them (:meth:`ServiceFilter.advance`: only the
        charges added since its last snapshot are looked at); :meth:`_admit_one` settles them under
        the lock against what lands after."""
        needs, p.needs = sorted(p.needs), set()
        _, snaps = self._snapshots(state, p.analyst)
        pairs = list(zip(p.queries, p.loads, strict=True))
        for which in needs:
            f, snap = snaps[which]
            old = p.trials[which]
            p.trials[which] = None  # (finished by advance or by the request if this raises)
            if old is None:
                p.trials[which] = f.trial(snap, pairs, p.deadline)
            else:
                try:
                    p.trials[which] = f.advance(old, snap, pairs, p.deadline)
                except BaseException:
                    filters.ServiceFilter.finish(old)
                    raise

    def _submit(self, state: DatasetState, pending: Pending, result: type[R]) -> R:
        if pending.kind == "query" and pending.mechanism is not None:
            _staged(state, pending)  # off the lock
        try:
            while True:
                with state.queue_lock:
                    state.queue.append(pending)
                with state.admit_lock:
                    if not pending.done:
                        with state.queue_lock:
                            batch, state.queue = state.queue, []
                        self._admit(state, batch)
                if not isinstance(pending.error, NeedsTrial):
                    if pending.result is not None:  # held by both filters from now on (off the lock)
                        _heap.grew(len(pending.queries))
                    break
                # a filter's bounds could not admit it, or its trial could not be settled without a
                # search: tried (or brought up to date) off the lock, then settled under it
                pending.error, pending.done = None, False
                logged_filter.check_deadline(pending.deadline)
                self._advance(state, pending)
        finally:
            for trial in pending.trials:
                if trial is not None:
                    # replicas not adopted go back to their filters' pools (by this request, off the lock)
                    filters.ServiceFilter.finish(trial)
        if pending.error is not None:
            raise pending.error
        if pending.account is not None and isinstance(pending.result, BatchAnswer):
            pending.result = self._joint_figures(state, pending.result, *pending.account)
        assert isinstance(pending.result, result)
        return pending.result

    @staticmethod
    def _joint_figures(
        state: DatasetState,
        out: BatchAnswer,
        f: filters.ServiceFilter,
        snap: filters.FilterSnapshot,
        quota: float,
    ) -> BatchAnswer:
        """Approximate DP: an answer's spend and ``remaining`` as the rows' own figures (the worst row's
        combined spend, the smallest room over the rows: MATH.md 5.6), from the snapshot taken at its
        admission, computed off the lock; the per-track bounds it had when the rows are too many."""
        joint = f.joint_figures(snap, quota)
        if joint is None:
            return out
        spent, left = joint
        line = EpsilonDelta(**definitions.epsilon_delta(state.record.definition, state.params, spent))
        return out.model_copy(update={"remaining": left, "spent_epsilon_delta": line})

    def _admit(self, state: DatasetState, batch: list[Pending]) -> None:
        """Admit ``batch`` in one ledger transaction; results are published only after the commit."""
        staged: list[tuple[Pending, Result]] = []
        try:
            with self.store.admission(state.record.name) as tx:
                state.record = tx.dataset()
                if (state.record.definition, state.record.params) != state.built_for:
                    # Another instance changed the definition: replay the ledger (an admin action).
                    state.reset()
                    state.catch_up(tx.loads_since(0), tx.within_marks)
                state.global_filter.budget = state.record.budget
                # committed: outside the group's savepoint (another instance's charges, and its marks)
                if state.catch_up(tx.loads_since(state.last_seq), tx.within_marks):
                    state.learn_within("", state.global_filter)
                state.touch(state.global_filter)
                new_seqs: list[int] = []
                for p in batch:
                    filters = (state.global_filter, state.analyst_filter(p.analyst))
                    state.touch(filters[1])
                    marks = [f.savepoint() for f in filters]
                    try:
                        with tx.savepoint():
                            result, seqs = self._admit_one(tx, state, p)
                    except Exception as exc:
                        # This request alone fails: its rows and its filter updates are undone.
                        for f, sp in reversed(list(zip(filters, marks, strict=True))):
                            f.rollback(sp)
                        p.error = exc if isinstance(exc, OverlapDPError) else _failed(exc)
                        continue
                    for f, sp in reversed(list(zip(filters, marks, strict=True))):
                        f.release(sp)
                    staged.append((p, result))
                    new_seqs.extend(seqs)
                written = _mark_within(tx, state, [p.analyst for p, _ in staged], new_seqs)
            state.end_group(committed=True)
            if new_seqs:
                state.last_seq = max(state.last_seq, *new_seqs)
                top = max(new_seqs)
                for key in {"", *(p.analyst for p, _ in staged)}:
                    state.filter_seq[key] = max(state.filter_seq.get(key, 0), top)
                state.note_marks(written)
        except BaseException as exc:
            # Nothing of this transaction is committed: undo the group's filter updates.
            state.end_group(committed=False)
            for p in batch:
                if p.error is None:
                    p.error = _unavailable(exc)
                p.done = True
            if not isinstance(exc, Exception):
                raise
            return
        for p, result in staged:
            p.result = result
        for p in batch:
            p.done = True

    def _admit_one(
        self, tx: AdmissionTransaction, state: DatasetState, p: Pending
    ) -> tuple[Result, list[int]]:
        if p.request_key is not None and p.kind != "dry-run":
            recorded = tx.find_request(p.analyst, p.request_key)
            if recorded:
                if recorded[0].request_hash != p.request_hash:
                    raise Conflict("this idempotency key was already used for a different request")
                return self._replay(p, recorded), []
        analyst = tx.analyst(p.analyst)
        if analyst is None or analyst.revoked:
            raise AuthError("a valid analyst token is required")
        quota = analyst.quotas.get(state.record.name)
        if quota is None:
            raise NotFound(f"unknown data set {state.record.name!r}")
        mine = state.analyst_filter(p.analyst, quota)
        mine.budget = quota
        state.learn_within(p.analyst, mine)
        if p.kind == "session-query":
            return self._session_step(tx, state, p)
        pairs = list(zip(p.queries, p.loads, strict=True))
        definition = state.record.definition
        value = p.loads[0] if p.loads else 0.0
        cost = Cost.model_validate(
            {
                "definition": definition,
                "queries": len(p.queries),
                definitions.amount_name(definition, state.params): value,
            }
        )
        # Admission: the charges go into both filters, or (the caller rolls back) into neither. No
        # overlap search here: a filter is decided on its lazy bounds or by settling its trial; one that
        # needs a search sends the request off the lock (NeedsTrial) and it comes back.
        filters = (mine, state.global_filter)
        p.needs = {w for w in (0, 1) if not _settles(filters[w], p, w)}
        if p.needs:
            raise NeedsTrial
        mark = mine.savepoint()
        verdicts: dict[int, bool | None] = {}
        for w in sorted((0, 1), key=lambda w: p.trials[w] is not None):  # bounds first, then settles
            if p.needs and p.trials[w] is not None:
                break  # going back off the lock: a trial settled now would be adopted, then undone
            verdicts[w] = _decide(filters[w], p, w, pairs)
            if verdicts[w] is None:
                p.needs.add(w)
        if p.needs:
            raise NeedsTrial
        own_ok, global_ok = bool(verdicts[0]), bool(verdicts[1])
        if not (own_ok and global_ok):
            mine.rollback(mark)
            spent, remaining = mine.figures_bound(quota)  # under the lock: safe bounds, no search
            raise QuotaExceeded(
                "the analyst's quota cannot pay for this request"
                if not own_ok
                else "the data set's global budget cannot pay for this request",
                remaining=remaining,
                spent_epsilon_delta=definitions.epsilon_delta(definition, state.params, spent),
                quota_admits=own_ok,
                global_admits=global_ok,
            )
        mine.release(mark)
        if p.kind == "session":
            return self._session_open(tx, state, p)
        assert p.mechanism is not None
        charges, answers = _staged(state, p)
        seqs = tx.insert_many(charges)
        if seqs is None:
            raise Conflict("this idempotency key is being used by a concurrent request")
        for answer, seq in zip(answers, seqs, strict=True):
            answer.seq = seq
        # an upper bound on the spend (no search under the lock): ``remaining`` is never more than
        # what is left; the exact spend is in the data set status and the ledger's reports
        spent, remaining = mine.figures_bound(quota)
        if mine.measure.joint:  # the rows' own figures are computed off the lock (_submit)
            p.account = (mine, mine.snapshot(), quota)
        return BatchAnswer(
            answers=answers,
            cost=cost,
            replayed=False,
            remaining=remaining,
            spent_epsilon_delta=EpsilonDelta(**definitions.epsilon_delta(definition, state.params, spent)),
            consistent=_consistent_counts(p.noisy),
        ), seqs

    def _session_open(
        self, tx: AdmissionTransaction, state: DatasetState, p: Pending
    ) -> tuple[SessionOpened, list[int]]:
        assert p.session_id is not None and p.session_kind is not None
        definition = state.record.definition
        load = p.loads[0]
        session = SessionRecord(
            p.session_id,
            state.record.name,
            p.analyst,
            p.session_kind,
            p.session_params,
            p.session_state,
            False,
            time.time(),
        )
        tx.insert_session(session)
        answer = session_json(session)
        row = tx.insert(
            NewCharge(
                dataset=state.record.name,
                analyst=p.analyst,
                kind="session",
                session=p.session_id,
                query=None,
                mechanism={"name": p.session_kind, **p.session_params},
                cost={
                    "definition": definition,
                    definitions.amount_name(definition, state.params): load,
                    "load": load,
                },
                answer=answer.model_dump(mode="json"),
                request_key=p.request_key,
                request_hash=p.request_hash,
            )
        )
        if row is None:
            raise Conflict("this idempotency key is being used by a concurrent request")
        return SessionOpened(session=answer, charge=row.id, seq=row.seq, replayed=False), [row.seq]

    def _session_step(
        self, tx: AdmissionTransaction, state: DatasetState, p: Pending
    ) -> tuple[SessionStep, list[int]]:
        assert p.session_id is not None
        session = tx.session(p.session_id)
        if session is None or session.analyst != p.analyst:
            raise NotFound("unknown session")
        if session.closed:
            raise Conflict("the session is exhausted; open a new one")
        loaded = self._loaded(state)
        query = p.queries[0]
        assert query is not None
        answer, new_state, closed = session_mechanisms.session_step(
            session.kind, session.params, session.state, loaded.count, query, p.step_arg
        )
        session.state = new_state
        session.closed = closed
        tx.update_session(session)
        answer = {**answer, "closed": session.closed}
        row = tx.insert(
            NewCharge(
                dataset=state.record.name,
                analyst=p.analyst,
                kind="session-query",
                session=session.id,
                query=p.query_json[0],
                mechanism={"name": session.kind, "argument": p.step_arg},
                cost={"definition": state.record.definition, "load": 0.0, "paid_by_session": session.id},
                answer=answer,
                request_key=p.request_key,
                request_hash=p.request_hash,
            )
        )
        if row is None:
            raise Conflict("this idempotency key is being used by a concurrent request")
        return SessionStep(answer=SessionAnswer(**answer), charge=row.id, seq=row.seq, replayed=False), [
            row.seq
        ]

    @staticmethod
    def _replay(p: Pending, recorded: list[ChargeRecord]) -> Result:
        """The recorded answers of a retried request (``remaining`` is not recomputed: left out)."""
        r = recorded[0]
        if p.kind == "session":
            return SessionOpened(
                session=SessionInfo(**(r.answer or {})), charge=r.id, seq=r.seq, replayed=True
            )
        if p.kind == "session-query":
            return SessionStep(
                answer=SessionAnswer(**(r.answer or {})), charge=r.id, seq=r.seq, replayed=True
            )
        answers = [Answer(charge=c.id, seq=c.seq, **_released(c.answer or {})) for c in recorded]
        cost = {k: v for k, v in r.cost.items() if k not in ("load", "queries")}
        return BatchAnswer(
            answers=answers,
            cost=Cost(**cost, queries=len(recorded)),
            replayed=True,
            consistent=_consistent_counts([c.answer or {} for c in recorded]),
        )


def _staged(state: DatasetState, p: Pending) -> tuple[list[NewCharge], list[Answer]]:
    """``p``'s ledger rows (encoded) and answers (``seq`` filled in at its insert) for the data set's
    definition; built once, before the request takes the admission lock (:meth:`Admission._submit`),
    and again only if the definition changed meanwhile. A 1 000-query batch spent ~80 ms under the lock
    building them there; everything in them is known before the lock but the ledger positions."""
    definition = state.record.definition
    amount = definitions.amount_name(definition, state.params)
    if p.staged is not None and p.staged[0] == (definition, amount):
        return p.staged[1], p.staged[2]
    assert p.mechanism is not None
    now = time.time()
    mechanism = p.mechanism.to_json()
    ids = _new_ids(len(p.noisy))
    charges = [
        NewCharge(
            dataset=state.record.name,
            analyst=p.analyst,
            kind="query",
            query=qjson,
            mechanism=mechanism,
            cost={"definition": definition, amount: load, "load": load},
            answer=answer,
            request_key=p.request_key,
            request_hash=p.request_hash,
            position=i,
            id=ids[i],
            created_at=now,
        )
        for i, (qjson, answer, load) in enumerate(zip(p.query_json, p.noisy, p.loads, strict=True))
    ]
    for charge in charges:
        _ = charge.encoded
    answers = [Answer(charge=i, seq=0, **_released(a)) for i, a in zip(ids, p.noisy, strict=True)]
    p.staged = ((definition, amount), charges, answers)
    return charges, answers


def _new_ids(n: int) -> list[str]:
    """``n`` random charge ids (32 hex digits, as ``uuid4().hex``), from one read of the system's
    randomness rather than one per charge."""
    raw = os.urandom(16 * n).hex()
    return [raw[32 * i : 32 * (i + 1)] for i in range(n)]


def _mark_within(
    tx: AdmissionTransaction, state: DatasetState, analysts: Sequence[str], seqs: Sequence[int]
) -> WithinMarks:
    """In the admission's transaction, for the global filter and the filters of ``analysts`` that know
    every row within their budget (after an admission, :meth:`ServiceFilter.proven_within`): a mark
    covering their charges up to the transaction's last sequence number (every one of them is held:
    the filters caught up at its start and hold its charges), committed with the charges. A restart's
    replay, or another instance catching up, learns it from there (:meth:`DatasetState.learn_within`)
    instead of searching the whole domain."""
    if not seqs:
        return {}
    top = max(seqs)
    written: WithinMarks = {}
    for key in dict.fromkeys(["", *analysts]):
        f = state.global_filter if key == "" else state.analyst_filters.get(key)
        budget = None if f is None else f.proven_within()
        if budget is not None:
            tx.mark_within(key, top, budget)
            written[key] = (top, budget)
    return written


def _by_load(loads: Iterable[float]) -> list[tuple[PredicateQuery | None, float, int]]:
    """``(None, load, times)`` for each distinct load: charges whose queries do not matter."""
    counts: dict[float, int] = {}
    for load in loads:
        counts[load] = counts.get(load, 0) + 1
    return [(None, load, k) for load, k in counts.items()]


def _the(deadline: float | None) -> float:
    """A request's deadline (every request has one by the time it is admitted)."""
    assert deadline is not None
    return deadline


def _settles(f: filters.ServiceFilter, p: Pending, which: int) -> bool:
    """Whether ``f``'s decision on ``p`` needs no trial brought up to date first (under the lock)."""
    trial = p.trials[which]
    return trial is None or f.settles(trial)


def _decide(
    f: filters.ServiceFilter, p: Pending, which: int, pairs: list[tuple[PredicateQuery | None, float]]
) -> bool | None:
    """Admit ``pairs`` into ``f`` or refuse them (under the admission lock): from the request's trial
    against a snapshot when it has one (:meth:`ServiceFilter.settle`: only the charges added since are
    looked at, no search); for a request tried on the bounds first, admitted when the lazy bounds alone
    clear each charge (:meth:`ServiceFilter.try_on_bounds`, no search), None (nothing changed) when only
    a trial off the lock can decide; otherwise (``Limits.snapshot_min`` above the request's size) by
    trying each charge now. Every way the decision admitting them one by one under the lock would take,
    within the request's time budget."""
    trial = p.trials[which]
    if trial is not None:
        return f.settle(trial, pairs, p.deadline)
    if p.on_bounds:
        return f.try_on_bounds(pairs)
    return f.try_all(pairs, p.deadline)


def _released(answer: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded answer's own fields (its consistent count goes to the batch's ``consistent``)."""
    return {k: v for k, v in answer.items() if k != "consistent"}


def _consistent_counts(answers: Sequence[Mapping[str, Any]]) -> ConsistentCounts | None:
    """The batch's consistent counts from its (recorded) answers; None for a batch without them."""
    fits = [a.get("consistent") for a in answers]
    if not fits or any(f is None for f in fits):
        return None
    first = fits[0]
    assert first is not None
    values = [float(f.get("answer", f.get("count"))) for f in fits if f is not None]
    return ConsistentCounts(
        answers=values,
        counts=values,
        cells=int(first["cells"]),
        solver=str(first["solver"]),
        note=NOTE,
    )


def _failed(exc: BaseException) -> ServiceError:
    """A request that failed for a reason other than its input: nothing of it was recorded."""
    log.error("admission of one request failed: %s: %s", type(exc).__name__, exc)
    err = ServiceError(
        f"the request could not be completed ({type(exc).__name__}); nothing was charged and no answer "
        "was released"
    )
    err.status = 500
    return err


def _unavailable(exc: BaseException) -> ServiceError:
    err = ServiceError(
        f"the ledger could not record the request ({type(exc).__name__}) and no answer was released; "
        "retry with the same Idempotency-Key (a request the ledger did record is answered from it)"
    )
    err.status = 503
    return err
