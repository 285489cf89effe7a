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

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from overlapdp.errors import BadRequest, MethodNotAllowed, NotFound, OverlapDPError
from overlapdp.service.auth import AdminKey, AuthError
from overlapdp.service.core import FieldRefused, QueryService, ServiceError
from overlapdp.service.dashboard import install_dashboard
from overlapdp.service.docs import install_docs
from overlapdp.service.ledger import LedgerError
from overlapdp.service.middleware import AnalystGate, BodyLimit, RequestClock
from overlapdp.service.models import GuessAndCheckSession, SparseVectorSession
from overlapdp.service.responses import ErrorBody, ValidationErrorBody
from overlapdp.service.routes import admin_guard, analyst_guard
from overlapdp.service.routes.admin import admin_router
from overlapdp.service.routes.datasets import datasets_router
from overlapdp.service.routes.me import me_router
from overlapdp.service.routes.sessions import sessions_router

log = logging.getLogger("overlapdp.service")


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
    app.add_middleware(
        AnalystGate,
        authenticate=service.authenticate,
        limit=service.limits.analyst_requests,
        running=service.limits.analyst_running,
    )
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

    # -- routes, one router per resource (routes/) --------------------------------------------------
    require_admin = admin_guard(admin)
    require_analyst = analyst_guard(service)
    app.include_router(admin_router(service, require_admin))
    app.include_router(datasets_router(service, require_analyst))
    app.include_router(sessions_router(service, require_analyst))
    app.include_router(me_router(service, require_analyst))
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
