"""Planning a release (mechanisms/planning.py, ``overlapdp plan``) against independent truth: error bars
from the discrete Laplace's closed-form tail, the plan's guarantee from the odometer, the accountings'
order from their definitions, the error-target budget from both sides of its boundary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import run
from overlapdp.errors import AnswerError
from overlapdp.mechanisms.answering import even_share
from overlapdp.mechanisms.planning import budget_for_error, partition_families, plan_release
from overlapdp.privacy import Laplace, Odometer
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, IntAttribute, Schema

SCHEMA = Schema((IntAttribute("age", 0, 99), IntAttribute("hours", 0, 9)))


def workload() -> list[PredicateQuery]:
    qs = [PredicateQuery.from_coverages(SCHEMA, {}, id="all")]
    qs += [
        PredicateQuery.from_coverages(SCHEMA, {"age": IndexSet.interval(10 * i, 10 * i + 10)}, id=f"a{i}")
        for i in range(10)
    ]
    qs += [
        PredicateQuery.from_coverages(SCHEMA, {"hours": IndexSet.interval(i, i + 1)}, id=f"h{i}")
        for i in range(10)
    ]
    return qs


def laplace_half_width(epsilon: float, level: float) -> int:
    """Smallest w with P(|Y| <= w) >= level for the discrete Laplace of parameter e^-epsilon:
    P(|Y| > w) = 2 p^(w+1) / (1 + p) (closed form, independent of the code's own tail sums)."""
    p = math.exp(-epsilon)
    w = 0
    while 2 * p ** (w + 1) / (1 + p) > 1 - level:
        w += 1
    return w


def test_error_bars_and_guarantee_of_a_pure_plan() -> None:
    qs = workload()
    rp = plan_release(qs, 1.0, "pure", level=0.9)
    assert rp.gamma == 3 and rp.families == 3  # every (age, hours) row: all, one age, one hours
    for s, w in zip(rp.shares, rp.half_widths, strict=True):
        # (the noise's scale is 1/epsilon rounded to a rational: allow one step at the boundary)
        assert abs(w - laplace_half_width(s, 0.9)) <= 1
    # the guarantee, by the odometer (exact overlap-aware epsilon of the planned Laplace charges)
    odo = Odometer(SCHEMA)
    for q, e in zip(qs, rp.shares, strict=True):
        odo.charge(Laplace(1.0 / e), q)
    assert float(odo.report(1e-9).definitions["pure"].overlap) <= 1.0
    # three families (the big query, the ages, the hours), as many as gamma: partitions equal even
    # overlap shares here, and the optimal allocation is below both
    t = rp.totals
    assert t["sequential"] > t["partitions"] == t["even overlap"] > t["optimal overlap"]


def test_partition_families_are_pairwise_disjoint_counts() -> None:
    qs = workload()
    # the big query meets everything; the ages are disjoint, the hours too; an age meets every hour
    assert partition_families(qs) == 3
    assert partition_families(qs[1:11]) == 1
    # three ranges pairwise overlapping in a cycle but with no common row: gamma 2, three families
    tri = [
        PredicateQuery.from_coverages(SCHEMA, {"age": IndexSet.interval(0, 20)}, id="x"),
        PredicateQuery.from_coverages(SCHEMA, {"age": IndexSet.interval(10, 30)}, id="y"),
        PredicateQuery.from_coverages(SCHEMA, {"age": IndexSet.from_intervals([(0, 5), (25, 30)])}, id="z"),
    ]
    assert partition_families(tri) == 3
    assert plan_release(tri, 1.0, "pure").gamma == 2


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_budget_for_an_error_target_is_the_smallest(definition: str) -> None:
    qs = workload()
    total, share, gamma = budget_for_error(qs, 25, definition, level=0.95)
    assert gamma == 3
    at = plan_release(qs, total, definition, allocation="even", level=0.95)
    assert max(at.half_widths) <= 25
    below = plan_release(qs, total * (1 - 1e-6), definition, allocation="even", level=0.95)
    assert max(below.half_widths) > 25
    assert share == even_share(definition, total, gamma)  # type: ignore[arg-type]


def test_bad_plans_are_refused_by_name() -> None:
    with pytest.raises(AnswerError, match="allocation"):
        plan_release(workload(), 1.0, "pure", allocation="greedy")  # type: ignore[arg-type]
    with pytest.raises(AnswerError, match="error target"):
        budget_for_error(workload(), -1, "pure")
    with pytest.raises(AnswerError, match="unknown definition"):
        plan_release(workload(), 1.0, "rdp")


def test_the_plan_command_prints_shares_rounded_down_and_the_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    SCHEMA.save(tmp_path / "s.json")
    lines = ['{"id": "all", "where": "TRUE"}'] + [
        json.dumps({"id": f"a{i}", "where": f"age BETWEEN {10 * i} AND {10 * i + 9}"}) for i in range(10)
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    base = [
        "plan",
        "--schema",
        str(tmp_path / "s.json"),
        "--queries",
        str(tmp_path / "q.jsonl"),
        "--definition",
        "pure",
    ]
    code, out, err = run([*base, "--budget", "1", "--json"], capsys)
    assert code == 0, err
    js = json.loads(out)
    shares = [q["share"] for q in js["queries"]]
    # one big query and 10 disjoint ranges: the closed form 1 / (1 + 10^(1/3)) for the big one
    assert shares[0] == pytest.approx(1 / (1 + 10 ** (1 / 3)), rel=1e-3)
    code, out, err = run([*base, "--budget", "1"], capsys)
    assert code == 0, err
    printed = [ln.split("│")[2].strip() for ln in out.splitlines() if ln.startswith("│ a")]
    assert len(printed) == 11 and all(float(p) <= s for p, s in zip(printed, shares, strict=True))
    assert "even overlap" in out and "sequential" in out and "certified worst row" in out
    code, out, err = run([*base, "--target-error", "30", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["gamma"] == 2
    code, out, err = run([*base], capsys)
    assert code != 0 and "--budget or --target-error" in err


def test_optimal_beats_even_on_skewed_workloads() -> None:
    rng = np.random.default_rng(3)
    qs = [PredicateQuery.from_coverages(SCHEMA, {}, id="all")]
    for i in range(30):
        lo = int(rng.integers(0, 90))
        qs.append(
            PredicateQuery.from_coverages(
                SCHEMA, {"age": IndexSet.interval(lo, lo + int(rng.integers(1, 10)))}, id=f"r{i}"
            )
        )
    rp = plan_release(qs, 2.0, "zcdp")
    assert rp.totals["optimal overlap"] < rp.totals["even overlap"]
    assert rp.allocation is not None and rp.allocation.worst_row <= 2.0


def _rows() -> list[tuple[int, int]]:
    return [(a, h) for a in range(SCHEMA.attributes[0].size) for h in range(SCHEMA.attributes[1].size)]


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_answers_at_the_optimal_allocation_stay_within_budget_on_every_row(definition: str) -> None:
    """plan_answers(allocation="optimal"): each query's noise is calibrated to its own share, and the
    DECLARED guarantees of the queries covering any row (brute force over all 1 000 rows, exact
    Fractions; GDP's declared zCDP rho = mu^2/2 rounded up) compose within the budget's."""
    from fractions import Fraction

    from overlapdp.mechanisms import answer_workload, plan_answers
    from overlapdp.mechanisms.calibration import declared_guarantee, noise_for
    from overlapdp.privacy.definitions import PureDP

    qs = workload()
    plan = plan_answers(qs, 1.0, definition, allocation="optimal")
    assert plan.shares is not None and len(set(plan.shares)) > 1
    declared = [declared_guarantee(plan.budget_of(i)) for i in range(len(qs))]
    cost = [Fraction(g.epsilon) if isinstance(g, PureDP) else Fraction(g.rho) for g in declared]
    limit = Fraction(1) if definition != "gdp" else Fraction(1, 2)  # GDP mu 1 is declared rho 1/2
    worst = max(sum((c for c, q in zip(cost, qs, strict=True) if q.covers(r)), Fraction(0)) for r in _rows())
    assert worst <= limit
    g = plan.guarantees()["overlap"]
    assert Fraction(next(iter(g.values()))) <= 1  # the printed overlap-aware guarantee is the budget's
    data = pd.DataFrame({"age": np.arange(100).repeat(3) % 100, "hours": np.arange(300) % 10})
    answers = answer_workload(data, qs, plan).answers
    for i, a in enumerate(answers):
        assert a.noise == noise_for(plan.budget_of(i))  # each query at its own share


def test_optimal_allocation_needs_overlap_accounting() -> None:
    from overlapdp.mechanisms import plan_answers

    with pytest.raises(AnswerError, match="overlap"):
        plan_answers(workload(), 1.0, "pure", "sequential", allocation="optimal")
    with pytest.raises(AnswerError, match="allocation"):
        plan_answers(workload(), 1.0, "pure", allocation="clever")


def test_answer_command_with_the_optimal_allocation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    SCHEMA.save(tmp_path / "s.json")
    lines = ['{"id": "all", "where": "TRUE"}'] + [
        json.dumps({"id": f"a{i}", "where": f"age BETWEEN {10 * i} AND {10 * i + 9}"}) for i in range(10)
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    pd.DataFrame({"age": np.arange(200) % 100, "hours": np.arange(200) % 10}).to_csv(
        tmp_path / "d.csv", index=False
    )
    args = ["answer", "--schema", str(tmp_path / "s.json"), "--queries", str(tmp_path / "q.jsonl")]
    args += [
        "--data",
        str(tmp_path / "d.csv"),
        "--definition",
        "pure",
        "--budget",
        "1",
        "--allocation",
        "optimal",
    ]
    code, out, err = run([*args, "--json"], capsys)
    assert code == 0, err
    js = json.loads(out)
    shares = js["privacy"]["allocation"]["shares"]
    assert shares[0] == pytest.approx(1 / (1 + 10 ** (1 / 3)), rel=1e-3)
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert "optimal allocation" in out
    guarantee = next(ln for ln in out.splitlines() if "guarantee, overlap-aware" in ln)
    assert guarantee.split("│")[2].split()[:3] == ["ε", "=", "1"]
