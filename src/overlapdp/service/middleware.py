"""The service's ASGI middleware: a body size limit (:class:`BodyLimit`), each request's time budget
from its arrival (:class:`RequestClock`) and the analysts' requests in progress (:class:`AnalystGate`)."""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from overlapdp.errors import OverlapDPError, TooManyRequests
from overlapdp.service import serving
from overlapdp.service.auth import AuthError
from overlapdp.service.ledger import AnalystRecord

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: a body longer than ``limit`` bytes gets 413 before the endpoint sees it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_long = int(value) > self.limit
                except ValueError:
                    too_long = True
                if too_long:
                    await _too_large(send, self.limit)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _too_large(send, self.limit)


class _BodyTooLarge(Exception):
    pass


#: The scope key holding a request's deadline (a :data:`serving.clock` time).
DEADLINE = "overlapdp.deadline"


class RequestClock:
    """ASGI middleware: each request's deadline is ``seconds`` after its arrival (stamped by the
    connection guard when served, :mod:`overlapdp.service.serving`; else when the application is
    called), kept in the scope for the endpoints. The body must be read by then: a body still
    arriving at the deadline is cut (the application sees the client gone) and the request gets 503
    ``TimeBudgetExceeded``, nothing charged. A slow body thus holds its connection no longer than the
    request's time budget, whatever server runs the application."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = scope.get(serving.ARRIVED)
        deadline = (serving.clock() if arrived is None else float(arrived)) + self.seconds
        scope[DEADLINE] = deadline
        late = False
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal late, body_done
            if body_done:
                return await receive()  # e.g. waiting for a disconnect: not the body's time
            left = deadline - serving.clock()
            try:
                if left <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                late = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if late:
                return  # whatever the application answers to the cut body, the answer is the 503
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, timed_receive, tracking_send)
        if late and not started:
            body = json.dumps(
                {
                    "error": "TimeBudgetExceeded",
                    "detail": "the request body did not arrive within the request's time budget; "
                    "nothing was charged",
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


#: At most this long a backlogged analyst's request waits for other analysts' running requests.
YIELD_SECONDS = 0.05


class AnalystGate:
    """ASGI middleware: fair scheduling between analysts, before any body is read.

    An analyst's requests run ``running`` at a time (over every analyst endpoint); the next ones wait
    here, in arrival order, until one of theirs is done, so an analyst with many parallel requests
    has as many running as one with a single request, and cannot take the server's interpreter,
    threads and ledger commits from the others (benchmarks/service.py, cheap50: with two running, 50 parallel cheap queries
    of one analyst held another's p99 at 2.3-2.5x its baseline; with one, 1.6-1.9x). An analyst
    whose request had to wait for their turn (they keep requests queued) also lets the other analysts'
    requests running at that moment finish first (at most :data:`YIELD_SECONDS`): otherwise their
    next request starts the instant the last ends, and every request of another analyst shares the
    interpreter with one of theirs from start to end (cheap50 measured without the host's drift:
    2.0-2.2x; with the yield 1.3-1.7x). A waiting request
    counts against its time budget: one still waiting at its deadline gets 503
    ``TimeBudgetExceeded``, nothing read or charged; one whose client goes away while it waits (the
    connection guard's event, :data:`overlapdp.service.serving.GONE`) leaves the queue at once and
    never runs. More than ``limit`` requests of one analyst in
    progress (running or waiting): one more gets 429 ``TooManyRequests`` with ``Retry-After``
    (``retry_after`` seconds). The token is checked here (a cached hash); a request without a valid
    analyst token goes on to the endpoint, which answers 401 (or checks the admin token)."""

    def __init__(
        self,
        app: ASGIApp,
        authenticate: Callable[[str | None], AnalystRecord],
        limit: int,
        retry_after: int = 1,
        running: int = 1,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.limit = limit
        self.retry_after = retry_after
        self.running_limit = max(1, running)
        self._lock = threading.Lock()
        #: Requests in progress per analyst (running or waiting for their turn).
        self.running: dict[str, int] = {}
        self._turns: dict[str, asyncio.Semaphore] = {}
        #: Per analyst, an event per request now running (set when it ends): what a backlogged
        #: analyst's next request lets finish first.
        self._active: dict[str, set[asyncio.Event]] = {}
        #: Requests refused with 429, and requests that waited for their analyst's turn (figures and tests).
        self.refused = 0
        self.waited = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = self._analyst(scope) if scope["type"] == "http" and self.limit > 0 else None
        if who is None:
            await self.app(scope, receive, send)
            return
        with self._lock:
            busy = self.running.get(who, 0)
            if busy >= self.limit:
                self.refused += 1
            else:
                self.running[who] = busy + 1
                turn = self._turns.setdefault(who, asyncio.Semaphore(self.running_limit))
        if busy >= self.limit:
            await self._refuse(send)
            return
        try:
            backlog = turn.locked()
            if backlog:
                self.waited += 1
            deadline = scope.get(DEADLINE)
            got = await _turn(
                turn,
                None if deadline is None else max(0.0, float(deadline) - serving.clock()),
                scope.get(serving.GONE),
            )
            if got is None:
                return  # the client went away while waiting: nothing read, nobody to answer
            if not got:
                await _late(send)
                return
            done = asyncio.Event()
            try:
                if backlog:
                    # this analyst keeps requests queued: its next one lets the other analysts'
                    # requests running now finish first (up to YIELD_SECONDS), so that a steady
                    # stream of one analyst's requests does not run beside every request of another
                    others = [e for name, evs in self._active.items() if name != who for e in evs]
                    left = YIELD_SECONDS
                    if deadline is not None:
                        left = min(left, max(0.0, float(deadline) - serving.clock()))
                    await _let_finish(others, left)
                self._active.setdefault(who, set()).add(done)
                await self.app(scope, receive, send)
            finally:
                done.set()
                evs = self._active.get(who)
                if evs is not None:
                    evs.discard(done)
                    if not evs:
                        self._active.pop(who, None)
                turn.release()
        finally:
            with self._lock:
                left = self.running.get(who, 1) - 1
                if left > 0:
                    self.running[who] = left
                else:
                    self.running.pop(who, None)
                    self._turns.pop(who, None)

    def _analyst(self, scope: Scope) -> str | None:
        path = str(scope.get("path", ""))
        if not path.startswith("/v1/") or path.startswith("/v1/admin"):
            return None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer":
                    return None
                try:
                    return self.authenticate(token.strip()).name
                except (AuthError, OverlapDPError):
                    return None  # the endpoint answers 401
        return None

    async def _refuse(self, send: Send) -> None:
        err = TooManyRequests(
            f"this analyst already has {self.limit} requests in progress; retry after "
            f"{self.retry_after} s (nothing was read or charged)"
        )
        body = json.dumps(
            {"error": type(err).__name__, "detail": str(err), "retry_after": self.retry_after}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(self.retry_after).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _turn(turn: asyncio.Semaphore, seconds: float | None, gone: asyncio.Event | None) -> bool | None:
    """Wait for ``turn``: True once held, False past ``seconds``, None when ``gone`` is set first (the
    connection was lost; a turn acquired at that same moment is given back)."""
    if gone is None:
        try:
            await asyncio.wait_for(turn.acquire(), seconds)
        except TimeoutError:
            return False
        return True
    if gone.is_set():
        return None
    acquire = asyncio.ensure_future(turn.acquire())
    left = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({acquire, left}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (acquire, left):
            task.cancel()
        await asyncio.gather(acquire, left, return_exceptions=True)
    held = acquire.done() and not acquire.cancelled() and acquire.exception() is None
    if gone.is_set():
        if held:
            turn.release()
        return None
    return held


async def _let_finish(running: list[asyncio.Event], seconds: float) -> None:
    """Wait until every one of ``running`` is set, or ``seconds`` have passed."""
    if not running:
        return
    waits = [asyncio.ensure_future(e.wait()) for e in running]
    try:
        await asyncio.wait(waits, timeout=seconds)
    finally:
        for w in waits:
            w.cancel()


async def _late(send: Send) -> None:
    body = json.dumps(
        {
            "error": "TimeBudgetExceeded",
            "detail": "the request's time budget ran out while it waited for the analyst's other "
            "requests to finish; nothing was read or charged",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": "TooLarge", "detail": f"the request body exceeds {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
