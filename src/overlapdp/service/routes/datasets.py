"""An analyst's data sets (``/v1/datasets``): reading them, queries, batches, dry runs, plans and
opening a session on one."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from overlapdp.errors import BadRequest, NotFound
from overlapdp.service import definitions
from overlapdp.service.core import QueryService, TooLarge
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.models import BatchRequest, CostRequest, PlanRequest, QueryRequest, SessionRequest
from overlapdp.service.responses import (
    BatchAnswer,
    CostEstimate,
    DatasetInfo,
    GroupedAnswer,
    QueryAnswer,
    ReleasePlanned,
    SessionOpened,
)
from overlapdp.service.routes import Deadline, IdempotencyKey


def datasets_router(service: QueryService, require_analyst: Callable[..., Awaitable[Any]]) -> APIRouter:
    """The datasets routes over ``service``."""
    router = APIRouter()
    Analyst = Annotated[AnalystRecord, Depends(require_analyst)]

    @router.get("/v1/datasets", tags=["analyst"])
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

    @router.get("/v1/datasets/{name}", tags=["analyst"])
    def dataset(name: str, who: Analyst) -> DatasetInfo:
        """One data set: its definition, the parameter to give, its schema."""
        has_quota(name, who)
        return service.dataset_for(who, name)

    @router.post("/v1/datasets/{name}/query", tags=["analyst"])
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

    @router.post("/v1/datasets/{name}/batch", tags=["analyst"])
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

    @router.post("/v1/datasets/{name}/cost", tags=["analyst"])
    def cost(name: str, body: CostRequest, who: Analyst, deadline: Deadline) -> CostEstimate:
        """A dry run: what the queries would cost and whether they would be admitted now (nothing is spent).
        With 'allocation': also each query's share of the batch's own overlap cost, as .../plan gives it."""
        has_quota(name, who)
        _batch_size(service, body.queries)
        return service.cost(
            who,
            name,
            body.queries,
            *_parameter(body),
            consistent=body.consistent,
            allocation=body.allocation,
            objective=body.objective,
            deadline=deadline,
        )

    @router.post("/v1/datasets/{name}/plan", tags=["analyst"])
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

    @router.post("/v1/datasets/{name}/sessions", tags=["analyst"], status_code=201)
    def open_session(
        name: str, body: SessionRequest, who: Analyst, deadline: Deadline, key: IdempotencyKey = None
    ) -> SessionOpened:
        """Open a sparse-vector or guess-and-check session (its epsilon is charged when it opens)."""
        has_quota(name, who)
        params = body.model_dump(exclude={"kind"}, exclude_none=True)
        return service.open_session(who, name, body.kind, params, request_key=key, deadline=deadline)

    return router


def _parameter(body: QueryRequest | BatchRequest) -> tuple[float | None, str | None]:
    """The per-query amount the body gives, and its name (at most one of them)."""
    given = [(getattr(body, n), n) for n in definitions.AMOUNTS if getattr(body, n) is not None]
    if len(given) > 1:
        raise BadRequest("give one of " + ", ".join(repr(n) for n in definitions.AMOUNTS) + ", not several")
    return given[0] if given else (None, None)


def _batch_size(service: QueryService, queries: list[Any]) -> None:
    if len(queries) > service.limits.max_batch:
        raise TooLarge(f"a batch may hold at most {service.limits.max_batch} queries, got {len(queries)}")
