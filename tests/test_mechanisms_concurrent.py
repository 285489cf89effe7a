"""ConcurrentComposition: admission by declared guarantee over coverage, interleaved queries, the joint
guarantee, refusals that charge nothing. Independent truth: brute force over every row of a small
domain (each row's summed declared cost), and the privacy package's concurrent_composition."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.mechanisms import (
    WHOLE_DOMAIN,
    BudgetExceededError,
    ConcurrentComposition,
    CoverageError,
    InsecureRandomnessError,
    MechanismError,
)
from overlapdp.privacy import concurrent_composition
from overlapdp.privacy.definitions import ZCDP, BudgetError, PureDP
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute
from sources import on_both_sources, source

SCHEMA = Schema((IntAttribute("a", 0, 3), IntAttribute("b", 0, 2)))
ROWS = list(itertools.product(range(4), range(3)))


def box(a: tuple[int, int] | None, b: tuple[int, int] | None) -> PredicateQuery:
    cov = {}
    if a is not None:
        cov["a"] = IndexSet.interval(a[0], a[1] + 1)
    if b is not None:
        cov["b"] = IndexSet.interval(b[0], b[1] + 1)
    return PredicateQuery.from_coverages(SCHEMA, cov)


def count(q: PredicateQuery) -> int:
    return sum(1 for r in ROWS if q.covers(r)) * 3  # three copies of every domain point


def row_loads(comp: ConcurrentComposition, value: str = "epsilon") -> list[float]:
    """Each row's sum of the declared costs of the children whose coverage holds it (brute force)."""
    loads = []
    for r in ROWS:
        total = 0.0
        for ch in comp.children:
            cov = comp._children[ch.id][1].coverage
            if cov == WHOLE_DOMAIN or cov.covers(r):
                total += getattr(ch.guarantee, value)
        loads.append(total)
    return loads


COVERAGES = [
    None,
    box((0, 1), None),
    box((2, 3), None),
    box(None, (0, 0)),
    box((1, 2), (1, 2)),
    box((3, 3), (2, 2)),
]


@on_both_sources
@settings(max_examples=40)
@given(data=st.data())
def test_interleaved_queries_never_let_any_row_pass_the_budget(data: st.DataObject, kind: str) -> None:
    budget = 1.0
    comp = ConcurrentComposition(
        count, SCHEMA, PureDP(budget), rng=source(kind, data.draw(st.integers(0, 10**6)))
    )
    live: list[str] = []
    steps = data.draw(st.lists(st.integers(0, 99), min_size=5, max_size=40))
    for step in steps:
        if step < 35 or not live:  # try to spawn a child
            kind = data.draw(st.sampled_from(["svt", "gc", "counts"]))
            eps = data.draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.7]))
            cov_q = data.draw(st.sampled_from(COVERAGES))
            coverage = WHOLE_DOMAIN if cov_q is None else cov_q
            before = comp.overlap_value()
            n_before = len(comp.children)
            try:
                if kind == "svt":
                    ch = comp.spawn_sparse_vector(
                        epsilon=eps, max_positives=2, threshold=5, coverage=coverage
                    )
                elif kind == "gc":
                    ch = comp.spawn_guess_and_check(
                        epsilon=eps, tolerance=2, max_failures=2, coverage=coverage
                    )
                else:
                    ch = comp.spawn_noisy_counts(
                        budget=PureDP(eps), per_query=PureDP(eps / 3), coverage=coverage
                    )
                live.append(ch.id)
            except BudgetExceededError:
                assert comp.overlap_value() == before and len(comp.children) == n_before  # nothing charged
                # refused only if it really did not fit on some row it covers
                worst = max(
                    load
                    for load, r in zip(row_loads(comp), ROWS, strict=True)
                    if cov_q is None or cov_q.covers(r)
                )
                assert worst + eps > budget - 1e-12
        else:  # query a random live child
            cid = live[data.draw(st.integers(0, len(live) - 1))]
            before = comp.overlap_value()
            info = comp.child(cid)
            child = comp._children[cid][1]
            cov = child.coverage
            q = cov if cov != WHOLE_DOMAIN else box((0, 3), None)
            try:
                if info.kind == "SparseVector":
                    comp.query(cid, q)
                elif info.kind == "GuessAndCheck":
                    comp.query(cid, (q, data.draw(st.integers(0, 40))))
                else:
                    comp.query(cid, q)
            except BudgetExceededError:
                assert info.kind == "NoisyCounts"  # a session's own budget, never the total's
            assert comp.overlap_value() == before  # queries are never charged again
        loads = row_loads(comp)
        assert max(loads, default=0.0) <= budget + 1e-9
        if comp.children:
            assert comp.overlap_value() == pytest.approx(max(loads))


