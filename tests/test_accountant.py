"""The accountant against brute force over every domain row (and every pair of rows for replace-one-row
neighbours), for every definition; the filter under random adaptive sequences, also from many threads."""

from __future__ import annotations

import itertools
import math
import random
import threading
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.privacy import (
    GDP,
    RDP,
    ZCDP,
    ApproxDP,
    BudgetError,
    Gaussian,
    Laplace,
    Mechanism,
    OpaqueApproxDP,
    PureDP,
    RandomizedResponse,
    compose_approx,
    utility_gain,
)
from overlapdp.privacy.measures import AdaptivityError
from overlapdp.privacy.odometer import Odometer, whole_domain
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IntAttribute, Schema
from strategies import all_rows, schemas, where_clauses
from support.accounting import DELTA, ORDERS, brute, covering

PURE_POOL: list[Mechanism] = [Laplace(2.0), Laplace(5.0), RandomizedResponse(0.3), OpaqueApproxDP(0.4)]
MIXED_POOL: list[Mechanism] = [Laplace(2.0), Gaussian(3.0), Gaussian(8.0), OpaqueApproxDP(0.3, 1e-7)]


@st.composite
def ledgers(draw: st.DrawFn, pool: list[Mechanism]) -> tuple[Schema, list[PredicateQuery], list[Mechanism]]:
    schema = draw(schemas(max_attributes=2))
    if draw(st.booleans()):  # rows outside the domain kept and counted by no query
        schema = Schema(schema.attributes, outside="drop")
    n = draw(st.integers(1, 5))
    queries = [parse_where(schema, draw(where_clauses(schema)), id=f"q{i}") for i in range(n)]
    mechs = [draw(st.sampled_from(pool)) for _ in range(n)]
    return schema, queries, mechs


def _check_report(
    schema: Schema, queries: list[PredicateQuery], mechs: list[Mechanism], neighbouring: str
) -> None:
    odo = Odometer(schema, orders=ORDERS, neighbouring=neighbouring)
    for q, m in zip(queries, mechs, strict=True):
        odo.charge(m, q)
    rep = odo.report(DELTA)
    rows = all_rows(schema)
    if neighbouring == "add_remove":
        loads = [covering(r, queries) for r in rows]
    else:  # charges covering exactly one of the two rows
        cov = [set(covering(r, queries)) for r in rows]
        if schema.outside == "drop":
            cov.append(set())  # a row outside the domain: in the data set, covered by no query
        loads = [sorted(a ^ b) for a, b in itertools.product(cov, cov)]
    truth = brute(loads, mechs)
    assert set(truth) == set(rep.definitions)
    for name, value in truth.items():
        got = rep.definitions[name].overlap
        if name == "rdp" or name == "approx":
            assert got == pytest.approx(value, rel=1e-9, abs=1e-12)
        else:
            assert got == pytest.approx(value, rel=1e-9, abs=1e-12)
        assert rep.definitions[name].exact
    # sequential = composition of everything, whatever the coverage
    assert rep.definitions["approx"].sequential == pytest.approx(compose_approx(mechs).epsilon_at(DELTA))
    assert rep.overlap_epsilon <= rep.sequential_epsilon + 1e-12


@settings(max_examples=40)
@given(ledgers(PURE_POOL))
def test_overlap_guarantees_equal_brute_force_pure_pool(case) -> None:  # type: ignore[no-untyped-def]
    _check_report(*case, "add_remove")


@pytest.mark.slow  # 3.7 s of CPU
@settings(max_examples=40)
@given(ledgers(MIXED_POOL))
def test_overlap_guarantees_equal_brute_force_mixed_pool(case) -> None:  # type: ignore[no-untyped-def]
    _check_report(*case, "add_remove")


@settings(max_examples=25)
@given(ledgers(PURE_POOL + MIXED_POOL[1:2]))
def test_replace_one_row_equals_brute_force_over_pairs(case) -> None:  # type: ignore[no-untyped-def]
    _check_report(*case, "replace")


