"""What the service answers (pydantic): the typed results of :class:`~overlapdp.service.core.QueryService`,
which the HTTP API declares as response models, so that ``/openapi.json`` describes every answer.

- Fields that do not apply to an answer are left out of its JSON (not sent as ``null``): a cost names
  the data set's amount (``epsilon``, ``rho``, ``mu`` or ``epsilon_alpha``), a sparse-vector step has ``above`` and
  ``positives_left``, a guess-and-check step ``ok`` and ``estimates_left``. A field that is ``null`` on
  the wire (``rows`` of a data set this instance cannot read, ``remaining`` of a replayed request) is
  declared nullable.
- What the ledger records verbatim (the query, the mechanism, the cost and the answer of a charge, a
  session's parameters) keeps the JSON object it was recorded with.
- Errors: ``{"error": ..., "detail": ...}`` (:class:`ErrorBody`); a 422 carries the list of
  ``{"loc": [...], "msg": ...}`` that names each refused field (:class:`ValidationErrorBody`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Out(BaseModel):
    """A response: unknown fields are a programming error (the declared schema would be wrong)."""

    model_config = ConfigDict(extra="forbid")


def _is_none(value: Any) -> bool:
    return value is None


def omitted(description: str | None = None) -> Any:
    """A field that does not apply to every answer: None, and then left out of the JSON."""
    return Field(default=None, exclude_if=_is_none, description=description)


# -- errors ----------------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    """A refused request: the exception's name and a one-line reason naming the field or attribute.

    A 403 for an unpaid request also carries ``remaining_at_least`` (a lower bound on the analyst's rest
    of the quota, as in an answer; ``GET /v1/me`` has the exact ``remaining``), ``spent_epsilon_delta`` (the analyst's spend as (epsilon, delta): for pure DP
    and zCDP a safe upper bound from the lazy admission tables, computed without an overlap search
    under the lock; the exact spend is in ``GET /v1/me``) and ``quota_admits`` /
    ``global_admits`` (whether each budget alone would have paid).
    """

    model_config = ConfigDict(extra="allow")

    error: str = Field(examples=["QueryError"])
    detail: str = Field(examples=["attribute 'sex': 'female' is not a value of the domain"])


class FieldProblem(BaseModel):
    loc: list[str] = Field(description="where: 'body', then the field (and the session kind, if any)")
    msg: str


class ValidationErrorBody(BaseModel):
    """422: the body is not valid JSON of the documented fields and types; each problem names its field."""

    error: Literal["ValidationError"]
    detail: list[FieldProblem]


# -- data sets -------------------------------------------------------------------------------------

#: The privacy definitions a data set may be served under (``overlapdp.service.definitions.SERVED``).
DefinitionName = Literal["pure", "zcdp", "gdp", "rdp", "tcdp", "approx"]
#: The amount of each: what budgets, quotas and per-query charges are given in.
AmountName = Literal["epsilon", "rho", "mu", "epsilon_alpha"]


class EpsilonDelta(Out):
    """A spend, quota or budget as (epsilon, delta)-DP at the data set's ``delta`` (the library's safe
    conversion of the data set's definition, MATH.md 5.8)."""

    epsilon: float
    delta: float


class RenyiCurve(Out):
    """An RDP data set served as a curve (``orders``): figures per order, each the epsilon(alpha) of the
    Gaussian curve alpha rho of the figure's rho, rounded up (for a spend: at least the worst row's own
    curve). Admission keeps EVERY order within the limit's curve (MATH.md 2.7.2)."""

    orders: list[float]
    spent: list[float] = Field(description="the spend's curve (its rho in 'spent')")
    limit: list[float] = Field(description="the quota's (or the global budget's) curve")


class DatasetInfo(Out):
    """A data set as an analyst sees it."""

    name: str
    definition: DefinitionName
    parameter: AmountName = Field(description="the per-query parameter to give (also the unit of budgets)")
    parameters: dict[str, Any] = Field(
        description="the definition's fixed parameters: delta (of every (epsilon, delta) line), "
        "omega (tcdp), alpha or orders (rdp), composition (approx)"
    )
    schema_: dict[str, Any] = Field(alias="schema", serialization_alias="schema")
    available: bool = Field(description="whether this service instance can read the rows")

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class AdminDatasetInfo(DatasetInfo):
    """A data set as the custodian sees it: also where its rows live and its global budget."""

    path: str
    engine: str
    budget: float
    budget_epsilon_delta: EpsilonDelta
    rows: int | None = Field(description="null when this instance cannot read the rows")


class Guarantee(Out):
    """The guarantee over all analysts together (concurrent composition, MATH.md 3.7): the smaller of the
    data set's own per-row filter and the concurrent composition of the analysts' spends."""

    definition: DefinitionName
    epsilon: float | None = omitted()
    rho: float | None = omitted()
    mu: float | None = omitted()
    epsilon_alpha: float | None = omitted()
    by_global_filter: float
    by_concurrent_composition: float | None = omitted("left out for approximate DP (deltas would add)")
    epsilon_delta: EpsilonDelta


