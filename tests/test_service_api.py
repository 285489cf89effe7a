"""The HTTP API: authentication on every endpoint, limits, errors, CORS, and the Python client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
import uvicorn
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from overlapdp.client import AdminClient, Client, QuotaExceeded, ServiceRefused
from overlapdp.service import AdminKey, Limits, QueryService, create_app, open_ledger
from support.service import ADMIN_TOKEN, free_port, write_adult

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
    alice = service.create_analyst("alice", {"adult": 2.0})["token"]
    bob = service.create_analyst("bob", {"adult": 2.0})["token"]
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
        return {"query": "sex = 1", "threshold": 10}
    if path.endswith("/query"):
        return {"query": "sex = 1", "epsilon": 0.01}
    if path.endswith(("/batch", "/cost")):
        return {"queries": ["sex = 1"], "epsilon": 0.01}
    if path.endswith("/sessions"):
        return {"kind": "sparse_vector", "epsilon": 0.01}
    return None


def _analyst_calls(world: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
    calls = []
    for route in world["app"].routes:
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
        r for r in world["app"].routes if isinstance(r, APIRoute) and r.path.startswith("/v1/admin")
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
    client.post("/v1/datasets/adult/query", headers=alice, json={"query": "sex = 1", "epsilon": 0.1})
    assert client.get(f"/v1/sessions/{sid}", headers=bob).status_code == 404
    assert (
        client.post(
            f"/v1/sessions/{sid}/query", headers=bob, json={"query": "sex = 1", "threshold": 1}
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
        ("POST", "/v1/datasets/adult2/query", {"query": "sex = 1", "epsilon": 0.1}),
        ("POST", "/v1/datasets/adult2/cost", {"queries": ["sex = 1"], "epsilon": 0.1}),
    ]:
        assert client.request(method, path, headers=bob, json=body).status_code == 404


def test_bad_input_gets_a_clear_4xx_and_no_charge(world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    bob = _bearer(world["bob"])
    before = len(world["service"].store.charges())
    cases = [
        (client.post("/v1/datasets/adult/query", headers=bob, content=b'{"query": '), 422),
        (
            client.post(
                "/v1/datasets/adult/query", headers=bob, json={"query": "nosuch = 1", "epsilon": 0.1}
            ),
            400,
        ),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"query": "age >", "epsilon": 0.1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"query": "sex = 1", "epsilon": -1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"query": "sex = 1", "rho": 0.1}), 400),
        (client.post("/v1/datasets/adult/query", headers=bob, json={"query": "sex = 1"}), 400),
        (client.post("/v1/datasets/nope/query", headers=bob, json={"query": "sex = 1", "epsilon": 0.1}), 404),
        (
            client.post("/v1/datasets/adult/query", headers=bob, json={"query": "sex = 1", "epsilon": 5.0}),
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
                content=b'{"query": {"conditions": {"age": {"range": [NaN, 3]}}}, "epsilon": 0.1}',
            ),
            400,
        ),
        (
            client.post(
                "/v1/datasets/adult/query",
                headers={**bob, "Content-Type": "application/json"},
                content=b'{"query": "sex = 1", "epsilon": Infinity}',
            ),
            400,
        ),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert set(response.json()) >= {"error", "detail"}
    over = cases[7][0].json()
    assert over["error"] == "QuotaExceeded" and over["remaining"] == pytest.approx(2.0)
    assert len(world["service"].store.charges()) == before


def test_validation_errors_do_not_echo_the_input(world: dict[str, Any]) -> None:
    secret = "s3cr3t-value-4711"
    r = world["client"].post(
        "/v1/datasets/adult/query",
        headers=_bearer(world["bob"]),
        json={"query": "sex = 1", "epsilon": secret},
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
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service, AdminKey(ADMIN_TOKEN)), host="127.0.0.1", port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield {"url": f"http://127.0.0.1:{port}", "service": service, "folder": tmp_path}
    server.should_exit = True
    thread.join(timeout=20)
    service.store.close()


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
    assert isinstance(one, pd.DataFrame) and list(one.columns[:5]) == [
        "query",
        "count",
        "stddev",
        "ci95_low",
        "ci95_high",
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
    assert ledger.loc[0, "answer"]["count"] == answer.loc[0, "count"]
