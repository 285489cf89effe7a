"""The definitions a data set is served under, the mechanism answering its counts, and the guarantee
over all its analysts: the service's side of :mod:`overlapdp.privacy.measures`.

- :data:`SERVED`: the definitions a data set can be served under, derived from the
  library's measures (:data:`overlapdp.privacy.measures.MEASURES`): pure DP, zCDP, GDP, RDP at one order,
  tCDP and approximate DP, each with its amount and fixed parameters (:func:`check_params`), and
  :func:`epsilon_delta`, the (epsilon, delta) line of an amount (MATH.md 5.8);
- :func:`mechanism_for` and :func:`load_of`: the mechanism answering one counting query under the data
  set's privacy definition and the per-row load it puts on each row it covers;
- :data:`MAX_AMOUNT`, :func:`check_amount` and :func:`mechanism_for`: the ranges of budgets and
  per-query parameters (every calibrated noise scale finite and representable,
  :mod:`overlapdp.mechanisms.calibration`);
- :func:`noisy_counts`: released answers with exact integer noise from the OS CSPRNG and error bars
  (:func:`overlapdp.mechanisms.add_noise`, served mode: a seeded generator is refused);
- :func:`global_guarantee`: the bound over all analysts together by concurrent composition (MATH.md 3.7,
  :func:`overlapdp.privacy.concurrent.concurrent_composition`).

The filters that admit the charges are in :mod:`overlapdp.service.filters`, the sessions' mechanisms in
:mod:`overlapdp.service.sessions`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from overlapdp import display
from overlapdp.exact import float_down
from overlapdp.mechanisms import add_noise, noise_for
from overlapdp.mechanisms.answering import largest_fitting
from overlapdp.privacy import BudgetError
from overlapdp.privacy.definitions import GDP, ZCDP, PureDP, check_delta
from overlapdp.privacy.measures import DEFAULT_DELTA, MEASURES, FilterOptions, Measure
from overlapdp.query.aggregate import Aggregate
from overlapdp.service.responses import RenyiCurve
from overlapdp.validation import check_finite, check_positive

#: The definitions a data set can be served under: the library's measures (one source of truth), each
#: carrying its served amount, fixed parameters and operations (:mod:`overlapdp.privacy.measures`).
SERVED: dict[str, Measure[Any]] = {m.name: m for m in MEASURES}
#: Every per-query parameter name a request may carry (each measure's :attr:`Measure.amount`).
AMOUNTS: tuple[str, ...] = tuple(dict.fromkeys(m.amount for m in MEASURES))


def served(definition: str) -> Measure[Any]:
    """The measure a data set of ``definition`` is served under (:class:`BudgetError` naming the served
    definitions otherwise)."""
    m = SERVED.get(definition) if isinstance(definition, str) else None
    if m is None:
        raise BudgetError(f"privacy definition {definition!r} is not served; use one of {', '.join(SERVED)}")
    return m


def check_params(definition: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """A data set's fixed parameters, validated, with their defaults: ``delta`` (every definition,
    default :data:`DEFAULT_DELTA`), the measure's :attr:`~Measure.fixed` ones (tCDP ``omega``, RDP
    ``alpha``: required, > 1) and its :attr:`~Measure.options` (approximate DP ``composition``: only
    ``"advanced"``, the filter valid under adaptive choice; ``"optimal"`` is refused with
    :class:`AdaptivityError`, MATH.md 2.7)."""
    m = served(definition)
    given = {k: v for k, v in (given or {}).items() if v is not None}
    allowed = {"delta", *m.fixed, *m.alternatives, *(name for name, _ in m.options)}
    for k in given:
        if k not in allowed:
            raise BudgetError(
                f"a {definition} data set has no parameter {str(k)[:40]!r}; its parameters are "
                + ", ".join(repr(a) for a in sorted(allowed))
            )
    out: dict[str, Any] = {"delta": check_delta(check_finite(given.get("delta", DEFAULT_DELTA), "delta"))}
    if out["delta"] == 0:
        raise BudgetError("delta must be greater than 0 (the delta of the data set's (epsilon, delta) lines)")
    out.update(m.check_fixed(given, definition, MAX_AMOUNT))
    for name, default in m.options:  # checked by building the filter's rule once (raises on a bad one)
        value = given.get(name, default)
        m.rule(m.budget(1.0, out), 1.0, FilterOptions(**{name: value}))
        out[name] = value
    return out


def budget_of(definition: str, amount: float, params: Mapping[str, Any]) -> Any:
    """The library budget of ``amount`` under the data set's definition and parameters."""
    return served(definition).budget(amount, params)


