"""Consistent answers of a batch projected in worker processes, within the request's time budget.

The projection (MATH.md 6.5, :mod:`overlapdp.mechanisms.consistency`) is seconds of numerical work for a large
batch that holds the interpreter lock when run in the server's process: every analyst and every
endpoint waited for it. The service therefore hands it to a small pool of worker processes it owns
(:class:`ProjectionPool`, started when the first projection is asked for; each worker runs
``_projection_worker.py`` as a script and answers one job at a time). A job is started once the
batch's noisy answers are drawn, BEFORE admission, and the request waits for it until its deadline:

- the worker's solver reads the clock at every step and stops itself at the deadline (the worker then
  takes the next job); a worker that has not answered ``grace`` seconds after the deadline is killed
  (a new one is started for a later job);
- the request does not wait past its deadline: :meth:`ProjectionJob.result` raises
  :class:`TimeBudgetExceeded` then, and as it comes before admission nothing is charged;
- :meth:`ProjectionJob.cancel` (the request failed otherwise) kills a worker still solving for it.

Workers are single-threaded (BLAS threads 1): the pool's size is the parallelism. They exit when
their standard input closes, so none outlives the service's process; :meth:`ProjectionPool.close`
stops them at once.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from overlapdp.errors import ServiceError, TimeBudgetExceeded
from overlapdp.service._workers import WorkerPool, _Worker

_WORKER = Path(__file__).with_name("_projection_worker.py")

#: The clock of the deadlines (``time.monotonic``, as the service's).
_now = time.monotonic

#: The longest a request waits for its projection before it reads :func:`_now` again (seconds): the
#: clock, not the time slept, decides when the deadline has passed (tests drive the clock).
_SLICE = 0.1


def _left(deadline: float) -> float:
    """Seconds a job's worker is given when the job is sent (tests drive it)."""
    return deadline - _now()


@dataclass(frozen=True)
class Projected:
    """A finished projection: the fitted answers (request order; with a factor, one per released
    figure), the solver, its steps, and the seconds the worker spent on it."""

    counts: list[float]
    solver: str
    steps: int
    seconds: float


class ProjectionPool(WorkerPool):
    """At most ``size`` worker processes, started as jobs need them (:class:`WorkerPool`, lazy).
    ``grace``: seconds a worker gets after the deadline to stop on its own before it is killed.
    ``command`` replaces the worker (tests).

    Counters (for tests and figures): ``started`` jobs, ``finished`` projections, ``cut`` (stopped at
    their deadline by the solver), ``killed`` workers, ``spawned`` workers."""

    def __init__(self, size: int = 2, *, grace: float = 0.5, command: list[str] | None = None) -> None:
        super().__init__(command or [sys.executable, str(_WORKER)], size, grace=grace)
        self.started = self.finished = self.cut = 0

    def start(
        self,
        matrix: npt.NDArray[np.bool_],
        values: list[float] | npt.NDArray[np.float64],
        variances: list[float] | npt.NDArray[np.float64],
        deadline: float,
        *,
        owners: npt.NDArray[np.intp] | None = None,
        factor: npt.NDArray[np.float64] | None = None,
    ) -> ProjectionJob:
        """Project ``values`` (with their noise ``variances``) onto the answers of a non-negative table
        over ``matrix`` (queries x cells) in a worker, by ``deadline`` (a :func:`_now` time). With
        ``owners`` and ``factor`` (:class:`overlapdp.mechanisms.consistency.AggregateSystem`) the
        values are the released figures of counts, sums and means, projected onto the cone of
        MATH.md 6.5.1 (:func:`overlapdp._activeset.corner_matrix`)."""
        t, n = matrix.shape
        job = {
            "matrix": np.packbits(matrix, axis=1),
            "shape": (t, n),
            "values": np.asarray(values, dtype=np.float64),
            "variances": np.asarray(variances, dtype=np.float64),
            "owners": None if owners is None else np.asarray(owners, dtype=np.intp),
            "factor": None if factor is None else np.asarray(factor, dtype=np.float64),
        }
        with self._cond:
            if self._closed:
                err = ServiceError("the service is shutting down; nothing was charged")
                err.status = 503
                raise err
            self.started += 1
        out = ProjectionJob(self, job, deadline)
        threading.Thread(target=out._run, name="overlapdp-projection", daemon=True).start()
        return out

    def kill_for(self, job: ProjectionJob) -> None:
        """Kill the worker ``job`` still holds, if it does (its thread then gets end of file and
        discards it). Both locks are held, so a worker its job has let go of is never killed."""
        with self._cond, job._lock:
            worker = job._worker
            if worker is not None and worker in self._live:
                self.killed += 1
                worker.kill()


