"""``/cost`` dry runs (and large ``/batch`` requests' parsing and trials) in worker processes, so that
they cannot hold the interpreter lock against others. The pool is the service's one pool class
(:class:`~overlapdp.service._workers.WorkerPool`, eager here), as the projection workers'.

A 1 000-query dry run is seconds of pure-Python work (parsing the queries, then the overlap searches
of both filters and of the batch itself: about 6 s on Adult): in the server's process it held the
interpreter lock, and eight of them in parallel delayed every other analyst by seconds. As
for consistent answers (:mod:`overlapdp.service._projection`), the service hands them to a small pool
of worker processes it owns (:class:`DryRunPool`, ``Limits.cost_workers``, ``overlapdp serve`` only):

- each worker (:mod:`overlapdp.service._dryrun_worker`) is a :class:`~overlapdp.service.core.QueryService` of its own
  over the same ledger, which it only reads: a dry run there answers as of the ledger's committed
  charges, exactly as one in the server does (both catch their filters up with the ledger first, as
  several service instances over one ledger do; DESIGN.md), and the data set's record and budget are
  read again for each job;
- workers run at the lowest priority (``nice`` 19, from their start: the replay of the ledger must not
  slow the server's first requests either): a dry run takes the processor time the server's requests
  leave (the idle class, ``SCHED_IDLE``, starved them
  altogether on a busy machine: every dry run ran out of time);
- the request's time budget holds: the job carries the deadline (the worker's dry run stops there with
  503 ``TimeBudgetExceeded``), a request waits for a free worker only until its deadline (503), and a
  worker that has not answered ``grace`` seconds after it is killed (a new one is started);
- workers are started with the service (their start-up replays the ledger) and exit when their
  standard input closes, so none outlives the service's process. A dry run never runs in the
  server's process: while no worker is ready yet (start-up), it waits within its time budget.
"""

from __future__ import annotations

import json
import select
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from overlapdp import errors
from overlapdp.errors import OverlapDPError, ServiceError, TimeBudgetExceeded
from overlapdp.service._workers import WorkerPool

#: The clock of the deadlines (``time.monotonic``, one clock for every process of the machine).
_now = time.monotonic


class DryRunPool(WorkerPool):
    """``size`` worker processes answering dry runs (and preparing large batches) over the ledger at
    ``ledger_url`` (:class:`~overlapdp.service._workers.WorkerPool`, eager: started with the service,
    each replaced when killed); ``limits``: the service's :class:`~overlapdp.service.limits.Limits`
    (the workers' own, without workers of theirs).

    Counters (figures and tests): ``answered`` jobs, ``spawned`` and ``killed`` workers."""

    def __init__(self, ledger_url: str, size: int, limits: Any, *, grace: float = 1.0) -> None:
        settings = {**asdict(limits), "cost_workers": 0, "projection_workers": 1, "engine_pool": 1}
        # the package from where this process has it (a test's path, a checkout), not only as installed
        source = str(Path(__file__).resolve().parents[2])
        boot = f"import sys; sys.path.insert(0, {source!r}); from overlapdp.service._dryrun_worker import main; main()"
        super().__init__(
            [sys.executable, "-c", boot, ledger_url, json.dumps(settings)], size, grace=grace, eager=True
        )
        self.answered = 0

    def start(self) -> None:
        """Start the workers now (each replays the ledger, then waits for jobs)."""
        self.start_all()

    def run(self, job: dict[str, Any], deadline: float) -> dict[str, Any]:
        """The worker's reply to ``job`` (a dry run's fields, or a batch's), by ``deadline``. Raises the
        job's error, or 503 past the deadline (also when no worker is free or ready by then)."""
        worker = self._acquire(deadline)
        if worker is None:
            if self.closed:
                err = ServiceError("the service is shutting down; nothing was spent")
                err.status = 503
                raise err
            raise TimeBudgetExceeded(
                "no worker was free within the request's time budget; nothing was spent (retry later)"
            )
        healthy = False
        try:
            worker.send({**job, "seconds": deadline - _now(), "sent": _now()})
            stdout = worker.proc.stdout
            assert stdout is not None
            readable, _, _ = select.select([stdout], [], [], max(0.0, deadline - _now()) + self.grace)
            if not readable:
                raise TimeoutError
            reply = worker.receive()
            healthy = True
        except TimeoutError:
            with self._cond:
                self.killed += 1
            raise _out_of_time() from None
        except (EOFError, OSError, ValueError) as exc:
            err = ServiceError(
                f"the request could not be completed in its worker ({type(exc).__name__}); nothing was spent"
            )
            err.status = 500
            raise err from None
        finally:
            self._release(worker, healthy=healthy)
        with self._cond:
            self.answered += 1
        if "error" in reply:
            raise _rebuilt(reply)
        out: dict[str, Any] = reply["ok"]
        return out


def _rebuilt(reply: dict[str, Any]) -> OverlapDPError:
    """The worker's error as the server's exception (same class, message, status and details), so the
    HTTP answer is the one an in-process dry run gives."""
    cls = getattr(errors, str(reply.get("error")), None)
    if not (isinstance(cls, type) and issubclass(cls, OverlapDPError)):
        err = ServiceError(f"the dry run could not be completed ({reply.get('error')}); nothing was spent")
        err.status = 500
        return err
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(reply.get("message", "")))
    if isinstance(exc, ServiceError):
        exc.details = dict(reply.get("details") or {})
        status = reply.get("status")
        if isinstance(status, int):
            exc.status = status
    if reply.get("field") is not None:
        exc.field = str(reply["field"])  # type: ignore[attr-defined]
    return exc


def _out_of_time() -> TimeBudgetExceeded:
    return TimeBudgetExceeded(
        "the dry run could not be completed within the request's time budget; nothing was spent "
        "(send fewer queries)"
    )
