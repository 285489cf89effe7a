"""Rényi DP over several orders (MATH.md 2.7.2): the filter's two rules against brute force, the "some
order" theorem against exact adaptive interactions, and the curve against dp_accounting.

- Filter: random charges with curves of different shapes (Gaussian: alpha rho; Laplace and randomized
  response: bounded) on domains of 2-24 rows; after the run every row (every pair of rows under
  replace-one) is summed with Fractions from the mechanisms' declared curves, independently of the
  filter's overlap engine: "every" keeps each order within its budget, "some" keeps one order within
  budget for every row, and (add/remove) each refused charge would have broken the rule.
- Theorem: adaptive interactions of binary mechanisms stopped by the "some order" rule, every transcript
  enumerated: the exact delta(epsilon) (hockey stick, both directions) never exceeds the stated
  sum over the orders of delta_alpha(epsilon).
- dp_accounting: sequential Gaussian charges give the curve and the epsilon at delta of its
  RdpAccountant on the same orders.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.privacy import RDP, ZCDP, BudgetError, Gaussian, Laplace, Mechanism, RandomizedResponse
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema

ORDERS = (1.5, 2.0, 4.0, 8.0, 16.0, 32.0)
POOL: list[Mechanism] = [
    Gaussian(3.0),
    Gaussian(1.2),
    Gaussian(6.0, 2.0),
    Laplace(2.0),
    Laplace(0.7),
    RandomizedResponse(0.4),
    RandomizedResponse(1.5),
]


def curve(m: Mechanism, orders: tuple[float, ...]) -> tuple[Fraction, ...]:
    g = m.rdp(orders)
    assert g is not None
    return tuple(Fraction(e) for e in g.epsilons)


def budgets() -> st.SearchStrategy[RDP]:
    return st.sampled_from(
        [
            RDP.target(2.0, 1e-3, ORDERS, "some"),
            RDP.target(4.0, 1e-5, ORDERS, "some"),
            RDP.target(3.0, 1e-3, ORDERS, "every"),
            RDP(ORDERS, (0.3, 0.4, 0.6, 1.0, 1.5, 2.5)),
            RDP(ORDERS, (1.0, 0.2, 0.5, 3.0, 0.4, 6.0)),  # no shape: each order its own limit
        ]
    )


@st.composite
def streams(draw: st.DrawFn) -> tuple[Schema, list[tuple[PredicateQuery, Mechanism]]]:
    sizes = draw(st.lists(st.integers(2, 4), min_size=1, max_size=3))
    schema = Schema(tuple(IntAttribute(f"x{j}", 0, n - 1) for j, n in enumerate(sizes)))
    charges = []
    for _ in range(draw(st.integers(1, 10))):
        cov = {}
        for j, n in enumerate(sizes):
            kind = draw(st.sampled_from(["all", "one", "some"]))
            if kind == "one":
                cov[f"x{j}"] = IndexSet.from_indices([draw(st.integers(0, n - 1))])
            elif kind == "some":
                cov[f"x{j}"] = IndexSet.from_indices(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        q, m = PredicateQuery.from_coverages(schema, cov), draw(st.sampled_from(POOL))
        charges += [(q, m)] * draw(st.integers(1, 8))
    return schema, charges


def loads(
    schema: Schema, kept: list[tuple[PredicateQuery, Mechanism]], orders: tuple[float, ...], replace: bool
) -> list[tuple[Fraction, ...]]:
    """Every row's curve (every pair's, for replace-one: the charges covering exactly one of the two)."""
    rows = list(itertools.product(*(range(a.size) for a in schema.attributes)))
    covers = [frozenset(i for i, (q, _) in enumerate(kept) if q.covers(r)) for r in rows]
    sets = {a ^ b for a, b in itertools.product(set(covers), repeat=2)} if replace else set(covers)
    zero = tuple(Fraction(0) for _ in orders)
    out = []
    for s in sets:
        total = zero
        for i in s:
            total = tuple(x + y for x, y in zip(total, curve(kept[i][1], orders), strict=True))
        out.append(total)
    return out


def holds(rule: str, budget: RDP, curves: list[tuple[Fraction, ...]]) -> bool:
    b = [Fraction(e) for e in budget.epsilons]
    per_order = [all(c[k] <= b[k] for c in curves) for k in range(len(b))]
    return any(per_order) if rule == "some" else all(per_order)


_CASES = (
    streams(),
    budgets(),
    st.sampled_from(["every", "some"]),
    st.sampled_from(["add_remove", "replace"]),
)


@settings(max_examples=12, deadline=None)
@given(*_CASES)
def test_the_filter_keeps_its_rule_at_every_row(
    stream: tuple[Schema, list[tuple[PredicateQuery, Mechanism]]], budget: RDP, rule: str, neighbouring: str
) -> None:
    check_stream(stream, budget, rule, neighbouring)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(*_CASES)
def test_the_filter_keeps_its_rule_at_every_row_many(
    stream: tuple[Schema, list[tuple[PredicateQuery, Mechanism]]], budget: RDP, rule: str, neighbouring: str
) -> None:
    check_stream(stream, budget, rule, neighbouring)


def check_stream(
    stream: tuple[Schema, list[tuple[PredicateQuery, Mechanism]]], budget: RDP, rule: str, neighbouring: str
) -> None:
    schema, charges = stream
    flt = PrivacyFilter(schema, budget, neighbouring=neighbouring, rdp_rule=rule)
    kept: list[tuple[PredicateQuery, Mechanism]] = []
    replace = neighbouring == "replace"
    for i, (q, m) in enumerate(charges):
        a = flt.try_charge(m, q, id=f"c{i}")
        if a.admitted:
            kept.append((q, m))
            assert holds(rule, budget, loads(schema, kept, budget.orders, replace))
        elif not replace:
            # exact under add/remove: refused only when the rule would break (replace-one decides at
            # the doubled maxima, a safe bound of the pairs)
            assert not holds(rule, budget, loads(schema, [*kept, (q, m)], budget.orders, False))
    assert holds(rule, budget, loads(schema, kept, budget.orders, replace))
    value = flt.value()
    if kept:  # the reported value: the worst row's curve (twice it under replace-one), per order
        worst = loads(schema, kept, budget.orders, False)
        factor = 2 if replace else 1
        for k in range(len(budget.orders)):
            assert Fraction(value[k]) >= factor * max(c[k] for c in worst)  # type: ignore[index]


def test_some_order_admits_where_every_order_stops() -> None:
    """Bounded curves (randomized response) on one row and Gaussian ones on another fit different
    orders of a target's curve: "every" stops at the most expensive order, "some" goes on."""
    schema = Schema((IntAttribute("a", 0, 1),))
    budget = RDP.target(3.0, 1e-4, ORDERS, "some")
    q0, q1 = (PredicateQuery.from_coverages(schema, {"a": IndexSet.from_indices([v])}) for v in (0, 1))
    counts = {}
    for rule in ("every", "some"):
        flt = PrivacyFilter(schema, budget, rdp_rule=rule)
        n = 0
        for i in range(400):
            m, q = (RandomizedResponse(0.3), q0) if i % 2 else (Gaussian(4.0), q1)
            n += flt.try_charge(m, q, id=f"c{i}").admitted
        counts[rule] = n
    assert counts["some"] > counts["every"]


