"""GROUP BY (MATH.md 2.5): one predicate query per cell of the grouped attributes' DOMAIN.

Truth comes from elsewhere: per-cell counts from pandas' own ``groupby`` reindexed over the domain
(so empty cells are 0), bins from ``pd.cut``, overlaps from enumerating every row of a small domain.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run
from overlapdp import QueryFamily, Schema, Workload, group_by, parse_item, parse_query, parse_select
from overlapdp.engine import exact_counts, open_engine
from overlapdp.errors import QueryError, QueryTooComplexError
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.overlap import max_overlap
from overlapdp.privacy import Laplace
from overlapdp.privacy.odometer import Odometer
from overlapdp.query.limits import MAX_GROUP_CELLS

SEXES = ["Female", "Male"]
RACES = ["White", "Black", "Asian", "Other"]
EDGES = [0, 1000, 5000, 20000, 100000]


def _schema() -> Schema:
    return Schema.from_json(
        {
            "attributes": [
                {"name": "age", "type": "int", "min": 17, "max": 90},
                {"name": "sex", "type": "categorical", "values": SEXES},
                {"name": "race", "type": "categorical", "values": RACES},
                {"name": "children", "type": "int", "min": 0, "max": 4},
                {"name": "income", "type": "binned", "edges": EDGES},
            ]
        }
    )


def _data(n: int = 3000, seed: int = 7) -> pd.DataFrame:
    """Rows where some cells are empty on purpose: no 'Other' women, nobody with 3 children, no
    income in [20000, 100000)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "age": rng.integers(17, 91, n),
            "sex": rng.choice(SEXES, n),
            "race": rng.choice(RACES, n, p=[0.6, 0.2, 0.1, 0.1]),
            "children": rng.choice([0, 1, 2, 4], n),
            "income": rng.uniform(0, 20000, n),
        }
    )
    drop = (frame["sex"] == "Female") & (frame["race"] == "Other")
    return frame[~drop].reset_index(drop=True)


def _pandas_cells(frame: pd.DataFrame, by: list[str], domains: dict[str, list[Any]]) -> dict[tuple, int]:
    """Per-cell counts from pandas, every cell of the domain present (empty ones 0)."""
    counts = frame.groupby(by, observed=False).size()
    index = pd.MultiIndex.from_tuples(list(itertools.product(*(domains[b] for b in by))), names=by)
    full = counts.reindex(index, fill_value=0)
    return {k if isinstance(k, tuple) else (k,): int(v) for k, v in full.items()}


def _bin_labels() -> list[str]:
    return [f"[{lo}, {hi})" for lo, hi in itertools.pairwise(EDGES)]


def test_cells_are_the_domain_and_counts_match_pandas_per_cell() -> None:
    schema, data = _schema(), _data()
    older = data[data["age"] >= 30].copy()
    older["income_bin"] = pd.cut(older["income"], EDGES, right=False).map(
        lambda iv: f"[{int(iv.left)}, {int(iv.right)})"
    )
    domains = {"sex": SEXES, "race": RACES, "children": [0, 1, 2, 3, 4], "income_bin": _bin_labels()}
    cases = [
        (["sex", "race"], ["sex", "race"]),
        (["children"], ["children"]),
        (["income", "sex"], ["income_bin", "sex"]),
    ]
    for by, pandas_by in cases:
        family = group_by(schema, by, "age >= 30", id="f")
        truth = _pandas_cells(older, pandas_by, domains)
        assert len(family) == len(truth)  # every cell of the domain, empty ones included
        assert 0 in truth.values()  # the data really has empty cells here
        got = dict(zip(family.groups, exact_counts(list(family.cells), data), strict=True))
        for engine in ("duckdb", "polars"):
            with open_engine(engine, schema, data) as eng:
                assert eng.counts(list(family.cells)) == list(got.values()), engine
        assert {tuple(v for _, v in g): c for g, c in got.items()} == truth, by
        assert all(tuple(a for a, _ in g) == tuple(by) for g in family.groups)


