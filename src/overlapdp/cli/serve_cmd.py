"""``overlapdp serve``: the multi-analyst query service on uvicorn (loopback by default)."""

from __future__ import annotations

import errno
import gc
import json
import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from overlapdp.cli.app import app, err_console, warn
from overlapdp.engine.registry import EngineName
from overlapdp.errors import OverlapDPError

#: The ledger when --ledger is not given: in the current directory, never next to --data (whose folder
#: may be read-only, shared, or a checkout; a ledger there was a surprise).
DEFAULT_LEDGER = "overlapdp-ledger.sqlite"


#: Seconds between the interpreter lock's hand-overs in the served process (Python's default: 0.005).
SWITCH_INTERVAL = 0.0005


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    ledger: Annotated[
        str | None,
        typer.Option(
            help=f"SQLite file or postgresql:// URL (default: {DEFAULT_LEDGER} in the current directory)."
        ),
    ] = None,
    data: Annotated[Path | None, typer.Option(help="Register this CSV/Parquet file at start-up.")] = None,
    schema: Annotated[Path | None, typer.Option(help="Schema JSON of --data.")] = None,
    name: Annotated[
        str | None, typer.Option(help="Name of the --data set (default: the file's stem).")
    ] = None,
    budget: Annotated[float, typer.Option(help="Global budget of the --data set.")] = 1.0,
    definition: Annotated[
        Literal["pure", "zcdp", "gdp", "rdp", "tcdp", "approx"],
        typer.Option(
            help="Privacy definition of the --data set; --budget is its epsilon, rho, mu, epsilon_alpha "
            "(rdp, at --alpha; rho with --orders), rho (tcdp, with --omega) or epsilon (approx, with "
            "--delta)."
        ),
    ] = "pure",
    delta: Annotated[
        float | None,
        typer.Option(help="Delta of the (epsilon, delta) lines; approx: the budget's delta (default 1e-6)."),
    ] = None,
    omega: Annotated[float | None, typer.Option(help="tcdp: the truncation order omega (> 1).")] = None,
    alpha: Annotated[float | None, typer.Option(help="rdp: the Renyi order alpha (> 1).")] = None,
    orders: Annotated[
        str | None,
        typer.Option(help="rdp instead of --alpha: comma-separated Renyi orders (> 1), served as a curve."),
    ] = None,
    engine: Annotated[EngineName, typer.Option(help="Engine counting the --data set.")] = "duckdb",
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(help="Allow browser requests from this origin (CORS is off by default)."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body (413 beyond).")] = 1_000_000,
    max_batch: Annotated[int, typer.Option(help="Most queries in one batch (413 beyond).")] = 1_000,
    engine_pool: Annotated[int, typer.Option(help="Engines opened per data set (parallel counts).")] = 2,
    request_seconds: Annotated[
        float,
        typer.Option(
            min=0.001, help="Each request's time budget in seconds (503 TimeBudgetExceeded past it)."
        ),
    ] = 10.0,
    analyst_requests: Annotated[
        int,
        typer.Option(
            min=0, help="Requests one analyst may have in progress at once (429 beyond; 0: no limit)."
        ),
    ] = 2,
    analyst_running: Annotated[
        int,
        typer.Option(
            min=1,
            help="Of an analyst's requests in progress, how many run at once; the others wait for"
            " their turn (fair scheduling between analysts).",
        ),
    ] = 1,
    header_seconds: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds a connection may take to send a request's headers, idle time included (408 past "
            "them; 0: no limit).",
        ),
    ] = 10.0,
    max_connections: Annotated[
        int,
        typer.Option(
            min=0,
            help="Connections held at once (the longest waiting for its headers is closed for a new one; "
            "503 when all are busy). Lowered to fit the file-descriptor limit.",
        ),
    ] = 512,
    cost_workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Worker processes answering /cost dry runs and parsing and trying /batch requests of 100 "
            "queries or more (0: in the server's process).",
        ),
    ] = 2,
    max_connections_per_client: Annotated[
        int,
        typer.Option(
            min=0, help="Connections held at once from one client address (503 beyond; 0 behind a proxy)."
        ),
    ] = 64,
    log_level: Annotated[
        Literal["critical", "error", "warning", "info", "debug", "trace"],
        typer.Option(help="uvicorn log level."),
    ] = "warning",
) -> None:
    """Serve data sets to several analysts over HTTP with quotas and a durable ledger.

    The ledger is --ledger, by default overlapdp-ledger.sqlite in the current directory.

    The admin token comes from $OVERLAPDP_ADMIN_TOKEN or is generated and printed once on stderr.
    """
    import uvicorn

    from overlapdp.service.serving import ConnectionLimits, uvicorn_options

    # A served process refuses seeded noise generators (overlapdp.mechanisms.randomness).
    os.environ["OVERLAPDP_SERVED"] = "1"

    from overlapdp.service import AdminKey, Limits, QueryService, _heap, create_app, open_ledger

    if (data is None) != (schema is None):
        raise OverlapDPError("--data and --schema go together")
    # The port is taken before anything else (a ledger opened, a data set registered, an admin
    # token printed): a busy port is one line and exit 2, not a token shown for a server that never ran.
    sock = _bind(host, port)
    if ledger is None:
        ledger = DEFAULT_LEDGER
    if host not in ("127.0.0.1", "localhost", "::1"):
        warn(f"listening on {host}: the service is reachable from other machines; put TLS in front of it")
    service = QueryService(
        open_ledger(ledger),
        limits=Limits(
            max_body_bytes=max_body_bytes,
            max_batch=max_batch,
            engine_pool=engine_pool,
            request_seconds=request_seconds,
            analyst_requests=analyst_requests,
            analyst_running=analyst_running,
            cost_workers=cost_workers,
        ),
    )
    connections = ConnectionLimits(
        header_seconds=header_seconds,
        max_connections=_fit_descriptors(max_connections),
        max_per_client=max_connections_per_client,
    )
    if data is not None and schema is not None:
        ds_name = name or data.stem
        if service.store.get_dataset(ds_name) is None:
            try:
                schema_json = json.loads(schema.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise OverlapDPError(f"cannot read schema file {str(schema)!r}: {exc}") from None
            grid = None if orders is None else _orders(orders)
            params = {"delta": delta, "omega": omega, "alpha": alpha, "orders": grid}
            service.register_dataset(
                ds_name,
                str(data.resolve()),
                schema_json,
                engine,
                definition,
                budget,
                {k: v for k, v in params.items() if v is not None},
            )
    admin, generated = AdminKey.from_env()
    if generated is not None:
        err_console.print(f"admin token (shown once): {generated}", highlight=False, soft_wrap=True)
    sys.stderr.flush()
    application = create_app(service, admin, cors_origins=cors_origin or None)
    # The ledger is loaded (its charges, filters and tables live as long as the process): frozen out of
    # the cyclic collector, whose full passes otherwise visit them all, 60-130 ms pauses with 10 000
    # charges held (benchmarks/service.py, batch50); what the filters take later is frozen as it grows
    # (service/_heap.py).
    gc.collect()
    gc.freeze()
    _heap.enable()
    # The interpreter lock is handed over every 0.5 ms rather than every 5 ms: a thread waiting for it
    # (a short request back from DuckDB or a commit) waits for another's slice that long at most. With
    # one analyst's 1 000-query batches being admitted, another's p99 was 4.1-4.9x its baseline at 5 ms
    # and 2.4-2.7x at 0.5 ms (benchmarks/service.py --rows batch8).
    sys.setswitchinterval(SWITCH_INTERVAL)
    err_console.print(f"overlapdp service on http://{host}:{port} (ledger: {_safe(ledger)})", highlight=False)
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        **uvicorn_options(connections),
    )
    try:
        # on the socket bound above (a busy port was one line before any token was printed), behind the
        # connection guard (service/serving.py)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        service.close()


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), as uvicorn binds one; one error line when it cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise OverlapDPError(f"--host {host!r}: not an address this machine can listen on ({exc})") from None
    except OverflowError:
        raise OverlapDPError(f"--port {port}: give a port from 0 to 65535") from None
    sock = socket.socket(family, kind, proto)
    try:
        # as uvicorn does: a port in TIME_WAIT is free; one another process listens on is not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise OverlapDPError(
                f"port {port} on {host} is in use by another process: stop it or give another --port"
            ) from None
        raise OverlapDPError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


#: File descriptors kept for the service's own use (ledger, engines, workers' pipes, logs).
_RESERVED_FDS = 256


def _fit_descriptors(wanted: int) -> int:
    """``wanted`` connections, fewer when the process's file-descriptor limit could not hold them with
    the service's own files: past the limit, accepting fails and every client is refused."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return wanted
    if wanted == 0 or soft == resource.RLIM_INFINITY or wanted + _RESERVED_FDS <= soft:
        return wanted
    fitted = max(16, soft - _RESERVED_FDS)
    warn(f"--max-connections {wanted} does not fit the file-descriptor limit {soft}: using {fitted}")
    return fitted


def _safe(url: str) -> str:
    """A ledger URL without its password."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}:***@{host}" if ":" in cred else url
    return url


def _orders(text: str) -> list[float]:
    """``--orders 2,4,8``: the orders as numbers (their range is checked with the data set's parameters)."""
    try:
        return [float(a) for a in text.split(",") if a.strip()]
    except ValueError:
        raise OverlapDPError(f"--orders must be comma-separated numbers, got {text[:60]!r}") from None
