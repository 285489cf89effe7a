"""Consistent answers of a batch projected in worker processes, within the request's time budget.

The projection (MATH.md 6.5, :mod:`overlapdp.consistency`) is seconds of numerical work for a large
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

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from overlapdp.errors import ServiceError, TimeBudgetExceeded

_WORKER = Path(__file__).with_name("_projection_worker.py")

#: The clock of the deadlines (``time.monotonic``, as the service's).
_now = time.monotonic


def _left(deadline: float) -> float:
    """Seconds a job's worker is given when the job is sent (tests drive it)."""
    return deadline - _now()


@dataclass(frozen=True)
class Projected:
    """A finished projection: the consistent counts (request order), the solver, its steps, and the
    seconds the worker spent on it."""

    counts: list[float]
    solver: str
    steps: int
    seconds: float


class _Worker:
    """One worker process; a pipe each way (see ``_projection_worker.py`` for the messages)."""

    def __init__(self, command: list[str]) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.ready = False

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(struct.pack(">Q", len(data)) + data)
        stdin.flush()

    def receive(self) -> Any:
        """The next message; raises EOFError when the worker has ended (killed, crashed)."""
        stdout = self.proc.stdout
        assert stdout is not None
        head = _read_exactly(stdout, 8)
        (size,) = struct.unpack(">Q", head)
        return pickle.loads(_read_exactly(stdout, size))  # our own child's reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def stop(self) -> None:
        """Close its input (it exits), then make sure it is gone and reaped."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) < size:
        raise EOFError("the projection worker ended")
    return data


class ProjectionPool:
    """At most ``size`` worker processes, started as jobs need them. ``grace``: seconds a worker gets
    after the deadline to stop on its own before it is killed. ``command`` replaces the worker (tests).

    Counters (for tests and figures): ``started`` jobs, ``finished`` projections, ``cut`` (stopped at
    their deadline by the solver), ``killed`` workers, ``spawned`` workers."""

    def __init__(self, size: int = 2, *, grace: float = 0.5, command: list[str] | None = None) -> None:
        self.size = max(1, int(size))
        self.grace = grace
        self.command = command or [sys.executable, str(_WORKER)]
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._closed = False
        self.started = self.finished = self.cut = self.killed = self.spawned = 0

    def start(
        self,
        matrix: npt.NDArray[np.bool_],
        values: list[float],
        variances: list[float],
        deadline: float,
    ) -> ProjectionJob:
        """Project ``values`` (with their noise ``variances``) onto the answers of a non-negative table
        over ``matrix`` (queries x cells) in a worker, by ``deadline`` (a :func:`_now` time)."""
        t, n = matrix.shape
        job = {
            "matrix": np.packbits(matrix, axis=1),
            "shape": (t, n),
            "values": np.asarray(values, dtype=np.float64),
            "variances": np.asarray(variances, dtype=np.float64),
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

    def _acquire(self, job: ProjectionJob) -> _Worker | None:
        """An idle worker, a new one while fewer than ``size`` live, else wait for one (until the job's
        deadline or its cancellation: None)."""
        with self._cond:
            while True:
                if self._closed or job.abandoned:
                    return None
                if self._idle:
                    return self._idle.pop()
                if len(self._live) < self.size:
                    # Started under the lock (a fork and exec, milliseconds), so the pool never holds
                    # more than ``size``; its imports run in the child while the job waits for "ready".
                    worker = _Worker(self.command)
                    self._live.add(worker)
                    self.spawned += 1
                    return worker
                left = job.deadline - _now()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 0.5))

    def _release(self, worker: _Worker, *, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed and worker.proc.poll() is None:
                self._idle.append(worker)
            else:
                self._discard(worker)
            self._cond.notify_all()

    def _discard(self, worker: _Worker) -> None:
        """Forget ``worker`` (under the lock) and kill it (its job's thread reaps it)."""
        self._live.discard(worker)
        if worker in self._idle:
            self._idle.remove(worker)
        worker.kill()
        self._cond.notify_all()

    def kill_for(self, job: ProjectionJob) -> None:
        """Kill the worker ``job`` still holds, if it does (its thread then gets end of file and
        discards it). Both locks are held, so a worker its job has let go of is never killed."""
        with self._cond, job._lock:
            worker = job._worker
            if worker is not None and worker in self._live:
                self.killed += 1
                worker.kill()

    @property
    def workers(self) -> list[int]:
        """Process ids of the live workers."""
        with self._cond:
            return [w.proc.pid for w in self._live]

    def close(self) -> None:
        """Stop every worker (idle ones exit on end of input; busy ones are killed)."""
        with self._cond:
            self._closed = True
            workers = list(self._live)
            self._live.clear()
            self._idle.clear()
            self._cond.notify_all()
        for w in workers:
            w.kill()
            w.stop()


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
            worker = pool._acquire(self)
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
            pool._release(worker, healthy=healthy)
            if not healthy:
                worker.stop()  # dead or killed: its pipes closed, the process reaped

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
        if not self._done.wait(max(0.0, self.deadline - _now())):
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
