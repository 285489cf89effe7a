"""The custodian's routes (``/v1/admin``): data sets, analysts, tokens and the full ledger."""

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from overlapdp.errors import BadRequest, NotFound
from overlapdp.mechanisms.answer_options import DEFAULT_DELTA
from overlapdp.service.core import QueryService
from overlapdp.service.models import AnalystCreate, BudgetUpdate, DatasetRegistration, QuotaUpdate
from overlapdp.service.responses import (
    AdminDatasetInfo,
    AnalystCreated,
    AnalystInfo,
    DatasetStatus,
    LedgerEntry,
    NewToken,
    Revoked,
)


def admin_router(service: QueryService, require_admin: Callable[..., Awaitable[Any]]) -> APIRouter:
    """The admin routes over ``service``."""
    router = APIRouter()
    Admin = Annotated[None, Depends(require_admin)]

    def _quota_for(
        dataset: str, quota: float | None, epsilon: float | None, budgets: list[float] | None = None
    ) -> float:
        """A quota in the data set's amount, or calibrated from a target epsilon at its delta, or from
        per-order budgets (an RDP curve)."""
        if epsilon is None and budgets is None:
            return _calibrated("pure", {}, quota, None, "quota")
        record = service.store.get_dataset(dataset)
        if record is None:
            raise NotFound(f"unknown data set {dataset!r}")
        return _calibrated(record.definition, record.params, quota, epsilon, "quota", budgets)

    @router.post("/v1/admin/datasets", tags=["admin"], status_code=201)
    def register_dataset(body: DatasetRegistration, _: Admin) -> AdminDatasetInfo:
        """Register a data set (file, schema, engine) with its privacy definition and global budget."""
        budget = _calibrated(
            body.definition, body.params(), body.budget, body.epsilon, "budget", body.budgets
        )
        return service.register_dataset(
            body.name, body.path, body.schema_, body.engine, body.definition, budget, body.params()
        )

    @router.get("/v1/admin/datasets", tags=["admin"])
    def list_datasets(_: Admin) -> list[AdminDatasetInfo]:
        """Every registered data set with its file, engine, definition and global budget."""
        return service.list_datasets()

    @router.get("/v1/admin/datasets/{name}", tags=["admin"])
    def status(name: str, _: Admin) -> DatasetStatus:
        """Spend, remaining budget and the guarantee over all analysts (concurrent composition)."""
        return service.dataset_status(name)

    @router.put("/v1/admin/datasets/{name}/budget", tags=["admin"])
    def set_budget(name: str, body: BudgetUpdate, _: Admin) -> AdminDatasetInfo:
        """Change the global budget (or the definition, which replays the ledger); charges stay."""
        record = service.store.get_dataset(name)
        if record is None:
            raise NotFound(f"unknown data set {name!r}")
        params = {**record.params, **(body.params() or {})}
        budget = _calibrated(body.definition, params, body.budget, body.epsilon, "budget", body.budgets)
        return service.set_budget(name, body.definition, budget, body.params())

    @router.post("/v1/admin/analysts", tags=["admin"], status_code=201)
    def create_analyst(body: AnalystCreate, _: Admin) -> AnalystCreated:
        """Create an analyst with quotas; the token is shown here once and stored only as a hash."""
        quotas = dict(body.quotas)
        for ds, epsilon in body.quota_epsilons.items():
            if ds in quotas:
                raise BadRequest(f"data set {ds!r} is in both 'quotas' and 'quota_epsilons': give one")
            quotas[ds] = _quota_for(ds, None, epsilon)
        return service.create_analyst(body.name, quotas)

    @router.get("/v1/admin/analysts", tags=["admin"])
    def analysts(_: Admin) -> list[AnalystInfo]:
        """Every analyst with quotas, spend and remaining budget per data set."""
        return service.list_analysts()

    @router.put("/v1/admin/analysts/{name}/quotas/{dataset}", tags=["admin"])
    def set_quota(name: str, dataset: str, body: QuotaUpdate, _: Admin) -> AnalystInfo:
        """Set the analyst's quota on a data set (recorded charges stay)."""
        return service.set_quota(name, dataset, _quota_for(dataset, body.quota, body.epsilon, body.budgets))

    @router.post("/v1/admin/analysts/{name}/revoke", tags=["admin"])
    def revoke(name: str, _: Admin) -> Revoked:
        """Revoke the analyst's token (a new token lifts the revocation)."""
        service.revoke(name)
        return Revoked(name=name, revoked=True)

    @router.post("/v1/admin/analysts/{name}/token", tags=["admin"])
    def rotate_token(name: str, _: Admin) -> NewToken:
        """A new token for the analyst (the old one stops working; also lifts a revocation)."""
        return service.rotate_token(name)

    @router.get("/v1/admin/ledger", tags=["admin"])
    def full_ledger(
        _: Admin,
        dataset: str | None = None,
        analyst: str | None = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[LedgerEntry]:
        """The full ledger in order (page with ``after`` = the last ``seq`` seen)."""
        return service.ledger(dataset=dataset, analyst=analyst, after=after, limit=limit)

    return router


def _calibrated(
    definition: str,
    params: Mapping[str, Any],
    amount: float | None,
    epsilon: float | None,
    what: str,
    budgets: list[float] | None = None,
) -> float:
    """A budget or quota in the definition's amount: as given; or the largest amount whose (epsilon,
    delta) at the data set's delta is at most ``epsilon``, calibrated by the very function the CLI's
    ``--epsilon`` uses for pure DP, zCDP and GDP (:func:`overlapdp.mechanisms.answering.calibrate_budget`,
    MATH.md 5.8), by the answers' own (epsilon, delta) line for tCDP and RDP
    (:func:`definitions.calibrate_amount`); an approximate-DP amount is epsilon itself at that delta; or,
    for an RDP data set served as a curve, the largest rho whose curve fits per-order ``budgets``
    (:func:`definitions.within_curve`)."""
    field = "budget" if what == "budget" else "quota"
    if sum(x is not None for x in (amount, epsilon, budgets)) != 1:
        raise BadRequest(
            f"give the {what} either as {field!r} (in the definition's amount), as 'epsilon' (at the data "
            "set's delta) or, for an rdp data set with 'orders', as 'budgets' (one per order): exactly "
            "one of them, not both and not neither"
        )
    if amount is not None:
        return amount
    from overlapdp.mechanisms.answering import calibrate_budget
    from overlapdp.privacy.measures import measure_named
    from overlapdp.service import definitions
    from overlapdp.validation import check_positive

    clean = definitions.check_params(definition, params)
    if budgets is not None:
        return definitions.within_curve(definition, clean, budgets)
    m = measure_named(definition)
    if m.counts:  # pure DP, zCDP, GDP: the CLI's calibration
        return calibrate_budget(definition, epsilon, params.get("delta") or DEFAULT_DELTA)
    if m.native_is_epsilon:  # (epsilon, delta)-DP: the amount is epsilon itself at the delta
        return check_positive(epsilon, "epsilon")
    assert epsilon is not None
    return definitions.calibrate_amount(definition, clean, epsilon)
