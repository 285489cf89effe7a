"""A session read and stepped (``/v1/sessions``)."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from overlapdp.service.core import QueryService
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.models import SessionQueryRequest
from overlapdp.service.responses import SessionInfo, SessionStep
from overlapdp.service.routes import Deadline, IdempotencyKey


def sessions_router(service: QueryService, require_analyst: Callable[..., Awaitable[Any]]) -> APIRouter:
    """The sessions routes over ``service``."""
    router = APIRouter()
    Analyst = Annotated[AnalystRecord, Depends(require_analyst)]

    @router.get("/v1/sessions/{session_id}", tags=["analyst"])
    def session(session_id: str, who: Analyst) -> SessionInfo:
        """The session's parameters, how many queries and positives it has had, whether it is closed."""
        return service.session_info(who, session_id)

    @router.post("/v1/sessions/{session_id}/query", tags=["analyst"])
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

    return router
