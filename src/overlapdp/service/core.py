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

import hashlib
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from overlapdp.errors import Conflict as Conflict
from overlapdp.errors import FieldRefused as FieldRefused
from overlapdp.errors import (
    NeedsTrial,
    OverlapDPError,
    QueryError,
    QueryTooComplexError,
)
from overlapdp.errors import NotFound as NotFound
from overlapdp.errors import QuotaExceeded as QuotaExceeded
from overlapdp.errors import ServiceError as ServiceError
from overlapdp.errors import TimeBudgetExceeded as TimeBudgetExceeded
from overlapdp.errors import TooLarge as TooLarge
from overlapdp.errors import Unavailable as Unavailable
from overlapdp.mechanisms.calibration import laplace_scale
from overlapdp.mechanisms.consistency import NOTE, workload_design
from overlapdp.query import PredicateQuery, QueryFamily, parse_line, parse_query
from overlapdp.query.aggregate import COUNT, Aggregate
from overlapdp.service import _heap, definitions, filters, logged_filter, sessions
from overlapdp.service._dryrun import DryRunPool
from overlapdp.service._projection import ProjectionJob, ProjectionPool
from overlapdp.service.auth import AuthError, TokenCache, hash_token, new_token, same_hash
from overlapdp.service.datasets import LoadedDataset, check_engine, load_dataset
from overlapdp.service.ledger import (
    AdmissionTransaction,
    AnalystRecord,
    ChargeRecord,
    DatasetRecord,
    LedgerError,
    LedgerStore,
    NewCharge,
    SessionRecord,
)
from overlapdp.service.ledger.base import LoadRow, dumps
from overlapdp.service.responses import (
    AdminDatasetInfo,
    AnalystCreated,
    AnalystInfo,
    Answer,
    BatchAnswer,
    BatchCost,
    ConsistentCounts,
    Cost,
    CostEstimate,
    DatasetInfo,
    DatasetStatus,
    EpsilonDelta,
    Guarantee,
    LedgerEntry,
    NewToken,
    QuotaInfo,
    SessionAnswer,
    SessionInfo,
    SessionOpened,
    SessionStep,
)
from overlapdp.validation import check_finite, check_int, check_positive

log = logging.getLogger("overlapdp.service")


@dataclass(frozen=True)
class Limits:
    """Size limits on requests (bytes of a body, queries in a batch, characters of one condition)."""

    max_body_bytes: int = 1_000_000
    max_batch: int = 1_000
    max_query_chars: int = 10_000
    max_ledger_page: int = 10_000
    #: Engines opened per data set (counts run in parallel on them).
    engine_pool: int = 2
    #: Each request's time budget in seconds, from its arrival (the first byte of its request line when
    #: served: :mod:`overlapdp.service.serving`): a request whose body, parsing, counting, admission
    #: (or dry run) is not done by then gets 503 (:class:`TimeBudgetExceeded`), nothing charged.
    #: Checked while the body is read, between the queries being parsed, between the charges of a
    #: batch and inside each overlap search (its effort limit is the time left).
    request_seconds: float = 10.0
    #: Requests one analyst may have in progress at once (over every endpoint); one more gets 429
    #: with ``Retry-After`` before its body is read (:class:`overlapdp.service.app.AnalystGate`).
    analyst_requests: int = 2
    #: Requests of at least this many queries (every request by default: a single query too, and a
    #: session's opening) never search under the admission lock: they are tried against a snapshot off
    #: it when the filters' bounds alone cannot admit them. Smaller ones are decided under the lock.
    snapshot_min: int = 1
    #: Such batches of at most this many queries are first tried under the lock on the filters' lazy
    #: bounds alone (no search, about 0.1 ms per query and filter; most batches far from the budget end
    #: there, with no replica to bring up to date); larger ones go off the lock at once.
    bounds_max: int = 200
    #: Worker processes that answer ``/cost`` dry runs and parse and try large ``/batch`` requests
    #: (:mod:`overlapdp.service._dryrun`, ``worker_batch_min``), started with the service; 0: in the
    #: server's process (the library default; ``overlapdp serve`` uses 2). Needs
    #: a ledger the workers can open by its URL (SQLite file, PostgreSQL).
    cost_workers: int = 0
    #: With those workers, a ``/batch`` of at least this many queries is parsed and tried there too
    #: (:meth:`QueryService.worker_batch`); the server checks the worker's verdicts against its filters
    #: (DESIGN.md, "Admission in worker processes") and counts, draws the noise and commits.
    worker_batch_min: int = 100
    #: Worker processes that compute consistent answers (:mod:`overlapdp.service._projection`), started
    #: when the first is needed; a consistent batch waits (within its time budget) for a free one.
    projection_workers: int = 2


# -- requests waiting for admission -------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    """A batch's queries (GROUP BYs expanded), the position of the spec each comes from, a cell's group
    labels, each query's aggregate, the request's hash, the queries as recorded, and each one's load."""

    queries: list[PredicateQuery]
    items: list[int]
    groups: list[dict[str, Any] | None]
    aggregates: list[Aggregate]
    request_hash: str
    query_json: list[dict[str, Any] | None]
    load: float


#: (the analyst's filter, its snapshot), (the global filter, its snapshot)
_Snapshots = tuple[
    tuple[filters.ServiceFilter, filters.FilterSnapshot], tuple[filters.ServiceFilter, filters.FilterSnapshot]
]

#: What an admitted request returns.
Result = BatchAnswer | CostEstimate | SessionOpened | SessionStep
R = TypeVar("R", BatchAnswer, CostEstimate, SessionOpened, SessionStep)