@on_both_sources
def test_random_interleavings_of_several_children_stay_within_the_budget(kind: str) -> None:
    rng = random.Random(5)
    for trial in range(20):
        comp = ConcurrentComposition(count, SCHEMA, PureDP(2.0), rng=source(kind, trial))
        ids = [
            comp.spawn_sparse_vector(epsilon=0.5, max_positives=3, threshold=10).id,
            comp.spawn_guess_and_check(epsilon=0.5, tolerance=1, max_failures=2).id,
            comp.spawn_noisy_counts(budget=PureDP(0.5), per_query=PureDP(0.1)).id,
            comp.spawn_sparse_vector(epsilon=0.5, max_positives=1, threshold=0, monotonic=True).id,
        ]
        with pytest.raises(BudgetExceededError, match="nothing charged"):
            comp.spawn_sparse_vector(epsilon=0.01, threshold=0)
        order = [rng.choice(ids) for _ in range(60)]
        for cid in order:
            child_kind = comp.child(cid).kind
            q = box((rng.randint(0, 3), 3), None)
            try:
                comp.query(cid, (q, rng.randint(0, 40)) if child_kind == "GuessAndCheck" else q)
            except BudgetExceededError:
                assert child_kind == "NoisyCounts"
            assert comp.overlap_value() == pytest.approx(2.0)
        joint = comp.joint_guarantee()
        assert joint == concurrent_composition([c.guarantee for c in comp.children])
        assert joint.guarantee.epsilon == pytest.approx(2.0) and joint.guarantee.epsilon <= 2.0


def test_joint_guarantee_is_the_privacy_modules_concurrent_composition() -> None:
    comp = ConcurrentComposition(count, SCHEMA, PureDP(5.0), rng=1)
    comp.spawn_sparse_vector(epsilon=1.0, max_positives=2, threshold=3, release_epsilon=0.5)
    comp.spawn_guess_and_check(
        tolerance=2, max_failures=3, threshold_scale=4, query_scale=30, estimate_scale=12
    )
    comp.spawn_noisy_counts(budget=PureDP(0.8), per_query=PureDP(0.2), coverage=box((0, 1), None))
    declared = [c.guarantee for c in comp.children]
    joint = comp.joint_guarantee()
    assert joint == concurrent_composition(declared)
    assert joint.guarantee.epsilon == pytest.approx(1.5 + 0.7 + 0.8)  # Vadhan-Wang: sum for pure DP
    assert comp.overlap_value() == pytest.approx(1.5 + 0.7 + 0.8)

    z = ConcurrentComposition(count, SCHEMA, ZCDP(1.0), rng=2)
    z.spawn_noisy_counts(budget=ZCDP(0.3), per_query=ZCDP(0.1))
    z.spawn_noisy_counts(budget=ZCDP(0.5), per_query=ZCDP(0.25), coverage=box((0, 0), None))
    assert z.joint_guarantee() == concurrent_composition([ZCDP(0.3), ZCDP(0.5)])
    assert z.joint_guarantee().guarantee.rho == pytest.approx(0.8)  # Lyu 2022 Cor. 1
    assert z.overlap_value() == pytest.approx(0.8)


@on_both_sources
def test_children_on_disjoint_coverages_compose_in_parallel(kind: str) -> None:
    comp = ConcurrentComposition(count, SCHEMA, PureDP(1.0), rng=source(kind, 3))
    left = comp.spawn_sparse_vector(epsilon=1.0, threshold=0, coverage=box((0, 1), None))
    right = comp.spawn_sparse_vector(epsilon=1.0, threshold=0, coverage=box((2, 3), None))
    assert comp.overlap_value() == pytest.approx(1.0)
    assert comp.joint_guarantee().guarantee.epsilon == pytest.approx(2.0)  # ignores coverage: safe, looser
    with pytest.raises(BudgetExceededError):
        comp.spawn_sparse_vector(epsilon=0.1, threshold=0, coverage=box((1, 2), None))
    assert comp.query(left.id, box((0, 0), None)).outcome in ("above", "below")
    with pytest.raises(CoverageError):
        comp.query(right.id, box((0, 0), None))


@on_both_sources
def test_a_child_cannot_spend_beyond_its_declaration(kind: str) -> None:
    # On the OS source the "above" below fails only if q + nu < -100 + rho, probability below 1e-7.
    comp = ConcurrentComposition(count, SCHEMA, PureDP(3.0), rng=source(kind, 4))
    session = comp.spawn_noisy_counts(budget=PureDP(0.5), per_query=PureDP(0.2))
    svt = comp.spawn_sparse_vector(epsilon=0.5, max_positives=1, threshold=-100)
    q = box((0, 1), None)
    comp.query(session.id, q)
    comp.query(session.id, q)
    with pytest.raises(BudgetExceededError):
        comp.query(session.id, q)
    assert comp.exhausted(session.id)
    assert comp.query(svt.id, q).outcome == "above"
    assert comp.query(svt.id, q).outcome == "exhausted"
    assert comp.overlap_value() == pytest.approx(1.0)


