"""The HTTP API (FastAPI): admin endpoints, analyst endpoints, errors that never leak.

- Every endpoint needs a bearer token: the admin token for ``/v1/admin/...``, an analyst's otherwise.
- Bad input is a 4xx with ``{"error": ..., "detail": ...}``, and so are the framework's own refusals (an
  unknown route, a method a route does not take, a body that is not parseable JSON); messages name the field or attribute and
  never carry a value of the data; an unexpected failure is a bare 500 without details. A 422 lists
  ``{"loc": [...], "msg": ...}`` per refused field (unknown fields, wrong types, a field the chosen
  mechanism does not use).
- Every endpoint declares its response model (:mod:`overlapdp.service.responses`), so ``/openapi.json``
  describes every answer and every error body.
- Bodies larger than ``Limits.max_body_bytes`` and batches larger than ``Limits.max_batch`` get 413.
- Each request's time budget (``Limits.request_seconds``) starts when it arrives (:class:`RequestClock`):
  a body not read by then is a 503 ``TimeBudgetExceeded``, and every later step is checked against
  the same deadline. An analyst with ``Limits.analyst_requests`` requests in progress gets 429 with
  ``Retry-After`` for one more (:class:`AnalystGate`), before its body is read.
- CORS is off unless origins are given.
"""

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from overlapdp.errors import BadRequest, MethodNotAllowed, NotFound, OverlapDPError, TooManyRequests
from overlapdp.mechanisms.answer_options import DEFAULT_DELTA
from overlapdp.service import definitions, serving
from overlapdp.service.auth import AdminKey, AuthError
from overlapdp.service.core import FieldRefused, QueryService, ServiceError, TooLarge
from overlapdp.service.dashboard import install_dashboard
from overlapdp.service.docs import install_docs
from overlapdp.service.ledger import AnalystRecord, LedgerError
from overlapdp.service.models import (
    AnalystCreate,
    BatchRequest,
    BudgetUpdate,
    DatasetRegistration,
    GuessAndCheckSession,
    PlanRequest,
    QueryRequest,
    QuotaUpdate,
    SessionQueryRequest,
    SessionRequest,
    SparseVectorSession,
)
from overlapdp.service.responses import (
    AdminDatasetInfo,
    AnalystCreated,
    AnalystInfo,
    BatchAnswer,
    CostEstimate,
    DatasetInfo,
    DatasetStatus,
    ErrorBody,
    GroupedAnswer,
    LedgerEntry,
    NewToken,
    QueryAnswer,
    ReleasePlanned,
    Revoked,
    SessionInfo,
    SessionOpened,
    SessionStep,
    ValidationErrorBody,
)

log = logging.getLogger("overlapdp.service")

_bearer = HTTPBearer(auto_error=False, description="an analyst's token, or the admin token for /v1/admin")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="a retried request with the same key returns the recorded answer and is not charged again",
    ),
]

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


