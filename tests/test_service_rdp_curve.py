"""An RDP data set served as a curve of orders (issue 25, item 4), through the Python client over HTTP.

The data set gives ``orders`` instead of one ``alpha``: its amount is rho, every charge is a discrete
Gaussian of rho (a session: rho = eps^2 / 2) whose curve alpha rho loads every row it covers at each
order, and the budget and quotas are Gaussian curves kept at every order (MATH.md 2.7.2). Checked
against figures computed another way:

- registration from a target (epsilon, delta): the budget is the largest rho (6 digits) whose curve's
  conversion on the orders is at most epsilon; from per-order budgets: the largest rho whose curve fits
  each of them;
- ``/me`` and ``/cost``: the spend is the worst row's sum of rho (the rows enumerated here), its curve
  and (epsilon, delta) those of dp_accounting's RdpAccountant fed the same Gaussian charges;
- ``remaining`` is exact: a query of exactly that rho on the worst row is admitted, one a little
  larger refused (403);
- a restart replays the ledger to the same figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from overlapdp.errors import ServiceRefused
from overlapdp.privacy import RDP, ZCDP
from overlapdp.service.client import AdminClient, Client
from support.service import ADMIN_TOKEN, in_process, write_adult

ORDERS = [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
DELTA = 1e-6


def _rdp_accountant_epsilon(
    rhos: list[float], orders: list[float], delta: float
) -> tuple[list[float], float]:
    """dp_accounting's curve and epsilon of Gaussian charges of these rhos (noise multiplier 1/sqrt(2 rho))."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

    acc = rdp_acc.RdpAccountant(orders=orders)
    for rho in rhos:
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=1 / math.sqrt(2 * rho)))
    return list(acc._rdp), float(acc.get_epsilon(delta))


