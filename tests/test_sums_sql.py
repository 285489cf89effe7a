"""SUM and AVG in SQL (MATH.md 2.8, 6.4): ``SELECT SUM(x) FROM t WHERE ...``, ``SELECT AVG(x) ...`` and
``SELECT g, AVG(x) FROM t GROUP BY g`` read as the same queries and aggregates as the JSON-line form,
bounds from the line or the schema (never the data), per-cell means against pandas, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import run
from overlapdp.errors import QueryError, WorkloadError
from overlapdp.mechanisms import SeededRandomSource
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.mechanisms.sums import NoisyMean, NoisySum
from overlapdp.query import Workload, parse_line, parse_select_aggregate
from overlapdp.query.aggregate import Aggregate, Clipping
from overlapdp.schema import CategoricalAttribute, IntAttribute, Schema

SEXES = ("F", "M", "X")  # "X" is in the domain but never in the data: its cells are empty
SCHEMA = Schema(
    (
        IntAttribute("age", 17, 90),
        IntAttribute("hours_per_week", 1, 99),
        CategoricalAttribute("sex", SEXES),
        CategoricalAttribute("edu", ("hs", "ba", "phd")),
    )
)


def frame(rows: int = 4000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.integers(17, 91, rows),
            "hours_per_week": rng.integers(1, 100, rows),
            "sex": rng.choice(np.array(["F", "M"], dtype=object), rows, p=[0.4, 0.6]),
            "edu": rng.choice(np.array(["hs", "ba", "phd"], dtype=object), rows, p=[0.5, 0.4, 0.1]),
        }
    )


# Pairs of equivalent lines: the SQL form and the JSON-line form.
PAIRS = [
    (
        {"id": "h", "sql": "SELECT SUM(hours_per_week) FROM t WHERE age >= 30", "bounds": [0, 99]},
        {"id": "h", "where": "age >= 30", "aggregate": "sum", "of": "hours_per_week", "bounds": [0, 99]},
    ),
    (
        {"id": "m", "sql": "SELECT AVG(age) FROM adult WHERE sex = 'F'", "bounds": [20, 70], "step": 2},
        {"id": "m", "where": "sex = 'F'", "aggregate": "mean", "of": "age", "bounds": [20, 70], "step": 2},
    ),
    (
        {"id": "a", "sql": "SELECT MEAN(age) FROM t", "bounds": [0, 90]},
        {"id": "a", "conditions": {}, "aggregate": "mean", "of": "age", "bounds": [0, 90]},
    ),
    (
        {
            "id": "g",
            "sql": "SELECT sex, edu, AVG(hours_per_week) FROM t WHERE age < 40 GROUP BY sex, edu",
            "bounds": [0, 60],
        },
        {
            "id": "g",
            "group_by": ["sex", "edu"],
            "where": "age < 40",
            "aggregate": "mean",
            "of": "hours_per_week",
            "bounds": [0, 60],
        },
    ),
    (
        {
            "id": "s",
            "sql": "SELECT edu, SUM(hours_per_week) AS total FROM t GROUP BY edu",
            "bounds": [-10, 99],
        },
        {"id": "s", "group_by": ["edu"], "aggregate": "sum", "of": "hours_per_week", "bounds": [-10, 99]},
    ),
    (
        {"id": "c", "sql": "SELECT COUNT(*) FROM t WHERE edu = 'phd'"},
        {"id": "c", "where": "edu = 'phd'"},
    ),
]


def signature(w: Workload) -> list[tuple[object, ...]]:
    """What a workload asks: ids, coverages, weights and aggregates (not the condition's text)."""
    return [(q.id, q.constraints, q.weight, w.aggregate(i)) for i, q in enumerate(w)]


@pytest.mark.parametrize(("sql", "plain"), PAIRS, ids=[p[0]["id"] for p in PAIRS])
def test_sql_and_json_lines_give_identical_queries_and_aggregates(
    sql: dict[str, object], plain: dict[str, object]
) -> None:
    a = Workload.from_lines(SCHEMA, [json.dumps(sql)])
    b = Workload.from_lines(SCHEMA, [json.dumps(plain)])
    assert signature(a) == signature(b)
    assert [f.by for f in a.families] == [f.by for f in b.families]
    assert [f.aggregate for f in a.families] == [f.aggregate for f in b.families]
    # Workload.of takes the same objects
    assert signature(Workload.of(SCHEMA, [sql])) == signature(b)


def test_the_clipping_is_the_declared_one() -> None:
    w = Workload.from_lines(SCHEMA, [json.dumps(PAIRS[1][0])])
    assert w.aggregate(0) == Aggregate("mean", Clipping("age", 20, 70, 2))
    assert len(w) == 1 and not w.families  # a SELECT without GROUP BY is one query, not a family
    fam = Workload.from_lines(SCHEMA, [json.dumps(PAIRS[3][0])])
    assert len(fam) == 9 and len(fam.families) == 1 and fam.families[0].aggregate == "mean"
    assert {fam.aggregate(i) for i in range(9)} == {Aggregate("mean", Clipping("hours_per_week", 0, 60))}


def test_select_strings_take_declared_bounds_and_the_lines_bounds_win() -> None:
    text = "SELECT SUM(hours_per_week) FROM t WHERE age >= 30"
    with pytest.raises(QueryError, match="'bounds' missing"):
        Workload.of(SCHEMA, [text])
    w = Workload.of(SCHEMA, [text], declared={"hours_per_week": [0, 80]})
    assert w.aggregate(0) == Aggregate("sum", Clipping("hours_per_week", 0, 80))
    assert w.ids == ["q1"]
    own = Workload.of(SCHEMA, [{"sql": text, "bounds": [0, 99]}], declared={"hours_per_week": [0, 80]})
    assert own.aggregate(0).clipping == Clipping("hours_per_week", 0, 99)
    line = json.dumps({"sql": "SELECT sex, AVG(age) FROM t GROUP BY sex"})
    declared = Workload.from_lines(SCHEMA, [line], declared={"age": [0, 90, 10]})
    assert declared.aggregate(0) == Aggregate("mean", Clipping("age", 0, 90, 10))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"sql": "SELECT SUM(age), AVG(age) FROM t", "bounds": [0, 9]}, "exactly one aggregate"),
        ({"sql": "SELECT COUNT(*), SUM(age) FROM t", "bounds": [0, 9]}, "exactly one aggregate"),
        ({"sql": "SELECT sex, SUM(age), COUNT(*) FROM t GROUP BY sex"}, "exactly one aggregate"),
        ({"sql": "SELECT SUM(hours_per_week) FROM t WHERE age >= 30"}, "'bounds' missing"),
        ({"sql": "SELECT sex, AVG(age) FROM t GROUP BY sex"}, "'bounds' missing"),
        ({"sql": "SELECT SUM(sex) FROM t", "bounds": [0, 1]}, "only numbers can be summed"),
        ({"sql": "SELECT edu, AVG(sex) FROM t GROUP BY edu", "bounds": [0, 1]}, "only numbers"),
        ({"sql": "SELECT SUM(nope) FROM t", "bounds": [0, 1]}, "not an attribute"),
        ({"sql": "SELECT SUM(DISTINCT age) FROM t", "bounds": [0, 9]}, "DISTINCT"),
        ({"sql": "SELECT SUM(age + 1) FROM t", "bounds": [0, 9]}, "one column name"),
        ({"sql": "SELECT MAX(age) FROM t"}, "unsupported aggregate"),
        ({"sql": "SELECT SUM(age) FROM t", "aggregate": "sum", "bounds": [0, 9]}, "'aggregate' is named by"),
        ({"sql": "SELECT SUM(age) FROM t", "of": "age", "bounds": [0, 9]}, "'of' is named by"),
        ({"sql": "SELECT COUNT(*) FROM t", "aggregate": "sum", "of": "age"}, "'aggregate' is named by"),
        ({"sql": "SELECT COUNT(*) FROM t", "bounds": [0, 9]}, "'bounds' is only meaningful"),
        ({"sql": "SELECT SUM(age) FROM t", "bounds": [9, 0]}, "lo < hi"),
    ],
)
def test_bad_sql_aggregates_are_errors_naming_the_problem(line: dict[str, object], message: str) -> None:
    with pytest.raises(QueryError, match=message) as info:
        Workload.from_lines(SCHEMA, [json.dumps(line)])
    assert "line 1" in str(info.value)


