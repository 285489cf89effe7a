"""An analyst's own quotas, spend and ledger (``/v1/me``)."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from overlapdp.service.core import QueryService
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.responses import AnalystInfo, LedgerEntry


def me_router(service: QueryService, require_analyst: Callable[..., Awaitable[Any]]) -> APIRouter:
    """The me routes over ``service``."""
    router = APIRouter()
    Analyst = Annotated[AnalystRecord, Depends(require_analyst)]

    @router.get("/v1/me", tags=["analyst"])
    def me(who: Analyst) -> AnalystInfo:
        """Own quotas, spend and remaining budget per data set."""
        return service.analyst_info(who)

    @router.get("/v1/me/ledger", tags=["analyst"])
    def ledger(
        who: Analyst,
        dataset: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[LedgerEntry]:
        """Own charges and the answers released to this analyst, in ledger order."""
        return service.ledger(dataset=dataset, analyst=who.name, after=after, limit=limit)

    return router
