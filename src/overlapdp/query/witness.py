"""A witness row for people: the attributes that decide its overlap, and "any value" for the rest.

The overlap search returns a whole row; an attribute that no query constrains takes the first value of
its domain there, which reads as if it mattered (``race = Amer-Indian-Eskimo`` on a workload of age
ranges). Such an attribute can take any value without changing which queries cover the row, so the
shown row says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from overlapdp.query.conjunction import PredicateQuery

#: What an unconstrained attribute of a witness row shows.
ANY_VALUE = "any value"


def constrained(queries: Iterable[PredicateQuery | None]) -> set[str]:
    """The names of the attributes some query constrains (None: the whole domain, constrains none)."""
    names: set[str] = set()
    for q in queries:
        if q is not None:
            names.update(q.schema.names[p] for p in q.active)
    return names


def shown_witness(witness: Mapping[str, Any], queries: Iterable[PredicateQuery | None]) -> dict[str, str]:
    """Each attribute of ``witness`` as text: its value (``NULL`` for a missing one) where some query
    constrains it, else :data:`ANY_VALUE`."""
    used = constrained(queries)
    return {
        name: (("NULL" if value is None else str(value)) if name in used else ANY_VALUE)
        for name, value in witness.items()
    }


__all__ = ["ANY_VALUE", "constrained", "shown_witness"]
