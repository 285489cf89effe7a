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
from overlapdp.query import PredicateQuery, Workload, parse_query, parse_where
from overlapdp.schema import IndexSet, Schema, infer_schema

__version__ = "0.1.0"

__all__ = [
    "DataError",
    "IndexSet",
    "OverlapDPError",
    "PredicateQuery",
    "QueryError",
    "QuerySyntaxError",
    "Schema",
    "SchemaError",
    "Workload",
    "WorkloadError",
    "__version__",
    "infer_schema",
    "parse_query",
    "parse_where",
]