def epsilon_delta(definition: str, params: Mapping[str, Any], amount: float) -> dict[str, float]:
    """``amount`` of the data set's definition as (epsilon, delta)-DP at the data set's delta (MATH.md 5.8,
    5.9, :meth:`Measure.epsilon_line`, each safe): pure DP is epsilon itself; zCDP, tCDP (orders up to
    omega) and one-order RDP by the RDP conversion (Balle et al. 2020 Thm. 21); GDP as the
    ``mu^2/2``-zCDP the discrete Gaussian is declared as; approximate DP: the filter's epsilon already
    holds at the budget's delta."""
    return {"epsilon": _epsilon_at(definition, _key(params), float(amount)), "delta": float(params["delta"])}


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    # (a curve's orders are a list: a tuple in the cache's key)
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


def amount_name(definition: str, params: Mapping[str, Any]) -> str:
    """The amount of a data set of ``definition`` with ``params`` (:meth:`Measure.amount_of`): what its
    budget, quotas and per-query parameters are given in (an RDP curve: ``rho``)."""
    return served(definition).amount_of(params)


def orders_of(params: Mapping[str, Any]) -> tuple[float, ...]:
    """A data set's Rényi orders when it is served as a curve (RDP with ``orders``), else ()."""
    return tuple(float(a) for a in params.get("orders") or ())


def curve_of(definition: str, params: Mapping[str, Any], amount: float) -> list[float]:
    """An amount of a curve data set as its curve, one epsilon(alpha) per order: the Gaussian curve
    alpha ``amount`` rounded up, which bounds the worst row's curve when ``amount`` bounds its spend
    (MATH.md 2.7.2)."""
    return list(served(definition).budget(amount, params).epsilons)


def curve_figures(
    definition: str, params: Mapping[str, Any], spent: float, limit: float
) -> RenyiCurve | None:
    """A curve data set's ``spent`` and ``limit`` (quota or budget) per order (:func:`curve_of`), for
    the answers' ``curve``; None for every other data set."""
    orders = orders_of(params)
    if not orders:
        return None
    return RenyiCurve(
        orders=list(orders),
        spent=curve_of(definition, params, spent),
        limit=curve_of(definition, params, limit),
    )


def within_curve(definition: str, params: Mapping[str, Any], budgets: Sequence[float]) -> float:
    """The largest amount (rho) whose curve stays within the given per-order ``budgets`` at every order
    (:func:`curve_of` of it at most each), rounded down to 6 significant digits: a curve data set's
    budget or quota given per order."""
    orders = orders_of(params)
    if not orders:
        raise BudgetError("per-order budgets are for an rdp data set served as a curve ('orders')")
    if isinstance(budgets, str | bytes) or len(budgets) != len(orders):
        raise BudgetError(f"give one budget per order: {len(orders)} orders {list(orders)}")
    limit = [check_amount("each per-order budget", b) for b in budgets]
    rho = min(float_down(Fraction(b) / Fraction(a)) for a, b in zip(orders, limit, strict=True))
    rho = float(display.remaining(rho)) if rho > 0 else rho

    def fits(r: float) -> bool:
        return all(e <= b for e, b in zip(curve_of(definition, params, r), limit, strict=True))

    while rho > 0 and not fits(rho):
        rho = math.nextafter(rho, 0.0)
    if not rho > 0:
        raise BudgetError("the per-order budgets leave no positive rho")
    return rho