def test_answer_returns_one_row_per_cell_with_labels_and_error_bars() -> None:
    schema, data = _schema(), _data()
    work = Workload.of(
        schema, [{"id": "by_sex_race", "group_by": ["sex", "race"], "where": "age >= 30"}, "age < 30"]
    )
    # A budget so large that the discrete Laplace noise is 0 except with probability about e^-1e9.
    plan = plan_answers(work, 1e9, "pure")
    result = answer_workload(data, work, plan)
    frame = result.frame("by_sex_race")
    truth = _pandas_cells(data[data["age"] >= 30], ["sex", "race"], {"sex": SEXES, "race": RACES})
    assert list(frame.columns) == ["sex", "race", "answer", "low", "high", "level"]
    assert len(frame) == len(SEXES) * len(RACES)
    assert {(r.sex, r.race): r.answer for r in frame.itertuples()} == truth
    assert frame.loc[(frame.sex == "Female") & (frame.race == "Other"), "answer"].item() == 0
    assert (frame["low"] <= frame["answer"]).all() and (frame["answer"] <= frame["high"]).all()
    cells = [a for a in result.to_json()["answers"] if a.get("family") == "by_sex_race"]
    assert len(cells) == 8
    first = cells[0]
    assert first["id"] == "by_sex_race[sex=Female,race=White]"
    assert first["group"] == {"sex": "Female", "race": "White"}
    assert set(first["error_bar"]) == {"level", "low", "high"}
    plain = [a for a in result.to_json()["answers"] if "group" not in a]
    assert [a["id"] for a in plain] == ["q2"]


