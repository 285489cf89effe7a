"""``POST /v1/datasets/{name}/plan`` (issue 25 item 1: the allocation and the error targets over HTTP),
through the Python client on a real served application, in process and in a worker process.

Independent truth: the returned shares are checked on every row of the data set's small domain by
brute force (exact Fractions: the shares of the queries covering a row sum to at most the budget), the
error-target budget against the discrete Laplace's closed-form tail at its per-query share, and nothing
is spent (``me()`` before and after)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from overlapdp.query import parse_where
from overlapdp.schema import IntAttribute, Schema
from overlapdp.service import AdminKey, Limits, QueryService, create_app, open_ledger
from overlapdp.service.client import Client, ServiceRefused
from overlapdp.service.embedded import _free_port
from overlapdp.service.serving import ConnectionLimits, uvicorn_config
from support.marks import slow_after
from support.service import TEST_REQUEST_SECONDS, wait_until

ADMIN = "test-admin-token-0123456789abcdef"
SCHEMA = Schema((IntAttribute("age", 0, 9), IntAttribute("hours", 0, 4)))
QUERIES = ["TRUE", *[f"age = {a}" for a in range(10)], "hours <= 1", "hours >= 2"]


@contextmanager
def _served(tmp_path: Path, workers: int) -> Iterator[tuple[Client, QueryService]]:
    import uvicorn

    # a budget no load exhausts, a worker no busy machine starves
    limits = Limits(cost_workers=workers, cost_worker_nice=0, request_seconds=TEST_REQUEST_SECONDS)
    service = QueryService(open_ledger(tmp_path / "l.sqlite"), limits=limits)
    pd.DataFrame({"age": [1, 2, 3], "hours": [0, 1, 4]}).to_csv(tmp_path / "d.csv", index=False)
    service.register_dataset("t", str(tmp_path / "d.csv"), SCHEMA.to_json(), "pandas", "pure", 10.0)
    service.register_dataset(
        "r", str(tmp_path / "d.csv"), SCHEMA.to_json(), "pandas", "rdp", 10.0, {"alpha": 4}
    )
    token = service.create_analyst("ann", {"t": 5.0, "r": 5.0}).token
    server = uvicorn.Server(
        uvicorn_config(
            create_app(service, AdminKey(ADMIN)),
            "127.0.0.1",
            port := _free_port(),
            ConnectionLimits(),
            log_level="critical",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    pool = service.dry_runs
    wait_until(lambda: server.started and (pool is None or pool.ready), "the server's and its worker's start")
    client = Client(f"http://127.0.0.1:{port}", token)
    try:
        yield client, service
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
        service.close()


def _worst_row(shares: list[float]) -> Fraction:
    qs = [parse_where(SCHEMA, q) for q in QUERIES]
    rows = [(a, h) for a in range(10) for h in range(5)]
    return max(
        sum((Fraction(s) for s, q in zip(shares, qs, strict=True) if q.covers(r)), Fraction(0)) for r in rows
    )


@pytest.mark.parametrize("workers", slow_after([0, 1]))  # with a worker process: 1.4 s of CPU
def test_a_plan_over_http_is_within_budget_on_every_row_and_spends_nothing(
    tmp_path: Path, workers: int
) -> None:
    with _served(tmp_path, workers) as (ann, service):
        before = ann.me()
        plan = ann.plan("t", QUERIES, budget=1.0)
        shares = [q["share"] for q in plan["queries"]]
        assert len(shares) == len(QUERIES)
        assert _worst_row(shares) <= 1
        v = plan["total_variance"]
        assert v["optimal overlap"] <= v["even overlap"] < v["sequential"]
        assert plan["gamma"] == 3 and plan["neighbouring"] == "add_remove"
        even = ann.plan("t", QUERIES, budget=1.0, allocation="even")
        assert all(q["share"] == pytest.approx(1 / 3, rel=1e-9) for q in even["queries"])
        assert ann.me().equals(before)  # nothing spent
        if workers:
            assert service.dry_runs is not None and service.dry_runs.answered >= 2


def test_an_error_target_gives_the_smallest_budget(tmp_path: Path) -> None:
    with _served(tmp_path, 0) as (ann, _):
        out = ann.plan("t", QUERIES, target_error=5)
        share, gamma = out["per_query"], out["gamma"]
        assert gamma == 3 and out["budget"] >= 3 * share * (1 - 1e-12)

        def half_width(eps: float) -> int:  # closed-form tail of the discrete Laplace
            p = math.exp(-eps)
            w = 0
            while 2 * p ** (w + 1) / (1 + p) > 0.05:
                w += 1
            return w

        assert half_width(share) <= 5 < half_width(share * 0.99)


def test_bad_plans_are_refused_by_name(tmp_path: Path) -> None:
    with _served(tmp_path, 0) as (ann, _):
        with pytest.raises(ServiceRefused) as err:
            ann.plan("t", QUERIES)  # neither budget nor target
        assert err.value.status == 400 and "target_error" in str(err.value)
        with pytest.raises(ServiceRefused) as err:
            ann.plan("r", QUERIES, budget=1.0)  # an RDP data set
        assert err.value.status == 400 and "rdp" in str(err.value)
        with pytest.raises(ServiceRefused) as err:
            ann.plan("t", QUERIES, budget=-1.0)
        assert err.value.status == 422


@pytest.mark.parametrize("workers", [0, 1])
def test_a_dry_run_gives_each_querys_share_of_the_batchs_own_cost(tmp_path: Path, workers: int) -> None:
    """``/cost`` with ``allocation`` (issue 25 item 1): the batch's overlap cost (gamma 3 x epsilon 0.1)
    split by the plan's code; brute force over every row: the shares of the queries covering a row sum to
    at most that cost, exactly; even shares are the per-query epsilon; nothing is spent."""
    with _served(tmp_path, workers) as (ann, _):
        before = ann.me()
        out = ann.cost("t", QUERIES, epsilon=0.1, allocation="optimal")
        batch = out["cost"]["batch"]["overlap"]
        assert batch == pytest.approx(0.3, rel=1e-12)
        plan = out["allocation"]
        assert plan["budget"] == batch and plan["allocation"] == "optimal"
        shares = [q["share"] for q in plan["queries"]]
        assert [q["id"] for q in plan["queries"]] == [str(i) for i in range(len(QUERIES))]
        assert _worst_row(shares) <= Fraction(batch)
        v = plan["total_variance"]
        assert v["optimal overlap"] < v["even overlap"]  # the big query pays little, the ages more
        assert shares[0] < 0.1 < min(shares[1:11])
        even = ann.cost("t", QUERIES, epsilon=0.1, allocation="even")["allocation"]
        assert all(q["share"] == pytest.approx(0.1, rel=1e-9) for q in even["queries"])
        assert _worst_row([q["share"] for q in even["queries"]]) <= Fraction(batch)
        assert "allocation" not in ann.cost("t", QUERIES, epsilon=0.1)  # only when asked
        assert ann.me().equals(before)  # nothing spent


def test_an_allocation_is_refused_where_it_does_not_apply(tmp_path: Path) -> None:
    with _served(tmp_path, 0) as (ann, _):
        with pytest.raises(ServiceRefused) as err:
            ann.cost("r", QUERIES, epsilon_alpha=0.1, allocation="optimal")  # an RDP data set
        assert err.value.status == 400 and "rdp" in str(err.value)
        with pytest.raises(ServiceRefused) as err:  # a batch is charged one amount per query
            ann._call(
                "POST",
                "/v1/datasets/t/batch",
                json={"queries": QUERIES, "epsilon": 0.1, "allocation": "even"},
            )
        assert err.value.status == 422
