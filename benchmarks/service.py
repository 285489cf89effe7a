"""Service throughput and latency: single counting queries on Adult, 8 concurrent clients, loopback.

Run: ``/work/main/.venv/bin/python benchmarks/service.py [--seconds 10] [--clients 8]``

Rows:
- baseline: the same HTTP stack (FastAPI on uvicorn, one process) answering the exact count with no
  ledger, no accounting and no noise: the ceiling the service is measured against;
- service, empty SQLite ledger, with the DuckDB engine (the default) and the Polars engine;
- service, SQLite ledger already holding 100 000 charges (bulk-inserted first; the start-up rebuild of the
  filters from them is timed too), with each engine.

Target (issue 7): at least 500 queries/s with p99 below 50 ms in both service rows. The machine is shared
(2 cores, other jobs running), so numbers are noisy; re-run the decisive rows.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from overlapdp.samples import adult_schema, synthetic_adult  # noqa: E402
from overlapdp.service.ledger import NewCharge, open_ledger  # noqa: E402

ADMIN = "bench-admin-token-0123456789abcdef"
SHARED_ADULT = REPO.parent / "shared" / "data" / "adult" / "adult.csv"

BASELINE_APP = """
import sys
from fastapi import FastAPI
from pydantic import BaseModel
import uvicorn
from overlapdp.engine import encode_frame, exact_counts
from overlapdp.query import parse_query
from overlapdp.samples import adult_schema
from overlapdp.schema import read_table

schema = adult_schema()
table = encode_frame(schema, read_table(sys.argv[1]))
app = FastAPI()

class Body(BaseModel):
    query: str
    epsilon: float

@app.post("/v1/datasets/adult/query")
def query(body: Body) -> dict:
    return {"count": exact_counts([parse_query(schema, body.query)], table)[0]}

@app.get("/openapi.json")
def spec() -> dict:
    return {}

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/openapi.json", timeout=1).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server did not start")


def start(cmd: list[str], url: str) -> tuple[subprocess.Popen[bytes], float]:
    env = {**os.environ, "OVERLAPDP_ADMIN_TOKEN": ADMIN, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, wait_ready(url, proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def random_query(rng: random.Random) -> str:
    lo = rng.randrange(0, 70)
    return f"age BETWEEN {lo} AND {lo + rng.randrange(1, 15)} AND sex = {rng.randrange(2)}"


def load(url: str, tokens: list[str], seconds: float) -> dict[str, float]:
    """Each client sends one query at a time for ``seconds`` (after a 1 s warm-up)."""
    latencies: list[list[float]] = [[] for _ in tokens]
    errors = [0] * len(tokens)
    begin = time.monotonic() + 1.0
    end = begin + seconds

    def client(k: int) -> None:
        # The standard library's HTTP client costs the load generator less CPU than httpx, leaving the
        # machine's two cores to the server.
        rng = random.Random(k)
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"Authorization": f"Bearer {tokens[k]}", "Content-Type": "application/json"}
        try:
            while True:
                t0 = time.monotonic()
                if t0 >= end:
                    return
                body = json.dumps({"where": random_query(rng), "epsilon": 1e-6})
                conn.request("POST", "/v1/datasets/adult/query", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                t1 = time.monotonic()
                if response.status != 200:
                    errors[k] += 1
                elif t0 >= begin:
                    latencies[k].append(t1 - t0)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = sorted(x for lat in latencies for x in lat)
    return {
        "qps": len(flat) / seconds,
        "p50": 1000 * statistics.median(flat),
        "p99": 1000 * flat[min(len(flat) - 1, int(0.99 * len(flat)))],
        "errors": float(sum(errors)),
    }


def setup_service(url: str, data: Path, clients: int, engine: str) -> list[str]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
        if admin.get("/v1/admin/datasets").json() == []:
            r = admin.post(
                "/v1/admin/datasets",
                json={
                    "name": "adult",
                    "path": str(data),
                    "schema": adult_schema().to_json(),
                    "budget": 1e12,
                    "engine": engine,
                },
            )
            r.raise_for_status()
        tokens = []
        for k in range(clients):
            name = f"bench{k}-{time.monotonic_ns()}"
            r = admin.post("/v1/admin/analysts", json={"name": name, "quotas": {"adult": 1e9}})
            r.raise_for_status()
            tokens.append(r.json()["token"])
    return tokens


def bulk_charges(ledger: str, n: int) -> None:
    store = open_ledger(ledger)
    rng = random.Random(7)
    now = time.time()
    batch = []
    for _ in range(n):
        q = {
            "conditions": {
                "age": {"range": [a := rng.randrange(70), a + 5]},
                "sex": {"in": [rng.randrange(2)]},
            }
        }
        batch.append(
            NewCharge(
                dataset="adult",
                analyst="history",
                kind="query",
                query=q,
                mechanism={"name": "discrete_laplace", "definition": "pure", "epsilon": 1e-6},
                cost={"definition": "pure", "epsilon": 1e-6, "load": 1e-6},
                answer={"count": 0},
                created_at=now,
            )
        )
        if len(batch) == 20_000:
            store.bulk_insert(batch)
            batch = []
    if batch:
        store.bulk_insert(batch)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--engines", default="duckdb,polars", help="engines to serve with, comma-separated")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="overlapdp-bench-"))
    if SHARED_ADULT.exists():
        data, source = SHARED_ADULT, "UCI Adult (shared/data)"
    else:
        data, source = folder / "adult.csv", "synthetic Adult"
        synthetic_adult(48_842).to_csv(data, index=False)
    print(f"data: {source}, {args.clients} clients, {args.seconds:.0f} s per row, loopback, SQLite ledger")
    rows: list[tuple[str, dict[str, float], float]] = []

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, ready = start([sys.executable, "-c", BASELINE_APP, str(data), str(port)], url)
    try:
        rows.append(
            ("baseline: exact count, no ledger", load(url, ["x"] * args.clients, args.seconds), ready)
        )
    finally:
        stop(proc)

    inserted = 0.0
    for engine in args.engines.split(","):
        ledger = str(folder / f"ledger-{engine}.sqlite")
        serve = [sys.executable, "-m", "overlapdp.cli.main", "serve", "--ledger", ledger, "--port"]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, ready = start([*serve, str(port)], url)
        try:
            tokens = setup_service(url, data, args.clients, engine)
            rows.append((f"service ({engine}), empty ledger", load(url, tokens, args.seconds), ready))
        finally:
            stop(proc)

        t0 = time.monotonic()
        bulk_charges(ledger, args.history)
        inserted = time.monotonic() - t0
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, ready = start([*serve, str(port)], url)
        try:
            tokens = setup_service(url, data, args.clients, engine)
            rows.append(
                (f"service ({engine}), {args.history:,} charges", load(url, tokens, args.seconds), ready)
            )
        finally:
            stop(proc)

    base = rows[0][1]["qps"]
    print(f"(bulk insert of {args.history:,} charges: {inserted:.1f} s)")
    header = f"{'configuration':42} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'start s':>8} {'vs base':>8} {'target':>7}"
    print(header)
    print("-" * len(header))
    for i, (name, r, ready) in enumerate(rows):
        target = "-" if i == 0 else ("met" if r["qps"] >= 500 and r["p99"] < 50 else "MISSED")
        print(
            f"{name:42} {r['qps']:8.0f} {r['p50']:8.2f} {r['p99']:8.2f} {r['errors']:7.0f} {ready:8.1f}"
            f" {r['qps'] / base:8.2f} {target:>7}"
        )


if __name__ == "__main__":
    main()
