"""Answers under replace-one neighbours (issue 25 item 4): ``plan_answers(..., neighbouring="replace")``
and ``overlapdp answer --neighbouring replace``.

Independent truth: every PAIR of rows of a small domain (and the outside row, which no query covers) is
enumerated; a replaced row changes every query covering either row of the pair (counts and sums alike,
the union is an upper bound of what the pair pays: MATH.md 2.9), so the declared per-query charges of
that union, summed in exact Fractions, must stay within the budget. The sums' noise is checked against
the replace-one sensitivity written out from the bounds, not read from the code."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import combinations_with_replacement
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import run
from overlapdp.mechanisms import answer_workload, plan_answers
from overlapdp.mechanisms.calibration import declared_guarantee
from overlapdp.privacy.definitions import PureDP
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import COUNT, Aggregate, Clipping
from overlapdp.schema import IndexSet, IntAttribute, Schema

SCHEMA = Schema((IntAttribute("a", 0, 5), IntAttribute("b", 0, 3)))


def workload() -> list[PredicateQuery]:
    qs = [PredicateQuery.from_coverages(SCHEMA, {}, id="all")]
    qs += [
        PredicateQuery.from_coverages(SCHEMA, {"a": IndexSet.interval(2 * i, 2 * i + 2)}, id=f"a{i}")
        for i in range(3)
    ]
    qs += [
        PredicateQuery.from_coverages(
            SCHEMA, {"a": IndexSet.interval(0, 3), "b": IndexSet.interval(i, i + 1)}, id=f"ab{i}"
        )
        for i in range(4)
    ]
    return qs


def _rows() -> list[tuple[int, int] | None]:
    """Every row of the domain, and None for the outside row (covered by no query)."""
    out: list[tuple[int, int] | None] = [(a, b) for a in range(6) for b in range(4)]
    return [*out, None]


def _declared(plan: object, n: int) -> list[Fraction]:
    gs = [declared_guarantee(plan.budget_of(i)) for i in range(n)]  # type: ignore[attr-defined]
    return [Fraction(g.epsilon) if isinstance(g, PureDP) else Fraction(g.rho) for g in gs]


def _worst_pair(qs: list[PredicateQuery], cost: list[Fraction]) -> Fraction:
    covering = {r: {i for i, q in enumerate(qs) if r is not None and q.covers(r)} for r in _rows()}
    return max(
        sum((cost[i] for i in covering[x] | covering[y]), Fraction(0))
        for x, y in combinations_with_replacement(_rows(), 2)
    )


@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
@pytest.mark.parametrize("allocation", ["even", "optimal"])
def test_every_pair_of_rows_stays_within_the_budget(definition: str, allocation: str) -> None:
    qs = workload()
    plan = plan_answers(qs, 1.0, definition, allocation=allocation, neighbouring="replace")
    limit = Fraction(1) if definition != "gdp" else Fraction(1, 2)  # GDP mu 1 is declared rho 1/2
    worst = _worst_pair(qs, _declared(plan, len(qs)))
    assert worst <= limit
    # the printed overlap-aware guarantee is never below what the worst pair pays ...
    printed = plan.guarantees()["overlap"]
    value = printed["declared_zcdp_rho"] if definition == "gdp" else next(iter(printed.values()))
    assert Fraction(value) >= worst
    # ... and the plan is not the add/remove one: under add/remove the same shares would let a pair
    # of rows pay more than the budget
    loose = plan_answers(qs, 1.0, definition, allocation=allocation)
    assert _worst_pair(qs, _declared(loose, len(qs))) > limit
    assert plan.to_json()["neighbouring"] == "replace"


def test_even_shares_count_both_rows_of_a_pair() -> None:
    qs = workload()
    add_remove = plan_answers(qs, 1.0, "pure")
    replace = plan_answers(qs, 1.0, "pure", neighbouring="replace")
    assert add_remove.gamma == replace.gamma == 3  # all, one a-range, one ab-cell
    assert replace.overlap_share <= 1 / 6 < add_remove.overlap_share <= 1 / 3
    # a count's sensitivity is 1 under both relations: every query pays once, sequential shares agree
    assert replace.sequential_share == add_remove.sequential_share


def test_sums_are_calibrated_to_the_replace_one_sensitivity() -> None:
    """Bounds [-5, 10]: one row adds at most 10 (add/remove), a replaced row moves a sum by up to
    10 - (-5) = 15 (MATH.md 2.8)."""
    qs = workload()[:2]
    clip = Clipping("b", -5, 10)
    aggs = [COUNT, Aggregate("sum", clip)]
    data = pd.DataFrame({"a": np.arange(60) % 6, "b": np.arange(60) % 4})
    for neighbouring, sensitivity in (("add_remove", 10), ("replace", 15)):
        plan = plan_answers(qs, 1.0, "pure", neighbouring=neighbouring)
        out = answer_workload(data, qs, plan, aggregates=aggs, rng=np.random.default_rng(0)).answers
        assert out[1].sensitivity == sensitivity


def test_bad_neighbouring_is_refused_by_name() -> None:
    from overlapdp.errors import AnswerError

    with pytest.raises(AnswerError, match="neighbouring"):
        plan_answers(workload(), 1.0, "pure", neighbouring="swap")


def test_answer_and_plan_commands_take_neighbouring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    SCHEMA.save(tmp_path / "s.json")
    lines = ['{"id": "all", "where": "TRUE"}'] + [
        json.dumps({"id": f"a{i}", "where": f"a BETWEEN {2 * i} AND {2 * i + 1}"}) for i in range(3)
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    pd.DataFrame({"a": np.arange(60) % 6, "b": np.arange(60) % 4}).to_csv(tmp_path / "d.csv", index=False)
    common = ["--schema", str(tmp_path / "s.json"), "--queries", str(tmp_path / "q.jsonl")]
    common += ["--definition", "pure", "--budget", "1"]
    answer = ["answer", *common, "--data", str(tmp_path / "d.csv")]
    code, out, err = run([*answer, "--neighbouring", "replace", "--json"], capsys)
    assert code == 0, err
    privacy = json.loads(out)["privacy"]
    assert privacy["neighbouring"] == "replace" and privacy["gamma"] == 2
    assert privacy["per_query"]["epsilon"] <= 0.25  # a pair of rows pays 2 * gamma shares of 1
    assert privacy["guarantee"]["overlap"]["epsilon"] <= 1
    code, out, err = run(["plan", *common, "--neighbouring", "replace", "--json"], capsys)
    assert code == 0, err
    released = json.loads(out)
    assert released["neighbouring"] == "replace"
    assert max(q["share"] for q in released["queries"]) <= 0.5  # every row within half of 1
    code, out, err = run([*answer, "--neighbouring", "swap"], capsys)
    assert code == 2 and "swap" in err


def test_the_release_plan_halves_rows_and_cells_but_not_sequential_composition() -> None:
    """Sequential composition charges each query once under both relations (a count's sensitivity is 1
    either way); a replaced row may leave one row's (or partition cell's) queries and join another's,
    so those comparisons pay twice. Halving the sequential side too would flatter the overlap gain."""
    from overlapdp.mechanisms.planning import plan_release

    qs = workload()
    add_remove = plan_release(qs, 1.0, "pure", allocation="even")
    replace = plan_release(qs, 1.0, "pure", allocation="even", neighbouring="replace")
    assert replace.totals["sequential"] == add_remove.totals["sequential"]
    for side in ("partitions", "even overlap"):
        assert replace.totals[side] > 3 * add_remove.totals[side]  # half the share: ~4x the variance


def test_every_planner_refuses_an_unknown_relation_by_name() -> None:
    """plan_release with even shares read any value other than "replace" as add/remove, and stated its
    plan for a relation that was never asked; every planner now refuses it, naming the choices."""
    from overlapdp.errors import AnswerError
    from overlapdp.mechanisms.planning import budget_for_error, error_target, plan_release

    qs = workload()
    for call in (
        lambda: plan_release(qs, 1.0, "pure", allocation="even", neighbouring="swap"),
        lambda: plan_release(qs, 1.0, "pure", neighbouring="swap"),
        lambda: budget_for_error(qs, 5, "pure", neighbouring="swap"),
        lambda: error_target(qs, 5, "pure", neighbouring="swap"),
        lambda: plan_answers(qs, 1.0, "pure", neighbouring="swap"),
    ):
        with pytest.raises(AnswerError, match="'add_remove' or 'replace'"):
            call()
