"""Helpers shared by the service tests: a data set on disk, servers on free loopback ports, a test
PostgreSQL ledger, and a ledger store whose commits fail."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from overlapdp.samples import adult_schema, synthetic_adult
from overlapdp.service.ledger import AdmissionTransaction, LedgerStore

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "test-admin-token-0123456789abcdef"
POSTGRES_ENV = "OVERLAPDP_TEST_POSTGRES"


def write_adult(folder: Path, rows: int = 2000) -> tuple[Path, dict[str, object]]:
    """A synthetic Adult CSV in ``folder`` and its schema JSON."""
    path = folder / "adult.csv"
    if not path.exists():
        synthetic_adult(rows, seed=1).to_csv(path, index=False)
    return path, adult_schema().to_json()


def wait_until(condition: Any, what: str, seconds: float = 120.0) -> None:
    """Poll ``condition`` until it holds: a bound on a hang (no load takes ``seconds``), not a timing."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, f"waited {seconds} s for {what}"
        time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_url() -> str:
    """The test PostgreSQL server (``$OVERLAPDP_TEST_POSTGRES``, set by .ci/run) or a skip."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(
            f"${POSTGRES_ENV} is not set: no PostgreSQL server for the shared-ledger tests (.ci/run starts one)"
        )
    return url


def fresh_postgres_ledger() -> str:
    """An empty database on the test server (one per test, so tests do not see each other's rows)."""
    import psycopg

    base = postgres_url()
    name = f"odp_test_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}"


class Server:
    """``overlapdp serve`` in a child process on a free loopback port."""

    def __init__(self, ledger: str, *, port: int | None = None, log: Path | None = None) -> None:
        self.ledger = ledger
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OVERLAPDP_ADMIN_TOKEN": ADMIN_TOKEN, "PYTHONPATH": str(REPO / "src")}
        cmd = [
            sys.executable,
            "-m",
            "overlapdp.cli.main",
            "serve",
            "--port",
            str(self.port),
            "--ledger",
            ledger,
        ]
        self._log = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=self._log, cwd=REPO)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited with status {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/openapi.json", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("the service did not start in time")

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, as in a crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log is not subprocess.DEVNULL:
            self._log.close()  # type: ignore[union-attr]


@contextmanager
def running(ledger: str, **kwargs: object) -> Iterator[Server]:
    server = Server(ledger, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


#: The request budget of the services tests run (a bound on a hang, which no load exhausts): a test of
#: answers must not get a 503 because the machine is busy. The tests of the budget itself drive the
#: service's clocks (``serving.clock``, ``shared._now``, ``_clock.now``) or set a budget of their own.
TEST_REQUEST_SECONDS = 600.0


@contextmanager
def in_process(folder: Path, limits: Any = None) -> Iterator[dict[str, Any]]:
    """A service on a SQLite ledger in ``folder``, served by uvicorn in a thread on a free loopback port:
    ``{"url", "service", "folder"}``; stopped and its ledger closed afterwards. ``limits``: the
    service's :class:`Limits`, by default the defaults with a request budget of
    :data:`TEST_REQUEST_SECONDS` (the application reads it once, when it is created)."""
    import uvicorn

    from overlapdp.service import AdminKey, Limits, QueryService, create_app, open_ledger

    limits = limits or Limits(request_seconds=TEST_REQUEST_SECONDS)
    service = QueryService(open_ledger(folder / "l.sqlite"), limits=limits)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service, AdminKey(ADMIN_TOKEN)), host="127.0.0.1", port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started_by = time.monotonic() + 120  # (a bound on a hang)
    while not server.started and time.monotonic() < started_by:
        time.sleep(0.05)
    assert server.started
    try:
        yield {"url": f"http://127.0.0.1:{port}", "service": service, "folder": folder}
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        service.close()


class FailingCommit(LedgerStore):
    """A store whose admission transactions all fail at commit time (after the rows were inserted)."""

    def __init__(self, inner: LedgerStore) -> None:
        self.inner = inner
        self.url = inner.url

    @contextmanager
    def admission(self, dataset: str) -> Iterator[AdmissionTransaction]:
        with self.inner.admission(dataset) as tx:
            yield tx
            raise OSError("disk full")  # rolls the transaction back

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


for _name in [*LedgerStore.__abstractmethods__, "within_marks"]:  # (and those with a default)
    if _name != "admission":
        setattr(FailingCommit, _name, lambda self, *a, _n=_name, **k: getattr(self.inner, _n)(*a, **k))
FailingCommit.__abstractmethods__ = frozenset()


def api_routes(app: Any) -> list[Any]:
    """Every :class:`fastapi.routing.APIRoute` of ``app`` in order, those of its included routers too
    (the service has one router per resource, ``service/routes/``): FastAPI before 0.16x copies an
    included router's routes into ``app.routes``; later versions keep the router there as one entry
    holding them (``original_router``)."""
    from fastapi.routing import APIRoute

    out: list[Any] = []
    for route in app.routes:
        if isinstance(route, APIRoute):
            out.append(route)
        elif hasattr(route, "original_router"):
            out.extend(api_routes(route.original_router))
    return out