def test_target_curve() -> None:
    """Each kept order alone converts to at most epsilon at delta / |orders| ("some") or at delta
    ("every"), every kept budget is positive, and the rule's own conversion gives the target back."""
    for rule, eps, delta in (("some", 1.0, 1e-6), ("some", 5.0, 1e-9), ("every", 1.0, 1e-6)):
        b = RDP.target(eps, delta, ORDERS, rule)
        share = delta / len(b.orders) if rule == "some" else delta
        assert all(e > 0 for e in b.epsilons) and set(b.orders) <= set(ORDERS)
        for a, e in zip(b.orders, b.epsilons, strict=True):
            assert conv.rdp_epsilon((a,), (e,), share) <= eps * (1 + 1e-12)
        assert eps * (1 - 1e-6) <= b.epsilon_at(delta, rule) <= eps * (1 + 1e-9)
    # the orders with no budget at delta / 6 (all but 16 and 32 at epsilon 1, delta 1e-6) are dropped
    # and the rest recomputed at delta / 2
    b = RDP.target(1.0, 1e-6, ORDERS, "some")
    assert b.orders == (16.0, 32.0) and conv.rdp_target((8.0,), 1.0, 1e-6 / 6) == (0.0,)
    assert b.epsilons == conv.rdp_target(b.orders, 1.0, 1e-6 / 2)
    with pytest.raises(BudgetError, match="no order"):
        RDP.target(0.01, 1e-9, (1.5, 2.0))


def test_rule_is_checked() -> None:
    schema = Schema((IntAttribute("a", 0, 1),))
    with pytest.raises(BudgetError, match="'every' or 'some'"):
        PrivacyFilter(schema, RDP(ORDERS, tuple(1.0 for _ in ORDERS)), rdp_rule="any")
    with pytest.raises(BudgetError, match="Rényi DP budget over several orders, not to zCDP"):
        PrivacyFilter(schema, ZCDP(1.0), rdp_rule="some")