class AnalystGate:
    """ASGI middleware: at most ``limit`` requests of one analyst in progress at once, over every
    analyst endpoint; one more gets 429 ``TooManyRequests`` with ``Retry-After`` (``retry_after``
    seconds) before its body is read, so an analyst's parallel requests cannot take the server's
    threads and processors from the others. The token is checked here (a cached hash); a request
    without a valid analyst token goes on to the endpoint, which answers 401 (or checks the admin
    token)."""

    def __init__(
        self,
        app: ASGIApp,
        authenticate: Callable[[str | None], AnalystRecord],
        limit: int,
        retry_after: int = 1,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.limit = limit
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self.running: dict[str, int] = {}
        #: Requests refused with 429 (figures and tests).
        self.refused = 0

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
        if busy >= self.limit:
            await self._refuse(send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                left = self.running.get(who, 1) - 1
                if left > 0:
                    self.running[who] = left
                else:
                    self.running.pop(who, None)

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


def _error(
    status: int, exc: BaseException, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body: dict[str, Any] = {
        "error": type(exc).__name__,
        "detail": str(exc).splitlines()[0] if str(exc) else "",
    }
    body.update(extra)
    out = dict(headers or {})
    if status == 401:
        out["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=out or None)


def _operation_id(route: APIRoute) -> str:
    """A route's OpenAPI operation id: its function's name (FastAPI's default appends the path and the
    method, ``set_quota_v1_admin_analysts__name__quotas__dataset__put``)."""
    return route.name


def _framework_error(exc: HTTPException) -> ServiceError:
    """The service error standing for one of the framework's own HTTP refusals (its class name is the
    body's ``error``, as for every other error)."""
    if exc.status_code == 404:
        return NotFound("no such route: see /openapi.json for the service's routes")
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("allow") or (exc.headers or {}).get("Allow") or ""
        return MethodNotAllowed(
            "this route does not take this method" + (f"; it takes {allowed}" if allowed else "")
        )
    if exc.status_code == 400:
        return BadRequest(
            "the request body could not be parsed as JSON (it may be nested too deeply); nothing was charged"
        )
    err = ServiceError(str(exc.detail).splitlines()[0] if exc.detail else "the request was refused")
    err.status = exc.status_code
    return err


#: The error bodies every endpoint may answer with (declared in the OpenAPI description).
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "bad input: the detail names the field or attribute"},
    401: {"model": ErrorBody, "description": "a missing, wrong or revoked token"},
    403: {
        "model": ErrorBody,
        "description": "the quota or the global budget cannot pay (with 'remaining_at_least')",
    },
    404: {
        "model": ErrorBody,
        "description": "unknown data set, analyst, session or route; no quota on the data set",
    },
    405: {"model": ErrorBody, "description": "a method the route does not take (see the Allow header)"},
    409: {"model": ErrorBody, "description": "a conflict: exhausted session, reused key, unreadable rows"},
    413: {"model": ErrorBody, "description": "a body, batch or condition over its limit"},
    422: {"model": ValidationErrorBody, "description": "the body does not hold the documented fields"},
    429: {
        "model": ErrorBody,
        "description": "the analyst already has Limits.analyst_requests requests in progress "
        "(TooManyRequests): retry after the Retry-After header's seconds (also 'retry_after' in the "
        "body); nothing was read or charged",
    },
    500: {"model": ErrorBody, "description": "an internal error; nothing was charged"},
    503: {
        "model": ErrorBody,
        "description": "the ledger could not record the request (retry with its key), or the request's "
        "time budget, counted from its arrival, ran out (TimeBudgetExceeded), or the server holds too "
        "many connections (TooManyConnections); nothing was charged",
    },
}


def create_app(service: QueryService, admin: AdminKey, *, cors_origins: list[str] | None = None) -> FastAPI:
    """The ASGI application over ``service``; ``admin`` checks the admin token."""
    app = FastAPI(
        title="overlapdp query service",
        version="1",
        description=(
            "Differentially private counting queries for several analysts, charged by maximum overlap, "
            "with a durable ledger. Every answer is recorded with its charge before it is sent."
        ),
        responses=_ERRORS,
        # readable operation ids (a generated client's method names): the route function's name, which
        # is the Python client's method name where it has one (query, batch, cost, me, set_quota, ...)
        generate_unique_id_function=_operation_id,
        # /docs from the package's own assets (service/docs.py: FastAPI's pages load a CDN); no /redoc
        docs_url=None,
        redoc_url=None,
    )
    install_docs(app, app.title)
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors_origins,
            allow_methods=["GET", "POST", "PUT"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
        )
    app.add_middleware(BodyLimit, limit=service.limits.max_body_bytes)
    # added last: runs first (the gate refuses before any body is read; the clock starts before it)
    app.add_middleware(AnalystGate, authenticate=service.authenticate, limit=service.limits.analyst_requests)
    app.add_middleware(RequestClock, seconds=service.limits.request_seconds)

    # -- errors -------------------------------------------------------------------------------------
    @app.exception_handler(AuthError)
    async def _auth(_: Request, exc: AuthError) -> JSONResponse:
        return _error(401, exc)

    @app.exception_handler(FieldRefused)
    async def _refused_field(_: Request, exc: FieldRefused) -> JSONResponse:
        problem = {"loc": ["body", exc.field], "msg": str(exc)}
        return JSONResponse({"error": "ValidationError", "detail": [problem]}, status_code=422)

    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        if exc.status == 429:  # TooManyRequests: when to come back
            return _error(429, exc, headers={"Retry-After": "1"}, **{"retry_after": 1, **exc.details})
        details = dict(exc.details)
        if "remaining" in details:  # a bound from the admission, named as in an answer (responses._AT_LEAST)
            details["remaining_at_least"] = details.pop("remaining")
        return _error(exc.status, exc, **details)

    @app.exception_handler(LedgerError)
    async def _ledger(_: Request, exc: LedgerError) -> JSONResponse:
        return _error(409, exc)

    @app.exception_handler(OverlapDPError)
    async def _bad_input(_: Request, exc: OverlapDPError) -> JSONResponse:
        return _error(400, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Only where and what: the offending input is not echoed back.
        problems = [{"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e)} for e in exc.errors()]
        return JSONResponse({"error": "ValidationError", "detail": problems}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        # the framework's own refusals (an unknown route, a method the route does not take, a body the
        # JSON parser gave up on, e.g. nested 100 000 deep) get the one error body too
        return _error(exc.status_code, _framework_error(exc), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return JSONResponse({"error": "InternalError", "detail": "internal error"}, status_code=500)

    # -- authentication -------------------------------------------------------------------------------
    # Async so that authentication does not cost a thread hop; a cache miss is one indexed read.
    async def require_admin(creds: Credentials) -> None:
        admin.check(creds.credentials if creds else None)

    async def require_analyst(creds: Credentials) -> AnalystRecord:
        return service.authenticate(creds.credentials if creds else None)

    async def request_deadline(request: Request) -> float | None:
        value = request.scope.get(DEADLINE)
        return None if value is None else float(value)

    Admin = Annotated[None, Depends(require_admin)]
    Analyst = Annotated[AnalystRecord, Depends(require_analyst)]
    Deadline = Annotated[float | None, Depends(request_deadline)]

    def _quota_for(dataset: str, quota: float | None, epsilon: float | None) -> float:
        """A quota in the data set's amount, or calibrated from a target epsilon at its delta."""
        if epsilon is None:
            return _calibrated("pure", {}, quota, None, "quota")
        record = service.store.get_dataset(dataset)
        if record is None:
            raise NotFound(f"unknown data set {dataset!r}")
        return _calibrated(record.definition, record.params, quota, epsilon, "quota")

    # -- admin ----------------------------------------------------------------------------------------
    @app.post("/v1/admin/datasets", tags=["admin"], status_code=201)
    def register_dataset(body: DatasetRegistration, _: Admin) -> AdminDatasetInfo:
        """Register a data set (file, schema, engine) with its privacy definition and global budget."""
        budget = _calibrated(body.definition, body.params(), body.budget, body.epsilon, "budget")
        return service.register_dataset(
            body.name, body.path, body.schema_, body.engine, body.definition, budget, body.params()
        )

    @app.get("/v1/admin/datasets", tags=["admin"])
    def list_datasets(_: Admin) -> list[AdminDatasetInfo]:
        """Every registered data set with its file, engine, definition and global budget."""
        return service.list_datasets()

    @app.get("/v1/admin/datasets/{name}", tags=["admin"])
    def status(name: str, _: Admin) -> DatasetStatus:
        """Spend, remaining budget and the guarantee over all analysts (concurrent composition)."""
        return service.dataset_status(name)

    @app.put("/v1/admin/datasets/{name}/budget", tags=["admin"])
    def set_budget(name: str, body: BudgetUpdate, _: Admin) -> AdminDatasetInfo:
        """Change the global budget (or the definition, which replays the ledger); charges stay."""
        record = service.store.get_dataset(name)
        if record is None:
            raise NotFound(f"unknown data set {name!r}")
        params = {**record.params, **(body.params() or {})}
        budget = _calibrated(body.definition, params, body.budget, body.epsilon, "budget")
        return service.set_budget(name, body.definition, budget, body.params())

    @app.post("/v1/admin/analysts", tags=["admin"], status_code=201)
    def create_analyst(body: AnalystCreate, _: Admin) -> AnalystCreated:
        """Create an analyst with quotas; the token is shown here once and stored only as a hash."""
        quotas = dict(body.quotas)
        for ds, epsilon in body.quota_epsilons.items():
            if ds in quotas:
                raise BadRequest(f"data set {ds!r} is in both 'quotas' and 'quota_epsilons': give one")
            quotas[ds] = _quota_for(ds, None, epsilon)
        return service.create_analyst(body.name, quotas)

    @app.get("/v1/admin/analysts", tags=["admin"])
    def analysts(_: Admin) -> list[AnalystInfo]:
        """Every analyst with quotas, spend and remaining budget per data set."""
        return service.list_analysts()

    @app.put("/v1/admin/analysts/{name}/quotas/{dataset}", tags=["admin"])
    def set_quota(name: str, dataset: str, body: QuotaUpdate, _: Admin) -> AnalystInfo:
        """Set the analyst's quota on a data set (recorded charges stay)."""
        return service.set_quota(name, dataset, _quota_for(dataset, body.quota, body.epsilon))

    @app.post("/v1/admin/analysts/{name}/revoke", tags=["admin"])
    def revoke(name: str, _: Admin) -> Revoked:
        """Revoke the analyst's token (a new token lifts the revocation)."""
        service.revoke(name)
        return Revoked(name=name, revoked=True)

    @app.post("/v1/admin/analysts/{name}/token", tags=["admin"])
    def rotate_token(name: str, _: Admin) -> NewToken:
        """A new token for the analyst (the old one stops working; also lifts a revocation)."""
        return service.rotate_token(name)

    @app.get("/v1/admin/ledger", tags=["admin"])
    def full_ledger(
        _: Admin,
        dataset: str | None = None,
        analyst: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[LedgerEntry]:
        """The full ledger in order (page with ``after`` = the last ``seq`` seen)."""
        return service.ledger(dataset=dataset, analyst=analyst, after=after, limit=limit)

    # -- analysts -------------------------------------------------------------------------------------
    @app.get("/v1/datasets", tags=["analyst"])
    def datasets(who: Analyst) -> list[DatasetInfo]:
        """The data sets this analyst has a quota on, with their schemas."""
        return service.datasets_for(who)

    def has_quota(name: str, who: AnalystRecord) -> None:
        """An analyst without a quota on an existing data set is told so (not "unknown data set")."""
        if name not in who.quotas and service.store.get_dataset(name) is not None:
            raise NotFound(
                f"analyst {who.name!r} has no quota on data set {name!r}: the custodian gives one with "
                f"PUT /v1/admin/analysts/{who.name}/quotas/{name}"
            )

    @app.get("/v1/datasets/{name}", tags=["analyst"])
    def dataset(name: str, who: Analyst) -> DatasetInfo:
        """One data set: its definition, the parameter to give, its schema."""
        has_quota(name, who)
        return service.dataset_for(who, name)

    @app.post("/v1/datasets/{name}/query", tags=["analyst"])
    def query(
        name: str, body: QueryRequest, who: Analyst, deadline: Deadline, key: IdempotencyKey = None
    ) -> QueryAnswer | GroupedAnswer:
        """Answer one counting query with noise; 403 with the remaining quota when it cannot be paid.
        With ``group_by``: one answer per cell of the grouped attributes' domain, charged together."""
        has_quota(name, who)
        out = service.query(who, name, [body.spec()], *_parameter(body), request_key=key, deadline=deadline)
        first = out.answers[0].group if out.answers else None
        if first is not None:
            return GroupedAnswer(
                group_by=list(first),
                answers=out.answers,
                cost=out.cost,
                replayed=out.replayed,
                remaining=out.remaining,
            )
        return QueryAnswer(
            **out.answers[0].model_dump(),
            cost=out.cost,
            replayed=out.replayed,
            remaining=out.remaining,
            spent_epsilon_delta=out.spent_epsilon_delta,
        )

    @app.post("/v1/datasets/{name}/batch", tags=["analyst"])
    def batch(
        name: str, body: BatchRequest, who: Analyst, deadline: Deadline, key: IdempotencyKey = None
    ) -> BatchAnswer:
        """Answer several queries, admitted and charged together (all or none)."""
        has_quota(name, who)
        _batch_size(service, body.queries)
        return service.query(
            who,
            name,
            body.queries,
            *_parameter(body),
            request_key=key,
            consistent=body.consistent,
            deadline=deadline,
        )

    @app.post("/v1/datasets/{name}/cost", tags=["analyst"])
    def cost(name: str, body: BatchRequest, who: Analyst, deadline: Deadline) -> CostEstimate:
        """A dry run: what the queries would cost and whether they would be admitted now (nothing is spent)."""
        has_quota(name, who)
        _batch_size(service, body.queries)
        return service.cost(
            who, name, body.queries, *_parameter(body), consistent=body.consistent, deadline=deadline
        )

    @app.post("/v1/datasets/{name}/plan", tags=["analyst"])
    def plan(name: str, body: PlanRequest, who: Analyst, deadline: Deadline) -> ReleasePlanned:
        """Plan a release before any data is read (nothing is spent): each query's share of a total
        budget (the optimal overlap-aware allocation by default), its noise and error bar, and the total
        noise variance under sequential, partition-based, even overlap and optimal accounting; or, with
        'target_error', the smallest budget that answers every query within it."""
        has_quota(name, who)
        _batch_size(service, body.queries)
        planned = service.plan(
            who,
            name,
            body.queries,
            budget=body.budget,
            target_error=body.target_error,
            allocation=body.allocation,
            objective=body.objective,
            level=body.level,
            deadline=deadline,
        )
        return ReleasePlanned.model_validate(planned)

    @app.post("/v1/datasets/{name}/sessions", tags=["analyst"], status_code=201)
    def open_session(
        name: str, body: SessionRequest, who: Analyst, deadline: Deadline, key: IdempotencyKey = None
    ) -> SessionOpened:
        """Open a sparse-vector or guess-and-check session (its epsilon is charged when it opens)."""
        has_quota(name, who)
        params = body.model_dump(exclude={"kind"}, exclude_none=True)
        return service.open_session(who, name, body.kind, params, request_key=key, deadline=deadline)

    @app.get("/v1/sessions/{session_id}", tags=["analyst"])
    def session(session_id: str, who: Analyst) -> SessionInfo:
        """The session's parameters, how many queries and positives it has had, whether it is closed."""
        return service.session_info(who, session_id)

    @app.post("/v1/sessions/{session_id}/query", tags=["analyst"])
    def session_query(
        session_id: str,
        body: SessionQueryRequest,
        who: Analyst,
        deadline: Deadline,
        key: IdempotencyKey = None,
    ) -> SessionStep:
        """One step of a session: a query with a threshold (sparse vector) or a guess (guess-and-check)."""
        arg_name, arg = body.argument
        return service.session_query(
            who, session_id, body.spec(), arg, request_key=key, arg_name=arg_name, deadline=deadline
        )

    @app.get("/v1/me", tags=["analyst"])
    def me(who: Analyst) -> AnalystInfo:
        """Own quotas, spend and remaining budget per data set."""
        return service.analyst_info(who)

    @app.get("/v1/me/ledger", tags=["analyst"])
    def ledger(
        who: Analyst,
        dataset: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[LedgerEntry]:
        """Own charges and the answers released to this analyst, in ledger order."""
        return service.ledger(dataset=dataset, analyst=who.name, after=after, limit=limit)

    install_dashboard(app, service.store, require_admin)
    return app


#: The fields of each session kind (a field of the other kind is refused, never ignored).
_SESSION_FIELDS = {
    "sparse_vector": list(SparseVectorSession.model_fields),
    "guess_and_check": list(GuessAndCheckSession.model_fields),
}


def _message(problem: Any) -> str:
    """A validation problem's message; an unknown field is named with the fields that are accepted."""
    if problem.get("type") != "extra_forbidden":
        return str(problem.get("msg", ""))
    loc = [str(p) for p in problem.get("loc", ())]
    name = loc[-1][:60] if loc else ""
    kind = loc[-2] if len(loc) >= 2 else ""
    if kind in _SESSION_FIELDS:
        fields = ", ".join(repr(f) for f in _SESSION_FIELDS[kind])
        return f"a {kind} session does not use {name!r}; its fields are {fields}"
    if name == "query":
        return (
            "unknown field 'query': give the condition as 'where' (SQL-style text) or 'conditions' "
            "(JSON form), the names workload files use"
        )
    return f"unknown field {name!r}"


def _calibrated(
    definition: str, params: Mapping[str, Any], amount: float | None, epsilon: float | None, what: str
) -> float:
    """A budget or quota in the definition's amount: as given, or the largest amount whose (epsilon,
    delta) at the data set's delta is at most ``epsilon``, calibrated by the very function the CLI's
    ``--epsilon`` uses (:func:`overlapdp.mechanisms.answering.calibrate_budget`, MATH.md 5.8); an
    approximate-DP amount is epsilon itself at that delta."""
    field = "budget" if what == "budget" else "quota"
    if (amount is None) == (epsilon is None):
        raise BadRequest(
            f"give the {what} either as {field!r} (in the definition's amount) or as 'epsilon' "
            "(at the data set's delta), not both and not neither"
        )
    if amount is not None:
        return amount
    from overlapdp.mechanisms.answering import calibrate_budget
    from overlapdp.privacy.measures import measure_named
    from overlapdp.validation import check_positive

    m = measure_named(definition)
    if m.counts:  # pure DP, zCDP, GDP: the CLI's calibration
        return calibrate_budget(definition, epsilon, params.get("delta") or DEFAULT_DELTA)
    if m.native_is_epsilon:  # (epsilon, delta)-DP: the amount is epsilon itself at the delta
        return check_positive(epsilon, "epsilon")
    raise BadRequest(
        f"a {definition} data set takes its {what} in its own amount ({field!r}): 'epsilon' is "
        "calibrated for pure, zcdp, gdp and approx data sets"
    )


def _parameter(body: QueryRequest | BatchRequest) -> tuple[float | None, str | None]:
    """The per-query amount the body gives, and its name (at most one of them)."""
    given = [(getattr(body, n), n) for n in definitions.AMOUNTS if getattr(body, n) is not None]
    if len(given) > 1:
        raise BadRequest("give one of " + ", ".join(repr(n) for n in definitions.AMOUNTS) + ", not several")
    return given[0] if given else (None, None)


def _batch_size(service: QueryService, queries: list[Any]) -> None:
    if len(queries) > service.limits.max_batch:
        raise TooLarge(f"a batch may hold at most {service.limits.max_batch} queries, got {len(queries)}")
