"""Overlap-aware accounting is never worse than sequential accounting (MATH.md 5.7).

The odometer: the sequential composition of every charge bounds every row's loss (a row pays a subset
of the charges), so the overlap-aware report is at most it, for every definition, whichever route gave
up. Truth: brute force over rows (the per-row composition), dp_accounting's PLDs as the peer for the
sequential value. The filter: an (epsilon, delta) budget admits a charge when EITHER basic or advanced
composition keeps every row within budget (MATH.md 5.6); truth: the rules evaluated
per row from scratch."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting.pld import common as dpc
from dp_accounting.pld import privacy_loss_distribution as dpl
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.mechanisms import BudgetExceededError, ConcurrentComposition
from overlapdp.privacy import (
    ApproxDP,
    Gaussian,
    Laplace,
    Mechanism,
    OpaqueApproxDP,
    RandomizedResponse,
    compose_approx,
    odometer,
    privacy_filter,
)
from overlapdp.privacy.odometer import Odometer, whole_domain
from overlapdp.privacy.pld import DEFAULT_H
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IntAttribute, Schema
from strategies import all_rows, schemas, where_clauses
from support.accounting import ORDERS, brute, covering

DELTA = 1e-5


def _dp_pld(m: Mechanism, pessimistic: bool) -> dpl.PrivacyLossDistribution:
    kw = {} if pessimistic else {"pessimistic_estimate": False, "use_connect_dots": False}
    if isinstance(m, Laplace):
        return dpl.from_laplace_mechanism(m.scale, sensitivity=m.sensitivity, **kw)
    if isinstance(m, Gaussian):
        return dpl.from_gaussian_mechanism(m.sigma, sensitivity=m.sensitivity, **kw)
    assert isinstance(m, OpaqueApproxDP)
    if pessimistic:
        return dpl.from_privacy_parameters(dpc.DifferentialPrivacyParameters(m.epsilon, m.delta))
    # the (epsilon, delta) dominating pair (MATH.md 5.4), rounded optimistically
    e, d = m.epsilon, m.delta
    hi, lo = math.log1p(-d) - math.log1p(math.exp(-e)), math.log1p(-d) - math.log1p(math.exp(e))
    upper = {"bad": math.log(d), "x": hi, "y": lo}
    lower = {"x": lo, "y": hi, "bad'": math.log(d)}
    return dpl.from_two_probability_mass_functions(lower, upper, pessimistic_estimate=False)


def _dp_epsilon(mechs: list[Mechanism], pessimistic: bool) -> float:
    """dp_accounting's epsilon(DELTA) of the composition of ``mechs`` (peer library, independent)."""
    pld = _dp_pld(mechs[0], pessimistic)
    for m in mechs[1:]:
        pld = pld.compose(_dp_pld(m, pessimistic))
    return float(pld.get_epsilon_for_delta(DELTA))


ISSUE_POOL: list[Mechanism] = [Laplace(2.0), Gaussian(3.0), OpaqueApproxDP(0.5, 1e-7)]


def _issue_ledger(effort: float | None) -> tuple[Schema, Odometer, list[Mechanism], list[PredicateQuery]]:
    """12 binary attributes, one charge per (attribute, value): every row pays exactly 12 of the 24
    charges, no row pays the most of every mechanism at once (so the grouped route cannot settle it),
    and the 4 096 maximal patterns exceed the pattern cap."""
    schema = Schema(tuple(IntAttribute(f"a{i}", 0, 1) for i in range(12)))
    odo = Odometer(schema, effort=effort)
    mechs, queries = [], []
    for i in range(24):
        m, q = ISSUE_POOL[i % 3], parse_where(schema, f"a{i // 2} = {i % 2}", id=f"q{i}")
        odo.charge(m, q)
        mechs.append(m)
        queries.append(q)
    return schema, odo, mechs, queries


