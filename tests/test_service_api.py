"""The HTTP API: authentication on every endpoint, limits, errors, CORS, and the Python client."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from overlapdp.service import AdminKey, Limits, QueryService, create_app, open_ledger
from overlapdp.service.client import AdminClient, Client, QuotaExceeded, ServiceRefused
from overlapdp.service.core import FieldRefused
from support.service import ADMIN_TOKEN, api_routes, in_process, write_adult

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A service with data set 'adult' and analysts alice and bob (alice has an open session)."""
    service = QueryService(
        open_ledger(tmp_path / "l.sqlite"), limits=Limits(max_body_bytes=20_000, max_batch=50)
    )
    app = create_app(service, AdminKey(ADMIN_TOKEN))
    path, schema = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", 10.0)
    alice = service.create_analyst("alice", {"adult": 2.0}).token
    bob = service.create_analyst("bob", {"adult": 2.0}).token
    client = TestClient(app)
    session = client.post(
        "/v1/datasets/adult/sessions",
        headers=_bearer(alice),
        json={"kind": "sparse_vector", "epsilon": 0.1, "max_positives": 2},
    ).json()["session"]["id"]
    yield {"service": service, "app": app, "client": client, "alice": alice, "bob": bob, "session": session}
    service.store.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _valid_body(path: str) -> dict[str, Any] | None:
    """A well-formed body for each analyst endpoint, so that only the token decides."""
    if path.endswith("/query") and "/sessions/" in path:
        return {"where": "sex = 1", "threshold": 10}
    if path.endswith("/query"):
        return {"where": "sex = 1", "epsilon": 0.01}
    if path.endswith(("/batch", "/cost")):
        return {"queries": ["sex = 1"], "epsilon": 0.01}
    if path.endswith("/sessions"):
        return {"kind": "sparse_vector", "epsilon": 0.01}
    if path.endswith("/plan"):
        return {"queries": ["sex = 1", "sex = 0"], "budget": 1.0}
    return None


