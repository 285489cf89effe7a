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
one more subclass here and one more entry in :data:`MEASURES`.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast

import numpy as np

from overlapdp.errors import AdaptivityError as AdaptivityError
from overlapdp.exact import float_down, float_up, sqrt_down, sqrt_up
from overlapdp.overlap.magnitude import unscale_up
from overlapdp.privacy import approx_rooms
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP
from overlapdp.privacy.neighbouring import DEFAULT_DELTA as DEFAULT_DELTA
from overlapdp.query import PredicateQuery

Comp = Literal["sum", "l2", "vector"]
Value = float | tuple[float, ...]
B = TypeVar("B", PureDP, ZCDP, GDP, RDP, TCDP, ApproxDP)
G = TypeVar("G")

# The filter decides in EXACT arithmetic of the declared (float) costs. The overlap index locates the
# worst row on float sums (exact up to about 1e-12 relative): when the witness is this close to the
# budget, the maximum over all row patterns is recomputed with Fractions (or the charge is refused).
NEAR = Fraction(1, 10**9)


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

    def served_spent(self, filt: Any) -> float:
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


class PureMeasure(AdditiveMeasure[PureDP, PureDP]):
    """Pure epsilon-DP: per-row sum of epsilons (MATH.md 2.4)."""

    name = "pure"
    noise_power = 2
    label = "pure DP"
    budget_type = PureDP
    parameters = ("epsilon",)

    def guarantee_of(self, m: Mechanism) -> PureDP | None:
        return m.pure()

    def weight(self, g: PureDP) -> float:
        return g.epsilon

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return PureDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: PureDP) -> float:
        return budget.epsilon

    amount = "epsilon"
    needs_delta = False
    noise = "discrete_laplace"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Laplace of scale sensitivity / epsilon: E|Y| is the scale."""
        return sensitivity / share

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        return max(float(amount), 0.0)

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> PureDP:
        """The discrete Laplace of epsilon (MATH.md 6.2)."""
        return PureDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> PureDP:
        return PureDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        return epsilon


class ZCDPMeasure(AdditiveMeasure[ZCDP, ZCDP]):
    """rho-zCDP: per-row sum of rho (Bun-Steinke 2016 Lemma 2.3; MATH.md 2.4)."""

    name = "zcdp"
    label = "zCDP"
    budget_type = ZCDP
    parameters = ("rho",)

    def guarantee_of(self, m: Mechanism) -> ZCDP | None:
        return m.zcdp()

    def weight(self, g: ZCDP) -> float:
        return g.rho

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return ZCDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: ZCDP) -> float:
        return budget.rho

    amount = "rho"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Gaussian of sigma = sensitivity / sqrt(2 rho): E|Y| = sigma sqrt(2/pi)."""
        return sensitivity / math.sqrt(2 * share) * math.sqrt(2 / math.pi)