def test_a_sum_family_given_as_an_object_is_not_answered_as_a_count() -> None:
    fam, kind, column = parse_select_aggregate(SCHEMA, "SELECT sex, SUM(age) FROM t GROUP BY sex", id="f")
    assert (kind, column) == ("sum", "age")
    with pytest.raises(WorkloadError, match="aggregates 'sum'"):
        Workload.of(SCHEMA, [fam])  # type: ignore[list-item]
    item, agg = parse_line(SCHEMA, "SELECT sex, SUM(age) FROM t GROUP BY sex", declared={"age": [0, 90]})
    assert agg == Aggregate("sum", Clipping("age", 0, 90))
    assert len(Workload.from_items(SCHEMA, [item.with_id("f")], [agg])) == 3


def test_grouped_means_contain_pandas_clipped_means_in_every_cell() -> None:
    d = frame()
    lo, hi = 10, 60
    line = {
        "id": "g",
        "sql": "SELECT sex, edu, AVG(hours_per_week) FROM t WHERE age >= 30 GROUP BY sex, edu",
        "bounds": [lo, hi],
    }
    w = Workload.from_lines(SCHEMA, [json.dumps(line)])
    plan = plan_answers(list(w), 200.0, "pure", level=0.99)
    res = answer_workload(d, w, plan, rng=SeededRandomSource(11))
    cells = [a for a in res.to_json()["answers"] if a.get("family") == "g"]
    # Every cell of the DOMAIN, in order, the empty sex = 'X' cells included.
    assert [c["group"] for c in cells] == [{"sex": s, "edu": e} for s in SEXES for e in ("hs", "ba", "phd")]
    sel = d[d["age"] >= 30]
    truth = sel.assign(h=sel["hours_per_week"].clip(lo, hi)).groupby(["sex", "edu"])["h"].mean()
    checked = 0
    for a, c in zip(res.answers, cells, strict=True):
        assert isinstance(a, NoisyMean) and c["aggregate"] == "mean" and set(c["parts"]) >= {"sum", "count"}
        key = (c["group"]["sex"], c["group"]["edu"])
        if key in truth.index:
            assert a.low <= truth[key] <= a.high, (key, truth[key], a)
            assert a.high - a.low < 5  # a large budget: the bars are narrow, so the check has teeth
            checked += 1
        else:  # no rows: the answer still lies within the declared bounds
            assert lo <= a.low <= a.high <= hi
    assert checked == 6