class DatasetStatus(AdminDatasetInfo):
    """Global spend (the worst row's load over all charges), remaining budget, spend per analyst."""

    spent: float
    spent_epsilon_delta: EpsilonDelta
    remaining: float
    spent_by_analyst: dict[str, float]
    guarantee: Guarantee
    curve: RenyiCurve | None = omitted("an rdp data set served as a curve: the spend and budget per order")
    ledger_seq: int = Field(description="the last ledger position included")


# -- analysts --------------------------------------------------------------------------------------


class QuotaInfo(Out):
    definition: DefinitionName
    quota: float
    spent: float = Field(description="the worst row's load of the analyst's charges (overlap-aware)")
    remaining: float
    spent_epsilon_delta: EpsilonDelta
    quota_epsilon_delta: EpsilonDelta
    curve: RenyiCurve | None = omitted("an rdp data set served as a curve: the spend and quota per order")


class AnalystInfo(Out):
    """An analyst's quotas, spend and remaining budget per data set."""

    name: str
    revoked: bool
    datasets: dict[str, QuotaInfo]


class AnalystCreated(Out):
    """A new analyst; ``token`` is shown here once (the service keeps only its hash)."""

    name: str
    token: str
    quotas: dict[str, float]


class NewToken(Out):
    name: str
    token: str


class Revoked(Out):
    name: str
    revoked: Literal[True]


# -- the ledger ------------------------------------------------------------------------------------


class LedgerEntry(Out):
    """One committed charge with what it released, in ledger order (``seq``)."""

    seq: int
    id: str
    dataset: str
    analyst: str
    kind: Literal["query", "session", "session-query"]
    session: str | None
    request_key: str | None
    position: int
    query: dict[str, Any] | None = Field(description="canonical JSON form of the query, and its 'text'")
    mechanism: dict[str, Any]
    cost: dict[str, Any]
    answer: dict[str, Any] | None
    created_at: float


# -- queries ---------------------------------------------------------------------------------------


class BatchCost(Out):
    """What a batch costs on its own: overlap-aware (the worst row's load) and summed (sequential)."""

    overlap: float
    sequential: float


class Cost(Out):
    """The per-query parameter (``epsilon`` or ``rho``, after the data set's definition) and the number
    of queries; a dry run adds ``batch``."""

    definition: DefinitionName
    epsilon: float | None = omitted()
    rho: float | None = omitted()
    mu: float | None = omitted()
    epsilon_alpha: float | None = omitted()
    queries: int
    batch: BatchCost | None = omitted()


class ErrorBar(Out):
    """An answer's error bar: the interval ``[low, high]`` that holds the true value with probability at
    least ``level``, from the exact noise distribution. The one name on every surface: ``error_bar`` in
    the CLI's JSON and here, ``low`` / ``high`` / ``level`` columns in the client's and the library's
    DataFrames (``ci95`` and ``parts.*.interval`` are its deprecated older names over HTTP)."""

    level: float
    low: int | float
    high: int | float


def _error_bar(interval: Any, level: Any = 0.95) -> dict[str, Any]:
    low, high = interval
    return {"level": level, "low": low, "high": high}


