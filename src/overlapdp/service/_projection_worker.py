"""Worker process of the service's projections (see :mod:`overlapdp.service._projection`).

Run as ``python .../service/_projection_worker.py`` (a script, so that the child does not import the
package: it loads ``overlapdp/_activeset.py`` by its path, with numpy and SciPy's BLAS only). It says
``ready`` once its imports are done, then answers jobs until its standard input closes (the service
stopped, or died: a worker never outlives it). Each message, both ways, is an 8-byte big-endian
length and a pickle. A job: the packed 0/1 matrix and its shape (queries x cells), the answers, their
variances (for counts, sums and means: one per released figure, with each figure's query, ``owners``,
and its reading of the cells' corners, ``factor``), and the seconds left on the request's time budget with the monotonic clock's reading when they were
measured (one clock for every process of the machine). A reply: the projected answers (``fitted``),
the solver, its steps and whether it finished; a solve still running at the deadline stops itself
there (unfinished). Nothing else writes to the pipe: file descriptor 1 is pointed at standard error
before any import.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys
import time
from pathlib import Path
from typing import Any


def _load_solver() -> Any:
    path = Path(__file__).resolve().parents[1] / "_activeset.py"
    spec = importlib.util.spec_from_file_location("overlapdp_activeset_worker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def _read(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))


def _write(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def _solve(solver: Any, job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    deadline = float(job["sent"]) + float(job["seconds"])
    t, n = job["shape"]
    matrix = np.unpackbits(job["matrix"], axis=1, count=n).astype(bool).reshape(t, n)
    if job.get("factor") is not None:
        # counts, sums and means (MATH.md 6.5.1): each figure reads its query's cells' corners
        matrix = solver.corner_matrix(matrix[job["owners"]], job["factor"])
    found = solver.project_cells(matrix, job["values"], job["variances"], deadline=deadline)
    if found.failed:  # no answer passed the optimality check: the service answers 500, charges nothing
        return {"error": "the least-squares solver did not reach the optimum (rounding)"}
    return {
        "fitted": found.fitted,
        "solver": found.solver,
        "steps": found.steps,
        "finished": found.finished,
    }


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to standard error, never into the replies
    stdin = sys.stdin.buffer
    solver = _load_solver()
    import numpy  # noqa: F401  (loaded before "ready": the first job pays no import)
    import scipy.linalg.blas  # noqa: F401

    _write(out, "ready")
    while True:
        job = _read(stdin)
        if job is None:
            return
        start = time.monotonic()
        try:
            reply = _solve(solver, job)
        except Exception as exc:  # reported to the service, which answers 500 for that request alone
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        reply["seconds"] = time.monotonic() - start
        _write(out, reply)


if __name__ == "__main__":
    main()
