"""The service's pools of worker processes: one class for every pool (consistent answers,
:mod:`overlapdp.service._projection`; ``/cost`` dry runs and large ``/batch`` requests,
:mod:`overlapdp.service._dryrun`), so that starting, handing out, killing and replacing workers is
written once.

A worker is a child process spoken to over its standard input and output: each message, both ways, is
an 8-byte big-endian length and a pickle; its first message is ``"ready"``. Workers exit when their
standard input closes, so none outlives the service's process; :meth:`WorkerPool.close` stops them at
once. A pool holds at most ``size`` live workers:

- ``eager`` (the dry-run pool): all are started by :meth:`WorkerPool.start_all` and handed out only once
  ready (each one's start-up may replay the ledger: a thread waits for its ``"ready"``); a worker
  released unhealthy (killed at a deadline, crashed) is replaced at once;
- otherwise (the projection pool): a worker is started when a job finds none idle and fewer than
  ``size`` live; the job waits for its ``"ready"`` itself.

A job waits for a worker only until its deadline.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Any

#: The clock of the deadlines (``time.monotonic``, one clock for every process of the machine).
_now = time.monotonic


class _Worker:
    """One worker process; a pipe each way."""

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
        raise EOFError("the worker ended")
    return data


class WorkerPool:
    """At most ``size`` worker processes running ``command``; ``grace``: seconds a worker gets past a
    job's deadline before it is killed; ``eager``: see the module. Counters (tests and figures):
    ``spawned`` and ``killed`` workers."""

    def __init__(self, command: list[str], size: int, *, grace: float, eager: bool = False) -> None:
        self.command = command
        self.size = max(1, int(size))
        self.grace = grace
        self.eager = eager
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._closed = False
        self.spawned = self.killed = 0

    def start_all(self) -> None:
        """Start every worker now (eager pools; each is handed out once it says it is ready)."""
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        with self._cond:
            if self._closed or len(self._live) >= self.size:
                return
            worker = _Worker(self.command)
            self._live.add(worker)
            self.spawned += 1
        threading.Thread(target=self._wait_ready, args=(worker,), daemon=True).start()

    def _wait_ready(self, worker: _Worker) -> None:
        try:
            ok = worker.receive() == "ready"
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):
            ok = False
        with self._cond:
            if ok and not self._closed and worker in self._live:
                worker.ready = True
                self._idle.append(worker)
                self._cond.notify_all()
                return
            self._live.discard(worker)
        worker.kill()
        worker.stop()

    @property
    def ready(self) -> bool:
        """Whether a worker has started (one may be busy)."""
        with self._cond:
            return any(w.ready for w in self._live)

    @property
    def closed(self) -> bool:
        return self._closed

    def _acquire(self, deadline: float, abandoned: Callable[[], bool] | None = None) -> _Worker | None:
        """An idle worker; in a lazy pool a new one (not ready yet) while fewer than ``size`` live; else
        wait for one. None once the pool is closed, the job abandoned, or ``deadline`` passed."""
        with self._cond:
            while True:
                if self._closed or (abandoned is not None and abandoned()):
                    return None
                if self._idle:
                    return self._idle.pop()
                if not self.eager and len(self._live) < self.size:
                    # Started under the lock (a fork and exec, milliseconds), so the pool never holds
                    # more than ``size``; its imports run in the child while the job waits for "ready".
                    worker = _Worker(self.command)
                    self._live.add(worker)
                    self.spawned += 1
                    return worker
                left = deadline - _now()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 0.5))

    def _release(self, worker: _Worker, *, healthy: bool) -> None:
        """Back to the idle workers, or (unhealthy, or the pool closed) killed and reaped, and in an
        eager pool replaced (the new one starts up before it takes jobs)."""
        with self._cond:
            if healthy and not self._closed and worker.proc.poll() is None:
                self._idle.append(worker)
                self._cond.notify_all()
                return
            self._live.discard(worker)
            if worker in self._idle:
                self._idle.remove(worker)
            self._cond.notify_all()
        worker.kill()
        worker.stop()
        if self.eager:
            self._spawn()

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