def calibrate_amount(definition: str, params: Mapping[str, Any], epsilon: float) -> float:
    """The largest amount (to a relative 1e-12, rounded down to 6 significant digits) whose (epsilon,
    delta) line at the data set's delta (:func:`epsilon_delta`, the figure every answer reports) is at
    most ``epsilon``: bisection whose lower end always satisfies it (:class:`BudgetError` when no
    positive amount does). For definitions the CLI does not calibrate (tcdp, rdp)."""
    target = check_positive(epsilon, "epsilon")

    def fits(b: float) -> bool:
        return _epsilon_at(definition, _key(params), b) <= target

    return largest_fitting(
        fits,
        target,
        MAX_AMOUNT,
        f"epsilon = {epsilon!r} at delta = {params['delta']:g} is below what the conversion certifies "
        f"for any {amount_name(definition, params)} > 0; ask for a larger epsilon or delta",
    )


@functools.lru_cache(maxsize=4096)
def _epsilon_at(definition: str, key: tuple[tuple[str, Any], ...], amount: float) -> float:
    return served(definition).epsilon_line(amount, dict(key))


#: Largest budget, quota or per-query parameter the service takes. It keeps every sum of loads the
#: filters form finite (10^15 times any realistic number of charges is far below the float range), and
#: no privacy is left at such values anyway.
MAX_AMOUNT = 1e15


def check_amount(name: str, value: Any) -> float:
    """A budget or per-query parameter: a positive finite number at most :data:`MAX_AMOUNT`."""
    v = check_positive(value, name)
    if v > MAX_AMOUNT:
        raise BudgetError(f"{name} must be at most {MAX_AMOUNT:.0e}, got {value!r}")
    return v


@dataclass(frozen=True)
class ServedMechanism:
    """The mechanism answering one count (sensitivity 1 under add/remove) and what it is charged.

    ``parameter`` is the query's amount in the data set's definition, which is also its per-row load
    (MATH.md 2.4). The noise (MATH.md 6.2; calibration by ``overlapdp.mechanisms``, which rounds scales
    up so that the declared guarantee holds) is the measure's :meth:`~Measure.calibrated`:

    - pure DP and approximate DP: the discrete Laplace of ``epsilon`` (an (epsilon, 0) charge);
    - zCDP and tCDP: the discrete Gaussian of ``rho`` (Canonne, Kamath, Steinke 2020), rho-zCDP, which is
      (rho, inf)-tCDP (MATH.md 5.9): every charge meets the budget's omega;
    - GDP: the discrete Gaussian with sigma = 1/mu, DECLARED as mu^2/2-zCDP (no proof that it is mu-GDP is
      known, :mod:`overlapdp.mechanisms.calibration`); the GDP filter's exact per-row test
      sum mu^2 <= B^2 is the zCDP filter at rho = mu^2/2 exactly, so the data set is B^2/2-zCDP;
    - RDP of order alpha: the discrete Gaussian of rho = epsilon_alpha / alpha rounded DOWN, whose
      (alpha, alpha rho)-RDP is within the declared epsilon_alpha.
    """

    definition: str
    parameter: float
    alpha: float = 0.0
    orders: tuple[float, ...] = ()

    def _params(self) -> dict[str, Any]:
        return {"orders": list(self.orders)} if self.orders else {"alpha": self.alpha}

    @property
    def guarantee(self) -> PureDP | ZCDP | GDP:
        """What the noise is calibrated to."""
        return served(self.definition).calibrated(self.parameter, self._params())

    def to_json(self) -> dict[str, Any]:
        m = served(self.definition)
        params = self._params()
        out: dict[str, Any] = {
            "name": m.noise,
            "definition": self.definition,
            m.amount_of(params): self.parameter,
        }
        if self.orders:
            out["orders"] = list(self.orders)
        elif "alpha" in m.fixed:
            out["alpha"] = self.alpha
            out["rho"] = self.guarantee.rho  # type: ignore[union-attr]
        return out


