"""Noisy clipped sums and means with error bars (MATH.md 2.8, 6.4).

A sum of attribute ``c`` over a query's rows, each value clipped to DECLARED bounds ``[lo, hi]`` and
rounded to the declared resolution ``step`` (:class:`~overlapdp.query.aggregate.Clipping`), is an
integer ``S`` in units of ``step``; one row moves it by at most ``Delta = max(|L|, |H|)`` (add/remove)
or ``max(H - L, |L|, |H|)`` (replace-one-row; ``H - L`` if the query covers every row the data may
hold, each adding a value: :meth:`~overlapdp.query.aggregate.Clipping.sensitivity`), ``L = lo/step``,
``H = hi/step`` (:meth:`~overlapdp.query.aggregate.Clipping.sensitivity`). The exact integer noise of
:mod:`overlapdp.mechanisms.calibration` at sensitivity ``Delta`` makes the release ``step * (S + Z)``
exactly as private as a count is at sensitivity 1 under the same budget: discrete Laplace of scale
``Delta/epsilon`` is ``epsilon``-DP, discrete Gaussian with ``sigma^2 = Delta^2/(2 rho)`` is
``rho``-zCDP (CKS 2020; MATH.md 6.4). The error bar is for the clipped, rounded sum, ``step`` times the
count's bar at the same noise.

A mean is post-processing of a noisy sum and a noisy count of the same rows, each given HALF the
query's budget (:func:`split_budget`: ``epsilon/2``, ``rho/2``, ``mu/sqrt 2``; the two halves compose
to the query's declared charge in exact arithmetic, and the query is charged once, on the rows it
covers). Its value is ``S/C`` clamped to ``[lo, hi]`` (``(lo+hi)/2`` when the noisy count is below 1),
and its error bar is conservative interval arithmetic: each half's bar at level ``1 - (1 - level)/2`` so
both hold together with probability at least ``level`` (union bound), then the hull of the four
quotients of their ends, intersected with ``[lo, hi]`` (all of ``[lo, hi]`` when the count's bar reaches
0), rounded outwards to floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from overlapdp.exact import float_down, float_up
from overlapdp.mechanisms._noisy_counts import NoisyAnswer, add_noise, answer_fields
from overlapdp.mechanisms.calibration import CountBudget, declared_guarantee, noise_for
from overlapdp.mechanisms.noise import Noise
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.privacy.definitions import GDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.query.aggregate import Clipping, Neighbouring
from overlapdp.schema import Schema
from overlapdp.validation import check_level


@dataclass(frozen=True)
class NoisySum:
    """One released clipped sum: ``value = step * units``, ``units = S + noise``; ``[low, high]``
    contains the true clipped sum with probability at least ``level``."""

    value: float
    low: float
    high: float
    level: float
    units: int
    units_low: int
    units_high: int
    clipping: Clipping
    sensitivity: int
    noise: Noise
    guarantee: PureDP | ZCDP
    query_id: str | None = None

    @property
    def std(self) -> float:
        """The standard deviation of the noise on the sum (in the column's units)."""
        return float(self.clipping.step) * math.sqrt(self.noise.variance)

    def to_json(self) -> dict[str, Any]:
        """As :meth:`NoisyAnswer.to_json` (``answer``, ``error_bar``), with the clipping, the sum's
        sensitivity in the column's units and its noise."""
        return {
            "id": self.query_id,
            **answer_fields(self.value, self.low, self.high, self.level),
            "aggregate": "sum",
            **self.clipping.to_json(),
            "sensitivity": self.sensitivity * self.clipping.step,
            "noise": self.noise.describe(),
            "noise_std": self.std,
        }


@dataclass(frozen=True)
class NoisyMean:
    """A mean released as post-processing of a noisy sum and a noisy count (module doc)."""

    value: float
    low: float
    high: float
    level: float
    sum: NoisySum
    count: NoisyAnswer
    guarantee: PureDP | ZCDP  # the query's whole charge (both halves)
    query_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As :meth:`NoisyAnswer.to_json` (``answer``, ``error_bar``), with the clipping and the two
        halves it is computed from in ``parts`` (each its ``answer``, ``error_bar`` and noise)."""
        halves = {
            name: {
                k: v for k, v in part.to_json().items() if k in ("answer", "error_bar", "noise", "noise_std")
            }
            for name, part in (("sum", self.sum), ("count", self.count))
        }
        return {
            "id": self.query_id,
            **answer_fields(self.value, self.low, self.high, self.level),
            "aggregate": "mean",
            **self.sum.clipping.to_json(),
            "parts": {"split": "half the query's budget each", **halves},
        }


def split_budget(budget: CountBudget) -> CountBudget:
    """The half of a per-query budget given to each part of a mean: two such halves compose (MATH.md 2.8:
    epsilons and rhos add) to at most ``budget``'s declared charge, checked in exact arithmetic.

    ``epsilon/2`` (pure), ``rho/2`` (zCDP), ``mu/sqrt(2)`` (GDP, declared as ``mu^2/4``-zCDP each),
    rounded down where the float is not exact."""
    if isinstance(budget, ApproxDP):
        if budget.delta != 0:
            raise BudgetError("a mean is calibrated to PureDP, ZCDP or GDP budgets")
        budget = PureDP(budget.epsilon)
    whole = declared_guarantee(budget)
    limit = Fraction(whole.epsilon if isinstance(whole, PureDP) else whole.rho)
    if isinstance(budget, PureDP):
        half: float = budget.epsilon / 2
    elif isinstance(budget, ZCDP):
        half = budget.rho / 2
    elif isinstance(budget, GDP):
        half = budget.mu / math.sqrt(2)
    else:
        raise BudgetError(f"cannot split a {type(budget).__name__} budget")
    for _ in range(64):
        part: CountBudget = (
            PureDP(half)
            if isinstance(budget, PureDP)
            else ZCDP(half)
            if isinstance(budget, ZCDP)
            else GDP(half)
        )
        g = declared_guarantee(part)
        if 2 * Fraction(g.epsilon if isinstance(g, PureDP) else g.rho) <= limit:
            return part
        half = math.nextafter(half, 0.0)
    raise BudgetError("could not split the budget of a mean (internal error)")


def add_sum_noise(
    true_units: Sequence[int],
    clipping: Clipping,
    budget: CountBudget,
    *,
    neighbouring: Neighbouring = "add_remove",
    covers_all: bool = False,
    schema: Schema | None = None,
    level: float = 0.95,
    ids: Sequence[str | None] | None = None,
    rng: RngLike = None,
    served: bool = False,
) -> list[NoisySum]:
    """Noisy versions of exact clipped sums (in units of ``clipping.step``, as the engines' ``sums``
    return them), each ``budget``-private under ``neighbouring`` (module doc; ``covers_all``: the queries
    cover the whole domain, which lowers the replace-one sensitivity to ``H - L`` only when ``schema``
    keeps no row that adds nothing to a sum, see :meth:`Clipping.sensitivity`)."""
    lv = check_level(level)
    sensitivity = clipping.sensitivity(neighbouring, covers_all=covers_all, schema=schema)
    try:  # checked first so that the error names the sum
        noise_for(budget, sensitivity)
    except BudgetError as exc:
        raise BudgetError(f"sum of {clipping.column!r} (sensitivity {sensitivity} steps): {exc}") from None
    source = resolve_source(rng, served=served)
    counts = add_noise(list(true_units), budget, sensitivity=sensitivity, level=lv, ids=ids, rng=source)
    step = Fraction(clipping.step)
    return [
        NoisySum(
            value=_scaled(step, c.value, 0),
            low=_scaled(step, c.low, -1),
            high=_scaled(step, c.high, 1),
            level=lv,
            units=c.value,
            units_low=c.low,
            units_high=c.high,
            clipping=clipping,
            sensitivity=sensitivity,
            noise=c.noise,  # the noise actually drawn
            guarantee=c.guarantee,
            query_id=c.query_id,
        )
        for c in counts
    ]


def _scaled(step: Fraction, units: int, direction: int) -> float:
    """``step * units`` as a float: nearest (0), rounded down (-1) or up (1); exact when it can be."""
    if step.denominator == 1 and abs(step.numerator * units) < 2**53:
        return float(step.numerator * units)  # an exact float: no rounding either way
    x = step * units
    return float(x) if direction == 0 else float_down(x) if direction < 0 else float_up(x)


def mean_of(
    noisy_sum: NoisySum, noisy_count: NoisyAnswer, guarantee: PureDP | ZCDP, level: float
) -> NoisyMean:
    """Post-processing: the mean and its conservative interval from a noisy sum and a noisy count whose
    own bars are each at level ``1 - (1 - level)/2`` (module doc)."""
    lo_u, hi_u = noisy_sum.clipping.units
    step = Fraction(noisy_sum.clipping.step)
    c = noisy_count.value
    if c >= 1:
        est = min(max(Fraction(noisy_sum.units, c), Fraction(lo_u)), Fraction(hi_u))
    else:
        est = Fraction(lo_u + hi_u, 2)
    if noisy_count.low >= 1:
        quotients = [
            Fraction(s, n)
            for s in (noisy_sum.units_low, noisy_sum.units_high)
            for n in (noisy_count.low, noisy_count.high)
        ]
        low = max(min(quotients), Fraction(lo_u))
        high = min(max(quotients), Fraction(hi_u))
    else:  # the count's bar reaches 0: only the clipping bounds are known
        low, high = Fraction(lo_u), Fraction(hi_u)
    return NoisyMean(
        value=float(step * est),
        low=float_down(step * low),
        high=float_up(step * high),
        level=level,
        sum=noisy_sum,
        count=noisy_count,
        guarantee=guarantee,
        query_id=noisy_sum.query_id,
    )


def add_mean_noise(
    true_units: Sequence[int],
    true_counts: Sequence[int],
    clipping: Clipping,
    budget: CountBudget,
    *,
    neighbouring: Neighbouring = "add_remove",
    level: float = 0.95,
    ids: Sequence[str | None] | None = None,
    rng: RngLike = None,
    served: bool = False,
) -> list[NoisyMean]:
    """Noisy means: per query a noisy sum and a noisy count, each at :func:`split_budget` of ``budget``
    and error-bar level ``1 - (1 - level)/2``, then :func:`mean_of` (module doc)."""
    lv = check_level(level)
    if len(true_units) != len(true_counts):
        raise ValueError("one sum and one count per query")
    half = split_budget(budget)
    part_level = 1 - (1 - lv) / 2
    source = resolve_source(rng, served=served)
    sums = add_sum_noise(
        true_units, clipping, half, neighbouring=neighbouring, level=part_level, ids=ids, rng=source
    )
    counts = add_noise(list(true_counts), half, level=part_level, ids=ids, rng=source)
    whole = declared_guarantee(budget)
    return [mean_of(s, c, whole, lv) for s, c in zip(sums, counts, strict=True)]
