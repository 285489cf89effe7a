"""Predicates, predicate queries and workloads (DESIGN.md data flow, step 2)."""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.query.conjunction import PredicateQuery, joint_coverage
    from overlapdp.query.groupby import QueryFamily, group_by, parse_select, parse_select_aggregate
    from overlapdp.query.jsonform import parse_conditions
    from overlapdp.query.predicates import (
        AnyOf,
        Compare,
        Contradiction,
        Equals,
        InSet,
        IsNull,
        Not,
        Predicate,
        Range,
        Tautology,
        Truth,
    )
    from overlapdp.query.sql import parse_where
    from overlapdp.query.workload import Workload, parse_item, parse_line, parse_query

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "PredicateQuery": "conjunction",
    "joint_coverage": "conjunction",
    "QueryFamily": "groupby",
    "group_by": "groupby",
    "parse_select": "groupby",
    "parse_select_aggregate": "groupby",
    "parse_conditions": "jsonform",
    "AnyOf": "predicates",
    "Compare": "predicates",
    "Contradiction": "predicates",
    "Equals": "predicates",
    "InSet": "predicates",
    "IsNull": "predicates",
    "Not": "predicates",
    "Predicate": "predicates",
    "Range": "predicates",
    "Tautology": "predicates",
    "Truth": "predicates",
    "parse_where": "sql",
    "Workload": "workload",
    "parse_item": "workload",
    "parse_line": "workload",
    "parse_query": "workload",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AnyOf",
    "Compare",
    "Contradiction",
    "Equals",
    "InSet",
    "IsNull",
    "Not",
    "Predicate",
    "PredicateQuery",
    "QueryFamily",
    "Range",
    "Tautology",
    "Truth",
    "Workload",
    "group_by",
    "joint_coverage",
    "parse_conditions",
    "parse_item",
    "parse_line",
    "parse_query",
    "parse_select",
    "parse_select_aggregate",
    "parse_where",
]
