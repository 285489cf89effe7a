"""The JSON form of a predicate query.

``{"conditions": {"age": {"range": [30, 39]}, "race": {"in": ["White"]}}}``. Per attribute one object
with one or more of these keys (all must hold):

- ``"range": [lo, hi]`` (inclusive; ``null`` for an open end), ``"eq": v``, ``"ne": v``, ``"in": [...]``,
  ``"not_in": [...]``, ``"lt"``, ``"le"``, ``"gt"``, ``"ge"`` (ordered attributes only),
- ``"bins": [i, ...]`` (value indices, mostly for binned attributes),
- ``"not": {...}`` (the complement of a nested condition), ``"all": true`` / ``"none": true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overlapdp.errors import QueryError, SchemaError
from overlapdp.query.conjunction import PredicateQuery
from overlapdp.query.predicates import Compare, Contradiction, Equals, InSet, Not, Predicate, Range, Tautology
from overlapdp.schema import Attribute, IndexSet, Schema

_KEYS = ("range", "eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "bins", "not", "all", "none")


def parse_conditions(
    schema: Schema, conditions: Any, *, id: str | None = None, weight: float = 1.0
) -> PredicateQuery:
    """Read the ``"conditions"`` object into a :class:`PredicateQuery`."""
    if not isinstance(conditions, Mapping):
        raise QueryError(f"query {id!r}: 'conditions' must be an object of attribute -> condition")
    covs: dict[int, IndexSet] = {}
    for name, cond in conditions.items():
        try:
            pos = schema.position(str(name))
        except SchemaError as exc:
            raise QueryError(f"query {id!r}: {exc}") from None
        attr = schema.attributes[pos]
        try:
            cov = condition_coverage(attr, cond)
        except QueryError as exc:
            raise QueryError(f"query {id!r}: {exc}") from None
        covs[pos] = covs[pos] & cov if pos in covs else cov
    return PredicateQuery.from_coverages(schema, covs, id=id, weight=weight)


def condition_coverage(attr: Attribute, cond: Any) -> IndexSet:
    """Coverage of one attribute's JSON condition."""
    if not isinstance(cond, Mapping) or not cond:
        raise QueryError(f"attribute {attr.name!r}: a condition must be a non-empty object with keys {_KEYS}")
    cov = attr.full()
    for key, arg in cond.items():
        cov = cov & _predicate(attr, key, arg).coverage(attr)
    return cov


class _Indices(Predicate):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def coverage(self, attribute: Attribute) -> IndexSet:
        return IndexSet.from_indices(i for i in self.indices if 0 <= i < attribute.size)


class _Nested(Predicate):
    def __init__(self, cond: Any) -> None:
        self.cond = cond

    def coverage(self, attribute: Attribute) -> IndexSet:
        return condition_coverage(attribute, self.cond)


def _predicate(attr: Attribute, key: str, arg: Any) -> Predicate:
    if key == "range":
        if not isinstance(arg, list) or len(arg) != 2:
            raise QueryError(f"attribute {attr.name!r}: 'range' needs [lo, hi]")
        return Range(arg[0], arg[1])
    if key in ("lt", "le", "gt", "ge"):
        return Compare({"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[key], arg)
    if key == "eq":
        return Equals(arg)
    if key == "ne":
        return Not(Equals(arg))
    if key in ("in", "not_in"):
        if not isinstance(arg, list):
            raise QueryError(f"attribute {attr.name!r}: {key!r} needs a list of values")
        return InSet(arg) if key == "in" else Not(InSet(arg))
    if key == "bins":
        if not isinstance(arg, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in arg):
            raise QueryError(f"attribute {attr.name!r}: 'bins' needs a list of integer value indices")
        return _Indices(arg)
    if key == "not":
        return Not(_Nested(arg))
    if key == "all":
        return Tautology() if arg is True else Contradiction()
    if key == "none":
        return Contradiction() if arg is True else Tautology()
    raise QueryError(
        f"attribute {attr.name!r}: unknown condition key {key!r} (use one of {', '.join(_KEYS)})"
    )
