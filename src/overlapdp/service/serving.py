"""Connections of the served process: header read timeout, header size, connection limits.

uvicorn bounds neither how long a client may take to send a request's headers nor how many
connections it holds: ``timeout_keep_alive`` runs only between requests and every byte received
cancels it, and ``limit_concurrency`` is looked at only once a request's headers are complete (it then
answers 503), so a client that sends its headers a byte at a time holds its connection, and a file
descriptor, for ever. 1 124 of them under a 1 024 descriptor limit made every other request fail.
An ASGI middleware cannot help: the application is called only once the headers are in.

:func:`guarded_protocol` therefore subclasses uvicorn's httptools protocol (the ``service`` extra
installs httptools) and, per connection:

- closes it with 408 when the headers of its next request are not complete ``header_seconds`` after
  it was opened or after its last response (idle time included; keep-alive still closes an idle
  connection sooner), and with 431 once they pass ``max_header_bytes``;
- stamps the time a request's first byte arrived into its scope (``overlapdp.arrived``): its time
  budget starts there, so reading its body (:class:`overlapdp.service.middleware.RequestClock`) and every
  later step count against it; and puts there an event set when the connection is lost
  (``overlapdp.gone``), so a request waiting for its analyst's turn leaves the queue at once;
- holds at most ``max_connections`` connections in all: at the limit a new connection evicts the
  oldest one that has not sent a complete request yet (the slow-header kind; an analyst's request
  in progress is never evicted), and is refused with 503 only when every held connection is serving
  a request. At most ``max_per_client`` connections come from one client address (503 past it;
  behind a reverse proxy every connection comes from the proxy: set it to 0, off, and let the proxy
  limit each client, see docs/service.md).

The body of a request is read by the application within the request's time budget
(:class:`overlapdp.service.middleware.RequestClock`), not here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: The clock of the arrival stamps and timeouts (``time.monotonic``, as the request deadlines'); tests
#: replace it.
clock: Callable[[], float] = time.monotonic

#: The scope key holding a request's arrival time (:data:`clock`).
ARRIVED = "overlapdp.arrived"
#: The scope key holding an :class:`asyncio.Event` set when the request's connection is lost (a request
#: waiting for its turn, :class:`overlapdp.service.middleware.AnalystGate`, leaves at once).
GONE = "overlapdp.gone"


@dataclass(frozen=True)
class ConnectionLimits:
    """What ``overlapdp serve`` allows each connection (0 turns a limit off)."""

    #: Seconds from a connection's opening (or its last response) to its next request's complete headers.
    header_seconds: float = 10.0
    #: Bytes of a request line and headers (431 past them).
    max_header_bytes: int = 65_536
    #: Connections held at once, in all; keep it well under the process's file-descriptor limit.
    max_connections: int = 512
    #: Connections held at once from one client address.
    max_per_client: int = 64
    #: Seconds an idle keep-alive connection is kept (uvicorn's ``timeout_keep_alive``).
    keep_alive_seconds: int = 5


def _raw_response(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"error": reason, "detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


_REFUSED = _raw_response(503, "TooManyConnections", "the service holds too many connections; retry later")
_PER_CLIENT = _raw_response(
    503, "TooManyConnections", "too many connections from this address; close some, then retry"
)
_HEADER_TIMEOUT = _raw_response(408, "RequestTimeout", "the request headers did not arrive in time")
_HEADER_TOO_LARGE = _raw_response(431, "HeadersTooLarge", "the request line and headers are too large")


class _Registry:
    """The connections a server holds, oldest first, and how many come from each address (one event
    loop touches it: no lock)."""

    def __init__(self) -> None:
        self.open: dict[_Guarded, None] = {}  # insertion order = age
        self.per_client: dict[str, int] = {}
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0


class _Guarded(HttpToolsProtocol):
    limits: ConnectionLimits
    registry: _Registry

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._waiting = True  # for the complete headers of a request (evictable)
        self._address: str | None = None
        self._counted = False
        self._gone: asyncio.Event | None = None

    # -- connections ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits, reg = self.limits, self.registry
        self._address = self.client[0] if self.client else None
        address = self._address
        if (
            limits.max_per_client
            and address is not None
            and reg.per_client.get(address, 0) >= limits.max_per_client
        ):
            self._refuse(_PER_CLIENT)
            return
        if limits.max_connections and len(reg.open) >= limits.max_connections:
            oldest = next((c for c in reg.open if c._waiting), None)
            if oldest is None:
                self._refuse(_REFUSED)
                return
            reg.evicted += 1
            oldest._close(None)
        reg.open[self] = None
        if self._address is not None:
            reg.per_client[self._address] = reg.per_client.get(self._address, 0) + 1
        self._counted = True
        self._arm()

    def _refuse(self, response: bytes) -> None:
        self.registry.refused += 1
        self.transport.write(response)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._forget()
        if self._gone is not None:
            self._gone.set()
        super().connection_lost(exc)

    def _forget(self) -> None:
        if not self._counted:
            return
        self._counted = False
        reg = self.registry
        reg.open.pop(self, None)
        if self._address is not None:
            left = reg.per_client.get(self._address, 1) - 1
            if left > 0:
                reg.per_client[self._address] = left
            else:
                reg.per_client.pop(self._address, None)

    def _close(self, response: bytes | None) -> None:
        """Close now (with ``response`` first, when the client is owed one); forgotten at once, so the
        slot is free for the connection that evicted it."""
        self._disarm()
        self._forget()
        if not self.transport.is_closing():
            if response is not None:
                self.transport.write(response)
            self.transport.close()

    # -- the header timeout ---------------------------------------------------------------------
    def _arm(self) -> None:
        self._disarm()
        if self._counted:  # the longest waiting is evicted first: this one now waits from here
            self.registry.open.pop(self, None)
            self.registry.open[self] = None
        self._waiting = True
        self._header_bytes = 0
        if self.limits.header_seconds > 0:
            self._header_timer = self.loop.call_later(self.limits.header_seconds, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting:
            self.registry.timed_out += 1
            self._close(_HEADER_TIMEOUT)

    def data_received(self, data: bytes) -> None:
        waiting = self._waiting
        super().data_received(data)
        # Counted only while no request's headers completed in these bytes: a body sent with its
        # headers in one packet is not header bytes.
        if waiting and self._waiting and self.limits.max_header_bytes:
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._close(_HEADER_TOO_LARGE)

    # -- parser callbacks -----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[ARRIVED] = clock()  # type: ignore[literal-required]
        if self._gone is None:
            self._gone = asyncio.Event()
        self.scope[GONE] = self._gone  # type: ignore[literal-required]

    def on_headers_complete(self) -> None:
        self._waiting = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._arm()  # the next request's headers are timed from now


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """An httptools protocol class enforcing ``limits`` (one registry per class: make one per server)."""
    return type("GuardedHttpProtocol", (_Guarded,), {"limits": limits, "registry": _Registry()})


def uvicorn_options(limits: ConnectionLimits) -> dict[str, Any]:
    """The options of ``uvicorn.run`` / ``uvicorn.Config`` that serve behind :func:`guarded_protocol`.

    uvicorn's ``limit_concurrency`` is not set: it counts connections only when a request's headers
    are complete (503 then), after the slow ones already hold their descriptors; the guard refuses or
    evicts at accept instead."""
    return {"http": guarded_protocol(limits), "timeout_keep_alive": limits.keep_alive_seconds}


def uvicorn_config(app: Any, host: str, port: int, limits: ConnectionLimits, **kwargs: Any) -> Any:
    """The uvicorn configuration serving ``app`` behind :func:`guarded_protocol`."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, **uvicorn_options(limits), **kwargs)
