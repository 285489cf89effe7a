"""The overlap-aware accountant: a ledger of charges, an odometer and a filter (MATH.md sections 1, 2, 5).

A charge is a mechanism's cost plus the coverage of the predicate query it touched (a mechanism run on
all data covers the whole domain: a query with no constraints). A row only pays for the charges whose
coverage holds it (MATH.md 1, per-row view), so for every definition the overlap-aware guarantee is the
maximum over rows of the composition of that row's charges (MATH.md 2):

======== ========================================== =============================================
pure     $\\max_x\\sum_{q\\ni x}\\varepsilon_q$              OverlapIndex / max_overlap, comp ``sum``
zCDP     $\\max_x\\sum_{q\\ni x}\\rho_q$                     comp ``sum``
GDP      $\\max_x\\sqrt{\\sum_{q\\ni x}\\mu_q^2}$             comp ``l2``
RDP      per order $\\max_x\\sum_{q\\ni x}\\varepsilon_q(\\alpha)$ comp ``vector`` (maxima may sit at different rows)
(ε, δ)   $\\max$ over maximal overlapping sets of ε(δ)  max_overlap with a SetComp of PLD compositions
======== ========================================== =============================================

Sequential accounting (what every peer library does) composes all charges regardless of coverage.

Neighbouring relation (MATH.md 1; issue item 5): add/remove one row by default. ``"replace"`` moves one
row from x to x'; the charges that see a difference are those covering exactly one of x, x' (a count
moves by one, and symmetric noise gives the same loss for +1 and -1). The :class:`Odometer` computes the
exact maximum over pairs of row patterns where that is cheap and otherwise the doubling bound
(additive loads over a symmetric difference are at most twice the largest per-row load; for GDP the
factor is sqrt 2 on mu); the :class:`PrivacyFilter` always uses the doubling bound.

Adaptivity. The ODOMETER reports the guarantee of the ledger as if its charges had been fixed in advance.
The FILTER is what makes adaptive use safe; admitting a charge iff the overlap-aware guarantee with it
stays within budget is a per-row (individual) filter, valid when the costs are chosen adaptively:

- pure DP: Rogers, Roth, Ullman, Vadhan 2016 (the pure-DP filter: the realised sum of epsilons of each
  row stays within budget; a charge not covering x costs x nothing);
- zCDP and RDP: Feldman and Zrnic 2021 (arXiv 2008.11193), individual Rényi filter: for each order the
  per-row sum of RDP losses stays within budget; zCDP is RDP with epsilon(alpha) = alpha rho at every order;
- GDP: Smith and Thakurta 2022 (fully adaptive GDP) with per-row $\\sum\\mu^2\\le B^2$;
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
  (MATH.md 5, the combined filter: off the deltas' bad events the loss is at most the sum of epsilons
  surely, and at most the advanced value outside the time-uniform Ville event of probability
  $\\delta'$). So a pure 1-DP child fits an ApproxDP(5, 1e-6) budget though advanced composition alone
  values it at 5.89.

Exact arithmetic: the filter admits only if every row stays within budget in EXACT arithmetic of the
declared float costs (Fractions; ten charges of 0.1 exceed 1.0), see ``PrivacyFilter._admissible``.

Concurrent analysts sharing one filter stay covered too (Haney et al. 2023: every valid filter extends to
concurrent composition; MATH.md 3).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from overlapdp.overlap import OverlapIndex, OverlapResult, SetComp, max_overlap
from overlapdp.overlap.magnitude import float_up, normalised_loads, sqrt_up, unscale_up
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import GDP, RDP, ZCDP, ApproxDP, BudgetError, PureDP, check_delta
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP
from overlapdp.privacy.optimal import compose_approx
from overlapdp.privacy.patterns import maximal_patterns, row_patterns
from overlapdp.privacy.pld import DEFAULT_H
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

Neighbouring = Literal["add_remove", "replace"]
DEFINITIONS = ("pure", "zcdp", "gdp", "rdp", "approx")
# Pairs of row patterns enumerated for the exact replace-one-row maximum (additive forms / PLDs).
_PAIR_WORK_LIMIT = 50_000_000
_PAIR_PLD_LIMIT = 40
# The filter decides in EXACT arithmetic of the declared (float) costs. The overlap index locates the
# worst row on float sums (exact up to about 1e-12 relative): when the witness is this close to the
# budget, the maximum over all row patterns is recomputed with Fractions (or the charge is refused).
_NEAR = Fraction(1, 10**9)
# (row patterns x charges) summed with Fractions in that recomputation; beyond it the charge is refused.
_EXACT_WORK_LIMIT = 2_000_000
# (atom cells x charges) enumerated when the (epsilon, delta) filter decides its rule row by row; it runs
# on refusals no witness row settles, so it must stay cheap (beyond it: the global rule, see the filter).
_JOINT_GRID_LIMIT = 200_000


class AdaptivityError(BudgetError):
    """The requested filter is not valid when costs are chosen adaptively (MATH.md 2)."""


def whole_domain(schema: Schema, id: str | None = None) -> PredicateQuery:
    """The coverage of a mechanism that touches all data: a query with no constraints."""
    return PredicateQuery.from_coverages(schema, {}, id=id)


def _check_neighbouring(value: str) -> Neighbouring:
    if value not in ("add_remove", "replace"):
        raise BudgetError(f"neighbouring must be 'add_remove' or 'replace', got {value!r}")
    return "replace" if value == "replace" else "add_remove"


@dataclass(frozen=True)
class Charge:
    """One mechanism run on the rows covered by ``query``."""

    id: str
    mechanism: Mechanism
    query: PredicateQuery = field(repr=False)


@dataclass(frozen=True)
class DefinitionGuarantee:
    """One definition's guarantee, sequential and overlap-aware, and both converted to epsilon at delta.

    ``sequential`` / ``overlap`` hold the native parameter (epsilon, rho, mu, the RDP curve, or epsilon at
    delta for approximate DP). ``exact`` is False when the overlap-aware value is a safe upper bound.

    ``overlap`` is never above ``sequential``: the sequential composition of every charge bounds each
    row's loss too (a row pays a subset of the charges and composition is monotone in adding mechanisms),
    so when an overlap route only reaches a looser safe bound (a search that gave up, the doubling bound
    for replace-one-row) the sequential value is reported instead. ``bound`` says which side gave the
    value: ``"overlap"``, ``"sequential"``, or ``"mixed"`` (RDP: some orders from each side, each order
    being its own guarantee). ``exact`` stays the overlap route's: when the route is exact the two
    agree up to round-off.
    """

    definition: str
    sequential: float | tuple[float, ...]
    overlap: float | tuple[float, ...]
    sequential_epsilon: float
    overlap_epsilon: float
    witness: dict[str, Any] | None
    exact: bool
    method: str
    bound: str = "overlap"

    def to_json(self) -> dict[str, Any]:
        return {
            "sequential": _num(self.sequential),
            "overlap": _num(self.overlap),
            "sequential_epsilon": _num(self.sequential_epsilon),
            "overlap_epsilon": _num(self.overlap_epsilon),
            "witness": self.witness,
            "exact": self.exact,
            "method": self.method,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class OdometerReport:
    """Everything charged so far: per definition, and the tightest epsilon at ``delta`` either way."""

    delta: float
    charges: int
    neighbouring: str
    definitions: dict[str, DefinitionGuarantee]
    sequential_epsilon: float
    sequential_method: str
    overlap_epsilon: float
    overlap_method: str
    witness: dict[str, Any] | None
    pure_epsilon: tuple[float, float] | None  # (sequential, overlap) for all-pure ledgers
    overlap_bound: str = "overlap"  # the ``bound`` of the definition that gave ``overlap_epsilon``

    def to_json(self) -> dict[str, Any]:
        seq: dict[str, Any] = {"epsilon": _num(self.sequential_epsilon), "method": self.sequential_method}
        ovl: dict[str, Any] = {
            "epsilon": _num(self.overlap_epsilon),
            "witness": self.witness,
            "method": self.overlap_method,
            "bound": self.overlap_bound,
        }
        if self.pure_epsilon is not None:
            seq["pure_epsilon"], ovl["pure_epsilon"] = self.pure_epsilon
        return {
            "delta": self.delta,
            "charges": self.charges,
            "neighbouring": self.neighbouring,
            "sequential": seq,
            "overlap": ovl,
            "definitions": {k: v.to_json() for k, v in self.definitions.items()},
        }


def _num(x: float | tuple[float, ...]) -> Any:
    if isinstance(x, tuple):
        return [_num(v) for v in x]
    return None if math.isinf(x) else float(x)


# -- the ledger and odometer ----------------------------------------------------------------------------
class Odometer:
    """A ledger of charges answering, for every definition that applies, the guarantee of everything
    charged so far, sequentially and overlap-aware (see the module docstring). Thread-safe."""

    def __init__(
        self,
        schema: Schema,
        *,
        orders: Sequence[float] = conv.DEFAULT_ORDERS,
        neighbouring: str = "add_remove",
        h: float = DEFAULT_H,
        effort: float | None = None,
    ) -> None:
        self.schema = schema
        self.orders = RDP(tuple(orders), tuple(0.0 for _ in orders)).orders  # validated
        self.neighbouring = _check_neighbouring(neighbouring)
        self.h = h
        self.effort = effort
        self._charges: list[Charge] = []
        self._lock = threading.Lock()
        self._cache: dict[tuple[object, ...], float] = {}

    @property
    def charges(self) -> tuple[Charge, ...]:
        with self._lock:
            return tuple(self._charges)

    def __len__(self) -> int:
        return len(self._charges)

    def charge(
        self, mechanism: Mechanism, query: PredicateQuery | None = None, id: str | None = None
    ) -> Charge:
        """Record a charge (no budget check: see :class:`PrivacyFilter`)."""
        c = _make_charge(self.schema, mechanism, query, id, len(self._charges))
        with self._lock:
            if any(x.id == c.id for x in self._charges):
                raise BudgetError(f"a charge with id {c.id!r} is already in the ledger")
            self._charges.append(c)
        return c

    def extend(self, charges: Sequence[Charge]) -> None:
        with self._lock:
            self._charges.extend(charges)

    # -- report ---------------------------------------------------------------------------------------
    def report(self, delta: float) -> OdometerReport:
        """Per-definition guarantees and the tightest certified epsilon at ``delta`` (MATH.md 2, 5)."""
        d = check_delta(delta)
        charges = self.charges
        if not charges:
            raise BudgetError("the ledger is empty")
        mechs = [c.mechanism for c in charges]
        queries = [c.query for c in charges]
        defs: dict[str, DefinitionGuarantee] = {}
        pures = [m.pure() for m in mechs]
        if all(p is not None for p in pures):
            w = [p.epsilon for p in pures if p is not None]
            defs["pure"] = self._additive("pure", queries, np.array(w)[:, None], "sum", d)
        zs = [m.zcdp() for m in mechs]
        if all(z is not None for z in zs):
            w = [z.rho for z in zs if z is not None]
            defs["zcdp"] = self._additive("zcdp", queries, np.array(w)[:, None], "sum", d)
        gs = [m.gdp() for m in mechs]
        if all(g is not None for g in gs):
            w = [g.mu for g in gs if g is not None]
            defs["gdp"] = self._additive("gdp", queries, np.array(w)[:, None], "l2", d)
        rs = [m.rdp(self.orders) for m in mechs]
        if all(r is not None for r in rs):
            w2 = np.array([r.epsilons for r in rs if r is not None])
            defs["rdp"] = self._additive("rdp", queries, w2, "vector", d)
        defs["approx"] = self._approx(mechs, queries, d, defs)
        seq_def = min(defs.values(), key=lambda g: g.sequential_epsilon)
        ovl_def = min(defs.values(), key=lambda g: g.overlap_epsilon)
        pure = defs.get("pure")
        return OdometerReport(
            delta=d,
            charges=len(charges),
            neighbouring=self.neighbouring,
            definitions=defs,
            sequential_epsilon=seq_def.sequential_epsilon,
            sequential_method=seq_def.definition,
            overlap_epsilon=ovl_def.overlap_epsilon,
            overlap_method=ovl_def.definition,
            witness=ovl_def.witness,
            pure_epsilon=(float(pure.sequential), float(pure.overlap))  # type: ignore[arg-type]
            if pure is not None
            else None,
            overlap_bound=ovl_def.bound,
        )

    def _additive(
        self, name: str, queries: list[PredicateQuery], loads: np.ndarray, comp: str, delta: float
    ) -> DefinitionGuarantee:
        """Definitions whose per-row loss is an additive load (``loads``: t x K; for GDP, comp ``l2``,
        ``loads`` holds mu and the additive load is mu^2, squared after dividing by a power of two near
        the largest mu, so it neither underflows nor overflows: MATH.md 7, magnitudes)."""
        shift = 0
        if comp == "l2":
            squares, shift = normalised_loads("l2", np.ascontiguousarray(loads[:, 0], dtype=float))
            loads = squares[:, None]
        seq_load = loads.sum(axis=0)
        exact = True
        witness: dict[str, Any] | None
        if self.neighbouring == "add_remove":
            if comp == "vector":
                res = max_overlap(queries, weights=loads.tolist(), comp="vector", effort=self.effort)
                ovl_load = np.asarray(res.value, dtype=float)
            else:
                res = max_overlap(queries, weights=loads[:, 0].tolist(), comp="sum", effort=self.effort)
                ovl_load = np.array([float(res.value)])
            exact = bool(res.exact)
            witness = _witness(res, self._best_component(name, ovl_load, delta))
            method = res.algorithm
        else:
            pair = _replace_pairs(queries, self.schema, loads)
            if pair is not None:
                ovl_load, rows = pair
                k = self._best_component(name, ovl_load, delta)
                witness = _row_witness(self.schema, rows[k])
                method = "pairs"
            else:
                if comp == "vector":
                    res = max_overlap(queries, weights=loads.tolist(), comp="vector", effort=self.effort)
                    base = np.asarray(res.value, dtype=float)
                else:
                    res = max_overlap(queries, weights=loads[:, 0].tolist(), comp="sum", effort=self.effort)
                    base = np.array([float(res.value)])
                ovl_load = 2 * base
                exact = False
                witness = _witness(res, self._best_component(name, ovl_load, delta))
                method = "doubling"
        # The sequential load bounds every row's (and every pair's) load as well: cap a route that only
        # reached a looser safe bound (per component for RDP: each order is its own guarantee). An exact
        # route is the maximum itself, so there the cap only absorbs summation round-off.
        capped = seq_load < ovl_load
        bound = "overlap"
        if capped.any():
            ovl_load = np.minimum(ovl_load, seq_load)
            if not exact:
                bound = "sequential" if capped.all() else "mixed"
        seq_v, ovl_v = _native(name, seq_load, shift), _native(name, ovl_load, shift)
        return DefinitionGuarantee(
            definition=name,
            sequential=seq_v,
            overlap=ovl_v,
            sequential_epsilon=self._to_epsilon(name, seq_v, delta),
            overlap_epsilon=self._to_epsilon(name, ovl_v, delta),
            witness=witness,
            exact=exact,
            method=method,
            bound=bound,
        )

    def _best_component(self, name: str, load: np.ndarray, delta: float) -> int:
        if name != "rdp":
            return 0
        a = np.asarray(self.orders)
        vals = load + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
        return int(np.argmin(vals))

    def _to_epsilon(self, name: str, value: float | tuple[float, ...], delta: float) -> float:
        if name == "pure":
            assert isinstance(value, float)
            return PureDP(value).epsilon_at(delta)
        if name == "zcdp":
            assert isinstance(value, float)
            return ZCDP(value).epsilon_at(delta)
        if name == "gdp":
            assert isinstance(value, float)
            return GDP(value).epsilon_at(delta)
        assert isinstance(value, tuple)
        return RDP(self.orders, value).epsilon_at(delta)

    # -- approximate DP ----------------------------------------------------------------------------
    def overlap_approx(
        self, mechs: Sequence[Mechanism], queries: Sequence[PredicateQuery], delta: float
    ) -> tuple[float, bool, dict[str, Any] | None, str]:
        """Add/remove overlap-aware epsilon(delta): the maximum over maximal overlapping sets of the PLD
        (or KOV) composition of their mechanisms (MATH.md 2), by max_overlap with a SetComp whose cheap
        upper bound is the best closed-form conversion of the set. Returns (epsilon, exact, witness,
        method); when not exact the epsilon is a safe upper bound, never above the composition of ALL of
        ``mechs`` (which bounds every row's subset; method ``"sequential"`` when that was the tighter)."""
        eps, exact, witness, method = self._overlap_route(mechs, queries, delta)
        seq = self._compose_eps(mechs, delta)
        if seq < eps:
            return seq, exact, witness, method if exact else "sequential"
        return eps, exact, witness, method

    def _overlap_route(
        self, mechs: Sequence[Mechanism], queries: Sequence[PredicateQuery], delta: float
    ) -> tuple[float, bool, dict[str, Any] | None, str]:
        """:meth:`overlap_approx` before the cap by the sequential composition."""

        def value(idx: Sequence[int]) -> float:
            return self._compose_eps([mechs[i] for i in idx], delta)

        # Per-row view (MATH.md 1): every row's covering set is one of the row patterns, and only the
        # maximal ones matter for a monotone composition. When the atom grid is small, composing each
        # distinct maximal pattern once is exact and far cheaper than a bounded search over subsets.
        grouped = self._grouped_overlap(mechs, queries, delta, value)
        if grouped is not None:
            return grouped
        pats = maximal_patterns(queries, self.schema, cap=_APPROX_MAX_PATTERNS)
        if pats is not None:
            best, best_row = 0.0, pats.rows[0]
            for members, row in zip(pats.members, pats.rows, strict=True):
                v = value(np.flatnonzero(members).tolist())
                if v > best:
                    best, best_row = v, row
            return best, True, _row_witness(self.schema, best_row), "pld/patterns"
        counted = self._counted_patterns(mechs, queries, delta)
        if counted is not None:
            return counted

        def upper(idx: Sequence[int]) -> float:
            return _cheap_upper([mechs[i] for i in idx], delta, self.h)

        res = max_overlap(list(queries), comp=SetComp(value=value, upper=upper), effort=self.effort)
        return float(res.value), bool(res.exact), res.witness, f"pld/{res.algorithm}"

    def _grouped_overlap(
        self,
        mechs: Sequence[Mechanism],
        queries: Sequence[PredicateQuery],
        delta: float,
        value: Callable[[Sequence[int]], float],
    ) -> tuple[float, bool, dict[str, Any] | None, str] | None:
        """The composed epsilon of a set depends only on how many charges of each distinct mechanism it
        holds, and grows with each count. So composing the per-mechanism maximum counts (each maximised
        over rows on its own, a vector overlap) is a safe upper bound; when some row attains it (checked
        on each component's witness row) it is the exact maximum. None when that does not settle it.
        (MATH.md 2: the overlap-aware epsilon(delta) is the maximum over maximal overlapping sets of the
        composition's epsilon(delta), which is monotone in the set; PLD composition, MATH.md 5.)"""
        groups: dict[str, int] = {}
        label = [groups.setdefault(repr(m.key), len(groups)) for m in mechs]
        k = len(groups)
        if k > _APPROX_MAX_GROUPS:
            return None
        onehot = np.zeros((len(mechs), k))
        onehot[np.arange(len(mechs)), label] = 1.0
        res = max_overlap(list(queries), onehot, comp="vector", effort=self.effort)
        rep: list[Mechanism] = [mechs[label.index(g)] for g in range(k)]
        counts = [math.ceil(float(u) - 1e-9) for u in np.atleast_1d(res.upper)]
        upper = self._compose_eps([rep[g] for g in range(k) for _ in range(counts[g])], delta)
        best, witness = -1.0, None
        for component in res.components:
            v = value(list(component.query_indices))
            if v > best:
                best, witness = v, component.witness
        if best >= upper:
            return upper, True, witness, "pld/grouped"
        return None

    def _counted_patterns(
        self, mechs: Sequence[Mechanism], queries: Sequence[PredicateQuery], delta: float
    ) -> tuple[float, bool, dict[str, Any] | None, str] | None:
        """Exact when the atom grid is small but its maximal patterns are many (e.g. one charge per value
        of many binary attributes): a row's composed epsilon depends only on how many charges of each
        distinct mechanism cover it (identical mechanisms compose identically) and grows with each count,
        so composing the Pareto-maximal count vectors over all row patterns gives the maximum over rows
        (MATH.md 1 per-row view, MATH.md 2). None when the grid or the vectors are too many. Past the
        effort limit the vectors not yet composed are bounded together by the composition of their
        componentwise maximum (a safe upper bound, not exact)."""
        groups: dict[str, int] = {}
        label = [groups.setdefault(repr(m.key), len(groups)) for m in mechs]
        pats = row_patterns(queries, self.schema, limit=_APPROX_GRID_LIMIT)
        if pats is None:
            return None
        onehot = np.zeros((len(mechs), len(groups)), dtype=np.int64)
        onehot[np.arange(len(mechs)), label] = 1
        counts = pats.members.astype(np.int64) @ onehot  # patterns x groups
        vecs, first = np.unique(counts, axis=0, return_index=True)
        if vecs.shape[0] > _APPROX_MAX_VECTORS:  # the Pareto filter below is quadratic
            return None
        keep = [
            i
            for i in range(vecs.shape[0])
            if not bool(np.any(np.all(vecs >= vecs[i], axis=1) & np.any(vecs > vecs[i], axis=1)))
        ]
        if len(keep) > _APPROX_MAX_PATTERNS:
            return None
        rep = [mechs[label.index(g)] for g in range(len(groups))]

        def compose(vec: np.ndarray) -> float:
            return self._compose_eps([rep[g] for g in range(len(groups)) for _ in range(int(vec[g]))], delta)

        keep.sort(key=lambda i: -int(vecs[i].sum()))  # the likely worst first
        deadline = None if self.effort is None else time.monotonic() + self.effort
        best, best_row = 0.0, pats.rows[0]
        for n, i in enumerate(keep):
            if deadline is not None and n > 0 and time.monotonic() > deadline:
                # the rest together: one composition of their componentwise maximum, or each by the
                # closed forms (valid bounds of its loss)
                rest = min(
                    compose(vecs[keep[n:]].max(axis=0)),
                    max(
                        _cheap_upper(
                            [rep[g] for g in range(len(groups)) for _ in range(int(vecs[j, g]))],
                            delta,
                            self.h,
                        )
                        for j in keep[n:]
                    ),
                )
                return max(best, rest), False, _row_witness(self.schema, best_row), "pld/counted-patterns"
            v = compose(vecs[i])
            if v > best:
                best, best_row = v, pats.rows[int(first[i])]
        return best, True, _row_witness(self.schema, best_row), "pld/counted-patterns"

    def _compose_eps(self, mechs: Sequence[Mechanism], delta: float) -> float:
        key = (delta, *sorted(repr(m.key) for m in mechs))
        hit = self._cache.get(key)
        if hit is None:
            hit = compose_approx(list(mechs), h=self.h).epsilon_at(delta) if mechs else 0.0
            self._cache[key] = hit
        return hit

    def _approx(
        self,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        defs: dict[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee:
        """Sequential: the PLD / KOV composition of all charges. Overlap-aware: the maximum over maximal
        overlapping sets of epsilon(delta) of their composition (MATH.md 2), by max_overlap with a SetComp
        whose cheap upper bound is the best closed-form conversion of the set (plus the PLD grid slack),
        capped by the sequential value (a valid bound of every row's subset; ``bound="sequential"``)."""
        seq = self._compose_eps(mechs, delta)

        def value(idx: Sequence[int]) -> float:
            return self._compose_eps([mechs[i] for i in idx], delta)

        exact = True
        witness: dict[str, Any] | None = None
        if self.neighbouring == "add_remove":
            ovl, exact, witness, method = self._overlap_route(mechs, queries, delta)
        else:
            pats = row_patterns(queries, self.schema)
            if pats is not None and pats.members.shape[0] <= _PAIR_PLD_LIMIT:
                ovl, best = 0.0, pats.rows[0]
                m = pats.members
                for a, b in itertools.combinations_with_replacement(range(m.shape[0]), 2):
                    diff = np.flatnonzero(m[a] ^ m[b])
                    v = value(diff.tolist())
                    if v > ovl:
                        ovl, best = v, pats.rows[a]
                witness = _row_witness(self.schema, best)
                method = "pld/pairs"
            else:
                # doubling through the additive definitions that apply (each a valid bound)
                ovl = min((g.overlap_epsilon for g in defs.values()), default=math.inf)
                ovl = min(ovl, _doubled_basic(mechs, queries, delta, self.effort))
                exact = False
                method = "doubling"
        # The composition of every charge bounds every row's (and pair's) subset: never report more
        # (when the route is exact the two agree up to round-off, and the route's value is the truth).
        bound = "overlap"
        if seq < ovl:
            ovl = seq
            if not exact:
                bound = "sequential"
        return DefinitionGuarantee("approx", seq, ovl, seq, ovl, witness, exact, method, bound)


#: Most maximal covering patterns composed one by one before falling back to a bounded search.
_APPROX_MAX_PATTERNS = 2_000
#: Most distinct mechanisms for the grouped route (a vector overlap with one component each).
_APPROX_MAX_GROUPS = 32
#: Largest (atom cells x charges) matrix enumerated by the counted-patterns route, and most distinct
#: count vectors it filters down to the Pareto-maximal ones.
_APPROX_GRID_LIMIT = 2_000_000
_APPROX_MAX_VECTORS = 5_000


def _cheap_upper(mechs: Sequence[Mechanism], delta: float, h: float) -> float:
    """A cheap bound of the PLD composition's epsilon(delta) over every subset of ``mechs``: the best of
    basic composition (pure / (eps, delta) with the deltas within budget), the zCDP conversion, and for
    a mix of zCDP mechanisms with opaque (eps, delta) ones basic composition of the two parts (the
    opaque part's sum of epsilons and of deltas, the zCDP part converted at the delta left), plus
    h per mechanism for the PLD's upward grid rounding (connect-the-dots is dominated by rounding every
    loss up by at most h), and a relative margin for round-off. Every form grows with the set."""
    if not mechs:
        return 0.0
    best = math.inf
    eps_sum, delta_keep = 0.0, 1.0
    basic_ok = True
    for m in mechs:
        p = m.pure()
        if p is not None:
            eps_sum += p.epsilon
        elif isinstance(m, OpaqueApproxDP):
            eps_sum += m.epsilon
            delta_keep *= 1 - m.delta
        else:
            basic_ok = False
            break
    if basic_ok and 1 - delta_keep <= delta:
        best = eps_sum
    zs = [m.zcdp() for m in mechs]
    if all(z is not None for z in zs):
        best = min(best, ZCDP(math.fsum(z.rho for z in zs if z is not None)).epsilon_at(delta))
    elif all(z is not None or isinstance(m, OpaqueApproxDP) for z, m in zip(zs, mechs, strict=True)):
        rho = math.fsum(z.rho for z in zs if z is not None)
        opaque = [m for z, m in zip(zs, mechs, strict=True) if z is None and isinstance(m, OpaqueApproxDP)]
        d_opaque = math.fsum(m.delta for m in opaque) * (1 + 1e-12)
        if d_opaque < delta:
            e_z = ZCDP(rho).epsilon_at(delta - d_opaque) if rho > 0 else 0.0
            best = min(best, e_z + math.fsum(m.epsilon for m in opaque))
    return best * (1 + 1e-6) + h * len(mechs) + 1e-9


def _doubled_basic(
    mechs: list[Mechanism], queries: list[PredicateQuery], delta: float, effort: float | None
) -> float:
    """Replace-one-row bound for (eps, delta) mechanisms by basic composition: per-row sums of eps and of
    delta, doubled (a pair of rows pays at most both rows' charges)."""
    eps, dels = [], []
    for m in mechs:
        p = m.pure()
        if p is not None:
            eps.append(p.epsilon)
            dels.append(0.0)
        elif isinstance(m, OpaqueApproxDP):
            eps.append(m.epsilon)
            dels.append(m.delta)
        else:
            return math.inf
    e = float(max_overlap(queries, weights=eps, comp="sum", effort=effort).value)
    dd = float(max_overlap(queries, weights=dels, comp="sum", effort=effort).value)
    return 2 * e if 2 * dd <= delta else math.inf


def _replace_pairs(
    queries: list[PredicateQuery], schema: Schema, loads: np.ndarray
) -> tuple[np.ndarray, list[tuple[int, ...]]] | None:
    """Exact maximum over pairs of rows (x, x') of the load of the charges covering exactly one of them,
    per component; None when the pattern enumeration is too large."""
    pats = row_patterns(queries, schema)
    if pats is None:
        return None
    m = pats.members.astype(float)
    p = m.shape[0]
    if p * p * max(1, m.shape[1]) * loads.shape[1] > _PAIR_WORK_LIMIT:
        return None
    per_row = m @ loads  # P x K
    out = np.zeros(loads.shape[1])
    rows: list[tuple[int, ...]] = [pats.rows[0]] * loads.shape[1]
    for k in range(loads.shape[1]):
        both = m @ (loads[:, k : k + 1] * m.T)  # P x P: load of charges covering both rows
        sym = per_row[:, k : k + 1] + per_row[:, k][None, :] - 2 * both
        i = int(np.argmax(sym))
        out[k] = max(0.0, float(sym.flat[i]))
        rows[k] = pats.rows[i // p]
    return out, rows


def _native(name: str, load: np.ndarray, shift: int = 0) -> float | tuple[float, ...]:
    if name == "gdp":
        # mu = 2^shift sqrt(load), rounded up (the loads are normalised squares, see _additive).
        return unscale_up("l2", float(load[0]), shift, "Gaussian DP mu")
    if name == "rdp":
        return tuple(float(v) for v in load)
    return float(load[0])


def _witness(res: OverlapResult, component: int) -> dict[str, Any] | None:
    if res.components:
        return res.components[component].witness
    return res.witness


def _row_witness(schema: Schema, row: tuple[int, ...]) -> dict[str, Any]:
    return {a.name: a.value_at(v) for a, v in zip(schema.attributes, row, strict=True)}


def _make_charge(
    schema: Schema, mechanism: Mechanism, query: PredicateQuery | None, id: str | None, n: int
) -> Charge:
    if not isinstance(mechanism, Mechanism):
        raise BudgetError(f"a charge needs a Mechanism, got {type(mechanism).__name__}")
    q = whole_domain(schema) if query is None else query
    if q.schema is not schema and q.schema != schema:
        raise BudgetError("the charged query is over another schema than the accountant's")
    cid = id if id is not None else (q.id if q.id is not None else f"c{n}")
    return Charge(cid, mechanism, q)


# -- the filter -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Admission:
    """The filter's answer: admitted or not, and the overlap-aware value with the charge included."""

    admitted: bool
    charge: Charge | None
    value: float | tuple[float, ...]
    budget: float | tuple[float, ...]
    witness: dict[str, Any] | None
    reason: str = ""


@dataclass
class _Track:
    """One overlap index of the filter and how a mechanism loads it: ``load`` the float the index uses
    to locate the worst row, ``exact`` the same load as a Fraction (a tuple of them for RDP), computed
    from the declared float parameters without rounding, and ``loads`` the exact loads admitted.

    ``squared``: the index is an ``l2`` one fed the parameter itself (GDP mu, the advanced filter's
    epsilon) while ``exact`` is its square: squaring in floats underflows below about 1e-162 and
    overflows above 1e154, and the index squares after normalising (MATH.md 7, magnitudes)."""

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
        budget: PureDP | ZCDP | GDP | RDP | ApproxDP,
        *,
        neighbouring: str = "add_remove",
        composition: str = "advanced",
        adaptive: bool = True,
        delta_slack: float | None = None,
        per_mechanism_delta: float | None = None,
    ) -> None:
        self.schema = schema
        self.budget = budget
        self.neighbouring = _check_neighbouring(neighbouring)
        self._factor = 2.0 if self.neighbouring == "replace" else 1.0  # doubling (module docstring)
        self._fx = Fraction(int(self._factor))
        self._lock = threading.Lock()
        self.odometer = Odometer(schema, neighbouring=self.neighbouring)
        self._n = 0
        self._ids: set[str] = set()
        self._per_mech_delta = per_mechanism_delta
        self._tracks: list[_Track] = []
        self._optimal = False
        self._check: Callable[[list[Any]], tuple[bool, Any]]
        if isinstance(budget, PureDP):
            self._tracks = [
                _Track(
                    OverlapIndex(schema, "sum"),
                    lambda m: _need(m.pure(), m, "pure DP").epsilon,
                    lambda m: Fraction(_need(m.pure(), m, "pure DP").epsilon),
                )
            ]
            self._check = self._scalar_check(budget.epsilon)
            self._exact_ok = self._exact_scalar(Fraction(budget.epsilon))
        elif isinstance(budget, ZCDP):
            self._tracks = [
                _Track(
                    OverlapIndex(schema, "sum"),
                    lambda m: _need(m.zcdp(), m, "zCDP").rho,
                    lambda m: Fraction(_need(m.zcdp(), m, "zCDP").rho),
                )
            ]
            self._check = self._scalar_check(budget.rho)
            self._exact_ok = self._exact_scalar(Fraction(budget.rho))
        elif isinstance(budget, GDP):
            self._tracks = [
                _Track(
                    OverlapIndex(schema, "l2"),
                    lambda m: _need(m.gdp(), m, "Gaussian DP").mu,
                    lambda m: Fraction(_need(m.gdp(), m, "Gaussian DP").mu) ** 2,
                    squared=True,
                )
            ]
            self._check = self._gdp_check(budget.mu)
            self._exact_ok = self._exact_scalar(Fraction(budget.mu) ** 2)
        elif isinstance(budget, RDP):
            orders = budget.orders
            self._tracks = [
                _Track(
                    OverlapIndex(schema, "vector"),
                    lambda m: list(_need(m.rdp(orders), m, "Rényi DP").epsilons),
                    lambda m: tuple(Fraction(e) for e in _need(m.rdp(orders), m, "Rényi DP").epsilons),
                )
            ]
            self._check = self._vector_check(np.array(budget.epsilons))
            bounds = tuple(Fraction(e) for e in budget.epsilons)
            self._exact_ok = lambda v: all(self._fx * x <= b for x, b in zip(v[0], bounds, strict=True))
        elif isinstance(budget, ApproxDP):
            if composition == "optimal" and adaptive:
                raise AdaptivityError(
                    "optimal (epsilon, delta) composition needs the parameters fixed in advance; for "
                    "adaptively chosen charges use composition='advanced' (Whitehouse et al. 2023 filter)"
                )
            if composition not in ("advanced", "optimal"):
                raise BudgetError(f"composition must be 'advanced' or 'optimal', got {composition!r}")
            if budget.delta <= 0:
                raise BudgetError(
                    "an (epsilon, delta) filter needs delta > 0; use a PureDP budget for delta = 0"
                )
            slack = budget.delta / 2 if delta_slack is None else float(delta_slack)
            if not 0 < slack <= budget.delta:
                raise BudgetError(f"delta_slack must lie in (0, {budget.delta}], got {delta_slack!r}")
            self._optimal = composition == "optimal"
            if self._optimal and self.neighbouring == "replace":
                raise BudgetError("the optimal (epsilon, delta) filter supports add/remove neighbours only")
            self._slack = slack
            self._tracks = [
                _Track(
                    OverlapIndex(schema, "l2"),
                    lambda m: self._eps_delta(m)[0],
                    lambda m: Fraction(self._eps_delta(m)[0]) ** 2,
                    squared=True,
                ),
                _Track(
                    OverlapIndex(schema, "sum"),
                    lambda m: self._eps_delta(m)[1],
                    lambda m: Fraction(self._eps_delta(m)[1]),
                ),
                # basic composition's sum of epsilons: a row may stay within budget by either rule
                # (MATH.md 5, the combined filter), so the rule is decided per row, not per track
                _Track(
                    OverlapIndex(schema, "sum"),
                    lambda m: self._eps_delta(m)[0],
                    lambda m: Fraction(self._eps_delta(m)[0]),
                ),
            ]
            self._joint = True
            self._row_verdict = self._float_advanced(budget.epsilon, budget.delta, slack)
            self._check = self._advanced_check(budget.epsilon, budget.delta - slack, slack)
            self._exact_ok = self._exact_advanced(budget.epsilon, budget.delta, slack)
        else:
            raise BudgetError(f"unsupported budget type {type(budget).__name__}")

    # -- checks ---------------------------------------------------------------------------------------
    # ``_check`` reports the float value; ``_exact_ok`` decides admission from exact per-track maxima.
    # When ``_joint`` is set the rule is a condition on each row's JOINT per-track loads that is monotone
    # in every load: holding at the per-track maxima (possibly at different rows) suffices, but failing
    # there does not show that some row fails, so refusals are decided on actual rows.
    _exact_ok: Callable[[list[Any]], bool]
    _joint: bool = False
    _row_verdict: Callable[[np.ndarray], bool | None]

    def _exact_scalar(self, b: Fraction) -> Callable[[list[Any]], bool]:
        def ok(values: list[Any]) -> bool:
            return bool(self._fx * values[0] <= b)

        return ok

    def _exact_advanced(self, eps_g: float, delta_g: float, slack: float) -> Callable[[list[Any]], bool]:
        """The combined filter's rule on one row's loads ``[sum eps^2, sum delta, sum eps]`` (MATH.md 5):
        sum delta <= delta_g - delta' exactly, and EITHER sum eps <= eps_g exactly (basic composition)
        OR the advanced-composition epsilon, a transcendental formula evaluated in floats from the sum
        of squares rounded up with a relative margin far above its few ulps of round-off, is <= eps_g.
        The square root is taken of the exact sum (rounded up) and multiplied by sqrt(2 ln(1/delta')):
        the product 2 ln(1/delta') * s2 would lose precision when s2 is subnormal (epsilons < 1e-154)."""
        delta_room = Fraction(delta_g) - Fraction(slack)
        eps_room = Fraction(eps_g)
        root_log = math.sqrt(-2 * math.log(slack))  # log of the exact float slack: accurate to an ulp

        def ok(values: list[Any]) -> bool:
            if not self._fx * values[1] <= delta_room:
                return False
            if self._fx * values[2] <= eps_room:
                return True
            total = self._fx * values[0]
            half = float_up(total / 2)  # inf beyond the float range: then above any budget
            if half > eps_g:
                return False
            e = (root_log * sqrt_up(total) + half) * (1 + 1e-14)
            return e <= eps_g

        return ok

    def _float_advanced(
        self, eps_g: float, delta_g: float, slack: float
    ) -> Callable[[np.ndarray], bool | None]:
        """The combined rule on one row's float sums ``[sum eps^2, sum delta, sum eps]``: True / False when
        they clear / miss every condition by the relative margin ``_NEAR`` (far above their round-off),
        None when the row must be summed exactly (``_exact_advanced``)."""
        room = delta_g - slack
        log_term = -2 * math.log(slack)
        up, down = 1 + float(_NEAR), 1 - float(_NEAR)

        def adv(s2: float) -> float:
            return math.sqrt(log_term * s2) + s2 / 2

        def verdict(s: np.ndarray) -> bool | None:
            s2, sd, s1 = (self._factor * float(x) for x in s)
            if sd * down > room or (s1 * down > eps_g and adv(s2 * down) > eps_g):
                return False
            if sd * up <= room and (s1 * up <= eps_g or adv(s2 * up) <= eps_g):
                return True
            return None

        return verdict

    def _scalar_check(self, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
        def check(values: list[Any]) -> tuple[bool, Any]:
            v = self._factor * float(values[0])
            return v <= b, v

        return check

    def _gdp_check(self, b: float) -> Callable[[list[Any]], tuple[bool, Any]]:
        def check(values: list[Any]) -> tuple[bool, Any]:
            v = math.sqrt(self._factor) * float(values[0])  # the l2 index holds sqrt(sum mu^2)
            return v <= b, v

        return check

    def _vector_check(self, b: np.ndarray) -> Callable[[list[Any]], tuple[bool, Any]]:
        def check(values: list[Any]) -> tuple[bool, Any]:
            v = self._factor * np.asarray(values[0], dtype=float)
            return bool(np.all(v <= b)), tuple(float(x) for x in v)

        return check

    def _advanced_check(
        self, eps_g: float, delta_g: float, slack: float
    ) -> Callable[[list[Any]], tuple[bool, Any]]:
        log_term = 2 * math.log(1 / slack)

        def check(values: list[Any]) -> tuple[bool, Any]:
            # the value: the smaller of the two rules' epsilons at the per-track maxima (an upper bound
            # of every row's own smaller one)
            root = math.sqrt(self._factor) * float(values[0])  # the l2 index holds sqrt(sum eps^2)
            sd = self._factor * float(values[1])
            e = min(math.sqrt(log_term) * root + root * root / 2, self._factor * float(values[2]))
            return (e <= eps_g and sd <= delta_g), e

        return check

    def _eps_delta(self, m: Mechanism) -> tuple[float, float]:
        p = m.pure()
        if p is not None:
            return p.epsilon, 0.0
        if isinstance(m, OpaqueApproxDP):
            return m.epsilon, m.delta
        if self._per_mech_delta is None:
            raise BudgetError(
                f"{m.name} has no pure-DP guarantee: give per_mechanism_delta to charge it as (epsilon, delta)"
            )
        g = m.approx(self._per_mech_delta)
        return g.epsilon, g.delta

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
            loads = [t.load(mechanism) for t in self._tracks]  # raises before anything changes
            exact = [t.exact(mechanism) for t in self._tracks]
            peeks = [t.index.peek(q, w) for t, w in zip(self._tracks, loads, strict=True)]
            _, value = self._check([r.value for r in peeks])
            ok = self._admissible(q, peeks, exact)
            witness = peeks[0].witness if peeks[0].witness is not None else None
            budget_v = _budget_value(self.budget)
            if not ok:
                return Admission(False, None, value, budget_v, witness, "over budget")
            self._insert(q, loads)
            for t, e in zip(self._tracks, exact, strict=True):
                t.loads[charge.id] = e
            self._ids.add(charge.id)
            self._n += 1
            self.odometer.extend([charge])
            return Admission(True, charge, value, budget_v, witness)

    def _insert(self, q: PredicateQuery, loads: list[Any]) -> None:
        """Put ``q`` (its id set) into every track's index, all or none: a failure part-way removes it
        from the tracks it already reached, most recent first."""
        assert q.id is not None
        added: list[_Track] = []
        try:
            for t, w in zip(self._tracks, loads, strict=True):
                t.index.insert(q, w)
                added.append(t)
        except BaseException:
            for t in reversed(added):
                t.index.remove(q.id)
            raise

    def _admissible(self, q: PredicateQuery, peeks: list[OverlapResult], exact: list[Any]) -> bool:
        """Whether EVERY row's exact cost with the new charge stays within budget (exact arithmetic of
        the declared float costs: ten charges of 0.1 exceed 1.0, as Fraction(0.1) > 1/10).

        The peeks' witnesses are exact rows; when they clear the budget with a margin (``_NEAR``) far
        above the index's float error the charge is admitted, when a witness alone exceeds it the
        charge is refused, and in between every row pattern is summed with Fractions."""
        assert q.id is not None
        # Fast path, O(1) per track: the index's float maximum is a sum of at most n float loads, off by
        # at most n * 2^-53 relative, far below _NEAR for any realistic ledger; widened by _NEAR it
        # bounds every row's exact cost, so a clear fit needs no exact sum over the witness's charges.
        if self._exact_ok([t.upper(r) for t, r in zip(self._tracks, peeks, strict=True)]):
            return True
        uppers: list[Any] = []
        witnesses: list[Any] | None = []
        for t, r, e in zip(self._tracks, peeks, exact, strict=True):
            # The witness is a real row, and when the index's safe bound is within 1e-10 of it (a float
            # tie band too wide to settle, MATH.md 7), widened by _NEAR it bounds every row as well.
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
        return maxima is not None and self._exact_ok(maxima)

    def _exact_rows_ok(self, q: PredicateQuery, exact: list[Any]) -> bool:
        """Whether every row pattern of the admitted charges plus ``q`` passes ``_exact_ok`` with its own
        exact loads (False, i.e. refuse, when the atom grid is too large to enumerate: the decision is
        then the global one, either rule holding at the per-track maxima, sound and at least as
        permissive as either rule alone)."""
        charges = self.odometer.charges
        pats = row_patterns([c.query for c in charges] + [q], self.schema, limit=_JOINT_GRID_LIMIT)
        if pats is None or pats.members.size > _EXACT_WORK_LIMIT:
            return False
        loads = [[t.loads[c.id] for c in charges] + [e] for t, e in zip(self._tracks, exact, strict=True)]
        # float sums decide the rows far from the budget (their error, at most t ulps relative, is far
        # below the _NEAR margin); the rest are summed exactly
        # ... unless a load is beyond the float range or so small that its float (or a sum of squares)
        # loses relative precision: then every row is summed exactly (MATH.md 7, magnitudes)
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
        charges fixed in advance, ``adaptive=False``; MATH.md 2)."""
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
        ledger reproduces the spend exactly even when the budget was lowered since (MATH.md 2).

        ``times`` > 1 records that many identical charges at once (ids ``id``, ``id#1``, ...): one index
        entry carrying ``times`` x the load, exactly (a row's load is the sum over the charges covering
        it, MATH.md 1), so replaying a long ledger keeps the index small."""
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise BudgetError(f"times must be a positive integer, got {times!r}")
        with self._lock:
            charge = _make_charge(self.schema, mechanism, query, id, self._n)
            ids = [charge.id] + [f"{charge.id}#{j}" for j in range(1, times)]
            if any(i in self._ids for i in ids):
                raise BudgetError(f"a charge with id {charge.id!r} is already in the ledger")
            q = charge.query.with_id(charge.id)
            loads = [_times(t.load(mechanism), times) for t in self._tracks]  # raises before any change
            exact = [_times(t.exact(mechanism), times) for t in self._tracks]
            self._insert(q, loads)
            # The group's exact load sits on its first id; the others carry 0 (so that every
            # odometer charge has a load and the exact enumeration sums to the group's load).
            for t, e in zip(self._tracks, exact, strict=True):
                t.loads[charge.id] = e
                zero: Any = tuple(Fraction(0) for _ in e) if isinstance(e, tuple) else Fraction(0)
                for i in ids[1:]:
                    t.loads[i] = zero
            self._ids.update(ids)
            self._n += times
            self.odometer.extend([charge] + [Charge(i, mechanism, charge.query) for i in ids[1:]])
            return charge

    def savepoint(self) -> tuple[int, tuple[int, ...]]:
        """Open a (nested) savepoint: every charge admitted or recorded after it can be undone by
        :meth:`rollback` in time proportional to what it changed (the indexes keep undo records), never
        by a rebuild. Close it with :meth:`rollback` or :meth:`release`, innermost first."""
        with self._lock:
            return len(self.odometer), tuple(t.index.savepoint() for t in self._tracks)

    def rollback(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        """Forget every charge added since ``savepoint`` (and close it)."""
        n, marks = savepoint
        with self._lock:
            for t, m in zip(self._tracks, marks, strict=True):
                t.index.rollback(m)
            with self.odometer._lock:
                undone = self.odometer._charges[n:]
                del self.odometer._charges[n:]
            for c in undone:
                self._ids.discard(c.id)
                for t in self._tracks:
                    t.loads.pop(c.id, None)
            self._n -= len(undone)

    def release(self, savepoint: tuple[int, tuple[int, ...]]) -> None:
        """Close ``savepoint`` and keep what was added since."""
        with self._lock:
            for t, m in zip(self._tracks, savepoint[1], strict=True):
                t.index.release(m)

    def set_budget(self, budget: PureDP | ZCDP | GDP) -> None:
        """Raise or lower the budget (same definition). Admitted charges stay: after a lowering the
        filter refuses new charges until the worst row is back within budget, which it never is again."""
        if type(budget) is not type(self.budget) or not isinstance(budget, PureDP | ZCDP | GDP):
            raise BudgetError(
                f"the budget of a {type(self.budget).__name__} filter can change to another "
                f"{type(self.budget).__name__} budget only (pure DP, zCDP or Gaussian DP)"
            )
        fresh = PrivacyFilter(self.schema, budget, neighbouring=self.neighbouring)
        with self._lock:
            self.budget = budget
            self._check, self._exact_ok = fresh._check, fresh._exact_ok

    _spent: tuple[OverlapResult, float] | None = None

    def spent(self) -> float:
        """:meth:`value` for pure DP and zCDP budgets, from the EXACT load of the worst row the index
        located, rounded UP to a float (so ten charges of 0.1 on a row report 1.0000000000000002, and
        charges of 1.0 and 2^-53 report above 1.0); a safe upper bound when the index is not exact.
        Other budgets: :meth:`value`. Cached until the admitted charges change."""
        if self._optimal or len(self._tracks) != 1 or not isinstance(self.budget, PureDP | ZCDP):
            v = self.value()
            if not isinstance(v, float):
                raise BudgetError("spent() reports a single number; use value() for a Rényi DP budget")
            return v
        with self._lock:
            if not self._ids:
                return 0.0
            t = self._tracks[0]
            r = t.index.result()
            if self._spent is not None and self._spent[0] is r:
                return self._spent[1]
            if r.exact and r.witness_row is not None and all(i in t.loads for i in r.queries):
                value = self._factor * float_up(_dyadic_sum([t.loads[i] for i in r.queries]))
            else:
                value = self._factor * float(r.upper)
            self._spent = (r, value)
            return value


def _tight(r: OverlapResult) -> bool:
    """Whether a non-exact result's safe bound is within 1e-10 (relative) of its witness's value."""
    if r.witness_row is None or isinstance(r.upper, np.ndarray) or isinstance(r.lower, np.ndarray):
        return False
    return float(r.upper) <= float(r.lower) * (1 + 1e-10)


def _times(load: Any, k: int) -> Any:
    """``k`` copies of one charge's load: exact for Fractions; floats (which only locate the worst
    row) rounded to nearest, within the fast path's margin ``_NEAR``."""
    if k == 1:
        return load
    if isinstance(load, tuple):
        return tuple(k * x for x in load)
    if isinstance(load, list):
        return [k * x for x in load]
    return k * load


def _dyadic_sum(values: Sequence[Fraction]) -> Fraction:
    """The exact sum of Fractions whose denominators are powers of two (exact float values and their
    integer multiples), on integers: much faster than adding Fractions one by one."""
    if not values:
        return Fraction(0)
    den = max(v.denominator for v in values)
    if any(den % v.denominator for v in values):
        return sum(values, Fraction(0))
    return Fraction(sum(v.numerator * (den // v.denominator) for v in values), den)


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


def _need(g: Any, m: Mechanism, what: str) -> Any:
    if g is None:
        raise BudgetError(f"{m.name} has no {what} guarantee; it cannot be charged to a {what} budget")
    return g


def _budget_value(b: PureDP | ZCDP | GDP | RDP | ApproxDP) -> float | tuple[float, ...]:
    if isinstance(b, PureDP | ApproxDP):
        return b.epsilon
    if isinstance(b, ZCDP):
        return b.rho
    if isinstance(b, GDP):
        return b.mu
    return b.epsilons


__all__ = [
    "DEFINITIONS",
    "AdaptivityError",
    "Admission",
    "Charge",
    "DefinitionGuarantee",
    "Odometer",
    "OdometerReport",
    "PrivacyFilter",
    "whole_domain",
]