def _worst_row_mechanisms(schema: Schema, queries: list[PredicateQuery]) -> list[Mechanism]:
    """Brute force over the 4 096 rows (each row's charges counted per mechanism): the worst row's
    mechanisms, chosen on a coarse PLD grid (any row's loss is a lower bound of the maximum)."""
    patterns = {tuple(sorted(Counter(i % 3 for i in covering(r, queries)).items())) for r in all_rows(schema)}
    worst = max(
        patterns,
        key=lambda p: compose_approx([ISSUE_POOL[k] for k, n in p for _ in range(n)], h=1e-3).epsilon_at(
            DELTA
        ),
    )
    return [ISSUE_POOL[k] for k, n in worst for _ in range(n)]


@pytest.mark.slow
def test_issue_case_overlap_is_finite_and_at_most_sequential() -> None:
    schema, odo, mechs, queries = _issue_ledger(effort=0.5)
    rep = odo.report(DELTA)
    got = rep.definitions["approx"]
    assert math.isfinite(got.overlap_epsilon) and math.isfinite(rep.overlap_epsilon)
    # at most the sequential composition, computed by the peer library (pessimistic PLD)
    seq_peer = _dp_epsilon(mechs, pessimistic=True)
    assert got.overlap_epsilon <= seq_peer * (1 + 1e-3)
    assert got.overlap_epsilon <= got.sequential_epsilon
    # never below the truth: the worst row by the peer's OPTIMISTIC PLD, a lower bound of its loss
    truth_low = _dp_epsilon(_worst_row_mechanisms(schema, queries), pessimistic=False)
    assert got.overlap_epsilon >= truth_low
    if got.exact:
        assert got.overlap_epsilon == pytest.approx(truth_low, rel=1e-3)
    # the JSON says which side gave the value
    js = rep.to_json()
    assert js["definitions"]["approx"]["bound"] == got.bound
    assert js["overlap"]["bound"] == rep.overlap_bound
    if got.bound == "sequential":
        assert not got.exact and got.overlap_epsilon == got.sequential_epsilon


@pytest.mark.slow
def test_issue_case_without_effort_limit_is_exact() -> None:
    schema, odo, _, queries = _issue_ledger(effort=None)
    got = odo.report(DELTA).definitions["approx"]
    worst = _worst_row_mechanisms(schema, queries)
    # exact by either route that enumerates every row pattern (parts or counted patterns)
    assert got.exact and got.method in {"pld/parts", "pld/counted-patterns"} and got.bound == "overlap"
    assert _dp_epsilon(worst, pessimistic=False) <= got.overlap_epsilon
    assert got.overlap_epsilon <= _dp_epsilon(worst, pessimistic=True) * (1 + 1e-3)
    assert got.overlap_epsilon < 0.7 * got.sequential_epsilon  # 6.21 against 9.82


PURE_POOL: list[Mechanism] = [Laplace(2.0), Laplace(5.0), RandomizedResponse(0.3), OpaqueApproxDP(0.4)]
MIXED_POOL: list[Mechanism] = [Laplace(2.0), Gaussian(3.0), Gaussian(8.0), OpaqueApproxDP(0.3, 1e-7)]


@st.composite
def ledgers(draw: st.DrawFn) -> tuple[Schema, list[PredicateQuery], list[Mechanism]]:
    schema = draw(schemas(max_attributes=2))
    n = draw(st.integers(1, 6))
    pool = draw(st.sampled_from([PURE_POOL, MIXED_POOL]))
    queries = [parse_where(schema, draw(where_clauses(schema)), id=f"q{i}") for i in range(n)]
    mechs = [draw(st.sampled_from(pool)) for _ in range(n)]
    return schema, queries, mechs


def _le(a: float | tuple[float, ...], b: float | tuple[float, ...]) -> bool:
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return all(x <= y for x, y in zip(a, b, strict=True))
    assert isinstance(b, float)
    return a <= b


