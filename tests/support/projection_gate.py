"""A stand-in projection worker for tests: ``python projection_gate.py GATE [fail]``.

It speaks the protocol of ``overlapdp/service/_projection_worker.py`` (whose functions it loads by path)
and solves each job with the real solver, but only once the file ``GATE`` exists: a test holds a
projection in flight as long as it needs (and a gate never opened makes a worker that never answers).
It writes its process id to ``GATE.pid`` when it takes a job. With ``fail``, its solver finds no
answer that passes the optimality check (the worker's reply for that case).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

WORKER = Path(__file__).resolve().parents[2] / "src" / "overlapdp" / "service" / "_projection_worker.py"


def main() -> None:
    gate = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location("projection_worker_for_tests", WORKER)
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    solver = worker._load_solver()
    if sys.argv[2:] == ["fail"]:
        solver.project_cells = lambda *a, **k: solver.Solution(None, None, True, "nnls", 0, failed=True)
    worker._write(out, "ready")
    while True:
        job = worker._read(sys.stdin.buffer)
        if job is None:
            return
        Path(f"{gate}.pid").write_text(str(os.getpid()))
        while not gate.exists():
            time.sleep(0.01)
        job["seconds"] = 600.0  # held by the gate, not by the clock
        job["sent"] = time.monotonic()
        reply = worker._solve(solver, job)
        reply["seconds"] = 0.0
        worker._write(out, reply)


if __name__ == "__main__":
    main()
