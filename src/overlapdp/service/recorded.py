"""Queries as the ledger records them, read back for reports, the dashboard and the demo."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from overlapdp.privacy.odometer import whole_domain
from overlapdp.query import PredicateQuery, parse_query
from overlapdp.schema import Schema


def recorded_query(schema: Schema, recorded: str | Mapping[str, Any] | None, id: str) -> PredicateQuery:
    """The predicate query of a ledger row (its JSON text or object); a row without one, such as a
    sparse-vector or guess-and-check session, was charged over the whole domain."""
    spec = json.loads(recorded) if isinstance(recorded, str) else recorded
    if isinstance(spec, Mapping) and ("where" in spec or "conditions" in spec):
        return parse_query(schema, {k: spec[k] for k in ("where", "conditions") if k in spec}, id=id)
    return whole_domain(schema, id=id)
