"""Nobody waits for someone else's search (issue 13, item 3).

- One analyst's 1 000-query ``/cost`` or ``/batch`` (4 attributes, ranges and value sets: the overlap
  search on them does not finish in seconds) runs while another analyst queries: the second's latency
  stays far below the first request's duration (the search runs outside the data set's lock).
- Each request has a time budget (``Limits.request_seconds``): past it the request gets 503 for itself
  alone, nothing of it charged, and the next request is served.
- Admission decisions (the cheap bound far from the budget, the exact filter near it) are those of the
  exact per-row filter, checked against brute-force per-row sums on random batches near the budget.
"""

from __future__ import annotations

import random
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from overlapdp.query import parse_query
from overlapdp.samples import adult_schema
from overlapdp.service.core import Limits, QueryService, QuotaExceeded, TimeBudgetExceeded
from overlapdp.service.ledger import open_ledger
from test_service_support import write_adult

SCHEMA = adult_schema()
BOUNDS = {a.name: (a.min, a.max) for a in SCHEMA.attributes}  # type: ignore[attr-defined]


def mixed_query(rng: random.Random, k: int = 4) -> dict[str, Any]:
    """A query on ``k`` random attributes, each a range or a small value set."""
    conditions: dict[str, Any] = {}
    for name in rng.sample(sorted(BOUNDS), k):
        lo, hi = BOUNDS[name]
        if hi - lo > 3 and rng.random() < 0.5:
            a = rng.randint(lo, hi - 1)
            conditions[name] = {"range": [a, min(hi, a + rng.randint(1, max(1, (hi - lo) // 3)))]}
        else:
            conditions[name] = {"in": sorted(rng.sample(range(lo, hi + 1), min(hi - lo + 1, 3)))}
    return {"conditions": conditions}


def _service(tmp_path: Path, *, seconds: float, budget: float = 1e9, quota: float = 1e6) -> QueryService:
    service = QueryService(open_ledger(tmp_path / "l.sqlite"), limits=Limits(request_seconds=seconds))
    path, schema = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", budget)
    for name in ("alice", "bob"):
        service.create_analyst(name, {"adult": quota})
    return service


def _analyst(service: QueryService, name: str) -> Any:
    return service.store.get_analyst(name)


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", [True, False], ids=["cost", "batch"])
def test_a_large_request_does_not_stall_another_analyst(tmp_path: Path, dry_run: bool) -> None:
    seconds = 3.0
    # quota 0.5: the batch's sequential cost (1 000 x 0.001) does not fit, so its overlap is searched
    service = _service(tmp_path, seconds=seconds, quota=0.5)
    alice, bob = _analyst(service, "alice"), _analyst(service, "bob")
    rng = random.Random(3)
    big = [mixed_query(rng) for _ in range(1000)]
    service.query(bob, "adult", ["age = 30"], 1e-6)  # warm: parse and count paths
    took: list[float] = []
    out: list[dict[str, Any]] = []

    def large() -> None:
        t0 = time.monotonic()
        out.append(service.query(alice, "adult", big, 0.001, dry_run=dry_run))
        took.append(time.monotonic() - t0)

    worker = threading.Thread(target=large)
    worker.start()
    latencies = []
    while worker.is_alive():
        t0 = time.monotonic()
        service.query(bob, "adult", [f"age BETWEEN {rng.randrange(80)} AND 84 AND sex = 1"], 1e-6)
        latencies.append(time.monotonic() - t0)
        time.sleep(0.02)
    worker.join()
    service.close()
    # The large request ran at least its search's time budget; the other analyst was served all along.
    assert took[0] >= 0.8 * seconds
    assert len(latencies) >= 5
    assert max(latencies) < 1.0, latencies
    batch_cost = out[0]["cost"]["batch"] if dry_run else None
    if batch_cost is not None:
        # the search did not finish: a safe upper bound, never above the sequential sum
        assert batch_cost["exact"] is False
        assert batch_cost["lower"] <= batch_cost["overlap"] <= batch_cost["sequential"]
        assert out[0]["admissible"] is True
    else:
        assert len(out[0]["answers"]) == 1000


def test_a_request_past_its_time_budget_fails_alone(tmp_path: Path) -> None:
    """Near the budget the bound cannot decide; when the exact decision would come after the request's
    time budget, that request gets 503 and nothing of it is charged; the others go on."""
    service = _service(tmp_path, seconds=0.0, budget=1e9, quota=1.0)
    alice, bob = _analyst(service, "alice"), _analyst(service, "bob")
    # a single query is decided by the bound alone (its own cost is its load): no time needed
    service.query(alice, "adult", ["age < 40"], 0.5)
    with pytest.raises(TimeBudgetExceeded) as err:
        # the bound (0.5 held + 0.75) exceeds the quota; the rows age >= 40 hold only 0.75: only the
        # exact filter can tell that it fits
        service.query(alice, "adult", ["age >= 40"], 0.75)
    assert err.value.status == 503 and "time budget" in str(err.value)
    assert len(service.store.charges(analyst="alice")) == 1
    assert service.query(bob, "adult", ["age < 40"], 0.5)["answers"]
    service.close()
    # With a time budget, the same request is decided exactly: admitted (worst row 0.75).
    service = QueryService(service.store, limits=Limits(request_seconds=10.0))
    out = service.query(alice, "adult", ["age >= 40"], 0.75)
    assert len(out["answers"]) == 1 and out["remaining"] == 0.25
    with pytest.raises(QuotaExceeded):  # and refused where a row would exceed the quota
        service.query(alice, "adult", ["age BETWEEN 30 AND 50"], 0.5)
    service.close()


def test_http_time_budget_is_503_for_that_request(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from overlapdp.service.app import create_app
    from overlapdp.service.auth import AdminKey

    service = _service(tmp_path, seconds=0.0, quota=1.0)
    token = service.create_analyst("carol", {"adult": 1.0})["token"]
    client = TestClient(create_app(service, AdminKey("admin-token-0123456789abcdef")))
    headers = {"Authorization": f"Bearer {token}"}
    r = client.post("/v1/datasets/adult/query", json={"query": "age < 40", "epsilon": 0.5}, headers=headers)
    assert r.status_code == 200
    body = {"queries": ["age >= 40", "sex = 1 AND age >= 50"], "epsilon": 0.3}
    r = client.post("/v1/datasets/adult/batch", json=body, headers=headers)
    assert r.status_code == 503 and r.json()["error"] == "TimeBudgetExceeded"
    assert r.json()["field"] == "request_seconds"
    service.close()


def _brute_max(charges: list[tuple[Any, Fraction]], attrs: list[str]) -> Fraction:
    """max over every point of ``attrs`` of the exact sum of the loads of the charges covering it."""
    pos = [SCHEMA.position(a) for a in attrs]
    sizes = [SCHEMA.attributes[p].size for p in pos]
    best = Fraction(0)
    row = [0] * len(SCHEMA)

    def walk(i: int) -> None:
        nonlocal best
        if i == len(pos):
            best = max(best, sum((w for q, w in charges if q.covers(row)), Fraction(0)))
            return
        for v in range(sizes[i]):
            row[pos[i]] = v
            walk(i + 1)

    walk(0)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_batch_decisions_are_the_exact_filters_near_the_budget(tmp_path: Path, seed: int) -> None:
    """Random batches on (race, sex, relationship) whose loads bring the worst row to just below, at or
    just above the quota: admitted iff every row's exact sum stays within it (brute force)."""
    rng = random.Random(seed)
    quota = 1.0
    service = _service(tmp_path, seconds=10.0, quota=quota)
    alice = _analyst(service, "alice")
    attrs = ["race", "sex", "relationship"]
    held: list[tuple[Any, Fraction]] = []
    decisions = refused = 0
    for _ in range(8):
        specs = []
        for _ in range(rng.randint(1, 4)):
            conds = {}
            for a in rng.sample(attrs, rng.randint(1, 3)):
                lo, hi = BOUNDS[a]
                conds[a] = {"in": sorted(rng.sample(range(lo, hi + 1), rng.randint(1, hi - lo + 1)))}
            specs.append({"conditions": conds})
        eps = rng.choice([0.1, 0.2, 0.25, 0.3, 1 / 3, 0.5])
        batch = [(parse_query(SCHEMA, s), Fraction(eps)) for s in specs]
        # The exact filter admits the batch iff every prefix keeps every row within the quota; loads
        # are positive, so iff the whole batch does.
        expected = _brute_max(held + batch, attrs) <= quota
        try:
            service.query(alice, "adult", specs, eps)
            admitted = True
        except QuotaExceeded:
            admitted = False
        assert admitted == expected, (specs, eps)
        decisions += 1
        refused += not admitted
        if admitted:
            held += batch
    assert decisions == 8 and 0 < refused < 8  # both verdicts, near the quota
    # the exact spend reported afterwards is the brute-force worst row, rounded up
    spent = service.analyst_info(alice)["datasets"]["adult"]["spent"]
    assert Fraction(spent) >= _brute_max(held, attrs) and spent == pytest.approx(
        float(_brute_max(held, attrs))
    )
    service.close()
