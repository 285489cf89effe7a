"""``overlapdp answer`` and :mod:`overlapdp.mechanisms.answering`: budgets shared by maximum overlap, noise that
matches its declared scale around independent exact counts, and bad input that releases nothing."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run
from overlapdp.engine import PandasEngine
from overlapdp.mechanisms import noise_for
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.overlap import brute_force_overlap
from overlapdp.privacy import BudgetError
from overlapdp.privacy.mechanisms import Gaussian, OpaqueApproxDP
from overlapdp.privacy.odometer import Odometer
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.samples import adult_schema
from overlapdp.schema import Schema
from strategies import schemas, where_clauses


def _workload(schema: Schema, texts: list[str]) -> list[PredicateQuery]:
    return [parse_where(schema, w, id=f"q{i}") for i, w in enumerate(texts)]


@settings(max_examples=40)
@given(st.data(), st.sampled_from(["pure", "zcdp", "gdp"]), st.sampled_from([0.3, 1.0, 2.5]))
def test_overlap_share_is_budget_over_brute_force_gamma(
    data: st.DataObject, definition: str, b: float
) -> None:
    schema = data.draw(schemas())
    texts = data.draw(st.lists(where_clauses(schema), min_size=1, max_size=6))
    qs = _workload(schema, texts)
    gamma = int(brute_force_overlap(qs, comp="count").value)
    gamma = max(gamma, 1)  # a workload of contradictions still shares among >= 1 payer
    t = len(qs)
    ovl = plan_answers(qs, b, definition, "overlap")
    seq = plan_answers(qs, b, definition, "sequential")
    assert ovl.gamma == gamma and ovl.gamma_exact
    root = math.sqrt if definition == "gdp" else float
    assert ovl.per_query == pytest.approx(b / root(gamma), rel=1e-12)
    assert seq.per_query == pytest.approx(b / root(t), rel=1e-12)
    # Never over-spends, in exact arithmetic: gamma (resp. t) charges stay within the total.
    for plan, n in ((ovl, gamma), (seq, t)):
        charged = plan.per_query**2 / 2 if definition == "gdp" else plan.per_query
        total = b * b / 2 if definition == "gdp" else b
        assert n * Fraction(charged) <= Fraction(total) * (1 + Fraction(1, 10**12))
        g = plan.guarantees()["overlap"]
        if definition == "gdp":  # stated in mu (rounded up) and as the declared zCDP rho within the total
            assert g["declared_zcdp_rho"] <= total and g["mu"] <= b * (1 + 1e-15)
        else:
            assert next(iter(g.values())) <= total


def _small_frame(rows: int = 400, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    schema = adult_schema()
    cols = {}
    for a in schema:
        cols[a.name] = [a.value_at(int(v)) for v in rng.integers(0, a.size, rows)]
    return pd.DataFrame(cols)


@pytest.mark.parametrize("definition,budget", [("pure", 2.0), ("zcdp", 0.5), ("gdp", 1.0)])
def test_noise_matches_declared_scale_and_centres_on_exact_counts(definition: str, budget: float) -> None:
    schema = adult_schema()
    frame = _small_frame()
    texts = ["age < 40", "age >= 40 AND sex = 1", "race IN (1, 2)", "sex = 0", "hours-per-week > 30"]
    qs = _workload(schema, [t.replace("hours-per-week", '"hours-per-week"') for t in texts])
    # Independent truth: pandas boolean masks on the raw values.
    a = frame
    exact = np.array(
        [
            (a["age"] < 40).sum(),
            ((a["age"] >= 40) & (a["sex"] == 1)).sum(),
            a["race"].isin([1, 2]).sum(),
            (a["sex"] == 0).sum(),
            (a["hours-per-week"] > 30).sum(),
        ]
    )
    plan = plan_answers(qs, budget, definition, "overlap")
    noise = noise_for(plan.per_query_budget)
    draws = []
    with PandasEngine.from_frame(schema, frame) as eng:
        for seed in range(300):
            res = answer_workload(eng, qs, plan, rng=seed)
            got = np.array([x.value for x in res.answers])
            draws.append(got - exact)
            w = res.answers[0].high - res.answers[0].value
            assert all(x.high - x.value == w == x.value - x.low for x in res.answers)
    d = np.concatenate(draws).astype(float)  # 1500 draws
    var = noise.variance
    assert abs(d.mean()) < 5 * math.sqrt(var / d.size)
    assert 0.8 * var < d.var() < 1.2 * var
    # Error bars cover at the declared level (loosely).
    cover = float(np.mean(np.abs(d) <= noise.half_width(0.95)))
    assert cover > 0.92


def test_guarantee_matches_odometer_and_stays_within_budget() -> None:
    schema = adult_schema()
    qs = _workload(
        schema, ["age < 30", "age < 50 AND sex = 1", "age >= 40", "race = 2", "sex = 0 AND age < 25"]
    )
    for definition, b in (("pure", 1.0), ("zcdp", 0.7)):
        for accounting in ("overlap", "sequential"):
            plan = plan_answers(qs, b, definition, accounting)
            odo = Odometer(schema)
            for q in qs:
                if definition == "pure":
                    odo.charge(OpaqueApproxDP(plan.per_query), q)
                else:  # a Gaussian with rho = mu^2/2 equal to the per-query rho (zCDP only is read)
                    odo.charge(Gaussian(1 / math.sqrt(2 * plan.per_query)), q)
            rep = odo.report(1e-6).definitions[definition]
            ours = plan.guarantees()
            key = "epsilon" if definition == "pure" else "rho"
            assert ours["overlap"][key] == pytest.approx(float(rep.overlap), rel=1e-9)
            assert ours["sequential"][key] == pytest.approx(float(rep.sequential), rel=1e-9)
            assert ours["overlap"][key] <= b
    # The overlap-aware share really is larger when queries do not all overlap.
    plan = plan_answers(qs, 1.0, "pure", "overlap")
    assert plan.gamma < len(qs) and plan.noise_reduction > 0


def test_bad_budget_is_rejected() -> None:
    qs = _workload(adult_schema(), ["age < 30"])
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(BudgetError):
            plan_answers(qs, bad, "pure")


# -- the CLI ----------------------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    schema = tmp_path / "schema.json"
    adult_schema().save(schema)
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "a", "where": "age < 30"}\n{"id": "b", "where": "age >= 30"}\n{"id": "c", "where": "sex = 1"}\n'
    )
    data = tmp_path / "adult.csv"
    _small_frame().to_csv(data, index=False)
    return {"schema": schema, "queries": queries, "data": data, "dir": tmp_path}


def _args(files: dict[str, Path], *extra: str, data: Path | None = None) -> list[str]:
    return [
        "answer",
        "--schema",
        str(files["schema"]),
        "--data",
        str(data or files["data"]),
        "--queries",
        str(files["queries"]),
        *extra,
    ]


def test_cli_json_shares_by_overlap_and_sequentially(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(_args(files, "--budget", "1", "--definition", "pure", "--json"), capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [a["id"] for a in doc["answers"]] == ["a", "b", "c"]
    for a in doc["answers"]:
        assert a["error_bar"]["low"] <= a["answer"] <= a["error_bar"]["high"]
        assert a["error_bar"]["level"] == 0.95
    p = doc["privacy"]
    # a and b are disjoint, c overlaps each: gamma = 2 of t = 3.
    assert p["gamma"] == 2 and p["gamma_exact"] and p["queries"] == 3
    assert p["per_query"]["epsilon"] == pytest.approx(0.5)
    assert p["guarantee"]["overlap"]["epsilon"] <= 1.0
    assert p["witness"] is not None and p["noise_reduction"] > 0
    code, out, err = run(
        _args(files, "--budget", "1", "--definition", "pure", "--accounting", "sequential", "--json"), capsys
    )
    assert code == 0, err
    assert json.loads(out)["privacy"]["per_query"]["epsilon"] == pytest.approx(1 / 3)
    code, out, err = run(_args(files, "--budget", "1", "--definition", "zcdp", "--engine", "pandas"), capsys)
    assert code == 0, err
    assert "privacy report" in out and "ρ = 1" in out


def _bad_inputs(files: dict[str, Path]) -> list[tuple[list[str], str]]:
    d = files["dir"]
    frame = _small_frame()
    frame.drop(columns=["sex"]).to_csv(d / "nosex.csv", index=False)
    strings = frame.astype({"age": object})
    strings.loc[5, "age"] = "old"
    strings.to_csv(d / "strings.csv", index=False)
    (d / "empty.csv").write_text("")
    (d / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    good = ["--definition", "pure"]
    return [
        (_args(files, "--budget", "1", *good, data=d / "nosex.csv"), "sex"),
        (_args(files, "--budget", "1", *good, data=d / "strings.csv"), "age"),
        (_args(files, "--budget", "1", *good, data=d / "empty.csv"), "empty.csv"),
        (_args(files, "--budget", "1", *good, data=d / "broken.parquet"), "broken.parquet"),
        (_args(files, "--budget", "1", *good, data=d / "absent.csv"), "absent.csv"),
        (_args(files, "--budget", "0", *good), "budget"),
        (_args(files, "--budget", "-2", *good), "budget"),
        (_args(files, "--budget", "nan", *good), "budget"),
        (_args(files, "--budget", "inf", *good), "budget"),
        (_args(files, "--budget", "1", "--definition", "approx"), "definition"),
        (_args(files, "--budget", "1", *good, "--level", "1.5"), "level"),
    ]


@pytest.mark.parametrize("engine", ["duckdb", "pandas", "polars"])
def test_cli_bad_input_exits_2_and_releases_nothing(
    files: dict[str, Path], engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for args, named in _bad_inputs(files):
        code, out, err = run([*args, "--engine", engine, "--json"], capsys)
        assert code == 2, (args, err)
        assert out == "", (args, out)
        assert named in err, (named, err)


def test_count_exact_still_works(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        [
            "count",
            "--schema",
            str(files["schema"]),
            "--data",
            str(files["data"]),
            "--queries",
            str(files["queries"]),
            "--exact",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    f = _small_frame()
    assert [r["count"] for r in json.loads(out)] == [
        int((f["age"] < 30).sum()),
        int((f["age"] >= 30).sum()),
        int((f["sex"] == 1).sum()),
    ]


def test_a_plans_repr_rounds_its_privacy_figures_to_the_safe_side() -> None:
    """The dataclass repr printed ``budget=0.30000000000000004`` and ``overlap_share=0.23333333333333334``:
    now the CLI's figures (budget and shares down, delta up), each on a known side of the exact value."""
    schema = adult_schema()
    queries = _workload(schema, ["age < 30", "age >= 25", "sex = 1"])  # gamma 3 (a man aged 25-29)
    plan = plan_answers(queries, 0.1 + 0.2, "zcdp", delta=1e-6 + 1e-7 / 3)
    text = repr(plan)
    assert "0.30000000000000004" not in text and "budget=0.3," in text
    assert "overlap_share=0.1," in text and "delta=1.03334e-06" in text
    seq = plan_answers(queries, 0.7, "pure", accounting="sequential")
    shown = repr(seq).split("sequential_share=")[1].split(",")[0]
    assert shown == "0.233333" and Fraction(shown) <= Fraction(seq.sequential_share)
    assert "AnswerPlan(definition='pure'" in repr(seq) and "0.23333333333333334" not in repr(seq)
