"""Run the query service inside this process on a free loopback port (demo, tests, notebooks)."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def embedded_service(ledger: Path | str) -> Iterator[tuple[str, str]]:
    """Serve on 127.0.0.1 with a fresh admin token; yields ``(url, admin token)`` and stops on exit."""
    import uvicorn

    from overlapdp.service import AdminKey, QueryService, create_app, open_ledger
    from overlapdp.service.serving import ConnectionLimits, uvicorn_config

    token = secrets.token_urlsafe(24)
    service = QueryService(open_ledger(ledger))
    app = create_app(service, AdminKey(token))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn_config(app, "127.0.0.1", port, ConnectionLimits(), log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="overlapdp-embedded-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the embedded service did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        service.close()
