"""Budgets in the user's terms, end to end (issue 24 item 4): the service takes (epsilon, delta) for a
data set's budget and an analyst's quota, calibrated as the CLI's ``--epsilon``; the CLI's budget and
per-query figures, typed back into the service, are admitted."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cli_helpers import run
from overlapdp.mechanisms.answering import calibrate_budget
from overlapdp.privacy.definitions import TCDP, ZCDP
from overlapdp.service import AdminKey, QueryService, create_app, open_ledger
from support.service import ADMIN_TOKEN, write_adult

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: Five nested ranges (a row aged 60+ is in all five) and two more: 7 queries, maximum overlap 5.
QUERIES = ["age >= 20", "age >= 30", "age >= 40", "age >= 50", "age >= 60", "age < 18", "age < 19"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    path, schema = write_adult(tmp_path)
    client = TestClient(create_app(service, AdminKey(ADMIN_TOKEN)))
    yield {"client": client, "path": path, "schema": schema, "folder": tmp_path}
    service.store.close()


def _register(world: dict[str, Any], name: str, **body: Any) -> Any:
    return world["client"].post(
        "/v1/admin/datasets",
        headers=ADMIN,
        json={
            "name": name,
            "path": str(world["path"]),
            "schema": world["schema"],
            "engine": "pandas",
            **body,
        },
    )


def test_the_service_takes_epsilon_at_the_data_sets_delta(world: dict[str, Any]) -> None:
    client = world["client"]
    made = _register(world, "z", definition="zcdp", epsilon=1.0, delta=1e-6)
    assert made.status_code == 201, made.text
    rho = made.json()["budget"]
    assert rho == calibrate_budget("zcdp", 1.0, 1e-6)  # the CLI's calibration, not another one
    assert ZCDP(rho).epsilon_at(1e-6) <= 1.0 and made.json()["budget_epsilon_delta"]["epsilon"] <= 1.0
    assert _register(world, "p", definition="pure", epsilon=2.0).json()["budget"] == 2.0
    assert _register(world, "a", definition="approx", epsilon=1.5, delta=1e-7).json()["budget"] == 1.5
    both = _register(world, "x", definition="zcdp", budget=0.1, epsilon=1.0)
    assert both.status_code == 400 and "not both" in both.json()["detail"]
    neither = _register(world, "y", definition="zcdp")
    assert neither.status_code == 400
    # tCDP (and RDP) by the answers' own (epsilon, delta) line: the largest rho (6 digits) within it
    tcdp = _register(world, "t", definition="tcdp", omega=64, epsilon=1.0)
    assert tcdp.status_code == 201, tcdp.text
    line = tcdp.json()["budget_epsilon_delta"]["epsilon"]
    assert 0.999 < line <= 1.0 and TCDP(tcdp.json()["budget"] * 1.001, 64).epsilon_at(1e-6) > 1.0
    # with omega = 4 no rho reaches epsilon 1 at delta 1e-6 (the orders stop at 4: ln(1e6) / 3 > 1)
    low = _register(world, "t4", definition="tcdp", omega=4, epsilon=1.0)
    assert low.status_code == 400 and "below what the conversion certifies" in low.json()["detail"]
    r = client.post("/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quota_epsilons": {"z": 0.5}})
    assert r.status_code == 201, r.text
    quota = client.get("/v1/admin/analysts", headers=ADMIN).json()[0]["datasets"]["z"]
    assert quota["quota"] == calibrate_budget("zcdp", 0.5, 1e-6)
    assert quota["quota_epsilon_delta"]["epsilon"] <= 0.5
    r = client.put("/v1/admin/analysts/ann/quotas/z", headers=ADMIN, json={"epsilon": 0.8})
    assert r.json()["datasets"]["z"]["quota"] == calibrate_budget("zcdp", 0.8, 1e-6)
    r = client.put("/v1/admin/datasets/z/budget", headers=ADMIN, json={"definition": "zcdp", "epsilon": 2.0})
    assert r.json()["budget"] == calibrate_budget("zcdp", 2.0, 1e-6)


def test_the_clis_figures_typed_back_into_the_service_are_admitted(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's walk: answer --definition zcdp --epsilon 1 --delta 1e-6 printed rho and a per-query
    rho rounded UP; typed into the service they made a budget above epsilon 1 and a 7-query batch was
    refused (5 x the printed share > the quota). Both are now rounded down."""
    folder = world["folder"]
    (folder / "s.json").write_text(json.dumps(world["schema"]))
    (folder / "q.jsonl").write_text("\n".join(json.dumps({"where": q}) for q in QUERIES))
    args = ["answer", "--schema", str(folder / "s.json"), "--data", str(world["path"]), "--queries"]
    args += [str(folder / "q.jsonl"), "--definition", "zcdp", "--epsilon", "1", "--delta", "1e-6"]
    code, out, err = run(args, capsys)
    assert code == 0, err
    text = " ".join(out.split())
    budget = float(re.search(r"│ budget │ ρ = ([0-9.e-]+)", text).group(1))  # type: ignore[union-attr]
    share = float(re.search(r"│ per-query budget │ ρ = ([0-9.e-]+)", text).group(1))  # type: ignore[union-attr]
    assert re.search(r"max overlap \(gamma\) │ 5 ", text)
    assert ZCDP(budget).epsilon_at(1e-6) <= 1.0  # typed back, the budget is within what was asked
    client = world["client"]
    assert _register(world, "z", definition="zcdp", budget=budget).status_code == 201
    r = client.post("/v1/admin/analysts", headers=ADMIN, json={"name": "ann", "quotas": {"z": budget}})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    batch = client.post("/v1/datasets/z/batch", headers=headers, json={"queries": QUERIES, "rho": share})
    assert batch.status_code == 200, batch.text
