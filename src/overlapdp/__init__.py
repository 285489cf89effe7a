"""overlapdp: differentially private queries on tabular data, charged by maximum (weighted) overlap.

The data flow (DESIGN.md): ``schema`` -> ``query`` -> ``overlap`` -> ``privacy`` -> ``mechanisms`` ->
``engine`` -> ``service`` -> ``report`` / ``cli``.
"""

from overlapdp.errors import (
    DataError,
    OverlapDPError,
    QueryError,
    QuerySyntaxError,
    SchemaError,
    WorkloadError,
)
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
