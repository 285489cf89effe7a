"""The overlap-aware privacy filter: admits a charge iff every row stays within budget (MATH.md 1, 2, 5, 7).

A row only pays for the charges whose coverage holds it (MATH.md 1.8). The filter keeps one
:class:`~overlapdp.overlap.OverlapIndex` per track of its budget's
:class:`~overlapdp.privacy.measures.Measure` (its :class:`~overlapdp.privacy.measures.FilterRule`) and
admits a charge iff the rule holds at every row with it; it names no definition itself. Every admitted
charge is also recorded in an :class:`~overlapdp.privacy.odometer.Odometer` for reports under all
definitions. Replace-one-row neighbours (MATH.md 1.2, 2.9) use the doubling bound (additive loads over a
symmetric difference are at most twice the largest per-row load; for GDP the factor is sqrt 2 on mu);
the (epsilon, delta) rule is then decided at the doubled per-track maxima, not row by row (MATH.md 2.9).

Adaptivity. The ODOMETER reports the guarantee of the ledger as if its charges had been fixed in advance.
The FILTER is what makes adaptive use safe; admitting a charge iff the overlap-aware guarantee with it
stays within budget is a per-row (individual) filter, valid when the costs are chosen adaptively:

- pure DP: Rogers, Roth, Ullman, Vadhan 2016 (the pure-DP filter: the realised sum of epsilons of each
  row stays within budget; a charge not covering x costs x nothing);
- zCDP and RDP: Feldman and Zrnic 2021 (arXiv 2008.11193), individual Rényi filter: for each order the
  per-row sum of RDP losses stays within budget; zCDP is RDP with epsilon(alpha) = alpha rho at every order;
  an RDP budget over several orders is kept at EVERY order (the default), or with ``rdp_rule="some"``
  while at SOME order every row fits, which is (epsilon, delta)-DP with a union bound over the orders
  (MATH.md 2.7.2; :meth:`RDP.target` gives the budget curve of a target, :meth:`RDP.epsilon_at` with
  ``rule="some"`` its guarantee);
- GDP: Smith and Thakurta 2022 (fully adaptive GDP) with per-row $\\sum\\mu^2\\le B^2$;
- tCDP with budget $(\\rho_B,\\omega_B)$: a charge with $\\omega<\\omega_B$ covering some row is refused outright
  (with its reason), the rest admitted while the per-row $\\sum\\rho\\le\\rho_B$: the individual Rényi filter at every order
  $1<\\alpha\\le\\omega_B$ at once (MATH.md 5.9);
- (epsilon, delta): the optimal composition needs the parameters fixed in advance, so with
  ``adaptive=True`` a ``composition="optimal"`` filter is REFUSED (:class:`AdaptivityError`); the default
  filter admits, per row, while $\\sqrt{2\\ln(1/\\delta')\\sum_t\\varepsilon_t^2}+\\frac12\\sum_t\\varepsilon_t^2\\le\\varepsilon_g$
  and $\\sum_t\\delta_t\\le\\delta_g-\\delta'$ (the sums over the charges covering the row), giving
  $(\\varepsilon_g,\\delta_g)$-DP by this chain: an $(\\varepsilon_t,\\delta_t)$-DP mechanism is
  $\\delta_t$-approximate $\\frac12\\varepsilon_t^2$-zCDP (Bun and Steinke 2016; pure DP with $\\delta_t=0$:
  Prop. 3.3); zCDP and approximate-zCDP filters stay valid under fully adaptive choices (Whitehouse,
  Ramdas, Rogers, Wu 2023, ICML, arXiv 2203.05481; Feldman and Zrnic 2021 for the per-row RDP filter),
  so the row's run is $(\\sum_t\\delta_t)$-approximate $\\rho$-zCDP with $\\rho=\\frac12\\sum_t\\varepsilon_t^2$ (the
  deltas ADD); and $\\rho$-zCDP gives $(\\rho+2\\sqrt{\\rho\\ln(1/\\delta')},\\delta')$-DP (Bun and Steinke 2016,
  Prop. 1.3), which with that $\\rho$ is the left-hand side above; the approximation adds
  $\\sum_t\\delta_t$ to $\\delta'$. A row also fits when basic composition keeps it within budget,
  $\\sum_t\\varepsilon_t\\le\\varepsilon_g$ with the SAME delta condition: the filter that admits while
  EITHER epsilon condition holds (per row) is still $(\\varepsilon_g,\\delta_g)$-DP under full adaptivity
  (MATH.md 5.6: off the deltas' bad events the loss is at most the sum of epsilons
  surely, and at most the advanced value outside the time-uniform Ville event of probability
  $\\delta'$). So a pure 1-DP child fits an ApproxDP(5, 1e-6) budget though advanced composition alone
  values it at 5.89.

Exact arithmetic: the filter admits only if every row stays within budget in EXACT arithmetic of the
declared float costs (Fractions; ten charges of 0.1 exceed 1.0), see ``PrivacyFilter._admissible``.

Concurrent analysts sharing one filter stay covered too (Haney et al. 2023: every valid filter extends to
concurrent composition; MATH.md 3.6).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.errors import SearchGaveUp
from overlapdp.exact import exact_sum, float_up, sqrt_up
from overlapdp.overlap import OverlapIndex, OverlapResult, _clock
from overlapdp.privacy import conversions as conv
from overlapdp.privacy._lazy import Bounds, Cover, Members, emax, up_float, widen
from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, PureDP
from overlapdp.privacy.definitions import check_neighbouring as _check_neighbouring
from overlapdp.privacy.measures import NEAR as _NEAR
from overlapdp.privacy.measures import AdaptivityError, FilterOptions, Measure, measure_for
from overlapdp.privacy.mechanisms import Mechanism, cost_key, kept_by_cost
from overlapdp.privacy.odometer import Charge, Odometer, _make_charge, whole_domain
from overlapdp.privacy.patterns import row_patterns
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.validation import check_int

# (row patterns x charges) summed with Fractions in that recomputation; beyond it the charge is refused.
_EXACT_WORK_LIMIT = 2_000_000
# (atom cells x charges) enumerated when the (epsilon, delta) filter decides its rule row by row; it runs
# on refusals no witness row settles, so it must stay cheap (beyond it: the global rule, see the filter).
_JOINT_GRID_LIMIT = 200_000
# Lazy admission (MATH.md 2.7.1): attribute values (summed over the attributes) up to which the filter keeps
# the per-attribute load tables and, for a single scalar track, the coverage matrices of its exact
# threshold search; the regions that search may visit before the overlap index decides instead; the
# known over-budget rows kept for quick refusals.
_BOUND_CELLS = 1 << 16
_SEARCH_NODES = 20_000
_HOT_ROWS = 64
# the last mechanisms' loads kept per filter (a stream charges a few mechanisms over and over)
_KEPT_LOADS = 8
# relative margins of the float pre-check of the lazy bound against a limit (_limit_settles)
_AHEAD = 1 + 2.0**-48
_BEHIND = 1 - 2.0**-48
# Pending charges from which the index is brought up to date by one search from scratch (see _flush).
_BULK = 8


@dataclass(frozen=True)
class Admission:
    """The filter's answer: admitted or not, and the overlap-aware value with the charge included."""

    admitted: bool
    charge: Charge | None
    value: float | tuple[float, ...]
    budget: float | tuple[float, ...]
    witness: dict[str, Any] | None
    reason: str = ""
    #: False when ``value`` is a safe UPPER bound of the worst row's value rather than that value: a
    #: charge decided on the filter's cheap bounds or its threshold search (lazy admission, MATH.md
    #: 2.7.1) is not located on the overlap index (its ``witness`` is then None, or on a refusal the row
    #: found over budget). The decision is exact either way; :meth:`PrivacyFilter.value` is exact.
    exact: bool = True
    #: On a refusal: False when no row was shown over budget, only a safe bound of the worst row (an
    #: overlap search an effort limit cut, or a row grid too large to enumerate); the refusal is then
    #: safe but may not be the uncut filter's. Always True on an admission.
    proven: bool = True