def _ge_approx(a: float | tuple[float, ...], b: object, slack: float = 0.0) -> bool:
    xs = a if isinstance(a, tuple) else (a,)
    ys = tuple(b) if isinstance(b, tuple) else (b,)  # type: ignore[arg-type]
    return all(x >= y * (1 - 1e-9) - 1e-12 - slack for x, y in zip(xs, ys, strict=True))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(case=ledgers(), neighbouring=st.sampled_from(["add_remove", "replace"]))
def test_overlap_never_above_sequential_and_never_below_truth_on_forced_fallbacks(  # type: ignore[no-untyped-def]
    case, neighbouring
) -> None:
    """Every route forced to its fallback (no pattern enumeration, no grouped route, no exact pairs,
    no time for the search): the report still never exceeds the sequential value, per definition, and
    never falls below the brute-force per-row (per-pair) truth."""
    schema, queries, mechs = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(odometer, "_APPROX_MAX_PATTERNS", 0)
        mp.setattr(odometer, "_APPROX_MAX_GROUPS", 0)
        mp.setattr(odometer, "_PAIR_WORK_LIMIT", 0)
        mp.setattr(odometer, "_PAIR_PLD_LIMIT", 0)
        odo = Odometer(schema, orders=ORDERS, neighbouring=neighbouring, effort=0.0)
        for q, m in zip(queries, mechs, strict=True):
            odo.charge(m, q)
        rep = odo.report(DELTA)
    rows = all_rows(schema)
    if neighbouring == "add_remove":
        loads = [covering(r, queries) for r in rows]
    else:
        cov = [set(covering(r, queries)) for r in rows]
        loads = [sorted(a ^ b) for a, b in itertools.product(cov, cov)]
    truth = brute(loads, mechs)
    assert set(truth) == set(rep.definitions)
    for name, g in rep.definitions.items():
        assert _le(g.overlap, g.sequential), name
        assert g.overlap_epsilon <= g.sequential_epsilon, name
        # the brute force composes (epsilon, delta) by pessimistic PLDs, above the exact loss by up to
        # the grid step per mechanism; a closed-form route (e.g. the GDP conversion) may sit below it
        slack = DEFAULT_H * len(mechs) if name == "approx" else 0.0
        assert _ge_approx(g.overlap, truth[name], slack), name
        assert g.bound in ("overlap", "sequential", "mixed")
        if g.bound == "sequential":
            assert not g.exact and g.overlap == g.sequential
        assert g.to_json()["bound"] == g.bound
    assert rep.overlap_epsilon <= rep.sequential_epsilon
    assert rep.to_json()["overlap"]["bound"] == rep.definitions[rep.overlap_method].bound


# -- the (epsilon, delta) filter: basic OR advanced composition per row ---------------------------------
def _advanced(sum_sq: float, slack: float) -> float:
    """Advanced composition's epsilon for a row's sum of squared epsilons (Whitehouse et al. 2023)."""
    return math.sqrt(2 * math.log(1 / slack) * sum_sq) + sum_sq / 2


def test_approx_budget_admits_a_pure_sparse_vector_child_basic_composition_allows() -> None:
    schema = Schema((IntAttribute("a", 0, 3),))
    budget = ApproxDP(5.0, 1e-6)
    assert _advanced(1.0, budget.delta / 2) > 5.0  # advanced composition alone: 5.89, refused before
    comp = ConcurrentComposition(lambda q: 10, schema, budget, rng=1)
    for _ in range(5):  # basic composition: 5 x 1.0 <= 5 (and no delta spent)
        comp.spawn_sparse_vector(epsilon=1.0, threshold=0)
    assert _advanced(6.0, budget.delta / 2) > 5.0 and 6 * 1.0 > 5.0  # neither rule allows a sixth
    with pytest.raises(BudgetExceededError, match="nothing charged"):
        comp.spawn_sparse_vector(epsilon=1.0, threshold=0)
    assert len(comp.children) == 5