def test_an_rdp_curve_data_set_over_http(tmp_path: Path) -> None:
    path, schema = write_adult(tmp_path)
    with in_process(tmp_path) as srv:
        admin = AdminClient(srv["url"], ADMIN_TOKEN)
        made = admin.register_dataset(
            "curve",
            str(path),
            schema,
            definition="rdp",
            orders=ORDERS,
            epsilon=2.0,
            delta=DELTA,
            engine="pandas",
        )
        rho_b = made["budget"]
        assert made["parameter"] == "rho" and made["parameters"]["orders"] == ORDERS
        assert RDP(tuple(ORDERS), ZCDP(rho_b).to_rdp(ORDERS).epsilons).epsilon_at(DELTA) <= 2.0
        assert ZCDP(rho_b * 1.00001).to_rdp(ORDERS).epsilon_at(DELTA) > 2.0 * (1 - 1e-5)
        assert made["budget_epsilon_delta"]["epsilon"] <= 2.0
        # per-order budgets: the largest rho whose curve alpha rho fits each
        per_order = [0.3, 0.5, 0.7, 1.2, 3.0, 4.0]
        other = admin.register_dataset(
            "curve2", str(path), schema, definition="rdp", orders=ORDERS, budgets=per_order, engine="pandas"
        )
        rho2 = other["budget"]
        assert all(a * rho2 <= b for a, b in zip(ORDERS, per_order, strict=True))
        assert any(a * rho2 * 1.00001 > b for a, b in zip(ORDERS, per_order, strict=True))
        with pytest.raises(ServiceRefused) as bad:  # one budget per order
            admin.register_dataset(
                "bad", str(path), schema, definition="rdp", orders=ORDERS, budgets=[1.0], engine="pandas"
            )
        assert bad.value.status == 400 and "one budget per order" in bad.value.body["detail"]
        with pytest.raises(ServiceRefused) as both:
            admin.register_dataset(
                "bad",
                str(path),
                schema,
                definition="rdp",
                orders=ORDERS,
                alpha=2.0,
                budget=1.0,
                engine="pandas",
            )
        assert both.value.status == 400 and "either 'alpha'" in both.value.body["detail"]

        tokens = {"ann": admin.create_analyst("ann", {"curve": 0.05})}
        ann = Client(srv["url"], tokens["ann"], timeout=60)
        rhos = [0.004, 0.002, 0.006]
        queries = ["age BETWEEN 20 AND 29", "age BETWEEN 25 AND 40", "sex = 1"]
        for q, rho in zip(queries, rhos, strict=True):
            ann.query("curve", q, rho=rho)
        # the worst row: one covered by all three (age 25-29, sex 1): 0.012
        acct = ann.account("curve")
        assert acct["spent"] == pytest.approx(sum(rhos), rel=1e-12) and acct["spent"] >= sum(rhos)
        curve = acct["curve"]
        assert curve["orders"] == ORDERS and curve["limit"] == list(ZCDP(0.05).to_rdp(ORDERS).epsilons)
        theirs, eps = _rdp_accountant_epsilon(rhos, ORDERS, DELTA)
        for ours, t in zip(curve["spent"], theirs, strict=True):
            assert t <= ours <= t * (1 + 1e-12)
        assert eps <= acct["spent_epsilon_delta"]["epsilon"] <= eps * (1 + 1e-9)

        # a dry run: the batch's own cost in rho and the curve after it
        dry = ann.cost("curve", ["age < 30", "age >= 30"], rho=0.01)
        assert dry["cost"]["rho"] == 0.01 and dry["cost"]["batch"]["overlap"] == 0.01
        assert dry["cost"]["batch"]["sequential"] == 0.02
        assert dry["spent_after"] == pytest.approx(sum(rhos) + 0.01, rel=1e-12)
        assert dry["curve"]["spent"] == list(ZCDP(dry["spent_after"]).to_rdp(ORDERS).epsilons)
        assert dry["admissible"] and dry["remaining"] == acct["remaining"]

        # remaining is exact: exactly it on the worst row is admitted, a little more refused
        left = acct["remaining"]
        assert left == pytest.approx(0.05 - sum(rhos), rel=1e-9)
        worst = "age BETWEEN 25 AND 29 AND sex = 1"
        with pytest.raises(ServiceRefused) as over:
            ann.query("curve", worst, rho=math.nextafter(left, 1.0) * (1 + 1e-9))
        assert over.value.status == 403
        ann.query("curve", worst, rho=left)
        full = ann.account("curve")
        assert full["remaining"] == 0.0 and all(
            s <= q for s, q in zip(full["curve"]["spent"], full["curve"]["limit"], strict=True)
        )
        # a session is charged rho = eps^2 / 2 on every row (its Gaussian curve at each order)
        tokens["bob"] = admin.create_analyst("bob", {"curve": 1.0})
        bob = Client(srv["url"], tokens["bob"], timeout=60)
        bob.open_session("curve", "sparse_vector", epsilon=0.2)
        assert bob.account("curve")["spent"] == pytest.approx(0.02, rel=1e-12)
        charges = admin.full_ledger("curve")
        session = charges[charges["kind"] == "session"].iloc[0]
        assert session["cost"] == {
            "definition": "rdp",
            "rho": 0.020000000000000004,
            "load": 0.020000000000000004,
        }
        assert charges[charges["kind"] == "query"].iloc[0]["mechanism"]["orders"] == ORDERS
        status = admin.status("curve")
        assert status["curve"]["limit"] == list(ZCDP(rho_b).to_rdp(ORDERS).epsilons)
        before = (full["spent"], full["curve"], bob.account("curve")["spent"])

    with in_process(tmp_path) as srv:  # a restart replays the ledger
        ann = Client(srv["url"], tokens["ann"], timeout=60)
        bob = Client(srv["url"], tokens["bob"], timeout=60)
        again = ann.account("curve")
        assert (again["spent"], again["curve"], bob.account("curve")["spent"]) == before


def test_serve_takes_orders_as_a_comma_separated_list() -> None:
    from overlapdp.cli.serve_cmd import _orders
    from overlapdp.errors import OverlapDPError

    assert _orders("2, 4,8.5") == [2.0, 4.0, 8.5]
    with pytest.raises(OverlapDPError, match="comma-separated numbers"):
        _orders("2,four")