# -- the theorem (MATH.md 2.7.2 (b)) on exact adaptive interactions --------------------------------------
def _renyi(p: tuple[float, float], q: tuple[float, float], a: float) -> float:
    return math.log(sum(x**a * y ** (1 - a) for x, y in zip(p, q, strict=True) if x > 0)) / (a - 1)


def _binary(
    u: float, v: float, orders: tuple[float, ...]
) -> tuple[tuple[float, float], tuple[float, float], list[float]]:
    p, q = (u, 1 - u), (v, 1 - v)
    return p, q, [max(_renyi(p, q, a), _renyi(q, p, a)) * (1 + 1e-12) for a in orders]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(1.0, 1e-2), (2.0, 1e-3), (0.5, 0.05)]))
def test_some_order_theorem_on_exact_interactions(seed: int, target: tuple[float, float]) -> None:
    """An adversary picks each binary mechanism from the transcript so far (a random decision table over
    skewed mechanisms and randomized responses: curves of different shapes), the first of the pool, from
    the table's start, with which SOME order of the budget still fits; it stops when none does. Every
    transcript of up to 6 steps is enumerated (they run about 6 steps deep)."""
    rng = np.random.default_rng(seed)
    orders = (2.0, 4.0, 8.0, 32.0)
    eps, delta = target
    budget = RDP.target(eps, delta, orders, "some")
    bo, bv = budget.orders, budget.epsilons
    pool = []
    for _ in range(8):
        if rng.random() < 0.5:
            e = float(rng.uniform(0.02, 0.5)) * eps
            u = math.exp(e) / (1 + math.exp(e))
            pool.append(_binary(u, 1 - u, bo))
        else:
            u = float(rng.uniform(0.001, 0.3))
            pool.append(_binary(u, min(0.95, u * float(rng.uniform(1.1, 4))), bo))
    table = rng.integers(0, len(pool), size=512)
    level: list[tuple[tuple[int, ...], float, float, list[float]]] = [((), 1.0, 1.0, [0.0] * len(bo))]
    leaves = []
    for _ in range(6):
        nxt = []
        for hist, pp, qq, s in level:
            start = int(table[hash(hist) % 512])
            step = None
            for k in range(len(pool)):
                m = pool[(start + k) % len(pool)]
                after = [x + y for x, y in zip(s, m[2], strict=True)]
                if any(x <= b for x, b in zip(after, bv, strict=True)):
                    step = m
                    break
            if step is None:
                leaves.append((pp, qq))  # nothing fits: the interaction stops here
                continue
            for y in (0, 1):
                nxt.append(((*hist, y), pp * step[0][y], qq * step[1][y], after))
        level = nxt
    leaves += [(pp, qq) for _, pp, qq, _ in level]
    assert abs(sum(p for p, _ in leaves) - 1) < 1e-9 and abs(sum(q for _, q in leaves) - 1) < 1e-9
    for at in (eps, eps / 2, 1.5 * eps):
        actual = max(
            sum(max(0.0, p - math.exp(at) * q) for p, q in leaves),
            sum(max(0.0, q - math.exp(at) * p) for p, q in leaves),
        )
        assert actual <= conv.rdp_some_delta(bo, bv, at) + 1e-15


# -- dp_accounting's RDP accountant ------------------------------------------------------------------------
@pytest.mark.parametrize("sigmas", [[3.0] * 40, [1.5, 2.0, 5.0, 0.9, 7.0] * 6])
def test_sequential_gaussians_match_dp_accounting(sigmas: list[float]) -> None:
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

    orders = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0)
    schema = Schema((IntAttribute("a", 0, 3),))
    flt = PrivacyFilter(schema, RDP(orders, tuple(1e6 for _ in orders)))
    acc = rdp_acc.RdpAccountant(orders=list(orders))
    for i, s in enumerate(sigmas):
        assert flt.try_charge(Gaussian(s), None, id=f"g{i}").admitted
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=s))
    ours = flt.value()
    assert isinstance(ours, tuple)
    theirs = acc._rdp  # the accountant's curve (per order)
    for x, y in zip(ours, theirs, strict=True):
        assert y <= x <= y * (1 + 1e-12)  # ours rounded up from the exact sum
    for delta in (1e-5, 1e-8):
        e_ours = RDP(orders, ours).epsilon_at(delta)
        e_theirs = acc.get_epsilon(delta)
        assert e_theirs <= e_ours <= e_theirs * (1 + 1e-9)
        report = flt.odometer.report(delta).definitions["rdp"]  # the ledger's report, same orders
        assert e_theirs <= report.overlap_epsilon <= e_theirs * (1 + 1e-9)
