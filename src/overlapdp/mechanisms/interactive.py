"""The interactive-mechanism protocol (MATH.md 3.1).

An interactive mechanism answers queries one at a time from its own state (its noise, what it has
answered so far). Before the first query it DECLARES two things that never change:

- ``guarantee``: the privacy it spends in total, whatever the analyst asks (a PureDP, ZCDP, ... value);
- ``coverage``: the part of the domain it reads, a :class:`~overlapdp.query.PredicateQuery` (only rows
  inside that query's coverage influence its answers) or :data:`WHOLE_DOMAIN`.

A compositor (:class:`~overlapdp.mechanisms.concurrent.ConcurrentComposition`) charges the declared
guarantee over the declared coverage when the mechanism is spawned; the mechanism must therefore never
spend beyond its declaration (it refuses or answers "exhausted") and never read outside its coverage
(it refuses such queries with :class:`CoverageError`).
"""

from __future__ import annotations

from typing import Final, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from overlapdp.mechanisms.calibration import PrivacyDefinition
from overlapdp.mechanisms.errors import CoverageError
from overlapdp.query import PredicateQuery

WholeDomain: TypeAlias = Literal["whole domain"]
WHOLE_DOMAIN: Final[WholeDomain] = "whole domain"
Coverage: TypeAlias = PredicateQuery | WholeDomain

Req = TypeVar("Req", contravariant=True)
Ans = TypeVar("Ans", covariant=True)


@runtime_checkable
class InteractiveMechanism(Protocol[Req, Ans]):
    """Takes a query, returns an answer; keeps its own state, declared guarantee and coverage."""

    @property
    def guarantee(self) -> PrivacyDefinition:
        """The total privacy the mechanism may spend (declared before the first query)."""
        ...

    @property
    def coverage(self) -> Coverage:
        """The part of the domain the mechanism reads."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once the mechanism will answer nothing more."""
        ...

    def query(self, request: Req) -> Ans:
        """Answer one request (may be "exhausted"; never spends beyond ``guarantee``)."""
        ...


def check_coverage(coverage: Coverage) -> Coverage:
    if coverage == WHOLE_DOMAIN or isinstance(coverage, PredicateQuery):
        return coverage
    raise CoverageError(f'coverage must be a PredicateQuery or "whole domain", got {coverage!r}')


def within(query: PredicateQuery, coverage: Coverage) -> bool:
    """True iff every row ``query`` counts lies in ``coverage`` (``C_q`` is a subset of it)."""
    if isinstance(coverage, str):
        return True
    if query.schema != coverage.schema:
        return False
    if query.is_contradiction:
        return True
    return all((query.coverage(p) & cov) == query.coverage(p) for p, cov in coverage.constraints)


def require_within(query: PredicateQuery, coverage: Coverage, mechanism: str) -> None:
    """Refuse (CoverageError) a query that reads rows outside the mechanism's declared coverage."""
    if not isinstance(query, PredicateQuery):
        raise CoverageError(f"{mechanism} answers PredicateQuery objects, got {type(query).__name__}")
    if not within(query, coverage):
        name = query.id or query.describe()
        cov = coverage if isinstance(coverage, str) else coverage.describe()
        raise CoverageError(f"query {name!r} reads rows outside {mechanism}'s declared coverage ({cov})")
