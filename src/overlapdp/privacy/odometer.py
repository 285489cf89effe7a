"""The odometer: a ledger of charges and its guarantee under every definition (MATH.md 1, 2, 5).

A charge is a mechanism's cost plus the coverage of the predicate query it touched (a mechanism run on
all data covers the whole domain: a query with no constraints). A row only pays for the charges whose
coverage holds it (MATH.md 1.8), so for every definition the overlap-aware guarantee is the
maximum over rows of the composition of that row's charges (MATH.md 2.4):

======== ========================================== =============================================
pure     $\\max_x\\sum_{q\\ni x}\\varepsilon_q$              OverlapIndex / max_overlap, comp ``sum``
zCDP     $\\max_x\\sum_{q\\ni x}\\rho_q$                     comp ``sum``
GDP      $\\max_x\\sqrt{\\sum_{q\\ni x}\\mu_q^2}$             comp ``l2``
RDP      per order $\\max_x\\sum_{q\\ni x}\\varepsilon_q(\\alpha)$ comp ``vector`` (maxima may sit at different rows)
tCDP     $(\\max_x\\sum_{q\\ni x}\\rho_q,\\ \\min_q\\omega_q)$        comp ``sum`` on rho; omega over charges covering a row
(ε, δ)   $\\max$ over maximal overlapping sets of ε(δ)  max_overlap with a SetComp of PLD compositions
======== ========================================== =============================================

Sequential accounting (what every peer library does) composes all charges regardless of coverage.

Neighbouring relation (MATH.md 1.2): add/remove one row by default. ``"replace"`` moves one
row from x to x'; the charges that see a difference are those covering exactly one of x, x' (a count
moves by one, and symmetric noise gives the same loss for +1 and -1). When the schema drops rows
outside its domain (``outside="drop"``) such a row is one more row value, covered by no query: a
row moving out of the domain changes every count that covered it. The :class:`Odometer` computes the
exact maximum over pairs of row patterns where that is cheap and otherwise the doubling bound
(additive loads over a symmetric difference are at most twice the largest per-row load; for GDP the
factor is sqrt 2 on mu); the :class:`~overlapdp.privacy.privacy_filter.PrivacyFilter` always uses the
doubling bound.

The definitions are the :data:`~overlapdp.privacy.measures.MEASURES`: the odometer loops over them, each
picking one of the two routes here (:meth:`Odometer.additive_guarantee` for the additive loads of pure DP,
zCDP, GDP, RDP and tCDP's rho;
:meth:`Odometer.approx_guarantee` for the PLD composition of (epsilon, delta)) and
supplying its own loads, native value and conversion to epsilon at delta. The odometer reports the
guarantee of the ledger as if its charges had been fixed in advance; the
:class:`~overlapdp.privacy.privacy_filter.PrivacyFilter` is what makes adaptive use safe.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from overlapdp.errors import MagnitudeError
from overlapdp.exact import float_up, fsum_up
from overlapdp.overlap import OverlapResult, SetComp, max_overlap
from overlapdp.overlap.cover import Cover
from overlapdp.overlap.magnitude import exact_total, exponent, scale_up
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import RDP, ZCDP, BudgetError, PureDP, check_delta
from overlapdp.privacy.definitions import check_neighbouring as _check_neighbouring
from overlapdp.privacy.measures import (
    MEASURES,
    AccountingContext,
    AdditiveMeasure,
    ApproxMeasure,
    DefinitionGuarantee,
    GDPMeasure,
    Measure,
    PureMeasure,
    ZCDPMeasure,
    num,
)
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP, kept_by_cost
from overlapdp.privacy.optimal import compose_approx
from overlapdp.privacy.patterns import maximal_patterns, neighbour_patterns, row_patterns
from overlapdp.privacy.pld import DEFAULT_H
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

# Pairs of row patterns enumerated for the exact replace-one-row maximum (additive forms / PLDs).
_PAIR_WORK_LIMIT = 50_000_000
_PAIR_PLD_LIMIT = 40
# Pairs within the float sums' round-off of the maximum summed exactly; beyond, a safe bound.
_PAIR_BAND = 50_000


def whole_domain(schema: Schema, id: str | None = None) -> PredicateQuery:
    """The coverage of a mechanism that touches all data: a query with no constraints."""
    return PredicateQuery.from_coverages(schema, {}, id=id)


@dataclass(frozen=True)
class Charge:
    """One mechanism run on the rows covered by ``query``."""

    id: str
    mechanism: Mechanism
    query: PredicateQuery = field(repr=False)


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
        seq: dict[str, Any] = {"epsilon": num(self.sequential_epsilon), "method": self.sequential_method}
        ovl: dict[str, Any] = {
            "epsilon": num(self.overlap_epsilon),
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
        self.measures: tuple[Measure[Any], ...] = tuple(m.for_orders(self.orders) for m in MEASURES)
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
    def report(self, delta: float, *, cover: Cover | None = None) -> OdometerReport:
        """Per-definition guarantees and the tightest certified epsilon at ``delta`` (MATH.md 2, 5).

        ``cover``: a certificate for the additive definitions' worst row, sets of the ledger's charges
        (by position) with amounts, e.g. the :class:`~overlapdp.mechanisms.allocation.Allocation` of the
        shares charged; it is checked on the charges' own coverages and weighed (MATH.md 7.11) where the
        overlap search is cut by the effort limit, so it can only lower a bound, never below the truth."""
        d = check_delta(delta)
        charges = self.charges
        if not charges:
            raise BudgetError("the ledger is empty")
        ctx: AccountingContext = self if cover is None else _Covered(self, cover)
        mechs = [c.mechanism for c in charges]
        queries = [c.query for c in charges]
        defs: dict[str, DefinitionGuarantee] = {}
        for measure in self.measures:
            try:
                g = measure.account(ctx, mechs, queries, d, defs)
            except MagnitudeError:
                # a row's (or the ledger's) load beyond the largest float (MATH.md 7.8): inf is its
                # value rounded up, reported rather than raised
                g = _overflowed(measure)
            if g is not None:
                defs[measure.name] = g
        if not defs:
            raise BudgetError(
                "no privacy definition covers every charge of the ledger (e.g. an (epsilon, delta) "
                "charge beside a tCDP one); convert the charges to one definition"
            )
        pure = defs.get(PureMeasure.name)  # an all-pure ledger's epsilons, reported beside the tightest
        seq_def = min(defs.values(), key=lambda g: g.sequential_epsilon)
        ovl_def = min(defs.values(), key=lambda g: g.overlap_epsilon)
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

    def exceeds(
        self, limit: float, *, definition: str = PureMeasure.name, effort: float | None = None
    ) -> tuple[str, ...] | None:
        """Whether some row's loss under an additive ``definition`` (``"pure"`` epsilon, ``"zcdp"`` rho,
        ``"gdp"`` mu) is over ``limit``: the ids of the charges covering such a row, or None when every
        row is within it. Decided exactly over the whole domain by the threshold decision (MATH.md 7.9,
        the question a filter asks near its budget: cheaper than the maximum :meth:`report` looks for,
        so it settles plans the report's search leaves at a loose bound); add/remove neighbours only.
        Raises :class:`~overlapdp.errors.SearchGaveUp` past ``effort`` seconds."""
        from overlapdp.overlap import _clock
        from overlapdp.overlap.threshold import coverage_tables, tables_exceed

        if self.neighbouring != "add_remove":
            raise BudgetError("exceeds decides rows under add/remove neighbours; report() bounds pairs")
        if not (isinstance(limit, int | float) and math.isfinite(limit) and limit >= 0):
            raise BudgetError(f"exceeds needs a finite non-negative limit, got {limit!r}")
        # one number per row: epsilon, rho, mu (tCDP's omega and RDP's orders are not one load)
        one_load = {PureMeasure.name, ZCDPMeasure.name, GDPMeasure.name}
        measure = next((m for m in self.measures if m.name == definition), None)
        if definition not in one_load or not isinstance(measure, AdditiveMeasure):
            raise BudgetError(
                f"exceeds decides {', '.join(sorted(one_load))} among the odometer's measures, not {definition!r}"
            )
        charges = self.charges
        loads: list[Fraction] = []
        for c in charges:
            g = measure.guarantee_of(c.mechanism)
            if g is None:
                raise BudgetError(f"charge {c.id!r} has no {definition} guarantee")
            weight = measure.weight(g)
            assert not isinstance(weight, tuple)  # a scalar comp's load
            w = Fraction(float(weight))
            loads.append(w * w if measure.comp == "l2" else w)
        top = Fraction(limit) ** (2 if measure.comp == "l2" else 1)
        queries = [c.query for c in charges]
        if not charges:
            return None
        if not any(q.constraints for q in queries):
            return tuple(c.id for c in charges) if sum(loads, Fraction(0)) > top else None
        cells = len(queries) * sum(
            self.schema.attributes[p].size for p in {p for q in queries for p, _ in q.constraints}
        )
        if cells > EXCEEDS_CELLS:
            raise BudgetError(f"exceeds tabulates charges x values: {cells} cells, over {EXCEEDS_CELLS}")
        deadline = None if effort is None else _clock.now() + effort
        _, _, tables = coverage_tables(queries)
        row = tables_exceed(tables, loads, top, deadline)
        if row is None:
            return None
        inside = np.ones(len(charges), dtype=bool)
        for t, v in zip(tables, row, strict=True):
            inside &= t[:, v]
        return tuple(c.id for c, hit in zip(charges, inside.tolist(), strict=True) if hit)

    def additive_guarantee(
        self,
        measure: AdditiveMeasure[Any, Any],
        queries: list[PredicateQuery],
        loads: np.ndarray,
        delta: float,
        cover: Cover | None = None,
    ) -> DefinitionGuarantee:
        """A definition whose per-row loss is an additive load (``loads``: t x K, composed by
        ``measure.comp``; for ``l2`` (GDP) ``loads`` holds mu and the additive load is mu^2, squared after
        dividing by a power of two near the largest mu, so it neither underflows nor overflows: MATH.md 7.8).
        The maximum over rows (MATH.md 2.4), or for replace-one-row over pairs of rows (MATH.md 1.2),
        capped by the sequential composition; ``measure`` gives the native value and epsilon."""
        comp = measure.comp
        shift = 0
        if comp == "l2":
            # mu / 2^E, squared and rounded UP from the exact square (a float square rounds to nearest,
            # and the routes sum these squares exactly: MATH.md 7.8)
            mus = np.ascontiguousarray(loads[:, 0], dtype=float)
            shift = exponent(mus)
            scaled = scale_up(mus, shift)
            loads = np.array([[float_up(Fraction(float(x)) ** 2)] for x in scaled.tolist()]).reshape(-1, 1)
        seq_load = _column_sums_up(loads)
        exact = True
        witness: dict[str, Any] | None
        if self.neighbouring == "add_remove":
            if comp == "vector":
                res = max_overlap(queries, weights=loads.tolist(), comp="vector", effort=self.effort)
                ovl_load = np.asarray(res.value, dtype=float)
            else:
                res = max_overlap(
                    queries, weights=loads[:, 0].tolist(), comp="sum", effort=self.effort, cover=cover
                )
                ovl_load = np.array([float(res.value)])
            exact = bool(res.exact)
            witness = _witness(res, measure.best_component(ovl_load, delta))
            method = res.algorithm
        else:
            pair = _replace_pairs(queries, self.schema, loads)
            if pair is not None:
                ovl_load, rows, exact = pair
                k = measure.best_component(ovl_load, delta)
                witness = _row_witness(self.schema, rows[k])
                method = "pairs"
            else:
                if comp == "vector":
                    res = max_overlap(queries, weights=loads.tolist(), comp="vector", effort=self.effort)
                    base = np.asarray(res.value, dtype=float)
                else:
                    res = max_overlap(
                        queries, weights=loads[:, 0].tolist(), comp="sum", effort=self.effort, cover=cover
                    )
                    base = np.array([float(res.value)])
                ovl_load = 2 * base
                exact = False
                witness = _witness(res, measure.best_component(ovl_load, delta))
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
        seq_v, ovl_v = measure.native(seq_load, shift), measure.native(ovl_load, shift)
        return DefinitionGuarantee(
            definition=measure.name,
            sequential=seq_v,
            overlap=ovl_v,
            sequential_epsilon=measure.to_epsilon(seq_v, delta),
            overlap_epsilon=measure.to_epsilon(ovl_v, delta),
            witness=witness,
            exact=exact,
            method=method,
            bound=bound,
        )

    # -- approximate DP ----------------------------------------------------------------------------
    def overlap_approx(
        self, mechs: Sequence[Mechanism], queries: Sequence[PredicateQuery], delta: float
    ) -> tuple[float, bool, dict[str, Any] | None, str]:
        """Add/remove overlap-aware epsilon(delta): the maximum over maximal overlapping sets of the PLD
        (or KOV) composition of their mechanisms (MATH.md 2.3), by max_overlap with a SetComp whose cheap
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

        # Per-row view (MATH.md 1.8): every row's covering set is one of the row patterns, and only the
        # maximal ones matter for a monotone composition. When the atom grid is small, composing each
        # distinct maximal pattern once is exact and far cheaper than a bounded search over subsets.
        grouped = self._grouped_overlap(mechs, queries, delta, value)
        if grouped is not None:
            return grouped
        by_parts = self._parts_overlap(
            mechs, queries, value, lambda idx: _cheap_upper([mechs[i] for i in idx], delta, self.h)
        )
        if by_parts is not None:
            return by_parts
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
        (MATH.md 2.3: the overlap-aware epsilon(delta) is the maximum over maximal overlapping sets of the
        composition's epsilon(delta), which is monotone in the set; PLD composition, MATH.md 5.4.)"""
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

    def _parts_overlap(
        self,
        mechs: Sequence[Mechanism],
        queries: Sequence[PredicateQuery],
        value: Callable[[Sequence[int]], float],
        upper: Callable[[Sequence[int]], float],
    ) -> tuple[float, bool, dict[str, Any] | None, str] | None:
        """Exact on workloads that split into small independent parts (wide schemas, MATH.md 7.10).

        The composed epsilon grows with each distinct mechanism's count in the set (see
        :meth:`_grouped_overlap`). A row's count vector is the free charges' plus, per part, the count
        vector of the part's charges covering the row's values there, each part's values chosen
        independently: the achievable vectors are the Minkowski sum of the parts' sets, and a monotone
        function is largest on a Pareto-maximal one, which is a sum of Pareto-maximal vectors of the
        parts. So each part's undominated atom combinations give its Pareto set, the sets are added
        with dominated sums dropped, and the vectors left are composed (exactly as any set is) by
        decreasing cheap bound ``upper``, until that bound is at most the best composed. None when
        there is no split, a part has too many atom combinations, or the sets grow too large."""
        from overlapdp.overlap import parts as parts_mod
        from overlapdp.overlap._compiled import compile_workload
        from overlapdp.overlap.branch import atom_tables

        groups: dict[str, int] = {}
        label = np.array([groups.setdefault(repr(m.key), len(groups)) for m in mechs], dtype=np.int64)
        k = len(groups)
        if k > _APPROX_MAX_GROUPS or not queries:
            return None
        c = compile_workload(list(queries), self.schema)
        found = parts_mod.split(c)
        if found is None:
            return None
        base = np.bincount(label[found.free], minlength=k)
        # Pareto set so far: vectors, and per part added the choice each vector came from.
        vectors = base[None, :]
        trail: list[tuple[np.ndarray, np.ndarray, list[list[tuple[int, int]]]]] = []
        for part in found.parts:
            pc = part.compiled
            tables = atom_tables(pc)
            n = pc.live.shape[0]
            masks = np.ones((1, n), dtype=bool)
            combos = np.zeros((1, 0), dtype=np.int64)
            for t in tables:
                if masks.shape[0] * t.size > _PART_COMBOS:
                    return None
                masks = (masks[:, None, :] & t.member[None, :, :]).reshape(-1, n)
                combos = np.concatenate(
                    [np.repeat(combos, t.size, axis=0), np.tile(np.arange(t.size), combos.shape[0])[:, None]],
                    axis=1,
                )
            onehot = np.zeros((n, k), dtype=np.int64)
            onehot[np.arange(n), label[part.queries]] = 1
            counts = masks.astype(np.int64) @ onehot
            keep = _pareto(counts)
            counts, combos = counts[keep], combos[keep]
            rows = [
                [
                    (int(part.positions[j]), int(pc.attributes[j].cuts[tables[j].segment[a]]))
                    for j, a in enumerate(combo.tolist())
                ]
                for combo in combos
            ]
            summed = (vectors[:, None, :] + counts[None, :, :]).reshape(-1, k)
            if summed.shape[0] > _PARETO_WORK:
                return None
            keep = _pareto(summed)
            if keep.shape[0] > _PARETO_KEEP:
                return None
            trail.append((keep // counts.shape[0], keep % counts.shape[0], rows))
            vectors = summed[keep]
        # Compose each Pareto-maximal vector (charges picked by count from each mechanism's own).
        members = [np.flatnonzero(label == g).tolist() for g in range(k)]
        picks = [[i for g in range(k) for i in members[g][: int(v[g])]] for v in vectors]
        bounds = [upper(idx) for idx in picks]
        best, at = -1.0, 0
        for j in sorted(range(len(picks)), key=lambda j: -bounds[j]):
            if bounds[j] <= best:
                break  # (a safe bound of every later vector's composition)
            v = value(picks[j])
            if v > best:
                best, at = v, j
        chosen = at
        point = [0] * len(self.schema)
        for p, v in zip(found.fixed_positions.tolist(), found.fixed_values.tolist(), strict=True):
            point[p] = v
        for parent, choice, rows in reversed(trail):
            for p, v in rows[int(choice[at])]:
                point[p] = v
            at = int(parent[at])
        row = tuple(point)
        covering = c.covering(row)
        got = np.bincount(label[covering], minlength=k)
        if not np.array_equal(got, vectors[chosen]):
            return None  # (cannot happen: the row attains its vector; never report what it does not)
        return value(covering.tolist()), True, self.schema.row(row), "pld/parts"

    def _counted_patterns(
        self, mechs: Sequence[Mechanism], queries: Sequence[PredicateQuery], delta: float
    ) -> tuple[float, bool, dict[str, Any] | None, str] | None:
        """Exact when the atom grid is small but its maximal patterns are many (e.g. one charge per value
        of many binary attributes): a row's composed epsilon depends only on how many charges of each
        distinct mechanism cover it (identical mechanisms compose identically) and grows with each count,
        so composing the Pareto-maximal count vectors over all row patterns gives the maximum over rows
        (MATH.md 1.8, MATH.md 2.4). None when the grid or the vectors are too many. Past the
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
        """epsilon at ``delta`` of the composition of ``mechs``: PLD / KOV (:func:`compose_approx`), or,
        for a mechanism whose privacy loss reaches beyond ``_PLD_MAX_LOSS`` (its PLD grid would hold
        millions of points, and ``e^loss`` overflows past 709), the closed forms of
        :func:`_cheap_upper` at no grid slack: basic composition or the zCDP conversion, each a valid
        bound of the composition (MATH.md 5.3, 5.8), inf when none applies. At such losses either is
        within a relative 1e-6 of the truth that matters (epsilon of hundreds)."""
        key = (delta, *sorted(repr(m.key) for m in mechs))
        hit = self._cache.get(key)
        if hit is None:
            if not mechs:
                hit = 0.0
            elif any(_wide_loss(m) for m in mechs):
                hit = _cheap_upper(mechs, delta, 0.0)
            else:
                hit = compose_approx(list(mechs), h=self.h).epsilon_at(delta)
            self._cache[key] = hit
        return hit

    def approx_guarantee(
        self,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee:
        """Sequential: the PLD / KOV composition of all charges. Overlap-aware: the maximum over maximal
        overlapping sets of epsilon(delta) of their composition (MATH.md 2.3), by max_overlap with a SetComp
        whose cheap upper bound is the best closed-form conversion of the set (plus the PLD grid slack),
        capped by the sequential value (a valid bound of every row's subset; ``bound="sequential"``).
        For replace-one-row beyond the exact pair enumeration, the doubling bound through ``earlier``, the
        additive definitions already accounted (each a valid bound)."""
        seq = self._compose_eps(mechs, delta)

        def value(idx: Sequence[int]) -> float:
            return self._compose_eps([mechs[i] for i in idx], delta)

        exact = True
        witness: dict[str, Any] | None = None
        if self.neighbouring == "add_remove":
            ovl, exact, witness, method = self._overlap_route(mechs, queries, delta)
        else:
            pats = neighbour_patterns(queries, self.schema)  # with the outside row (MATH.md 1.2)
            if pats is not None and pats.members.shape[0] <= _PAIR_PLD_LIMIT:
                ovl, best = 0.0, pats.domain_row(0, 0)
                m = pats.members
                for a, b in itertools.combinations_with_replacement(range(m.shape[0]), 2):
                    diff = np.flatnonzero(m[a] ^ m[b])
                    v = value(diff.tolist())
                    if v > ovl:
                        ovl, best = v, pats.domain_row(a, b)
                witness = _row_witness(self.schema, best)
                method = "pld/pairs"
            else:
                # doubling through the additive definitions that apply (each a valid bound)
                ovl = min((g.overlap_epsilon for g in earlier.values()), default=math.inf)
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
        return DefinitionGuarantee(ApproxMeasure.name, seq, ovl, seq, ovl, witness, exact, method, bound)


#: Largest privacy loss (in absolute value) of one mechanism composed by PLD; beyond it, closed forms.
_PLD_MAX_LOSS = 100.0


@dataclass(frozen=True)
class _Covered:
    """The odometer's routes for one report with a cover: the additive route weighs it."""

    odometer: Odometer
    cover: Cover

    def additive_guarantee(
        self,
        measure: AdditiveMeasure[Any, Any],
        queries: list[PredicateQuery],
        loads: np.ndarray,
        delta: float,
    ) -> DefinitionGuarantee:
        return self.odometer.additive_guarantee(measure, queries, loads, delta, self.cover)

    def approx_guarantee(
        self,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee:
        return self.odometer.approx_guarantee(mechs, queries, delta, earlier)


#: Most charges x values the whole-domain decision tabulates (booleans: 50 MB).
EXCEEDS_CELLS = 50_000_000


def _wide_loss(m: Mechanism) -> bool:
    """Whether ``m``'s privacy loss reaches beyond ``_PLD_MAX_LOSS`` (a PLD grid too long to build)."""
    if isinstance(m, OpaqueApproxDP):
        return m.epsilon > _PLD_MAX_LOSS
    lo, hi = m.loss_range()
    return not max(abs(lo), abs(hi)) <= _PLD_MAX_LOSS


#: Most loads (charges x components) whose sequential sums are computed exactly rounded up.
_EXACT_SUM_LIMIT = 500_000
#: Most maximal covering patterns composed one by one before falling back to a bounded search.
_APPROX_MAX_PATTERNS = 2_000
#: Most distinct mechanisms for the grouped route (a vector overlap with one component each).
_APPROX_MAX_GROUPS = 32
# The exact route by parts (Odometer._parts_overlap): atom combinations of one part, sums compared when
# adding a part's Pareto set, and Pareto-maximal vectors kept (each is composed at the end).
_PART_COMBOS = 4096
_PARETO_WORK = 1_000_000
_PARETO_KEEP = 256
#: Largest (atom cells x charges) matrix enumerated by the counted-patterns route, and most distinct
#: count vectors it filters down to the Pareto-maximal ones.
_APPROX_GRID_LIMIT = 2_000_000
_APPROX_MAX_VECTORS = 5_000


def _column_sums_up(loads: np.ndarray) -> np.ndarray:
    """Each column's exact sum rounded UP to a float: the sequential load, which caps the overlap-aware
    one, so a sum rounded to nearest below the exact total (ten 0.1 sum to 1.0 < 10 * Fraction(0.1))
    would under-report even an exact overlap route. ``fsum`` is correctly rounded, and the sign of the
    correctly rounded ``exact - fsum`` says whether it was rounded down. Past ``_EXACT_SUM_LIMIT`` loads
    (about 0.1 s of fsum) the float sum is widened by its error bound instead: the n non-negative loads
    of a column sum to within $\\gamma_{n-1}$ relative of the exact total (Higham), so
    $\\mathrm{fl}(s)(1+2nu)$, rounded up, is above it (not the smallest such float, but above every
    row's exact load, so an exact overlap route is never capped by it)."""
    if loads.size > _EXACT_SUM_LIMIT:
        n = loads.shape[0]
        return np.asarray(np.nextafter(loads.sum(axis=0) * (1 + n * 2.0**-52), np.inf))
    out = np.empty(loads.shape[1])
    for k in range(loads.shape[1]):
        out[k] = fsum_up(loads[:, k].tolist())
    return out


def _fsum(values: Iterable[float]) -> float:
    """``math.fsum``, inf where the exact sum leaves the float range (fsum raises OverflowError)."""
    try:
        return math.fsum(values)
    except OverflowError:
        return math.inf


# guarantees by cost_key (never by a class's own equality, which may leave out what changes the cost),
# one table per kind of guarantee
_PURE: dict[tuple[Any, ...], Any] = {}
_ZCDP: dict[tuple[Any, ...], Any] = {}
_GUARANTEES_KEPT = 4096


def _pure_of(m: Mechanism) -> PureDP | None:
    """``m.pure()``, computed once per distinct mechanism of a class costed by its fields
    (:func:`~overlapdp.privacy.mechanisms.cost_key`; a search bounds thousands of sets of the same few
    mechanisms, and the guarantee is exact Fraction arithmetic each time)."""
    got: PureDP | None = kept_by_cost(_PURE, m, lambda x: x.pure(), _GUARANTEES_KEPT)
    return got


def _zcdp_of(m: Mechanism) -> ZCDP | None:
    """``m.zcdp()``, computed once per distinct mechanism (see :func:`_pure_of`)."""
    got: ZCDP | None = kept_by_cost(_ZCDP, m, lambda x: x.zcdp(), _GUARANTEES_KEPT)
    return got


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
        p = _pure_of(m)
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
    zs = [_zcdp_of(m) for m in mechs]
    if all(z is not None for z in zs):
        rho = _fsum(z.rho for z in zs if z is not None)
        if math.isfinite(rho):  # (a sum past the float range bounds nothing)
            best = min(best, ZCDP(rho).epsilon_at(delta))
    elif all(z is not None or isinstance(m, OpaqueApproxDP) for z, m in zip(zs, mechs, strict=True)):
        rho = _fsum(z.rho for z in zs if z is not None)
        opaque = [m for z, m in zip(zs, mechs, strict=True) if z is None and isinstance(m, OpaqueApproxDP)]
        d_opaque = _fsum(m.delta for m in opaque) * (1 + 1e-12)
        if d_opaque < delta and math.isfinite(rho):
            e_z = ZCDP(rho).epsilon_at(delta - d_opaque) if rho > 0 else 0.0
            best = min(best, e_z + _fsum(m.epsilon for m in opaque))
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
) -> tuple[np.ndarray, list[tuple[int, ...]], bool] | None:
    r"""Maximum over pairs of rows (x, x') of the load of the charges covering exactly one of them, per
    component (MATH.md 1.2), with a row of the worst pair per component and whether the maximum is
    exact; None when the pattern enumeration is too large.

    Each pair's load is summed over its symmetric difference (never as a difference of sums, which
    cancels and gives inf - inf = nan past the float range). The float sums locate the maximum $F$,
    which is exact when the loads' float sums are (:func:`_float_sums_exact`); otherwise they are within
    $\gamma_t=t\,2^{-53}$ (relative) of the exact sums, so every pair within $3\gamma_t$ of $F$ is
    summed exactly and the largest, rounded up, is the value (past ``_PAIR_BAND`` such pairs:
    $F(1+2\gamma_t)$ rounded up, a safe bound, not exact)."""
    pats = neighbour_patterns(queries, schema)
    if pats is None:
        return None
    m = pats.members
    p, t = m.shape
    kk = loads.shape[1]
    if p * p * max(1, t) * kk > _PAIR_WORK_LIMIT:
        return None
    exact_sums = [_float_sums_exact(loads[:, k].tolist()) for k in range(kk)]
    gamma = t * 2.0**-53 * 1.01
    with np.errstate(over="ignore"):  # a sum past the float range is inf, summed exactly below
        top = np.zeros(kk)
        arg: list[tuple[int, int]] = [(0, 0)] * kk
        for a in range(p):
            sym = (m[a] ^ m).astype(float) @ loads  # p x K
            for k in np.flatnonzero(sym.max(axis=0) > top).tolist():
                b = int(np.argmax(sym[:, k]))
                top[k], arg[k] = sym[b, k], (a, b)
        band: list[list[tuple[int, int]]] = [[arg[k]] if exact_sums[k] else [] for k in range(kk)]
        if not all(exact_sums):
            for a in range(p):
                sym = (m[a] ^ m).astype(float) @ loads
                for k in range(kk):
                    if exact_sums[k]:
                        continue
                    near = np.flatnonzero(sym[a:, k] >= top[k] * (1 - 3 * gamma)) + a  # (b, a) is (a, b)
                    band[k].extend((a, int(b)) for b in near[: _PAIR_BAND + 1 - len(band[k])].tolist())
    out = np.zeros(kk)
    rows: list[tuple[int, ...]] = [pats.domain_row(0, 0)] * kk
    exact = True
    for k in range(kk):
        if len(band[k]) > _PAIR_BAND:
            bound = Fraction(float(top[k])) * (1 + 2 * Fraction(gamma)) if math.isfinite(top[k]) else None
            out[k] = math.inf if bound is None else float_up(bound)
            exact = False
            continue
        best = Fraction(-1)
        for a, b in band[k]:
            v = exact_total("sum", loads[np.flatnonzero(m[a] ^ m[b]), k].tolist())
            if v > best:
                best, rows[k] = v, pats.domain_row(a, b)
        out[k] = float_up(max(best, Fraction(0)))
    return out, rows, exact


def _float_sums_exact(col: list[float]) -> bool:
    """Whether every float sum of any of these non-negative floats is exact, in any order: all are
    integer multiples of a common $2^{-k}$ and their total is below $2^{53}$ such units (MATH.md 7.8)."""
    parts = [float(x).as_integer_ratio() for x in col if x != 0]
    if not parts:
        return True
    if not all(math.isfinite(x) for x in col):
        return False
    k = max(d.bit_length() - 1 for _, d in parts)
    return sum(n << (k - (d.bit_length() - 1)) for n, d in parts) < 2**53


def _overflowed(measure: Measure[Any]) -> DefinitionGuarantee:
    """The guarantee of a ledger whose loads overflow the float range: infinite both ways."""
    inf = measure.infinite()
    return DefinitionGuarantee(
        measure.name, inf, inf, math.inf, math.inf, None, False, "overflow", "sequential"
    )


def _witness(res: OverlapResult, component: int) -> dict[str, Any] | None:
    if res.components:
        return res.components[component].witness
    return res.witness


def _pareto(vectors: np.ndarray) -> np.ndarray:
    """Indices of the Pareto-maximal rows of an integer matrix (one of each set of equal rows): a row
    is dropped when another is at least as large everywhere and larger somewhere, or equal and
    earlier."""
    order = np.lexsort(vectors.T[::-1])[::-1]  # decreasing, lexicographically: no later row dominates
    kept: list[int] = []
    front = np.zeros((0, vectors.shape[1]), dtype=vectors.dtype)
    for i in order.tolist():
        v = vectors[i]
        if front.shape[0] and bool(np.any(np.all(front >= v, axis=1))):
            continue
        kept.append(i)
        front = np.vstack([front, v])
    return np.array(sorted(kept), dtype=np.int64)


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


__all__ = ["Charge", "Odometer", "OdometerReport", "whole_domain"]