def _analyst_calls(world: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
    calls = []
    for route in api_routes(world["app"]):
        if (
            not isinstance(route, APIRoute)
            or not route.path.startswith("/v1/")
            or route.path.startswith("/v1/admin")
        ):
            continue  # (the dashboard's static page and script hold no data and need no token)
        path = route.path.replace("{name}", "adult").replace("{session_id}", world["session"])
        for method in route.methods:
            calls.append((method, path, _valid_body(route.path)))
    assert len(calls) >= 10  # every analyst endpoint of the API
    return calls


@pytest.mark.slow  # 1.5 s of CPU; the quick run keeps the admin and cross-analyst refusals
def test_every_analyst_endpoint_refuses_missing_wrong_and_revoked_tokens(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    calls = _analyst_calls(world)
    for method, path, body in calls:  # the valid token works (so the refusals below are about the token)
        r = client.request(
            method,
            path,
            headers=_bearer(world["bob"] if "sessions/" not in path else world["alice"]),
            json=body,
        )
        assert r.status_code < 400, (method, path, r.text)
    world["service"].revoke("alice")
    for headers in (
        {},
        _bearer("odp_" + "x" * 43),
        {"Authorization": "Basic YWxpY2U6cHc="},
        _bearer(world["alice"]),
        ADMIN,
    ):
        for method, path, body in calls:
            r = client.request(method, path, headers=headers, json=body)
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert r.headers.get("www-authenticate") == "Bearer"
    # A new token lifts the revocation; the old one stays refused.
    new = client.post("/v1/admin/analysts/alice/token", headers=ADMIN).json()["token"]
    assert client.get("/v1/me", headers=_bearer(new)).status_code == 200
    assert client.get("/v1/me", headers=_bearer(world["alice"])).status_code == 401


def test_admin_endpoints_refuse_analyst_tokens(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    admin_routes = [
        r for r in api_routes(world["app"]) if isinstance(r, APIRoute) and r.path.startswith("/v1/admin")
    ]
    assert len(admin_routes) >= 8
    for route in admin_routes:
        path = route.path.replace("{name}", "alice").replace("{dataset}", "adult")
        for method in route.methods:
            for headers in ({}, _bearer(world["alice"])):
                assert client.request(method, path, headers=headers, json={}).status_code == 401, (
                    method,
                    path,
                )


def test_analysts_cannot_reach_each_others_resources(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    alice, bob, sid = _bearer(world["alice"]), _bearer(world["bob"]), world["session"]
    client.post("/v1/datasets/adult/query", headers=alice, json={"where": "sex = 1", "epsilon": 0.1})
    assert client.get(f"/v1/sessions/{sid}", headers=bob).status_code == 404
    assert (
        client.post(
            f"/v1/sessions/{sid}/query", headers=bob, json={"where": "sex = 1", "threshold": 1}
        ).status_code
        == 404
    )
    assert client.get(f"/v1/sessions/{sid}", headers=alice).status_code == 200
    assert client.get("/v1/me/ledger", headers=bob).json() == []
    mine = client.get("/v1/me/ledger", headers=alice).json()
    assert {row["analyst"] for row in mine} == {"alice"} and len(mine) == 2
    # A data set without a quota does not exist for the analyst.
    world["service"].register_dataset(
        "adult2",
        world["service"].store.get_dataset("adult").path,
        client.get("/v1/datasets/adult", headers=alice).json()["schema"],
        "pandas",
        "pure",
        1.0,
    )
    assert [d["name"] for d in client.get("/v1/datasets", headers=bob).json()] == ["adult"]
    for method, path, body in [
        ("GET", "/v1/datasets/adult2", None),
        ("POST", "/v1/datasets/adult2/query", {"where": "sex = 1", "epsilon": 0.1}),
        ("POST", "/v1/datasets/adult2/cost", {"queries": ["sex = 1"], "epsilon": 0.1}),
    ]:
        assert client.request(method, path, headers=bob, json=body).status_code == 404


def test_bad_input_gets_a_clear_4xx_and_no_charge(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    bob = _bearer(world["bob"])
    before = len(world["service"].store.charges())
    cases = [
        (client.post("/v1/datasets/adult/query", headers=bob, content=b'{"where": '), 422),
        (
            client.post(
                "/v1/datasets/adult/query", headers=bob, json={"where": "nosuch = 1", "epsilon": 0.1}
            ),
            400,
        ),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"where": "age >", "epsilon": 0.1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"where": "sex = 1", "epsilon": -1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"where": "sex = 1", "rho": 0.1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"where": "sex = 1"}), 400),
        (client.post("/v1/datasets/nope/query", headers=bob, json={"where": "sex = 1", "epsilon": 0.1}), 404),
        (
            client.post("/v1/datasets/adult/query", headers=bob, json={"where": "sex = 1", "epsilon": 5.0}),
            403,
        ),
        (
            client.post(
                "/v1/datasets/adult/batch", headers=bob, json={"queries": ["sex = 1"] * 51, "epsilon": 0.001}
            ),
            413,
        ),
        (
            client.post(
                "/v1/datasets/adult/batch", headers=bob, json={"queries": ["sex = 1"], "epsilon": 0.1, "x": 1}
            ),
            422,
        ),
        (client.post("/v1/datasets/adult/batch", headers=bob, content=b"x" * 30_000), 413),
        (
            client.post(
                "/v1/datasets/adult/query",
                headers={**bob, "Content-Type": "application/json"},
                content=b'{"conditions": {"age": {"range": [NaN, 3]}}, "epsilon": 0.1}',
            ),
            400,
        ),
        (
            client.post(
                "/v1/datasets/adult/query",
                headers={**bob, "Content-Type": "application/json"},
                content=b'{"where": "sex = 1", "epsilon": Infinity}',
            ),
            400,
        ),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert set(response.json()) >= {"error", "detail"}
    over = cases[7][0].json()
    assert over["error"] == "QuotaExceeded" and over["remaining_at_least"] == pytest.approx(2.0)
    assert len(world["service"].store.charges()) == before


def test_validation_errors_do_not_echo_the_input(world: dict[str, Any]) -> None:
    secret = "s3cr3t-value-4711"
    r = world["client"].post(
        "/v1/datasets/adult/query",
        headers=_bearer(world["bob"]),
        json={"where": "sex = 1", "epsilon": secret},
    )
    assert r.status_code == 422 and secret not in r.text


def test_cors_is_off_by_default_and_openapi_is_served(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    r = client.options(
        "/v1/me", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in r.headers
    spec = client.get("/openapi.json").json()
    assert {"/v1/datasets/{name}/query", "/v1/admin/ledger", "/v1/me"} <= set(spec["paths"])


# -- the Python client against a real server --------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with in_process(tmp_path) as world:
        yield world


class _LoseFirstResponse(httpx.HTTPTransport):
    """Sends each request, but drops the first response (as a broken connection would)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if self.lost == 0 and request.method == "POST":
            self.lost += 1
            response.read()
            raise httpx.ReadError("connection reset", request=request)
        return response


def test_client_round_trip_returns_dataframes(live: dict[str, Any]) -> None:
    path, schema = write_adult(live["folder"])
    admin = AdminClient(live["url"], ADMIN_TOKEN)
    admin.register_dataset("adult", str(path), schema, budget=3.0)
    token = admin.create_analyst("carol", {"adult": 1.0})
    carol = Client(live["url"], token)
    assert list(carol.datasets()["name"]) == ["adult"]
    one = carol.query("adult", "age BETWEEN 30 AND 39", epsilon=0.25)
    assert isinstance(one, pd.DataFrame) and list(one.columns[:6]) == [
        "query",
        "answer",
        "low",
        "high",
        "level",
        "noise_std",
    ]
    # Every query here covers the rows aged 35 to 39, whose load is then the sum under any accountant.
    many = carol.batch(
        "adult", ["age BETWEEN 35 AND 50", {"conditions": {"age": {"range": [20, 39]}}}], epsilon=0.25
    )
    assert len(many) == 2
    assert carol.cost("adult", ["age = 36"], epsilon=0.25)["admissible"] is True
    assert carol.cost("adult", ["age = 36"], epsilon=0.5)["admissible"] is False
    with pytest.raises(QuotaExceeded) as over:
        carol.query("adult", "age = 36", epsilon=0.5)
    assert over.value.remaining == pytest.approx(0.25)
    me = carol.me()
    assert me.loc[0, "spent"] == pytest.approx(0.75) and me.loc[0, "remaining"] == pytest.approx(0.25)
    ledger = carol.ledger()
    assert len(ledger) == 3 and set(ledger["analyst"]) == {"carol"}
    full = admin.full_ledger()
    assert list(full["id"]) == list(ledger["id"])
    assert admin.status("adult")["spent"] == pytest.approx(0.75)
    session = carol.open_session(
        "adult", "guess_and_check", epsilon=0.1, epsilon_estimates=0.1, tolerance=50, max_failures=1
    )
    assert set(session.query("sex = 1", guess=-1e9)) >= {"ok", "estimate"}  # a hopeless guess fails
    with pytest.raises(ServiceRefused) as closed:
        session.query("sex = 1", guess=0)
    assert closed.value.status == 409
    admin.revoke("carol")
    with pytest.raises(ServiceRefused) as refused:
        carol.me()
    assert refused.value.status == 401
    assert list(admin.analysts()["analyst"]) == ["carol"]


def test_client_retry_after_a_lost_response_is_not_charged_twice(live: dict[str, Any]) -> None:
    path, schema = write_adult(live["folder"])
    admin = AdminClient(live["url"], ADMIN_TOKEN)
    admin.register_dataset("adult", str(path), schema, budget=3.0)
    token = admin.create_analyst("dave", {"adult": 1.0})
    transport = _LoseFirstResponse()
    dave = Client(live["url"], token, transport=transport)
    answer = dave.query("adult", "sex = 1", epsilon=0.5)
    assert transport.lost == 1
    ledger = admin.full_ledger()
    assert len(ledger) == 1  # the first attempt was charged once; the retry replayed it
    assert ledger.loc[0, "id"] == answer.loc[0, "charge"]
    # the ledger keeps the answer as recorded ("count"); the client's table names it "answer"
    assert ledger.loc[0, "answer"]["count"] == answer.loc[0, "answer"]


# -- request bodies use the workload files' names; unknown and unused fields are refused ----------------


def _problems(response: httpx.Response) -> list[tuple[list[str], str]]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "ValidationError"
    return [(p["loc"], p["msg"]) for p in body["detail"]]


def test_a_query_body_takes_where_or_conditions_as_in_workload_files(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    bob = _bearer(world["bob"])
    # A workload line {"where": ...} plus the parameter, sent as raw JSON text (what curl -d sends).
    raw = b'{"where": "age BETWEEN 30 AND 39 AND sex = 1", "epsilon": 0.125}'
    r = client.post(
        "/v1/datasets/adult/query", headers={**bob, "Content-Type": "application/json"}, content=raw
    )
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["answer"], int) and r.json()["cost"] == {
        "definition": "pure",
        "epsilon": 0.125,
        "queries": 1,
    }
    r = client.post(
        "/v1/datasets/adult/query",
        headers=bob,
        json={"conditions": {"age": {"range": [30, 39]}, "sex": {"eq": 1}}, "epsilon": 0.125},
    )
    assert r.status_code == 200, r.text
    # Both forms are the same query: the ledger recorded the same canonical condition twice.
    rows = client.get("/v1/me/ledger", headers=bob).json()
    assert len(rows) == 2 and rows[0]["query"]["conditions"] == rows[1]["query"]["conditions"]
    assert rows[0]["query"]["text"] == "age BETWEEN 30 AND 39 AND sex = 1"
    # A session step takes the same names.
    alice, sid = _bearer(world["alice"]), world["session"]
    r = client.post(f"/v1/sessions/{sid}/query", headers=alice, json={"where": "sex = 1", "threshold": 1e9})
    assert r.status_code == 200 and r.json()["answer"]["outcome"] == "below", r.text
    # Neither, or both, is a 422 that says so; nothing is charged.
    before = len(world["service"].store.charges())
    for body in ({"epsilon": 0.1}, {"where": "sex = 1", "conditions": {"sex": {"eq": 1}}, "epsilon": 0.1}):
        (problem,) = _problems(client.post("/v1/datasets/adult/query", headers=bob, json=body))
        assert "exactly one of 'where'" in problem[1]
    assert len(world["service"].store.charges()) == before


def test_an_unknown_field_is_a_422_naming_it(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    bob = _bearer(world["bob"])
    before = len(world["service"].store.charges())
    body = {"where": "sex = 1", "epsilon": 0.1, "epsilonn": 1}
    assert _problems(client.post("/v1/datasets/adult/query", headers=bob, json=body)) == [
        (["body", "epsilonn"], "unknown field 'epsilonn'")
    ]
    # The old name of the condition field says which names to use instead.
    ((loc, msg),) = _problems(
        client.post("/v1/datasets/adult/query", headers=bob, json={"query": "sex = 1", "epsilon": 0.1})
    )
    assert loc == ["body", "query"] and "'where'" in msg and "'conditions'" in msg
    body = {"queries": ["sex = 1"], "epsilon": 0.1, "rh0": 1}
    assert _problems(client.post("/v1/datasets/adult/batch", headers=bob, json=body)) == [
        (["body", "rh0"], "unknown field 'rh0'")
    ]
    assert len(world["service"].store.charges()) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 5, "max_positives": 3},
            "max_positives",
        ),
        ({"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 5, "monotonic": True}, "monotonic"),
        ({"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 5, "c": 2}, "c"),
        ({"kind": "sparse_vector", "epsilon": 0.1, "max_failures": 3}, "max_failures"),
        ({"kind": "sparse_vector", "epsilon": 0.1, "tolerance": 5}, "tolerance"),
        ({"kind": "sparse_vector", "epsilon": 0.1, "epsilon_estimates": 0.1}, "epsilon_estimates"),
    ],
)
def test_a_session_field_its_kind_does_not_use_is_a_422_naming_it(
    world: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    client: TestClient = world["client"]
    before = len(world["service"].store.charges())
    r = client.post("/v1/datasets/adult/sessions", headers=_bearer(world["bob"]), json=body)
    ((loc, msg),) = _problems(r)
    assert loc == ["body", body["kind"], field]
    assert f"a {body['kind']} session does not use {field!r}" in msg
    assert len(world["service"].store.charges()) == before
    # The service without HTTP refuses it too (never ignores it).
    bob = world["service"].authenticate(world["bob"])
    params = {k: v for k, v in body.items() if k != "kind"}
    with pytest.raises(FieldRefused, match=field):
        world["service"].open_session(bob, "adult", body["kind"], params)
    assert len(world["service"].store.charges()) == before


def test_a_session_step_takes_only_its_kinds_argument(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    alice, sid = _bearer(world["alice"]), world["session"]  # a sparse vector: it takes a threshold
    before = len(world["service"].store.charges())
    r = client.post(f"/v1/sessions/{sid}/query", headers=alice, json={"where": "sex = 1", "guess": 10})
    assert _problems(r) == [(["body", "guess"], "a sparse_vector session takes 'threshold', not 'guess'")]
    gc = client.post(
        "/v1/datasets/adult/sessions",
        headers=alice,
        json={"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 50},
    ).json()["session"]["id"]
    after_open = len(world["service"].store.charges())
    r = client.post(f"/v1/sessions/{gc}/query", headers=alice, json={"where": "sex = 1", "threshold": 10})
    assert _problems(r) == [
        (["body", "threshold"], "a guess_and_check session takes 'guess', not 'threshold'")
    ]
    assert after_open == before + 1 and len(world["service"].store.charges()) == after_open


# -- typed responses: /openapi.json describes every answer, and the answers match it --------------------


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _declares_fields(spec: dict[str, Any], schema: dict[str, Any]) -> bool:
    """A named model with its properties and no others (not "any object"); for a choice of models
    (``anyOf``: a plain or a GROUP BY answer), every one of them."""
    schema = _resolve(spec, schema)
    if "anyOf" in schema:
        return all(_declares_fields(spec, s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return _declares_fields(spec, schema["items"])
    return bool(schema.get("properties")) and schema.get("additionalProperties") is False


def test_openapi_declares_a_response_schema_for_every_route(world: dict[str, Any]) -> None:
    spec = world["client"].get("/openapi.json").json()
    routes = [r for r in api_routes(world["app"]) if isinstance(r, APIRoute) and r.include_in_schema]
    assert len(routes) >= 20
    for route in routes:
        for method in route.methods:
            responses = spec["paths"][route.path][method.lower()]["responses"]
            ok = [code for code in responses if code.startswith("2")]
            assert len(ok) == 1, (method, route.path, responses)
            content = responses[ok[0]]["content"]
            if route.path.endswith(".png"):
                assert content["image/png"]["schema"] == {"type": "string", "format": "binary"}
                continue
            assert _declares_fields(spec, content["application/json"]["schema"]), (method, route.path)
            for code in ("400", "401", "404", "422"):  # the error bodies are described too
                error = _resolve(spec, responses[code]["content"]["application/json"]["schema"])
                assert {"error", "detail"} <= set(error["properties"]), (method, route.path, code)
    # Routes left out of the description are the dashboard's static page and script, and /docs (Swagger
    # UI from the package's assets, service/docs.py) only.
    hidden = {r.path for r in api_routes(world["app"]) if isinstance(r, APIRoute) and not r.include_in_schema}
    assert hidden == {"/dashboard", "/dashboard/app.js", "/docs"}


def test_every_answer_matches_its_declared_schema(world: dict[str, Any]) -> None:
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    client: TestClient = world["client"]
    spec = client.get("/openapi.json").json()
    alice, bob = _bearer(world["alice"]), _bearer(world["bob"])
    sid = world["session"]
    gc = client.post(
        "/v1/datasets/adult/sessions",
        headers=bob,
        json={"kind": "guess_and_check", "epsilon": 0.1, "tolerance": 1, "max_failures": 2},
    )
    calls: list[tuple[str, str, str, dict[str, str], Any]] = [
        ("POST", "/v1/datasets/{name}/sessions", "/v1/datasets/adult/sessions", bob, None),
        ("GET", "/v1/admin/datasets", "/v1/admin/datasets", ADMIN, None),
        ("GET", "/v1/admin/datasets/{name}", "/v1/admin/datasets/adult", ADMIN, None),
        (
            "PUT",
            "/v1/admin/datasets/{name}/budget",
            "/v1/admin/datasets/adult/budget",
            ADMIN,
            {"definition": "pure", "budget": 9.0},
        ),
        ("POST", "/v1/admin/analysts", "/v1/admin/analysts", ADMIN, {"name": "carl", "quotas": {"adult": 1}}),
        ("GET", "/v1/admin/analysts", "/v1/admin/analysts", ADMIN, None),
        (
            "PUT",
            "/v1/admin/analysts/{name}/quotas/{dataset}",
            "/v1/admin/analysts/carl/quotas/adult",
            ADMIN,
            {"quota": 0.5},
        ),
        ("POST", "/v1/admin/analysts/{name}/token", "/v1/admin/analysts/carl/token", ADMIN, None),
        ("POST", "/v1/admin/analysts/{name}/revoke", "/v1/admin/analysts/carl/revoke", ADMIN, None),
        ("GET", "/v1/datasets", "/v1/datasets", bob, None),
        ("GET", "/v1/datasets/{name}", "/v1/datasets/adult", bob, None),
        (
            "POST",
            "/v1/datasets/{name}/query",
            "/v1/datasets/adult/query",
            bob,
            {"where": "sex = 1", "epsilon": 0.1},
        ),
        (
            "POST",
            "/v1/datasets/{name}/batch",
            "/v1/datasets/adult/batch",
            bob,
            {"queries": ["sex = 1", {"conditions": {"age": {"range": [20, 29]}}}], "epsilon": 0.1},
        ),
        (
            "POST",
            "/v1/datasets/{name}/cost",
            "/v1/datasets/adult/cost",
            bob,
            {"queries": ["age < 30"], "epsilon": 0.1},
        ),
        (
            "POST",
            "/v1/sessions/{session_id}/query",
            f"/v1/sessions/{sid}/query",
            alice,
            {"where": "sex = 1", "threshold": -1e9},
        ),
        ("GET", "/v1/sessions/{session_id}", f"/v1/sessions/{sid}", alice, None),
        (
            "POST",
            "/v1/sessions/{session_id}/query",
            f"/v1/sessions/{gc.json()['session']['id']}/query",
            bob,
            {"where": "sex = 1", "guess": -1e9},  # a failed guess: an estimate with its interval
        ),
        ("GET", "/v1/me", "/v1/me", bob, None),
        ("GET", "/v1/me/ledger", "/v1/me/ledger", bob, None),
        ("GET", "/v1/admin/ledger", "/v1/admin/ledger", ADMIN, None),
        # Errors: refused, unknown, invalid, over the quota.
        (
            "POST",
            "/v1/datasets/{name}/query",
            "/v1/datasets/adult/query",
            bob,
            {"where": "sex = 1", "epsilon": 5.0},
        ),
        (
            "POST",
            "/v1/datasets/{name}/query",
            "/v1/datasets/adult/query",
            bob,
            {"where": "nosuch = 1", "epsilon": 0.1},
        ),
        ("GET", "/v1/datasets/{name}", "/v1/datasets/nope", bob, None),
        ("GET", "/v1/me", "/v1/me", {}, None),
        ("POST", "/v1/datasets/{name}/query", "/v1/datasets/adult/query", bob, {"query": "sex = 1"}),
    ]
    seen: set[tuple[str, int]] = set()
    for method, template, path, headers, body in calls:
        r = gc if template.endswith("/sessions") else client.request(method, path, headers=headers, json=body)
        declared = spec["paths"][template][method.lower()]["responses"]
        schema = declared[str(r.status_code)]["content"]["application/json"]["schema"]
        validator = jsonschema_rs.validator_for({**schema, "components": spec["components"]})
        errors = [e.message for e in validator.iter_errors(r.json())]
        assert not errors, (method, path, r.status_code, errors, r.json())
        seen.add((template, r.status_code))
    assert {code for _, code in seen} >= {200, 201, 400, 401, 403, 404, 422}
    # A replayed answer (the same Idempotency-Key) has the same declared shape.
    key = {**bob, "Idempotency-Key": "replay-1"}
    for _ in range(2):
        r = client.post(
            "/v1/datasets/adult/batch", headers=key, json={"queries": ["sex = 0"], "epsilon": 0.01}
        )
        schema = spec["paths"]["/v1/datasets/{name}/batch"]["post"]["responses"]["200"]["content"]
        validator = jsonschema_rs.validator_for(
            {**schema["application/json"]["schema"], "components": spec["components"]}
        )
        assert validator.is_valid(r.json()), r.json()
    assert r.json()["replayed"] is True


# -- the guide lists every endpoint --------------------------------------------------------------------

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def _guide_endpoint_table() -> set[tuple[str, str]]:
    """``METHOD /path`` of every row of the endpoint table in the guide's section 4."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## 4. The HTTP API") : text.index("## 5.")]
    table = section[section.index("| endpoint |") :]
    table = table[: table.index("\n\n")]
    found = set()
    for cell in re.findall(r"`(GET|POST|PUT|DELETE) (/[^`?\s]*)[^`]*`", table):
        found.add(cell)
    return found


def test_the_guide_endpoint_table_lists_every_route(world: dict[str, Any]) -> None:
    routes = {
        (method, route.path)
        for route in api_routes(world["app"])
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in route.methods
    }
    listed = _guide_endpoint_table()
    assert routes - listed == set(), "routes missing from the guide's endpoint table"
    assert listed - routes == set(), "the guide's endpoint table lists routes the app does not have"


def _guide_curl_calls() -> list[tuple[str, str, Any]]:
    """(method, path, JSON body or None) of every curl line of the guide's section 4."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## 4. The HTTP API") : text.index("## 5.")]
    calls = []
    for block in re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL):
        # a line may keep an answer's field: NAME=$(curl ... | python3 -c '...') (issue 24.8)
        for command in re.split(r"\n(?=(?:[A-Z]+=\$\()?curl )", block.replace("\\\n", " ")):
            command = re.sub(r"^[A-Z]+=\$\(", "", command.replace("\n", " ").strip())
            command = command.split(" | python3 ")[0]
            if not command.startswith("curl "):
                continue
            method = re.search(r"-X (\w+)", command)
            path = re.search(r'"\$URL(/[^"?]*)', command)
            # The body as the shell passes it: shlex undoes the quoting, e.g. '\'' for a quote.
            body = re.search(r"-d ('.*')", command)
            assert path, command
            calls.append(
                (
                    method.group(1) if method else "GET",
                    path.group(1),
                    json.loads(shlex.split(body.group(1))[0]) if body else None,
                )
            )
    return calls


def test_every_request_body_of_the_guide_is_valid_and_every_field_is_documented(
    world: dict[str, Any],
) -> None:
    """Each curl body of the guide validates against its route's request schema (so it is accepted with
    exactly these names), every route with a body has an example, and every body field is named."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    spec = world["client"].get("/openapi.json").json()
    routes = [r for r in api_routes(world["app"]) if isinstance(r, APIRoute) and r.include_in_schema]
    with_body = {(m, r.path) for r in routes for m in r.methods if r.body_field is not None}
    shown = set()
    for method, path, body in _guide_curl_calls():
        matches = [
            r.path
            for r in routes
            if method in r.methods and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", r.path), path)
        ]
        assert len(matches) == 1, (method, path, matches)
        operation = spec["paths"][matches[0]][method.lower()]
        if body is None:
            assert "requestBody" not in operation, (method, path)
            continue
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        validator = jsonschema_rs.validator_for({**schema, "components": spec["components"]})
        assert validator.is_valid(body), (method, path, [e.message for e in validator.iter_errors(body)])
        shown.add((method, matches[0]))
    assert with_body - shown == set(), "routes with a request body but no curl example in the guide"
    section = GUIDE.read_text(encoding="utf-8").split("## 4. The HTTP API")[1].split("## 5.")[0]
    for name, model in spec["components"]["schemas"].items():
        if name.endswith(("Request", "Session", "Registration", "Update", "Create")):
            for field in model["properties"]:
                assert f"`{field}`" in section, (name, field)


def test_every_error_has_the_one_error_body(world: dict[str, Any]) -> None:
    """The framework's own refusals answer the documented ``{"error", "detail"}`` body too, through HTTP
    and the Python client: an unknown route (was ``{"detail": "Not Found"}``), a method the route does
    not take (405, with its ``Allow`` header), and a body the JSON parser gives up on (bounds nested
    100 000 deep: was ``{"detail": "There was an error parsing the body"}``); nothing is charged."""
    from overlapdp.service.client import Client, ServiceRefused

    client: TestClient = world["client"]
    bob = _bearer(world["bob"])
    before = len(world["service"].store.charges())
    deep = b'{"where": "sex = 1", "aggregate": "sum", "of": "age", "bounds": ' + b"[" * 100_000
    deep += b"]" * 100_000 + b', "epsilon": 0.1}'
    world["service"].limits = Limits(max_body_bytes=1_000_000, max_batch=50)
    app = create_app(world["service"], AdminKey(ADMIN_TOKEN))
    big = TestClient(app)
    cases = [
        (client.get("/v1/no/such/route", headers=bob), 404, "NotFound"),
        (client.post("/nowhere", headers=bob, json={}), 404, "NotFound"),
        (client.get("/v1/datasets/adult/query", headers=bob), 405, "MethodNotAllowed"),
        (client.delete("/v1/me", headers=bob), 405, "MethodNotAllowed"),
        (
            big.post(
                "/v1/datasets/adult/query", headers={**bob, "Content-Type": "application/json"}, content=deep
            ),
            400,
            "BadRequest",
        ),
    ]
    for response, status, name in cases:
        assert response.status_code == status, response.text
        body = response.json()
        assert set(body) == {"error", "detail"} and body["error"] == name, body
        assert isinstance(body["detail"], str) and body["detail"]
    assert "POST" in cases[2][0].headers["allow"]
    # the Python client sees the same body (ServiceRefused.error is its name)
    analyst = Client("http://testserver", world["bob"], transport=big._transport)  # type: ignore[attr-defined]
    with pytest.raises(ServiceRefused) as refused:
        analyst._call("GET", "/v1/no/such/route")
    assert refused.value.status == 404 and refused.value.error == "NotFound"
    assert len(world["service"].store.charges()) == before


@pytest.mark.slow  # 1.2 s of CPU
def test_docs_load_nothing_from_another_host(world: dict[str, Any]) -> None:
    """/docs renders on an air-gapped machine: every URL of the page is on the service itself, and
    its script and stylesheet are served (Swagger UI's own files, not a stub)."""
    import re

    client: TestClient = world["client"]
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert not re.findall(r"(?:https?:)?//[\w.-]+", page.text.replace("://", "")), page.text
    assert not re.search(r"https?://", page.text), page.text
    refs = re.findall(r"""(?:href|src)=["']([^"']+)["']|url: ?['"]([^'"]+)['"]""", page.text)
    urls = [a or b for a, b in refs]
    assert urls and all(u.startswith("/") for u in urls), urls
    for u in urls:
        got = client.get(u)
        assert got.status_code == 200, u
    js = client.get("/docs/assets/swagger-ui-bundle.js")
    assert "SwaggerUIBundle" in js.text and len(js.content) > 100_000
    assert client.get("/redoc").status_code == 404


def test_a_guess_and_check_session_is_charged_the_epsilon_asked(world: dict[str, Any]) -> None:
    """Issue 24.3: a session of epsilon 0.25 + 0.25 was charged 0.4999999969689454 (the rounded-up
    scales' own guarantee); it is declared and charged as asked, 0.5."""
    client, bob = world["client"], _bearer(world["bob"])
    opened = client.post(
        "/v1/datasets/adult/sessions",
        headers=bob,
        json={"kind": "guess_and_check", "epsilon": 0.25, "epsilon_estimates": 0.25, "tolerance": 10},
    )
    assert opened.status_code == 201, opened.text
    me = client.get("/v1/me", headers=bob).json()["datasets"]["adult"]
    assert me["spent"] == 0.5 and me["remaining"] == 1.5
    cost = client.get("/v1/me/ledger", headers=bob).json()[-1]["cost"]
    assert cost["epsilon"] == 0.5


def test_an_answer_names_its_bound_apart_from_me_remaining(live: dict[str, Any]) -> None:
    """Issue 24.3: after a GROUP BY over two attributes an answer said ``remaining`` 1.3 where
    ``GET /v1/me`` said 1.4 (the answer's is a bound without a search). The two figures have two names:
    ``remaining_at_least`` in answers and 403s, ``remaining`` (exact) in /v1/me; the client's quota
    table prints spent up and remaining down (pandas printed 1.2999999999999998 as 1.3)."""
    path, schema = write_adult(live["folder"])
    admin = AdminClient(live["url"], ADMIN_TOKEN)
    admin.register_dataset("adult", str(path), schema, budget=10.0)
    token = admin.create_analyst("dora", {"adult": 1.5})
    http = httpx.Client(base_url=live["url"], headers=_bearer(token), timeout=120.0)  # (a bound on a hang)
    grouped = http.post("/v1/datasets/adult/query", json={"group_by": ["sex", "race"], "epsilon": 0.1}).json()
    assert "remaining" not in grouped and grouped["remaining_at_least"] <= 1.4
    one = http.post("/v1/datasets/adult/query", json={"where": "age >= 30", "epsilon": 0.1}).json()
    assert "remaining" not in one
    me = http.get("/v1/me").json()["datasets"]["adult"]
    # brute force: the cells are disjoint, so a row aged 30+ pays one cell and the age query, 0.2
    assert me["spent"] == pytest.approx(0.2) and me["remaining"] == pytest.approx(1.3)
    assert one["remaining_at_least"] <= me["remaining"]
    over = http.post("/v1/datasets/adult/query", json={"where": "age >= 30", "epsilon": 1.4})
    assert over.status_code == 403 and "remaining" not in over.json()
    assert over.json()["remaining_at_least"] <= me["remaining"]
    with pytest.raises(QuotaExceeded) as refused:
        Client(live["url"], token).query("adult", "age >= 30", epsilon=1.4)
    assert refused.value.remaining == over.json()["remaining_at_least"]
    table = Client(live["url"], token).me()
    shown = Fraction(str(table.loc[0, "remaining"]))
    assert shown <= Fraction(me["remaining"]) and Fraction(str(table.loc[0, "spent"])) >= Fraction(
        me["spent"]
    )
    assert "1.29999" in str(table) and "1.3" not in str(table).replace("1.29999", "")
    http.close()