def test_approx_filter_decides_the_rule_per_row() -> None:
    # Row a < 5 pays 17 charges of 0.1: basic 1.7 > 1.5 but advanced 1.43 <= 1.5. Row a >= 5 pays one
    # charge of 1.0: basic 1.0 <= 1.5, advanced 3.76 > 1.5. Each row fits by its own rule.
    schema = Schema((IntAttribute("a", 0, 9),))
    budget = ApproxDP(1.5, 1e-2)
    slack = budget.delta / 2
    low, high = parse_where(schema, "a < 5"), parse_where(schema, "a >= 5")
    flt = PrivacyFilter(schema, budget)
    for i in range(17):
        assert flt.try_charge(Laplace(10.0), low, id=f"low{i}").admitted
    assert 17 * Fraction(0.1) > Fraction(1.5) and _advanced(17 * 0.1**2, slack) <= 1.5
    assert flt.try_charge(Laplace(1.0), high, id="one").admitted
    assert _advanced(1.0, slack) > 1.5
    assert flt.try_charge(Laplace(4.0), high, id="quarter").admitted  # basic 1.25
    # a >= 5 would pay 1.75 (basic) and advanced(1.3125) = 3.8: refused
    assert _advanced(1.0 + 0.0625 + 0.25, slack) > 1.5
    assert not flt.try_charge(Laplace(2.0), high, id="half").admitted
    # a < 5 would pay 18 x 0.1 with advanced(0.18) = 1.47 <= 1.5, a >= 5 basic 1.35: admitted
    assert _advanced(18 * 0.01, slack) <= 1.5
    assert flt.try_charge(Laplace(10.0), id="everyone").admitted
    # deltas: the room is delta - slack whichever epsilon rule a row uses
    assert not flt.try_charge(OpaqueApproxDP(0.01, slack * 1.01), high, id="delta").admitted
    assert flt.try_charge(OpaqueApproxDP(0.01, slack / 2), high, id="delta2").admitted
    # every row of the final state fits by one of the two rules, recomputed from scratch
    charges = flt.odometer.charges
    for r in all_rows(schema):
        ms = [c.mechanism for c in charges if c.query.covers(r)]
        eps = [m.pure().epsilon if m.pure() else m.epsilon for m in ms]  # type: ignore[union-attr,attr-defined]
        dels = [0.0 if m.pure() else m.delta for m in ms]  # type: ignore[attr-defined]
        basic = sum((Fraction(e) for e in eps), Fraction(0)) <= Fraction(budget.epsilon)
        adv = _advanced(math.fsum(e * e for e in eps), slack) <= budget.epsilon
        assert (basic or adv) and math.fsum(dels) <= budget.delta - slack
    assert len(flt) == 21