def test_replace_is_at_most_double_and_can_be_double() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    qs = [parse_where(schema, "a < 5", id="x"), parse_where(schema, "a >= 5", id="y")]
    for nb, expect in (("add_remove", 0.5), ("replace", 1.0)):
        odo = Odometer(schema, neighbouring=nb)
        for q in qs:
            odo.charge(Laplace(2.0), q)
        assert odo.report(DELTA).definitions["pure"].overlap == pytest.approx(expect)


@pytest.mark.parametrize("where", [None, "a >= 0", "a = 0"])
def test_replace_counts_the_row_outside_the_domain(where: str | None) -> None:
    """Issue 26, finding 2: with ``outside="drop"`` a row may move out of the domain, which changes every
    count covering it by one; the pair routes enumerated domain rows only and reported 0.0 for a
    Laplace(1) count of every row, where such a pair loses exactly 1.0. With ``outside="error"`` such
    data is refused: no such row, and the count of every row costs nothing under replace-one."""
    for outside, want in (("drop", 1.0), ("error", 0.0 if where != "a = 0" else 1.0)):
        schema = Schema((IntAttribute("a", 0, 1),), outside=outside)
        odo = Odometer(schema, neighbouring="replace")
        odo.charge(Laplace(1.0), None if where is None else parse_where(schema, where))
        rep = odo.report(DELTA)
        for name in ("pure", "zcdp", "rdp", "tcdp", "approx"):
            assert rep.definitions[name].overlap <= rep.definitions[name].sequential
        assert rep.definitions["pure"].overlap == want
        assert rep.definitions["zcdp"].overlap == (want / 2 if want else 0.0)
        approx = compose_approx([Laplace(1.0)]).epsilon_at(DELTA) if want else 0.0
        assert rep.definitions["approx"].overlap == pytest.approx(approx)


def test_whole_domain_charge_and_report_keys() -> None:
    schema = Schema((IntAttribute("a", 0, 9), IntAttribute("b", 0, 3)))
    odo = Odometer(schema)
    odo.charge(Laplace(10.0))
    odo.charge(Laplace(10.0), parse_where(schema, "a < 3"))
    odo.charge(Laplace(10.0), parse_where(schema, "a >= 3"))
    rep = odo.report(1e-6)
    assert rep.pure_epsilon == (pytest.approx(0.3), pytest.approx(0.2))
    js = rep.to_json()
    assert js["delta"] == 1e-6
    assert js["overlap"]["epsilon"] <= js["sequential"]["epsilon"]
    assert set(js["overlap"]["witness"]) == {"a", "b"}
    assert whole_domain(schema).constraints == ()
    with pytest.raises(BudgetError):
        Odometer(schema).report(1e-6)
    with pytest.raises(BudgetError):
        odo.report(0.0)
    with pytest.raises(BudgetError):
        Odometer(schema, neighbouring="swap")


# -- the filter ---------------------------------------------------------------------------------------
BUDGETS = [
    (PureDP(1.0), [Laplace(1.0), Laplace(4.0), Laplace(10.0)]),
    (ZCDP(0.2), [Gaussian(2.0), Gaussian(5.0), Laplace(4.0)]),
    (GDP(1.0), [Gaussian(1.5), Gaussian(4.0)]),
    (RDP(ORDERS, tuple(0.1 * a for a in ORDERS)), [Gaussian(3.0), Laplace(5.0)]),
    (ApproxDP(2.0, 1e-5), [Laplace(2.0), Laplace(8.0), OpaqueApproxDP(0.3, 1e-7)]),
    # rows that fit by advanced composition only (many small charges) beside rows that fit by basic only
    (ApproxDP(1.0, 0.5), [Laplace(10.0), Laplace(12.0), Laplace(2.0), OpaqueApproxDP(0.2, 1e-2)]),
]


