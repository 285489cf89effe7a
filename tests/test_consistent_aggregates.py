"""Consistent counts, sums and means (issue 25 item 4; MATH.md 6.5.1).

Independent truth:
- the projection is compared with SciPy's SLSQP on the problem written out directly (per cell a count
  n_c >= 0 and a sum s_c with L n_c <= s_c <= H n_c, no corners), on a small workload;
- the guarantee (the weighted total squared error of the released figures never increases) on many
  draws against the exact counts and clipped sums computed with pandas;
- the consistent figures come from ONE table: each consistent sum lies within its consistent count times
  the bounds, and a total equals the sum of its disjoint parts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.optimize

from cli_helpers import run
from overlapdp.errors import ConsistencyError
from overlapdp.mechanisms import answer_workload, plan_answers
from overlapdp.mechanisms.consistency import project_aggregates, workload_design
from overlapdp.mechanisms.sums import NoisyMean, NoisySum
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import COUNT, Aggregate, Clipping
from overlapdp.schema import IndexSet, IntAttribute, Schema

SCHEMA = Schema((IntAttribute("a", 0, 3), IntAttribute("h", 0, 9)))
CLIP = Clipping("h", 0, 9)


def workload() -> tuple[list[PredicateQuery], list[Aggregate]]:
    whole = PredicateQuery.from_coverages(SCHEMA, {}, id="all")
    parts = [
        PredicateQuery.from_coverages(SCHEMA, {"a": IndexSet.interval(i, i + 1)}, id=f"a{i}")
        for i in range(4)
    ]
    low = PredicateQuery.from_coverages(SCHEMA, {"a": IndexSet.interval(0, 2)}, id="low")
    qs = [whole, *parts, whole.with_id("sum_all"), *[p.with_id(f"s{i}") for i, p in enumerate(parts)]]
    qs.append(low.with_id("mean_low"))
    aggs = [COUNT] * 5 + [Aggregate("sum", CLIP)] * 5 + [Aggregate("mean", CLIP)]
    return qs, aggs


def data(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.integers(0, 4, 400), "h": rng.integers(0, 10, 400)})


def truth(df: pd.DataFrame) -> list[float]:
    """The released figures' true values, by pandas: per query its count or clipped sum; a mean's two
    halves (sum, then count)."""
    qs, aggs = workload()
    out: list[float] = []
    for q, agg in zip(qs, aggs, strict=True):
        inside = df[[q.covers((int(a), int(h))) for a, h in zip(df["a"], df["h"], strict=True)]]
        if agg.kind == "count":
            out.append(float(len(inside)))
        elif agg.kind == "sum":
            out.append(float(inside["h"].clip(0, 9).sum()))
        else:
            out += [float(inside["h"].clip(0, 9).sum()), float(len(inside))]
    return out


def figures(answers: list[object]) -> tuple[list[float], list[float]]:
    """Released figures and their noise variances, in the order of :func:`truth`."""
    vals: list[float] = []
    var: list[float] = []
    for a in answers:
        if isinstance(a, NoisyMean):
            vals += [a.sum.value, float(a.count.value)]
            var += [a.sum.std**2, a.count.noise.variance]
        elif isinstance(a, NoisySum):
            vals.append(a.value)
            var.append(a.std**2)
        else:
            vals.append(float(a.value))  # type: ignore[attr-defined]
            var.append(a.noise.variance)  # type: ignore[attr-defined]
    return vals, var


def direct_projection(answers: list[object]) -> float:
    """The optimum of the projection written out without corners: per cell (n_c, s_c), n_c >= 0,
    0 <= s_c <= 9 n_c; minimise the weighted squared distance of the figures (SLSQP)."""
    qs, _ = workload()
    design = workload_design(qs).matrix.astype(float)  # queries x cells
    cells = design.shape[1]
    y, var = map(np.asarray, figures(answers))
    w = 1 / var
    # figure rows: which query, and whether it reads the counts or the sums of the cells
    rows: list[tuple[int, bool]] = []
    for i, a in enumerate(answers):
        if isinstance(a, NoisyMean):
            rows += [(i, True), (i, False)]
        else:
            rows.append((i, isinstance(a, NoisySum)))

    def fitted(z: np.ndarray) -> np.ndarray:
        n, s = z[:cells], z[cells:]
        return np.array([design[i] @ (s if is_sum else n) for i, is_sum in rows])

    def objective(z: np.ndarray) -> float:
        r = fitted(z) - y
        return float(np.sum(w * r * r))

    cons = [{"type": "ineq", "fun": lambda z: 9 * z[:cells] - z[cells:]}]
    z0 = np.concatenate([np.full(cells, 100.0), np.full(cells, 450.0)])
    bounds = [(0, None)] * (2 * cells)
    res = scipy.optimize.minimize(
        objective,
        z0,
        method="SLSQP",
        bounds=bounds,
        constraints=cons,
        options={"maxiter": 2000, "ftol": 1e-14},
    )
    return float(res.fun)


def test_the_projection_is_the_direct_optimum_and_one_table() -> None:
    qs, aggs = workload()
    plan = plan_answers(qs, 0.5, "pure")
    got = answer_workload(data(), qs, plan, aggregates=aggs, consistent=True, rng=np.random.default_rng(3))
    fit = got.consistent
    assert fit is not None
    answers = list(got.answers)
    cons_sum = fit.values[5:10]
    cons_cnt = fit.values[:5]
    # one table: totals equal the sum of their disjoint parts, sums within count x [0, 9]
    assert cons_cnt[0] == pytest.approx(sum(cons_cnt[1:]), rel=1e-9, abs=1e-6)
    assert cons_sum[0] == pytest.approx(sum(cons_sum[1:]), rel=1e-9, abs=1e-6)
    for c, s_ in zip(cons_cnt[1:], cons_sum[1:], strict=True):
        assert -1e-6 <= s_ <= 9 * c + 1e-6
    assert 0 <= fit.values[10] <= 9
    # the objective the projection reached (the figures read off its table, a mean's halves included)
    # equals the direct problem's optimum, within SLSQP's accuracy
    ours = _objective_of(fit, answers)
    direct = direct_projection(answers)
    assert ours <= direct * (1 + 1e-6) + 1e-9
    assert ours >= direct * (1 - 1e-3) - 1e-6


def _objective_of(fit: object, answers: list[object]) -> float:
    """Weighted squared distance between the released figures and the projected table's figures."""
    qs, _ = workload()
    design = workload_design(qs).matrix.astype(float)
    cells = design.shape[1]
    x = np.asarray(fit.cells).reshape(cells, -1)  # type: ignore[attr-defined]
    corners = np.array([0.0, 9.0])  # the generators per cell: (1, 0) and (1, 9)
    n = x.sum(axis=1)
    s = x @ corners
    y, var = map(np.asarray, figures(answers))
    out = []
    for i, a in enumerate(answers):
        if isinstance(a, NoisyMean):
            out += [design[i] @ s, design[i] @ n]
        elif isinstance(a, NoisySum):
            out.append(design[i] @ s)
        else:
            out.append(design[i] @ n)
    r = np.asarray(out) - y
    return float(np.sum(r * r / var))


