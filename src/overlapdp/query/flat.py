"""The flat form of a query, what the overlap engine compiles a workload from (overlap/_compiled.py).

It depends on the query's constraints alone, so it lives with the query (step 2 of the data flow) and
is cached on the frozen query object: a workload file computes it once per distinct condition
(query/workload.py), and the engine reads it without importing anything above the query layer.
"""

from __future__ import annotations

from array import array
from operator import attrgetter
from struct import Struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from overlapdp.query.conjunction import PredicateQuery

# The flat form of a query: one (position, lo, hi) int64 record per interval of each constraint, a
# (position, 0, 0) record for an empty coverage (a contradiction), and for a query with no constraint
# (a tautology) one (-1, 0, 1) record, which constrains nothing: every query has at least one record.
RECORD = 3 * 8
_KEY = "_overlap_flat"
CACHED = attrgetter(_KEY)
_PACK3 = Struct("3q").pack
_TAUTOLOGY = _PACK3(-1, 0, 1)


def flat_form(q: PredicateQuery) -> bytes:
    """The flat form of ``q`` (see above), computed once and cached on the (frozen) query object."""
    blob: bytes | None = getattr(q, _KEY, None)
    if blob is not None:
        return blob
    cons = q.constraints
    if not cons:
        blob = _TAUTOLOGY
    elif len(cons) == 1 and len(cons[0][1].intervals) == 1:
        # The common case (one range), packed without building a list.
        pos, cov = cons[0]
        blob = _PACK3(pos, *cov.intervals[0])
    else:
        out: list[int] = []
        for pos, cov in cons:
            ivs = cov.intervals
            if not ivs:
                out += (pos, 0, 0)
            for lo, hi in ivs:
                out += (pos, lo, hi)
        blob = array("q", out).tobytes()
    # A declared field of the frozen dataclass (no part in equality, hashing or repr; replace() and
    # new queries start without it), so the write goes around the frozen __setattr__.
    object.__setattr__(q, _KEY, blob)
    return blob