def _row_costs(budget, rows_charges) -> list[object]:  # type: ignore[no-untyped-def]
    """Per-row quantity each filter bounds, computed from scratch, in exact arithmetic of the declared
    float costs (Fractions) where the filter's rule is rational."""
    out = []
    for ms in rows_charges:
        if isinstance(budget, PureDP):
            out.append(sum((Fraction(m.pure().epsilon) for m in ms), Fraction(0)))
        elif isinstance(budget, ZCDP):
            out.append(sum((Fraction(m.zcdp().rho) for m in ms), Fraction(0)))
        elif isinstance(budget, GDP):
            out.append(sum((Fraction(m.gdp().mu) ** 2 for m in ms), Fraction(0)))  # mu^2
        elif isinstance(budget, RDP):
            out.append(
                [
                    sum(col, Fraction(0))
                    for col in zip(*[map(Fraction, m.rdp(budget.orders).epsilons) for m in ms], strict=True)
                ]
                if ms
                else [Fraction(0)] * len(ORDERS)
            )
        else:
            # the combined filter (MATH.md 5.6): advanced composition's epsilon, the sum of deltas, and
            # basic composition's sum of epsilons (exact); a row fits by either epsilon rule
            s2 = math.fsum((m.pure().epsilon if m.pure() else m.epsilon) ** 2 for m in ms)
            sd = math.fsum(0.0 if m.pure() else m.delta for m in ms)
            s1 = sum((Fraction(m.pure().epsilon if m.pure() else m.epsilon) for m in ms), Fraction(0))
            slack = budget.delta / 2
            out.append((math.sqrt(2 * math.log(1 / slack) * s2) + s2 / 2, sd, s1))
    return out


def _within(budget, cost) -> bool:  # type: ignore[no-untyped-def]
    if isinstance(budget, PureDP):
        return cost <= Fraction(budget.epsilon)
    if isinstance(budget, ZCDP):
        return cost <= Fraction(budget.rho)
    if isinstance(budget, GDP):
        return cost <= Fraction(budget.mu) ** 2
    if isinstance(budget, RDP):
        return all(c <= Fraction(b) for c, b in zip(cost, budget.epsilons, strict=True))
    return (cost[0] <= budget.epsilon or cost[2] <= Fraction(budget.epsilon)) and cost[1] <= budget.delta / 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("budget", "pool"), BUDGETS, ids=lambda x: type(x).__name__ if not isinstance(x, list) else ""
)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=15)
def test_filter_never_admits_past_budget_under_adaptive_sequences(budget, pool, seed) -> None:  # type: ignore[no-untyped-def]
    schema = Schema((IntAttribute("a", 0, 7), IntAttribute("b", 0, 3)))
    rows = all_rows(schema)
    flt = PrivacyFilter(schema, budget)
    rng = random.Random(seed)
    admitted: list[tuple[PredicateQuery, Mechanism]] = []
    for step in range(40):
        # adaptive: the next choice depends on what was admitted so far
        lo = rng.randrange(8) if len(admitted) % 2 else len(admitted) % 8
        hi = rng.randrange(lo, 8)
        where = f"a BETWEEN {lo} AND {hi}" + (f" AND b = {rng.randrange(4)}" if rng.random() < 0.5 else "")
        q = parse_where(schema, where, id=f"s{step}")
        m = pool[(rng.randrange(len(pool)) + len(admitted)) % len(pool)]
        res = flt.try_charge(m, q)
        cand = [*admitted, (q, m)]
        costs = _row_costs(budget, [[mm for qq, mm in cand if qq.covers(r)] for r in rows])
        fits = all(_within(budget, c) for c in costs)
        assert res.admitted == fits  # admits exactly when the per-row brute force stays within budget
        if res.admitted:
            admitted.append((q, m))
    costs = _row_costs(budget, [[mm for qq, mm in admitted if qq.covers(r)] for r in rows])
    assert all(_within(budget, c) for c in costs)
    assert len(flt) == len(admitted) == len(flt.odometer)


