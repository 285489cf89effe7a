"""The service admits exactly at the budget through the library's filter, refuses
parameters whose noise cannot be represented (400 naming the field), and a hostile or failing request
affects that request only: other analysts keep getting 200s, and the filters are never rebuilt on the
admission path.

Truth: exact Fraction sums over every (age, sex) point of the recorded charges, computed here.
"""

from __future__ import annotations

import json
import math
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from overlapdp import display
from overlapdp.privacy.definitions import PureDP
from overlapdp.privacy.mechanisms import OpaqueApproxDP
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery, parse_query
from overlapdp.service import AdminKey, QueryService, create_app, open_ledger, shared
from overlapdp.service import core as service_core
from overlapdp.service.client import AdminClient, Client, QuotaExceeded, ServiceRefused
from overlapdp.service.core import ServiceError
from support.marks import slow_after
from support.service import ADMIN_TOKEN, FailingCommit, running, write_adult

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


# -- exact at the budget, through the API, across a restart -------------------------------------------


@pytest.mark.slow
def test_exact_at_the_budget_and_the_same_spend_after_a_restart(tmp_path: Path) -> None:
    """Budget 1.0: 1.0 then 2^-53 must not both be admitted (1 + 2^-53 > 1); budget 8192: 8192 then
    2^-40 (a float sum rounds it away); ten charges of 0.1 on one row exceed 1.0. After a restart each
    spend is what the live service reported, and equals the exact sum of the ledger rounded up."""
    ledger = str(tmp_path / "ledger.sqlite")
    path, schema = write_adult(tmp_path)
    with running(ledger, log=tmp_path / "a.log") as server:
        admin = AdminClient(server.url, ADMIN_TOKEN)
        for name, budget in (("one", 1.0), ("big", 8192.0), ("tenth", 1.0)):
            admin.register_dataset(name, str(path), schema, budget=budget)
        alice = Client(server.url, admin.create_analyst("alice", {"one": 1.0, "big": 8192.0, "tenth": 1.0}))
        alice.query("one", "sex = 1", epsilon=1.0)
        with pytest.raises((QuotaExceeded, ServiceRefused)):  # 2^-53 is also below the smallest epsilon
            alice.query("one", "sex = 1", epsilon=2.0**-53)
        alice.query("big", "age < 40", epsilon=8192.0)
        with pytest.raises(QuotaExceeded):
            alice.query("big", "age = 30", epsilon=2.0**-40)
        for _ in range(9):
            alice.query("tenth", "age BETWEEN 20 AND 29", epsilon=0.1)
        with pytest.raises(QuotaExceeded):
            alice.query("tenth", "age = 25", epsilon=0.1)
        live = {name: admin.status(name)["spent"] for name in ("one", "big", "tenth")}
        mine = {row["dataset"]: row["spent"] for _, row in alice.me().iterrows()}
        alice.close()
        admin.close()
    assert live == {"one": 1.0, "big": 8192.0, "tenth": _float_up(9 * Fraction(0.1))}
    # the client's quota lines are for people: spent rounded up to 6 significant digits (display)
    assert mine == {name: float(display.spent(v)) for name, v in live.items()}
    with running(ledger, log=tmp_path / "b.log") as server:
        admin = AdminClient(server.url, ADMIN_TOKEN)
        after = {name: admin.status(name)["spent"] for name in ("one", "big", "tenth")}
        rows = admin.full_ledger()
        admin.close()
    assert after == live
    for name in live:
        loads = [Fraction(c["load"]) for d, c in zip(rows["dataset"], rows["cost"], strict=True) if d == name]
        assert after[name] == _float_up(sum(loads, Fraction(0)))


# -- one admission path -------------------------------------------------------------------------------


def _service(tmp_path: Path, budget: float, quota: float) -> tuple[QueryService, Any]:
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    path, schema = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", budget)
    service.create_analyst("alice", {"adult": quota})
    return service, service.store.get_analyst("alice")


def _points(schema: Any) -> list[tuple[int, ...]]:
    age, sex = schema.position("age"), schema.position("sex")
    out = []
    for a in range(schema.attributes[age].size):
        for s in range(schema.attributes[sex].size):
            row = [0] * len(schema)
            row[age], row[sex] = a, s
            out.append(tuple(row))
    return out


