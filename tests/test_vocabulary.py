"""One vocabulary on every surface (issue 24 item 8): the error bar's name, readable operation ids,
OpenAPI examples that run on the guide's raw data set, and a "no quota" that says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cli_helpers import run
from overlapdp.query import Workload
from overlapdp.samples import adult_raw_schema
from overlapdp.service import AdminKey, QueryService, create_app, open_ledger
from overlapdp.service.client import AdminClient, Client
from support.service import ADMIN_TOKEN, in_process, write_adult


@pytest.fixture
def http(tmp_path: Path) -> Iterator[tuple[TestClient, QueryService, dict[str, str]]]:
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    path, schema = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", 10.0)
    service.register_dataset("other", str(path), schema, "pandas", "pure", 10.0)
    token = service.create_analyst("alice", {"adult": 2.0}).token
    yield (
        TestClient(create_app(service, AdminKey(ADMIN_TOKEN))),
        service,
        {"Authorization": f"Bearer {token}"},
    )
    service.store.close()


def test_every_answer_names_its_error_bar(
    http: tuple[TestClient, QueryService, dict[str, str]],
) -> None:
    """``error_bar: {level, low, high}`` as in the CLI's JSON; ``ci95`` and a mean's ``parts.*.interval``
    stay as deprecated names of the same numbers."""
    client, _, headers = http
    one = client.post(
        "/v1/datasets/adult/query", headers=headers, json={"where": "age >= 30", "epsilon": 0.1}
    )
    body = one.json()
    assert body["error_bar"] == {"level": 0.95, "low": body["ci95"][0], "high": body["ci95"][1]}
    assert body["error_bar"]["low"] <= body["answer"] <= body["error_bar"]["high"]
    mean = client.post(
        "/v1/datasets/adult/query",
        headers=headers,
        json={"where": "age >= 30", "aggregate": "mean", "of": "age", "bounds": [0, 90], "epsilon": 0.1},
    ).json()
    assert mean["error_bar"]["low"] == mean["ci95"][0]
    for part in ("sum", "count"):
        p = mean["parts"][part]
        assert p["error_bar"] == {"level": p["level"], "low": p["interval"][0], "high": p["interval"][1]}
    batch = client.post(
        "/v1/datasets/adult/batch",
        headers=headers,
        json={"queries": ["age < 30", "age >= 60"], "epsilon": 0.1},
    ).json()
    assert all(a["error_bar"]["level"] == 0.95 for a in batch["answers"])
    session = client.post(
        "/v1/datasets/adult/sessions",
        headers=headers,
        json={"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 5, "max_failures": 2},
    ).json()["session"]["id"]
    step = client.post(
        f"/v1/sessions/{session}/query", headers=headers, json={"where": "age < 30", "guess": 1}
    )
    answer = step.json()["answer"]
    assert answer["outcome"] == "estimate"  # a guess of 1 is far off any real count
    assert answer["error_bar"] == {"level": 0.95, "low": answer["ci95"][0], "high": answer["ci95"][1]}
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    assert spec["Answer"]["properties"]["ci95"].get("deprecated") is True


def test_operation_ids_are_readable_and_match_the_client(
    http: tuple[TestClient, QueryService, dict[str, str]],
) -> None:
    client, _, _ = http
    spec = client.get("/openapi.json").json()
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) >= 20
    assert all(i.replace("_", "").isalpha() and i.islower() and "v1" not in i for i in ids), ids
    by_path = {(p, m): op["operationId"] for p, ops in spec["paths"].items() for m, op in ops.items()}
    assert by_path[("/v1/admin/analysts/{name}/quotas/{dataset}", "put")] == "set_quota"
    for name in ("query", "batch", "cost", "open_session", "me", "ledger", "datasets"):
        assert name in ids and callable(getattr(Client, name))
    for name in ("register_dataset", "status", "set_budget", "create_analyst", "revoke", "rotate_token"):
        assert name in ids and callable(getattr(AdminClient, name))
    assert list(
        spec["paths"]["/v1/admin/datasets/{name}/heatmap.png"]["get"]["responses"]["200"]["content"]
    ) == ["image/png"]


def test_openapi_examples_run_on_the_guides_raw_data_set(
    http: tuple[TestClient, QueryService, dict[str, str]],
) -> None:
    """The examples were integer codes (``sex = 1``), refused (400) on the raw Adult data set the guide
    registers; every query example now parses on its schema."""
    client, _, _ = http
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    lines: list[str] = []
    for model in schemas.values():
        for field, prop in model.get("properties", {}).items():
            for example in prop.get("examples", []):
                if field == "where":
                    lines.append(json.dumps({"where": example}))
                elif field == "conditions":
                    lines.append(json.dumps({"conditions": example}))
                elif field == "queries":
                    lines += [json.dumps({"where": q} if isinstance(q, str) else q) for q in example]
                elif field == "sql":
                    lines.append(json.dumps({"sql": example}))
    assert len(lines) >= 5
    Workload.from_lines(adult_raw_schema(), lines)  # raises on a code the raw schema does not have


def test_no_quota_is_told_as_no_quota(http: tuple[TestClient, QueryService, dict[str, str]]) -> None:
    client, _, headers = http
    for method, path, body in [
        ("get", "/v1/datasets/other", None),
        ("post", "/v1/datasets/other/query", {"where": "age >= 30", "epsilon": 0.1}),
        ("post", "/v1/datasets/other/batch", {"queries": ["age >= 30"], "epsilon": 0.1}),
        ("post", "/v1/datasets/other/cost", {"queries": ["age >= 30"], "epsilon": 0.1}),
        ("post", "/v1/datasets/other/sessions", {"kind": "sparse_vector", "epsilon": 0.1}),
    ]:
        r = client.request(method, path, headers=headers, json=body)
        assert r.status_code == 404 and "no quota on data set 'other'" in r.json()["detail"], r.text
    r = client.post(
        "/v1/datasets/nowhere/query", headers=headers, json={"where": "age >= 30", "epsilon": 0.1}
    )
    assert r.status_code == 404 and r.json()["detail"] == "unknown data set 'nowhere'"


def test_the_client_tables_carry_the_error_bar_as_low_high_level(tmp_path: Path) -> None:
    with in_process(tmp_path) as live:
        path, schema = write_adult(live["folder"])
        admin = AdminClient(live["url"], ADMIN_TOKEN)
        admin.register_dataset("adult", str(path), schema, budget=3.0)
        ann = Client(live["url"], admin.create_analyst("ann", {"adult": 1.0}))
        one = ann.query("adult", "age >= 30", epsilon=0.1)
        cells = ann.query("adult", "age >= 30", group_by=["sex"], epsilon=0.1)
        for frame in (one, cells):
            assert {"low", "high", "level"} <= set(frame.columns) and "ci95_low" not in frame.columns
            assert ((frame["low"] <= frame["answer"]) & (frame["answer"] <= frame["high"])).all()
            assert (frame["level"] == 0.95).all()
            assert "low" in str(frame) and "high" in str(frame)  # printed, not elided
        ann.close()
        admin.close()


# -- the noisy value is "answer" on every surface, whatever the aggregate -------------------------------

_SUM = {"where": "age >= 30", "aggregate": "sum", "of": "age", "bounds": [0, 90]}
_MEAN = {"where": "age >= 30", "aggregate": "mean", "of": "age", "bounds": [0, 90]}


def test_http_names_a_counts_value_answer_and_keeps_count_deprecated(
    http: tuple[TestClient, QueryService, dict[str, str]],
) -> None:
    """A count's value was ``count`` over HTTP, a sum's or mean's ``answer``: now ``answer`` for all, an
    integer for a count; ``count`` stays for older clients, marked deprecated in OpenAPI. A replay
    (same Idempotency-Key) of a recorded answer, which the ledger keeps as stored, has the new shape."""
    client, _, headers = http
    keyed = {**headers, "Idempotency-Key": "k-1"}
    body = {"where": "age >= 30", "epsilon": 0.1}
    first = client.post("/v1/datasets/adult/query", headers=keyed, json=body).json()
    assert isinstance(first["answer"], int) and first["count"] == first["answer"]
    again = client.post("/v1/datasets/adult/query", headers=keyed, json=body).json()
    assert again["replayed"] and again["answer"] == first["answer"] and again["count"] == first["count"]
    recorded = client.get("/v1/me/ledger", headers=headers).json()
    assert recorded[-1]["answer"]["count"] == first["answer"]  # the ledger's record, as stored
    batch = client.post(
        "/v1/datasets/adult/batch",
        headers=headers,
        json={"queries": ["age < 30", _SUM, _MEAN], "epsilon": 0.1},
    ).json()["answers"]
    assert [a.get("aggregate") for a in batch] == [None, "sum", "mean"]
    assert all(a["error_bar"]["low"] <= a["answer"] <= a["error_bar"]["high"] for a in batch)
    assert "count" in batch[0] and "count" not in batch[1] and "count" not in batch[2]
    # the noise's standard deviation: noise_std, as in the CLI's JSON and a plan (stddev deprecated)
    assert batch[0]["noise_std"] == batch[0]["stddev"] > 0 and batch[1]["noise_std"] > 0
    assert all(batch[2]["parts"][p]["noise_std"] > 0 for p in ("sum", "count"))
    cells = client.post(
        "/v1/datasets/adult/query", headers=headers, json={**body, "group_by": ["sex"]}
    ).json()["answers"]
    assert all(isinstance(c["answer"], int) and c["count"] == c["answer"] for c in cells)
    spec = client.get("/openapi.json").json()["components"]["schemas"]["Answer"]
    assert "answer" in spec["required"] and spec["properties"]["count"].get("deprecated") is True
    assert spec["properties"]["stddev"].get("deprecated") is True
    assert not spec["properties"]["answer"].get("deprecated")


def test_the_client_tables_name_the_value_answer(tmp_path: Path) -> None:
    """The client's DataFrames had a ``count`` column (and ``answer`` only beside a sum or mean): now
    one column ``answer`` for every aggregate; ``frame["count"]`` reads it with a DeprecationWarning."""
    with in_process(tmp_path) as live:
        path, schema = write_adult(live["folder"])
        admin = AdminClient(live["url"], ADMIN_TOKEN)
        admin.register_dataset("adult", str(path), schema, budget=3.0)
        ann = Client(live["url"], admin.create_analyst("ann", {"adult": 1.0}))
        one = ann.query("adult", "age >= 30", epsilon=0.1)
        cells = ann.query("adult", "age >= 30", group_by=["sex"], epsilon=0.1)
        mixed = ann.batch("adult", ["age < 30", _SUM, _MEAN], epsilon=0.1)
        for frame in (one, cells, mixed):
            assert "answer" in frame.columns and "count" not in frame.columns
            assert "answer" in str(frame)
        assert list(mixed["aggregate"]) == ["count", "sum", "mean"]
        with pytest.warns(DeprecationWarning, match="'count' is now 'answer'"):
            old = one["count"]
        assert old.tolist() == one["answer"].tolist()
        with pytest.warns(DeprecationWarning, match="'stddev' is now 'noise_std'"):
            assert mixed["stddev"].equals(mixed["noise_std"])
        assert "stddev" not in mixed.columns and (mixed["noise_std"][:2] > 0).all()  # a mean's: see parts
        ann.close()
        admin.close()


def test_the_library_and_cli_json_name_the_value_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``NoisyAnswer`` / ``NoisySum`` / ``NoisyMean.to_json`` said ``value`` and ``interval``: now the
    CLI's JSON shape, ``answer`` and ``error_bar {level, low, high}``, which the CLI itself prints, and
    ``WorkloadAnswers.frame`` has the same ``answer`` column."""
    from overlapdp.mechanisms import answer_workload, noisy_count, plan_answers
    from overlapdp.mechanisms.sums import add_mean_noise, add_sum_noise
    from overlapdp.privacy import PureDP
    from overlapdp.query import parse_where
    from overlapdp.query.aggregate import Clipping
    from overlapdp.samples import adult_schema, synthetic_adult

    schema = adult_schema()
    frame = synthetic_adult(500, seed=2)
    query = parse_where(schema, "age >= 30").with_id("q")
    count = noisy_count(query, frame, PureDP(1.0), rng=1)
    clip = Clipping("age", 0.0, 90.0)
    (total,) = add_sum_noise([1000], clip, PureDP(1.0), rng=1)
    (mean,) = add_mean_noise([1000], [30], clip, PureDP(1.0), rng=1)
    for a in (count, total, mean):
        doc = a.to_json()
        assert "value" not in doc and "interval" not in doc
        assert doc["answer"] == a.value
        assert doc["error_bar"] == {"level": a.level, "low": a.low, "high": a.high}
    parts = mean.to_json()["parts"]
    assert parts["count"]["answer"] == mean.count.value and parts["sum"]["answer"] == mean.sum.value
    workload = Workload.from_lines(schema, ['{"id": "q", "where": "age >= 30"}'])
    result = answer_workload(frame, workload.queries, plan_answers(workload.queries, 1.0, "pure"), rng=1)
    assert list(result.frame().columns) == ["id", "answer", "low", "high", "level"]
    assert result.to_json()["answers"][0]["answer"] == result.answers[0].value
    (tmp_path / "schema.json").write_text(json.dumps(schema.to_json()))
    (tmp_path / "q.jsonl").write_text('{"id": "q", "where": "age >= 30"}\n')
    frame.to_csv(tmp_path / "d.csv", index=False)
    args = ["answer", "--schema", str(tmp_path / "schema.json"), "--data", str(tmp_path / "d.csv")]
    args += ["--queries", str(tmp_path / "q.jsonl"), "--budget", "1", "--definition", "pure", "--json"]
    code, out, err = run(args, capsys)
    assert code == 0, err
    (printed,) = json.loads(out)["answers"]
    assert set(printed) >= {"id", "answer", "error_bar", "noise_std"} and "value" not in printed
    assert "count" not in printed and "std" not in printed and "stddev" not in printed
