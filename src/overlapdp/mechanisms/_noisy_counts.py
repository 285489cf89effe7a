"""Noisy counts with an error bar in every answer (MATH.md 6.2).

Each count gets independent exact integer noise calibrated to its per-query budget
(:mod:`overlapdp.mechanisms.calibration`); each answer carries a confidence interval for the true count
at the requested level, computed from the exact noise distribution (:mod:`overlapdp.mechanisms.noise`).
Charging the budget is the caller's (or the accountant's) business: one answer costs its declared
per-query guarantee, a batch is charged by the accountant (by maximum overlap, MATH.md 2.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp.mechanisms.calibration import CountBudget, check_sensitivity, declared_guarantee, noise_for
from overlapdp.mechanisms.counting import Counter, DataLike
from overlapdp.mechanisms.noise import Noise
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.privacy.definitions import ZCDP, PureDP
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
        return {
            "id": self.query_id,
            "value": self.value,
            "interval": [self.low, self.high],
            "level": self.level,
            "std": self.std,
            "noise": self.noise.describe(),
        }


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


def noisy_counts(
    queries: Sequence[PredicateQuery],
    data: DataLike,
    budget: CountBudget,
    *,
    sensitivity: int = 1,
    level: float = 0.95,
    rng: RngLike = None,
    served: bool = False,
) -> list[NoisyAnswer]:
    """Noisy counts of a batch of predicate queries, each calibrated to the per-query ``budget``.

    ``data`` is a count function or a table of any kind :meth:`Counter.of` accepts (pandas, Polars eager
    or lazy, Arrow, a DuckDB relation, Spark, an encoded table or an engine), counted in one pass.
    """
    source = resolve_source(rng, served=served)
    exact = Counter.of(data).count_many(list(queries))
    return add_noise(
        exact, budget, sensitivity=sensitivity, level=level, ids=[q.id for q in queries], rng=source
    )


def noisy_count(
    query: PredicateQuery,
    data: DataLike,
    budget: CountBudget,
    *,
    sensitivity: int = 1,
    level: float = 0.95,
    rng: RngLike = None,
    served: bool = False,
) -> NoisyAnswer:
    """One noisy count of a predicate query, calibrated to ``budget``."""
    return noisy_counts([query], data, budget, sensitivity=sensitivity, level=level, rng=rng, served=served)[
        0
    ]