class GDPMeasure(AdditiveMeasure[GDP, GDP]):
    """mu-GDP: per-row $\\sqrt{\\sum\\mu^2}$ (Dong-Roth-Su 2022 Cor. 3.3; MATH.md 2.4); the loads are mu,
    squared after normalising by a power of two so that they neither underflow nor overflow (MATH.md 7.8)."""

    name = "gdp"
    label = "Gaussian DP"
    budget_type = GDP
    parameters = ("mu",)
    comp = "l2"

    def guarantee_of(self, m: Mechanism) -> GDP | None:
        return m.gdp()

    def weight(self, g: GDP) -> float:
        return g.mu

    def native(self, load: np.ndarray, shift: int = 0) -> Value:
        # mu = 2^shift sqrt(load), rounded up (the loads are normalised squares).
        return unscale_up("l2", float(load[0]), shift, "Gaussian DP mu")

    def to_epsilon(self, value: Value, delta: float) -> float:
        assert isinstance(value, float)
        return GDP(value).epsilon_at(delta) if math.isfinite(value) else math.inf

    def budget_value(self, budget: GDP) -> float:
        return budget.mu

    amount = "mu"
    bounded = True
    counts = True

    def expected_abs_noise(self, share: float, sensitivity: float) -> float:
        """Gaussian of sigma = sensitivity / mu: E|Y| = sigma sqrt(2/pi)."""
        return sensitivity / share * math.sqrt(2 / math.pi)

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        """As the ``mu^2/2``-zCDP the discrete Gaussian is declared as (GDP's own profile is not claimed:
        :mod:`overlapdp.mechanisms.calibration`)."""
        if amount <= 0:
            return 0.0
        return float(ZCDP(float_up(Fraction(amount) ** 2 / 2)).epsilon_at(float(params["delta"])))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> GDP:
        """The discrete Gaussian of sigma = 1/mu, declared as mu^2/2-zCDP (MATH.md 6.2)."""
        return GDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> GDP:
        return GDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """mu = epsilon, whose declared mu^2/2-zCDP is the eps^2/2 of an epsilon-DP mechanism."""
        return epsilon

    def declared_total(self, amount: float) -> Fraction:
        return Fraction(amount) ** 2 / 2

    def equal_share(self, amount: float, payers: int) -> float:
        return amount / math.sqrt(payers)

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """sqrt(quota^2 - spent^2), rounded down: rows compose as sqrt(sum mu^2) (MATH.md 2.4), so a
        quota of 1 with 0.6 spent leaves 0.8, not 0.4."""
        if not spent < quota:
            return 0.0
        return sqrt_down(Fraction(quota) ** 2 - Fraction(spent) ** 2)

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """A row's sum of mu^2 (the service's filters: add/remove neighbours) within the budget's square."""
        if upper is None or isinstance(upper, tuple):
            return False
        squares = Fraction(upper) ** 2 + sum(
            (Fraction(load) ** 2 * times for _, load, times in added), Fraction(0)
        )
        return squares <= Fraction(budget) ** 2

    def sequential(self, loads: Sequence[float]) -> float:
        """mu composes in l2 (Dong-Roth-Su 2022 Cor. 3.3; MATH.md 2.4)."""
        total = sum((Fraction(x) ** 2 for x in loads), Fraction(0))
        return GDP.compose([GDP(x) for x in loads]).mu if total > 0 else 0.0

    def rule(self, budget: GDP, factor: float, options: FilterOptions) -> FilterRule:
        """Per-row $\\sum\\mu^2\\le B^2$ (Smith and Thakurta 2022, fully adaptive GDP; MATH.md 2.7), the exact
        test on the squares of the declared mu."""
        return FilterRule(
            tracks=(
                TrackSpec(
                    "l2",
                    lambda m: _need(m.gdp(), m, self.label).mu,
                    lambda m: Fraction(_need(m.gdp(), m, self.label).mu) ** 2,
                    squared=True,
                ),
            ),
            check=_gdp_check(factor, budget.mu),
            exact_ok=_exact_scalar(factor, Fraction(budget.mu) ** 2),
            limit=Fraction(budget.mu) ** 2 / int(factor),
        )


