"""What the rooms of the service share (:class:`ServiceBase`): the ledger store, the limits, each data
set's in-memory state (:class:`DatasetState`: its filters, caught up with the ledger, and its admission
queue), a request waiting for admission (:class:`Pending`), and the clock of the request deadlines.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from overlapdp.errors import NotFound, OverlapDPError, QueryError, TimeBudgetExceeded, Unavailable
from overlapdp.mechanisms.consistency import AggregateSystem
from overlapdp.query import PredicateQuery, parse_query
from overlapdp.query.aggregate import Aggregate
from overlapdp.service import definitions, filters, logged_filter
from overlapdp.service._dryrun import DryRunPool
from overlapdp.service._projection import ProjectionJob, ProjectionPool
from overlapdp.service.auth import AuthError, TokenCache
from overlapdp.service.datasets import LoadedDataset, load_dataset
from overlapdp.service.ledger import DatasetRecord, LedgerStore
from overlapdp.service.ledger.base import LoadRow, NewCharge, WithinMarks, dumps
from overlapdp.service.limits import Limits
from overlapdp.service.responses import Answer, BatchAnswer, CostEstimate, SessionOpened, SessionStep

# -- requests waiting for admission -------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
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
Snapshots = tuple[
    tuple[filters.ServiceFilter, filters.FilterSnapshot], tuple[filters.ServiceFilter, filters.FilterSnapshot]
]

#: What an admitted request returns.
Result = BatchAnswer | CostEstimate | SessionOpened | SessionStep
R = TypeVar("R", BatchAnswer, CostEstimate, SessionOpened, SessionStep)


@dataclass
class Pending:
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
    #: snapshot of it, settled under the lock by :func:`overlapdp.service.admission._decide`; None while it has none.
    trials: list[filters.Trial | None] = field(default_factory=lambda: [None, None])
    #: A query request's ledger rows and answers, built (and encoded) off the lock for the definition
    #: it names, so that admission under the lock only inserts them and fills in their ``seq``.
    staged: tuple[tuple[str, str], list[NewCharge], list[Answer]] | None = None
    #: The filters whose decision needs a trial off the lock (or its trial brought up to date) before
    #: the request comes back under the lock (:class:`NeedsTrial`).
    needs: set[int] = field(default_factory=set)
    #: A request first tried on the filters' bounds alone under the lock (:func:`overlapdp.service.admission._decide`), tried off
    #: the lock (``trials``) only on the filters whose bounds cannot admit it.
    on_bounds: bool = False
    #: A consistent batch: the cells of its workload, and its projection running in a worker (none
    #: for a request already recorded under its idempotency key: the replay has the recorded one).
    cells: int = 0
    projection: ProjectionJob | None = None
    #: A consistent batch with sums or means: its projection problem (MATH.md 6.5.1), read back into
    #: each query's consistent answer once the worker's fitted figures come.
    system: AggregateSystem | None = None
    #: Approximate DP: (the analyst's filter, its snapshot after the admission, the quota), for the
    #: answer's figures computed off the lock.
    account: tuple[filters.ServiceFilter, filters.FilterSnapshot, float] | None = None
    done: bool = False
    result: Result | None = None
    error: BaseException | None = None


class DatasetState:
    """In-memory filters of one data set, caught up with the ledger up to ``last_seq``."""

    def __init__(self, loaded: LoadedDataset | None, record: DatasetRecord) -> None:
        self.loaded = loaded
        self.record = record
        self.admit_lock = threading.Lock()
        self.queue_lock = threading.Lock()
        self.queue: list[Pending] = []
        # Parsed queries by their request text (parsing SQL costs more than counting a small table).
        self.request_cache: dict[str, PredicateQuery] = {}
        from overlapdp.schema import Schema

        self._schema = loaded.schema if loaded is not None else Schema.from_json(record.schema)
        # Filters touched by the group being admitted, with their savepoints (see :meth:`touch`).
        self._group: dict[int, tuple[filters.ServiceFilter, logged_filter.Savepoint]] = {}
        #: The ledger's within-budget marks as last read (:meth:`LedgerStore.within_marks`).
        self.marks: WithinMarks = {}
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
        #: Per filter (an analyst, "" the global one), the sequence number of its last charge applied.
        self.filter_seq: dict[str, int] = {}
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

    def learn_within(self, key: str, f: filters.ServiceFilter) -> None:
        """Under the lock: ``f`` (the filter of analyst ``key``, "" the global one) knows its rows
        within its budget when the ledger's mark for it covers every charge it holds (its last charge
        at or before the mark's) under a budget no larger than its own. Recorded charges (a replay,
        another instance's) are not decided, so without the mark a filter near its budget would search
        the whole domain to know it, which no request's time allows (MATH.md 7.9)."""
        mark = self.marks.get(key)
        if mark is not None and self.filter_seq.get(key, 0) <= mark[0]:
            f.learn_within(mark[1])

    def catch_up(self, rows: Sequence[LoadRow], marks: Callable[[], WithinMarks]) -> bool:
        """:meth:`apply` committed rows (a replay, another instance's charges) and, when there were
        any, take the ledger's within marks read by ``marks`` (which may have come with them);
        whether there were rows."""
        if not rows:
            return False
        self.apply(rows)
        self.marks = marks()
        return True

    def note_marks(self, written: WithinMarks) -> None:
        """The marks this instance's admission just committed."""
        self.marks.update(written)

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
                self.filter_seq[analyst] = max(self.filter_seq.get(analyst, 0), seq)
                self.filter_seq[""] = max(self.filter_seq.get("", 0), seq)
            self.last_seq = max(self.last_seq, seq)
        self.global_filter.record_many(
            [(self.parse_recorded(q), load, k) for (q, load), k in per_query.items()]
        )
        per_filter: dict[str, list[tuple[PredicateQuery | None, float, int]]] = {}
        for (analyst, query, load), k in per_analyst.items():
            per_filter.setdefault(analyst, []).append((self.parse_recorded(query), load, k))
        for analyst, charges in per_filter.items():
            self.analyst_filter(analyst).record_many(charges)


