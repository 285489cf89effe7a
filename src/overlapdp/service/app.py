"""The HTTP API (FastAPI): admin endpoints, analyst endpoints, errors that never leak.

- Every endpoint needs a bearer token: the admin token for ``/v1/admin/...``, an analyst's otherwise.
- Bad input is a 4xx with ``{"error": ..., "detail": ...}``; messages name the field or attribute and
  never carry a value of the data; an unexpected failure is a bare 500 without details.
- Bodies larger than ``Limits.max_body_bytes`` and batches larger than ``Limits.max_batch`` get 413.
- CORS is off unless origins are given.
"""

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from overlapdp.errors import OverlapDPError
from overlapdp.service.auth import AdminKey, AuthError
from overlapdp.service.core import QueryService, ServiceError, TooLarge
from overlapdp.service.dashboard import install_dashboard
from overlapdp.service.ledger import AnalystRecord, LedgerError
from overlapdp.service.models import (
    AnalystCreate,
    BatchRequest,
    BudgetUpdate,
    DatasetRegistration,
    QueryRequest,
    QuotaUpdate,
    SessionQueryRequest,
    SessionRequest,
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


def _error(status: int, exc: BaseException, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {
        "error": type(exc).__name__,
        "detail": str(exc).splitlines()[0] if str(exc) else "",
    }
    body.update(extra)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(service: QueryService, admin: AdminKey, *, cors_origins: list[str] | None = None) -> FastAPI:
    """The ASGI application over ``service``; ``admin`` checks the admin token."""
    app = FastAPI(
        title="overlapdp query service",
        version="1",
        description=(
            "Differentially private counting queries for several analysts, charged by maximum overlap, "
            "with a durable ledger. Every answer is recorded with its charge before it is sent."
        ),
    )
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=cors_origins,
            allow_methods=["GET", "POST", "PUT"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
        )
    app.add_middleware(BodyLimit, limit=service.limits.max_body_bytes)

    # -- errors -------------------------------------------------------------------------------------
    @app.exception_handler(AuthError)
    async def _auth(_: Request, exc: AuthError) -> JSONResponse:
        return _error(401, exc)

    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        return _error(exc.status, exc, **exc.details)

    @app.exception_handler(LedgerError)
    async def _ledger(_: Request, exc: LedgerError) -> JSONResponse:
        return _error(409, exc)

    @app.exception_handler(OverlapDPError)
    async def _bad_input(_: Request, exc: OverlapDPError) -> JSONResponse:
        return _error(400, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Only where and what: the offending input is not echoed back.
        problems = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()
        ]
        return JSONResponse({"error": "ValidationError", "detail": problems}, status_code=422)

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

    Admin = Annotated[None, Depends(require_admin)]
    Analyst = Annotated[AnalystRecord, Depends(require_analyst)]

    # -- admin ----------------------------------------------------------------------------------------
    @app.post("/v1/admin/datasets", tags=["admin"], status_code=201)
    def register_dataset(body: DatasetRegistration, _: Admin) -> dict[str, Any]:
        """Register a data set (file, schema, engine) with its privacy definition and global budget."""
        return service.register_dataset(
            body.name, body.path, body.schema_, body.engine, body.definition, body.budget
        )

    @app.get("/v1/admin/datasets", tags=["admin"])
    def admin_datasets(_: Admin) -> list[dict[str, Any]]:
        return service.list_datasets()

    @app.get("/v1/admin/datasets/{name}", tags=["admin"])
    def dataset_status(name: str, _: Admin) -> dict[str, Any]:
        """Spend, remaining budget and the guarantee over all analysts (concurrent composition)."""
        return service.dataset_status(name)

    @app.put("/v1/admin/datasets/{name}/budget", tags=["admin"])
    def set_budget(name: str, body: BudgetUpdate, _: Admin) -> dict[str, Any]:
        return service.set_budget(name, body.definition, body.budget)

    @app.post("/v1/admin/analysts", tags=["admin"], status_code=201)
    def create_analyst(body: AnalystCreate, _: Admin) -> dict[str, Any]:
        """Create an analyst with quotas; the token is shown here once and stored only as a hash."""
        return service.create_analyst(body.name, body.quotas)

    @app.get("/v1/admin/analysts", tags=["admin"])
    def list_analysts(_: Admin) -> list[dict[str, Any]]:
        return service.list_analysts()

    @app.put("/v1/admin/analysts/{name}/quotas/{dataset}", tags=["admin"])
    def set_quota(name: str, dataset: str, body: QuotaUpdate, _: Admin) -> dict[str, Any]:
        return service.set_quota(name, dataset, body.quota)

    @app.post("/v1/admin/analysts/{name}/revoke", tags=["admin"])
    def revoke(name: str, _: Admin) -> dict[str, Any]:
        service.revoke(name)
        return {"name": name, "revoked": True}

    @app.post("/v1/admin/analysts/{name}/token", tags=["admin"])
    def rotate(name: str, _: Admin) -> dict[str, Any]:
        """A new token for the analyst (the old one stops working; also lifts a revocation)."""
        return service.rotate_token(name)

    @app.get("/v1/admin/ledger", tags=["admin"])
    def admin_ledger(
        _: Admin,
        dataset: str | None = None,
        analyst: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """The full ledger in order (page with ``after`` = the last ``seq`` seen)."""
        return service.ledger(dataset=dataset, analyst=analyst, after=after, limit=limit)

    # -- analysts -------------------------------------------------------------------------------------
    @app.get("/v1/datasets", tags=["analyst"])
    def datasets(who: Analyst) -> list[dict[str, Any]]:
        """The data sets this analyst has a quota on, with their schemas."""
        return service.list_datasets(who)

    @app.get("/v1/datasets/{name}", tags=["analyst"])
    def dataset(name: str, who: Analyst) -> dict[str, Any]:
        return service.dataset_for(who, name)

    @app.post("/v1/datasets/{name}/query", tags=["analyst"])
    def query(name: str, body: QueryRequest, who: Analyst, key: IdempotencyKey = None) -> dict[str, Any]:
        """Answer one counting query with noise; 403 with the remaining quota when it cannot be paid."""
        out = service.query(who, name, [body.query], *_parameter(body.epsilon, body.rho), request_key=key)
        answer = dict(out["answers"][0])
        return {**answer, "cost": out["cost"], "replayed": out["replayed"], "remaining": out.get("remaining")}

    @app.post("/v1/datasets/{name}/batch", tags=["analyst"])
    def batch(name: str, body: BatchRequest, who: Analyst, key: IdempotencyKey = None) -> dict[str, Any]:
        """Answer several queries, admitted and charged together (all or none)."""
        _batch_size(service, body.queries)
        return service.query(who, name, body.queries, *_parameter(body.epsilon, body.rho), request_key=key)

    @app.post("/v1/datasets/{name}/cost", tags=["analyst"])
    def cost(name: str, body: BatchRequest, who: Analyst) -> dict[str, Any]:
        """A dry run: what the queries would cost and whether they would be admitted now (nothing is spent)."""
        _batch_size(service, body.queries)
        return service.query(who, name, body.queries, *_parameter(body.epsilon, body.rho), dry_run=True)

    @app.post("/v1/datasets/{name}/sessions", tags=["analyst"], status_code=201)
    def open_session(
        name: str, body: SessionRequest, who: Analyst, key: IdempotencyKey = None
    ) -> dict[str, Any]:
        """Open a sparse-vector or guess-and-check session (its epsilon is charged when it opens)."""
        params = body.model_dump(exclude={"kind"}, exclude_none=True)
        return service.open_session(who, name, body.kind, params, request_key=key)

    @app.get("/v1/sessions/{session_id}", tags=["analyst"])
    def session(session_id: str, who: Analyst) -> dict[str, Any]:
        return service.session_info(who, session_id)

    @app.post("/v1/sessions/{session_id}/query", tags=["analyst"])
    def session_query(
        session_id: str, body: SessionQueryRequest, who: Analyst, key: IdempotencyKey = None
    ) -> dict[str, Any]:
        """One step of a session: a query with a threshold (sparse vector) or a guess (guess-and-check)."""
        if (body.threshold is None) == (body.guess is None):
            raise _BadRequest("give exactly one of 'threshold' (sparse vector) or 'guess' (guess-and-check)")
        arg = body.threshold if body.threshold is not None else body.guess
        assert arg is not None
        return service.session_query(who, session_id, body.query, arg, request_key=key)

    @app.get("/v1/me", tags=["analyst"])
    def me(who: Analyst) -> dict[str, Any]:
        """Own quotas, spend and remaining budget per data set."""
        return service.analyst_info(who)

    @app.get("/v1/me/ledger", tags=["analyst"])
    def my_ledger(
        who: Analyst,
        dataset: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """Own charges and the answers released to this analyst, in ledger order."""
        return service.ledger(dataset=dataset, analyst=who.name, after=after, limit=limit)

    install_dashboard(app, service.store, require_admin)
    return app


class _BadRequest(ServiceError):
    status = 400


def _parameter(epsilon: float | None, rho: float | None) -> tuple[float | None, str | None]:
    if epsilon is not None and rho is not None:
        raise _BadRequest("give one of 'epsilon' or 'rho', not both")
    if epsilon is not None:
        return epsilon, "epsilon"
    return (rho, "rho") if rho is not None else (None, None)


def _batch_size(service: QueryService, queries: list[Any]) -> None:
    if len(queries) > service.limits.max_batch:
        raise TooLarge(f"a batch may hold at most {service.limits.max_batch} queries, got {len(queries)}")
