"""Predicates on one attribute: each is a rule that yields its coverage, a subset of the attribute's
value indices (MATH.md section 1: $C_\\phi(A_j) \\subseteq A_j$).

Every leaf predicate must name the domain: a value that is not in it, an inverted range and a range
covering no value raise :class:`~overlapdp.errors.DomainValueError` (see
:mod:`overlapdp.schema.attributes`). Combinations of valid leaves may be empty (``Not(Tautology())``,
two disjoint ranges intersected by a query): that is a well-formed contradiction, not an error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from overlapdp.errors import QueryError
from overlapdp.schema import Attribute, IndexSet


class Predicate(ABC):
    """A condition on one attribute."""

    @abstractmethod
    def coverage(self, attribute: Attribute) -> IndexSet:
        """The value indices of ``attribute`` that satisfy the predicate."""


@dataclass(frozen=True)
class Range(Predicate):
    """``lo <= x <= hi`` on an ordered attribute; either end may be None (open)."""

    lo: Any = None
    hi: Any = None

    def coverage(self, attribute: Attribute) -> IndexSet:
        if not attribute.ordered:
            raise QueryError(
                f"attribute {attribute.name!r} is categorical (unordered); a range does not apply"
            )
        return attribute.interval(self.lo, self.hi)


@dataclass(frozen=True)
class Compare(Predicate):
    """``x <op> value`` with op one of ``<``, ``<=``, ``>``, ``>=`` (ordered attributes only)."""

    op: str
    value: Any

    def coverage(self, attribute: Attribute) -> IndexSet:
        if self.op not in ("<", "<=", ">", ">="):
            raise QueryError(f"unknown comparison {self.op!r}")
        if not attribute.ordered:
            raise QueryError(
                f"attribute {attribute.name!r} is categorical (unordered); {self.op!r} does not apply, use = or IN"
            )
        if self.op in ("<", "<="):
            return attribute.interval(None, self.value, hi_open=self.op == "<")
        return attribute.interval(self.value, None, lo_open=self.op == ">")


@dataclass(frozen=True)
class InSet(Predicate):
    """``x IN (v1, v2, ...)``; every value must be in the domain (an empty list covers nothing)."""

    values: tuple[Any, ...]

    def __init__(self, values: Sequence[Any]) -> None:
        object.__setattr__(self, "values", tuple(values))

    def coverage(self, attribute: Attribute) -> IndexSet:
        return attribute.values_in(self.values)


@dataclass(frozen=True)
class Equals(Predicate):
    """``x = value``; the value must be in the domain."""

    value: Any

    def coverage(self, attribute: Attribute) -> IndexSet:
        return attribute.values_in([self.value])


@dataclass(frozen=True)
class Not(Predicate):
    """The complement of another predicate within the attribute."""

    inner: Predicate

    def coverage(self, attribute: Attribute) -> IndexSet:
        return self.inner.coverage(attribute).complement(attribute.size)


@dataclass(frozen=True)
class AnyOf(Predicate):
    """The union of predicates on the same attribute (SQL ``OR`` on one attribute)."""

    parts: tuple[Predicate, ...]

    def coverage(self, attribute: Attribute) -> IndexSet:
        cov = IndexSet.empty()
        for p in self.parts:
            cov = cov | p.coverage(attribute)
        return cov


@dataclass(frozen=True)
class Tautology(Predicate):
    """Every value."""

    def coverage(self, attribute: Attribute) -> IndexSet:
        return attribute.full()


@dataclass(frozen=True)
class Contradiction(Predicate):
    """No value."""

    def coverage(self, attribute: Attribute) -> IndexSet:
        return IndexSet.empty()