@dataclass(frozen=True)
class RDPMeasure(AdditiveMeasure[RDP, RDP]):
    """Rényi DP on a fixed order grid: per order, the per-row sum of epsilon(alpha) (Mironov 2017 Prop. 1;
    MATH.md 2.4: the maximum may sit at a different row for each order)."""

    orders: tuple[float, ...] = field(default=tuple(conv.DEFAULT_ORDERS))
    name: ClassVar[str] = "rdp"
    label: ClassVar[str] = "Rényi DP"
    budget_type: ClassVar[type] = RDP
    parameters: ClassVar[tuple[str, ...]] = ("orders", "epsilons")
    comp: ClassVar[Comp] = "vector"
    # Served: the library's RDP budget is a curve on an order grid; the service keeps one number per
    # budget, quota and charge, so it serves Renyi DP of ONE order alpha fixed by the data set (Mironov
    # 2017, (alpha, epsilon)-RDP): the curve of that one order.
    amount: ClassVar[str] = "epsilon_alpha"
    fixed: ClassVar[tuple[str, ...]] = ("alpha",)
    tracked: ClassVar[bool] = True

    def for_orders(self, orders: Sequence[float]) -> RDPMeasure:
        return RDPMeasure(tuple(orders))

    def for_budget(self, budget: RDP) -> RDPMeasure:
        return self.for_orders(budget.orders)

    def guarantee_of(self, m: Mechanism) -> RDP | None:
        return m.rdp(self.orders)

    def weight(self, g: RDP) -> tuple[float, ...]:
        return g.epsilons

    def native(self, load: np.ndarray, shift: int = 0) -> Value:
        return tuple(float(v) for v in load)

    def best_component(self, load: np.ndarray, delta: float) -> int:
        """The order minimising the conversion (Balle et al. 2020 Thm. 21; MATH.md 5.8)."""
        a = np.asarray(self.orders)
        vals = load + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
        return int(np.argmin(vals))

    def to_epsilon(self, value: Value, delta: float) -> float:
        """The conversion minimised over the orders whose epsilon is finite (inf when none is)."""
        assert isinstance(value, tuple)
        kept = [(a, e) for a, e in zip(self.orders, value, strict=True) if math.isfinite(e)]
        if not kept:
            return math.inf
        return RDP(tuple(a for a, _ in kept), tuple(e for _, e in kept)).epsilon_at(delta)

    def budget_value(self, budget: RDP) -> tuple[float, ...]:
        return budget.epsilons

    def budget(self, amount: float, params: Mapping[str, Any]) -> RDP:
        return RDP((params["alpha"],), (amount,))

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> ZCDP:
        """The discrete Gaussian of rho = epsilon_alpha / alpha rounded DOWN, whose (alpha, alpha rho)-RDP
        is within the declared epsilon_alpha."""
        return ZCDP(float_down(Fraction(parameter) / Fraction(params["alpha"])))

    def charged(self, load: float, params: Mapping[str, Any]) -> RDP:
        return RDP((params["alpha"],), (load,))

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        """min(eps, alpha eps^2/2) at the order alpha (Mironov 2017 Prop. 3; Bun and Steinke 2016)."""
        alpha = Fraction(params["alpha"])
        return float_up(min(Fraction(epsilon), alpha * Fraction(epsilon) ** 2 / 2))

    def served_spent(self, filt: Any) -> float:
        v = filt.value()
        return float(v[0] if isinstance(v, tuple) else v)

    def served_bound(self, filt: Any, search: Callable[[], float]) -> float:
        return search()

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """A plain sum per row at the one order."""
        spent = float_up(tracks[0][0])
        return spent, self.remaining(quota, spent, params)

    def infinite(self) -> Value:
        return tuple(math.inf for _ in self.orders)

    def check_reset(self, old: RDP, new: RDP) -> None:
        if new.orders != old.orders:
            raise BudgetError("an RDP filter's budget can change only on the same orders")

    def rule(self, budget: RDP, factor: float, options: FilterOptions) -> FilterRule:
        """Per order, the per-row sum within the budget's epsilon(alpha) (Feldman and Zrnic 2021, the
        individual Rényi filter; MATH.md 2.7), on the budget's own order grid."""
        orders = budget.orders
        fx = Fraction(int(factor))
        bounds = tuple(Fraction(e) for e in budget.epsilons)
        return FilterRule(
            tracks=(
                TrackSpec(
                    "vector",
                    lambda m: list(_need(m.rdp(orders), m, self.label).epsilons),
                    lambda m: tuple(Fraction(e) for e in _need(m.rdp(orders), m, self.label).epsilons),
                ),
            ),
            check=_vector_check(factor, np.array(budget.epsilons)),
            exact_ok=lambda v: all(fx * x <= b for x, b in zip(v[0], bounds, strict=True)),
        )