@dataclass
class _Pending:
    analyst: str
    kind: str  # "query", "dry-run", "session", "session-query"
    request_key: str | None
    request_hash: str
    queries: list[PredicateQuery | None] = field(default_factory=list)
    query_json: list[dict[str, Any] | None] = field(default_factory=list)
    true_counts: list[int] = field(default_factory=list)
    #: The released answers, drawn before the request joins a group (discarded if it is refused).
    noisy: list[dict[str, Any]] = field(default_factory=list)
    mechanism: definitions.ServedMechanism | None = None
    loads: list[float] = field(default_factory=list)
    session_id: str | None = None
    session_kind: str | None = None
    session_params: dict[str, Any] = field(default_factory=dict)
    session_state: dict[str, Any] = field(default_factory=dict)
    step_arg: float = 0.0
    #: When the request's time budget runs out (``time.monotonic()``).
    deadline: float | None = None
    #: A large batch parsed and tried in a worker process: the job (sent again to decide it again).
    worker_job: dict[str, Any] | None = None
    #: Per filter (0: the analyst's, 1: the global one), the request tried off the lock against a
    #: snapshot of it, settled under the lock by :func:`_decide`; None while it has none.
    trials: list[filters.Trial | None] = field(default_factory=lambda: [None, None])
    #: The filters whose decision needs a trial off the lock (or its trial brought up to date) before
    #: the request comes back under the lock (:class:`NeedsTrial`).
    needs: set[int] = field(default_factory=set)
    #: A request first tried on the filters' bounds alone under the lock (:func:`_decide`), tried off
    #: the lock (``trials``) only on the filters whose bounds cannot admit it.
    on_bounds: bool = False
    #: A consistent batch: the cells of its workload, and its projection running in a worker (none
    #: for a request already recorded under its idempotency key: the replay has the recorded one).
    cells: int = 0
    projection: ProjectionJob | None = None
    #: Approximate DP: (the analyst's filter, its snapshot after the admission, the quota), for the
    #: answer's figures computed off the lock.
    account: tuple[filters.ServiceFilter, filters.FilterSnapshot, float] | None = None
    done: bool = False
    result: Result | None = None
    error: BaseException | None = None


class _DatasetState:
    """In-memory filters of one data set, caught up with the ledger up to ``last_seq``."""

    def __init__(self, loaded: LoadedDataset | None, record: DatasetRecord) -> None:
        self.loaded = loaded
        self.record = record
        self.admit_lock = threading.Lock()
        self.queue_lock = threading.Lock()
        self.queue: list[_Pending] = []
        # Parsed queries by their request text (parsing SQL costs more than counting a small table).
        self.request_cache: dict[str, PredicateQuery] = {}
        from overlapdp.schema import Schema

        self._schema = loaded.schema if loaded is not None else Schema.from_json(record.schema)
        # Filters touched by the group being admitted, with their savepoints (see :meth:`touch`).
        self._group: dict[int, tuple[filters.ServiceFilter, logged_filter.Savepoint]] = {}
        self.reset()

    def reset(self) -> None:
        """Empty filters (then :meth:`apply` replays the ledger); only when the definition changes."""
        schema = self.schema
        self.last_seq = 0
        #: The record's definition and parameters the filters were built for (a change means a reset).
        self.built_for = (self.record.definition, self.record.params)
        self.params = definitions.check_params(self.record.definition, self.record.params)
        self.global_filter = filters.ServiceFilter(
            schema, self.record.definition, self.record.budget, self.params
        )
        self.analyst_filters: dict[str, filters.ServiceFilter] = {}
        self._parsed: dict[str, PredicateQuery] = {}

    @property
    def schema(self) -> Any:
        return self._schema

    def touch(self, f: filters.ServiceFilter) -> None:
        """Open a savepoint on ``f`` for the group being admitted (once per filter and group)."""
        if id(f) not in self._group:
            self._group[id(f)] = (f, f.savepoint())

    def end_group(self, *, committed: bool) -> None:
        """Keep (committed) or undo (the commit failed) everything the group added to the filters."""
        group, self._group = self._group, {}
        for f, sp in reversed(list(group.values())):
            if committed:
                f.release(sp)
            else:
                f.rollback(sp)
            f.recycle()  # filters replaced by adopted replicas: no savepoint of the group is left

    def analyst_filter(self, analyst: str, quota: float = 0.0) -> filters.ServiceFilter:
        f = self.analyst_filters.get(analyst)
        if f is None:
            f = filters.ServiceFilter(self.schema, self.record.definition, quota, self.params)
            self.analyst_filters[analyst] = f
        return f

    def parse_recorded(self, text: str | None) -> PredicateQuery | None:
        """A recorded query (its canonical JSON text); None for a charge on the whole domain."""
        if text is None:
            return None
        q = self._parsed.get(text)
        if q is None:
            q = parse_query(self.schema, json.loads(text))
            if len(self._parsed) < 100_000:
                self._parsed[text] = q
        return q

    def apply(self, rows: Sequence[LoadRow]) -> None:
        """Add committed ledger rows to the filters (start-up and catch-up with other instances).

        Each charge is recorded with its exact recorded load and never refused, so the filters hold
        exactly what the live instance that admitted them held (the same exact per-row sums). Charges
        with the same coverage and the same load are recorded together (one index entry, the exact
        multiple of the load), which keeps the index small for a long ledger.
        """
        per_query: dict[tuple[str | None, float], int] = {}
        per_analyst: dict[tuple[str, str | None, float], int] = {}
        for seq, analyst, query, load in rows:
            if load > 0:
                per_query[query, load] = per_query.get((query, load), 0) + 1
                per_analyst[analyst, query, load] = per_analyst.get((analyst, query, load), 0) + 1
            self.last_seq = max(self.last_seq, seq)
        self.global_filter.record_many(
            [(self.parse_recorded(q), load, k) for (q, load), k in per_query.items()]
        )
        per_filter: dict[str, list[tuple[PredicateQuery | None, float, int]]] = {}
        for (analyst, query, load), k in per_analyst.items():
            per_filter.setdefault(analyst, []).append((self.parse_recorded(query), load, k))
        for analyst, charges in per_filter.items():
            self.analyst_filter(analyst).record_many(charges)


# -- the service ------------------------------------------------------------------------------------