def mechanism_for(
    definition: str, parameter: float, params: Mapping[str, Any] | None = None
) -> ServedMechanism:
    """The mechanism for a per-query parameter, refused (:class:`BudgetError` naming the parameter)
    unless it lies in the service's range and its noise scale is representable
    (:func:`overlapdp.mechanisms.noise_for`: epsilon >= 2^-40, rho >= 2^-81)."""
    m = served(definition)
    given = params or {}
    orders = orders_of(given)
    alpha = float(given.get("alpha", 0.0)) if "alpha" in m.fixed and not orders else 0.0
    mech = ServedMechanism(definition, check_amount(m.amount_of(given), parameter), alpha, orders)
    try:
        noise_for(mech.guarantee)  # raises before anything is counted or drawn
    except BudgetError as exc:
        if alpha:  # the message names rho: say which amount it came from
            raise BudgetError(
                f"{m.amount} = {parameter!r} is too small at alpha = {alpha!r} ({exc})"
            ) from None
        raise
    return mech


def load_of(definition: str, parameter: float) -> float:
    """The additive per-row load of one charge: the query's amount itself (epsilon, rho, mu or
    epsilon_alpha: each definition's per-row loads compose by its ``comp``, MATH.md 2.4)."""
    served(definition)
    return float(parameter)


def pure_to_definition(definition: str, epsilon: float, params: Mapping[str, Any] | None = None) -> float:
    """An epsilon-DP mechanism's (a session's) cost in the data set's amount, rounded UP from the exact
    value (:meth:`Measure.from_pure`, MATH.md 5.8, 5.9): pure and approximate DP: epsilon; zCDP and tCDP:
    rho = eps^2/2 (Bun and Steinke 2016 Prop. 3.3; omega = inf); GDP: mu = epsilon, whose declared
    mu^2/2-zCDP is that same rho; RDP of order alpha: min(eps, alpha eps^2/2) (Mironov 2017 Prop. 3)."""
    return served(definition).from_pure(epsilon, params or {})


def _defaults(m: Measure[Any]) -> dict[str, Any]:
    """Parameters for a filter built without a data set's (tests, :func:`batch_cost`)."""
    return {"omega": math.inf, "alpha": 2.0} if m.fixed else {}


def remaining(definition: str, quota: float, spent: float, params: Mapping[str, Any] | None = None) -> float:
    """What is left of ``quota`` once ``spent`` (an upper bound of the worst row's spend) is paid, in the
    data set's amount, rounded DOWN (never more than what is truly left): :meth:`Measure.remaining`
    (GDP: sqrt(quota^2 - spent^2); approximate DP: the smaller of the basic and advanced rooms)."""
    return served(definition).remaining(quota, spent, params or {})


# -- noise ----------------------------------------------------------------------------------------


def noisy_counts(true_counts: Sequence[int], mechanism: ServedMechanism) -> list[dict[str, Any]]:
    """Release each count plus exact integer noise (OS CSPRNG, served mode) with a 95% interval."""
    answers = add_noise(list(true_counts), mechanism.guarantee, level=0.95, served=True)
    return [_count_json(a) for a in answers]


def _count_json(a: Any) -> dict[str, Any]:
    return {"count": a.value, "stddev": a.std, "ci95": [a.low, a.high], "noise": a.noise.describe()}


def noisy_aggregates(
    true_counts: Sequence[int],
    true_sums: Sequence[int | None],
    aggregates: Sequence[Aggregate],
    mechanism: ServedMechanism,
) -> list[dict[str, Any]]:
    """The released answers of :func:`noisy_released` (as JSON)."""
    return noisy_released(true_counts, true_sums, aggregates, mechanism)[0]