@pytest.mark.parametrize("seed", slow_after([0, 1]))
def test_service_decides_like_the_library_filter_and_exact_enumeration(tmp_path: Path, seed: int) -> None:
    """A random stream of queries and batches on age and sex, many sized to land exactly on, just above
    or just below the remaining budget of their worst point: the service's decisions equal those of the
    library's PrivacyFilter fed the same stream, and both equal exact enumeration."""
    budget = [1.0, 0.3][seed]
    service, alice = _service(tmp_path, budget, budget)
    schema = service._state("adult").schema
    points = _points(schema)
    admitted: list[tuple[PredicateQuery, float]] = []

    def worst(charges: list[tuple[PredicateQuery, float]], where: PredicateQuery | None = None) -> Fraction:
        return max(
            sum((Fraction(w) for q, w in charges if q.covers(p)), Fraction(0))
            for p in points
            if where is None or where.covers(p)
        )

    rng = np.random.default_rng(seed)
    decisions = {True: 0, False: 0}
    for i in range(40):
        texts, batch = [], []
        for _ in range(int(rng.integers(1, 3))):
            lo = int(rng.integers(15, 60))
            text = f"age BETWEEN {lo} AND {lo + int(rng.integers(0, 10))} AND sex = {int(rng.integers(0, 2))}"
            q = parse_query(schema, text)
            texts.append(text)
            batch.append(q)
        room = Fraction(budget) - worst(admitted, batch[0]) if admitted else Fraction(budget)
        share = room / len(batch)
        near = [float(share), math.nextafter(float(share), math.inf), math.nextafter(float(share), 0.0)]
        pick = int(rng.integers(0, 6))
        eps = near[pick] if pick < 3 else [0.1, float(share / 3), budget / 7][pick - 3]
        eps = max(eps, 2.0**-40)
        charges = [(q, eps) for q in batch]
        truth = worst(admitted + charges) <= Fraction(budget)
        # The library's filter, fed every admitted charge and then this request in order.
        reference = PrivacyFilter(schema, PureDP(budget))
        for j, (q, w) in enumerate(admitted):
            assert reference.try_charge(OpaqueApproxDP(w), q, f"a{j}").admitted
        lib = all(reference.try_charge(OpaqueApproxDP(eps), q, f"r{j}").admitted for j, q in enumerate(batch))
        try:
            service.query(alice, "adult", texts, eps)
            served = True
        except service_core.QuotaExceeded:
            served = False
        assert served is lib is truth, (i, eps, texts)
        decisions[truth] += 1
        if truth:
            admitted.extend(charges)
        spent = service.analyst_info(alice).datasets["adult"].spent
        assert spent == _float_up(worst(admitted))
    assert decisions[True] and decisions[False]  # the stream exercised both sides of the budget
    service.store.close()


# -- parameters whose noise cannot be represented -------------------------------------------------------


def test_out_of_range_parameters_get_a_400_naming_the_field(tmp_path: Path) -> None:
    service, _ = _service(tmp_path, 10.0, 2.0)
    path, schema = write_adult(tmp_path)
    service.register_dataset("z", str(path), schema, "pandas", "zcdp", 10.0)
    token = service.create_analyst("mallory", {"adult": 2.0, "z": 2.0}).token
    client = TestClient(create_app(service, AdminKey(ADMIN_TOKEN)))
    me = _bearer(token)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": 1e-300}, "epsilon"),
        ("/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": 5e-324}, "epsilon"),
        ("/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": 1e-13}, "epsilon"),
        ("/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": 1e300}, "epsilon"),
        ("/v1/datasets/adult/batch", {"queries": ["sex = 1", "sex = 0"], "epsilon": 1e-300}, "epsilon"),
        ("/v1/datasets/adult/cost", {"queries": ["sex = 1"], "epsilon": 5e-324}, "epsilon"),
        ("/v1/datasets/z/query", {"where": "sex = 1", "rho": 1e-300}, "rho"),
        ("/v1/datasets/z/query", {"where": "sex = 1", "rho": 5e-324}, "rho"),
        ("/v1/datasets/z/query", {"where": "sex = 1", "rho": 1e300}, "rho"),
        ("/v1/datasets/adult/sessions", {"kind": "sparse_vector", "epsilon": 1e-300}, "epsilon"),
        (
            "/v1/datasets/adult/sessions",
            {"kind": "guess_and_check", "epsilon": 0.1, "epsilon_estimates": 5e-324, "tolerance": 5},
            "epsilon_estimates",
        ),
    ]
    for path_, body, field in cases:
        r = client.post(path_, headers=me, json=body)
        # 400 from the service's checks (or 422 where the request models already bound the field)
        assert r.status_code in (400, 422), (path_, body, r.status_code, r.text)
        assert field in r.text, (body, r.text)
    for path_, body, field in [
        ("/v1/admin/analysts", {"name": "x", "quotas": {"adult": 1e300}}, "quota"),
        ("/v1/admin/datasets/adult/budget", {"definition": "pure", "budget": 1e300}, "budget"),
    ]:
        r = client.request("POST" if "analysts" in path_ else "PUT", path_, headers=ADMIN, json=body)
        assert r.status_code in (400, 422) and field in r.text, r.text
    assert service.store.charges() == []
    assert (
        client.post(
            "/v1/datasets/adult/query", headers=me, json={"where": "sex = 1", "epsilon": 0.5}
        ).status_code
        == 200
    )
    service.store.close()


