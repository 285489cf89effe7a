"""Sums and means over HTTP (MATH.md 2.8, 6.4): a query body or batch item carries ``aggregate`` / ``of`` /
``bounds`` / ``step`` (or ``sql`` with SUM / AVG) as a workload line does; the noise is the library's,
scaled to the sum's sensitivity; the charge is a count's of the same rows; the ledger replays it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from overlapdp.service import AdminKey, QueryService, create_app, open_ledger
from overlapdp.service.client import AdminClient, Client
from support.service import ADMIN_TOKEN, in_process, write_adult

HOURS = "hours-per-week"
# Tails: a discrete Laplace draw beyond 12 standard deviations has probability about e^(-12 sqrt 2),
# 4e-8, so the served (OS-random) answers below are checked without a flaky 95% interval.
TAIL = 12


def dlap_std(sensitivity: float, epsilon: float) -> float:
    """The standard deviation of the discrete Laplace of scale sensitivity/epsilon, in closed form."""
    q = math.exp(-epsilon / sensitivity)
    return math.sqrt(2 * q) / (1 - q)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ledger = tmp_path / "l.sqlite"
    service = QueryService(open_ledger(ledger))
    path, schema = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", 10.0)
    tokens = {name: service.create_analyst(name, {"adult": 2.0}).token for name in ("alice", "bob")}
    client = TestClient(create_app(service, AdminKey(ADMIN_TOKEN)))
    yield {
        "service": service,
        "client": client,
        "tokens": tokens,
        "data": pd.read_csv(path),
        "ledger": ledger,
    }
    service.store.close()


def _post(world: dict[str, Any], who: str, path: str, body: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {world['tokens'][who]}"}
    return world["client"].post(f"/v1/datasets/adult/{path}", headers=headers, json=body)


def _spent(service: QueryService, token: str) -> float:
    return service.analyst_info(service.authenticate(token)).datasets["adult"].spent


def test_a_sum_is_noised_at_its_sensitivity_and_charged_as_a_count(world: dict[str, Any]) -> None:
    d = world["data"]
    body = {"where": "age >= 30", "aggregate": "sum", "of": HOURS, "bounds": [0, 99], "epsilon": 0.5}
    r = _post(world, "alice", "query", body)
    assert r.status_code == 200, r.text
    a = r.json()
    truth = float(d.loc[d["age"] >= 30, HOURS].clip(0, 99).sum())
    assert a["aggregate"] == "sum" and a["of"] == HOURS and a["bounds"] == [0, 99] and "count" not in a
    # The library's noise at sensitivity max(|0|, |99|) = 99 (not a count's 1), rounded up at most a little.
    assert dlap_std(99, 0.5) <= a["noise_std"] <= dlap_std(99, 0.5) * 1.001
    assert abs(a["answer"] - truth) <= TAIL * a["noise_std"]
    assert a["ci95"][0] <= a["answer"] <= a["ci95"][1]
    # Charged exactly as a count of the same rows at the same amount (bob asks the count).
    c = _post(world, "bob", "query", {"where": "age >= 30", "epsilon": 0.5})
    assert c.status_code == 200 and c.json()["cost"] == a["cost"]
    service = world["service"]
    assert _spent(service, world["tokens"]["alice"]) == _spent(service, world["tokens"]["bob"]) == 0.5


def test_grouped_means_in_sql_with_their_parts_and_a_replay_after_a_restart(world: dict[str, Any]) -> None:
    d = world["data"]
    sql = f'SELECT sex, AVG("{HOURS}") FROM adult WHERE age >= 30 GROUP BY sex'
    body = {"queries": [{"sql": sql, "bounds": [10, 60]}, "age < 30"], "epsilon": 1.0}
    headers = {"Authorization": f"Bearer {world['tokens']['alice']}", "Idempotency-Key": "m-1"}
    r = world["client"].post("/v1/datasets/adult/batch", headers=headers, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    cells, count = out["answers"][:2], out["answers"][2]
    assert [c["group"] for c in cells] == [{"sex": 0}, {"sex": 1}] and "aggregate" not in count
    sel = d[d["age"] >= 30]
    for c in cells:
        rows = sel.loc[sel["sex"] == c["group"]["sex"], HOURS]
        assert c["aggregate"] == "mean" and c["bounds"] == [10, 60]
        parts = c["parts"]
        # Each half gets epsilon 1/2: the sum's noise at sensitivity 60, the count's at 1.
        assert dlap_std(60, 0.5) <= parts["sum"]["noise_std"] <= dlap_std(60, 0.5) * 1.001
        assert abs(parts["sum"]["answer"] - rows.clip(10, 60).sum()) <= TAIL * parts["sum"]["noise_std"]
        assert abs(parts["count"]["answer"] - len(rows)) <= TAIL * parts["count"]["noise_std"]
        assert 10 <= c["ci95"][0] <= c["answer"] <= c["ci95"][1] <= 60
    service = world["service"]
    spent = _spent(service, world["tokens"]["alice"])
    assert spent == 1.0  # the cells are disjoint and "age < 30" covers other rows: one epsilon per row
    # A restart rebuilds the same spend from the ledger, and the key replays the recorded answers.
    service.store.close()
    again = QueryService(open_ledger(world["ledger"]))
    try:
        assert _spent(again, world["tokens"]["alice"]) == spent
        client = TestClient(create_app(again, AdminKey(ADMIN_TOKEN)))
        replay = client.post("/v1/datasets/adult/batch", headers=headers, json=body)
        assert replay.status_code == 200 and replay.json()["replayed"] is True
        assert replay.json()["answers"] == out["answers"]
        assert _spent(again, world["tokens"]["alice"]) == spent
    finally:
        again.store.close()
        world["service"] = QueryService(open_ledger(world["ledger"]))  # closed by the fixture


@pytest.mark.parametrize(
    ("item", "status", "words"),
    [
        ({"where": "age >= 30", "aggregate": "sum", "of": HOURS}, 400, "'bounds' missing"),
        ({"sql": f'SELECT SUM("{HOURS}") FROM t'}, 400, "'bounds' missing"),
        ({"sql": "SELECT SUM(age), AVG(age) FROM t", "bounds": [0, 9]}, 400, "exactly one aggregate"),
        ({"where": "TRUE", "aggregate": "median", "of": "age", "bounds": [0, 9]}, 422, "aggregate"),
        ({"where": "TRUE", "aggregate": "sum", "of": "nope", "bounds": [0, 9]}, 400, "not an attribute"),
        ({"where": "TRUE", "aggregate": "sum", "of": "age", "bounds": [0, 9], "colour": 1}, 422, "colour"),
    ],
)
def test_bad_sums_are_refused_and_charge_nothing(
    world: dict[str, Any], item: dict[str, Any], status: int, words: str
) -> None:
    r = _post(world, "alice", "query", {**item, "epsilon": 0.5})
    assert r.status_code == status and words in r.text, r.text
    if item.get("aggregate") != "median":  # batch items are read by the parser: a 400 for them all
        rb = _post(world, "alice", "batch", {"queries": [item], "epsilon": 0.5})
        assert rb.status_code == 400 and words in rb.text, rb.text
    assert _spent(world["service"], world["tokens"]["alice"]) == 0


@pytest.fixture
def live(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with in_process(tmp_path) as world:
        yield world


def test_the_client_sends_sums_and_gets_their_answers(live: dict[str, Any]) -> None:
    path, schema = write_adult(live["folder"])
    d = pd.read_csv(path)
    admin = AdminClient(live["url"], ADMIN_TOKEN)
    admin.register_dataset("adult", str(path), schema, budget=3.0)
    carol = Client(live["url"], admin.create_analyst("carol", {"adult": 1.0}))
    one = carol.query(
        "adult", {"where": "sex = 1", "aggregate": "sum", "of": "age", "bounds": [0, 84]}, epsilon=0.5
    )
    truth = float(d.loc[d["sex"] == 1, "age"].clip(0, 84).sum())
    assert (
        one.loc[0, "aggregate"] == "sum"
        and abs(one.loc[0, "answer"] - truth) <= TAIL * one.loc[0, "noise_std"]
    )
    cells = carol.query(
        "adult", {"sql": "SELECT race, AVG(age) FROM t GROUP BY race", "bounds": [0, 84]}, epsilon=0.25
    )
    assert list(cells["race"]) == list(range(5)) and set(cells["aggregate"]) == {"mean"}
    assert ((cells["low"] <= cells["answer"]) & (cells["answer"] <= cells["high"])).all()
    mixed = carol.batch(
        "adult",
        ["age < 30", {"where": "age >= 30", "aggregate": "mean", "of": "age", "bounds": [30, 84]}],
        epsilon=0.25,
    )
    assert list(mixed["aggregate"]) == ["count", "mean"] and "count" not in mixed.columns
    assert 30 <= mixed.loc[1, "answer"] <= 84


def test_consistent_answers_past_four_distinct_sums_are_refused_before_any_charge(
    world: dict[str, Any],
) -> None:
    # Sums and means are projected with the counts (MATH.md 6.5.1, test_service_consistent.py); what
    # cannot be: more than 4 distinct clippings (each doubles every cell's generators), a 400 naming
    # the limit before anything is counted or spent, for the dry run too.
    sums = [
        {"where": "age >= 30", "aggregate": "sum", "of": HOURS, "bounds": [0, b]}
        for b in (10, 20, 30, 40, 50)
    ]
    for route in ("batch", "cost"):
        body = {"queries": ["age < 30", *sums], "epsilon": 0.5, "consistent": True}
        r = _post(world, "alice", route, body)
        assert r.status_code == 400 and "at most 4 together" in r.text, r.text
        assert _spent(world["service"], world["tokens"]["alice"]) == 0
    r = _post(
        world, "alice", "cost", {"queries": ["age < 30", *sums[:4]], "epsilon": 0.5, "consistent": True}
    )
    assert r.status_code == 200, r.text


def test_declared_bounds_are_kept_with_the_schema_and_survive_a_restart(tmp_path: Path) -> None:
    """Issue 25 item 4: a schema registered with ``"bounds"`` on an attribute keeps them (the stored
    schema used to drop them, so a sum over HTTP always needed 'bounds' in its body): a sum without
    bounds is answered at the declared ones, in a batch too, after a restart as well; a body's own
    bounds still win; a malformed declaration is refused at registration."""
    from overlapdp.errors import SchemaError

    ledger = tmp_path / "l.sqlite"
    path, schema = write_adult(tmp_path)
    declared = dict(schema)
    declared["attributes"] = [
        {**a, "bounds": [0, 60]} if a["name"] == HOURS else a  # type: ignore[dict-item]
        for a in schema["attributes"]  # type: ignore[attr-defined]
    ]
    service = QueryService(open_ledger(ledger))
    service.register_dataset("adult", str(path), declared, "pandas", "pure", 10.0)
    token = service.create_analyst("alice", {"adult": 5.0}).token
    d = pd.read_csv(path)
    truth = float(d.loc[d["age"] >= 30, HOURS].clip(0, 60).sum())
    for restart in (False, True):
        if restart:
            service.store.close()
            service = QueryService(open_ledger(ledger))
        client = TestClient(create_app(service, AdminKey(ADMIN_TOKEN)))
        headers = {"Authorization": f"Bearer {token}"}
        body = {"where": "age >= 30", "aggregate": "sum", "of": HOURS, "epsilon": 0.5}
        r = client.post("/v1/datasets/adult/query", headers=headers, json=body)
        assert r.status_code == 200, r.text
        a = r.json()
        assert a["bounds"] == [0, 60]  # the declared bounds: sensitivity 60, not a body's
        assert dlap_std(60, 0.5) <= a["noise_std"] <= dlap_std(60, 0.5) * 1.001
        assert abs(a["answer"] - truth) <= TAIL * a["noise_std"]
        own = client.post("/v1/datasets/adult/query", headers=headers, json={**body, "bounds": [0, 99]})
        assert own.status_code == 200 and own.json()["bounds"] == [0, 99]
        batch = client.post(
            "/v1/datasets/adult/batch",
            headers=headers,
            json={"queries": [{k: v for k, v in body.items() if k != "epsilon"}], "epsilon": 0.1},
        )
        assert batch.status_code == 200 and batch.json()["answers"][0]["bounds"] == [0, 60], batch.text
    bad = dict(schema)
    bad["attributes"] = [
        {**a, "bounds": [1]} if a["name"] == HOURS else a  # type: ignore[dict-item]
        for a in schema["attributes"]  # type: ignore[attr-defined]
    ]
    with pytest.raises(SchemaError, match="bounds"):
        service.register_dataset("bad", str(path), bad, "pandas", "pure", 1.0)
    service.store.close()
