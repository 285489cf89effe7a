"""The privacy definitions as the accountant sees them: one :class:`Measure` each (MATH.md 1, 2, 5, 7).

A measure knows, for its definition:

- how a charge loads a row (:meth:`AdditiveMeasure.weight`: epsilon, rho, mu, an RDP curve; for
  approximate DP the row's whole set of mechanisms, composed by PLD);
- how the per-row loads compose (``comp``, the overlap engine's ``sum`` / ``l2`` / ``vector``) and so what
  the maximum over rows means (MATH.md 2.4);
- its native value from that maximum (:meth:`Measure.native`: the sum itself, mu from a sum of squares,
  the RDP curve) and the conversion of a native value to epsilon at a delta (:meth:`Measure.to_epsilon`,
  the best safe formula of MATH.md 5.8);
- whether per-row loads fit a budget, exactly at the budget (:meth:`Measure.rule`: the filter's tracks,
  its float report and its exact test on Fractions; MATH.md 2.7, and MATH.md 7.8).

The :class:`~overlapdp.privacy.odometer.Odometer` and the
:class:`~overlapdp.privacy.privacy_filter.PrivacyFilter` loop over :data:`MEASURES`; neither names a
definition. (Modelled on dp_accounting's accountants and tumult-core's ``Measure``.) A new definition is
one more module beside these (a :class:`Measure` subclass) and one more entry in :data:`MEASURES`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast

import numpy as np

from overlapdp.exact import float_down, float_up
from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, PureDP, check_rdp_rule
from overlapdp.privacy.measures._checks import NEAR as NEAR
from overlapdp.privacy.measures._checks import (
    _exact_scalar,
    _scalar_check,
)
from overlapdp.privacy.mechanisms import Mechanism
from overlapdp.query import PredicateQuery
from overlapdp.validation import check_finite

Comp = Literal["sum", "l2", "vector"]
Value = float | tuple[float, ...]
B = TypeVar("B", PureDP, ZCDP, GDP, RDP, TCDP, ApproxDP)
G = TypeVar("G")


# -- what a measure reports to the odometer ----------------------------------------------------------------
@dataclass(frozen=True)
class DefinitionGuarantee:
    """One definition's guarantee, sequential and overlap-aware, and both converted to epsilon at delta.

    ``sequential`` / ``overlap`` hold the native parameter (epsilon, rho, mu, the RDP curve, the pair
    (rho, omega) for tCDP, or epsilon at delta for approximate DP). ``exact`` is False when the overlap-aware value is a safe upper bound.

    ``overlap`` is never above ``sequential``: the sequential composition of every charge bounds each
    row's loss too (a row pays a subset of the charges and composition is monotone in adding mechanisms),
    so when an overlap route only reaches a looser safe bound (a search that gave up, the doubling bound
    for replace-one-row) the sequential value is reported instead. ``bound`` says which side gave the
    value: ``"overlap"``, ``"sequential"``, or ``"mixed"`` (RDP: some orders from each side, each order
    being its own guarantee). ``exact`` stays the overlap route's: when the route is exact the two
    agree up to round-off.
    """

    definition: str
    sequential: Value
    overlap: Value
    sequential_epsilon: float
    overlap_epsilon: float
    witness: dict[str, Any] | None
    exact: bool
    method: str
    bound: str = "overlap"

    def to_json(self) -> dict[str, Any]:
        return {
            "sequential": num(self.sequential),
            "overlap": num(self.overlap),
            "sequential_epsilon": num(self.sequential_epsilon),
            "overlap_epsilon": num(self.overlap_epsilon),
            "witness": self.witness,
            "exact": self.exact,
            "method": self.method,
            "bound": self.bound,
        }


def num(x: Value) -> Any:
    """A value for JSON: floats, lists of floats, and null for infinity."""
    if isinstance(x, tuple):
        return [num(v) for v in x]
    return None if math.isinf(x) else float(x)


class AccountingContext(Protocol):
    """The odometer's two overlap-aware routes, which a measure picks (see :meth:`Measure.account`)."""

    def additive_guarantee(
        self,
        measure: AdditiveMeasure[Any, Any],
        queries: list[PredicateQuery],
        loads: np.ndarray,
        delta: float,
    ) -> DefinitionGuarantee: ...

    def approx_guarantee(
        self,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee: ...


# -- what a measure hands to the filter --------------------------------------------------------------------
@dataclass(frozen=True)
class TrackSpec:
    """One overlap index of a filter: its composition, the float load a mechanism puts on it (what the
    index locates the worst row with) and the same load as a Fraction (a tuple of them per RDP order),
    computed from the declared float parameters without rounding. ``squared``: an ``l2`` index fed the
    parameter itself (GDP mu, the advanced rule's epsilon) whose exact load is its square (the index
    squares after normalising: MATH.md 7.8)."""

    comp: Comp
    load: Callable[[Mechanism], Any]
    exact: Callable[[Mechanism], Any]
    squared: bool = False


@dataclass(frozen=True)
class FilterRule:
    """How a filter tests a budget, built by :meth:`Measure.rule`.

    ``check`` maps the per-track float maxima to (fits, reported value); ``exact_ok`` decides admission
    from exact per-track values (Fractions, already within the neighbouring factor). When ``row_verdict``
    is set the rule is a condition on each row's JOINT per-track loads, monotone in every load: holding
    at the per-track maxima (possibly at different rows) suffices, but failing there does not show that
    some row fails, so refusals are decided on actual rows (``row_verdict`` decides a row from its float
    sums, or None when it must be summed exactly). Valid for add/remove neighbours only: under
    replace-one a pair of rows pays neither row's set of charges, and the rule is decided at the
    per-track maxima (MATH.md 2.9). ``optimal``: the non-adaptive (epsilon, delta) filter
    that recomputes the optimal composition on each attempt instead."""

    tracks: tuple[TrackSpec, ...]
    check: Callable[[list[Any]], tuple[bool, Any]]
    exact_ok: Callable[[list[Any]], bool]
    row_verdict: Callable[[np.ndarray], bool | None] | None = None
    optimal: bool = False
    #: For a single scalar track tested as ``load <= limit`` (``exact_ok`` is exactly that): the limit,
    #: already divided by the neighbouring factor, so that a search can compare loads with it directly.
    limit: Fraction | None = None
    #: A charge's reason never to be admitted whatever the loads (tCDP: its omega is below the budget's
    #: and it covers some row), or None: the filter refuses it with that reason before any index changes.
    refuse: Callable[[Mechanism, PredicateQuery], str | None] | None = None
    #: The rule is decided at the per-track (per-component) MAXIMA over every row, not row by row: rows
    #: outside a charge's coverage enter the decision too (the Rényi "some order" rule, MATH.md 2.7.2;
    #: a rule on several tracks without ``row_verdict`` is always so, MATH.md 2.9).
    at_maxima: bool = False

    @property
    def single_sum(self) -> bool:
        """Whether the value is one plain sum per row (pure DP, zCDP): then ``spent()`` is exact."""
        return not self.optimal and len(self.tracks) == 1 and self.tracks[0].comp == "sum"


@dataclass(frozen=True)
class FilterOptions:
    """The filter's options beyond the budget (only the (epsilon, delta) rule reads most of them)."""

    neighbouring: str = "add_remove"
    composition: str = "advanced"
    adaptive: bool = True
    delta_slack: float | None = None
    per_mechanism_delta: float | None = None
    #: Rényi DP budgets over several orders: ``"every"`` order within its budget (the default), or
    #: ``"some"`` order at which every row fits (MATH.md 2.7.2).
    rdp_rule: str = "every"


# -- the measures ----------------------------------------------------------------------------------------
class Measure(ABC, Generic[B]):
    """One privacy definition as the accountant uses it (see the module docstring)."""

    #: The definition's key in reports (``"pure"``, ``"zcdp"``, ...).
    name: ClassVar[str]
    #: Its name in messages (``"pure DP"``, ...).
    label: ClassVar[str]
    #: The guarantee type a budget of this definition has.
    budget_type: ClassVar[type]
    #: Whether a filter's budget of this definition may be raised or lowered in place (keeping its
    #: tracks: RDP on the same orders, tCDP with the same omega, (epsilon, delta) with the same options).
    resettable: ClassVar[bool] = True
    #: The names of a budget's parameters, in the order of its type's fields (what a user gives).
    parameters: ClassVar[tuple[str, ...]]

    def for_orders(self, orders: Sequence[float]) -> Measure[B]:
        """This measure on an RDP order grid (the others do not depend on one)."""
        return self

    def for_budget(self, budget: B) -> Measure[B]:
        """This measure as a filter of ``budget`` uses it (RDP: on the budget's own order grid)."""
        return self

    def grid(self) -> tuple[float, ...] | None:
        """The Rényi orders this measure keeps (RDP), or None."""
        return None

    @abstractmethod
    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        """The odometer's guarantee of the ledger under this definition, or None when some charge has no
        guarantee of this kind. ``earlier``: the definitions already accounted (in :data:`MEASURES`
        order), which a measure may use as valid bounds."""

    @abstractmethod
    def to_epsilon(self, value: Value, delta: float) -> float:
        """The native ``value`` as epsilon at ``delta`` (safe: MATH.md 5.8)."""

    def infinite(self) -> Value:
        """The native value of a loss beyond the float range (what a report shows when the worst row's
        load overflows, MATH.md 7.8): inf, per component where the value has several."""
        return math.inf

    @abstractmethod
    def budget_value(self, budget: B) -> Value:
        """The budget's native value, what a filter reports beside its own value."""

    def check_options(self, options: FilterOptions) -> None:
        """Raise :class:`BudgetError` on a filter option this definition does not take (the Rényi rule
        over several orders is an RDP budget's only)."""
        if check_rdp_rule(options.rdp_rule) != "every":
            raise BudgetError(
                f"rdp_rule applies to a Rényi DP budget over several orders, not to {self.label}"
            )

    @abstractmethod
    def rule(self, budget: B, factor: float, options: FilterOptions) -> FilterRule:
        """The filter's test of ``budget``; ``factor`` is 2 for replace-one-row (the doubling bound:
        additive loads over a symmetric difference are at most twice the largest row's), else 1."""

    def check_reset(self, old: B, new: B) -> None:
        """Raise :class:`BudgetError` unless a filter of ``old`` may take ``new`` in place (its tracks,
        and the conditions its admitted charges met, stay valid)."""

    def fits(self, loads: Sequence[Any], budget: B) -> bool:
        """Whether one row with these exact per-track loads (Fractions, in the units of
        :attr:`TrackSpec.exact`: a sum, a sum of squares for GDP, a tuple per RDP order, or
        ``[sum eps^2, sum delta, sum eps]`` for (epsilon, delta)) fits ``budget``, exactly at the budget
        (add/remove neighbours; MATH.md 2.7)."""
        return self.rule(budget, 1.0, FilterOptions()).exact_ok(list(loads))

    # -- served: one number per budget, quota and charge (the service; the workload planner) ----------
    #: The one number a served budget, quota and per-query charge are given in (its unit in messages).
    amount: ClassVar[str]
    #: A served data set's parameters fixed at registration, beyond its ``delta``.
    fixed: ClassVar[tuple[str, ...]] = ()
    #: Fixed parameters a data set may give INSTEAD of ``fixed`` (RDP: ``orders``, a curve, for ``alpha``).
    alternatives: ClassVar[tuple[str, ...]] = ()

    def amount_of(self, params: Mapping[str, Any]) -> str:
        """The amount of a data set with these fixed ``params`` (:attr:`amount`; RDP over several
        orders: rho)."""
        return self.amount

    def check_fixed(self, given: Mapping[str, Any], definition: str, limit: float) -> dict[str, Any]:
        """A served data set's fixed parameters from ``given``, validated (each a number > 1 and at most
        ``limit``, required), or :class:`BudgetError` naming the parameter."""
        out: dict[str, Any] = {}
        for name in self.fixed:
            if name not in given:
                raise BudgetError(f"a {definition} data set needs {name!r} (a number > 1)")
            out[name] = _order_like(given[name], name, limit)
        return out

    #: Its options beyond those, with their defaults (approximate DP: the filter's ``composition`` rule,
    #: :class:`FilterOptions`).
    options: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: Whether an (epsilon, delta) statement needs a delta (pure DP is (epsilon, 0): none).
    needs_delta: ClassVar[bool] = True
    #: The noise a served count is answered with (:attr:`calibrated` gives its guarantee).
    noise: ClassVar[str] = "discrete_gaussian"
    #: Whether the filter's lazy tables bound the worst row's served amount with no search
    #: (:meth:`PrivacyFilter.spent_bound`): a plain sum per row, or GDP's sum of squares.
    bounded: ClassVar[bool] = False
    #: Whether the served spend and room come from the filter's per-track bounds
    #: (:meth:`track_figures`): RDP at one order, approximate DP's two tracks.
    tracked: ClassVar[bool] = False
    #: Whether one count's noise is calibrated to a budget of it (:data:`overlapdp.mechanisms.calibration
    #: .CountBudget`): the definitions the workload planner and the utility gain take.
    counts: ClassVar[bool] = False
    #: For a count measure: how a count's noise variance falls with the additive cost it is charged
    #: (variance proportional to cost^-noise_power: Laplace epsilon^-2; Gaussian rho^-1, and mu^-2 =
    #: (mu^2)^-1 for GDP), the budget allocation's objective (MATH.md 2.10).
    noise_power: ClassVar[int] = 1
    #: Whether the native value is a pair (tCDP's (rho, omega)), shown as such (not as a curve).
    native_pair: ClassVar[bool] = False
    #: Whether the native value is already epsilon at the report's delta (approximate DP).
    native_is_epsilon: ClassVar[bool] = False
    #: Whether a row's room depends on two tracks jointly (approximate DP: sum eps and sum eps^2), so
    #: that a trial is settled on per-track bounds and reports take every row pattern
    #: (:meth:`joint_figures`).
    joint: ClassVar[bool] = False

    def budget(self, amount: float, params: Mapping[str, Any]) -> B:
        """The library budget of a served ``amount`` under the data set's fixed ``params``."""
        return cast(B, self.budget_type(amount))

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        """A served ``amount`` as epsilon at the data set's delta (MATH.md 5.8, 5.9; safe)."""
        if amount <= 0:
            return 0.0
        return float(self.budget(amount, params).epsilon_at(float(params["delta"])))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> PureDP | ZCDP | GDP:
        """What the noise of a served count charged ``parameter`` is calibrated to (MATH.md 6.2): the
        discrete Gaussian of rho (zCDP, tCDP: rho-zCDP is (rho, inf)-tCDP, MATH.md 5.9)."""
        return ZCDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> PureDP | ZCDP | GDP | RDP:
        """The guarantee a served charge of ``load`` is declared with (the float the ledger holds)."""
        return ZCDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """An epsilon-DP mechanism's cost in the served amount, rounded UP from the exact value: rho =
        eps^2/2 (Bun and Steinke 2016 Prop. 3.3; omega = inf for tCDP; MATH.md 5.9)."""
        return float_up(Fraction(epsilon) ** 2 / 2)

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """What is left of ``quota`` once ``spent`` (an upper bound of the worst row's) is paid, rounded
        DOWN: a load one more charge on the worst row may carry. Additive amounts: the difference."""
        if not spent < quota:
            return 0.0
        return float_down(Fraction(quota) - Fraction(spent))

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """Whether ``upper`` (a safe bound on the worst row's served amount) plus every ``(query, load,
        times)`` in ``added`` stays within ``budget``, exactly: then no row exceeds it, whichever rows
        they cover (a row's sum, MATH.md 1.8, 5.9; the service's charges all have omega = inf)."""
        if upper is None or isinstance(upper, tuple):
            return False
        total = Fraction(upper) + sum((Fraction(load) * times for _, load, times in added), Fraction(0))
        return total <= Fraction(budget)

    def sequential(self, loads: Sequence[float]) -> float:
        """Served charges of ``loads`` composed sequentially, rounded up (the sum)."""
        return float_up(sum((Fraction(x) for x in loads), Fraction(0)))

    def concurrent(self, spends: Sequence[float]) -> float | None:
        """The analysts' spends composed concurrently (MATH.md 3), rounded up: sums (pure DP, Vadhan and
        Wang 2021; zCDP and tCDP, Lyu 2022 Cor. 1; RDP at its order, Lyu 2022 Thm. 2); None when the
        definition has no such rule here."""
        return self.sequential(spends) if spends else 0.0

    def served_spent(self, filt: Any, params: Mapping[str, Any]) -> float:
        """The served spend of a :class:`~overlapdp.privacy.privacy_filter.PrivacyFilter` (its worst
        row's amount, rounded up: :meth:`PrivacyFilter.spent`)."""
        return float(filt.spent())

    def declared_total(self, amount: float) -> Fraction:
        """A total budget of ``amount`` in the units its charges are declared in (the planner's limit):
        the amount itself; GDP mu ``B`` is ``B^2/2``-zCDP (the discrete Gaussian's declaration)."""
        return Fraction(amount)

    def equal_share(self, amount: float, payers: int) -> float:
        """The float start of an equal share of ``amount`` among ``payers`` charges that compose on one
        row: ``B/n`` for additive amounts, ``B/sqrt(n)`` for GDP (MATH.md 2.4)."""
        return amount / payers

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """E|noise| of the continuous mechanism a ``share`` of this definition calibrates for one query of
        ``sensitivity`` (the utility gain's figure, MATH.md 2.6): count definitions only."""
        raise BudgetError(f"no count noise is calibrated to a {self.label} budget here")

    def served_bound(self, filt: Any, search: Callable[[], float]) -> float:
        """A safe bound on the served spend when the filter keeps no per-track tables: its lazy bound
        (:meth:`PrivacyFilter.spent_bound`; RDP: ``search``, the index's own spend)."""
        return float(filt.spent_bound())

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """(spend, room) from a filter's per-track bounds (:attr:`tracked` definitions only)."""
        raise BudgetError(f"{self.label} figures are not taken from per-track bounds")

    def joint_figures(
        self, schema: Any, charges: Sequence[tuple[Any, float, int]], quota: float, params: Mapping[str, Any]
    ) -> tuple[float, float] | None:
        """(spend, room) over every row pattern of ``charges`` (:attr:`joint` definitions), or None."""
        return None


def _order_like(value: Any, name: str, limit: float) -> float:
    """A served parameter that is a number > 1 and at most ``limit`` (tCDP omega, a Rényi order)."""
    v = check_finite(value, name)
    if not (1 < v <= limit):
        raise BudgetError(f"{name} must be a number > 1 and at most {limit:.0e}, got {value!r}")
    return v


def _need(g: G | None, m: Mechanism, what: str) -> G:
    if g is None:
        raise BudgetError(f"{m.name} has no {what} guarantee; it cannot be charged to a {what} budget")
    return g


class AdditiveMeasure(Measure[B], Generic[B, G]):
    """A definition whose per-row loss is the composition ``comp`` of one weight per covering charge
    (MATH.md 2.4): the overlap-aware value is the maximum over rows, which the
    overlap engine computes exactly or bounds safely."""

    comp: ClassVar[Comp] = "sum"

    @abstractmethod
    def guarantee_of(self, m: Mechanism) -> G | None:
        """The mechanism's guarantee under this definition, or None."""

    @abstractmethod
    def weight(self, g: G) -> Value:
        """The per-row weight of one charge with guarantee ``g``."""

    def charge_weight(self, m: Mechanism) -> Value:
        """:meth:`weight` of the mechanism's guarantee, or a :class:`BudgetError` naming the definition."""
        return self.weight(_need(self.guarantee_of(m), m, self.label))

    def native(self, load: np.ndarray, shift: int = 0) -> Value:
        """The native value of a maximum ``load`` (one entry per component; for ``l2`` the normalised sum
        of squares with its power-of-two ``shift``: MATH.md 7.8)."""
        return float(load[0])

    def best_component(self, load: np.ndarray, delta: float) -> int:
        """The component whose witness row a report shows: the one that gives the smallest epsilon."""
        return 0

    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        gs = [self.guarantee_of(m) for m in mechs]
        if any(g is None for g in gs):
            return None
        loads = np.array([self.weight(g) for g in gs if g is not None])
        if loads.ndim == 1:
            loads = loads[:, None]
        return ctx.additive_guarantee(self, queries, loads, delta)

    def rule(self, budget: B, factor: float, options: FilterOptions) -> FilterRule:
        """A per-row sum within the budget: pure DP (Rogers, Roth, Ullman, Vadhan 2016) and zCDP (Feldman
        and Zrnic 2021, the individual Rényi filter at every order; MATH.md 2.7), exactly at the budget."""
        b = self.budget_value(budget)
        assert isinstance(b, float)
        return FilterRule(
            tracks=(
                TrackSpec("sum", self.charge_weight, lambda m: Fraction(cast(float, self.charge_weight(m)))),
            ),
            check=_scalar_check(factor, b),
            exact_ok=_exact_scalar(factor, Fraction(b)),
            limit=Fraction(b) / int(factor),
        )