class QueryService:
    """Data sets, analysts and admission over one ledger store."""

    def __init__(self, store: LedgerStore, *, limits: Limits | None = None) -> None:
        self.store = store
        self.limits = limits or Limits()
        self._states: dict[str, _DatasetState] = {}
        self._states_lock = threading.Lock()
        self._tokens = TokenCache()
        #: Consistent answers are projected in these worker processes (none runs until one is asked).
        self.projections = ProjectionPool(self.limits.projection_workers)
        # A service dropped without close() stops its workers too (they also exit with the process).
        weakref.finalize(self, self.projections.close)
        for record in store.list_datasets():
            self._install(record)
        #: ``/cost`` dry runs in worker processes (None: in this process).
        self.dry_runs: DryRunPool | None = None
        url = getattr(store, "url", None)
        if self.limits.cost_workers > 0 and isinstance(url, str):
            self.dry_runs = DryRunPool(url, self.limits.cost_workers, self.limits)
            weakref.finalize(self, self.dry_runs.close)
            self.dry_runs.start()

    def close(self) -> None:
        """Stop the worker processes and close the ledger."""
        self.projections.close()
        if self.dry_runs is not None:
            self.dry_runs.close()
        self.store.close()

    # -- data sets --------------------------------------------------------------------------------
    def _install(self, record: DatasetRecord, loaded: LoadedDataset | None = None) -> _DatasetState:
        if loaded is None:
            try:
                loaded = load_dataset(
                    record.name, record.path, record.schema, record.engine, pool=self.limits.engine_pool
                )
            except OverlapDPError:
                loaded = None  # registered, but this instance cannot read the rows: queries get 409
        state = _DatasetState(loaded, record)
        with state.admit_lock:
            state.apply(self.store.loads_since(record.name, 0))
        with self._states_lock:
            self._states[record.name] = state
        return state

    def _state(self, name: str) -> _DatasetState:
        with self._states_lock:
            state = self._states.get(name)
        if state is None:
            record = self.store.get_dataset(name)
            if record is None:
                raise NotFound(f"unknown data set {name!r}")
            state = self._install(record)
        return state

    def register_dataset(
        self,
        name: str,
        path: str,
        schema: Any,
        engine: str,
        definition: str,
        budget: float,
        params: Mapping[str, Any] | None = None,
    ) -> AdminDatasetInfo:
        """Register a data set served under ``definition`` (:data:`definitions.SERVED`) with a global
        ``budget`` in its amount and its fixed ``params`` (:func:`definitions.check_params`)."""
        _check_name("data set name", name)
        clean = definitions.check_params(definition, params)
        budget = definitions.check_amount("budget", budget)
        check_engine(engine)
        loaded = load_dataset(name, path, schema, engine, pool=self.limits.engine_pool)
        record = DatasetRecord(
            name, str(path), loaded.schema.to_json(), engine, definition, budget, time.time(), clean
        )
        try:
            self.store.put_dataset(record)
        except BaseException:
            loaded.close()
            raise
        state = self._install(record, loaded)
        return self._admin_info(state)

    def refresh_dataset(self, name: str) -> None:
        """Read the data set's record again (budget, definition) as an admission does: for an instance
        that only answers dry runs (:mod:`overlapdp.service._dryrun_worker`), so another instance's
        change is seen; a changed definition replays the ledger."""
        state = self._state(name)
        record = self.store.get_dataset(name)
        if record is None:
            raise NotFound(f"unknown data set {name!r}")
        with state.admit_lock:
            changed = (record.definition, record.params) != state.built_for
            state.record = record
            if changed:
                state.reset()
                state.apply(self.store.loads_since(name, 0))
            state.global_filter.budget = record.budget

    def set_budget(
        self, name: str, definition: str, budget: float, params: Mapping[str, Any] | None = None
    ) -> AdminDatasetInfo:
        """Change the global budget; the definition or its parameters (``params``: None keeps them under
        the same definition) only while the data set has no charges (the ledger refuses otherwise)."""
        definitions.served(definition)
        budget = definitions.check_amount("budget", budget)
        state = self._state(name)
        if params is None and definition == state.record.definition:
            clean = state.record.params
        else:
            clean = definitions.check_params(definition, params)
        try:
            self.store.set_budget(name, definition, budget, clean)
        except LedgerError as exc:
            raise Conflict(str(exc)) from None
        record = self.store.get_dataset(name)
        assert record is not None
        with state.admit_lock:
            changed = (record.definition, record.params) != state.built_for
            state.record = record
            if changed:
                state.reset()
                state.apply(self.store.loads_since(name, 0))
            state.global_filter.budget = record.budget
        return self._admin_info(state)

    @staticmethod
    def _public_fields(state: _DatasetState) -> dict[str, Any]:
        rec = state.record
        return {
            "name": rec.name,
            "definition": rec.definition,
            "parameter": definitions.served(rec.definition).amount,
            "parameters": dict(state.params),
            "schema": rec.schema,
            "available": state.loaded is not None,
        }

    @classmethod
    def _admin_fields(cls, state: _DatasetState) -> dict[str, Any]:
        rec = state.record
        return {
            **cls._public_fields(state),
            "path": rec.path,
            "engine": rec.engine,
            "budget": rec.budget,
            "budget_epsilon_delta": EpsilonDelta(
                **definitions.epsilon_delta(rec.definition, state.params, rec.budget)
            ),
            "rows": _rows(state),
        }

    def _admin_info(self, state: _DatasetState) -> AdminDatasetInfo:
        return AdminDatasetInfo(**self._admin_fields(state))

    def list_datasets(self) -> list[AdminDatasetInfo]:
        """Every registered data set, as the custodian sees it."""
        return [self._admin_info(self._state(r.name)) for r in self.store.list_datasets()]

    def datasets_for(self, analyst: AnalystRecord) -> list[DatasetInfo]:
        """The data sets ``analyst`` has a quota on, without where their rows live."""
        return [
            DatasetInfo(**self._public_fields(self._state(r.name)))
            for r in self.store.list_datasets()
            if r.name in analyst.quotas
        ]

    def dataset_for(self, analyst: AnalystRecord, name: str) -> DatasetInfo:
        if name not in analyst.quotas:
            raise NotFound(f"unknown data set {name!r}")
        return DatasetInfo(**self._public_fields(self._state(name)))

    def dataset_status(self, name: str) -> DatasetStatus:
        """Global spend and the guarantee over all analysts (concurrent composition, MATH.md 3.7)."""
        state = self._state(name)
        self._catch_up(state)
        with state.admit_lock:
            # the exact spends are computed off the lock on snapshots (an overlap search each)
            rec = state.record
            snaps = {a: (f, f.snapshot()) for a, f in state.analyst_filters.items()}
            glob = state.global_filter
            gsnap = glob.snapshot()
            admin = self._admin_fields(state)
            seq = state.last_seq
        per_analyst = {a: f.account(s, f.budget)[0] for a, (f, s) in snaps.items()}
        spent, left = glob.account(gsnap, rec.budget)
        guarantee = definitions.global_guarantee(
            rec.definition, list(per_analyst.values()), spent, state.params
        )
        return DatasetStatus(
            **admin,
            spent=spent,
            spent_epsilon_delta=EpsilonDelta(
                **definitions.epsilon_delta(rec.definition, state.params, spent)
            ),
            remaining=left,
            spent_by_analyst=per_analyst,
            guarantee=Guarantee(**guarantee),
            ledger_seq=seq,
        )

    def _catch_up(self, state: _DatasetState) -> None:
        """Bring the filters up to the ledger's committed rows."""
        with state.admit_lock:
            state.apply(self.store.loads_since(state.record.name, state.last_seq))

    # -- analysts ---------------------------------------------------------------------------------
    def create_analyst(self, name: str, quotas: Mapping[str, float]) -> AnalystCreated:
        _check_name("analyst name", name)
        clean = self._check_quotas(quotas)
        token = new_token()
        self.store.put_analyst(AnalystRecord(name, hash_token(token), clean, False, time.time()))
        return AnalystCreated(name=name, token=token, quotas=clean)

    def _check_quotas(self, quotas: Mapping[str, float]) -> dict[str, float]:
        clean: dict[str, float] = {}
        for ds, amount in quotas.items():
            if self.store.get_dataset(ds) is None:
                raise NotFound(f"unknown data set {ds!r}")
            clean[ds] = definitions.check_amount(f"quota for {ds!r}", amount)
        return clean

    def set_quota(self, analyst: str, dataset: str, quota: float) -> AnalystInfo:
        self._check_quotas({dataset: quota})
        try:
            self.store.set_quota(analyst, dataset, float(quota))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)
        return self.analyst_info(self._analyst(analyst))

    def revoke(self, analyst: str) -> None:
        try:
            self.store.revoke(analyst)
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)

    def rotate_token(self, analyst: str) -> NewToken:
        token = new_token()
        try:
            self.store.rotate_token(analyst, hash_token(token))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)
        return NewToken(name=analyst, token=token)

    def _analyst(self, name: str) -> AnalystRecord:
        rec = self.store.get_analyst(name)
        if rec is None:
            raise NotFound(f"unknown analyst {name!r}")
        return rec

    def list_analysts(self) -> list[AnalystInfo]:
        return [self.analyst_info(a) for a in self.store.list_analysts()]

    def authenticate(self, token: str | None) -> AnalystRecord:
        """The analyst holding ``token``; :class:`AuthError` for a missing, wrong or revoked one."""
        if not token or len(token) > 200:
            raise AuthError("a valid analyst token is required")
        token_hash = hash_token(token)
        rec = self._tokens.get(token_hash)
        if rec is None:
            rec = self.store.analyst_by_token_hash(token_hash)
            if rec is None or rec.revoked or not same_hash(rec.token_hash, token_hash):
                raise AuthError("a valid analyst token is required")
            self._tokens.put(token_hash, rec)
        return rec

    def analyst_info(self, analyst: AnalystRecord) -> AnalystInfo:
        """Quotas, spend and remaining budget per data set (overlap-aware: spend is the worst row's load)."""
        per: dict[str, QuotaInfo] = {}
        for ds, quota in sorted(analyst.quotas.items()):
            state = self._state(ds)
            self._catch_up(state)
            with state.admit_lock:
                f = state.analyst_filters.get(analyst.name)
                snap = f.snapshot() if f is not None else None
            defn, params = state.record.definition, state.params
            if f is not None and snap is not None:
                spent, left = f.account(snap, quota)  # off the lock
            else:
                spent, left = 0.0, definitions.remaining(defn, quota, 0.0, params)
            per[ds] = QuotaInfo(
                definition=defn,  # type: ignore[arg-type]  # checked at registration
                quota=quota,
                spent=spent,
                remaining=left,
                spent_epsilon_delta=EpsilonDelta(**definitions.epsilon_delta(defn, params, spent)),
                quota_epsilon_delta=EpsilonDelta(**definitions.epsilon_delta(defn, params, quota)),
            )
        return AnalystInfo(name=analyst.name, revoked=analyst.revoked, datasets=per)

    # -- ledger -----------------------------------------------------------------------------------
    def ledger(
        self, *, dataset: str | None = None, analyst: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[LedgerEntry]:
        limit = max(1, min(int(limit), self.limits.max_ledger_page))
        rows = self.store.charges(dataset=dataset, analyst=analyst, after=max(0, int(after)), limit=limit)
        return [LedgerEntry(**r.to_json()) for r in rows]

    # -- queries ----------------------------------------------------------------------------------
    def _parse(
        self, state: _DatasetState, specs: Sequence[Any], deadline: float | None = None
    ) -> list[PredicateQuery]:
        """One query per spec (a session step); a GROUP BY is refused here."""
        queries, _, groups, aggregates = self._expand(state, specs, deadline)
        if any(g is not None for g in groups):
            raise QueryError("a GROUP BY is answered by .../query or .../batch, not by a session")
        if any(a.clipping is not None for a in aggregates):
            raise QueryError("a sum or mean is answered by .../query or .../batch, not by a session")
        return queries

    def _expand(
        self, state: _DatasetState, specs: Sequence[Any], deadline: float | None = None
    ) -> tuple[list[PredicateQuery], list[int], list[dict[str, Any] | None], list[Aggregate]]:
        """The queries of a request, each GROUP BY expanded into its cells in place, with the position of
        the spec each query comes from, for a cell its group labels, and each query's aggregate (a count,
        or a sum or mean with the clipping bounds given in the request: :func:`parse_line`, as for a
        workload line). The cells of all GROUP BYs count toward ``max_batch`` (refused before a family
        is expanded). Parsing counts against the request's time budget (``deadline``): checked before
        each query."""
        if len(specs) > self.limits.max_batch:
            raise TooLarge(f"a batch may hold at most {self.limits.max_batch} queries, got {len(specs)}")
        if not specs:
            raise QueryError("a batch needs at least one query")
        out: list[PredicateQuery] = []
        items: list[int] = []
        groups: list[dict[str, Any] | None] = []
        aggregates: list[Aggregate] = []
        for i, spec in enumerate(specs):
            _check_time(deadline)
            try:
                key = dumps(spec)
            except ValueError:  # NaN or infinity somewhere in the query
                raise QueryError(f"query #{i} holds a number that is not finite") from None
            if len(key) > self.limits.max_query_chars:
                raise TooLarge(f"query #{i} is longer than {self.limits.max_query_chars} characters")
            # Every other spec still needs a place in the batch; a family may fill the rest.
            room = self.limits.max_batch - len(out) - (len(specs) - i - 1)
            parsed: PredicateQuery | QueryFamily | None = state.request_cache.get(key)
            agg = COUNT  # only counts are cached
            if parsed is None:
                try:
                    parsed, agg = parse_line(state.schema, spec, max_cells=max(room, 0))
                except RecursionError:  # a condition nested deeper than the parser can follow
                    raise QueryError(f"query #{i} is nested too deeply") from None
                except QueryTooComplexError as exc:
                    if exc.limit != "cells":
                        raise
                    raise TooLarge(
                        f"query #{i}: {exc}: a request may hold at most {self.limits.max_batch} queries, "
                        "each cell of a GROUP BY counting as one"
                    ) from None
                # Families are not kept: up to max_batch cells each, 10 000 of them would hold
                # millions of queries in memory (expanding again is cheap next to counting).
                if isinstance(parsed, PredicateQuery) and agg == COUNT:
                    if len(state.request_cache) >= 10_000:
                        state.request_cache.clear()
                    state.request_cache[key] = parsed
            if isinstance(parsed, QueryFamily):
                for cell, labels in zip(parsed.cells, parsed.groups, strict=True):
                    suffix = "" if cell.id is None else cell.id[len(parsed.id or "") :]
                    out.append(cell.with_id(f"{i}{suffix}"))
                    items.append(i)
                    groups.append(dict(labels))
                    aggregates.append(agg)
            else:
                out.append(parsed.with_id(str(i)))
                items.append(i)
                groups.append(None)
                aggregates.append(agg)
        return out, items, groups, aggregates

    def _mechanism(
        self, state: _DatasetState, parameter: float | None, given: str | None
    ) -> definitions.ServedMechanism:
        name = definitions.served(state.record.definition).amount
        if parameter is None or (given is not None and given != name):
            raise QueryError(
                f"data set {state.record.name!r} is served under {state.record.definition!r}: give {name!r}"
            )
        return definitions.mechanism_for(state.record.definition, parameter, state.params)

    def _loaded(self, state: _DatasetState) -> LoadedDataset:
        if state.loaded is None:
            raise Unavailable(
                f"the rows of data set {state.record.name!r} cannot be read by this service instance"
            )
        return state.loaded

    def query(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None = None,
        *,
        request_key: str | None = None,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> BatchAnswer:
        """Answer a batch of counting queries (each with the same per-query parameter) atomically.

        ``consistent``: also the counts projected onto a non-negative table's answers
        (:mod:`overlapdp.mechanisms.consistency`, post-processing of the noisy counts). The workload's cells are
        enumerated before anything is counted, so a workload over :data:`CONSISTENT_CELL_LIMIT` is
        refused (400) without spending. The projection runs in a worker process
        (:mod:`overlapdp.service._projection`) BEFORE admission, within the request's time budget:
        one that cannot finish in time is a 503 with nothing charged, one that finishes is recorded
        with the charges, so an idempotent replay returns it without computing it again.

        ``deadline`` (a :func:`time.monotonic` time): when the request's time budget runs out, counted
        from its arrival (the HTTP layer gives it); by default ``Limits.request_seconds`` from now.
        """
        state, pending = self._query(
            analyst,
            dataset,
            specs,
            parameter,
            parameter_name,
            request_key,
            consistent=consistent,
            deadline=deadline,
        )
        job = pending.projection
        try:
            if job is not None:
                projected = job.result()  # off every lock; 503 past the deadline, nothing charged
                for answer, value in zip(pending.noisy, projected.counts, strict=True):
                    # recorded with the charge (the ledger's answer), never released before its commit
                    answer["consistent"] = {
                        "count": value,
                        "cells": pending.cells,
                        "solver": projected.solver,
                    }
            return self._submit(state, pending, BatchAnswer)
        finally:
            if job is not None:
                job.cancel()  # the request failed before its projection came: its worker is freed

    def cost(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None = None,
        *,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> CostEstimate:
        """A dry run of :meth:`query`: its cost and whether both budgets would admit it now (nothing spent);
        with ``consistent``, also whether consistent answers could be computed (400 if not). With
        ``Limits.cost_workers``, it runs in a worker process (:mod:`overlapdp.service._dryrun`)."""
        if self.dry_runs is not None:
            deadline = self._deadline(deadline)
            job = {
                "analyst": analyst.name,
                "dataset": dataset,
                "specs": list(specs),
                "parameter": parameter,
                "parameter_name": parameter_name,
                "consistent": consistent,
            }
            return CostEstimate.model_validate(self.dry_runs.run(job, deadline))
        state, pending = self._query(
            analyst,
            dataset,
            specs,
            parameter,
            parameter_name,
            None,
            dry_run=True,
            consistent=consistent,
            deadline=deadline,
        )
        return self._dry_run(state, pending)

    def plan(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        *,
        budget: float | None = None,
        target_error: int | None = None,
        allocation: str = "optimal",
        objective: str = "variance",
        level: float = 0.95,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """A release planned before any data is read (:func:`overlapdp.mechanisms.planning.plan_release`,
        MATH.md 2.10): each query's share of a total ``budget`` (in the data set's amount), its noise and
        error bar, and the total noise under every accounting; or, with ``target_error``, the smallest
        budget answering every query within it (:func:`~overlapdp.mechanisms.planning.budget_for_error`).
        Reads no data and spends nothing; under add/remove neighbours, as the service's guarantees. The
        search's effort is the time left of the request (a safe plan either way). With
        ``Limits.cost_workers`` it runs in a worker process, as a dry run does."""
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        if self.dry_runs is not None:
            deadline = self._deadline(deadline)
            job = {
                "kind": "plan",
                "analyst": analyst.name,
                "dataset": dataset,
                "specs": list(specs),
                "budget": budget,
                "target_error": target_error,
                "allocation": allocation,
                "objective": objective,
                "level": level,
            }
            return self.dry_runs.run(job, deadline)
        deadline = self._deadline(deadline)
        state = self._state(dataset)
        from overlapdp.mechanisms.planning import budget_for_error, plan_release
        from overlapdp.privacy.measures import MEASURES, measure_named

        definition = state.record.definition
        if not measure_named(definition).counts:  # pure, zcdp, gdp: a count's noise is calibrated to them
            counted = ", ".join(m.name for m in MEASURES if m.counts)
            raise QueryError(f"a plan is made for {counted} data sets; {dataset!r} is {definition}")
        queries, _, _, _ = self._expand(state, specs, deadline)
        _check_time(deadline)
        effort = max(0.05, 0.8 * (deadline - _now()))
        if (budget is None) == (target_error is None):
            raise QueryError("give either 'budget' or 'target_error', not both and not neither")
        if target_error is not None:
            total, share, gamma = budget_for_error(
                queries, target_error, definition, level=level, effort=effort
            )
            return {
                "definition": definition,
                "target_error": target_error,
                "level": level,
                "budget": total,
                "per_query": share,
                "gamma": gamma,
            }
        assert budget is not None
        rp = plan_release(
            queries,
            budget,
            definition,
            allocation=cast(Any, allocation),
            objective=cast(Any, objective),
            level=level,
            effort=effort,
        )
        return rp.to_json()

    def _query(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        request_key: str | None,
        *,
        dry_run: bool = False,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> tuple[_DatasetState, _Pending]:
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        loaded = self._loaded(state)
        job = None
        if not dry_run and self.dry_runs is not None and len(specs) >= self.limits.worker_batch_min:
            # parsed and tried in a worker process (nothing of it holds this process's interpreter
            # lock); what comes back is checked against the filters here (_from_worker)
            job = self._batch_job(analyst.name, dataset, specs, parameter, parameter_name, consistent)
            reply = self.dry_runs.run(job, deadline)
            prepared: _Prepared = reply["prepared"]
        else:
            prepared = self._prepare(state, specs, parameter, parameter_name, consistent, deadline)
        queries, items, groups, aggregates = (
            prepared.queries,
            prepared.items,
            prepared.groups,
            prepared.aggregates,
        )
        mech = self._mechanism(state, parameter, parameter_name)
        design = None
        if consistent:
            # numpy's enumeration releases the interpreter lock (_prepare checked the workload)
            design = workload_design(queries, limit=CONSISTENT_CELL_LIMIT)
        _check_time(deadline)
        pending = _Pending(
            analyst=analyst.name,
            kind="dry-run" if dry_run else "query",
            request_key=_check_key(request_key),
            request_hash=prepared.request_hash,
            queries=list(queries),
            query_json=prepared.query_json,
            mechanism=mech,
            loads=[prepared.load] * len(queries),
            deadline=deadline,
            worker_job=job,
        )
        if not dry_run:
            # The exact counts and the noise never depend on the ledger: both are ready before the
            # request joins a group, so a failure here concerns this request alone.
            pending.true_counts = loaded.counts(queries)
            if any(a.clipping is not None for a in aggregates):
                sums = loaded.sums(queries, aggregates)
                pending.noisy = definitions.noisy_aggregates(pending.true_counts, sums, aggregates, mech)
            else:
                pending.noisy = definitions.noisy_counts(pending.true_counts, mech)
            _check_time(deadline)  # counted: nothing more is spent on a request out of time
            for answer, i, g in zip(pending.noisy, items, groups, strict=True):
                if g is not None:  # recorded with the answer, so a replay returns the labels too
                    answer["group"] = g
                    answer["item"] = i
            if design is not None and not (
                pending.request_key is not None and self.store.is_recorded(analyst.name, pending.request_key)
            ):
                # Started now, it runs in its worker while the trials below search (on two cores, in
                # parallel); query() waits for it before admission.
                pending.cells = design.cells
                pending.projection = self.projections.start(
                    design.matrix,
                    [float(a["count"]) for a in pending.noisy],
                    [float(a["stddev"]) ** 2 for a in pending.noisy],
                    deadline,
                )
            try:
                if job is not None:
                    self._from_worker(state, pending, reply)
                elif len(queries) > self.limits.bounds_max and len(queries) >= self.limits.snapshot_min:
                    pending.needs = {0, 1}
                    self._advance(state, pending)
                elif len(queries) >= self.limits.snapshot_min:
                    pending.on_bounds = True
            except BaseException:
                if pending.projection is not None:
                    pending.projection.cancel()
                raise
        return state, pending

    def _prepare(
        self,
        state: _DatasetState,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        consistent: bool,
        deadline: float | None,
    ) -> _Prepared:
        """A batch's queries parsed (:meth:`_expand`), with what is recorded of them (their hash and
        JSON) and each one's load: the part of a request that depends on its text alone (it runs in a
        worker process for a large batch, :meth:`_batch_job`)."""
        queries, items, groups, aggregates = self._expand(state, specs, deadline)
        mech = self._mechanism(state, parameter, parameter_name)
        if consistent:
            # Refused before anything is counted or charged: the projection is defined for counts only,
            # and a workload with too many cells is a 400 (numpy's enumeration releases the lock).
            if any(a.clipping is not None for a in aggregates):
                raise QueryError("'consistent' applies to counts only, not to sums or means")
            workload_design(queries, limit=CONSISTENT_CELL_LIMIT)
        _check_time(deadline)
        request_hash = _fingerprint(
            "query",
            state.record.name,
            # a sum's aggregate is part of what was asked (a count's hash is unchanged)
            [
                q.to_json() if a == COUNT else {**q.to_json(), **a.to_json()}
                for q, a in zip(queries, aggregates, strict=True)
            ],
            mech.parameter,
            # a consistent batch is another request (its answers carry the projection); a plain
            # batch's hash is unchanged
            *(["consistent"] if consistent else []),
        )
        query_json: list[dict[str, Any] | None] = [
            _recorded_query(specs[i] if g is None else q.describe(), q)
            for i, g, q in zip(items, groups, queries, strict=True)
        ]
        _check_time(deadline)
        return _Prepared(
            queries,
            items,
            groups,
            aggregates,
            request_hash,
            query_json,
            definitions.load_of(state.record.definition, mech.parameter),
        )

    @staticmethod
    def _batch_job(
        analyst: str,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        consistent: bool,
    ) -> dict[str, Any]:
        return {
            "kind": "batch",
            "analyst": analyst,
            "dataset": dataset,
            "specs": list(specs),
            "parameter": parameter,
            "parameter_name": parameter_name,
            "consistent": consistent,
        }

    def worker_batch(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        *,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """A worker process's part of a large batch (:mod:`overlapdp.service._dryrun_worker`): the batch
        prepared (:meth:`_prepare`), then tried on snapshots of both filters caught up with the ledger
        (each filter's EXACT decision on that state, :meth:`ServiceFilter.trial`, within the deadline),
        with the sequence number of the last ledger charge those filters hold, the definition they were
        built for, and per filter (the analyst's, the global one) ``(admitted, upper, budget)``."""
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        prepared = self._prepare(state, specs, parameter, parameter_name, consistent, deadline)
        pairs = list(zip(prepared.queries, [prepared.load] * len(prepared.queries), strict=True))
        _, snaps, seq, built_for = self._snapshots_at(state, analyst.name)
        verdicts = []
        for f, snap in snaps:
            trial = f.trial(snap, pairs, deadline)
            filters.ServiceFilter.finish(trial)
            verdicts.append((trial.admitted, trial.upper, snap.budget))
        return {"prepared": prepared, "seq": seq, "built_for": built_for, "verdicts": verdicts}

    def _from_worker(self, state: _DatasetState, p: _Pending, reply: Mapping[str, Any]) -> None:
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

    def _deadline(self, given: float | None) -> float:
        """The request's deadline: the one its arrival set (HTTP), else its budget from now."""
        return given if given is not None else _now() + self.limits.request_seconds

    def _snapshots(self, state: _DatasetState, analyst: str) -> tuple[float, _Snapshots]:
        """The analyst's quota, their filter and the global filter with a snapshot of each, caught up
        with the ledger (under the admission lock: copying, no search)."""
        quota, snaps, _, _ = self._snapshots_at(state, analyst)
        return quota, snaps

    def _snapshots_at(
        self, state: _DatasetState, analyst: str
    ) -> tuple[float, _Snapshots, int, tuple[str, Any]]:
        """:meth:`_snapshots`, with the sequence number of the last ledger charge the snapshots hold and
        the definition the filters were built for (read under the same lock: outside a group, the
        filters hold exactly the data set's committed charges up to that number)."""
        record = self.store.get_analyst(analyst)
        if record is None or record.revoked:
            raise AuthError("a valid analyst token is required")
        quota = record.quotas.get(state.record.name)
        if quota is None:
            raise NotFound(f"unknown data set {state.record.name!r}")
        with state.admit_lock:
            state.apply(self.store.loads_since(state.record.name, state.last_seq))
            mine = state.analyst_filter(analyst, quota)
            mine.budget = quota
            glob = state.global_filter
            snaps = ((mine, mine.snapshot()), (glob, glob.snapshot()))
            return quota, snaps, state.last_seq, state.built_for

    def _advance(self, state: _DatasetState, p: _Pending) -> None:
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

    def _advance_here(self, state: _DatasetState, p: _Pending) -> None:
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

    def open_session(
        self,
        analyst: AnalystRecord,
        dataset: str,
        kind: str,
        params: Mapping[str, Any],
        *,
        request_key: str | None = None,
        deadline: float | None = None,
    ) -> SessionOpened:
        """Open a sparse-vector or guess-and-check session; its whole budget is charged on every row now."""
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        loaded = self._loaded(state)
        if kind not in ("sparse_vector", "guess_and_check"):
            raise QueryError(f"unknown session kind {kind!r}; use 'sparse_vector' or 'guess_and_check'")
        clean = _session_params(kind, params)
        public, secret, epsilon = sessions.open_session(kind, clean, loaded.count)
        cost = definitions.pure_to_definition(state.record.definition, epsilon, state.params)
        pending = _Pending(
            analyst=analyst.name,
            kind="session",
            request_key=_check_key(request_key),
            request_hash=_fingerprint("session", dataset, kind, clean),
            queries=[None],
            query_json=[None],
            loads=[definitions.load_of(state.record.definition, cost)],
            session_id=uuid.uuid4().hex,
            session_kind=kind,
            session_params=public,
            session_state=secret,
            deadline=deadline,
            on_bounds=self.limits.snapshot_min <= 1,
        )
        return self._submit(state, pending, SessionOpened)

    def session_query(
        self,
        analyst: AnalystRecord,
        session_id: str,
        spec: Any,
        arg: float,
        *,
        request_key: str | None = None,
        arg_name: str | None = None,
        deadline: float | None = None,
    ) -> SessionStep:
        """One step of a session: ``arg`` is the threshold (sparse vector) or the guess (guess-and-check).

        ``arg_name``, when given (``"threshold"`` or ``"guess"``), must be the one the session's kind
        takes: a guess sent to a sparse vector is refused (:class:`FieldRefused`), not used as a threshold.
        """
        deadline = self._deadline(deadline)
        session = self.store.get_session(session_id)
        if session is None or session.analyst != analyst.name:
            raise NotFound("unknown session")
        expected = _STEP_ARGUMENT.get(session.kind)
        if arg_name is not None and arg_name != expected:
            raise FieldRefused(arg_name, f"a {session.kind} session takes '{expected}', not '{arg_name}'")
        arg = check_finite(arg, "the threshold or guess", error=QueryError)
        state = self._state(session.dataset)
        self._loaded(state)
        (query,) = self._parse(state, [spec], deadline)
        pending = _Pending(
            analyst=analyst.name,
            kind="session-query",
            request_key=_check_key(request_key),
            request_hash=_fingerprint("step", session_id, query.to_json(), arg),
            queries=[query],
            query_json=[_recorded_query(spec, query)],
            loads=[0.0],
            session_id=session_id,
            step_arg=float(arg),
            deadline=deadline,
        )
        return self._submit(state, pending, SessionStep)

    def session_info(self, analyst: AnalystRecord, session_id: str) -> SessionInfo:
        session = self.store.get_session(session_id)
        if session is None or session.analyst != analyst.name:
            raise NotFound("unknown session")
        return _session_json(session)

    # -- admission --------------------------------------------------------------------------------
    def _submit(self, state: _DatasetState, pending: _Pending, result: type[R]) -> R:
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
        state: _DatasetState,
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

    def _admit(self, state: _DatasetState, batch: list[_Pending]) -> None:
        """Admit ``batch`` in one ledger transaction; results are published only after the commit."""
        staged: list[tuple[_Pending, Result]] = []
        try:
            with self.store.admission(state.record.name) as tx:
                state.record = tx.dataset()
                if (state.record.definition, state.record.params) != state.built_for:
                    # Another instance changed the definition: replay the ledger (an admin action).
                    state.reset()
                    state.apply(tx.loads_since(0))
                state.global_filter.budget = state.record.budget
                state.apply(tx.loads_since(state.last_seq))  # committed: outside the group's savepoint
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
            state.end_group(committed=True)
            if new_seqs:
                state.last_seq = max(state.last_seq, *new_seqs)
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
        self, tx: AdmissionTransaction, state: _DatasetState, p: _Pending
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
        if p.kind == "session-query":
            return self._session_step(tx, state, p)
        pairs = list(zip(p.queries, p.loads, strict=True))
        definition = state.record.definition
        value = p.loads[0] if p.loads else 0.0
        cost = Cost.model_validate(
            {
                "definition": definition,
                "queries": len(p.queries),
                definitions.served(definition).amount: value,
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
        answers = []
        seqs = []
        now = time.time()
        for i, (qjson, answer) in enumerate(zip(p.query_json, p.noisy, strict=True)):
            row = tx.insert(
                NewCharge(
                    dataset=state.record.name,
                    analyst=p.analyst,
                    kind="query",
                    query=qjson,
                    mechanism=p.mechanism.to_json(),
                    cost={
                        "definition": definition,
                        definitions.served(definition).amount: p.loads[i],
                        "load": p.loads[i],
                    },
                    answer=answer,
                    request_key=p.request_key,
                    request_hash=p.request_hash,
                    position=i,
                    created_at=now,
                )
            )
            if row is None:
                raise Conflict("this idempotency key is being used by a concurrent request")
            answers.append(Answer(charge=row.id, seq=row.seq, **_released(answer)))
            seqs.append(row.seq)
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
        self, tx: AdmissionTransaction, state: _DatasetState, p: _Pending
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
        answer = _session_json(session)
        row = tx.insert(
            NewCharge(
                dataset=state.record.name,
                analyst=p.analyst,
                kind="session",
                session=p.session_id,
                query=None,
                mechanism={"name": p.session_kind, **p.session_params},
                cost={"definition": definition, definitions.served(definition).amount: load, "load": load},
                answer=answer.model_dump(mode="json"),
                request_key=p.request_key,
                request_hash=p.request_hash,
            )
        )
        if row is None:
            raise Conflict("this idempotency key is being used by a concurrent request")
        return SessionOpened(session=answer, charge=row.id, seq=row.seq, replayed=False), [row.seq]

    def _session_step(
        self, tx: AdmissionTransaction, state: _DatasetState, p: _Pending
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
        answer, new_state, closed = sessions.session_step(
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

    def _dry_run(self, state: _DatasetState, p: _Pending) -> CostEstimate:
        """What the batch would cost and whether both filters would admit it, as of a snapshot of both
        filters taken under the admission lock (the only work done under it); the spends and verdicts
        are computed off the lock on private replicas (:meth:`ServiceFilter.dry_run`), within the
        request's time budget: the verdicts exactly (or 503), the spends and the batch's own overlap
        cost exactly when their searches end within a share of it, else as safe upper bounds
        (``exact`` False). Nothing is added to any filter."""
        quota, ((mine, mine_snap), (glob, global_snap)) = self._snapshots(state, p.analyst)
        pairs = list(zip(p.queries, p.loads, strict=True))
        mine_run = mine.dry_run(mine_snap, pairs, p.deadline)
        trial = glob.trial(global_snap, pairs, p.deadline, bound=False)
        filters.ServiceFilter.finish(trial)
        definition = state.record.definition
        batch = filters.batch_cost(state.schema, pairs, definition, p.deadline)
        batch_exact = batch.pop("exact")
        logged_filter.check_deadline(p.deadline)
        value = p.loads[0] if p.loads else 0.0
        cost = Cost.model_validate(
            {
                "definition": definition,
                "queries": len(p.queries),
                definitions.served(definition).amount: value,
            }
        )
        after = mine_run.after
        return CostEstimate(
            cost=cost.model_copy(update={"batch": BatchCost(**batch)}),
            spent_after=after,
            spent_after_epsilon_delta=EpsilonDelta(
                **definitions.epsilon_delta(definition, state.params, after)
            ),
            admissible=mine_run.admitted and trial.admitted,
            quota_admits=mine_run.admitted,
            global_admits=trial.admitted,
            remaining=definitions.remaining(definition, quota, mine_run.before, state.params),
            exact=mine_run.exact and batch_exact,
        )

    @staticmethod
    def _replay(p: _Pending, recorded: list[ChargeRecord]) -> Result:
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


# -- helpers ----------------------------------------------------------------------------------------


#: The clock of the request deadlines (``time.monotonic``, as :func:`logged_filter.check_deadline`'s); tests
#: replace it to make a step take time.
_now = time.monotonic


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


def _check_time(deadline: float | None) -> None:
    """:class:`TimeBudgetExceeded` once ``deadline`` has passed (between the steps of a request)."""
    if deadline is not None and _now() > deadline:
        raise TimeBudgetExceeded(
            "the request's time budget ran out before it could be decided; nothing was charged (retry, "
            "or split the batch)"
        )


#: Most cells (distinct sets of covering queries) a batch may have for consistent answers: bounds the
#: solver's work per request on a shared service.
CONSISTENT_CELL_LIMIT = 20_000


def _settles(f: filters.ServiceFilter, p: _Pending, which: int) -> bool:
    """Whether ``f``'s decision on ``p`` needs no trial brought up to date first (under the lock)."""
    trial = p.trials[which]
    return trial is None or f.settles(trial)


def _decide(
    f: filters.ServiceFilter, p: _Pending, which: int, pairs: list[tuple[PredicateQuery | None, float]]
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
    return ConsistentCounts(
        counts=[float(f["count"]) for f in fits if f is not None],
        cells=int(first["cells"]),
        solver=str(first["solver"]),
        note=NOTE,
    )


def _rows(state: _DatasetState) -> int | None:
    return None if state.loaded is None else state.loaded.rows


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


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(dumps(list(parts)).encode("utf-8")).hexdigest()


def _recorded_query(spec: Any, query: PredicateQuery) -> dict[str, Any]:
    """What the ledger keeps of a query: the canonical JSON form (read back on rebuild) and the SQL text."""
    out = query.to_json()
    out.pop("id", None)
    text = spec if isinstance(spec, str) else spec.get("where") if isinstance(spec, Mapping) else None
    if isinstance(text, str):
        out["text"] = text
    return out


def _session_json(session: SessionRecord) -> SessionInfo:
    return SessionInfo(
        id=session.id,
        dataset=session.dataset,
        kind=session.kind,  # type: ignore[arg-type]  # checked when the session opened
        params=dict(session.params),
        positives=session.state.get("positives", 0),
        queries=session.state.get("queries", 0),
        closed=session.closed,
    )


#: The parameters of each session kind (the HTTP bodies have the same fields, plus ``kind``).
_SESSION_PARAMS = {
    "sparse_vector": ("epsilon", "max_positives", "monotonic"),
    "guess_and_check": ("epsilon", "tolerance", "epsilon_estimates", "max_failures"),
}

#: The argument of a session step, by session kind.
_STEP_ARGUMENT = {"sparse_vector": "threshold", "guess_and_check": "guess"}


def _session_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The validated parameters a session is rebuilt from (they go into the ledger); a parameter the
    kind does not use is refused, never ignored."""
    allowed = _SESSION_PARAMS[kind]
    for name in params:
        if name not in allowed:
            raise FieldRefused(
                str(name)[:60],
                f"a {kind} session does not use {str(name)[:60]!r}; its parameters are "
                + ", ".join(repr(a) for a in allowed),
            )
    eps = definitions.check_amount("epsilon", params.get("epsilon"))
    if kind == "sparse_vector":
        return {
            "epsilon": eps,
            "max_positives": check_int(
                params.get("max_positives", 1), "max_positives", maximum=1_000_000, error=QueryError
            ),
            "monotonic": bool(params.get("monotonic", False)),
        }
    tol = check_positive(params.get("tolerance"), "tolerance", error=QueryError)
    eps_est = definitions.check_amount("epsilon_estimates", params.get("epsilon_estimates", eps))
    failures = check_int(params.get("max_failures", 1), "max_failures", maximum=1_000_000, error=QueryError)
    # Each failed guess releases a count with Laplace scale max_failures / epsilon_estimates.
    laplace_scale(eps_est, failures, name="epsilon_estimates")
    return {"epsilon": eps, "epsilon_estimates": eps_est, "tolerance": tol, "max_failures": failures}


def _check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= 200:
        raise QueryError("an idempotency key must be a string of 1 to 200 characters")
    return key


def _check_name(what: str, name: str) -> None:
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 100
        or not all(c.isalnum() or c in "-_." for c in name)
    ):
        raise QueryError(f"{what} must be 1-100 letters, digits, '-', '_' or '.'")