# -- a failing request fails alone; no rebuild on the admission path -------------------------------------


def test_a_failing_request_fails_alone_and_the_filters_are_never_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, alice = _service(tmp_path, 10.0, 2.0)
    service.create_analyst("mallory", {"adult": 2.0})
    mallory = service.store.get_analyst("mallory")
    service.query(alice, "adult", ["sex = 1"], 0.25)
    state = service._state("adult")

    resets: list[int] = []
    monkeypatch.setattr(shared.DatasetState, "reset", lambda self: resets.append(1))
    full_reads: list[int] = []
    real_loads_since = type(service.store).loads_since

    def counting(store: Any, dataset: str, seq: int) -> Any:
        if seq == 0:
            full_reads.append(1)
        return real_loads_since(store, dataset, seq)

    monkeypatch.setattr(type(service.store), "loads_since", counting)

    # Two requests prepared as the service prepares them, then admitted in ONE group, mallory's first.
    captured: list[Any] = []
    service._submit = lambda st, p, result: captured.append(p) or {}  # type: ignore[method-assign]
    service.query(mallory, "adult", ["sex = 0"], 0.5)
    service.query(alice, "adult", ["age < 30"], 0.5)
    del service._submit
    real_admit_one = service._admit_one

    def admit_one(tx: Any, st: Any, p: Any) -> Any:
        out = real_admit_one(tx, st, p)
        if p.analyst == "mallory":  # after its filters took the charge: they must be undone
            raise OverflowError("int too large to convert")
        return out

    monkeypatch.setattr(service, "_admit_one", admit_one)
    with state.admit_lock:
        service._admit(state, captured)
    bad, good = captured
    assert isinstance(bad.error, ServiceError) and bad.error.status == 500 and bad.result is None
    assert good.error is None and good.result is not None and len(good.result.answers) == 1
    rows = service.store.charges()
    assert [r.analyst for r in rows] == ["alice", "alice"]
    assert service.dataset_status("adult").spent_by_analyst == {"alice": 0.75, "mallory": 0.0}
    assert service.dataset_status("adult").spent == 0.75
    monkeypatch.setattr(service, "_admit_one", real_admit_one)

    # A commit that fails: every request of the group gets 503, and the filters are rolled back, not
    # marked stale and rebuilt from the whole ledger at the next admission.
    store = service.store
    service.store = FailingCommit(store)
    with pytest.raises(ServiceError) as err:
        service.query(alice, "adult", ["age < 30"], 0.5)
    assert err.value.status == 503
    service.store = store
    assert service.analyst_info(alice).datasets["adult"].spent == 0.75
    service.query(alice, "adult", ["age < 30"], 0.5)
    assert service.analyst_info(alice).datasets["adult"].spent == 1.25
    assert resets == [] and full_reads == []
    store.close()


# -- a hostile analyst next to an honest one, on a real server -------------------------------------------