class TCDPMeasure(AdditiveMeasure[TCDP, TCDP]):
    """(rho, omega)-truncated CDP (Bun, Dwork, Rothblum, Steinke 2018; MATH.md 2.4, 5.9). A row
    covered by charges $(\\rho_i,\\omega_i)$ is $(\\sum\\rho_i,\\min\\omega_i)$-tCDP (composition), so the
    worst row is the pair $(\\max_x\\sum_{q\\ni x}\\rho_q,\\ \\min\\omega)$ with the minimum over the charges
    that cover some row: the smallest pair (larger rho, smaller omega is weaker) that every row satisfies.
    The rho part is a plain per-row ``sum``, computed as zCDP's is; the native value is the pair."""

    name = "tcdp"
    label = "truncated CDP"
    budget_type = TCDP
    parameters = ("rho", "omega")
    amount = "rho"
    fixed = ("omega",)
    native_pair = True

    def budget(self, amount: float, params: Mapping[str, Any]) -> TCDP:
        return TCDP(amount, params["omega"])

    def guarantee_of(self, m: Mechanism) -> TCDP | None:
        return m.tcdp()

    def weight(self, g: TCDP) -> float:
        return g.rho

    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        """The rho part is the odometer's additive route on the rhos (or zCDP's result itself when every
        charge's rho IS its zCDP rho: the same loads give the same maximum); omega is the smallest over
        all charges sequentially and over the charges covering some row overlap-aware (a charge with an
        empty coverage loads no row)."""
        gs = [m.tcdp() for m in mechs]
        if any(g is None for g in gs):
            return None
        ts = [g for g in gs if g is not None]
        z = earlier.get(ZCDPMeasure.name)
        zs = [m.zcdp() for m in mechs]
        if z is None or not all(zc is not None and zc.rho == g.rho for zc, g in zip(zs, ts, strict=True)):
            loads = np.array([[g.rho] for g in ts], dtype=float)
            z = ctx.additive_guarantee(ZCDPMeasure(), queries, loads, delta)
        omega_seq = min(g.omega for g in ts)
        omega_ovl = min(
            (g.omega for g, q in zip(ts, queries, strict=True) if not q.is_contradiction), default=math.inf
        )
        seq = (float(cast(float, z.sequential)), omega_seq)
        ovl = (float(cast(float, z.overlap)), omega_ovl)
        return dataclasses.replace(
            z,
            definition=self.name,
            sequential=seq,
            overlap=ovl,
            sequential_epsilon=self.to_epsilon(seq, delta),
            overlap_epsilon=self.to_epsilon(ovl, delta),
        )

    def to_epsilon(self, value: Value, delta: float) -> float:
        """``value`` is the pair (rho, omega) (MATH.md 5.9)."""
        assert isinstance(value, tuple) and len(value) == 2
        return TCDP(value[0], value[1]).epsilon_at(delta) if math.isfinite(value[0]) else math.inf

    def infinite(self) -> Value:
        return (math.inf, math.inf)

    def budget_value(self, budget: TCDP) -> float:
        """rho: what the filter's value (the worst row's sum of rho) is compared with; the budget's omega
        is a condition on each charge (:meth:`rule`)."""
        return budget.rho

    def check_reset(self, old: TCDP, new: TCDP) -> None:
        """omega stays: charges admitted under a smaller omega would not meet a larger one."""
        if new.omega != old.omega:
            raise BudgetError("a tCDP filter's budget can change its rho only, not its omega")

    def rule(self, budget: TCDP, factor: float, options: FilterOptions) -> FilterRule:
        """Admit iff the charge's omega is at least the budget's and every row's sum of rho stays within
        the budget's rho, exactly (MATH.md 5.9: the individual Rényi filter of Feldman and
        Zrnic 2021 at every order $1<\\alpha\\le\\omega_B$ at once). A charge with a smaller omega that covers
        some row is refused whatever the loads, with its reason."""
        label = self.label

        def rho(m: Mechanism) -> float:
            return _need(m.tcdp(), m, label).rho

        def refuse(m: Mechanism, q: PredicateQuery) -> str | None:
            g = _need(m.tcdp(), m, label)
            if g.omega >= budget.omega or q.is_contradiction:  # a charge covering no row loads no row
                return None
            return (
                f"omega {g.omega!r} (of the {m.name} charge) is below the budget's omega {budget.omega!r}: "
                f"a tCDP budget admits only charges with omega >= {budget.omega!r}"
            )

        return FilterRule(
            tracks=(TrackSpec("sum", rho, lambda m: Fraction(rho(m))),),
            check=_scalar_check(factor, budget.rho),
            exact_ok=_exact_scalar(factor, Fraction(budget.rho)),
            limit=Fraction(budget.rho) / int(factor),
            refuse=refuse,
        )


