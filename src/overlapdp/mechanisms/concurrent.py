"""Concurrent composition of interactive mechanisms (MATH.md 3).

:class:`ConcurrentComposition` spawns interactive mechanisms (:class:`SparseVector`,
:class:`GuessAndCheck`, :class:`NoisyCounts`, or any :class:`InteractiveMechanism`) on one data set and
lets callers interleave queries to them in any order, as colluding analysts might.

- Spawning charges the child's DECLARED guarantee over its DECLARED coverage, once, to an overlap-aware
  per-row filter (:class:`overlapdp.privacy.privacy_filter.PrivacyFilter`): the child is admitted only if
  every row's composed cost stays within the total budget; otherwise it is refused, never runs, and
  nothing is charged. Every valid filter extends to concurrent composition (Haney et al. CCS 2023,
  arXiv 2309.05901), and a row outside a child's coverage cannot influence that child (MATH.md 1.8), so
  children on disjoint coverages compose in parallel.
- A child never spends beyond its declaration (its own guarantee is proven for any sequence of
  queries: SVT and Guess-and-Check stop after ``c`` positives / failures, a noisy-count session has its
  own filter), so queries to children are never charged again.
- :meth:`ConcurrentComposition.joint_guarantee` reports the guarantee of all children together by the
  concurrent composition theorems (pure DP: Vadhan and Wang 2021, sum of epsilons; zCDP: Lyu 2022
  Corollary 1, sum of rhos; (epsilon, delta): Lyu 2022 Theorem 1, the optimal non-interactive
  composition), computed by :func:`overlapdp.privacy.concurrent_composition` without using coverage;
  :meth:`ConcurrentComposition.overlap_value` is the tighter per-row value the filter enforces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from overlapdp.mechanisms.accounting import OverlapFilter, declared_mechanism
from overlapdp.mechanisms.counting import Counter, DataLike
from overlapdp.mechanisms.errors import BudgetExceededError, CoverageError, MechanismError
from overlapdp.mechanisms.guess_and_check import GuessAndCheck
from overlapdp.mechanisms.interactive import WHOLE_DOMAIN, InteractiveMechanism, check_coverage
from overlapdp.mechanisms.noisy_session import NoisyCounts
from overlapdp.mechanisms.randomness import RandomSource, RngLike, resolve_source
from overlapdp.mechanisms.sparse_vector import SparseVector
from overlapdp.privacy.concurrent import ConcurrentGuarantee, concurrent_composition
from overlapdp.privacy.definitions import GDP, ZCDP, ApproxDP, PureDP
from overlapdp.schema import Schema

#: Builds a child from the compositor's data source and randomness.
Factory = Callable[[Counter, RandomSource], InteractiveMechanism[Any, Any]]


@dataclass(frozen=True)
class Child:
    """A spawned child: its id, declared guarantee and coverage (the mechanism itself stays inside)."""

    id: str
    kind: str
    guarantee: PureDP | ApproxDP | ZCDP | GDP
    coverage: str


class ConcurrentComposition:
    """Spawns interactive mechanisms within a total ``budget`` and routes interleaved queries to them."""

    def __init__(
        self,
        data: DataLike,
        schema: Schema,
        budget: PureDP | ZCDP | GDP | ApproxDP,
        *,
        rng: RngLike = None,
        served: bool = False,
    ) -> None:
        self.schema = schema
        self.budget = budget
        self._counter = Counter.of(data)
        self._source = resolve_source(rng, served=served)
        self._filter = OverlapFilter(schema, budget)
        self._children: dict[str, tuple[Child, InteractiveMechanism[Any, Any]]] = {}
        self._lock = threading.Lock()

    # -- spawning -------------------------------------------------------------------------------------
    def spawn(self, factory: Factory, *, id: str | None = None) -> Child:
        """Build a child, charge its declared guarantee over its coverage, and keep it.

        Raises :class:`BudgetExceededError` (nothing charged, the child discarded) when the child's
        declaration does not fit in what remains of the budget on some row it covers.
        """
        child = factory(self._counter, self._source)
        if not isinstance(child, InteractiveMechanism):
            raise MechanismError(
                "a factory must return an interactive mechanism (guarantee, coverage, query)"
            )
        guarantee = child.guarantee
        coverage = check_coverage(child.coverage)
        if coverage != WHOLE_DOMAIN and coverage.schema != self.schema:
            raise CoverageError("the child's coverage is over another schema")
        mechanism = declared_mechanism(guarantee)
        with self._lock:
            cid = id if id is not None else f"child-{len(self._children) + 1}"
            if cid in self._children:
                raise MechanismError(f"a child with id {cid!r} already exists")
            query = None if coverage == WHOLE_DOMAIN else coverage.with_id(cid)
            adm = self._filter.filter.try_charge(mechanism, query, id=cid)
            if not adm.admitted:
                raise BudgetExceededError(
                    f"child {cid!r} declares {guarantee}, more than remains of the budget {self.budget} "
                    f"on the rows it covers (value with it {adm.value}); refused, nothing charged"
                )
            described = "whole domain" if coverage == WHOLE_DOMAIN else coverage.describe()
            info = Child(cid, type(child).__name__, guarantee, described)  # type: ignore[arg-type]
            self._children[cid] = (info, child)
        return info

    def spawn_sparse_vector(self, *, id: str | None = None, **params: Any) -> Child:
        """Spawn a :class:`SparseVector` (keyword parameters as its constructor's, without data/rng)."""
        return self.spawn(lambda data, rng: SparseVector(data, rng=rng, **params), id=id)

    def spawn_guess_and_check(self, *, id: str | None = None, **params: Any) -> Child:
        """Spawn a :class:`GuessAndCheck`: noise scales, or ``epsilon`` for :meth:`GuessAndCheck.from_budget`."""
        if "epsilon" in params:
            return self.spawn(lambda data, rng: GuessAndCheck.from_budget(data, rng=rng, **params), id=id)
        return self.spawn(lambda data, rng: GuessAndCheck(data, rng=rng, **params), id=id)

    def spawn_noisy_counts(self, *, id: str | None = None, **params: Any) -> Child:
        """Spawn a :class:`NoisyCounts` session (overlap-aware inside when it knows the schema)."""
        params.setdefault("schema", self.schema)
        return self.spawn(lambda data, rng: NoisyCounts(data, rng=rng, **params), id=id)

    # -- queries ----------------------------------------------------------------------------------------
    def query(self, child_id: str, request: Any) -> Any:
        """Send ``request`` to one child; its answer comes back unchanged (nothing further is charged)."""
        try:
            _, child = self._children[child_id]
        except KeyError:
            raise MechanismError(f"no child with id {child_id!r}") from None
        with self._lock:  # children keep state: one query at a time
            return child.query(request)

    def child(self, child_id: str) -> Child:
        try:
            return self._children[child_id][0]
        except KeyError:
            raise MechanismError(f"no child with id {child_id!r}") from None

    @property
    def children(self) -> tuple[Child, ...]:
        return tuple(info for info, _ in self._children.values())

    def exhausted(self, child_id: str) -> bool:
        self.child(child_id)
        return self._children[child_id][1].exhausted

    # -- guarantees -----------------------------------------------------------------------------------
    def joint_guarantee(self) -> ConcurrentGuarantee:
        """The children's joint guarantee by the concurrent composition theorems (MATH.md 3)."""
        if not self._children:
            raise MechanismError("no child has been spawned")
        return concurrent_composition([info.guarantee for info in self.children])

    def overlap_value(self) -> float | tuple[float, ...]:
        """The per-row (overlap-aware) value the filter keeps within the budget (epsilon, rho, mu, ...)."""
        return self._filter.filter.value()
