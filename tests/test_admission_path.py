"""One admission path, exact at the budget (MATH.md 2.7, 7.8).

- ``OverlapIndex`` savepoints restore the index exactly (bit for bit) after any nesting of adds,
  rollbacks and releases, in dense, generic and mixed modes: checked against brute force after each step.
- ``PrivacyFilter``: ``record`` never refuses (a replayed ledger), ``savepoint``/``rollback`` undo
  admissions, ``set_budget`` changes the budget, ``spent`` is the worst row's exact load rounded up.
- Calibration ranges: every accepted parameter gives a finite, representable noise scale; the rest get a
  ``BudgetError`` naming the parameter (the CLI's exit 2).

Truth is exact arithmetic with Fractions over every row, computed here.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.mechanisms import add_noise, noise_for
from overlapdp.overlap import OverlapIndex, UnknownQueryError
from overlapdp.privacy import BudgetError
from overlapdp.privacy.definitions import GDP, ZCDP, PureDP
from overlapdp.privacy.mechanisms import OpaqueApproxDP
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IndexSet, IntAttribute, Schema
from strategies import all_rows, schemas, where_clauses
from support.marks import slow_after
from support.overlap import check_result, weights_st

REPO = Path(__file__).resolve().parents[1]


# Weights from 1e-300 to 1e300: a heavier one re-normalises every held load (MATH.md 7.8), and a rollback
# must restore the normalisation too.
WIDE = st.floats(-300, 300).map(lambda e: float(10.0**e))


@pytest.mark.slow  # 1.2 s of CPU
@settings(max_examples=80)
@given(
    st.data(),
    st.sampled_from(["sum", "vector", "count", "l2"]),
    st.sampled_from([1 << 22, 1, 30]),
    st.booleans(),
)
def test_index_savepoints_restore_exactly(
    data: st.DataObject, comp: str, dense_limit: int, wide: bool
) -> None:
    """dense_limit 1: generic mode throughout; 30: the index leaves dense mode part-way (and a rollback
    across that switch must bring dense mode back). ``wide``: weights of any magnitude."""
    weights = WIDE if wide else weights_st
    schema = data.draw(schemas())
    k = data.draw(st.integers(1, 3))
    index = OverlapIndex(schema, comp, dense_limit=dense_limit)
    held: list[tuple[PredicateQuery, Any]] = []
    open_: list[tuple[int, int, Any]] = []  # (token, len(held) at open, value at open)
    counter = 0
    for _ in range(data.draw(st.integers(1, 16))):
        op = data.draw(st.sampled_from(["add", "add", "add", "open", "rollback", "release", "remove-last"]))
        if op == "add":
            q = parse_where(schema, data.draw(where_clauses(schema)), id=f"q{counter}")
            counter += 1
            w: Any = [data.draw(weights) for _ in range(k)] if comp == "vector" else data.draw(weights)
            index.add(q, w)
            held.append((q, w))
        elif op == "open":
            value = np.array(index.result().value, dtype=float, copy=True)
            open_.append((index.savepoint(), len(held), value))
        elif op in ("rollback", "release") and open_:
            i = data.draw(st.integers(0, len(open_) - 1))
            token, n, value = open_[i]
            del open_[i:]  # closing a savepoint closes the ones opened inside it
            if op == "rollback":
                index.rollback(token)
                del held[n:]
                # Restored, not recomputed by subtraction: bit for bit the value before.
                assert np.array_equal(np.array(index.result().value, dtype=float), value)
            else:
                index.release(token)
        elif op == "remove-last" and held and open_ and len(held) > open_[-1][1]:
            q, _ = held.pop()
            assert q.id is not None
            index.remove(q.id)
        assert len(index) == len(held)
        check(index, held, comp, wide)
    if open_:
        index.rollback(open_[0][0])
        del held[open_[0][1] :]
        check(index, held, comp, wide)


def check(index: OverlapIndex, held: list[tuple[PredicateQuery, Any]], comp: str, wide: bool) -> None:
    """Against brute force: float tolerances for ordinary weights, exact rationals for wide ones (the
    value is the exact maximum rounded up, MATH.md 7.8; l2 compared squared)."""
    if not wide:
        check_result(index, [q for q, _ in held], [w for _, w in held], comp, index.result())
        return
    r = index.result()
    assert r.exact
    if not held:
        assert not np.any(np.asarray(r.value, dtype=float))
        return
    for j in range(len(held[0][1]) if comp == "vector" else 1):
        best = Fraction(0)
        for row in all_rows(index.schema):
            ws = [w[j] if comp == "vector" else w for q, w in held if q.covers(row)]
            if comp == "count":
                ws = [1.0] * len(ws)
            best = max(best, sum((Fraction(x) ** (2 if comp == "l2" else 1) for x in ws), Fraction(0)))
        v = Fraction(float(np.asarray(r.value, dtype=float).reshape(-1)[j]))
        got = v * v if comp == "l2" else v
        assert got >= best * (1 - Fraction(1, 10**9))
        assert got <= best * (1 + Fraction(1, 10**9))


def test_index_remove_inside_a_savepoint_only_undoes_the_last_add() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    index = OverlapIndex(schema, "sum")
    index.add(parse_where(schema, "a < 5", id="x"), 1.0)
    token = index.savepoint()
    index.add(parse_where(schema, "a > 2", id="y"), 2.0)
    index.add(parse_where(schema, "a > 3", id="z"), 4.0)
    with pytest.raises(UnknownQueryError):
        index.remove("y")
    index.remove("z")
    assert index.result().value == 3.0
    index.release(token)
    index.remove("x")  # outside a savepoint any query can go
    assert index.result().value == 2.0


# -- the filter -----------------------------------------------------------------------------------------

GRID = Schema((IntAttribute("a", 0, 7), IntAttribute("b", 0, 3)))


def _rows() -> list[tuple[int, int]]:
    return [(a, b) for a in range(8) for b in range(4)]


def _worst(charges: list[tuple[PredicateQuery, float]]) -> Fraction:
    """The exact maximum over rows of the summed loads (MATH.md 1.8), by enumeration."""
    return max(
        (sum((Fraction(w) for q, w in charges if q.covers(row)), Fraction(0)) for row in _rows()),
        default=Fraction(0),
    )


def _worst_in(charges: list[tuple[PredicateQuery, float]], where: PredicateQuery) -> Fraction:
    return max(
        sum((Fraction(w) for q, w in charges if q.covers(row)), Fraction(0))
        for row in _rows()
        if where.covers(row)
    )


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def test_filter_is_exact_at_the_budget_and_record_never_refuses() -> None:
    everything = parse_where(GRID, "a >= 0")
    f = PrivacyFilter(GRID, PureDP(1.0))
    assert f.try_charge(OpaqueApproxDP(1.0), everything, "one").admitted
    assert not f.try_charge(OpaqueApproxDP(2.0**-53), everything, "tiny").admitted  # 1 + 2^-53 > 1
    assert f.spent() == 1.0
    # A committed charge read back from a ledger is recorded, never refused, and the spend is exact.
    f.record(OpaqueApproxDP(2.0**-53), everything, "recorded")
    assert Fraction(f.spent()) == _float_up(Fraction(1) + Fraction(2.0**-53)) > 1.0
    # Ten charges of 0.1 on one row exceed 1.0 exactly, although their float running sum does not.
    g = PrivacyFilter(GRID, PureDP(1.0))
    q = parse_where(GRID, "a < 3")
    admitted = sum(g.try_charge(OpaqueApproxDP(0.1), q, f"t{i}").admitted for i in range(10))
    assert admitted == 9
    assert Fraction(g.spent()) == _float_up(9 * Fraction(0.1))


def test_filter_savepoints_and_budget_changes() -> None:
    f = PrivacyFilter(GRID, ZCDP(1.0))
    q1, q2 = parse_where(GRID, "a < 4"), parse_where(GRID, "a >= 2 AND b = 1")
    from overlapdp.service.logged_filter import Charged

    sp = f.savepoint()
    assert f.try_charge(Charged("zcdp", 0.75), q1, "x").admitted
    inner = f.savepoint()
    assert f.try_charge(Charged("zcdp", 0.25), q2, "y").admitted
    assert f.spent() == 1.0
    f.rollback(inner)
    assert f.spent() == 0.75 and len(f) == 1 and len(f.odometer) == 1
    f.set_budget(ZCDP(0.5))  # lowered below the worst row's 0.75: nothing more fits, nothing is lost
    assert not f.try_charge(Charged("zcdp", 2.0**-40), parse_where(GRID, "a = 1"), "z1").admitted
    assert not f.try_charge(Charged("zcdp", 2.0**-40), parse_where(GRID, "a = 7"), "z7").admitted
    assert f.spent() == 0.75
    f.set_budget(ZCDP(2.0))
    assert f.try_charge(Charged("zcdp", 1.25), parse_where(GRID, "a = 1"), "z2").admitted
    f.rollback(sp)
    assert f.spent() == 0.0 and len(f) == 0
    f.set_budget(ZCDP(0.5))
    assert not f.try_charge(Charged("zcdp", 0.75), q1, "w").admitted
    assert f.try_charge(Charged("zcdp", 0.5), q1, "v").admitted
    with pytest.raises(BudgetError):
        f.set_budget(PureDP(1.0))  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", slow_after([0, 1, 2]))
def test_filter_decisions_match_exact_enumeration_near_the_budget(seed: int) -> None:
    """A random stream of single charges and batches, many of them sized to land exactly on, just
    above or just below the remaining budget of their worst row: the adapter the service uses admits
    exactly when the brute-force exact maximum stays within the budget, and its spend is that exact
    maximum rounded up."""
    from overlapdp.service.filters import ServiceFilter

    rng = np.random.default_rng(seed)
    budget = [1.0, 0.3, 8192.0][seed]
    f = ServiceFilter(GRID, "pure", budget)
    admitted: list[tuple[PredicateQuery, float]] = []
    for _ in range(60):
        batch = []
        for _ in range(int(rng.integers(1, 3))):
            lo = int(rng.integers(0, 8))
            q = parse_where(GRID, f"a BETWEEN {lo} AND {lo + int(rng.integers(0, 4))} AND b IN (0, 1)")
            room = Fraction(budget) - _worst_in([*admitted, *batch], q)
            near = [float(room), math.nextafter(float(room), math.inf), math.nextafter(float(room), 0.0)]
            pick = rng.integers(0, 5)
            eps = near[pick] if pick < 3 else [0.1, budget / 7][pick - 3]
            batch.append((q, max(eps, 2.0**-40)))
        truth = _worst([*admitted, *batch]) <= Fraction(budget)
        assert f.try_all(batch) is truth
        if truth:
            admitted.extend(batch)
        assert Fraction(f.max_load()) == _float_up(_worst(admitted))


# -- calibration ranges -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        (PureDP(1e-300), "epsilon"),
        (PureDP(5e-324), "epsilon"),
        (PureDP(math.nextafter(2.0**-40, 0)), "epsilon"),
        (ZCDP(1e-300), "rho"),
        (ZCDP(math.nextafter(2.0**-81, 0)), "rho"),
        (GDP(5e-324), "mu"),
        (GDP(1e155), "mu"),  # its declared rho = mu^2/2 would not be a float
    ],
)
def test_too_small_parameters_are_refused_naming_the_field(budget: Any, field: str) -> None:
    with pytest.raises(BudgetError, match=f"^{field} = "):
        noise_for(budget)


@pytest.mark.parametrize(
    "budget", [PureDP(2.0**-40), ZCDP(2.0**-81), GDP(2.0**-40), PureDP(1e300), ZCDP(1e300), GDP(1e154)]
)
def test_parameters_at_the_limits_calibrate_to_finite_noise(budget: Any) -> None:
    (a,) = add_noise([10], budget, rng=1)
    assert math.isfinite(a.std) and a.low <= a.value <= a.high
    # At the small end the noise has the scale asked for (2^40 = 1.0995e12): sqrt(2) t or sigma.
    if a.std > 1:
        assert a.std == pytest.approx(2.0**40 * (math.sqrt(2) if isinstance(budget, PureDP) else 1), rel=1e-3)


@pytest.mark.slow
def test_cli_answer_refuses_a_tiny_budget_with_exit_2(tmp_path: Path) -> None:
    from overlapdp.samples import adult_schema, synthetic_adult

    synthetic_adult(100, seed=1).to_csv(tmp_path / "a.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(adult_schema().to_json()))
    (tmp_path / "q.jsonl").write_text('{"where": "sex = 1"}\n')
    for budget in ("1e-300", "5e-324"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "overlapdp.cli.main",
                "answer",
                "--schema",
                str(tmp_path / "s.json"),
                "--data",
                str(tmp_path / "a.csv"),
                "--queries",
                str(tmp_path / "q.jsonl"),
                "--budget",
                budget,
                "--definition",
                "pure",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            timeout=120,
        )
        assert out.returncode == 2, out.stderr
        assert "budget" in out.stderr and "epsilon" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("k", [2, 3, 9])
def test_recording_a_group_equals_recording_each_charge(k: int) -> None:
    """``record(times=k)`` (how the service replays a long ledger) holds exactly what k records hold:
    the same spend and the same decisions just below, at and above the budget."""
    q, other = parse_where(GRID, "a < 4"), parse_where(GRID, "a >= 2")
    grouped, single = PrivacyFilter(GRID, PureDP(1.0)), PrivacyFilter(GRID, PureDP(1.0))
    sp = grouped.savepoint()
    grouped.record(OpaqueApproxDP(0.1), q, "g", times=k)
    assert len(grouped) == k
    grouped.rollback(sp)  # undone as a whole
    assert len(grouped) == 0 and grouped.spent() == 0.0
    grouped.record(OpaqueApproxDP(0.1), q, "g", times=k)
    for j in range(k):
        single.record(OpaqueApproxDP(0.1), q, f"s{j}")
    exact = k * Fraction(0.1)
    assert grouped.spent() == single.spent() == _float_up(exact)
    room = 1 - exact
    for eps in (float(room), math.nextafter(float(room), 0), math.nextafter(float(room), 1), 0.05):
        truth = exact + Fraction(eps) <= 1
        for f in (grouped, single):
            sp = f.savepoint()
            assert f.try_charge(OpaqueApproxDP(eps), other, "t").admitted is truth, (eps, k)
            f.rollback(sp)


@pytest.mark.parametrize("dense_limit", [1 << 22, 1])
def test_index_rollback_restores_the_normalisation(dense_limit: int) -> None:
    """A heavier weight inside a savepoint re-normalises every held load (MATH.md 7.8): 1e-300 and 2e-300
    both round up to the smallest subnormal next to 1e300. The rollback must bring back the loads
    normalised to the weights still held, or the two rows tie and the lighter one may be reported."""
    schema = Schema((IntAttribute("a", 0, 1),))
    index = OverlapIndex(schema, "sum", dense_limit=dense_limit)
    index.add(parse_where(schema, "a = 0", id="light"), 1e-300)
    index.add(parse_where(schema, "a = 1", id="heavier"), 2e-300)
    token = index.savepoint()
    index.add(parse_where(schema, "a = 0", id="huge"), 1e300)
    index.rollback(token)
    assert index.result().value == 2e-300
    assert index.peek(parse_where(schema, "a = 0"), 5e-301).value == 2e-300
    assert index.peek(parse_where(schema, "a = 1"), 1e-300).value == 3e-300
    index.add(parse_where(schema, "a = 1", id="more"), 1e-300)
    assert index.result().value == 3e-300


PEEK_SCHEMA = Schema((IntAttribute("a", 0, 5), IntAttribute("b", 0, 3), IntAttribute("c", 0, 2)))


def _random_query(rng: random.Random, qid: str) -> PredicateQuery:
    covs: dict[int, IndexSet] = {}
    for p, attr in enumerate(PEEK_SCHEMA.attributes):
        r = rng.random()
        if r < 0.3:
            lo = rng.randrange(attr.size)
            covs[p] = IndexSet.interval(lo, rng.randrange(lo, attr.size) + 1)
        elif r < 0.5:
            covs[p] = IndexSet.from_indices(rng.sample(range(attr.size), rng.randrange(1, attr.size + 1)))
    return PredicateQuery.from_coverages(PEEK_SCHEMA, covs, id=qid)


@pytest.mark.slow
@given(seed=st.integers(0, 100_000), comp=st.sampled_from(["sum", "l2", "vector"]), generic=st.booleans())
@settings(max_examples=60, deadline=None)
def test_index_rollback_after_a_heavier_peek_is_exact(seed: int, comp: str, generic: bool) -> None:
    """Regression: a peek with a heavier weight re-normalises the index (MATH.md 7.8); inside a savepoint
    that was not journaled, so a rollback mixed loads of two normalisations and the maximum came out
    wrong, also below the truth (an (epsilon, delta) filter then admitted a row at 1.083 against 1.0).
    Truth: brute force with exact rationals over every row after every step."""
    rng = random.Random(seed)
    idx = OverlapIndex(PEEK_SCHEMA, comp, dense_limit=1 if generic else 1 << 22)
    held: list[tuple[PredicateQuery, Any]] = []
    marks: list[tuple[int, int]] = []
    rows = all_rows(PEEK_SCHEMA)

    def weight() -> Any:
        w = rng.choice([0.1, 0.2, 0.5, 3.0, 1e3, 1 / 12])
        return [w, 2 * w] if comp == "vector" else w

    for step in range(20):
        op = rng.random()
        if op < 0.15:
            marks.append((idx.savepoint(), len(held)))
        elif op < 0.3 and marks:
            token, n = marks.pop()
            idx.rollback(token)
            del held[n:]
        elif op < 0.55:
            idx.peek(_random_query(rng, "p"), weight())  # often heavier than everything held
        else:
            q, w = _random_query(rng, f"s{step}"), weight()
            idx.insert(q, w)
            held.append((q, w))
        if not held:  # (an empty vector index has no components yet)
            continue
        r = idx.result()
        for k in range(2 if comp == "vector" else 1):
            best = max(
                sum(
                    (Fraction(w[k] if isinstance(w, list) else w) ** (2 if comp == "l2" else 1))
                    for q, w in held
                    if q.covers(row)
                )
                for row in rows
            )
            part = r.components[k] if comp == "vector" else r
            v = Fraction(float(part.value))
            assert (v * v if comp == "l2" else v) >= best, step
            if part.exact:  # the smallest float at or above the truth
                below = Fraction(math.nextafter(float(part.value), -math.inf))
                assert (below * below if comp == "l2" else below) < best, step