def test_a_sql_sum_answer_contains_the_pandas_clipped_sum() -> None:
    d = frame(seed=5)
    w = Workload.of(
        SCHEMA, ["SELECT SUM(hours_per_week) FROM t WHERE age >= 30"], declared={"hours_per_week": [0, 40]}
    )
    res = answer_workload(d, w, plan_answers(list(w), 50.0, "zcdp"), rng=SeededRandomSource(2))
    (a,) = res.answers
    truth = float(d.loc[d["age"] >= 30, "hours_per_week"].clip(0, 40).sum())
    assert isinstance(a, NoisySum) and a.low <= truth <= a.high
    out = res.to_json()["answers"][0]
    assert out["aggregate"] == "sum" and out["id"] == "q1"


def test_cli_answer_json_reads_sql_means_with_the_schemas_declared_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = SCHEMA.to_json()
    for attr in schema["attributes"]:
        if attr["name"] == "age":
            attr["bounds"] = [20, 80]
    (tmp_path / "s.json").write_text(json.dumps(schema))
    frame(rows=300).to_csv(tmp_path / "d.csv", index=False)
    lines = [
        {"id": "m", "sql": "SELECT AVG(age) FROM t WHERE sex = 'M'"},
        {"id": "h", "sql": "SELECT sex, SUM(hours_per_week) FROM t GROUP BY sex", "bounds": [0, 99]},
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    common = ["answer", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    code, out, err = run(
        [*common, "--definition", "pure", "--budget", "1", "--queries", str(tmp_path / "q.jsonl"), "--json"],
        capsys,
    )
    assert code == 0, err
    answers = json.loads(out)["answers"]
    assert (
        answers[0]["aggregate"] == "mean"
        and answers[0]["bounds"] == [20, 80]
        and "count" in answers[0]["parts"]
    )
    assert [a["aggregate"] for a in answers[1:]] == ["sum"] * 3 and answers[1]["group"] == {"sex": "F"}


def test_select_strings_without_ids_keep_their_aggregate_and_round_trip(tmp_path: Path) -> None:
    w = Workload.of(
        SCHEMA,
        ["SELECT sex, AVG(age) FROM t WHERE edu = 'phd' GROUP BY sex", "SELECT SUM(age) FROM t"],
        declared={"age": [0, 90]},
    )
    assert w.ids[:3] == ["q1[sex=F]", "q1[sex=M]", "q1[sex=X]"] and w.ids[3] == "q2"
    assert w.families[0].aggregate == "mean"
    assert [w.aggregate(i).kind for i in range(4)] == ["mean"] * 3 + ["sum"]
    p = tmp_path / "w.jsonl"
    w.write_jsonl(p)  # written in the JSON-line form, read back without the declared bounds
    again = Workload.read_jsonl(SCHEMA, p)
    assert signature(again) == signature(w)