class ProjectionJob:
    """One projection running (or waiting for a worker) in a pool; see :meth:`result`."""

    def __init__(self, pool: ProjectionPool, job: dict[str, Any], deadline: float) -> None:
        self._pool = pool
        self._job = job
        self.deadline = deadline
        self._done = threading.Event()
        self._reply: dict[str, Any] | None = None
        self._failure: str | None = None
        self._worker: _Worker | None = None  # while it solves for this job
        self._lock = threading.Lock()
        self.abandoned = False

    def _run(self) -> None:
        pool = self._pool
        try:
            worker = pool._acquire(self.deadline, lambda: self.abandoned)
        except OSError as exc:  # the worker could not be started
            self._finish(None, f"no projection worker could be started ({exc})")
            return
        if worker is None:
            self._finish(None, "no projection worker was free within the request's time budget")
            return
        healthy = False
        try:
            with self._lock:
                if self.abandoned:
                    healthy = True
                    return
                self._worker = worker  # from now on a give-up kills it
            if not worker.ready:
                if worker.receive() != "ready":
                    raise EOFError("the projection worker did not start")
                worker.ready = True
            with self._lock:
                if self.abandoned:
                    self._worker = None
                    healthy = True
                    return
            worker.send({**self._job, "seconds": _left(self.deadline), "sent": time.monotonic()})
            reply = worker.receive()
            with self._lock:
                self._worker = None  # before it is released: nobody kills it for this job after
            healthy = True
            self._finish(reply, None)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
            self._finish(None, f"the projection worker stopped ({type(exc).__name__})")
        finally:
            with self._lock:
                self._worker = None
            pool._release(worker, healthy=healthy)  # (dead or killed: its pipes closed, reaped)

    def _finish(self, reply: dict[str, Any] | None, failure: str | None) -> None:
        pool = self._pool
        if reply is not None:
            with pool._cond:
                if reply.get("finished"):
                    pool.finished += 1
                elif "error" not in reply:
                    pool.cut += 1
        self._reply, self._failure = reply, failure
        self._done.set()

    def result(self) -> Projected:
        """The projection, waiting for it until the deadline; :class:`TimeBudgetExceeded` past it (the
        worker is killed ``grace`` seconds later if it has not stopped by then)."""
        if not self._wait():
            self._give_up(self._pool.grace)
            raise _out_of_time()
        reply = self._reply
        if reply is None or "error" in reply:
            why = self._failure if reply is None else reply["error"]
            if reply is None and _now() >= self.deadline:
                raise _out_of_time()
            err = ServiceError(
                f"the consistent answers could not be computed ({why}); nothing was charged and no "
                "answer was released"
            )
            err.status = 500
            raise err
        if not reply.get("finished"):
            raise _out_of_time()
        fitted = reply["fitted"]
        return Projected(
            counts=[float(v) for v in fitted],
            solver=str(reply["solver"]),
            steps=int(reply["steps"]),
            seconds=float(reply["seconds"]),
        )

    def _wait(self) -> bool:
        """Whether the projection is done by the deadline, on :func:`_now`, waiting in slices of at
        most :data:`_SLICE` that read the clock again."""
        while True:
            left = self.deadline - _now()
            if left <= 0:
                return self._done.is_set()
            if self._done.wait(min(left, _SLICE)):
                return True

    def cancel(self) -> None:
        """The answer is no longer wanted: a worker still solving for it is killed now (a job already
        given up at its deadline keeps its grace)."""
        if not self._done.is_set() and not self.abandoned:
            self._give_up(0.0)

    def _give_up(self, after: float) -> None:
        """Mark the job abandoned and kill its worker if it still works for it ``after`` seconds on."""
        with self._lock:
            self.abandoned = True
            if self._worker is None:
                return
        if after <= 0:
            self._pool.kill_for(self)
            return
        timer = threading.Timer(after, self._pool.kill_for, args=(self,))
        timer.daemon = True
        timer.start()


def _out_of_time() -> TimeBudgetExceeded:
    return TimeBudgetExceeded(
        "the consistent answers could not be computed within the request's time budget; nothing was "
        "charged and no answer was released (send fewer queries, or fewer cells, for consistent answers)"
    )
