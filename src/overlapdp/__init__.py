"""overlapdp: differentially private queries on tabular data, charged by maximum (weighted) overlap.

The data flow (DESIGN.md): ``schema`` -> ``query`` -> ``overlap`` -> ``privacy`` -> ``mechanisms`` ->
``engine`` -> ``service`` -> ``report`` / ``cli``.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports
from overlapdp.errors import (
    DataError,
    OverlapDPError,
    QueryError,
    QuerySyntaxError,
    SchemaError,
    WorkloadError,
)

if TYPE_CHECKING:
    from overlapdp.query import (
        PredicateQuery,
        QueryFamily,
        Workload,
        group_by,
        parse_item,
        parse_query,
        parse_select,
        parse_where,
    )
    from overlapdp.schema import IndexSet, Schema, infer_schema

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "PredicateQuery": "query",
    "Workload": "query",
    "parse_query": "query",
    "parse_where": "query",
    "QueryFamily": "query",
    "group_by": "query",
    "parse_item": "query",
    "parse_select": "query",
    "IndexSet": "schema",
    "Schema": "schema",
    "infer_schema": "schema",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"

__all__ = [
    "DataError",
    "IndexSet",
    "OverlapDPError",
    "PredicateQuery",
    "QueryError",
    "QueryFamily",
    "QuerySyntaxError",
    "Schema",
    "SchemaError",
    "Workload",
    "WorkloadError",
    "__version__",
    "group_by",
    "infer_schema",
    "parse_item",
    "parse_query",
    "parse_select",
    "parse_where",
]