def _hostile_requests(session: str | None) -> list[tuple[str, str, Any]]:
    """(method, path, body or raw bytes) at and beyond every limit."""
    deep: Any = {"conditions": {"age": {"range": [1, 2]}}}
    for _ in range(200):
        deep = {"conditions": deep}
    out: list[tuple[str, str, Any]] = [
        ("POST", "/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": e})
        for e in (1e-300, 5e-324, 1e300, 2.0**-53, 0.0, -1.0, 0.6)
    ]
    out += [
        ("POST", "/v1/datasets/adult/query", {"where": "sex = 1", "rho": 1e-300}),
        ("POST", "/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": "1e-300"}),
        ("POST", "/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": True}),
        ("POST", "/v1/datasets/adult/query", b'{"where": "sex = 1", "epsilon": NaN}'),
        ("POST", "/v1/datasets/adult/query", b'{"where": "sex = 1", "epsilon": 1e999}'),
        ("POST", "/v1/datasets/adult/query", {"where": "sex = 1", "epsilon": 0.01, "unknown": 1}),
        ("POST", "/v1/datasets/adult/query", {**deep, "epsilon": 0.01}),
        ("POST", "/v1/datasets/adult/query", {"where": "(" * 3000 + "sex = 1" + ")" * 3000, "epsilon": 0.01}),
        ("POST", "/v1/datasets/adult/query", {"where": " OR ".join(["sex = 1"] * 1500), "epsilon": 0.01}),
        (
            "POST",
            "/v1/datasets/adult/query",
            {"where": f"age IN ({', '.join(map(str, range(2000)))})", "epsilon": 0.01},
        ),
        ("POST", "/v1/datasets/adult/query", {"where": "age > 1e300", "epsilon": 0.01}),
        ("POST", "/v1/datasets/adult/batch", {"queries": ["sex = 1"] * 1001, "epsilon": 0.001}),
        ("POST", "/v1/datasets/adult/batch", {"queries": ["sex = 1"] * 3, "epsilon": 1e-300}),
        ("POST", "/v1/datasets/adult/cost", {"queries": ["sex = 1"], "epsilon": 5e-324}),
        ("POST", "/v1/datasets/adult/sessions", {"kind": "sparse_vector", "epsilon": 1e-300}),
        ("POST", "/v1/datasets/adult/sessions", {"kind": "sparse_vector", "epsilon": 1e300}),
        (
            "POST",
            "/v1/datasets/adult/sessions",
            {"kind": "guess_and_check", "epsilon": 0.01, "tolerance": 1e300},
        ),
    ]
    if session is not None:
        for t in (1e300, -1e300, 5e-324):
            out.append(("POST", f"/v1/sessions/{session}/query", {"where": "sex = 1", "threshold": t}))
    return out


@pytest.mark.slow
def test_hostile_requests_leave_other_analysts_unaffected(tmp_path: Path) -> None:
    """Two threads of a hostile analyst send every request above in a loop (bounded: 6 s or 400 each)
    while an honest analyst queries: the honest one gets only 200s, the hostile one never a 5xx."""
    with running(str(tmp_path / "ledger.sqlite"), log=tmp_path / "server.log") as server:
        path, schema = write_adult(tmp_path)
        admin = AdminClient(server.url, ADMIN_TOKEN)
        admin.register_dataset("adult", str(path), schema, budget=1e6)
        honest = admin.create_analyst("alice", {"adult": 1e5})
        hostile = admin.create_analyst("mallory", {"adult": 1.0})
        admin.close()
        hdr = _bearer(hostile)
        opened = httpx.post(
            server.url + "/v1/datasets/adult/sessions",
            headers=hdr,
            json={"kind": "sparse_vector", "epsilon": 0.01, "max_positives": 1000},
            timeout=30,
        )
        session = opened.json()["session"]["id"] if opened.status_code == 201 else None
        requests = _hostile_requests(session)
        deadline = time.monotonic() + 6.0
        stop = threading.Event()
        hostile_statuses: list[int] = []
        honest_statuses: list[int] = []
        resets: list[str] = []

        def attack(offset: int) -> None:
            with httpx.Client(base_url=server.url, headers=hdr, timeout=60) as c:
                for k in range(400):
                    if time.monotonic() > deadline:
                        break
                    method, p, body = requests[(k + offset) % len(requests)]
                    try:
                        if isinstance(body, bytes):
                            r = c.request(
                                method, p, content=body, headers={"Content-Type": "application/json"}
                            )
                        else:
                            r = c.request(method, p, json=body)
                    except httpx.TransportError as exc:
                        resets.append(f"{type(exc).__name__} {p} {str(body)[:60]}")
                        continue
                    hostile_statuses.append(r.status_code)
            stop.set()

        def query() -> None:
            with httpx.Client(base_url=server.url, headers=_bearer(honest), timeout=60) as c:
                k = 0
                while not stop.is_set() and time.monotonic() < deadline + 1:
                    body = {"where": f"age BETWEEN {20 + k % 40} AND {30 + k % 40}", "epsilon": 0.001}
                    honest_statuses.append(c.post("/v1/datasets/adult/query", json=body).status_code)
                    k += 1

        threads = [threading.Thread(target=attack, args=(i * 7,)) for i in range(2)]
        threads.append(threading.Thread(target=query))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        log = (tmp_path / "server.log").read_text(errors="replace")
    assert len(honest_statuses) >= 10 and set(honest_statuses) == {200}, sorted(set(honest_statuses))
    assert hostile_statuses and max(hostile_statuses) < 500, sorted(set(hostile_statuses))
    assert resets == []
    assert "Traceback" not in log, log[-3000:]
    json.dumps(hostile_statuses)  # (plain ints)