def test_approx_filter_refuses_large_grids_it_cannot_decide_row_by_row() -> None:
    # The per-row fallback enumerates row patterns; beyond its limit a charge that no global rule
    # settles is refused (safe), and nothing is charged. (Without the lazy bounds, which decide this
    # charge per row on their own: every row fits by one of the two rules.)
    schema = Schema(tuple(IntAttribute(f"a{i}", 0, 1) for i in range(3)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(privacy_filter, "_BOUND_CELLS", 0)
        flt = PrivacyFilter(schema, ApproxDP(1.5, 1e-2))
    for i in range(17):
        assert flt.try_charge(Laplace(10.0), parse_where(schema, "a0 = 0"), id=f"l{i}").admitted
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(privacy_filter, "_EXACT_WORK_LIMIT", 0)
        assert not flt.try_charge(Laplace(1.0), parse_where(schema, "a0 = 1"), id="h").admitted
    assert len(flt) == 17
    assert flt.try_charge(Laplace(1.0), parse_where(schema, "a0 = 1"), id="h").admitted


def test_filter_value_is_the_smaller_rule() -> None:
    schema = Schema((IntAttribute("a", 0, 3),))
    flt = PrivacyFilter(schema, ApproxDP(5.0, 1e-6))
    assert flt.try_charge(Laplace(1.0), whole_domain(schema)).admitted
    assert flt.value() == pytest.approx(min(1.0, _advanced(1.0, 5e-7)))
    assert np.isclose(float(flt.value()), 1.0)  # type: ignore[arg-type]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(case=ledgers(), effort=st.sampled_from([None, 0.0]))
def test_counted_patterns_route_equals_brute_force(case, effort) -> None:  # type: ignore[no-untyped-def]
    """The counted-patterns route forced (no grouped route, no maximal patterns): exact and equal to the
    per-row brute force without an effort limit; a safe upper bound of it when the limit stops it."""
    schema, queries, mechs = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(odometer, "_APPROX_MAX_GROUPS", 0)
        mp.setattr(odometer, "maximal_patterns", lambda *a, **k: None)
        odo = Odometer(schema, orders=ORDERS, effort=effort)
        for q, m in zip(queries, mechs, strict=True):
            odo.charge(m, q)
        got = odo.report(DELTA).definitions["approx"]
    truth = brute([covering(r, queries) for r in all_rows(schema)], mechs)["approx"]
    assert got.method == "pld/counted-patterns"
    assert got.overlap >= truth * (1 - 1e-9) - 1e-12  # type: ignore[operator]
    if effort is None:
        assert got.exact
    if got.exact:
        assert got.overlap == pytest.approx(truth, rel=1e-9, abs=1e-12)
    assert got.overlap <= got.sequential  # type: ignore[operator]


@pytest.mark.slow  # 1.4 s of CPU
@settings(max_examples=15, deadline=None)
@given(
    mechs=st.lists(
        st.sampled_from([Laplace(2.0), Gaussian(3.0), OpaqueApproxDP(0.5, 1e-7), OpaqueApproxDP(1.0, 1e-6)]),
        min_size=1,
        max_size=5,
    )
)
def test_cheap_upper_bounds_the_pld_composition_of_mixes(mechs) -> None:  # type: ignore[no-untyped-def]
    """The bounded search's cheap upper bound (now finite for zCDP mechanisms mixed with opaque
    (epsilon, delta) ones) is at least the PLD value it bounds and the peer's optimistic value."""
    got = odometer._cheap_upper(mechs, DELTA, DEFAULT_H)
    assert got >= compose_approx(mechs).epsilon_at(DELTA)
    assert got >= _dp_epsilon(mechs, pessimistic=False)
    if any(isinstance(m, Gaussian) for m in mechs) and any(isinstance(m, OpaqueApproxDP) for m in mechs):
        assert math.isfinite(got)


def test_approx_filter_basic_rule_is_exact_in_the_declared_costs() -> None:
    # Row a < 5: ten charges of 0.1 sum to 0.9999999999999999 in floats but exceed 1.0 exactly
    # (Fraction(0.1) > 1/10), and advanced composition gives 1.08 > 1: the tenth is refused. Row a >= 5
    # holds one charge of 1.0 (basic: exactly 1.0 <= 1.0; advanced: 3.76), so no global rule settles it.
    schema = Schema((IntAttribute("a", 0, 9),))
    budget = ApproxDP(1.0, 1e-2)
    low, high = parse_where(schema, "a < 5"), parse_where(schema, "a >= 5")
    flt = PrivacyFilter(schema, budget)
    assert flt.try_charge(Laplace(1.0), high, id="high").admitted
    assert 10 * Fraction(Laplace(10.0).pure().epsilon) > 1 and math.fsum([0.1] * 10) == 1.0
    assert sum([0.1] * 10) < 1.0  # the running float sum an index keeps
    assert _advanced(10 * 0.1**2, budget.delta / 2) > 1.0
    results = [flt.try_charge(Laplace(10.0), low, id=f"low{i}").admitted for i in range(10)]
    assert results == [True] * 9 + [False]
    with pytest.MonkeyPatch.context() as mp:  # the same decision on the row-by-row path
        mp.setattr(privacy_filter, "_witness_exact", lambda *a: None)
        assert not flt.try_charge(Laplace(10.0), low, id="again").admitted
        assert flt.try_charge(Laplace(1e6), low, id="tiny").admitted  # 0.9 + 1e-6 fits