class ApproxMeasure(Measure[ApproxDP]):
    """(epsilon, delta)-DP. The odometer's value is the maximum over maximal overlapping sets of the PLD
    (or KOV) composition's epsilon at delta (MATH.md 2, 5); the filter's, by default, the combined
    advanced / basic composition rule that stays valid under full adaptivity (MATH.md 5.6, see
    :mod:`overlapdp.privacy.privacy_filter`)."""

    name = "approx"
    label = "(epsilon, delta)-DP"
    budget_type = ApproxDP
    parameters = ("epsilon", "delta")

    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        if not all(m.pld_composable for m in mechs):
            return None  # e.g. an OpaqueTCDP: known through a profile bound only, no dominating PLD
        return ctx.approx_guarantee(mechs, queries, delta, earlier)

    def to_epsilon(self, value: Value, delta: float) -> float:
        """The native value is already epsilon at the report's delta."""
        assert isinstance(value, float)
        return value

    def budget_value(self, budget: ApproxDP) -> float:
        return budget.epsilon

    amount = "epsilon"
    options = (("composition", "advanced"),)
    native_is_epsilon = True
    noise = "discrete_laplace"
    tracked = True
    joint = True

    def budget(self, amount: float, params: Mapping[str, Any]) -> ApproxDP:
        return ApproxDP(amount, params["delta"])

    def epsilon_line(self, amount: float, params: Mapping[str, Any]) -> float:
        """The filter's epsilon already holds at the budget's delta."""
        return max(float(amount), 0.0)

    def calibrated(self, parameter: float, params: Mapping[str, Any]) -> PureDP:
        """The discrete Laplace of epsilon: an (epsilon, 0) charge."""
        return PureDP(parameter)

    def charged(self, load: float, params: Mapping[str, Any]) -> PureDP:
        return PureDP(load)

    def from_pure(self, epsilon: float, params: Mapping[str, Any]) -> float:
        return epsilon

    def remaining(self, quota: float, spent: float, params: Mapping[str, Any]) -> float:
        """The filter's value is the smaller of the basic and the advanced rule's epsilon (MATH.md 5.6):
        not knowing which rule gave ``spent``, the smaller of the two rooms, quota - spent (basic) and
        the advanced rule's room for a sum of squares whose value is ``spent``; a charge of that size
        passes whichever rule gave it."""
        basic = super().remaining(quota, spent, params)
        if basic == 0.0 or params.get("composition", "advanced") != "advanced":
            return basic
        log_term = 2 * math.log(2 / float(params["delta"]))  # the service's slack delta' = delta / 2

        def root_of(e: float) -> float:  # u with sqrt(log_term) u + u^2 / 2 = e, stably
            return 2 * e / (math.sqrt(log_term + 2 * e) + math.sqrt(log_term))

        u_max, u_now = root_of(quota), root_of(spent)
        advanced = math.sqrt(max(0.0, (u_max - u_now) * (u_max + u_now))) * (1 - 1e-9)  # (float margin)
        return max(0.0, min(basic, advanced))

    def fits_with(
        self,
        upper: float | tuple[Fraction, Fraction] | None,
        added: Sequence[tuple[Any, float, int]],
        budget: float,
        params: Mapping[str, Any],
    ) -> bool:
        """Per-track bounds (sum of epsilons, sum of squares): every row within basic or every row within
        advanced composition (MATH.md 5.6)."""
        if isinstance(upper, tuple):
            return approx_rooms.fits(upper[0], upper[1], added, budget, float(params["delta"]))
        return super().fits_with(upper, added, budget, params)

    def concurrent(self, spends: Sequence[float]) -> float | None:
        """None: the analysts' deltas would add; only the global filter bounds approximate DP."""
        return None

    def track_figures(self, tracks: Any, quota: float, params: Mapping[str, Any]) -> tuple[float, float]:
        """The smaller of the basic and the advanced rule at the per-track bounds (MATH.md 5.6)."""
        return approx_rooms.bound_figures(tracks[2], tracks[0], quota, float(params["delta"]))

    def joint_figures(
        self, schema: Any, charges: Sequence[tuple[Any, float, int]], quota: float, params: Mapping[str, Any]
    ) -> tuple[float, float] | None:
        """Every row pattern of the charges (:func:`overlapdp.privacy.approx_rooms.joint_figures`)."""
        return approx_rooms.joint_figures(schema, charges, quota, float(params["delta"]))

    def rule(self, budget: ApproxDP, factor: float, options: FilterOptions) -> FilterRule:
        """Three tracks per row, ``[sum eps^2, sum delta, sum eps]``, and the combined rule on them (the
        module docstring of :mod:`overlapdp.privacy.privacy_filter`; MATH.md 5.6). ``composition="optimal"``
        is refused when ``adaptive`` (:class:`AdaptivityError`)."""
        composition = options.composition
        if composition == "optimal" and options.adaptive:
            raise AdaptivityError(
                "optimal (epsilon, delta) composition needs the parameters fixed in advance; for "
                "adaptively chosen charges use composition='advanced' (Whitehouse et al. 2023 filter)"
            )
        if composition not in ("advanced", "optimal"):
            raise BudgetError(f"composition must be 'advanced' or 'optimal', got {composition!r}")
        if budget.delta <= 0:
            raise BudgetError("an (epsilon, delta) filter needs delta > 0; use a PureDP budget for delta = 0")
        delta_slack = options.delta_slack
        slack = budget.delta / 2 if delta_slack is None else float(delta_slack)
        if not 0 < slack <= budget.delta:
            raise BudgetError(f"delta_slack must lie in (0, {budget.delta}], got {delta_slack!r}")
        optimal = composition == "optimal"
        if optimal and options.neighbouring == "replace":
            raise BudgetError("the optimal (epsilon, delta) filter supports add/remove neighbours only")
        per_mech_delta = options.per_mechanism_delta

        def eps_delta(m: Mechanism) -> tuple[float, float]:
            p = m.pure()
            if p is not None:
                return p.epsilon, 0.0
            if isinstance(m, OpaqueApproxDP):
                return m.epsilon, m.delta
            if per_mech_delta is None:
                raise BudgetError(
                    f"{m.name} has no pure-DP guarantee: give per_mechanism_delta to charge it as (epsilon, delta)"
                )
            g = m.approx(per_mech_delta)
            return g.epsilon, g.delta

        return FilterRule(
            tracks=(
                TrackSpec(
                    "l2", lambda m: eps_delta(m)[0], lambda m: Fraction(eps_delta(m)[0]) ** 2, squared=True
                ),
                TrackSpec("sum", lambda m: eps_delta(m)[1], lambda m: Fraction(eps_delta(m)[1])),
                # basic composition's sum of epsilons: a row may stay within budget by either rule
                # (MATH.md 5.6), so the rule is decided per row, not per track
                TrackSpec("sum", lambda m: eps_delta(m)[0], lambda m: Fraction(eps_delta(m)[0])),
            ),
            check=_advanced_check(factor, budget.epsilon, budget.delta - slack, slack),
            exact_ok=_exact_advanced(factor, budget.epsilon, budget.delta, slack),
            # Add/remove: the rule per row, on the row's own loads (MATH.md 5.6). Replace-one: the rule
            # at the doubled per-track MAXIMA only ("every row passes basic, or every row passes
            # advanced"): a pair pays the charges covering exactly one of its rows, and row x passing
            # by basic composition while x' passes by advanced says nothing of the pair (MATH.md 2.9).
            row_verdict=None
            if options.neighbouring == "replace"
            else _float_advanced(factor, budget.epsilon, budget.delta, slack),
            optimal=optimal,
        )