@on_both_sources
def test_sessions_inside_the_compositor_account_per_row(kind: str) -> None:
    comp = ConcurrentComposition(count, SCHEMA, PureDP(1.0), rng=source(kind, 5))
    s = comp.spawn_noisy_counts(budget=PureDP(1.0), per_query=PureDP(0.5))
    for a in range(4):  # four disjoint queries, each row charged once
        comp.query(s.id, box((a, a), None))
    comp.query(s.id, box((0, 3), (0, 0)))  # every row now at 1.0 on b = 0
    with pytest.raises(BudgetExceededError):
        comp.query(s.id, box((2, 2), (0, 0)))
    comp.query(s.id, box((2, 2), (1, 1)))  # rows with b = 1 still have room


def test_bad_input_is_refused_clearly() -> None:
    comp = ConcurrentComposition(count, SCHEMA, PureDP(1.0), rng=6)
    with pytest.raises(MechanismError, match="no child"):
        comp.query("nobody", box(None, None))
    with pytest.raises(MechanismError):
        comp.joint_guarantee()
    comp.spawn_sparse_vector(epsilon=0.2, threshold=0, id="x")
    with pytest.raises(MechanismError, match="already exists"):
        comp.spawn_sparse_vector(epsilon=0.2, threshold=0, id="x")
    with pytest.raises(InsecureRandomnessError):
        ConcurrentComposition(count, SCHEMA, PureDP(1.0), rng=1, served=True)
    with pytest.raises(BudgetError):
        ConcurrentComposition(count, SCHEMA, PureDP(math.inf))
    with pytest.raises(MechanismError):
        comp.spawn(lambda data, rng: object())  # type: ignore[arg-type,return-value]
    other = Schema((IntAttribute("z", 0, 1),))
    with pytest.raises(CoverageError):
        comp.spawn_sparse_vector(
            epsilon=0.1,
            threshold=0,
            coverage=PredicateQuery.from_coverages(other, {"z": IndexSet.interval(0, 1)}),
        )


def test_accountant_descriptions_never_understate_the_cost() -> None:
    from fractions import Fraction

    from overlapdp.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise
    from overlapdp.mechanisms.accounting import DeclaredZCDP, declared_mechanism, noise_mechanism
    from overlapdp.privacy.definitions import GDP, ApproxDP

    lap = DiscreteLaplaceNoise(Fraction(10, 3))
    assert noise_mechanism(lap).pure().epsilon >= 0.3  # exact Delta/t = 0.3
    gau = DiscreteGaussianNoise(Fraction(8))
    assert noise_mechanism(gau).zcdp().rho >= 1 / 16
    big = DiscreteGaussianNoise(Fraction(10**12))
    assert noise_mechanism(big).zcdp().rho >= 1 / (2 * 10**12)
    assert declared_mechanism(PureDP(0.7)).pure() == PureDP(0.7)
    assert declared_mechanism(ApproxDP(0.7, 1e-6)).approx(1e-6).epsilon == pytest.approx(0.7)
    assert declared_mechanism(GDP(0.5)).gdp().mu >= 0.5
    z = declared_mechanism(ZCDP(0.2))
    assert isinstance(z, DeclaredZCDP) and z.zcdp() == ZCDP(0.2)
    assert z.delta_at(1.0) == pytest.approx(ZCDP(0.2).delta_at(1.0))
    assert z.rdp((2.0, 4.0)).epsilons == (0.4, 0.8)
    with pytest.raises(BudgetError):
        z.pld()


def test_noisy_counts_session_is_overlap_aware_when_it_knows_the_schema() -> None:
    from overlapdp.mechanisms import NoisyCounts

    seq = NoisyCounts(count, budget=PureDP(1.0), per_query=PureDP(0.5), rng=1)
    ovl = NoisyCounts(count, budget=PureDP(1.0), per_query=PureDP(0.5), schema=SCHEMA, rng=1)
    assert not seq.overlap_aware and ovl.overlap_aware
    for a in range(4):
        ovl.query(box((a, a), None))  # disjoint: each row pays 0.5 once
    seq.query(box((0, 0), None))
    seq.query(box((1, 1), None))
    with pytest.raises(BudgetExceededError):
        seq.query(box((2, 2), None))
    ovl.query(box((0, 3), None))
    assert ovl.exhausted
    with pytest.raises(BudgetExceededError):
        ovl.query(box((3, 3), (2, 2)))
