"""Noisy counts with an error bar in every answer (MATH.md 6.2).

Each count gets independent exact integer noise calibrated to its per-query budget
(:mod:`overlapdp.mechanisms.calibration`); each answer carries a confidence interval for the true count
at the requested level, computed from the exact noise distribution (:mod:`overlapdp.mechanisms.noise`).
:func:`noisy_counts` takes the TOTAL budget of the release, as every other entry point does
(:func:`~overlapdp.mechanisms.plan_answers`, :class:`~overlapdp.privacy.PrivacyFilter`,
:class:`~overlapdp.mechanisms.ConcurrentComposition`): it is shared evenly over the maximum overlap
(MATH.md 2.2, 2.6) and the answers say what they spent (:class:`CountAnswers`). :func:`add_noise` is the
low-level step: every count at one per-query budget, charging left to the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp.mechanisms.calibration import CountBudget, check_sensitivity, declared_guarantee, noise_for
from overlapdp.mechanisms.counting import Counter, DataLike
from overlapdp.mechanisms.errors import MechanismError
from overlapdp.mechanisms.noise import Noise
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.privacy.definitions import GDP, ZCDP, ApproxDP, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.validation import check_level


@dataclass(frozen=True)
class NoisyAnswer:
    """One released count: ``value = q(D) + noise`` and the interval ``[low, high]`` that contains
    ``q(D)`` with probability at least ``level`` (exactly ``P(|noise| <= value - low)``)."""

    value: int
    low: int
    high: int
    level: float
    noise: Noise
    guarantee: PureDP | ZCDP
    query_id: str | None = None

    @property
    def std(self) -> float:
        """The noise's standard deviation."""
        return math.sqrt(self.noise.variance)

    def to_json(self) -> dict[str, object]:
        """The answer as the CLI's JSON and the service give it: the noisy value is ``answer``, its
        interval ``error_bar`` (``level``, ``low``, ``high``), whatever the aggregate."""
        return {
            "id": self.query_id,
            **answer_fields(self.value, self.low, self.high, self.level),
            "noise": self.noise.describe(),
            "noise_std": self.std,
        }


def answer_fields(value: float, low: float, high: float, level: float) -> dict[str, object]:
    """The one JSON shape of a released value and its error bar on every surface (the CLI's JSON,
    ``to_json`` of each answer, the service's ``answer`` and ``error_bar``)."""
    return {"answer": value, "error_bar": {"level": level, "low": low, "high": high}}


def add_noise(
    true_counts: Sequence[int] | npt.NDArray[np.int64],
    budget: CountBudget,
    *,
    sensitivity: int = 1,
    level: float = 0.95,
    ids: Sequence[str | None] | None = None,
    rng: RngLike = None,
    served: bool = False,
) -> list[NoisyAnswer]:
    """Noisy versions of exact counts, one per entry, each calibrated to ``budget``.

    Every count is released with independent noise, so each answer alone is ``budget``-private; the
    whole batch costs the composition of per-query budgets over the rows (the accountant's job).
    """
    check_sensitivity(sensitivity)
    lv = check_level(level)
    noise = noise_for(budget, sensitivity)
    declared = declared_guarantee(budget)
    source = resolve_source(rng, served=served)
    counts = np.asarray(true_counts, dtype=np.int64)
    if ids is not None and len(ids) != counts.size:
        raise ValueError("ids must have one entry per count")
    if counts.size == 1:  # one count: a pooled draw avoids numpy's per-call cost
        draws = np.array([noise.sample(source)], dtype=np.int64)
    else:
        draws = noise.sample_many(source, counts.size)

    values = (counts + draws).tolist()
    w = noise.half_width(lv)
    return [
        NoisyAnswer(v, v - w, v + w, lv, noise, declared, None if ids is None else ids[i])
        for i, v in enumerate(values)
    ]


class CountAnswers(list[NoisyAnswer]):
    """Noisy counts, one per query in order (a list), and what releasing them spent.

    ``budget``: the total asked for, as declared (None when only ``per_query`` was given); ``per_query``:
    each count's declared guarantee; ``gamma``: the maximum overlap of the queries (a safe upper bound
    when the search gave up, MATH.md 2.2); ``spent``: the declared per-query guarantee composed over the
    ``gamma`` queries of the worst row (MATH.md 2.4), the loss of the whole release, within ``budget``.
    """

    def __init__(
        self,
        answers: Sequence[NoisyAnswer],
        *,
        budget: PureDP | ZCDP | None,
        per_query: PureDP | ZCDP,
        gamma: int,
        spent: PureDP | ZCDP,
    ) -> None:
        super().__init__(answers)
        self.budget = budget
        self.per_query = per_query
        self.gamma = gamma
        self.spent = spent

    def summary(self) -> str:
        """One line for people, figures rounded up (:mod:`overlapdp.display`)."""
        from overlapdp import display

        name, spent = _named(self.spent)
        of = "" if self.budget is None else f" of {display.spent(_named(self.budget)[1])}"
        return (
            f"spent {name} = {display.spent(spent)}{of} on {len(self)} counts "
            f"(max overlap {self.gamma}, {name} = {display.spent(_named(self.per_query)[1])} each)"
        )


def _named(g: PureDP | ZCDP) -> tuple[str, float]:
    return ("epsilon", g.epsilon) if isinstance(g, PureDP) else ("rho", g.rho)


