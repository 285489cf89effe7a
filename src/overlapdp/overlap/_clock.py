"""The one clock every overlap search reads for its effort limit (internal).

``max_overlap(..., effort=e)`` fixes one deadline, ``now() + e``, at the call, and every search and
solver below it compares ``now()`` with that same deadline (DESIGN.md, the effort limit). Wall-clock
(``time.monotonic``), not CPU time: the limit bounds the caller's wait, which includes time lost to
other processes on a loaded machine. The service's request deadlines are read on it too
(``overlapdp.service.filters``): a search's effort is the time left before one. Tests replace :func:`now` (``monkeypatch.setattr(_clock, "now",
...)``) to drive a deadline without sleeping, so callers read it as ``_clock.now()``, never as an
imported name. :func:`cpu` is the calling thread's processor time, for choices that should not
depend on the machine's load (when a helper process is worth starting).
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on the monotonic wall clock (``time.monotonic``)."""
    return time.monotonic()


def cpu() -> float:
    """Seconds of processor time the calling thread has used (``time.thread_time``)."""
    return time.thread_time()