def _with_error_bars(data: Any) -> Any:
    """Add ``error_bar`` beside a released ``ci95`` (the service's intervals are 95%) and beside each
    ``interval`` of a mean's ``parts``, a count's ``answer`` beside its ``count`` and ``noise_std``
    beside ``stddev``: a recorded answer keeps the JSON it was recorded with (the older names), a replay
    gets today's names too."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if out.get("count") is not None and out.get("answer") is None and out.get("aggregate") is None:
        out["answer"] = out["count"]
    if out.get("stddev") is not None and "noise_std" not in out:
        out["noise_std"] = out["stddev"]
    if out.get("ci95") is not None and "error_bar" not in out:
        out["error_bar"] = _error_bar(out["ci95"])
    parts = out.get("parts")
    if isinstance(parts, dict):
        fixed = dict(parts)
        for name, part in parts.items():
            if not isinstance(part, dict):
                continue
            if part.get("interval") is not None and "error_bar" not in part:
                part = {**part, "error_bar": _error_bar(part["interval"], part.get("level", 0.95))}
            if part.get("stddev") is not None and "noise_std" not in part:
                part = {**part, "noise_std": part["stddev"]}
            fixed[name] = part
        out["parts"] = fixed
    return out


class Answer(Out):
    """One released noisy count with its standard deviation, 95% ``error_bar`` and noise, and its charge; or a
    noisy sum or mean (``aggregate``, its clipping ``of`` / ``bounds`` / ``step``; a mean's two halves in
    ``parts``), charged as a count of the same rows. The noisy value is ``answer`` whatever the aggregate,
    as in the CLI's JSON and the DataFrames (a count's ``count`` is its deprecated older name); the
    noise's standard deviation ``noise_std`` (``stddev`` is its deprecated older name)."""

    charge: str = Field(description="the ledger id of the charge")
    seq: int = Field(description="the ledger position of the charge")
    answer: int | float = Field(
        description="the noisy value: a count's noisy count (an integer), or a sum's or mean's clipped"
        " noisy value in the column's units"
    )
    count: int | None = Field(
        default=None,
        exclude_if=_is_none,
        deprecated=True,
        description="deprecated: a count's answer (kept for older clients; left out for a sum or mean)",
    )
    aggregate: Literal["sum", "mean"] | None = omitted("a sum or mean (left out for a count)")
    of: str | None = omitted("a sum or mean: the attribute")
    bounds: tuple[float, float] | None = omitted("a sum or mean: the declared clipping bounds")
    step: float | None = omitted("a sum or mean: the resolution")
    noise_std: float | None = omitted(
        "the noise's standard deviation, as in the CLI's JSON and a plan's queries (left out for a mean:"
        " see parts)"
    )
    stddev: float | None = Field(
        default=None,
        exclude_if=_is_none,
        deprecated=True,
        description="deprecated: noise_std (kept for older clients)",
    )
    error_bar: ErrorBar
    ci95: tuple[int, int] | tuple[float, float] = Field(
        deprecated=True, description="deprecated: error_bar's [low, high] (kept for older clients)"
    )
    noise: str | None = omitted("the noise distribution (left out for a mean: see parts)")
    parts: dict[str, Any] | None = omitted("a mean: its noisy sum and noisy count, half the budget each")
    group: dict[str, Any] | None = omitted(
        "a GROUP BY cell's labels, attribute -> value (categorical label, integer, or bin label)"
    )
    item: int | None = omitted("a GROUP BY cell: the position of its query in the request")

    _error_bars = model_validator(mode="before")(_with_error_bars)


#: What an answer says of the rest of the quota. It is named apart from ``remaining`` of ``GET /v1/me``:
#: both bound what one more query on the analyst's most charged rows may carry, but this
#: one comes from a safe upper bound on the spend (no overlap search after an admission), so it may be
#: below ``GET /v1/me``'s exact figure (after a GROUP BY over two attributes, 1.3 where ``/v1/me`` says 1.4).
_AT_LEAST = (
    "remaining_at_least: a lower bound on the analyst's rest of the quota, what one more query on the most "
    "charged rows may carry (GET /v1/me's 'remaining' is the exact figure, never below this one): computed "
    "from a safe upper bound on the spend, without an overlap search after the admission."
    " GDP: sqrt(quota^2 - spent^2); approximate DP: the smaller of the basic and the advanced rule's rooms"
)


def _at_least(description: str | None = None) -> Any:
    """The ``remaining`` attribute of an answer, sent as ``remaining_at_least`` (see :data:`_AT_LEAST`);
    with ``description``, optional (None, left out of the JSON)."""
    if description is None:
        return Field(serialization_alias="remaining_at_least", description=_AT_LEAST)
    return Field(
        default=None,
        exclude_if=_is_none,
        serialization_alias="remaining_at_least",
        description=f"{_AT_LEAST}; {description}",
    )


class QueryAnswer(Answer):
    """``POST .../query``: one answer with its cost; ``remaining_at_least`` is null on a replayed request."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)

    cost: Cost
    replayed: bool = Field(description="true when an Idempotency-Key retry got the recorded answer")
    remaining: float | None = _at_least()
    spent_epsilon_delta: EpsilonDelta | None = omitted("the analyst's spend; left out on a replayed request")


class GroupedAnswer(Out):
    """``POST .../query`` with ``group_by``: one answer per cell of the grouped attributes' domain (each
    with its ``group``), charged together; the cells are disjoint, so a row pays one cell's cost."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)

    group_by: list[str]
    answers: list[Answer]
    cost: Cost
    replayed: bool
    remaining: float | None = _at_least("left out on a replayed request")


class ConsistentCounts(Out):
    """The noisy answers projected onto the answers of a non-negative table (weighted least squares over
    the workload's cells, post-processing: no privacy cost): counts, and with sums and means every row
    counted once and adding to each sum a value within its bounds (MATH.md 6.5, 6.5.1; a mean is its
    consistent sum over its consistent count, clamped to its bounds). The total squared error (weighted
    by 1/variance) of the released figures never increases; a single answer's error can, so no
    per-answer interval is given."""

    answers: list[float] = Field(description="one per query, in request order: a count, sum or mean")
    counts: list[float] = Field(description="deprecated: the same list (its name from counts-only batches)")
    cells: int = Field(description="cells of the table (distinct sets of covering queries)")
    solver: str
    note: str


