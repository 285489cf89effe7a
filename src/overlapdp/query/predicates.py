"""Predicates on one attribute: each is a rule that yields its coverage, a subset of the attribute's
value indices (MATH.md 1.3: $C_\\phi(A_j) \\subseteq A_j$).

Missing values follow SQL's three-valued logic (MATH.md 1.1: the missing value is one more value
of the attribute's domain, see :mod:`overlapdp.schema.attributes`). On the missing value a comparison,
``=``, ``IN`` or a range is UNKNOWN, not FALSE, and NOT keeps UNKNOWN; only TRUE is counted. So
``x < 30``, ``x != 'a'``, ``x NOT IN ('a')`` and ``NOT (x < 30)`` all leave out rows where ``x`` is
missing, ``x IS NULL`` covers only them and ``x IS NOT NULL`` every other value. :class:`Truth` carries
the TRUE and UNKNOWN sets of a predicate so that NOT, AND and OR follow Kleene's tables exactly.

Every leaf predicate must name the domain: a value that is not in it, an inverted range and a range
covering no value raise :class:`~overlapdp.errors.DomainValueError` (see
:mod:`overlapdp.schema.attributes`). Combinations of valid leaves may be empty (``Not(Tautology())``,
two disjoint ranges intersected by a query): that is a well-formed contradiction, not an error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from overlapdp.errors import QueryError
from overlapdp.schema import Attribute, IndexSet


@dataclass(frozen=True)
class Truth:
    """A predicate's value on each value index of an attribute, in three-valued logic.

    ``true`` holds the indices where it is TRUE, ``unknown`` those where it is UNKNOWN (only ever the
    missing value), every other index is FALSE. A row is counted iff its value is in ``true``.
    """

    true: IndexSet
    unknown: IndexSet = field(default_factory=IndexSet.empty)

    @staticmethod
    def everything(attribute: Attribute) -> Truth:
        return Truth(attribute.full())

    @staticmethod
    def comparison(attribute: Attribute, true: IndexSet) -> Truth:
        """A comparison with a value: UNKNOWN on the missing value, two-valued elsewhere."""
        null = attribute.null_set()
        return Truth(true & null.complement(attribute.size), null)

    def negate(self, attribute: Attribute) -> Truth:
        """NOT: TRUE and FALSE swap, UNKNOWN stays UNKNOWN."""
        return Truth((self.true | self.unknown).complement(attribute.size), self.unknown)

    def both(self, other: Truth) -> Truth:
        """AND (Kleene): TRUE iff both are; FALSE iff either is; UNKNOWN otherwise."""
        true = self.true & other.true
        maybe = (self.true | self.unknown) & (other.true | other.unknown)
        return Truth(true, _minus(maybe, true))

    def either(self, other: Truth) -> Truth:
        """OR (Kleene): TRUE iff either is; FALSE iff both are; UNKNOWN otherwise."""
        true = self.true | other.true
        return Truth(true, _minus(self.unknown | other.unknown, true))

    def is_false(self) -> bool:
        """FALSE on every value (not merely never TRUE)."""
        return not self.true and not self.unknown


def _minus(a: IndexSet, b: IndexSet) -> IndexSet:
    if not b or not a:
        return a
    return a & b.complement(max(a.intervals[-1][1], b.intervals[-1][1]))


class Predicate(ABC):
    """A condition on one attribute."""

    @abstractmethod
    def coverage(self, attribute: Attribute) -> IndexSet:
        """The value indices of ``attribute`` that satisfy the predicate (where it is TRUE)."""

    def truth(self, attribute: Attribute) -> Truth:
        """TRUE and UNKNOWN sets; by default a comparison with a value (UNKNOWN on the missing one)."""
        return Truth.comparison(attribute, self.coverage(attribute))


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
    """The negation of another predicate within the attribute (SQL NOT: the complement of its TRUE
    and UNKNOWN values, so ``NOT (x < 30)`` leaves out the missing value as ``x < 30`` does)."""

    inner: Predicate

    def coverage(self, attribute: Attribute) -> IndexSet:
        return self.truth(attribute).true

    def truth(self, attribute: Attribute) -> Truth:
        return self.inner.truth(attribute).negate(attribute)


@dataclass(frozen=True)
class AnyOf(Predicate):
    """The union of predicates on the same attribute (SQL ``OR`` on one attribute)."""

    parts: tuple[Predicate, ...]

    def coverage(self, attribute: Attribute) -> IndexSet:
        return self.truth(attribute).true

    def truth(self, attribute: Attribute) -> Truth:
        out = Truth(IndexSet.empty())
        for p in self.parts:
            out = out.either(p.truth(attribute))
        return out


@dataclass(frozen=True)
class Tautology(Predicate):
    """Every value, the missing one included (no condition at all)."""

    def coverage(self, attribute: Attribute) -> IndexSet:
        return attribute.full()

    def truth(self, attribute: Attribute) -> Truth:
        return Truth(attribute.full())


@dataclass(frozen=True)
class Contradiction(Predicate):
    """No value (FALSE everywhere, so ``NOT`` of it is a tautology)."""

    def coverage(self, attribute: Attribute) -> IndexSet:
        return IndexSet.empty()

    def truth(self, attribute: Attribute) -> Truth:
        return Truth(IndexSet.empty())


@dataclass(frozen=True)
class IsNull(Predicate):
    """``x IS NULL`` (``negated``: ``x IS NOT NULL``); only on an attribute that allows missing values.

    On an attribute without ``"missing": true`` it is refused: ``IS NULL`` would be an always-empty
    query and ``IS NOT NULL`` a tautology, either way a sign that the analyst expects missing values
    the schema rules out (such rows are errors or dropped, by the schema's ``"outside"`` policy).
    """

    negated: bool = False

    def coverage(self, attribute: Attribute) -> IndexSet:
        return self.truth(attribute).true

    def truth(self, attribute: Attribute) -> Truth:
        if not attribute.missing:
            raise QueryError(
                f"attribute {attribute.name!r} allows no missing value (its schema entry has no "
                f'"missing": true), so IS {"NOT " if self.negated else ""}NULL does not apply'
            )
        return Truth(attribute.present() if self.negated else attribute.null_set())