def test_filter_compares_in_exact_arithmetic_of_the_declared_costs() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    # Fraction(0.1) > 1/10: ten charges of 0.1 exceed 1.0 exactly (their float sum rounds to 1.0)
    tenth = Laplace(10.0)
    assert 10 * Fraction(tenth.pure().epsilon) > 1
    flt = PrivacyFilter(schema, PureDP(1.0))
    admitted = sum(flt.try_charge(tenth).admitted for _ in range(10))
    assert admitted == 9
    # dyadic costs are exact: four quarters fill a budget of 1.0 exactly, a fifth does not fit
    quarters = PrivacyFilter(schema, PureDP(1.0))
    assert [quarters.try_charge(Laplace(4.0)).admitted for _ in range(5)] == [True] * 4 + [False]


def test_filter_checks_every_row_exactly_when_the_float_witness_ties() -> None:
    # Row a < 5 pays ten charges of 0.1 (float running sum 0.9999999999999999, exactly 1 + 5.6e-17),
    # row a >= 5 pays 1.0: the float maximum sits at a >= 5, exactly 1.0 + 0.5 = 1.5 <= 1.5, but the
    # row a < 5 would pay more than 1.5 exactly, so the whole-domain 0.5 must be refused.
    schema = Schema((IntAttribute("a", 0, 9),))
    flt = PrivacyFilter(schema, PureDP(1.5))
    low, high = parse_where(schema, "a < 5"), parse_where(schema, "a >= 5")
    for i in range(10):
        assert flt.try_charge(Laplace(10.0), low, id=f"low{i}").admitted
    assert flt.try_charge(Laplace(1.0), high, id="high").admitted
    charged = [(low, Laplace(10.0))] * 10 + [(high, Laplace(1.0)), (whole_domain(schema), Laplace(2.0))]
    worst = max(
        sum((Fraction(m.pure().epsilon) for q, m in charged if q.covers(r)), Fraction(0))  # type: ignore[union-attr]
        for r in all_rows(schema)
    )
    assert worst > Fraction(1.5)  # brute force in exact arithmetic: over budget
    assert not flt.try_charge(Laplace(2.0)).admitted
    assert flt.try_charge(Laplace(4.0), high, id="fits").admitted  # 1.0 + 0.25 on a >= 5 fits


def test_filter_is_atomic_under_many_threads() -> None:
    schema = Schema((IntAttribute("a", 0, 19), IntAttribute("b", 0, 4)))
    budget = PureDP(2.0)
    flt = PrivacyFilter(schema, budget)
    results: list[tuple[PredicateQuery, Mechanism, bool]] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        rng = random.Random(k)
        for j in range(60):
            lo = rng.randrange(20)
            q = parse_where(schema, f"a BETWEEN {lo} AND {rng.randrange(lo, 20)}", id=f"t{k}-{j}")
            m = Laplace(rng.choice([1.0, 2.0, 5.0]))
            r = flt.try_charge(m, q)
            with lock:
                results.append((q, m, r.admitted))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [(q, m) for q, m, ok in results if ok]
    assert len(admitted) == len(flt) > 0
    worst = max(math.fsum(m.pure().epsilon for q, m in admitted if q.covers(r)) for r in all_rows(schema))  # type: ignore[union-attr]
    assert worst <= budget.epsilon
    assert flt.value() == pytest.approx(worst)
    # every rejection was justified at its time: the final state is saturated for at least one row
    assert any(not ok for _, _, ok in results)


def test_replace_filter_uses_doubling_and_is_safe_over_pairs() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    flt = PrivacyFilter(schema, PureDP(1.0), neighbouring="replace")
    assert flt.try_charge(Laplace(2.0), parse_where(schema, "a < 5")).admitted  # doubled: 2 * 0.5 <= 1
    assert flt.try_charge(Laplace(2.0), parse_where(schema, "a >= 5")).admitted  # a pair pays 0.5 + 0.5
    assert not flt.try_charge(Laplace(2.0), parse_where(schema, "a < 3")).admitted  # a pair would pay 1.5
    rng = random.Random(5)
    flt2 = PrivacyFilter(schema, PureDP(1.0), neighbouring="replace")
    for i in range(40):
        lo = rng.randrange(10)
        flt2.try_charge(
            Laplace(rng.choice([2.0, 8.0])),
            parse_where(schema, f"a BETWEEN {lo} AND {rng.randrange(lo, 10)}"),
            id=f"r{i}",
        )
    charges = flt2.odometer.charges
    rows = all_rows(schema)
    worst_pair = max(
        math.fsum(c.mechanism.pure().epsilon for c in charges if c.query.covers(x) != c.query.covers(y))  # type: ignore[union-attr]
        for x, y in itertools.product(rows, rows)
    )
    assert worst_pair <= 1.0