@dataclass
class _Track:
    """One overlap index of the filter and how a mechanism loads it: ``load`` the float the index uses
    to locate the worst row, ``exact`` the same load as a Fraction (a tuple of them for RDP), computed
    from the declared float parameters without rounding, and ``loads`` the exact loads admitted.

    ``squared``: the index is an ``l2`` one fed the parameter itself (GDP mu, the advanced filter's
    epsilon) while ``exact`` is its square: squaring in floats underflows below about 1e-162 and
    overflows above 1e154, and the index squares after normalising (MATH.md 7.8)."""

    index: OverlapIndex
    load: Callable[[Mechanism], Any]
    exact: Callable[[Mechanism], Any]
    loads: dict[str, Any] = field(default_factory=dict)
    squared: bool = False

    def upper(self, r: OverlapResult) -> Any:
        """The peek's safe upper bound in the units of ``exact``, widened by ``_NEAR``."""
        up = _fraction_upper(r.upper)
        return up * Fraction(float(r.upper)) if self.squared else up


class PrivacyFilter:
    """Admits a charge only if the overlap-aware guarantee stays within ``budget`` (see the module
    docstring for why each definition's filter is valid under adaptive choice). Admission is atomic:
    peek and add happen under one lock, so concurrent callers cannot overspend. Every admitted charge is
    also recorded in ``odometer`` for reports under all definitions.
    """

    def __init__(
        self,
        schema: Schema,
        budget: PureDP | ZCDP | GDP | RDP | TCDP | ApproxDP,
        *,
        neighbouring: str = "add_remove",
        composition: str = "advanced",
        adaptive: bool = True,
        delta_slack: float | None = None,
        per_mechanism_delta: float | None = None,
        rdp_rule: str = "every",
    ) -> None:
        self.schema = schema
        self.budget = budget
        self.neighbouring = _check_neighbouring(neighbouring)
        self._factor = 2.0 if self.neighbouring == "replace" else 1.0  # doubling (module docstring)
        self._lock = threading.Lock()
        # reports of the ledger on the budget's own Rényi orders (the curve an RDP filter keeps)
        orders = measure_for(budget).grid() or conv.DEFAULT_ORDERS
        self.odometer = Odometer(schema, neighbouring=self.neighbouring, orders=orders)
        self._n = 0
        self._ids: set[str] = set()
        self.measure: Measure[Any] = measure_for(budget)
        self.rdp_rule = rdp_rule
        self._options = FilterOptions(
            neighbouring=self.neighbouring,
            composition=composition,
            adaptive=adaptive,
            delta_slack=delta_slack,
            per_mechanism_delta=per_mechanism_delta,
            rdp_rule=rdp_rule,
        )
        self.measure.check_options(self._options)
        rule = self.measure.rule(budget, self._factor, self._options)
        self._tracks = [
            _Track(OverlapIndex(schema, t.comp), t.load, t.exact, squared=t.squared) for t in rule.tracks
        ]
        self._optimal = rule.optimal
        self._single_sum = rule.single_sum
        # ``_check`` reports the float value; ``_exact_ok`` decides admission from exact per-track maxima.
        # When ``_joint`` is set the rule is a condition on each row's JOINT per-track loads (see
        # :class:`~overlapdp.privacy.measures.FilterRule`): refusals are decided on actual rows.
        self._check: Callable[[list[Any]], tuple[bool, Any]] = rule.check
        self._exact_ok: Callable[[list[Any]], bool] = rule.exact_ok
        self._limit: Fraction | None = rule.limit
        self._limit_f: tuple[Fraction | None, float] = (None, 0.0)  # the limit and its float, kept
        self._refuse: Callable[[Mechanism, PredicateQuery], str | None] | None = rule.refuse
        # ids of recorded charges (never refused) that ``_refuse`` refuses: each took the rows it covers
        # outside the budget (tCDP: omega below the budget's), so nothing more is admitted
        self._outside: list[str] = []
        self._joint = rule.row_verdict is not None
        # A rule on several tracks decided at their per-track MAXIMA (the (epsilon, delta) rule under
        # replace-one, MATH.md 2.9; the Rényi "some order" rule, 2.7.2) is no per-row condition: rows
        # outside a charge's coverage enter it too.
        self._at_maxima = rule.at_maxima or (len(rule.tracks) > 1 and not self._joint)
        if rule.row_verdict is not None:
            self._row_verdict: Callable[[np.ndarray], bool | None] = rule.row_verdict
        # Lazy admission (MATH.md 2.7.1): per track cheap upper bounds on the rows' loads; a charge they
        # clear is admitted at once and left PENDING (not yet in the overlap index, whose search is the
        # expensive part); the indexes are brought up to date only when neither the bounds nor the
        # threshold search settle a charge, or a report asks for the exact value. ``_within``: every row
        # is known to be within budget (true after each admission; a record or a lowered budget may
        # break it, and then the bounds must also clear the worst row).
        cells = sum(a.size for a in schema.attributes)
        # a vector track (Rényi DP) holds one load per component of the budget's value (per order)
        bv = self.measure.budget_value(budget)
        self._vector = any(t.comp == "vector" for t in rule.tracks)
        k = len(bv) if self._vector and isinstance(bv, tuple) else 1
        self._bounds: list[Bounds] | None = None
        if self._tracks and 0 < cells * k <= _BOUND_CELLS:
            self._bounds = [Bounds(schema, k) for _ in self._tracks]
        self._bounds_terms = self._bounds[0].terms if self._bounds is not None else 0
        self._members: Members | None = None
        if self._bounds is not None and len(rule.tracks) == 1 and rule.tracks[0].comp != "vector":
            self._members = Members(schema)
        self._pending: list[tuple[PredicateQuery, list[Any]]] = []
        self._within = True
        self._hot: list[tuple[int, ...]] = []  # known over-budget rows, the last to refuse first
        self._hot_rows = np.zeros((0, len(schema.attributes)), dtype=np.intp)  # the same, as an array
        self._readable_rows: dict[tuple[int, ...], dict[str, Any]] = {}  # see _readable
        self._kept_loads: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}  # see _loads
        # per open savepoint (outermost first): the pending list and its length, the bounds' journal
        # length, and whether every row was known within budget
        self._saves: list[tuple[list[tuple[PredicateQuery, list[Any]]], int, int, bool]] = []

    # -- admission ------------------------------------------------------------------------------------
    def try_charge(
        self, mechanism: Mechanism, query: PredicateQuery | None = None, id: str | None = None
    ) -> Admission:
        """Admit and record the charge iff the overlap-aware guarantee with it stays within budget."""
        with self._lock:
            charge = _make_charge(self.schema, mechanism, query, id, self._n)
            if charge.id in self._ids:
                raise BudgetError(f"a charge with id {charge.id!r} is already in the ledger")
            q = charge.query.with_id(charge.id)
            if self._optimal:
                return self._try_optimal(charge)
            if self._refuse is not None:
                why = self._refuse(mechanism, q)  # raises (as a load would) without such a guarantee
                if why is None and self._outside:
                    # the same rule for records: a recorded charge the rule refuses took the rows it
                    # covers outside the budget, and a filter with a row outside it admits nothing
                    # (every row must stay within budget, MATH.md 5.9)
                    why = (
                        f"the recorded charge {self._outside[0]!r} took rows outside the budget: "
                        f"{self._refuse(*self._outside_charge())}; nothing more is admitted"
                    )
                if why is not None:
                    self._flush()
                    value = self._check([t.index.value for t in self._tracks])[1] if self._ids else 0.0
                    return Admission(False, None, value, self.measure.budget_value(self.budget), None, why)
            loads, exact = self._loads(mechanism)  # raises before anything changes
            budget_v = self.measure.budget_value(self.budget)
            floats = self._bound_loads(loads, exact)
            if floats is not None:
                cover = Cover(q)
                # a known over-budget row inside the coverage refuses at once (the bounds, above every
                # row's load, could not clear the charge then either)
                found = self._hot_refusal(cover, exact[0])
                if found is not None:
                    value_up = self._bound_value(floats, cover)
                    row = self._readable(found)
                    return Admission(False, None, value_up, budget_v, row, "over budget", False)
                admitted = self._admit_on_bounds(charge, q, loads, exact, floats, cover)
                if admitted is not None:
                    return admitted
                searched = self._members is not None and (self._within or self._establish_within())
                try:
                    found = self._search(q, exact[0], hot=False) if searched else None
                except SearchGaveUp:
                    searched = False
                if searched and found is None:  # every row inside the coverage fits, decided exactly
                    self._book(charge, exact, floats, cover, (q, loads))
                    return Admission(True, charge, self._bound_value(floats), budget_v, None, exact=False)
                if searched and found is not None:
                    value_up = self._bound_value(floats, cover)
                    row = self._readable(found)
                    return Admission(False, None, value_up, budget_v, row, "over budget", False)
            self._flush()
            peeks = [t.index.peek(q, w) for t, w in zip(self._tracks, loads, strict=True)]
            _, value = self._check([r.value for r in peeks])
            ok = self._admissible(q, peeks, exact)
            witness = peeks[0].witness if peeks[0].witness is not None else None
            exact_value = all(r.exact for r in peeks)
            if not ok:
                return Admission(
                    False, None, value, budget_v, witness, "over budget", exact_value, proven=ok is False
                )
            self._insert(q, loads)
            self._book(charge, exact, floats, Cover(q) if floats is not None else None, None)
            return Admission(True, charge, value, budget_v, witness, exact=exact_value)

    def try_on_bounds(
        self, mechanism: Mechanism, query: PredicateQuery | None = None, id: str | None = None
    ) -> Admission | None:
        """Admit and record the charge when the lazy bounds ALONE show every row stays within budget
        (MATH.md 2.7.1: the same admission :meth:`try_charge` makes on them, no overlap search); None,
        nothing changed, when only a search could decide (or the filter keeps no bounds): then
        :meth:`try_charge` decides. It never refuses, so an admission here is the exact filter's."""
        with self._lock:
            charge = _make_charge(self.schema, mechanism, query, id, self._n)
            if charge.id in self._ids:
                raise BudgetError(f"a charge with id {charge.id!r} is already in the ledger")
            if self._optimal or self._bounds is None:
                return None
            q = charge.query.with_id(charge.id)
            if self._refuse is not None and (self._outside or self._refuse(mechanism, q) is not None):
                return None  # try_charge refuses it, with its reason
            loads, exact = self._loads(mechanism)
            floats = self._bound_loads(loads, exact)
            if floats is None:
                return None
            return self._admit_on_bounds(charge, q, loads, exact, floats, Cover(q))

    def _loads(self, mechanism: Mechanism) -> tuple[list[Any], list[Any]]:
        """The mechanism's float and exact load on each track (raises as the tracks do). Kept for the
        last few mechanisms of the classes whose cost is a function of their fields alone
        (:func:`~overlapdp.privacy.mechanisms.cost_key`: the class itself and its fields' plain values,
        bit for bit; never a class's own equality, which may leave out a field that changes the cost,
        nor a subclass, which may add cost elsewhere), when the loads are immutable values; a filter's
        tracks never change."""
        loads, exact = kept_by_cost(self._kept_loads, mechanism, self._loads_now, _KEPT_LOADS, _immutable)
        return list(loads), list(exact)

    def _loads_now(self, m: Mechanism) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return tuple([t.load(m) for t in self._tracks]), tuple([t.exact(m) for t in self._tracks])

    # -- lazy admission (MATH.md 2.7.1) ----------------------------------------------------------------
    def _admit_on_bounds(
        self,
        charge: Charge,
        q: PredicateQuery,
        loads: list[Any],
        exact: list[Any],
        floats: list[np.ndarray],
        cover: Cover,
    ) -> Admission | None:
        """Admit the charge when the bounds clear it: booked pending until the index is needed (no
        search); None, nothing changed, otherwise."""
        if not self._lazy_fits(cover, exact):
            return None
        self._book(charge, exact, floats, cover, (q, loads))
        budget_v = self.measure.budget_value(self.budget)
        return Admission(True, charge, self._bound_value(floats), budget_v, None, exact=False)

    def _book(
        self,
        charge: Charge,
        exact: list[Any],
        floats: list[np.ndarray] | None,
        cover: Cover | None,
        pending: tuple[PredicateQuery, list[Any]] | None,
    ) -> None:
        """Book an admitted charge (in the indexes already, or ``pending`` for them): after it every row
        is within budget."""
        if pending is not None:
            self._pending.append(pending)
        if self._bounds is not None:
            if floats is None or cover is None:  # a load the bounds cannot hold: dropped for good
                self._drop_bounds()
            else:
                attrs = [b.add(cover, f) for b, f in zip(self._bounds, floats, strict=True)]
                if self._members is not None:
                    self._members.add(charge.query, exact[0], attrs[0])
        for t, e in zip(self._tracks, exact, strict=True):
            t.loads[charge.id] = e
        self._ids.add(charge.id)
        self._n += 1
        self.odometer.extend([charge])
        self._within = True

    def _outside_charge(self) -> tuple[Mechanism, PredicateQuery]:
        """The first recorded charge that took rows outside the budget (see ``_outside``)."""
        c = next(c for c in self.odometer.charges if c.id == self._outside[0])
        return c.mechanism, c.query

    def _drop_bounds(self) -> None:
        """Stop lazy admission (a load the float bounds cannot hold): the index decides from now on."""
        self._flush()
        self._bounds = None
        self._members = None

    def _bound_loads(self, loads: list[Any], exact: list[Any]) -> list[np.ndarray] | None:
        """The charge's exact loads as float vectors for the bounds (see :func:`up_float`), or None when
        there are no bounds or a float load is one the index would refuse (the index path then raises)."""
        if self._bounds is None:
            return None
        if len(loads) == 1 and type(loads[0]) is float and type(exact[0]) is Fraction:
            # the common case (one scalar track), without numpy's per-call cost
            w = loads[0]
            if not math.isfinite(w) or w < 0 or self._bounds[0].k != 1:
                return None
            return [np.array([up_float(exact[0])])]
        for w in loads:
            arr = np.asarray(w, dtype=float)
            if not bool(np.all(np.isfinite(arr))) or bool(np.any(arr < 0)):
                return None
        out = []
        for e, b in zip(exact, self._bounds, strict=True):
            xs = e if isinstance(e, tuple) else (e,)
            if len(xs) != b.k:
                return None
            out.append(np.array([up_float(x) for x in xs]))
        return out

    def _exact_bounds(self, parts: list[np.ndarray], new: list[Any] | None) -> list[Any] | None:
        """Per track a float bound widened to a safe exact one (plus the new charge's exact load), or
        None when a bound is infinite."""
        out: list[Any] = []
        for i, v in enumerate(parts):
            xs = [widen(float(x), self._n + self._bounds_terms) for x in v]
            if any(x is None for x in xs):
                return None
            ys: list[Fraction] = [x for x in xs if x is not None]
            if new is not None:
                e = new[i]
                ys = [x + y for x, y in zip(ys, e if isinstance(e, tuple) else (e,), strict=True)]
            out.append(tuple(ys) if self._vector else ys[0])
        return out

    def _lazy_fits(self, cover: Cover, exact: list[Any]) -> bool:
        """Whether the bounds show that every row stays within budget with the charge. Rows outside its
        coverage keep their loads: within budget when ``_within``, else bounded by the worst-row bound
        (always, for a rule decided at the per-track maxima: ``_at_maxima``)."""
        assert self._bounds is not None
        if self._limit is not None and self._within and not self._at_maxima and len(self._bounds) == 1:
            b = self._bounds[0]
            if b.k == 1 and not self._vector:
                settled = self._limit_settles(b.inside_scalar(cover), exact[0])
                if settled is not None:
                    return settled
        cand = self._exact_bounds([b.inside(cover) for b in self._bounds], exact)
        if cand is None:
            return False
        if not self._within or self._at_maxima:
            tops = self._exact_bounds([b.top() for b in self._bounds], None)
            if tops is None:
                return False
            cand = [emax(c, o) for c, o in zip(cand, tops, strict=True)]
        return bool(self._exact_ok(cand))

    def _limit_settles(self, v: float, e: Fraction) -> bool | None:
        """Whether :meth:`_lazy_fits`'s exact test ``widen(v) + e <= limit`` holds, settled in floats
        when the float candidate is clearly on one side (None: too close to call, or out of the
        floats' range). ``widen(v) = v (1 + 4 (m + 2) 2^-53)``, ``m`` the charges plus the tables'
        extra terms (MATH.md 2.7.1's ``n + d + 2``), a float exactly; the float candidate ``c`` takes
        at most three roundings, each within 2^-53 relative, and the limit's float one, so a relative
        margin of 2^-48 (plus 2^-1000 absolute, for subnormal parts) covers them."""
        lim = self._limit
        assert lim is not None
        if lim is not self._limit_f[0]:
            try:
                self._limit_f = (lim, float(lim))
            except OverflowError:
                self._limit_f = (lim, math.inf)
        big = self._limit_f[1]
        if not (2.0**-900 < big < 2.0**900 and 0.0 <= v < 2.0**900):  # (nan: out of range too)
            return None
        try:
            ef = float(e)
        except OverflowError:
            return None
        if ef >= 2.0**900:
            return None
        c = v * (1.0 + 4 * (self._n + self._bounds_terms + 2) * 2.0**-53) + ef
        if c * _AHEAD + 2.0**-1000 < big * _BEHIND:
            return True
        if c * _BEHIND > big * _AHEAD + 2.0**-1000:
            return False
        return None

    @property
    def known_within(self) -> bool:
        """Whether every row is known to be within the budget (no search needed to show it)."""
        return self._within

    def assume_within(self) -> None:
        """The caller has SHOWN that every row is within the budget with the charges held (the same
        charges as a filter whose :attr:`known_within` held at the same budget, or charges whose every
        row's total is bounded within it, MATH.md 1.8), so the next threshold decision does not search
        the whole domain to show it again (:meth:`_establish_within`). Said when it does not hold, a
        charge over the budget could be admitted: for the service's replicas of its own filters."""
        self._within = True

    def _establish_within(self) -> bool:
        """Whether every row is within budget, decided exactly when the bounds could not show it (after
        records: a replica catching up, a restart replay): the threshold search over the whole domain
        with no new load (MATH.md 7.9). Sets ``_within`` when it holds; a row found over budget joins
        the known over-budget rows, so asking again is cheap."""
        if self._within:
            return True
        if self._members is None or self._outside:
            return False
        try:
            found = self._search(whole_domain(self.schema), Fraction(0))
        except SearchGaveUp:
            return False
        if found is None:
            self._within = True
        return self._within

    def _search(self, q: PredicateQuery, e: Fraction, *, hot: bool = True) -> tuple[int, ...] | None:
        """The exact threshold decision (single scalar track, every row known within budget): None when
        every row of ``q``'s coverage fits with it, else such a row that does not; raises
        :class:`SearchGaveUp` when the search gives up (the index decides). Known over-budget rows are
        tried first (quick refusals) unless ``hot`` is False (the caller tried them)."""
        assert self._members is not None
        members = self._members
        if hot:
            row = self._hot_refusal(Cover(q), e)
            if row is not None:
                return row

        hint: float | None = None
        if self._limit is not None:
            theta = self._limit - e  # (the rule is exactly load + e <= limit: one comparison)

            def fits(load: Fraction) -> bool:
                return load <= theta

            with contextlib.suppress(OverflowError):  # (a limit beyond the floats gives no hint)
                hint = float(theta)
        else:

            def fits(load: Fraction) -> bool:
                return bool(self._exact_ok([load + e]))

        effort = self._tracks[0].index.effort
        deadline = None if effort is None else _clock.now() + effort
        heavy: list[tuple[tuple[int, ...], Fraction]] = []
        found = members.exceeds(q, fits, _SEARCH_NODES, deadline, hint, heavy)
        if found is None and heavy and not fits(heavy[0][1] + e):
            # the heaviest row the search weighed: admitted, the charge fills it for a charge like it
            # (MATH.md 2.7.1: a known row is only a candidate, weighed exactly when it refuses)
            self._keep_hot(heavy[0][0])
        if found is not None:
            self._keep_hot(found)
        return found

    def known_rows(self) -> list[tuple[int, ...]]:
        """The rows this filter keeps for quick refusals (found over budget by a search, or filled by an
        admission), the latest first, as value indices per attribute: candidates only (each is weighed
        exactly when it refuses, MATH.md 2.7.1), so another filter over the same schema may try them
        (:meth:`learn_rows`)."""
        with self._lock:
            return list(self._hot)

    def learn_rows(self, rows: Sequence[tuple[int, ...]]) -> None:
        """Keep ``rows`` (value indices per attribute, e.g. another filter's :meth:`known_rows`) for
        quick refusals after this filter's own, up to the number kept. Any row is a valid candidate: a
        refusal is made on its exact load then (MATH.md 2.7.1); rows that are not rows of the schema are
        refused with ValueError."""
        if not rows:
            return
        sizes = np.array([a.size for a in self.schema.attributes])
        try:
            got = np.array(rows, dtype=np.int64)
        except (TypeError, ValueError):
            got = None
        if (
            got is None
            or got.ndim != 2
            or got.shape[1] != sizes.size
            or not ((got >= 0) & (got < sizes)).all()
        ):
            raise ValueError("rows are value indices, one per attribute of the schema")
        with self._lock:
            mine = set(self._hot)
            extra = [r for r in dict.fromkeys(map(tuple, got.tolist())) if r not in mine]
            extra = extra[: max(_HOT_ROWS - len(self._hot), 0)]
            if extra:
                self._hot.extend(extra)
                self._hot_rows = np.array(self._hot, dtype=np.intp)

    def _keep_hot(self, row: tuple[int, ...]) -> None:
        """Keep ``row`` first among the known rows, unless it is one already (a row found over budget
        never is: the known rows inside the coverage were tried before the search)."""
        if row in self._hot:
            return
        self._hot.insert(0, row)
        del self._hot[_HOT_ROWS:]
        self._hot_rows = np.array(self._hot, dtype=np.intp)

    def _readable(self, row: tuple[int, ...]) -> dict[str, Any]:
        """``schema.row(row)``, kept for the known rows (they refuse again and again near the budget);
        a new dict each time, the caller may change it."""
        got = self._readable_rows.get(row)
        if got is None:
            if len(self._readable_rows) >= 2 * _HOT_ROWS:
                self._readable_rows.clear()
            got = self._readable_rows[row] = self.schema.row(row)
        return dict(got)

    def _hot_refusal(self, cover: Cover, e: Fraction) -> tuple[int, ...] | None:
        """A known over-budget row (found by an earlier search) inside ``cover`` whose exact load with
        ``e`` does not fit: a refusal shown by a row, no search (MATH.md 2.7.1). None when there is none
        (or the filter keeps no members)."""
        members = self._members
        if members is None or not self._hot or cover.empty:
            return None
        rows = self._hot_rows
        inside = np.ones(len(self._hot), dtype=bool)
        for p, idx in cover.parts:  # (free attributes hold every row)
            col = rows[:, p]
            if isinstance(idx, slice):
                inside &= (col >= idx.start) & (col < idx.stop)
            else:
                held = np.zeros(self.schema.attributes[p].size, dtype=bool)
                held[idx] = True
                inside &= held[col]
        room: Fraction | None = None  # limit - e, for a rule that is load + e <= limit
        for j in np.flatnonzero(inside).tolist():
            row = self._hot[j]
            load = members.load_at(row)
            if self._limit is not None:
                if room is None:
                    room = self._limit - e
                over = load > room
            else:
                over = not self._exact_ok([load + e])
            if over:
                if j:  # the row that refused first: the next refusals are likelier to meet it
                    self._hot.insert(0, self._hot.pop(j))
                    rows[1 : j + 1] = rows[:j].copy()
                    rows[0] = row
                return row
        return None

    def _bound_value(self, floats: list[np.ndarray], cover: Cover | None = None) -> Any:
        """The reported value with the charge, from the bounds: after an admission the worst-row bound
        (or, with ``cover``, the larger of it and the coverage's bound with the charge), rounded up, in
        the index's units (sqrt for the squared tracks, a vector per Rényi order)."""
        assert self._bounds is not None
        parts: list[Any] = []
        for t, b, f in zip(self._tracks, self._bounds, floats, strict=True):
            if b.k == 1 and not self._vector:  # one float: the same operations without numpy's
                top = float(b.top()[0])
                x = top if cover is None else max(top, b.inside_scalar(cover) + float(f[0]))
                x *= 1 + 2.0**-40
                parts.append(math.sqrt(x) * (1 + 2.0**-50) if t.squared else x)
                continue
            v = b.top() if cover is None else np.maximum(b.top(), b.inside(cover) + f)
            up = v * (1 + 2.0**-40)
            if t.squared:
                parts.append(float(np.sqrt(up[0])) * (1 + 2.0**-50))
            else:
                parts.append(up if self._vector else float(up[0]))
        return self._check(parts)[1]

    def _flush(self) -> None:
        """Insert the pending charges into the overlap indexes (their exact state is needed): from
        ``_BULK`` of them on, deferred in generic mode, so that the indexes search once from scratch when
        next asked instead of once per charge (below it, each charge's restricted search is cheaper)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        defer = len(pending) >= _BULK
        for i, t in enumerate(self._tracks):
            for q, loads in pending:
                t.index.insert(q, loads[i], defer=defer)

    def _insert(self, q: PredicateQuery, loads: list[Any], *, defer: bool = False) -> None:
        """Put ``q`` (its id set) into every track's index, all or none: a failure part-way removes it
        from the tracks it already reached, most recent first. ``defer``: no search now (see
        :meth:`OverlapIndex.insert`)."""
        assert q.id is not None
        added: list[_Track] = []
        try:
            for t, w in zip(self._tracks, loads, strict=True):
                t.index.insert(q, w, defer=defer)
                added.append(t)
        except BaseException:
            for t in reversed(added):
                t.index.remove(q.id)
            raise

    def _admissible(self, q: PredicateQuery, peeks: list[OverlapResult], exact: list[Any]) -> bool | None:
        """Whether EVERY row's exact cost with the new charge stays within budget (exact arithmetic of
        the declared float costs: ten charges of 0.1 exceed 1.0, as Fraction(0.1) > 1/10): True; False
        when a row is shown over budget; None (refuse) when neither is shown (:attr:`Admission.proven`).

        The peeks' witnesses are exact rows; when they clear the budget with a margin (``_NEAR``) far
        above the index's float error the charge is admitted, as it is when EXACT results' values (each
        the smallest float at or above the exact maximum, MATH.md 7.8) fit with no margin (a tie at the
        budget); when a witness alone exceeds it the charge is refused, and in between every row
        pattern is summed with Fractions."""
        assert q.id is not None
        # Fast path, O(1) per track: the index's float maximum is a sum of at most n float loads, off by
        # at most n * 2^-53 relative, far below _NEAR for any realistic ledger; widened by _NEAR it
        # bounds every row's exact cost, so a clear fit needs no exact sum over the witness's charges.
        if self._exact_ok([t.upper(r) for t, r in zip(self._tracks, peeks, strict=True)]):
            return True
        # An exact result's value is the smallest float >= the exact maximum (MATH.md 7.8; for l2
        # compared squared): with no widening it bounds every row, so a tie at the budget (loads whose
        # sum is exactly the budget) is admitted here, whatever the number of attributes, without
        # enumerating rows (MATH.md 2.7).
        if all(r.exact for r in peeks) and self._exact_ok(
            [_exact_value(t, r) for t, r in zip(self._tracks, peeks, strict=True)]
        ):
            return True
        uppers: list[Any] = []
        witnesses: list[Any] | None = []
        for t, r, e in zip(self._tracks, peeks, exact, strict=True):
            # The witness is a real row, and when the index's safe bound is within 1e-10 of it (a float
            # tie band too wide to settle, MATH.md 7.8), widened by _NEAR it bounds every row as well.
            w = _witness_exact(t, r, q.id, e) if r.exact or _tight(r) else None
            if w is None:
                witnesses = None
                uppers.append(t.upper(r))
            else:
                if witnesses is not None:
                    witnesses.append(w)
                uppers.append(_scale(w, 1 + _NEAR))
        if self._exact_ok(uppers):
            return True
        if self._joint:
            # a rule on each row's joint loads: refuse when one witness row fails it with all its
            # loads, else decide row by row
            for r in peeks:
                row = [_witness_exact(t, r, q.id, e) for t, e in zip(self._tracks, exact, strict=True)]
                if r.exact and all(v is not None for v in row) and not self._exact_ok(row):
                    return False
            return self._exact_rows_ok(q, exact)
        if witnesses is not None and not self._exact_ok(witnesses):
            return False
        maxima = self._exact_maxima(q, exact)
        return None if maxima is None else bool(self._exact_ok(maxima))

    def _exact_rows_ok(self, q: PredicateQuery, exact: list[Any]) -> bool | None:
        """Whether every row pattern of the admitted charges plus ``q`` passes ``_exact_ok`` with its own
        exact loads (None, i.e. refuse, when the atom grid is too large to enumerate: the decision is
        then the global one, either rule holding at the per-track maxima, sound and at least as
        permissive as either rule alone)."""
        charges = self.odometer.charges
        pats = row_patterns([c.query for c in charges] + [q], self.schema, limit=_JOINT_GRID_LIMIT)
        if pats is None or pats.members.size > _EXACT_WORK_LIMIT:
            return None
        loads = [[t.loads[c.id] for c in charges] + [e] for t, e in zip(self._tracks, exact, strict=True)]
        # float sums decide the rows far from the budget (their error, at most t ulps relative, is far
        # below the _NEAR margin); the rest are summed exactly
        # ... unless a load is beyond the float range or so small that its float (or a sum of squares)
        # loses relative precision: then every row is summed exactly (MATH.md 7.8)
        in_range = all(
            x == 0 or _FLOAT_SAFE[0] <= x <= _FLOAT_SAFE[1] for ls in loads for v in ls for x in _flat(v)
        )
        sums = (
            pats.members.astype(float) @ np.array([[float(x) for x in ls] for ls in loads]).T
            if in_range
            else None
        )
        for k, row in enumerate(pats.members):
            verdict = self._row_verdict(sums[k]) if sums is not None else None
            if verdict is None:
                idx = np.flatnonzero(row).tolist()
                verdict = self._exact_ok([sum((ls[i] for i in idx), Fraction(0)) for ls in loads])
            if not verdict:
                return False
        return True

    def _exact_maxima(self, q: PredicateQuery, exact: list[Any]) -> list[Any] | None:
        """Per track, the exact maximum over every row pattern of the admitted charges plus ``q``."""
        charges = self.odometer.charges
        queries = [c.query for c in charges] + [q]
        pats = row_patterns(queries, self.schema)
        if pats is None or pats.members.size > _EXACT_WORK_LIMIT:
            return None
        out: list[Any] = []
        for t, e in zip(self._tracks, exact, strict=True):
            loads = [t.loads[c.id] for c in charges] + [e]
            best: Any = None
            for row in pats.members:
                idx = np.flatnonzero(row).tolist()
                if isinstance(e, tuple):
                    v: Any = tuple(sum((loads[i][k] for i in idx), Fraction(0)) for k in range(len(e)))
                    best = v if best is None else tuple(max(a, b) for a, b in zip(best, v, strict=True))
                else:
                    v = sum((loads[i] for i in idx), Fraction(0))
                    best = v if best is None else max(best, v)
            out.append(best)
        return out

    def _try_optimal(self, charge: Charge) -> Admission:
        """Non-adaptive (epsilon, delta) filter: the optimal / PLD composition of the overlap-aware
        maximum, recomputed on each attempt (valid only because the caller declared the whole sequence of
        charges fixed in advance, ``adaptive=False``; MATH.md 2.7)."""
        assert isinstance(self.budget, ApproxDP)
        ledger = [*self.odometer.charges, charge]
        eps, _, witness, _ = self.odometer.overlap_approx(
            [c.mechanism for c in ledger], [c.query for c in ledger], self.budget.delta
        )
        if eps > self.budget.epsilon:
            return Admission(False, None, eps, self.budget.epsilon, witness, "over budget")
        self._ids.add(charge.id)
        self._n += 1
        self.odometer.extend([charge])
        return Admission(True, charge, eps, self.budget.epsilon, witness)

    def value(self) -> float | tuple[float, ...]:
        """The overlap-aware value the filter compares with its budget, for what is admitted so far."""
        with self._lock:
            if not self._ids:
                return 0.0
            if self._optimal:
                assert isinstance(self.budget, ApproxDP)
                ledger = self.odometer.charges
                return self.odometer.overlap_approx(
                    [c.mechanism for c in ledger], [c.query for c in ledger], self.budget.delta
                )[0]
            self._flush()
            return self._check([t.index.value for t in self._tracks])[1]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._ids)

    # -- recorded charges, savepoints and budget changes (the service's admission) -----------------------
    def record(
        self,
        mechanism: Mechanism,
        query: PredicateQuery | None = None,
        id: str | None = None,
        *,
        times: int = 1,
    ) -> Charge:
        """Add a charge WITHOUT the budget test: one already committed elsewhere (a durable ledger read
        back after a restart, or another service instance's). It is never refused, so replaying a
        ledger reproduces the spend exactly even when the budget was lowered since (MATH.md 2.8).

        ``times`` > 1 records that many identical charges at once (ids ``id``, ``id#1``, ...): one index
        entry carrying ``times`` x the load, exactly (a row's load is the sum over the charges covering
        it, MATH.md 1.8), so replaying a long ledger keeps the index small; on a squared track (GDP, the
        (epsilon, delta) rule) one entry per copy, since sqrt(times) x mu is not exact in floats."""
        check_int(times, "times", error=BudgetError)
        if times > 1 and any(t.squared for t in self._tracks):
            # k copies of a charge on a squared track (GDP mu, the advanced rule's epsilon) compose to
            # sqrt(k) times its parameter, which no float states exactly (k times it would count k^2
            # copies): each copy gets its own index entry instead.
            first = self.record(mechanism, query, id)
            for j in range(1, times):
                self.record(mechanism, query, f"{first.id}#{j}")
            return first
        with self._lock:
            return self._record(self._prepare(mechanism, query, id, times, self._n, self._ids))

    def _prepare(
        self,
        mechanism: Mechanism,
        query: PredicateQuery | None,
        id: str | None,
        times: int,
        n: int,
        taken: set[str],
    ) -> _Recorded:
        """A charge to record, checked (its ids not in ``taken``, its loads valid): raises before any
        change. ``n``: the ledger's length before it (for a default id)."""
        charge = _make_charge(self.schema, mechanism, query, id, n)
        ids = [charge.id] + [f"{charge.id}#{j}" for j in range(1, times)]
        if any(i in taken for i in ids):
            raise BudgetError(f"a charge with id {charge.id!r} is already in the ledger")
        q = charge.query.with_id(charge.id)
        loads = [_times(t.load(mechanism), times) for t in self._tracks]  # raises before any change
        exact = [_times(t.exact(mechanism), times) for t in self._tracks]
        return _Recorded(charge, ids, q, loads, exact, self._bound_loads(loads, exact))

    def _record(self, r: _Recorded, *, defer: bool = False) -> Charge:
        """Record a prepared charge (the lock held); ``defer``: into the indexes without a search."""
        charge, ids, q, loads, exact, floats = r.charge, r.ids, r.query, r.loads, r.exact, r.floats
        mechanism, times = charge.mechanism, len(ids)
        attrs: list[int | None] = [None]
        if floats is not None and self._bounds is not None:
            # pending like a lazy admission; every row stays known within budget only if the
            # bounds show it (a recorded charge is never refused, so it may overspend)
            cover = Cover(q)
            within = self._lazy_fits(cover, exact)
            self._pending.append((q, loads))
            assert self._bounds is not None
            attrs = [b.add(cover, f) for b, f in zip(self._bounds, floats, strict=True)]
            self._within = within
        else:
            if self._bounds is not None:
                self._drop_bounds()
            self._insert(q, loads, defer=defer)
            self._within = False
        # The group's exact load sits on its first id; the others carry 0 (so that every
        # odometer charge has a load and the exact enumeration sums to the group's load).
        for t, e in zip(self._tracks, exact, strict=True):
            t.loads[charge.id] = e
            zero: Any = tuple(Fraction(0) for _ in e) if isinstance(e, tuple) else Fraction(0)
            for i in ids[1:]:
                t.loads[i] = zero
        if self._members is not None:
            self._members.add(charge.query, exact[0], attrs[0])
            for _ in ids[1:]:
                self._members.add(charge.query, Fraction(0))
        self._ids.update(ids)
        self._n += times
        self.odometer.extend([charge] + [Charge(i, mechanism, charge.query) for i in ids[1:]])
        self._note_outside(charge, q)
        return charge

    def _note_outside(self, charge: Charge, q: PredicateQuery) -> None:
        """A recorded charge the refusal rule would refuse whatever the loads (tCDP: omega below the
        budget's) took its rows outside the budget: nothing more is admitted (MATH.md 5.9)."""
        if self._refuse is not None and self._refuse(charge.mechanism, q) is not None:
            self._outside.append(charge.id)
            self._within = False

    def record_many(self, charges: Iterable[Sequence[Any]]) -> list[Charge]:
        """:meth:`record` of many committed charges, in order: a replayed ledger (the service's start).

        Each item is ``(mechanism, query)``, ``(mechanism, query, id)`` or ``(mechanism, query, id,
        times)`` as :meth:`record` takes them. Every charge is checked first (ids, loads): on an error
        none is recorded. The result is the filter :meth:`record` one by one leaves: the same ledger,
        exact per-track loads, pending charges and lazy tables, bit for bit (their cells and bases take
        one ``np.add.at`` per attribute, in charge order: :meth:`Bounds.add_many`), so the same exact
        spend and the same decisions after it (MATH.md 2.7.1), savepoints included. Two differences, both
        in cost only: on the overlap indexes (no lazy tables: wide schemas) charges go in without a
        search per charge (one search from scratch when next asked, :meth:`OverlapIndex.insert`
        ``defer``: exact where the incremental searches may leave a safe bound on float ties); and
        whether every row is known within budget afterwards is read from the final tables' worst-row
        bound (sound; one by one it follows the last charge's coverage bound), so a charge may then
        be decided by the overlap search where it would have been admitted on the bounds, with the
        same decision (MATH.md 2.7.1)."""
        items = [_record_item(item) for item in charges]
        # As record: k copies on a squared track are k entries (ids id, id#1, ...), not one of k x.
        split = any(t.squared for t in self._tracks)
        with self._lock:
            prepared: list[_Recorded] = []
            taken = set(self._ids)
            n = self._n
            # loads per (mechanism, times): a replayed ledger holds few distinct mechanisms (keyed as
            # _loads keys them: never by a class's own equality)
            cache: dict[tuple[Any, int], tuple[list[Any], list[Any], list[np.ndarray] | None]] = {}

            def prepare(mech: Mechanism, query: PredicateQuery | None, cid: str | None, times: int) -> None:
                nonlocal n
                mkey = cost_key(mech)
                key = None if mkey is None else (mkey, times)
                hit = None if key is None else cache.get(key)
                if hit is None:
                    r = self._prepare(mech, query, cid, times, n, taken)
                    if key is not None:
                        cache[key] = (r.loads, r.exact, r.floats)
                else:
                    charge = _make_charge(self.schema, mech, query, cid, n)
                    ids = [charge.id] + [f"{charge.id}#{j}" for j in range(1, times)]
                    if any(i in taken for i in ids):
                        raise BudgetError(f"a charge with id {charge.id!r} is already in the ledger")
                    r = _Recorded(charge, ids, charge.query.with_id(charge.id), *hit)
                taken.update(r.ids)
                prepared.append(r)
                n += len(r.ids)

            for mech, query, cid, times in items:
                if times > 1 and split:
                    prepare(mech, query, cid, 1)
                    first = prepared[-1].charge.id
                    for j in range(1, times):
                        prepare(mech, query, f"{first}#{j}", 1)
                else:
                    prepare(mech, query, cid, times)
            # The leading charges the lazy tables hold go in at once; the rest (after a load they
            # cannot hold, or without tables) one by one, as record does.
            bulk = 0
            if self._bounds is not None:
                while bulk < len(prepared) and prepared[bulk].floats is not None:
                    bulk += 1
            if bulk > 1:
                self._record_bulk(prepared[:bulk])
            else:
                bulk = 0
            defer = len(prepared) - bulk >= _BULK
            for r in prepared[bulk:]:
                self._record(r, defer=defer)
            return [r.charge for r in prepared]

    def _record_bulk(self, batch: list[_Recorded]) -> None:
        """Record charges the lazy tables hold (the lock held): :meth:`_record`'s effect on each, in
        order, with the table updates batched."""
        assert self._bounds is not None
        # one cover per distinct coverage (a ledger charges the same query at several loads)
        seen: dict[tuple[tuple[int, Any], ...], Cover] = {}
        covers = []
        for r in batch:
            cover = seen.get(r.query.constraints)
            if cover is None:
                cover = seen[r.query.constraints] = Cover(r.query)
            covers.append(cover)
        self._pending.extend((r.query, r.loads) for r in batch)
        picks = []
        for i, b in enumerate(self._bounds):
            rows = np.stack([r.floats[i] for r in batch if r.floats is not None])
            picks.append(b.add_many(covers, rows))
        member_rows: list[tuple[PredicateQuery, Fraction, int | None]] = []
        for j, r in enumerate(batch):
            charge = r.charge
            for t, e in zip(self._tracks, r.exact, strict=True):
                t.loads[charge.id] = e
                if len(r.ids) > 1:
                    zero: Any = tuple(Fraction(0) for _ in e) if isinstance(e, tuple) else Fraction(0)
                    for other in r.ids[1:]:
                        t.loads[other] = zero
            if self._members is not None:
                member_rows.append((charge.query, r.exact[0], picks[0][j]))
                member_rows.extend((charge.query, Fraction(0), None) for _ in r.ids[1:])
            self._ids.update(r.ids)
            self._n += len(r.ids)
        if self._members is not None:
            self._members.add_many(member_rows)
        self.odometer.extend(
            [
                c
                for r in batch
                for c in [r.charge] + [Charge(i, r.charge.mechanism, r.charge.query) for i in r.ids[1:]]
            ]
        )
        # Every row is known within budget when the final worst-row bound shows it (sound: MATH.md 2.7.1).
        tops = self._exact_bounds([b.top() for b in self._bounds], None)
        self._within = tops is not None and bool(self._exact_ok(tops))
        for r in batch:
            self._note_outside(r.charge, r.query)

    def savepoint(self) -> tuple[int, tuple[int, ...]]:
        """Open a (nested) savepoint: every charge admitted or recorded after it can be undone by
        :meth:`rollback` in time proportional to what it changed (the indexes keep undo records), never
        by a rebuild. Close it with :meth:`rollback` or :meth:`release`, innermost first."""
        with self._lock:
            if self._tracks:
                journal = 0
                if self._bounds is not None:
                    for b in self._bounds:
                        if b.journal is None:
                            b.journal = []
                    journal = len(self._bounds[0].journal or [])
                self._saves.append((self._pending, len(self._pending), journal, self._within))
            return len(self.odometer), tuple(t.index.savepoint() for t in self._tracks)

    def rollback(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        """Forget every charge added since ``savepoint`` (and close it)."""
        n, marks = savepoint
        with self._lock:
            for t, m in zip(self._tracks, marks, strict=True):
                t.index.rollback(m)
            # The indexes are back to their state at the savepoint: so are the pending charges (those
            # flushed since were undone with the indexes: the list object saved was only appended to)
            # and the bounds (their journal). (The indexes' token is the savepoint's nesting depth.)
            if marks:
                pending, length, journal, within = self._saves[marks[0]]
                del self._saves[marks[0] :]
                self._pending = pending[:length]
                if self._bounds is not None:
                    for b in self._bounds:
                        b.undo_to(journal)
                        if not self._saves:
                            b.journal = None
                # (rows within budget then are within it now, with fewer charges: loads only grow)
                self._within = within or self._within
                if self._members is not None:
                    self._members.truncate(n)
            with self.odometer._lock:
                undone = self.odometer._charges[n:]
                del self.odometer._charges[n:]
            for c in undone:
                self._ids.discard(c.id)
                for t in self._tracks:
                    t.loads.pop(c.id, None)
            self._n -= len(undone)
            gone = {c.id for c in undone}
            self._outside = [i for i in self._outside if i not in gone]

    def release(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        """Close ``savepoint`` and keep what was added since."""
        with self._lock:
            for t, m in zip(self._tracks, savepoint[1], strict=True):
                t.index.release(m)
            if savepoint[1]:
                del self._saves[savepoint[1][0] :]
                if not self._saves and self._bounds is not None:
                    for b in self._bounds:
                        b.journal = None

    def set_budget(self, budget: PureDP | ZCDP | GDP | RDP | TCDP | ApproxDP) -> None:
        """Raise or lower the budget (same definition). Admitted charges stay: after a lowering the
        filter refuses new charges until the worst row is back within budget, which it never is again.

        The new budget must keep the filter's tracks and the conditions already applied to admitted
        charges: an RDP budget on the same orders, a tCDP budget with the same omega (a larger omega
        would not hold for charges admitted under the smaller one), an (epsilon, delta) budget under
        the same options (its delta may change: the per-row test is re-derived from it)."""
        if type(budget) is not type(self.budget) or not self.measure.resettable:
            raise BudgetError(
                f"the budget of a {type(self.budget).__name__} filter can change to another "
                f"{type(self.budget).__name__} budget only"
            )
        self.measure.check_reset(self.budget, budget)
        rule = self.measure.rule(budget, self._factor, self._options)
        with self._lock:
            self._check, self._exact_ok, self._refuse = rule.check, rule.exact_ok, rule.refuse
            self._limit = rule.limit
            refuse = rule.refuse
            self._outside = (
                []
                if refuse is None
                else [c.id for c in self.odometer.charges if refuse(c.mechanism, c.query) is not None]
            )
            if rule.row_verdict is not None:
                self._row_verdict = rule.row_verdict
            # Rows known within the old budget may not be within the new one (nor after a rollback to a
            # savepoint opened before): known again only when the worst-row bound shows it.
            old = self.measure.budget_value(self.budget) if self._within else None
            self.budget = budget
            new = self.measure.budget_value(budget)
            if not (isinstance(old, float) and isinstance(new, float) and new >= old and not self._joint):
                self._within = False
                self._saves = [(p, n, j, False) for p, n, j, _ in self._saves]
            if not self._within and self._bounds is not None:
                tops = self._exact_bounds([b.top() for b in self._bounds], None)
                self._within = tops is not None and bool(self._exact_ok(tops))

    _spent: tuple[OverlapResult, float] | None = None

    @contextmanager
    def search_effort(self, seconds: float | None) -> Iterator[None]:
        """Within the block, each overlap search of the filter's indexes stops after ``seconds`` (wall
        clock from its call; the engine's effort limit): :meth:`value` and :meth:`spent` are then safe
        upper bounds, no longer exact, when a search was cut. For a caller with a deadline (the service's
        per-request time budget), which checks it after the block."""
        with self._lock:
            before = [t.index.effort for t in self._tracks]
            for t in self._tracks:
                t.index.effort = seconds
        try:
            yield
        finally:
            with self._lock:
                for t, e in zip(self._tracks, before, strict=True):
                    t.index.effort = e

    def value_is_exact(self) -> bool:
        """Whether :meth:`value` and :meth:`spent` give the exact worst row now (every index's search
        finished); False after a search an effort limit cut (:meth:`search_effort`): they are then
        safe upper bounds. Runs the searches :meth:`value` would (cached: call it after it)."""
        with self._lock:
            if not self._ids:
                return True
            if self._optimal:
                return False  # (not claimed: the odometer's own searches decide it)
            self._flush()
            return all(t.index.result().exact for t in self._tracks)

    def spent_bound(self) -> float:
        """A safe upper bound on :meth:`spent` that never searches: :meth:`spent` itself when the overlap
        index holds every admitted charge (its result is then at hand or one search away), else the
        per-attribute bound on the worst row (MATH.md 2.7.1), widened past float round-off and rounded
        up: pure DP and zCDP the row's sum, GDP the square root of its sum of mu^2. For the service's
        ``remaining`` after an admission, so a lazily admitted charge is not followed by the exact
        search it avoided; reports that need the exact figure call :meth:`spent`."""
        with self._lock:
            bounds = self._bounds
            one_track = not self._optimal and len(self._tracks) == 1 and not self._joint
            if one_track and bool(self._pending) and bounds is not None:
                top = widen(float(bounds[0].top()[0]), self._n + bounds[0].terms)
                if top is not None and self._single_sum and not self._tracks[0].squared:
                    # (pure DP and zCDP: one additive track whose loads are the declared costs)
                    return self._factor * float_up(top)
                if top is not None and self._tracks[0].squared:
                    # (GDP: the loads are mu^2; the doubling is on the squares, sqrt 2 on mu)
                    root = sqrt_up(Fraction(int(self._factor)) * top)
                    if math.isfinite(root):
                        return root
        return self.spent()

    def track_bounds(self) -> list[Any] | None:
        """Per track a safe upper bound on the worst row's EXACT load (a Fraction; a tuple of them per
        Rényi order), each from the lazy tables (MATH.md 2.7.1) with no overlap search, widened past
        float round-off; None when the filter keeps no tables (or a bound is infinite). The bounds of
        different tracks may come from different rows. Before the neighbouring factor (the rule's tests
        apply it). For a caller that must not search (the service under its admission lock)."""
        with self._lock:
            if self._bounds is None or self._optimal:
                return None
            return self._exact_bounds([b.top() for b in self._bounds], None)

    def spent(self) -> float:
        """:meth:`value` for pure DP and zCDP budgets, from the EXACT load of the worst row the index
        located, rounded UP to a float (so ten charges of 0.1 on a row report 1.0000000000000002, and
        charges of 1.0 and 2^-53 report above 1.0); a safe upper bound when the index is not exact.
        Other budgets: :meth:`value`. Cached until the admitted charges change."""
        if not self._single_sum:
            v = self.value()
            if not isinstance(v, float):
                raise BudgetError("spent() reports a single number; use value() for a Rényi DP budget")
            return v
        with self._lock:
            if not self._ids:
                return 0.0
            self._flush()
            t = self._tracks[0]
            r = t.index.result()
            if self._spent is not None and self._spent[0] is r:
                return self._spent[1]
            if r.exact and r.witness_row is not None and all(i in t.loads for i in r.queries):
                value = self._factor * float_up(exact_sum([t.loads[i] for i in r.queries]))
            else:
                value = self._factor * float(r.upper)
            self._spent = (r, value)
            return value


def _tight(r: OverlapResult) -> bool:
    """Whether a non-exact result's safe bound is within 1e-10 (relative) of its witness's value."""
    if r.witness_row is None or isinstance(r.upper, np.ndarray) or isinstance(r.lower, np.ndarray):
        return False
    return float(r.upper) <= float(r.lower) * (1 + 1e-10)


@dataclass(frozen=True)
class _Recorded:
    """A charge checked for :meth:`PrivacyFilter.record`: its ids (``times`` of them), the query with
    its id, the per-track loads (float and exact) and the lazy tables' float loads (None: they cannot
    hold it, or there are none)."""

    charge: Charge
    ids: list[str]
    query: PredicateQuery
    loads: list[Any]
    exact: list[Any]
    floats: list[np.ndarray] | None


def _record_item(item: Sequence[Any]) -> tuple[Mechanism, PredicateQuery | None, str | None, int]:
    """``(mechanism, query[, id[, times]])`` of :meth:`PrivacyFilter.record_many`, checked."""
    if isinstance(item, str | bytes) or not isinstance(item, Sequence) or not 2 <= len(item) <= 4:
        raise BudgetError("record_many takes (mechanism, query[, id[, times]]) items")
    mech, query = item[0], item[1]
    cid = item[2] if len(item) > 2 else None
    times = item[3] if len(item) > 3 else 1
    check_int(times, "times", error=BudgetError)
    return mech, query, cid, times


def _immutable(loads: tuple[tuple[Any, ...], tuple[Any, ...]]) -> bool:
    return all(type(x) in (float, Fraction, tuple) for part in loads for x in part)


def _times(load: Any, k: int) -> Any:
    """``k`` copies of one charge's load: exact for Fractions; floats rounded UP from the exact
    multiple, so that a value reported from the index's float weights (:meth:`PrivacyFilter.value`:
    RDP) never falls below the exact sum (``9 * 0.1`` rounds to 0.9, below ``9 * Fraction(0.1)``)."""
    if k == 1:
        return load
    if isinstance(load, tuple):
        return tuple(_times(x, k) for x in load)
    if isinstance(load, list):
        return [_times(x, k) for x in load]
    if isinstance(load, Fraction):
        return k * load
    return float_up(k * Fraction(load))


# Loads whose floats keep full relative precision in the row sums of the joint rule (2^-900 to 2^900:
# a sum of up to 2^50 of them is neither subnormal nor beyond the float range).
_FLOAT_SAFE = (Fraction(1, 2**900), Fraction(2**900))


def _flat(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, tuple) else (x,)


def _scale(v: Any, factor: Fraction) -> Any:
    return tuple(x * factor for x in v) if isinstance(v, tuple) else v * factor


def _fraction_upper(upper: Any) -> Any:
    """A float safe upper bound (scalar or per component) as Fractions, widened by ``_NEAR``."""
    if isinstance(upper, np.ndarray):
        return tuple(Fraction(float(x)) * (1 + _NEAR) for x in upper)
    return Fraction(float(upper)) * (1 + _NEAR)


def _exact_value(t: _Track, r: OverlapResult) -> Any:
    """An EXACT result's value as a Fraction bound of every row's exact load, in the units of ``exact``
    (squared for the squared tracks, one per component for a vector): its value is the smallest float
    at or above the exact maximum (MATH.md 7.8), so it needs no widening."""
    if isinstance(r.value, np.ndarray):
        return tuple(Fraction(float(x)) for x in r.value)
    v = Fraction(float(r.value))
    return v * v if t.squared else v


def _witness_exact(t: _Track, r: OverlapResult, new_id: str, new: Any) -> Any:
    """The exact load of the peek's witness row(s) (one per component), or None when unknown."""
    if isinstance(new, tuple):
        if len(r.components) != len(new):
            return None
        parts = [_witness_exact_scalar(t, c, new_id, new, k) for k, c in enumerate(r.components)]
        return None if any(p is None for p in parts) else tuple(parts)
    return _witness_exact_scalar(t, r, new_id, new, None)


def _witness_exact_scalar(
    t: _Track, r: OverlapResult, new_id: str, new: Any, k: int | None
) -> Fraction | None:
    if r.witness_row is None:
        return None
    total = Fraction(0)
    for i in r.queries:
        if i == new_id:
            v = new
        elif i in t.loads:
            v = t.loads[i]
        else:
            return None
        total += v if k is None else v[k]
    return total


__all__ = ["AdaptivityError", "Admission", "PrivacyFilter"]