def test_weighted_error_never_increases() -> None:
    qs, aggs = workload()
    plan = plan_answers(qs, 0.3, "pure")
    df = data(1)
    z = np.asarray(truth(df))
    for seed in range(20):
        got = answer_workload(df, qs, plan, aggregates=aggs, consistent=True, rng=np.random.default_rng(seed))
        assert got.consistent is not None
        raw, var = map(np.asarray, figures(list(got.answers)))
        design = workload_design(qs).matrix.astype(float)
        cells = design.shape[1]
        x = np.asarray(got.consistent.cells).reshape(cells, -1)
        n, s = x.sum(axis=1), x @ np.array([0.0, 9.0])
        fitted = []
        for i, a in enumerate(got.answers):
            if isinstance(a, NoisyMean):
                fitted += [design[i] @ s, design[i] @ n]
            else:
                fitted.append(design[i] @ (s if isinstance(a, NoisySum) else n))
        before = float(np.sum((raw - z) ** 2 / var))
        after = float(np.sum((np.asarray(fitted) - z) ** 2 / var))
        assert after <= before * (1 + 1e-9) + 1e-9


def test_too_many_distinct_sums_are_refused_by_name() -> None:
    qs = [PredicateQuery.from_coverages(SCHEMA, {}, id=f"q{i}") for i in range(5)]
    aggs = [Aggregate("sum", Clipping("h", 0, 5 + i)) for i in range(5)]
    plan = plan_answers(qs, 1.0, "pure")
    with pytest.raises(ConsistencyError, match="at most 4"):
        answer_workload(data(), qs, plan, aggregates=aggs, consistent=True, rng=np.random.default_rng(0))
    design = workload_design(qs)
    with pytest.raises(ConsistencyError, match="answers"):
        project_aggregates(design, [])


def test_answer_command_prints_consistent_sums(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    SCHEMA.save(tmp_path / "s.json")
    lines = [
        {"id": "n", "where": "TRUE"},
        {"id": "s", "where": "TRUE", "aggregate": "sum", "of": "h", "bounds": [0, 9]},
        {"id": "s0", "where": "a = 0", "aggregate": "sum", "of": "h", "bounds": [0, 9]},
        {"id": "m", "where": "a <= 1", "aggregate": "mean", "of": "h", "bounds": [0, 9]},
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    data().to_csv(tmp_path / "d.csv", index=False)
    args = ["answer", "--schema", str(tmp_path / "s.json"), "--queries", str(tmp_path / "q.jsonl")]
    args += ["--data", str(tmp_path / "d.csv"), "--definition", "pure", "--budget", "1", "--consistent"]
    code, out, err = run([*args, "--json"], capsys)
    assert code == 0, err
    cons = {a["id"]: a["answer"] for a in json.loads(out)["consistent"]["answers"]}
    assert 0 <= cons["s0"] <= cons["s"] <= 9 * cons["n"] + 1e-6
    assert 0 <= cons["m"] <= 9
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert "consistent" in out