def test_filter_refuses_invalid_configurations_and_charges_nothing() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    with pytest.raises(AdaptivityError):
        PrivacyFilter(schema, ApproxDP(1.0, 1e-6), composition="optimal")
    flt = PrivacyFilter(schema, PureDP(1.0))
    with pytest.raises(BudgetError):
        flt.try_charge(Gaussian(1.0))  # no pure-DP guarantee
    assert len(flt) == 0
    adv = PrivacyFilter(schema, ApproxDP(1.0, 1e-6))
    with pytest.raises(BudgetError):
        adv.try_charge(Gaussian(5.0))  # needs per_mechanism_delta
    ok = PrivacyFilter(schema, ApproxDP(8.0, 1e-6), per_mechanism_delta=1e-8)
    assert ok.try_charge(Gaussian(5.0)).admitted


def test_non_adaptive_optimal_filter_stays_within_budget() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    flt = PrivacyFilter(schema, ApproxDP(1.0, 1e-6), composition="optimal", adaptive=False)
    n = 0
    for i in range(40):
        r = flt.try_charge(Laplace(20.0), parse_where(schema, f"a >= {i % 10}"), id=f"o{i}")
        n += r.admitted
    rows = all_rows(schema)
    charges = flt.odometer.charges
    worst = max(
        compose_approx([c.mechanism for c in charges if c.query.covers(r)]).epsilon_at(1e-6) for r in rows
    )
    assert worst <= 1.0
    assert n == len(charges) > 20  # better than basic composition's 20 charges of 0.05


# -- utility gain (MATH.md 2.6) -----------------------------------------------------------------------------
def test_utility_gain_disjoint_and_nested() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    disjoint = [parse_where(schema, f"a = {i}", id=f"d{i}") for i in range(10)]
    g = utility_gain(disjoint, 1.0)
    assert g.gamma == 1 and g.gain == pytest.approx(0.9)
    assert g.overlap_noise == pytest.approx(1.0) and g.sequential_noise == pytest.approx(10.0)
    nested = [parse_where(schema, f"a >= {i}", id=f"n{i}") for i in range(10)]
    assert utility_gain(nested, 1.0).gain == pytest.approx(0.0)
    z = utility_gain(disjoint, 0.5, definition="zcdp")
    assert z.noise_reduction == pytest.approx(1 - math.sqrt(0.1))
    gd = utility_gain(disjoint, 1.0, definition="gdp")
    assert gd.gamma == pytest.approx(1.0) and gd.comp == pytest.approx(math.sqrt(10))
    with pytest.raises(BudgetError):
        utility_gain(disjoint, 0.0)


@settings(max_examples=30)
@given(
    schemas(max_attributes=2).flatmap(
        lambda s: st.tuples(st.just(s), st.lists(where_clauses(s), min_size=1, max_size=6))
    )
)
def test_utility_gain_matches_brute_force(case) -> None:  # type: ignore[no-untyped-def]
    schema, clauses = case
    qs = [parse_where(schema, c, id=f"q{i}") for i, c in enumerate(clauses)]
    gamma = max(sum(q.covers(r) for q in qs) for r in all_rows(schema))
    if gamma == 0:
        return
    g = utility_gain(qs, 2.0)
    assert g.gamma == pytest.approx(gamma)
    assert g.gain == pytest.approx(1 - gamma / len(qs))
    assert g.overlap_budget == pytest.approx(2.0 / gamma)
