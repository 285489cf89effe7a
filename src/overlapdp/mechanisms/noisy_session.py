"""NoisyCounts: an interactive session that answers predicate counting queries one by one, charging
each answer's per-query guarantee to the session's own budget (MATH.md 2, 6).

The session declares its total budget as its guarantee (pure DP or zCDP; a GDP total is declared as
``mu^2/2``-zCDP, see :mod:`overlapdp.mechanisms.calibration`). Each query is admitted by a filter that
keeps the composed cost within that budget; a query that does not fit raises
:class:`~overlapdp.mechanisms.errors.BudgetExceededError` and reads no data and charges nothing. By
default the filter sums costs (sequential composition, always safe); an overlap-aware filter can be
replaced by the privacy package's overlap-aware per-row filter (``overlap_aware=True`` with a schema, or
a coverage query that names one): a query then costs only the rows it covers, so queries on disjoint
parts of the domain compose in parallel (MATH.md 2.1, 2.7; valid adaptively: Rogers et al. 2016 for pure DP,
Feldman and Zrnic 2021 for zCDP). Each answer is charged its DECLARED per-query guarantee.
"""

from __future__ import annotations

from overlapdp.mechanisms._noisy_counts import NoisyAnswer
from overlapdp.mechanisms.accounting import OverlapFilter, declared_mechanism
from overlapdp.mechanisms.calibration import CountBudget, check_sensitivity, declared_guarantee, noise_for
from overlapdp.mechanisms.counting import Counter, DataLike
from overlapdp.mechanisms.errors import CoverageError, MechanismError
from overlapdp.mechanisms.filters import SequentialFilter
from overlapdp.mechanisms.interactive import WHOLE_DOMAIN, Coverage, check_coverage, require_within
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.privacy.definitions import ZCDP, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.validation import check_level


class NoisyCounts:
    """Answers ``query -> NoisyAnswer`` with noise calibrated to ``per_query``, within ``budget``."""

    def __init__(
        self,
        data: DataLike,
        *,
        budget: CountBudget,
        per_query: CountBudget,
        sensitivity: int = 1,
        coverage: Coverage = WHOLE_DOMAIN,
        level: float = 0.95,
        rng: RngLike = None,
        served: bool = False,
        overlap_aware: bool = True,
        schema: Schema | None = None,
    ) -> None:
        self._guarantee = declared_guarantee(budget)
        self._cost = declared_guarantee(per_query)
        if type(self._cost) is not type(self._guarantee):
            raise MechanismError(
                f"per-query budget {per_query} and session budget {budget} must be of the same kind"
            )
        self._sensitivity = check_sensitivity(sensitivity)
        self.noise = noise_for(per_query, self._sensitivity)
        self._coverage = check_coverage(coverage)
        self._level = check_level(level)
        self._half_width = self.noise.half_width(self._level)
        self._source = resolve_source(rng, served=served)
        self._counter = Counter.of(data)
        if schema is None and isinstance(self._coverage, PredicateQuery):
            schema = self._coverage.schema
        self._overlap = (
            OverlapFilter(schema, self._guarantee) if overlap_aware and schema is not None else None
        )
        self._sequential = SequentialFilter(self._guarantee)
        self._cost_mechanism = declared_mechanism(self._cost)
        self.answered = 0

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return self._guarantee

    @property
    def per_query(self) -> PureDP | ZCDP:
        return self._cost

    @property
    def coverage(self) -> Coverage:
        return self._coverage

    @property
    def overlap_aware(self) -> bool:
        return self._overlap is not None

    @property
    def exhausted(self) -> bool:
        """True when a query covering the whole declared coverage can no longer be charged (with
        overlap-aware accounting, narrower queries on rows with budget left may still fit)."""
        if self._overlap is None:
            return not self._sequential.can_charge(self._cost)
        value = self._overlap.filter.value()
        assert isinstance(value, float)
        return _exceeds(self._guarantee, value, self._cost)

    def query(self, request: PredicateQuery) -> NoisyAnswer:
        """One noisy count; charged before the noisy value leaves (refused: nothing read or charged)."""
        require_within(request, self._coverage, "this noisy-count session")
        if self._overlap is None:
            self._sequential.charge(self._cost)
        else:
            if request.schema != self._overlap.schema:
                raise CoverageError("the query's schema is not the session's schema")
            self._overlap.charge(self._cost_mechanism, request)
        value = self._counter.count(request) + self.noise.sample(self._source)
        self.answered += 1
        w = self._half_width
        return NoisyAnswer(value, value - w, value + w, self._level, self.noise, self._cost, request.id)


def _exceeds(total: PureDP | ZCDP, used: float, cost: PureDP | ZCDP) -> bool:
    """Whether one more ``cost`` on the most loaded row would pass ``total`` (as the filter compares)."""
    if isinstance(total, PureDP) and isinstance(cost, PureDP):
        return used + cost.epsilon > total.epsilon
    assert isinstance(total, ZCDP) and isinstance(cost, ZCDP)
    return used + cost.rho > total.rho
