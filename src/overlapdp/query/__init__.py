"""Predicates, predicate queries and workloads (DESIGN.md data flow, step 2)."""

from overlapdp.query.conjunction import PredicateQuery, joint_coverage
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
from overlapdp.query.workload import Workload, parse_query

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
    "Range",
    "Tautology",
    "Truth",
    "Workload",
    "joint_coverage",
    "parse_conditions",
    "parse_query",
    "parse_where",
]