#: A total budget for :func:`noisy_counts`: a definition's value, or a number in ``definition``'s unit.
TotalBudget = PureDP | ZCDP | GDP | ApproxDP | float | int


def _definition_and_value(budget: TotalBudget, definition: str | None) -> tuple[str, float]:
    """The definition and the total in its unit (epsilon, rho or mu) of a budget given either way."""
    typed: tuple[str, float] | None = None
    if isinstance(budget, PureDP):
        typed = ("pure", budget.epsilon)
    elif isinstance(budget, ApproxDP):
        if budget.delta != 0:
            raise MechanismError(
                "noisy counts are calibrated to PureDP, ZCDP or GDP budgets; "
                "an ApproxDP budget with delta > 0 is not supported (convert it first)"
            )
        typed = ("pure", budget.epsilon)
    elif isinstance(budget, ZCDP):
        typed = ("zcdp", budget.rho)
    elif isinstance(budget, GDP):
        typed = ("gdp", budget.mu)
    if typed is not None:
        if definition is not None and definition != typed[0]:
            raise MechanismError(f"budget {budget} is a {typed[0]} budget, not {definition!r}")
        return typed
    from overlapdp.mechanisms.answering import check_budget

    return definition or "pure", check_budget(budget)


def noisy_counts(
    queries: Sequence[PredicateQuery],
    data: DataLike,
    budget: TotalBudget | None = None,
    *,
    definition: str | None = None,
    per_query: CountBudget | None = None,
    sensitivity: int = 1,
    level: float = 0.95,
    rng: RngLike = None,
    served: bool = False,
) -> CountAnswers:
    """Noisy counts of a batch of predicate queries within the TOTAL ``budget``, as
    :func:`~overlapdp.mechanisms.plan_answers` and :class:`~overlapdp.privacy.PrivacyFilter` take it.

    ``budget`` is a :class:`PureDP`, :class:`ZCDP` or :class:`GDP` (or ``ApproxDP(epsilon, 0)``), or a
    number in ``definition``'s unit (``"pure"`` epsilon by default, ``"zcdp"`` rho, ``"gdp"`` mu; the
    numbers :func:`~overlapdp.mechanisms.plan_answers` accepts). It is shared evenly and overlap-aware:
    each count gets the largest equal per-query budget whose composition over the maximum overlap
    ``gamma`` stays within the total (MATH.md 2.4, 2.6). ``per_query=`` instead calibrates every count to
    that per-query budget (the whole release then spends it ``gamma`` times). The result is a list of
    answers that also says what it spent (:class:`CountAnswers`).

    ``data`` is a count function or a table of any kind :meth:`Counter.of` accepts (pandas, Polars eager
    or lazy, Arrow, a DuckDB relation, Spark, an encoded table or an engine), counted in one pass.
    """
    qs = list(queries)
    if (budget is None) == (per_query is None):
        raise MechanismError(
            "give either the total budget (noisy_counts(queries, data, PureDP(1.0))) or per_query=, "
            "not both and not neither"
        )
    from overlapdp.mechanisms.answering import plan_answers

    if budget is not None:
        d, value = _definition_and_value(budget, definition)
        plan = plan_answers(qs, value, d, "overlap", level=level)
        share: CountBudget = plan.per_query_budget
        gamma = plan.gamma
        total: PureDP | ZCDP | None = declared_guarantee(_typed(d, value))
    else:
        assert per_query is not None
        share = per_query
        total = None
        gamma = _max_overlap(qs)
    source = resolve_source(rng, served=served)
    exact = Counter.of(data).count_many(qs)
    answers = add_noise(
        exact, share, sensitivity=sensitivity, level=level, ids=[q.id for q in qs], rng=source
    )
    each = declared_guarantee(share)
    spent: PureDP | ZCDP = (
        PureDP.compose([each] * gamma) if isinstance(each, PureDP) else ZCDP.compose([each] * gamma)
    )
    return CountAnswers(answers, budget=total, per_query=each, gamma=gamma, spent=spent)


def _typed(definition: str, value: float) -> CountBudget:
    from overlapdp.mechanisms.answering import count_budget

    return count_budget(definition, value)  # type: ignore[arg-type]


def _max_overlap(queries: list[PredicateQuery]) -> int:
    """The maximum overlap (count), or the floor of its safe upper bound (as :func:`plan_answers`)."""
    if not queries:
        return 0
    from overlapdp.mechanisms.answering import DEFAULT_EFFORT
    from overlapdp.overlap import max_overlap

    res = max_overlap(queries, comp="count", effort=DEFAULT_EFFORT)
    return max(1, math.floor(float(res.value if res.exact else res.upper) + 1e-9))


def noisy_count(
    query: PredicateQuery,
    data: DataLike,
    budget: TotalBudget | None = None,
    *,
    definition: str | None = None,
    per_query: CountBudget | None = None,
    sensitivity: int = 1,
    level: float = 0.95,
    rng: RngLike = None,
    served: bool = False,
) -> NoisyAnswer:
    """One noisy count of a predicate query within ``budget`` (one query: its total is its own)."""
    return noisy_counts(
        [query],
        data,
        budget,
        definition=definition,
        per_query=per_query,
        sensitivity=sensitivity,
        level=level,
        rng=rng,
        served=served,
    )[0]
