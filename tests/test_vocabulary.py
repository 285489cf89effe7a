"""One vocabulary on every surface (issue 24 item 8): the error bar's name, readable operation ids,
OpenAPI examples that run on the guide's raw data set, and a "no quota" that says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

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
    assert body["error_bar"]["low"] <= body["count"] <= body["error_bar"]["high"]
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
            assert ((frame["low"] <= frame["count"]) & (frame["count"] <= frame["high"])).all()
            assert (frame["level"] == 0.95).all()
            assert "low" in str(frame) and "high" in str(frame)  # printed, not elided
        ann.close()
        admin.close()
