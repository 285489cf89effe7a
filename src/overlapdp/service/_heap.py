"""Short collector pauses for a long-running service: the held ledger is frozen out of the cyclic
collector as it grows.

Every charge a filter holds stays in memory as long as the process (the filters, their replicas, the
lazy bounds' records: about ten container objects per charge and filter). CPython 3.11's full
collection visits every such object; with 10 000 charges held it paused every request for 20-60 ms,
several times a minute under load (``benchmarks/service.py``, batch50 row). The filters' state holds no
reference cycles (a dropped filter or replica is freed by reference counting alone, tested), so it
never needs the cyclic collector: ``serve`` freezes the loaded ledger at start, and :func:`grew` freezes
what was added since each time the filters took ``every`` more charges: the queries of admitted
requests and the charges pooled replicas caught up with, counted (and frozen) off the data set's
admission lock.

What a freeze costs: a young-generation collection first (no young garbage is frozen), then
``gc.freeze()`` (constant time). Cyclic garbage already in the old generation at that moment is never
reclaimed: measured at about 8 objects per freeze (requests in flight), so a few bytes per charge held,
against the hundreds each charge costs anyway. Off unless :func:`enable` was called (``serve`` does; the
library, the tests and the embedded service leave the collector alone).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_every = 0  # 0: off
_since = 0


def enable(every: int = 500) -> None:
    """Freeze the heap each time the filters took ``every`` more charges (0 turns it off)."""
    global _every, _since
    if every < 0:
        raise ValueError(f"every must be >= 0, got {every}")
    with _lock:
        _every, _since = every, 0


def grew(n: int) -> bool:
    """Count ``n`` charges added to a filter; freeze when ``every`` were added since the last freeze
    (True when it did)."""
    global _since
    if _every == 0:
        return False
    with _lock:
        _since += n
        if _since < _every:
            return False
        _since = 0
    gc.collect(1)
    gc.freeze()
    return True