def test_sql_and_workload_line_are_the_same_family() -> None:
    schema = _schema()
    sql = parse_select(schema, "SELECT sex, race, COUNT(*) FROM whatever WHERE age >= 30 GROUP BY sex, race")
    line = parse_item(schema, {"group_by": ["sex", "race"], "where": "age >= 30"})
    assert isinstance(sql, QueryFamily) and isinstance(line, QueryFamily)
    assert [c.coverages() for c in sql.cells] == [c.coverages() for c in line.cells]
    assert sql.groups == line.groups
    # SELECT order may differ from GROUP BY order; an alias on COUNT(*) is fine; keywords in any case.
    other = parse_select(schema, "select race, sex, count(*) as n from t where age >= 30 group by sex, race")
    assert isinstance(other, QueryFamily) and other.groups == line.groups
    # Without GROUP BY it is one count.
    one = parse_select(schema, "SELECT COUNT(*) FROM t WHERE sex = 'Male'")
    assert one == parse_query(schema, "sex = 'Male'")
    # A workload line {"sql": ...} and a SELECT string in Workload.of are read the same way.
    work = Workload.of(schema, [{"id": "s", "sql": "SELECT sex, COUNT(*) FROM t GROUP BY sex"}])
    assert work.ids == ["s[sex=Female]", "s[sex=Male]"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("SELECT sex, COUNT(*) FROM a JOIN b ON a.x = b.x GROUP BY sex", "JOIN"),
        ("SELECT sex, COUNT(*) FROM a, b GROUP BY sex", "JOIN"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex HAVING COUNT(*) > 5", "HAVING"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex ORDER BY sex", "ORDER BY"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex LIMIT 3", "LIMIT"),
        ("SELECT DISTINCT sex, COUNT(*) FROM t GROUP BY sex", "DISTINCT"),
        # parse_select alone has no clipping bounds: a sum or mean is read with a workload line's bounds
        ("SELECT sex, SUM(age) FROM t GROUP BY sex", "'bounds'"),
        ("SELECT sex, AVG(age) FROM t GROUP BY sex", "'bounds'"),
        ("SELECT sex, COUNT(age) FROM t GROUP BY sex", "only COUNT(*)"),
        ("SELECT sex, COUNT(DISTINCT age) FROM t GROUP BY sex", "DISTINCT"),
        ("SELECT sex, MAX(age) FROM t GROUP BY sex", "unsupported aggregate"),
        ("SELECT sex, COUNT(*), COUNT(*) FROM t GROUP BY sex", "exactly one aggregate"),
        ("SELECT race, COUNT(*) FROM t GROUP BY sex", "GROUP BY names (sex)"),
        ("SELECT sex, race, COUNT(*) FROM t GROUP BY sex", "GROUP BY names (sex)"),
        ("SELECT sex, COUNT(*) FROM (SELECT * FROM t) GROUP BY sex", "one table"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY 1", "bare attribute names"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex, sex", "twice"),
        ("SELECT sex, COUNT(*) FROM t WHERE sex = 'female' GROUP BY sex", "did you mean 'Female'"),
        ("SELECT color, COUNT(*) FROM t GROUP BY color", "color"),
        ("SELECT sex COUNT(*) FROM t GROUP BY sex", ""),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex; SELECT 1", "one SELECT"),
        ("WITH x AS (SELECT 1) SELECT sex, COUNT(*) FROM x GROUP BY sex", "WITH"),
        ("SELECT sex, COUNT(*) FROM t TABLESAMPLE (10 PERCENT) GROUP BY sex", "TABLESAMPLE"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex UNION SELECT sex, COUNT(*) FROM u GROUP BY sex", "UNION"),
        ("SELECT sex, COUNT(*) OVER () FROM t GROUP BY sex", "COUNT(*) OVER ()"),
        ("SELECT sex, COUNT(*) FROM t GROUP BY sex WITH ROLLUP", "ROLLUP"),
    ],
)
def test_select_outside_the_supported_form_is_a_clear_error(text: str, words: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_select(_schema(), text)
    assert words in str(info.value)


def test_bad_group_by_lines_are_errors_naming_the_problem() -> None:
    schema = _schema()
    for spec, words in [
        ({"group_by": "sex"}, "non-empty list"),
        ({"group_by": []}, "non-empty list"),
        ({"group_by": ["sex", "sex"]}, "twice"),
        ({"group_by": ["colour"]}, "colour"),
        ({"group_by": [1]}, "strings"),
        ({"group_by": ["sex"], "wieght": 2}, "unknown key 'wieght'"),
        ({"group_by": ["sex"], "where": "age > 3", "conditions": {}}, "at most one"),
        ({"sql": "SELECT sex, COUNT(*) FROM t GROUP BY sex", "group_by": ["sex"]}, "drop 'group_by'"),
        ({"sql": "age > 3"}, "SELECT statement"),
    ]:
        with pytest.raises(QueryError) as info:
            parse_item(schema, spec)
        assert words in str(info.value), spec
    # parse_query returns ONE query: a family is refused with a pointer, not as an "unknown key".
    with pytest.raises(QueryError, match="read by parse_item"):
        parse_query(schema, {"group_by": ["sex"]})
    with pytest.raises(QueryError, match="read by parse_item"):
        parse_query(schema, "SELECT sex, COUNT(*) FROM t GROUP BY sex")


def test_a_family_over_the_cell_limit_is_refused_before_it_is_expanded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 10 attributes of 100 values: 10^20 cells; expanding even a small part would take hours. Counted,
    # not timed: no cell part (a value's condition) is built before the refusal.
    from overlapdp.query import groupby as groupby_mod

    built = [0]
    real = groupby_mod._cell_condition

    def counted(*args: Any, **kwargs: Any) -> Any:
        built[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(groupby_mod, "_cell_condition", counted)
    huge = Schema.from_json({f"a{i}": 100 for i in range(10)})
    with pytest.raises(QueryTooComplexError) as info:
        group_by(huge, [f"a{i}" for i in range(10)], id="big")
    assert built[0] == 0
    group_by(Schema.from_json({"a0": 3}), ["a0"])  # (the count sees a family that is expanded)
    assert built[0] == 3
    assert info.value.limit == "cells" and info.value.maximum == MAX_GROUP_CELLS == 100_000
    assert "the limit is 100000 cells" in str(info.value) and "'big'" in str(info.value)
    with pytest.raises(QueryTooComplexError, match="100000 cells"):
        parse_select(huge, "SELECT a0, a1, a2, COUNT(*) FROM t GROUP BY a0, a1, a2")
    # Exactly at the limit is fine (100 x 100 x 10 = 100 000 cells would be; 100 x 100 is quick).
    assert len(group_by(huge, ["a0", "a1"])) == 10_000


def _brute_max_load(schema: Schema, queries: list[Any]) -> int:
    """The largest number of queries any domain point satisfies, by enumerating every point."""
    best = 0
    for row in itertools.product(*(range(s) for s in schema.sizes)):
        best = max(best, sum(q.covers(row) for q in queries))
    return best


def test_a_family_is_disjoint_gamma_one_and_two_families_give_two() -> None:
    schema = Schema.from_json(
        {
            "attributes": [
                {"name": "age", "type": "int", "min": 0, "max": 5},
                {"name": "sex", "type": "categorical", "values": SEXES},
                {"name": "race", "type": "categorical", "values": RACES},
            ]
        }
    )
    one = group_by(schema, ["sex", "race"], "age >= 2", id="a")
    same = group_by(schema, ["sex", "race"], "age <= 3", id="b")
    assert _brute_max_load(schema, list(one.cells)) == 1
    assert _brute_max_load(schema, [*one.cells, *same.cells]) == 2
    for queries, expected in ((list(one.cells), 1), ([*one.cells, *same.cells], 2)):
        for algorithm in ("auto", "grid", "branch", "milp"):
            res = max_overlap(queries, algorithm=algorithm)
            assert res.exact and res.value == expected, algorithm
    # The answering plan and the odometer see the same: one family costs one query's budget per row.
    work = Workload.from_items(schema, [one])
    assert plan_answers(work, 1.0, "pure").gamma == 1
    both = Workload.from_items(schema, [one, same])
    plan = plan_answers(both, 1.0, "pure")
    assert plan.gamma == 2 and plan.queries == 16
    odometer = Odometer(schema)
    for q in both:
        odometer.charge(Laplace(10.0), q, id=q.id)
    sequential, overlap = odometer.report(1e-6).pure_epsilon
    assert Fraction(overlap).limit_denominator(1000) == Fraction(2, 10)
    assert Fraction(sequential).limit_denominator(1000) == Fraction(16, 10)


def test_workload_files_round_trip_families(tmp_path: Path) -> None:
    schema = _schema()
    work = Workload.of(
        schema,
        [
            {"id": "g", "group_by": ["income"], "where": "sex = 'Male'"},
            {"id": "p", "where": "age < 40"},
            "SELECT children, COUNT(*) FROM t GROUP BY children",
        ],
    )
    path = tmp_path / "w.jsonl"
    work.write_jsonl(path)
    assert len(path.read_text().splitlines()) == 3  # one line per family, not per cell
    back = Workload.read_jsonl(schema, path)
    assert back.ids == work.ids
    assert [q.coverages() for q in back] == [q.coverages() for q in work]
    assert back.groups() == work.groups()
    assert back.groups()["g[income=[0, 1000)]"] == ("g", (("income", "[0, 1000)"),))


def test_cli_answer_json_gives_one_answer_per_cell_with_its_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, data = _schema(), _data(500)
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    data.to_csv(tmp_path / "d.csv", index=False)
    lines = [
        {"id": "by_sex_race", "group_by": ["sex", "race"], "where": "age >= 30"},
        {"id": "young", "where": "age < 30"},
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    common = ["answer", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    common += ["--definition", "pure", "--budget", "1"]
    code, out, err = run([*common, "--queries", str(tmp_path / "q.jsonl"), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    cells = [a for a in result["answers"] if a.get("family") == "by_sex_race"]
    assert [a["group"] for a in cells] == [{"sex": s, "race": r} for s in SEXES for r in RACES]
    assert result["privacy"]["gamma"] == 1 and result["privacy"]["queries"] == 9
    bad = _write(tmp_path / "bad.jsonl", {"sql": "SELECT sex, SUM(age) FROM t GROUP BY sex"})
    code, out, err = run([*common, "--queries", str(bad)], capsys)
    assert code == 2 and "'bounds' missing" in err


def _write(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj) + "\n")
    return path


# -- the service and the client -------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    from overlapdp.service import AdminKey, Limits, QueryService, create_app, open_ledger
    from support.service import ADMIN_TOKEN

    schema, data = _schema(), _data(800)
    data.to_csv(tmp_path / "d.csv", index=False)
    service = QueryService(open_ledger(tmp_path / "l.sqlite"), limits=Limits(max_batch=20))
    service.register_dataset("t", str(tmp_path / "d.csv"), schema.to_json(), "pandas", "pure", 10.0)
    token = service.create_analyst("ann", {"t": 5.0}).token
    client = TestClient(create_app(service, AdminKey(ADMIN_TOKEN)))
    client.headers["Authorization"] = f"Bearer {token}"
    yield {"client": client, "service": service, "data": data, "schema": schema}
    service.store.close()


def test_service_answers_one_cell_per_group_charged_as_a_disjoint_family(served: dict[str, Any]) -> None:
    client: TestClient = served["client"]
    body = {"where": "age >= 30", "group_by": ["sex", "race"], "epsilon": 0.5}
    r = client.post("/v1/datasets/t/query", json=body, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["group_by"] == ["sex", "race"]
    groups = [a["group"] for a in out["answers"]]
    assert groups == [{"sex": s, "race": r_} for s in SEXES for r_ in RACES]
    assert out["cost"]["queries"] == 8
    # The disjoint family costs every row one epsilon, not eight: exactly so in the analyst's spend; an
    # answer's remaining comes from the lazy tables' worst-row bound (no search), never above the truth
    # and here well below the sequential 1.0.
    assert 4.0 - 1e-9 <= out["remaining_at_least"] <= 4.5 + 1e-9
    assert client.get("/v1/me").json()["datasets"]["t"]["spent"] == pytest.approx(0.5)
    ledger = client.get("/v1/me/ledger").json()
    assert len(ledger) == 8 and all(e["answer"]["group"] for e in ledger)
    again = client.post("/v1/datasets/t/query", json=body, headers={"Idempotency-Key": "k1"}).json()
    assert again["replayed"] and [a["group"] for a in again["answers"]] == groups
    assert [a["count"] for a in again["answers"]] == [a["count"] for a in out["answers"]]
    # Dry run of two families on the same attributes in one batch: the worst row pays two.
    cost = client.post(
        "/v1/datasets/t/cost",
        json={
            "queries": [
                {"group_by": ["sex", "race"], "where": "age >= 30"},
                "SELECT sex, race, COUNT(*) FROM t WHERE age < 60 GROUP BY sex, race",
            ],
            "epsilon": 0.1,
        },
    ).json()
    assert cost["cost"]["queries"] == 16
    assert cost["cost"]["batch"]["overlap"] == pytest.approx(0.2)
    assert cost["cost"]["batch"]["sequential"] == pytest.approx(1.6)
    # The SQL form in the query body, and a batch mixing a family and a plain query.
    sql = client.post(
        "/v1/datasets/t/query", json={"sql": "SELECT income, COUNT(*) FROM t GROUP BY income", "epsilon": 0.1}
    ).json()
    assert sql["group_by"] == ["income"] and [a["group"]["income"] for a in sql["answers"]] == _bin_labels()
    batch = client.post(
        "/v1/datasets/t/batch", json={"queries": ["age < 30", {"group_by": ["sex"]}], "epsilon": 0.1}
    ).json()
    assert [a.get("item") for a in batch["answers"]] == [None, 1, 1]
    assert [a.get("group") for a in batch["answers"]] == [None, {"sex": "Female"}, {"sex": "Male"}]


def test_service_counts_cells_toward_the_batch_limit_and_refuses_bad_group_by(served: dict[str, Any]) -> None:
    client: TestClient = served["client"]
    before = client.get("/v1/me/ledger").json()
    # 5 x 4 = 20 cells fit the limit of 20; 5 x 4 x 2 = 40 do not, and neither does 20 plus one more.
    ok = client.post(
        "/v1/datasets/t/cost", json={"queries": [{"group_by": ["children", "race"]}], "epsilon": 0.1}
    )
    assert ok.status_code == 200, ok.text
    for queries in (
        [{"group_by": ["children", "race", "sex"]}],
        ["age < 30", {"group_by": ["children", "race"]}],
    ):
        r = client.post("/v1/datasets/t/batch", json={"queries": queries, "epsilon": 0.1})
        assert r.status_code == 413, r.text
        assert "at most 20 queries" in r.json()["detail"] and "cells" in r.json()["detail"]
    for body, status, words in [
        ({"group_by": ["colour"], "epsilon": 0.1}, 400, "colour"),
        ({"group_by": "sex", "epsilon": 0.1}, 422, "group_by"),
        ({"sql": "SELECT sex, SUM(age) FROM t GROUP BY sex", "epsilon": 0.1}, 400, "'bounds' missing"),
        ({"sql": "SELECT sex, COUNT(*) FROM t GROUP BY sex", "where": "age > 3", "epsilon": 0.1}, 400, "sql"),
        ({"epsilon": 0.1}, 422, "where"),
    ]:
        r = client.post("/v1/datasets/t/query", json=body)
        assert r.status_code == status, (body, r.text)
        assert words in json.dumps(r.json()["detail"]), (body, r.text)
    assert client.get("/v1/me/ledger").json() == before  # nothing was charged


def test_client_returns_a_dataframe_with_one_row_per_cell(tmp_path: Path) -> None:
    from overlapdp.service.client import AdminClient, Client
    from overlapdp.service.embedded import embedded_service

    schema, data = _schema(), _data(600)
    data.to_csv(tmp_path / "d.csv", index=False)
    with embedded_service(tmp_path / "l.sqlite") as (url, admin_token):
        admin = AdminClient(url, admin_token)
        admin.register_dataset("t", str(tmp_path / "d.csv"), schema.to_json(), engine="pandas", budget=1e8)
        ann = Client(url, admin.create_analyst("ann", {"t": 1e7}))
        frame = ann.query("t", "age >= 30", group_by=["sex", "race"], epsilon=1e6)
        assert list(frame.columns[:2]) == ["sex", "race"] and len(frame) == 8
        truth = _pandas_cells(data[data["age"] >= 30], ["sex", "race"], {"sex": SEXES, "race": RACES})
        assert {(r.sex, r.race): r.answer for r in frame.itertuples()} == truth
        sql = ann.query("t", "SELECT children, COUNT(*) FROM t GROUP BY children", epsilon=1e6)
        assert list(sql["children"]) == [0, 1, 2, 3, 4] and sql.loc[sql.children == 3, "answer"].item() == 0
        mixed = ann.batch("t", ["age < 30", {"group_by": ["sex"]}], epsilon=0.1)
        assert list(mixed["group"]) == [None, {"sex": "Female"}, {"sex": "Male"}]
        ann.close()
        admin.close()


def test_a_group_by_ledger_line_charges_every_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under replace-one-row, a row moving from one cell to another changes both counts: 2 x 0.1. Read
    as one charge on the filter (the group_by ignored) the move would cost nothing, and the worst pair
    only 0.1 (in and out of the filter): under-reported."""
    from overlapdp.report.ledger import parse_ledger

    schema = _schema()
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    line = {
        "id": "fam",
        "group_by": ["sex", "race"],
        "where": "age >= 30",
        "mechanism": "laplace",
        "scale": 10,
    }
    ledger = _write(tmp_path / "l.jsonl", line)
    for neighbouring, expected in (("add_remove", 0.1), ("replace", 0.2)):
        args = ["account", "--schema", str(tmp_path / "s.json"), "--ledger", str(ledger)]
        code, out, err = run([*args, "--neighbouring", neighbouring, "--json"], capsys)
        assert code == 0, err
        report = json.loads(out)
        assert report["charges"] == 8
        assert report["definitions"]["pure"]["overlap"] == pytest.approx(expected), neighbouring
        assert report["definitions"]["pure"]["sequential"] == pytest.approx(0.8)
    entries = parse_ledger(schema, [json.dumps(line)])
    assert [e.id for e in entries][:2] == ["fam[sex=Female,race=White]", "fam[sex=Female,race=Black]"]


def test_each_cell_describes_itself_as_sql_that_reads_back_to_the_same_cell() -> None:
    schema = _schema()
    for by, where in ((["sex", "race"], "age >= 30 OR age < 20"), (["income", "children"], None)):
        family = group_by(schema, by, where, id="f")
        for cell in family.cells:
            again = parse_query(schema, cell.describe())
            assert again.coverages() == cell.coverages(), cell.describe()


def test_the_readable_tables_show_cell_ids_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``by_sex[sex=Female]`` holds brackets, which rich reads as markup and used to print as ``by_sex``."""
    schema, data = _schema(), _data(300)
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    data.to_csv(tmp_path / "d.csv", index=False)
    queries = _write(tmp_path / "q.jsonl", {"id": "by_sex", "group_by": ["sex"], "where": "age >= 30"})
    files = ["--schema", str(tmp_path / "s.json"), "--queries", str(queries)]
    for args in (
        ["answer", *files, "--data", str(tmp_path / "d.csv"), "--definition", "pure", "--budget", "1"],
        ["count", *files, "--data", str(tmp_path / "d.csv"), "--exact"],
        ["overlap", *files],
    ):
        code, out, err = run(args, capsys)
        assert code == 0, err
        assert "by_sex[sex=Female]" in out, args[0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_families_overlap_like_their_filters_by_brute_force(
    families: list[tuple[list[str], int, int]],
) -> None:
    """k families: each row is in at most one cell of each, so gamma is the largest number of filters
    covering one row; max_overlap on the cells equals the enumeration of every row."""
    schema = Schema.from_json({"a": 4, "b": 3, "c": 2})
    cells = []
    for n, (by, lo, hi) in enumerate(families):
        lo, hi = min(lo, hi), max(lo, hi)
        cells.extend(group_by(schema, by, f"a BETWEEN {lo} AND {hi}", id=f"f{n}").cells)
    truth = _brute_max_load(schema, cells)
    filters = [(min(lo, hi), max(lo, hi)) for _, lo, hi in families]
    assert truth == max(sum(lo <= a <= hi for lo, hi in filters) for a in range(4))
    res = max_overlap(cells)
    assert res.exact and res.value == truth


def test_cli_answer_compares_a_group_by_with_parallel_composition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24.9: a GROUP BY was only compared with sequential accounting (89.3%), which no peer uses:
    Tumult Analytics and OpenDP charge a group-by once. Two GROUP BYs and two disjoint age queries:
    gamma 3 (a sex cell, a race cell, one age query), parallel composition 4 charges, sequential 8."""
    import math

    schema, data = _schema(), _data(300)
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    data.to_csv(tmp_path / "d.csv", index=False)
    lines = [
        {"id": "by_sex", "group_by": ["sex"]},
        {"id": "by_race", "group_by": ["race"]},
        {"id": "young", "where": "age < 30"},
        {"id": "old", "where": "age >= 60"},
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    args = ["answer", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    args += ["--definition", "pure", "--budget", "1", "--queries", str(tmp_path / "q.jsonl")]

    def laplace_std(scale: int) -> float:  # the discrete Laplace's variance 2p/(1-p)^2, p = e^(-1/t)
        p = math.exp(-1 / scale)
        return math.sqrt(2 * p) / (1 - p)

    vs_parallel = 1 - laplace_std(3) / laplace_std(4)
    vs_sequential = 1 - laplace_std(3) / laplace_std(8)
    code, out, err = run(args, capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert f"noise reduction vs parallel │ {vs_parallel:.1%} (4 charges, a GROUP BY once)" in text, out
    assert f"noise reduction vs sequential │ {vs_sequential:.1%} (8 charges)" in text
    code, out, err = run([*args, "--json"], capsys)
    par = json.loads(out)["privacy"]["parallel_composition"]
    # the shares are rounded down a hair (scale 3.000001), the noise a hair wider than 1/3 asks
    assert par["payers"] == 4 and par["noise_reduction"] == pytest.approx(vs_parallel, abs=1e-5)


def test_witness_rows_say_any_value_where_no_query_constrains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24.9: the witness row filled unconstrained attributes with their first domain values
    (``sex = Female, race = White``) as if they mattered; on a workload of age ranges only age is
    shown, the rest "any value" (answer, overlap, and the HTML report)."""
    from overlapdp.report import build_report

    schema, data = _schema(), _data(300)
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    data.to_csv(tmp_path / "d.csv", index=False)
    lines = [{"id": "a", "where": "age < 30"}, {"id": "b", "where": "age >= 25 AND age < 40"}]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    schema_q = ["--schema", str(tmp_path / "s.json"), "--queries", str(tmp_path / "q.jsonl")]
    code, out, err = run(
        ["answer", *schema_q, "--data", str(tmp_path / "d.csv"), "--definition", "pure", "--budget", "1"],
        capsys,
    )
    assert code == 0, err
    text = " ".join(out.split())
    for name in ("sex", "race", "children", "income"):
        assert f"{name} = any value" in text, out
    age = int(text.split("witness row │ age = ")[1].split(",")[0])
    assert 25 <= age <= 29  # brute force: the rows in both ranges
    code, out, err = run(["overlap", *schema_q], capsys)
    assert code == 0, err
    assert "any value" in out and "Female" not in out
    build_report(schema, Workload.read_jsonl(schema, tmp_path / "q.jsonl"), tmp_path / "rep")
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert page.count("any value") == 4 and ">Female<" not in page


def test_the_privacy_table_shows_each_kinds_noise_in_a_mixed_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24.9: a count and a clipped sum showed one noise row, the count's scale 1; the sum's noise
    is calibrated to its sensitivity, max(|0|, |90|) = 90 steps at the same epsilon 1 (disjoint rows:
    gamma 1), so scale 90."""
    schema, data = _schema(), _data(300)
    (tmp_path / "s.json").write_text(json.dumps(schema.to_json()))
    data.to_csv(tmp_path / "d.csv", index=False)
    lines = [
        {"id": "young", "where": "age < 30"},
        {"id": "ages", "where": "age >= 30", "aggregate": "sum", "of": "age", "bounds": [0, 90]},
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    args = ["answer", "--schema", str(tmp_path / "s.json"), "--data", str(tmp_path / "d.csv")]
    code, out, err = run(
        [*args, "--queries", str(tmp_path / "q.jsonl"), "--definition", "pure", "--budget", "1"], capsys
    )
    assert code == 0, err
    text = " ".join(out.split())
    assert "noise, counts │ discrete Laplace, scale 1 " in text, out
    assert "noise, sum of age │ discrete Laplace, scale 90 in steps of 1" in text, out
