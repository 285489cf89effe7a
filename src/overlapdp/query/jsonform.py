"""The JSON form of a predicate query.

``{"conditions": {"age": {"range": [30, 39]}, "race": {"in": ["White"]}}}``. Per attribute one object
with one or more of these keys (all must hold):

- ``"range": [lo, hi]`` (inclusive; ``null`` for an open end), ``"eq": v``, ``"ne": v``, ``"in": [...]``,
  ``"not_in": [...]``, ``"lt"``, ``"le"``, ``"gt"``, ``"ge"`` (ordered attributes only),
- ``"bins": [i, ...]`` (value indices, mostly for binned attributes),
- ``"not": {...}`` (the negation of a nested condition), ``"all": true`` / ``"none": true``,
- ``"is_null": true`` (the value is missing) / ``"is_null": false`` (it is not), only on an attribute
  declared with ``"missing": true``.

Missing values follow SQL's three-valued logic (:mod:`overlapdp.query.predicates`): every key but
``is_null``, ``all`` and ``bins`` is a comparison that is never true of a missing value, and ``"ne"``,
``"not_in"`` and ``"not"`` leave missing values out too.

The rules of the SQL form hold (:mod:`overlapdp.query.sql`): every value must be in the domain, a
range must not be inverted (``[60, 20]``) nor cover no value of the domain (``[200, 300]``, ``{"lt":
17}`` when the domain starts at 17), bin indices must exist, ``all`` / ``none`` take booleans: each is
a :class:`~overlapdp.errors.DomainValueError` or :class:`~overlapdp.errors.QueryError` naming the
attribute. Several keys on one attribute that contradict each other (``{"gt": 30, "lt": 20}``), an
empty ``"in": []`` and ``"none": true`` are legal empty conditions. ``"not"`` may nest at most
``MAX_DEPTH`` (16) levels and a query may hold at most ``MAX_TERMS`` (1 000) condition keys
(:class:`~overlapdp.errors.QueryTooComplexError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overlapdp.errors import DomainValueError, QueryError, QueryTooComplexError, SchemaError, with_prefix
from overlapdp.query.conjunction import PredicateQuery, query_label
from overlapdp.query.limits import MAX_DEPTH, MAX_TERMS
from overlapdp.query.predicates import (
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
from overlapdp.schema import Attribute, IndexSet, Schema

_KEYS = (
    "range",
    "eq",
    "ne",
    "in",
    "not_in",
    "lt",
    "le",
    "gt",
    "ge",
    "bins",
    "not",
    "all",
    "none",
    "is_null",
)


def parse_conditions(
    schema: Schema, conditions: Any, *, id: str | None = None, weight: float = 1.0
) -> PredicateQuery:
    """Read the ``"conditions"`` object into a :class:`PredicateQuery`."""
    if not isinstance(conditions, Mapping):
        raise QueryError(f"{query_label(id)}'conditions' must be an object of attribute -> condition")
    _check_size(conditions, id)
    covs: dict[int, IndexSet] = {}
    for name, cond in conditions.items():
        try:
            pos = schema.position(str(name))
        except SchemaError as exc:
            raise QueryError(f"{query_label(id)}{exc}") from None
        attr = schema.attributes[pos]
        try:
            cov = condition_coverage(attr, cond)
        except QueryError as exc:
            raise with_prefix(exc, query_label(id)) from None
        covs[pos] = covs[pos] & cov if pos in covs else cov
    return PredicateQuery.from_coverages(schema, covs, id=id, weight=weight)


def _check_size(conditions: Mapping[Any, Any], id: str | None) -> None:
    """Depth of nested ``"not"`` and number of condition keys, counted without recursion."""
    keys = 0
    stack: list[tuple[Any, int]] = [(cond, 1) for cond in conditions.values()]
    while stack:
        cond, depth = stack.pop()
        if not isinstance(cond, Mapping):
            continue  # reported by condition_coverage with the attribute's name
        if depth > MAX_DEPTH:
            raise QueryTooComplexError(
                f"{query_label(id)}conditions nest 'not' more than {MAX_DEPTH} levels deep; "
                f"the limit is a depth of {MAX_DEPTH}",
                limit="depth",
                maximum=MAX_DEPTH,
            )
        keys += len(cond)
        if keys > MAX_TERMS:
            raise QueryTooComplexError(
                f"{query_label(id)}conditions hold more than {MAX_TERMS} keys; the limit is {MAX_TERMS} terms",
                limit="terms",
                maximum=MAX_TERMS,
            )
        if "not" in cond:
            stack.append((cond["not"], depth + 1))


def condition_coverage(attr: Attribute, cond: Any) -> IndexSet:
    """Coverage of one attribute's JSON condition (all keys must hold)."""
    return condition_truth(attr, cond).true


def condition_truth(attr: Attribute, cond: Any) -> Truth:
    """TRUE and UNKNOWN values of one attribute's JSON condition (the keys' three-valued AND)."""
    if not isinstance(cond, Mapping) or not cond:
        raise QueryError(f"attribute {attr.name!r}: a condition must be a non-empty object with keys {_KEYS}")
    out = Truth(attr.full())
    for key, arg in cond.items():
        out = out.both(_predicate(attr, key, arg).truth(attr))
    return out


class _Indices(Predicate):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def coverage(self, attribute: Attribute) -> IndexSet:
        for i in self.indices:
            if not 0 <= i < attribute.size:
                raise DomainValueError(
                    f"attribute {attribute.name!r}: bin index {i} does not exist "
                    f"(the indices are 0 to {attribute.size - 1})",
                    attribute=attribute.name,
                    value=i,
                    suggestions=(0, attribute.size - 1),
                )
        return IndexSet.from_indices(self.indices)

    def truth(self, attribute: Attribute) -> Truth:
        # Value indices name values, the missing one included: two-valued.
        return Truth(self.coverage(attribute))


class _Nested(Predicate):
    def __init__(self, cond: Any) -> None:
        self.cond = cond

    def coverage(self, attribute: Attribute) -> IndexSet:
        return condition_coverage(attribute, self.cond)

    def truth(self, attribute: Attribute) -> Truth:
        return condition_truth(attribute, self.cond)


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
    if key == "is_null":
        if not isinstance(arg, bool):
            raise QueryError(
                f"attribute {attr.name!r}: 'is_null' takes true or false, got {type(arg).__name__}"
            )
        return IsNull(negated=not arg)
    if key in ("all", "none"):
        if not isinstance(arg, bool):
            raise QueryError(
                f"attribute {attr.name!r}: {key!r} takes true or false, got {type(arg).__name__}"
            )
        return Tautology() if arg == (key == "all") else Contradiction()
    raise QueryError(
        f"attribute {attr.name!r}: unknown condition key {key!r} (use one of {', '.join(_KEYS)})"
    )
