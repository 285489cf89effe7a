"""Worker process of the service's ``/cost`` dry runs (see :mod:`overlapdp.service._dryrun`).

Run by the pool as ``python -c "...; main()" LEDGER LIMITS`` (LIMITS: the service's limits as JSON).
It lowers its scheduling priority (by ``Limits.cost_worker_nice``, 19 by default), opens the ledger (reading only), builds a query service
over it (which replays the charges), says ``ready``, then answers jobs until its standard input closes. Each
message, both ways, is an 8-byte big-endian length and a pickle (as the projection workers'). A job:
the analyst's name and the dry run's fields, with the seconds left on the request's time budget and
the monotonic clock's reading when they were measured; with ``"kind": "batch"``, a large ``/batch``
parsed and tried here (:meth:`QueryService.worker_batch`: its reply is ``{"ok": that dict}``). A reply
of a dry run: ``{"ok": the CostEstimate as JSON}``
or ``{"error": the exception's class name, "message", "status", "details", "field"}``. Nothing else
writes to the pipe: file descriptor 1 is pointed at standard error before any import.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import sys
from typing import Any


def _read(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))  # from our own parent


def _write(stream: Any, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def _answer(service: Any, job: dict[str, Any]) -> dict[str, Any]:
    from overlapdp.errors import AuthError, OverlapDPError, ServiceError

    try:
        analyst = service.store.get_analyst(job["analyst"])
        if analyst is None or analyst.revoked:
            raise AuthError("a valid analyst token is required")
        service.refresh_dataset(job["dataset"])
        if job.get("kind") == "batch":
            # a large /batch: parsed and tried here, checked and committed by the server
            return {
                "ok": service.worker_batch(
                    analyst,
                    job["dataset"],
                    job["specs"],
                    job["parameter"],
                    job["parameter_name"],
                    consistent=job["consistent"],
                    deadline=float(job["sent"]) + float(job["seconds"]),
                )
            }
        if job.get("kind") == "plan":  # a release planned: no data read, nothing spent
            return {
                "ok": service.plan(
                    analyst,
                    job["dataset"],
                    job["specs"],
                    budget=job["budget"],
                    target_error=job["target_error"],
                    allocation=job["allocation"],
                    objective=job["objective"],
                    level=job["level"],
                    deadline=float(job["sent"]) + float(job["seconds"]),
                )
            }
        out = service.cost(
            analyst,
            job["dataset"],
            job["specs"],
            job["parameter"],
            job["parameter_name"],
            consistent=job["consistent"],
            deadline=float(job["sent"]) + float(job["seconds"]),
        )
        return {"ok": out.model_dump(mode="json")}
    except OverlapDPError as exc:
        return {
            "error": type(exc).__name__,
            "message": str(exc),
            "status": getattr(exc, "status", None) if isinstance(exc, ServiceError) else None,
            "details": getattr(exc, "details", None),
            "field": getattr(exc, "field", None),
        }
    except Exception as exc:  # reported: the server answers 500 for that request alone
        return {"error": "InternalError", "message": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to standard error, never into the replies
    ledger, settings = sys.argv[1], json.loads(sys.argv[2])
    # The lowest priority from the start (by default): its imports and the replay of the ledger must
    # not slow the server's first requests either (it takes the processor time they leave, as its dry
    # runs do).
    with contextlib.suppress(OSError):
        os.nice(int(settings.get("cost_worker_nice", 19)))
    os.environ["OVERLAPDP_SERVED"] = "1"
    from overlapdp.service.core import QueryService
    from overlapdp.service.ledger import open_ledger
    from overlapdp.service.limits import Limits

    service = QueryService(open_ledger(ledger), limits=Limits(**settings))
    stdin = sys.stdin.buffer
    try:
        _write(out, "ready")
        while True:
            job = _read(stdin)
            if job is None:
                return
            _write(out, _answer(service, job))
    except BrokenPipeError:
        return  # the service is gone (killed): so is this worker, quietly
    finally:
        service.close()


if __name__ == "__main__":
    main()
