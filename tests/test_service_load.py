"""Load and crash tests against real ``overlapdp serve`` processes on loopback.

- Load: 8 analysts x 4 threads submit queries until their quotas (or the global budget) run out; on
  SQLite with one process, and on PostgreSQL with two processes sharing the ledger. Afterwards every
  filter's recorded spend is within its budget and equals the exact sum of the ledger's rows.
- Crash: SIGKILL the service in the middle of a storm, restart it on the same ledger, and check that the
  ledger holds every answer a client received and that no budget was reset.

Every query covers the row (age = 40, race = 0), so that row's load, the maximum over rows, is the sum of
all costs whatever accountant the service uses: the sum of the ledger's rows is the independent truth.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from overlapdp.service.client import AdminClient, Client, QuotaExceeded, ServiceRefused
from support.service import ADMIN_TOKEN, Server, fresh_postgres_ledger, running, write_adult

# Every test here drives real servers under load for 5 s or more: run with the slow tests.
pytestmark = pytest.mark.slow

EPS = 0.0625
ANALYSTS = 8
THREADS = 4


def _query(i: int) -> str:
    return f"age BETWEEN {30 - i % 7} AND {41 + i % 5} AND race IN (0, {1 + i % 4})"


def _setup(url: str, folder: Path, *, budget: float, quota: float) -> dict[str, str]:
    path, schema = write_adult(folder)
    admin = AdminClient(url, ADMIN_TOKEN)
    admin.register_dataset("adult", str(path), schema, budget=budget)
    tokens = {f"a{k}": admin.create_analyst(f"a{k}", {"adult": quota}) for k in range(ANALYSTS)}
    admin.close()
    return tokens


def _storm(
    urls_for: Callable[[int], str],
    tokens: dict[str, str],
    *,
    max_requests: int,
    seconds: float,
    retries: int = 3,
) -> tuple[dict[str, int], list[str]]:
    """Run 8 x 4 threads; returns every received answer (charge id -> count) and the errors seen."""
    received: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(analyst: str, token: str, thread: int) -> None:
        client = Client(urls_for(thread), token, timeout=30, retries=retries)
        try:
            for i in range(max_requests):
                if time.monotonic() > deadline:
                    return
                try:
                    if i % 3 == 2:
                        frame = client.batch("adult", [_query(i), _query(i + 1)], epsilon=EPS)
                    else:
                        frame = client.query("adult", _query(i + thread), epsilon=EPS)
                except QuotaExceeded:
                    return
                except (ServiceRefused, httpx.TransportError) as exc:
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    return
                with lock:
                    for charge, count in zip(frame["charge"], frame["answer"], strict=True):
                        received[str(charge)] = int(count)
        finally:
            client.close()

    threads = [
        threading.Thread(target=worker, args=(name, token, t))
        for name, token in tokens.items()
        for t in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    assert not any(t.is_alive() for t in threads)
    return received, errors


def _sums(ledger: Any) -> tuple[Fraction, dict[str, Fraction]]:
    total = Fraction(0)
    per: dict[str, Fraction] = {}
    for analyst, cost in zip(ledger["analyst"], ledger["cost"], strict=True):
        load = Fraction(cost["load"])
        total += load
        per[analyst] = per.get(analyst, Fraction(0)) + load
    return total, per


def _check_accounts(urls: list[str], budget: float, quota: float, tokens: dict[str, str]) -> dict[str, Any]:
    admin = AdminClient(urls[0], ADMIN_TOKEN)
    ledger = admin.full_ledger()
    admin.close()
    total, per = _sums(ledger)
    assert total <= Fraction(budget)
    for name in tokens:
        assert per.get(name, Fraction(0)) <= Fraction(quota), name
    for url in urls:  # every instance's filters agree with the ledger
        admin = AdminClient(url, ADMIN_TOKEN)
        status = admin.status("adult")
        assert Fraction(status["spent"]) == total
        assert status["guarantee"]["epsilon"] <= budget
        for name, spent in status["spent_by_analyst"].items():
            assert Fraction(spent) == per[name]
        admin.close()
    for name, token in tokens.items():  # and each analyst's own view
        me = Client(urls[-1], token).me()
        assert Fraction(me.loc[0, "spent"]) == per.get(name, Fraction(0))
    return {"ledger": ledger, "total": total, "per": per}


def _check_received(received: dict[str, int], ledger: Any) -> None:
    recorded = {str(i): a["count"] for i, a in zip(ledger["id"], ledger["answer"], strict=True)}
    missing = set(received) - set(recorded)
    assert not missing, f"{len(missing)} released answers are not in the ledger"
    assert all(recorded[c] == v for c, v in received.items())


def test_load_sqlite_one_process(tmp_path: Path) -> None:
    budget, quota = 6.0, 1.0
    with running(str(tmp_path / "ledger.sqlite"), log=tmp_path / "server.log") as server:
        tokens = _setup(server.url, tmp_path, budget=budget, quota=quota)
        received, errors = _storm(lambda t: server.url, tokens, max_requests=60, seconds=90)
        assert errors == []
        out = _check_accounts([server.url], budget, quota, tokens)
    _check_received(received, out["ledger"])
    # The global budget (96 queries) binds before the 8 quotas (128); a refused batch may leave 1/16.
    assert out["total"] >= Fraction(budget) - 2 * Fraction(EPS)
    assert len(received) == len(out["ledger"])


def test_load_postgres_two_processes(tmp_path: Path) -> None:
    url = fresh_postgres_ledger()
    budget, quota = 6.0, 1.0
    with running(url, log=tmp_path / "a.log") as first, running(url, log=tmp_path / "b.log") as second:
        tokens = _setup(first.url, tmp_path, budget=budget, quota=quota)
        urls = [first.url, second.url]
        received, errors = _storm(lambda t: urls[t % 2], tokens, max_requests=60, seconds=120)
        assert errors == []
        out = _check_accounts(urls, budget, quota, tokens)
    _check_received(received, out["ledger"])
    assert out["total"] >= Fraction(budget) - 2 * Fraction(EPS)


def test_crash_mid_storm_loses_no_charge_and_resets_no_budget(tmp_path: Path) -> None:
    ledger_path = str(tmp_path / "ledger.sqlite")
    budget, quota = 1000.0, 100.0
    server = Server(ledger_path, log=tmp_path / "server.log")
    try:
        tokens = _setup(server.url, tmp_path, budget=budget, quota=quota)
        killer_done = threading.Event()

        def kill_when_busy() -> None:
            # Let the storm run for a moment, then crash the service with requests in flight.
            time.sleep(1.5)
            server.kill()
            killer_done.set()

        threading.Thread(target=kill_when_busy, daemon=True).start()
        received, errors = _storm(lambda t: server.url, tokens, max_requests=400, seconds=30, retries=0)
        assert killer_done.wait(30)
    finally:
        server.stop()
    assert received, "no answer arrived before the crash"
    assert errors, "the crash did not interrupt the storm"
    with running(ledger_path, log=tmp_path / "restart.log") as restarted:
        out = _check_accounts([restarted.url], budget, quota, tokens)
        _check_received(received, out["ledger"])
        assert out["total"] > 0  # not reset
        # The restarted service keeps charging from where the ledger stands.
        name, token = next(iter(tokens.items()))
        client = Client(restarted.url, token)
        client.query("adult", _query(0), epsilon=EPS)
        assert Fraction(client.me().loc[0, "spent"]) == out["per"].get(name, Fraction(0)) + Fraction(EPS)
        client.close()
