"""The HTTP routes, one router per resource (FastAPI's larger-application layout): ``admin`` (data sets,
analysts, tokens, the full ledger), ``datasets`` (an analyst's data sets, queries, dry runs, plans,
sessions opened on one), ``sessions`` (a session read and stepped), ``me`` (an analyst's own figures
and ledger); and what they share: the bearer token, the idempotency key and the request's deadline."""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from overlapdp.service.auth import AdminKey
from overlapdp.service.core import QueryService
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.middleware import DEADLINE

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


def admin_guard(admin: AdminKey) -> Callable[[Credentials], Awaitable[None]]:
    """The dependency checking the admin token."""

    # Async so that authentication does not cost a thread hop; a cache miss is one indexed read.
    async def require_admin(creds: Credentials) -> None:
        admin.check(creds.credentials if creds else None)

    return require_admin


def analyst_guard(service: QueryService) -> Callable[[Credentials], Awaitable[AnalystRecord]]:
    """The dependency giving the analyst holding the bearer token (401 otherwise)."""

    async def require_analyst(creds: Credentials) -> AnalystRecord:
        return service.authenticate(creds.credentials if creds else None)

    return require_analyst


async def request_deadline(request: Request) -> float | None:
    value = request.scope.get(DEADLINE)
    return None if value is None else float(value)


Deadline = Annotated[float | None, Depends(request_deadline)]