class BatchAnswer(Out):
    """``POST .../batch``: the answers in request order, charged together; ``consistent`` when asked."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)

    answers: list[Answer]
    cost: Cost
    replayed: bool
    remaining: float | None = _at_least("left out on a replayed request")
    spent_epsilon_delta: EpsilonDelta | None = omitted("the analyst's spend; left out on a replayed request")
    consistent: ConsistentCounts | None = omitted("only with 'consistent': true in the request")


class PlannedQuery(Out):
    """One query of a planned release."""

    id: str
    share: float = Field(description="its share of the total, in the data set's amount")
    noise_std: float = Field(description="the standard deviation of its noise at that share")
    error_bar: int = Field(description="the half-width of its error bar at the plan's level, in rows")


class ReleasePlanned(Out):
    """``POST .../plan``: a release planned before any data is read; nothing is spent. With ``budget``:
    the shares and the comparison; with ``target_error``: the smallest budget (``per_query``, ``gamma``)."""

    definition: str
    budget: float = Field(description="the total, in the data set's amount")
    level: float
    gamma: int = Field(description="the workload's maximum overlap")
    allocation: str | None = Field(None, description="optimal or even (with a budget)")
    families: int | None = Field(
        None, description="families of disjoint queries (partition-based composition)"
    )
    neighbouring: str | None = None
    queries: list[PlannedQuery] | None = None
    total_variance: dict[str, float] | None = Field(
        None, description="sequential, partitions, even overlap and optimal overlap, at the same guarantee"
    )
    certificate: dict[str, Any] | None = Field(
        None, description="the optimal allocation's certified worst row, method, lower bound and gap"
    )
    target_error: int | None = None
    per_query: float | None = Field(None, description="with target_error: each query's share")


class CostEstimate(Out):
    """``POST .../cost``: a dry run; nothing is spent."""

    cost: Cost
    spent_after: float = Field(description="the analyst's spend if the batch were charged now")
    spent_after_epsilon_delta: EpsilonDelta
    admissible: bool | None = Field(
        description="whether a /batch of these queries would be admitted now (both budgets); null when "
        "a verdict was not reached within its share of the request's time budget (near the budget the "
        "decision is an overlap search that can take longer: a /batch then decides exactly, or answers "
        "503)"
    )
    quota_admits: bool | None = Field(description="the analyst's quota alone (null: not decided in time)")
    global_admits: bool | None = Field(description="the global budget alone (null: not decided in time)")
    remaining: float
    curve: RenyiCurve | None = omitted(
        "an rdp data set served as a curve: spent_after and the quota per order"
    )
    exact: bool = Field(
        True,
        description="false: spent_after, remaining and cost.batch.overlap are safe bounds (spent_after"
        " and the overlap at least, remaining at most the exact value), since their overlap searches did"
        " not end within the request's time budget, or a verdict is null; a verdict given is exact",
    )
    allocation: ReleasePlanned | None = omitted(
        "only with 'allocation' in the request: the plan of POST .../plan with budget = "
        "cost.batch.overlap (each query's share in queries[i].share: charged at those amounts, the "
        "queries cost at most what this batch costs on its own)"
    )


# -- sessions --------------------------------------------------------------------------------------


class SessionInfo(Out):
    """A sparse-vector or guess-and-check session; ``positives`` counts "above" answers (sparse vector)
    or failed guesses (guess-and-check)."""

    id: str
    dataset: str
    kind: Literal["sparse_vector", "guess_and_check"]
    params: dict[str, Any] = Field(description="the parameters it was opened with")
    positives: int
    queries: int
    closed: bool


class SessionOpened(Out):
    session: SessionInfo
    charge: str
    seq: int
    replayed: bool


class SessionAnswer(Out):
    """One step. Sparse vector: ``above`` and ``positives_left``; guess-and-check: ``ok``,
    ``estimates_left`` and, for a failed guess, a fresh noisy ``estimate`` with its ``error_bar``."""

    outcome: Literal["above", "below", "confirmed", "estimate", "exhausted"]
    above: bool | None = omitted()
    positives_left: int | None = omitted()
    ok: bool | None = omitted()
    estimates_left: int | None = omitted()
    estimate: int | None = omitted()
    error_bar: ErrorBar | None = omitted("a failed guess: the estimate's error bar")
    ci95: tuple[int, int] | None = Field(
        default=None, exclude_if=_is_none, deprecated=True, description="deprecated: error_bar's [low, high]"
    )
    closed: bool

    _error_bars = model_validator(mode="before")(_with_error_bars)


class SessionStep(Out):
    answer: SessionAnswer
    charge: str
    seq: int
    replayed: bool