# -- the filters' tests ------------------------------------------------------------------------------------
def _scalar_check(factor: float, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
    def check(values: list[Any]) -> tuple[bool, Any]:
        v = factor * float(values[0])
        return v <= b, v

    return check


def _gdp_check(factor: float, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
    def check(values: list[Any]) -> tuple[bool, Any]:
        v = float(values[0])  # the l2 index holds sqrt(sum mu^2), rounded up
        if factor != 1 and math.isfinite(v):
            # sqrt(factor) x v rounded UP (a product rounded to nearest could fall one ulp below)
            v = sqrt_up(Fraction(int(factor)) * Fraction(v) ** 2)
        return v <= b, v

    return check


def _vector_check(factor: float, b: np.ndarray) -> Callable[[list[Any]], tuple[bool, Any]]:
    def check(values: list[Any]) -> tuple[bool, Any]:
        v = factor * np.asarray(values[0], dtype=float)
        return bool(np.all(v <= b)), tuple(float(x) for x in v)

    return check


def _advanced_check(
    factor: float, eps_g: float, delta_g: float, slack: float
) -> Callable[[list[Any]], tuple[bool, Any]]:
    log_term = 2 * math.log(1 / slack)

    def check(values: list[Any]) -> tuple[bool, Any]:
        # the value: the smaller of the two rules' epsilons at the per-track maxima (an upper bound
        # of every row's own smaller one)
        root = math.sqrt(factor) * float(values[0])  # the l2 index holds sqrt(sum eps^2)
        sd = factor * float(values[1])
        e = min(math.sqrt(log_term) * root + root * root / 2, factor * float(values[2]))
        return (e <= eps_g and sd <= delta_g), e

    return check


def _exact_scalar(factor: float, b: Fraction) -> Callable[[list[Any]], bool]:
    fx = Fraction(int(factor))

    def ok(values: list[Any]) -> bool:
        return bool(fx * values[0] <= b)

    return ok


def _exact_advanced(factor: float, eps_g: float, delta_g: float, slack: float) -> Callable[[list[Any]], bool]:
    """The combined filter's rule on one row's loads ``[sum eps^2, sum delta, sum eps]`` (MATH.md 5.6):
    sum delta <= delta_g - delta' exactly, and EITHER sum eps <= eps_g exactly (basic composition)
    OR the advanced-composition epsilon, a transcendental formula evaluated in floats from the sum
    of squares rounded up with a relative margin far above its few ulps of round-off, is <= eps_g.
    The square root is taken of the exact sum (rounded up) and multiplied by sqrt(2 ln(1/delta')):
    the product 2 ln(1/delta') * s2 would lose precision when s2 is subnormal (epsilons < 1e-154)."""
    fx = Fraction(int(factor))
    delta_room = Fraction(delta_g) - Fraction(slack)
    eps_room = Fraction(eps_g)
    root_log = math.sqrt(-2 * math.log(slack))  # log of the exact float slack: accurate to an ulp

    def ok(values: list[Any]) -> bool:
        if not fx * values[1] <= delta_room:
            return False
        if fx * values[2] <= eps_room:
            return True
        total = fx * values[0]
        half = float_up(total / 2)  # inf beyond the float range: then above any budget
        if half > eps_g:
            return False
        e = (root_log * sqrt_up(total) + half) * (1 + 1e-14)
        return e <= eps_g

    return ok


def _float_advanced(
    factor: float, eps_g: float, delta_g: float, slack: float
) -> Callable[[np.ndarray], bool | None]:
    """The combined rule on one row's float sums ``[sum eps^2, sum delta, sum eps]``: True / False when
    they clear / miss every condition by the relative margin ``NEAR`` (far above their round-off),
    None when the row must be summed exactly (``_exact_advanced``)."""
    room = delta_g - slack
    log_term = -2 * math.log(slack)
    up, down = 1 + float(NEAR), 1 - float(NEAR)

    def adv(s2: float) -> float:
        return math.sqrt(log_term * s2) + s2 / 2

    def verdict(s: np.ndarray) -> bool | None:
        s2, sd, s1 = (factor * float(x) for x in s)
        if sd * down > room or (s1 * down > eps_g and adv(s2 * down) > eps_g):
            return False
        if sd * up <= room and (s1 * up <= eps_g or adv(s2 * up) <= eps_g):
            return True
        return None

    return verdict


# -- the registry -------------------------------------------------------------------------------------------
#: Every definition the accountant supports, in report order (the odometer's ``approx`` comes last: it
#: may use the others' values as bounds).
MEASURES: tuple[Measure[Any], ...] = (
    PureMeasure(),
    ZCDPMeasure(),
    GDPMeasure(),
    RDPMeasure(),
    TCDPMeasure(),
    ApproxMeasure(),
)


def count_measure(name: str, kind: type[Exception] = BudgetError) -> AdditiveMeasure[Any, Any]:
    """The measure of a definition one count's noise is calibrated to (:attr:`Measure.counts`: pure DP,
    zCDP, GDP), or ``kind`` listing them."""
    for m in MEASURES:
        if m.counts and m.name == name and isinstance(m, AdditiveMeasure):
            return m
    names = ", ".join(m.name for m in MEASURES if m.counts)
    raise kind(f"unknown definition {str(name)[:40]!r}; choose one of {names}")


def measure_named(name: str, kind: type[Exception] = BudgetError) -> Measure[Any]:
    """The measure of the definition called ``name`` (a report's key, a data set's definition), or
    ``kind`` listing the names."""
    for m in MEASURES:
        if m.name == name:
            return m
    names = ", ".join(m.name for m in MEASURES)
    raise kind(f"privacy definition {str(name)[:40]!r} is not supported; use one of {names}")


def measure_for(budget: object) -> Measure[Any]:
    """The measure whose budgets have ``budget``'s type (RDP on the budget's own order grid)."""
    for m in MEASURES:
        if isinstance(budget, m.budget_type):
            return m.for_budget(budget)
    raise BudgetError(f"unsupported budget type {type(budget).__name__}")


__all__ = [
    "DEFAULT_DELTA",
    "MEASURES",
    "AccountingContext",
    "AdaptivityError",
    "AdditiveMeasure",
    "ApproxMeasure",
    "DefinitionGuarantee",
    "FilterOptions",
    "FilterRule",
    "GDPMeasure",
    "Measure",
    "PureMeasure",
    "RDPMeasure",
    "TCDPMeasure",
    "TrackSpec",
    "ZCDPMeasure",
    "count_measure",
    "measure_for",
    "measure_named",
]
