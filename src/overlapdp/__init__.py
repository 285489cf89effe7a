"""overlapdp: differentially private queries on tabular data, charged by maximum (weighted) overlap.

The data flow (DESIGN.md, the package order): ``schema`` -> ``query`` -> ``overlap`` -> ``privacy`` ->
``engine`` -> ``mechanisms`` -> ``report`` -> ``service`` -> ``cli``.

The names a user reaches for are here, each imported from its package on first use (so that
``import overlapdp`` loads neither pandas, DuckDB nor SciPy): the schema and queries, the overlap
(:func:`max_overlap`, :class:`OverlapIndex`), the privacy definitions and accounting mechanisms
(:class:`PureDP`, ..., :class:`Laplace`, ...), the accountant (:class:`Odometer`, :class:`PrivacyFilter`),
and the noisy answers (:func:`noisy_counts`, :func:`answer_workload`, :class:`ConcurrentComposition`, ...).
Everything else stays in its package (``overlapdp.engine``, ``overlapdp.service``, ...).
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
    from overlapdp.mechanisms import (
        ConcurrentComposition,
        GuessAndCheck,
        NoisyCounts,
        SparseVector,
        answer_workload,
        noisy_count,
        noisy_counts,
        plan_answers,
    )
    from overlapdp.overlap import OverlapIndex, max_overlap
    from overlapdp.privacy import (
        GDP,
        RDP,
        TCDP,
        ZCDP,
        ApproxDP,
        DiscreteGaussian,
        DiscreteLaplace,
        Gaussian,
        Laplace,
        Odometer,
        OpaqueApproxDP,
        PrivacyFilter,
        PureDP,
        RandomizedResponse,
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

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "ConcurrentComposition": "mechanisms",
    "GuessAndCheck": "mechanisms",
    "NoisyCounts": "mechanisms",
    "SparseVector": "mechanisms",
    "answer_workload": "mechanisms",
    "noisy_count": "mechanisms",
    "noisy_counts": "mechanisms",
    "plan_answers": "mechanisms",
    "OverlapIndex": "overlap",
    "max_overlap": "overlap",
    "GDP": "privacy",
    "RDP": "privacy",
    "TCDP": "privacy",
    "ZCDP": "privacy",
    "ApproxDP": "privacy",
    "DiscreteGaussian": "privacy",
    "DiscreteLaplace": "privacy",
    "Gaussian": "privacy",
    "Laplace": "privacy",
    "Odometer": "privacy",
    "OpaqueApproxDP": "privacy",
    "PrivacyFilter": "privacy",
    "PureDP": "privacy",
    "RandomizedResponse": "privacy",
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
    "GDP",
    "RDP",
    "TCDP",
    "ZCDP",
    "ApproxDP",
    "ConcurrentComposition",
    "DataError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "GuessAndCheck",
    "IndexSet",
    "Laplace",
    "NoisyCounts",
    "Odometer",
    "OpaqueApproxDP",
    "OverlapDPError",
    "OverlapIndex",
    "PredicateQuery",
    "PrivacyFilter",
    "PureDP",
    "QueryError",
    "QueryFamily",
    "QuerySyntaxError",
    "RandomizedResponse",
    "Schema",
    "SchemaError",
    "SparseVector",
    "Workload",
    "WorkloadError",
    "__version__",
    "answer_workload",
    "group_by",
    "infer_schema",
    "max_overlap",
    "noisy_count",
    "noisy_counts",
    "parse_item",
    "parse_query",
    "parse_select",
    "parse_where",
    "plan_answers",
]