class ServiceBase:
    """The state every room works on (:mod:`~overlapdp.service.administration`,
    :mod:`~overlapdp.service.admission`, :mod:`~overlapdp.service.queries`,
    :mod:`~overlapdp.service.sessions`); :class:`~overlapdp.service.core.QueryService` builds it."""

    store: LedgerStore
    limits: Limits
    projections: ProjectionPool
    dry_runs: DryRunPool | None
    _states: dict[str, DatasetState]
    _states_lock: threading.Lock
    _tokens: TokenCache

    def _install(self, record: DatasetRecord, loaded: LoadedDataset | None = None) -> DatasetState:
        if loaded is None:
            try:
                loaded = load_dataset(
                    record.name, record.path, record.schema, record.engine, pool=self.limits.engine_pool
                )
            except OverlapDPError:
                loaded = None  # registered, but this instance cannot read the rows: queries get 409
        state = DatasetState(loaded, record)
        with state.admit_lock:
            state.catch_up(
                self.store.loads_since(record.name, 0), lambda: self.store.within_marks(record.name)
            )
        with self._states_lock:
            self._states[record.name] = state
        return state

    def _state(self, name: str) -> DatasetState:
        with self._states_lock:
            state = self._states.get(name)
        if state is None:
            record = self.store.get_dataset(name)
            if record is None:
                raise NotFound(f"unknown data set {name!r}")
            state = self._install(record)
        return state

    def _loaded(self, state: DatasetState) -> LoadedDataset:
        if state.loaded is None:
            raise Unavailable(
                f"the rows of data set {state.record.name!r} cannot be read by this service instance"
            )
        return state.loaded

    def _deadline(self, given: float | None) -> float:
        """The request's deadline: the one its arrival set (HTTP), else its budget from now."""
        return given if given is not None else _now() + self.limits.request_seconds

    def _snapshots(self, state: DatasetState, analyst: str) -> tuple[float, Snapshots]:
        """The analyst's quota, their filter and the global filter with a snapshot of each, caught up
        with the ledger (under the admission lock: copying, no search)."""
        quota, snaps, _, _ = self._snapshots_at(state, analyst)
        return quota, snaps

    def _snapshots_at(
        self, state: DatasetState, analyst: str
    ) -> tuple[float, Snapshots, int, tuple[str, Any]]:
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
            name = state.record.name
            state.catch_up(
                self.store.loads_since(name, state.last_seq), lambda: self.store.within_marks(name)
            )
            mine = state.analyst_filter(analyst, quota)
            mine.budget = quota
            glob = state.global_filter
            state.learn_within(analyst, mine)
            state.learn_within("", glob)
            snaps = ((mine, mine.snapshot()), (glob, glob.snapshot()))
            return quota, snaps, state.last_seq, state.built_for


#: The clock of the request deadlines (``time.monotonic``, as :func:`logged_filter.check_deadline`'s); tests
#: replace it to make a step take time.
_now = time.monotonic


def check_time(deadline: float | None) -> None:
    """:class:`TimeBudgetExceeded` once ``deadline`` has passed (between the steps of a request)."""
    if deadline is not None and _now() > deadline:
        raise TimeBudgetExceeded(
            "the request's time budget ran out before it could be decided; nothing was charged (retry, "
            "or split the batch)"
        )


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(dumps(list(parts)).encode("utf-8")).hexdigest()


def recorded_query(spec: Any, query: PredicateQuery) -> dict[str, Any]:
    """What the ledger keeps of a query: the canonical JSON form (read back on rebuild) and the SQL text."""
    out = query.to_json()
    out.pop("id", None)
    text = spec if isinstance(spec, str) else spec.get("where") if isinstance(spec, Mapping) else None
    if isinstance(text, str):
        out["text"] = text
    return out


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= 200:
        raise QueryError("an idempotency key must be a string of 1 to 200 characters")
    return key
