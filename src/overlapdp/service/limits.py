"""The service's limits on requests: sizes, time budgets, worker processes (:class:`Limits`)."""

from __future__ import annotations

from dataclasses import dataclass


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
    #: with ``Retry-After`` before its body is read (:class:`overlapdp.service.middleware.AnalystGate`).
    analyst_requests: int = 2
    #: Of those, how many run at once: the others wait for their turn (fair scheduling between
    #: analysts, :class:`overlapdp.service.middleware.AnalystGate`), within their time budget.
    analyst_running: int = 1
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
    #: The niceness those workers add to theirs from their start (``os.nice``): 19, the lowest priority,
    #: so that a dry run takes the processor time the server's requests leave. On a machine kept busy
    #: by other processes they get almost none (a worker's start took minutes under two busy processes
    #: on two cores); the tests run theirs at 0 so that a loaded machine cannot starve them.
    cost_worker_nice: int = 19
    #: Worker processes that compute consistent answers (:mod:`overlapdp.service._projection`), started
    #: when the first is needed; a consistent batch waits (within its time budget) for a free one.
    projection_workers: int = 2
