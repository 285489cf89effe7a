"""Predicates, predicate queries and workloads (DESIGN.md data flow, step 2)."""

from overlapdp.query.conjunction import PredicateQuery, joint_coverage
from overlapdp.query.groupby import QueryFamily, group_by, parse_select
from overlapdp.query.jsonform import parse_conditions
from overlapdp.query.predicates import (
    AnyOf,
    Compare,
    Contradiction,
    Equals,
    InSet,
    Not,
    Predicate,
    Range,
    Tautology,
)
from overlapdp.query.sql import parse_where
from overlapdp.query.workload import Workload, parse_item, parse_query

__all__ = [
    "AnyOf",
    "Compare",
    "Contradiction",
    "Equals",
    "InSet",
    "Not",
    "Predicate",
    "PredicateQuery",
    "QueryFamily",
    "Range",
    "Tautology",
    "Workload",
    "group_by",
    "joint_coverage",
    "parse_conditions",
    "parse_item",
    "parse_query",
    "parse_select",
    "parse_where",
]
