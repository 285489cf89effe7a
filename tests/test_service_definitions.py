"""Every privacy definition served end to end over HTTP: create, query until the quota refuses, restart.

For each of pure DP, zCDP, GDP, RDP (one order), tCDP and approximate DP, a data set is registered with
its definition's parameters, one analyst queries the same count until the quota refuses, and the number
admitted is checked against an independent computation: exact sums of the declared float amounts as
Fractions (``n * a <= Q``; GDP ``n * mu^2 <= Q^2``), and for approximate DP the combined advanced / basic
rule of the adaptive filter evaluated with 50-digit arithmetic (mpmath). The service is then restarted
on the same ledger: the spend, the (epsilon, delta) line and the refusal are the same; a raised quota
admits exactly the further number the same computation gives.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import mpmath
import pytest
from fastapi.testclient import TestClient

from overlapdp.privacy.definitions import RDP, TCDP, ZCDP
from overlapdp.service import AdminKey, QueryService, create_app, definitions, logged_filter, open_ledger
from overlapdp.service.client import AdminClient, Client, QuotaExceeded
from support.marks import slow_where
from support.service import ADMIN_TOKEN, REPO, free_port, write_adult

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DELTA = 1e-6
QUERY = {"where": "sex = 1"}


def _approx_fits(n: int, eps: float, quota: float, delta: float) -> bool:
    """The adaptive (epsilon, delta) filter's rule for n pure charges of ``eps`` on one row, computed
    independently (MATH.md 5.6): basic composition ``n eps <= Q`` exactly, or advanced
    composition ``sqrt(2 ln(1/delta') n eps^2) + n eps^2 / 2 <= Q`` with ``delta' = delta / 2``."""
    if n * Fraction(eps) <= Fraction(quota):
        return True
    with mpmath.workdps(50):
        s2 = n * mpmath.mpf(eps) ** 2
        value = mpmath.sqrt(2 * mpmath.log(1 / (mpmath.mpf(delta) / 2)) * s2) + s2 / 2
        # the filter evaluates this in floats with a relative margin of 1e-14: stay clear of the edge
        assert abs(value - quota) > 1e-9 * quota, "the test's amounts sit on the filter's edge"
        return bool(value <= quota)


def _most(fits: Callable[[int], bool]) -> int:
    n = 0
    while fits(n + 1):
        n += 1
    return n


#: definition -> (data-set parameters, per-query amount, quota, how many fit in a quota)
CASES: dict[str, tuple[dict[str, Any], float, float, Callable[[float, float], int]]] = {
    "pure": ({}, 0.1, 1.0, lambda a, q: _most(lambda n: n * Fraction(a) <= Fraction(q))),
    "zcdp": ({}, 0.1, 1.0, lambda a, q: _most(lambda n: n * Fraction(a) <= Fraction(q))),
    "gdp": ({}, 0.3, 1.0, lambda a, q: _most(lambda n: n * Fraction(a) ** 2 <= Fraction(q) ** 2)),
    "rdp": ({"alpha": 8.0}, 0.1, 1.0, lambda a, q: _most(lambda n: n * Fraction(a) <= Fraction(q))),
    "tcdp": ({"omega": 4.0}, 0.1, 1.0, lambda a, q: _most(lambda n: n * Fraction(a) <= Fraction(q))),
    # 9 fit in the quota of 1 by basic composition (10 * 0.1 > 1 exactly), 23 in the raised quota of 2
    # by advanced composition (basic alone: 19)
    "approx": ({"delta": 1e-3}, 0.1, 1.0, lambda a, q: _most(lambda n: _approx_fits(n, a, q, 1e-3))),
}


def _line(definition: str, params: dict[str, Any], amount: float) -> float:
    """The (epsilon, delta) line's epsilon by the library's conversions, named here per definition."""
    delta = params.get("delta", DELTA)
    if amount == 0:
        return 0.0
    if definition in ("pure", "approx"):
        return amount
    if definition == "zcdp":
        return ZCDP(amount).epsilon_at(delta)
    if definition == "gdp":  # the discrete Gaussian's declared mu^2/2-zCDP
        rho = Fraction(amount) ** 2 / 2
        r = float(rho)
        return ZCDP(r if Fraction(r) >= rho else math.nextafter(r, math.inf)).epsilon_at(delta)
    if definition == "rdp":
        return RDP((params["alpha"],), (amount,)).epsilon_at(delta)
    return TCDP(amount, params["omega"]).epsilon_at(delta)


def _check_line(definition: str, params: dict[str, Any], amount: float, line: dict[str, float]) -> None:
    """The line equals the library's conversion, and lies within a textbook bound computed here."""
    delta = params.get("delta", DELTA)
    assert line["delta"] == delta
    assert line["epsilon"] == _line(definition, params, amount)
    log = math.log(1 / delta)
    if definition in ("zcdp", "tcdp", "gdp"):
        rho = amount**2 / 2 if definition == "gdp" else amount
        assert line["epsilon"] <= rho + 2 * math.sqrt(rho * log) + 1e-12  # Bun and Steinke 2016 Prop. 1.3
        if definition == "tcdp":  # orders capped at omega: never better than zCDP's
            assert line["epsilon"] >= ZCDP(amount).epsilon_at(delta)
    if definition == "rdp":
        assert line["epsilon"] <= amount + log / (params["alpha"] - 1) + 1e-12  # Mironov 2017 Prop. 3


class World:
    """A service over one SQLite ledger, restartable; HTTP through FastAPI's test client."""

    def __init__(self, folder: Path) -> None:
        self.ledger = folder / "ledger.sqlite"
        self.folder = folder
        self.start()

    def start(self) -> None:
        self.service = QueryService(open_ledger(self.ledger))
        self.http = TestClient(create_app(self.service, AdminKey(ADMIN_TOKEN)))

    def restart(self) -> None:
        self.http.close()
        self.service.store.close()
        self.start()

    def close(self) -> None:
        self.http.close()
        self.service.store.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def _register(w: World, definition: str, params: dict[str, Any], budget: float) -> dict[str, Any]:
    path, schema = write_adult(w.folder)
    body = {"name": "adult", "path": str(path), "schema": schema, "engine": "pandas"}
    r = w.http.post(
        "/v1/admin/datasets",
        headers=ADMIN,
        json={**body, "definition": definition, "budget": budget, **params},
    )
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _until_refused(w: World, token: str, amount_name: str, amount: float) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    n = 0
    while True:
        r = w.http.post("/v1/datasets/adult/query", headers=headers, json={**QUERY, amount_name: amount})
        if r.status_code == 403:
            body = r.json()
            assert "quota" in body["detail"] and body["quota_admits"] is False
            assert body["spent_epsilon_delta"]["delta"] > 0 and body["remaining_at_least"] >= 0
            return n
        assert r.status_code == 200, r.text
        assert "spent_epsilon_delta" in r.json()
        n += 1
        assert n < 10_000


@pytest.mark.parametrize("definition", slow_where(CASES, ["zcdp", "gdp"]))  # 1.4 and 0.7 s of CPU
def test_each_definition_is_served_end_to_end(world: World, definition: str) -> None:
    params, amount, quota, most = CASES[definition]
    name = definitions.served(definition).amount
    info = _register(world, definition, params, 100 * quota)
    assert info["definition"] == definition and info["parameter"] == name
    assert info["parameters"]["delta"] == params.get("delta", DELTA)
    _check_line(definition, info["parameters"], 100 * quota, info["budget_epsilon_delta"])
    token = world.http.post(
        "/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"adult": quota}}
    ).json()["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    n = _until_refused(world, token, name, amount)
    assert n == most(amount, quota) > 0
    me = world.http.get("/v1/me", headers=bearer).json()["datasets"]["adult"]
    _check_line(definition, info["parameters"], me["spent"], me["spent_epsilon_delta"])
    _check_line(definition, info["parameters"], quota, me["quota_epsilon_delta"])
    assert me["spent"] <= quota
    status = world.http.get("/v1/admin/datasets/adult", headers=ADMIN).json()
    assert status["spent"] == me["spent"]
    _check_line(definition, info["parameters"], status["spent"], status["spent_epsilon_delta"])
    guarantee = status["guarantee"]
    assert guarantee[name] == me["spent"]
    _check_line(definition, info["parameters"], guarantee[name], guarantee["epsilon_delta"])
    assert ("by_concurrent_composition" in guarantee) == (definition != "approx")

    world.restart()
    again = world.http.get("/v1/me", headers=bearer).json()["datasets"]["adult"]
    assert again == me  # the same spend, to the bit, and the same (epsilon, delta) lines
    r = world.http.post("/v1/datasets/adult/query", headers=bearer, json={**QUERY, name: amount})
    assert r.status_code == 403  # the refusal persists
    assert len(world.service.store.charges(dataset="adult")) == n

    # A raised quota (the filter's budget changed in place) admits exactly the further queries.
    r = world.http.put("/v1/admin/analysts/ann/quotas/adult", headers=ADMIN, json={"quota": 2 * quota})
    assert r.status_code == 200, r.text
    m = _until_refused(world, token, name, amount)
    assert n + m == most(amount, 2 * quota)


@pytest.mark.parametrize(
    ("definition", "params", "epsilon", "expected"),
    [
        ("pure", {}, 0.3, Fraction(0.3)),
        ("approx", {}, 0.3, Fraction(0.3)),
        ("zcdp", {}, 0.3, Fraction(0.3) ** 2 / 2),
        ("tcdp", {"omega": 3.0}, 0.3, Fraction(0.3) ** 2 / 2),
        ("gdp", {}, 0.3, Fraction(0.3)),  # mu = eps: mu^2/2 = eps^2/2, the session's zCDP
        ("rdp", {"alpha": 4.0}, 0.3, min(Fraction(0.3), 4 * Fraction(0.3) ** 2 / 2)),
        ("rdp", {"alpha": 64.0}, 0.3, Fraction(0.3)),
    ],
)
def test_sessions_are_charged_their_pure_guarantee_converted(
    world: World, definition: str, params: dict[str, Any], epsilon: float, expected: Fraction
) -> None:
    _register(world, definition, params, 10.0)
    token = world.http.post(
        "/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"adult": 5.0}}
    ).json()["token"]
    r = world.http.post(
        "/v1/datasets/adult/sessions",
        headers={"Authorization": f"Bearer {token}"},
        json={"kind": "sparse_vector", "epsilon": epsilon},
    )
    assert r.status_code == 201, r.text
    (charge,) = world.service.store.charges(dataset="adult")
    load = Fraction(charge.cost["load"])
    assert load == _up(expected)  # the smallest float at or above the exact conversion
    spent = world.http.get("/v1/me", headers={"Authorization": f"Bearer {token}"}).json()["datasets"]["adult"]
    assert spent["spent"] == float(load)


def _up(x: Fraction) -> Fraction:
    f = float(x)
    return Fraction(f if Fraction(f) >= x else math.nextafter(f, math.inf))


def test_optimal_composition_is_refused_for_adaptive_use(world: World) -> None:
    path, schema = write_adult(world.folder)
    body = {"name": "adult", "path": str(path), "schema": schema, "engine": "pandas", "budget": 1.0}
    r = world.http.post(
        "/v1/admin/datasets", headers=ADMIN, json={**body, "definition": "approx", "composition": "optimal"}
    )
    assert r.status_code == 400
    assert r.json()["error"] == "AdaptivityError"
    assert "optimal" in r.json()["detail"] and "advanced" in r.json()["detail"]
    assert world.service.store.get_dataset("adult") is None


@pytest.mark.parametrize(
    ("definition", "params", "problem"),
    [
        ("tcdp", {}, "omega"),
        ("rdp", {}, "alpha"),
        ("rdp", {"alpha": 1.0}, "alpha"),
        ("tcdp", {"omega": 0.5}, "omega"),
        ("pure", {"omega": 3.0}, "omega"),
        ("zcdp", {"delta": 0}, "delta"),
        ("approx", {"delta": 1.5}, "delta"),
        ("hockey", {}, "hockey"),
    ],
)
def test_a_definition_without_its_parameters_is_refused(
    world: World, definition: str, params: dict[str, Any], problem: str
) -> None:
    path, schema = write_adult(world.folder)
    body = {"name": "adult", "path": str(path), "schema": schema, "engine": "pandas", "budget": 1.0}
    r = world.http.post(
        "/v1/admin/datasets", headers=ADMIN, json={**body, "definition": definition, **params}
    )
    assert r.status_code == 400, r.text
    assert problem in r.json()["detail"]


def test_the_wrong_amount_for_the_definition_is_refused(world: World) -> None:
    _register(world, "gdp", {}, 10.0)
    token = world.http.post(
        "/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"adult": 1.0}}
    ).json()["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    for wrong in ({"rho": 0.1}, {"epsilon": 0.1}, {"epsilon_alpha": 0.1}):
        r = world.http.post("/v1/datasets/adult/query", headers=bearer, json={**QUERY, **wrong})
        assert r.status_code == 400 and "'mu'" in r.json()["detail"]
    r = world.http.post("/v1/datasets/adult/query", headers=bearer, json={**QUERY, "mu": 0.1, "rho": 0.1})
    assert r.status_code == 400
    assert world.service.store.charges() == []


def test_definition_and_parameters_are_fixed_once_charged(world: World) -> None:
    _register(world, "tcdp", {"omega": 4.0}, 10.0)
    token = world.http.post(
        "/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"adult": 1.0}}
    ).json()["token"]
    # before any charge the parameters may change
    r = world.http.put(
        "/v1/admin/datasets/adult/budget",
        headers=ADMIN,
        json={"definition": "tcdp", "budget": 5.0, "omega": 8.0},
    )
    assert r.status_code == 200 and r.json()["parameters"]["omega"] == 8.0
    r = world.http.post(
        "/v1/datasets/adult/query", headers={"Authorization": f"Bearer {token}"}, json={**QUERY, "rho": 0.1}
    )
    assert r.status_code == 200
    for change in (
        {"definition": "zcdp", "budget": 5.0},
        {"definition": "tcdp", "budget": 5.0, "omega": 2.0},
    ):
        r = world.http.put("/v1/admin/datasets/adult/budget", headers=ADMIN, json=change)
        assert r.status_code == 409 and "can no longer change" in r.json()["detail"]
    # the budget alone still may, and the parameters stay
    r = world.http.put(
        "/v1/admin/datasets/adult/budget", headers=ADMIN, json={"definition": "tcdp", "budget": 6.0}
    )
    assert r.status_code == 200 and r.json()["budget"] == 6.0 and r.json()["parameters"]["omega"] == 8.0
    world.restart()
    status = world.http.get("/v1/admin/datasets/adult", headers=ADMIN).json()
    assert status["parameters"] == {"delta": DELTA, "omega": 8.0} and status["spent"] == 0.1


def test_a_ledger_written_before_parameters_reads_back(tmp_path: Path) -> None:
    """A data set row whose definition column is the bare name (older ledgers) gets the default delta."""
    store = open_ledger(tmp_path / "l.sqlite")
    path, schema = write_adult(tmp_path)
    service = QueryService(store)
    service.register_dataset("adult", str(path), schema, "pandas", "zcdp", 1.0)
    conn = store._conn()  # type: ignore[attr-defined]
    conn.execute("UPDATE datasets SET definition = 'zcdp'")
    store.close()
    again = QueryService(open_ledger(tmp_path / "l.sqlite"))
    (info,) = again.list_datasets()
    assert info.definition == "zcdp" and info.parameters == {"delta": DELTA}
    again.store.close()


# -- the CLI: overlapdp serve --definition ... ------------------------------------------------------------


@pytest.mark.slow
def test_serve_cli_serves_a_tcdp_data_set_across_a_restart(tmp_path: Path) -> None:
    path, schema = write_adult(tmp_path)
    schema_file = tmp_path / "schema.json"
    import json

    schema_file.write_text(json.dumps(schema), encoding="utf-8")
    ledger = tmp_path / "l.sqlite"

    def serve() -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        env = {**os.environ, "OVERLAPDP_ADMIN_TOKEN": ADMIN_TOKEN, "PYTHONPATH": str(REPO / "src")}
        cmd = [
            sys.executable,
            "-m",
            "overlapdp.cli.main",
            "serve",
            "--port",
            str(port),
            "--ledger",
            str(ledger),
        ]
        cmd += ["--data", str(path), "--schema", str(schema_file), "--engine", "pandas", "--name", "adult"]
        cmd += ["--definition", "tcdp", "--omega", "4", "--budget", "2", "--delta", "1e-7"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the service exited"
            try:
                if httpx.get(url + "/openapi.json", timeout=1.0).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        proc.kill()
        raise AssertionError("the service did not start")

    proc, url = serve()
    try:
        admin = AdminClient(url, ADMIN_TOKEN)
        status = admin.status("adult")
        assert status["definition"] == "tcdp" and status["parameters"] == {"delta": 1e-7, "omega": 4.0}
        token = admin.create_analyst("ann", {"adult": 0.5})
        ann = Client(url, token)
        n = 0
        with pytest.raises(QuotaExceeded):
            while True:
                ann.query("adult", "sex = 1", rho=0.1)
                n += 1
        assert n == 5 - 1 * (5 * Fraction(0.1) > Fraction(0.5))
        before = admin.status("adult")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    proc, url = serve()  # --data again: the data set is registered already and kept as it is
    try:
        admin = AdminClient(url, ADMIN_TOKEN)
        after = admin.status("adult")
        assert (
            after["spent"] == before["spent"]
            and after["spent_epsilon_delta"] == before["spent_epsilon_delta"]
        )
        assert after["spent_epsilon_delta"]["epsilon"] == TCDP(before["spent"], 4.0).epsilon_at(1e-7)
        with pytest.raises(QuotaExceeded):
            Client(url, token).query("adult", "sex = 1", rho=0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_approx_case_exercises_both_rules() -> None:
    _, amount, quota, most = CASES["approx"]
    assert most(amount, quota) == 9 and most(amount, 2 * quota) == 23  # basic alone would give 19


# -- the library filter under the service's replay and budget changes ------------------------------------


def _grid_filter(budget: Any) -> tuple[Any, Any]:
    from overlapdp.privacy.privacy_filter import PrivacyFilter
    from overlapdp.query import parse_where
    from overlapdp.schema import Schema

    schema = Schema.from_json({"a": 8})
    return PrivacyFilter(schema, budget), parse_where(schema, "a < 4")


def test_replayed_copies_of_a_gdp_charge_compose_in_l2() -> None:
    """k recorded copies of mu load a row with sqrt(k) mu (the old replay counted k mu)."""
    from overlapdp.privacy.definitions import GDP

    f, q = _grid_filter(GDP(10.0))
    f.record(logged_filter.Charged("gdp", 0.3), q, "g", times=11)
    exact = 11 * Fraction(0.3) ** 2
    value = f.value()
    assert Fraction(value) ** 2 >= exact and Fraction(math.nextafter(value, 0)) ** 2 < exact


def test_replayed_copies_of_an_rdp_charge_never_report_below_their_exact_sum() -> None:
    """9 copies of 0.1 are 9 * Fraction(0.1) > 0.9: the old replay's float 9 * 0.1 = 0.9 under-reported."""
    f, q = _grid_filter(RDP((8.0,), (10.0,)))
    f.record(logged_filter.Charged("rdp", 0.1, 8.0), q, "r", times=9)
    (value,) = f.value()
    exact = 9 * Fraction(0.1)
    assert Fraction(value) >= exact and Fraction(math.nextafter(value, 0)) < exact


def test_filter_budgets_of_every_definition_change_in_place() -> None:
    from overlapdp.privacy.definitions import ApproxDP, BudgetError

    for budget, raised, amount, definition in [
        (TCDP(0.25, 4.0), TCDP(0.5, 4.0), 0.25, "tcdp"),
        (RDP((8.0,), (0.25,)), RDP((8.0,), (0.5,)), 0.25, "rdp"),
        (ApproxDP(0.25, 1e-6), ApproxDP(0.5, 1e-6), 0.25, "approx"),
    ]:
        f, q = _grid_filter(budget)
        charge = logged_filter.Charged(definition, amount, 8.0)
        assert f.try_charge(charge, q, "x").admitted
        assert not f.try_charge(charge, q, "y").admitted
        f.set_budget(raised)
        assert f.try_charge(charge, q, "z").admitted
        assert not f.try_charge(charge, q, "w").admitted
    f, _ = _grid_filter(TCDP(0.25, 4.0))
    with pytest.raises(BudgetError, match="omega"):
        f.set_budget(TCDP(0.5, 8.0))
    f, _ = _grid_filter(RDP((8.0,), (0.25,)))
    with pytest.raises(BudgetError, match="orders"):
        f.set_budget(RDP((4.0,), (0.5,)))


@pytest.mark.parametrize(
    ("definition", "amount_name", "first", "left"),
    [
        ("gdp", "mu", 0.6, Fraction(8, 10)),
        ("pure", "epsilon", 0.6, Fraction(4, 10)),
        ("zcdp", "rho", 0.3, Fraction(7, 10)),
    ],
)
def test_remaining_is_the_largest_load_one_more_charge_on_the_worst_row_may_carry(
    world: World, definition: str, amount_name: str, first: float, left: Fraction
) -> None:
    """After one charge on ``sex = 1`` with a quota of 1, ``remaining`` is what one more charge there may
    carry: GDP composes as sqrt(sum mu^2), so 0.6 spent leaves 0.8 (reported as quota - spent, 0.4, it
    understated by half); additive amounts leave the difference. Never above the exact value; a charge
    of ``remaining`` is admitted, one slightly above it refused."""
    _register(world, definition, {}, 10.0)
    r = world.http.post("/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"adult": 1.0}})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = world.http.post("/v1/datasets/adult/query", headers=headers, json={**QUERY, amount_name: first})
    assert r.status_code == 200, r.text
    remaining = r.json()["remaining_at_least"]
    assert Fraction(remaining) <= left and float(left) - remaining < 1e-9
    over = world.http.post(
        "/v1/datasets/adult/query", headers=headers, json={**QUERY, amount_name: float(left) * (1 + 1e-9)}
    )
    assert over.status_code == 403
    assert Fraction(over.json()["remaining_at_least"]) <= left
    ok = world.http.post("/v1/datasets/adult/query", headers=headers, json={**QUERY, amount_name: remaining})
    assert ok.status_code == 200, ok.text


def test_the_api_literals_list_the_measures() -> None:
    # the OpenAPI schema's Literal types are the one copy of the names outside the measures: kept equal
    from typing import get_args

    from overlapdp.privacy.measures import MEASURES
    from overlapdp.service.responses import AmountName, DefinitionName

    assert get_args(DefinitionName) == tuple(m.name for m in MEASURES)
    assert set(get_args(AmountName)) == {m.amount for m in MEASURES} == set(definitions.AMOUNTS)