def noisy_released(
    true_counts: Sequence[int],
    true_sums: Sequence[int | None],
    aggregates: Sequence[Aggregate],
    mechanism: ServedMechanism,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Counts as :func:`noisy_counts`; a sum or mean by the library's own noise
    (:func:`overlapdp.mechanisms.sums.add_sum_noise` / ``add_mean_noise``, served mode) at the query's
    per-query guarantee ``mechanism.guarantee``, its noise scaled to the sum's add/remove sensitivity
    (MATH.md 2.8, 6.4). So each query, whatever it aggregates, is ``mechanism.parameter``-private for its
    rows and is charged as a count of the same rows (the same per-row load)."""
    from overlapdp.mechanisms.sums import add_mean_noise, add_sum_noise

    out: list[dict[str, Any]] = []
    drawn: list[Any] = []  # the library's answers, for consistent answers (MATH.md 6.5.1)
    for i, agg in enumerate(aggregates):
        clip = agg.clipping
        if clip is None:
            (a,) = add_noise([true_counts[i]], mechanism.guarantee, level=0.95, served=True)
            out.append(_count_json(a))
            drawn.append(a)
            continue
        units = true_sums[i]
        assert units is not None
        if agg.kind == "sum":
            (s,) = add_sum_noise([units], clip, mechanism.guarantee, level=0.95, served=True)
            drawn.append(s)
            out.append(
                {
                    "aggregate": "sum",
                    **clip.to_json(),
                    "answer": s.value,
                    "stddev": s.std,
                    "ci95": [s.low, s.high],
                    "noise": s.noise.describe(),
                }
            )
            continue
        (m,) = add_mean_noise([units], [true_counts[i]], clip, mechanism.guarantee, level=0.95, served=True)
        drawn.append(m)
        out.append(
            {
                "aggregate": "mean",
                **clip.to_json(),
                "answer": m.value,
                "ci95": [m.low, m.high],
                "parts": {
                    "split": "half the query's budget each",
                    "sum": {
                        "answer": m.sum.value,
                        "stddev": m.sum.std,
                        "interval": [m.sum.low, m.sum.high],
                        "level": m.sum.level,
                    },
                    "count": {
                        "answer": m.count.value,
                        "stddev": m.count.std,
                        "interval": [m.count.low, m.count.high],
                        "level": m.count.level,
                    },
                },
            }
        )
    return out, drawn


# -- the guarantee over all analysts ----------------------------------------------------------------


def global_guarantee(
    definition: str,
    analyst_spent: list[float],
    global_spent: float,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The guarantee for all analysts together, even colluding and interleaving, in the data set's amount,
    with its (epsilon, delta) line.

    Two safe bounds, the smaller reported: the data set's own per-row filter over every charge (filters
    extend to concurrent composition, Haney et al. 2023, MATH.md 3.6), and the concurrent composition of
    the analysts' spends (MATH.md 3), rounded up from the exact value: pure DP sums (Vadhan and Wang
    2021); zCDP and tCDP rho sum (Lyu 2022 Corollary 1; omega is the data set's for every analyst); RDP
    sums at the order (Lyu 2022 Theorem 2); GDP as declared zCDP, mu^2/2 summing, so mu composes in l2.
    Approximate DP: only the global filter (the analysts' deltas would add), ``by_concurrent_composition``
    is left out.
    """
    m = served(definition)
    p = dict(params) if params is not None else _defaults(m)
    composed = m.concurrent([s for s in analyst_spent if s > 0])
    value = global_spent if composed is None else min(global_spent, composed)
    return {
        "definition": definition,
        m.amount_of(p): value,
        "by_global_filter": global_spent,
        "by_concurrent_composition": composed,
        "epsilon_delta": epsilon_delta(definition, p, value),
    }
