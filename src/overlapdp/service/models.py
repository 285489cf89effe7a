"""Request bodies of the HTTP API (pydantic).

- A query is given with the field names of workload files: ``"where"`` (SQL-style condition text) or
  ``"conditions"`` (the JSON form), exactly one of them; a batch lists such queries (or bare condition
  strings) under ``"queries"``. A query may also carry ``"aggregate"``, ``"of"``, ``"bounds"`` and
  ``"step"`` (a clipped sum or mean), or a ``"sql"`` SELECT with ``SUM(col)`` / ``AVG(col)``, as a
  workload line (:func:`overlapdp.query.parse_line`); the bounds are never read off the data.
- Unknown fields are refused (422 naming the field), so typos do not pass silently; so is a field the
  chosen mechanism does not use (``max_positives`` for a guess-and-check session, ``tolerance`` for a
  sparse vector): each session kind has its own body. Unknown keys inside a query object of a batch are
  refused by the query parser (400).
- Types are strict: a number field takes a JSON number (an integer is accepted where a float is
  expected), never a string or a boolean, so ``"epsilon": true`` or ``"epsilon": "0.1"`` is a 422 and
  charges nothing (it used to be read as 1.0 and 0.1); an integer field takes a JSON integer, a
  boolean field ``true`` / ``false``.
- A query object may nest at most ``MAX_QUERY_JSON_DEPTH`` levels (422): deeper ones would exhaust the
  stack while the request is being hashed, before the parser's own, smaller limits apply.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

#: Nesting of objects and lists in one query (the parser's own limit, 16 nested "not", is lower).
MAX_QUERY_JSON_DEPTH = 64


def _shallow(value: Any) -> Any:
    """Refuse a query nested deeper than ``MAX_QUERY_JSON_DEPTH`` (an iterative walk, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_QUERY_JSON_DEPTH:
                raise ValueError(
                    f"a query may nest at most {MAX_QUERY_JSON_DEPTH} levels of objects and lists"
                )
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


#: A query of a batch: SQL-style condition text, or ``{"where": "..."}``, or ``{"conditions": {...}}``
#: (a line of a workload file).
QuerySpec = Annotated[str | dict[str, Any], AfterValidator(_shallow)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _OneQuery(_Body):
    """One query, named as in workload files: ``where`` or ``conditions``, exactly one."""

    where: str | None = Field(
        default=None,
        description="the condition as SQL-style text (as in workload files)",
        examples=["age BETWEEN 30 AND 39 AND sex = 'Male'"],
    )
    conditions: Annotated[dict[str, Any], AfterValidator(_shallow)] | None = Field(
        default=None,
        description="the condition in JSON form, attribute -> condition (as in workload files)",
        examples=[{"age": {"range": [30, 39]}, "sex": {"eq": "Male"}}],
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> _OneQuery:
        if self.where is not None and self.conditions is not None:
            raise ValueError("give exactly one of 'where' (SQL-style text) or 'conditions' (JSON form)")
        if self.where is None and self.conditions is None and not self._whole_domain_allowed():
            raise ValueError("give exactly one of 'where' (SQL-style text) or 'conditions' (JSON form)")
        return self

    def _whole_domain_allowed(self) -> bool:
        """Whether the body may name no condition (a GROUP BY over every row)."""
        return False

    def spec(self) -> dict[str, Any]:
        """The query as a workload line (what the query parser reads)."""
        return {"where": self.where} if self.where is not None else {"conditions": self.conditions}


class QueryRequest(_OneQuery):
    """One counting query; give the amount of the data set's definition (``epsilon``, ``rho``, ``mu`` or
    ``epsilon_alpha``).

    With ``group_by`` it is a GROUP BY: one count per cell of the grouped attributes' domain (empty
    cells included), each charged the parameter; the cells are disjoint, so every row pays it once.
    ``where`` / ``conditions`` are then the filter and may be left out (every row)."""

    epsilon: float | None = Field(default=None, description="per-query epsilon (pure and approx data sets)")
    rho: float | None = Field(default=None, description="per-query rho (zcdp and tcdp data sets)")
    mu: float | None = Field(default=None, description="per-query mu (gdp data sets)")
    epsilon_alpha: float | None = Field(default=None, description="per-query Renyi epsilon (rdp data sets)")
    group_by: list[str] | None = Field(
        default=None,
        description="GROUP BY these attributes: one answer per cell of their domain (as in workload files)",
        examples=[["sex", "race"]],
    )
    sql: str | None = Field(
        default=None,
        description="the whole query as SQL instead: SELECT a, b, COUNT(*) FROM t [WHERE ...] GROUP BY a, b",
        examples=["SELECT sex, race, COUNT(*) FROM adult WHERE age >= 30 GROUP BY sex, race"],
    )

    aggregate: Literal["count", "sum", "mean"] | None = Field(
        default=None,
        description="count (the default), or the sum or mean of the attribute 'of' clipped to 'bounds' "
        "(as in workload files; a 'sql' statement names SUM(col) / AVG(col) itself)",
    )
    of: str | None = Field(default=None, description="the numeric attribute summed or averaged")
    bounds: list[float] | None = Field(
        default=None,
        description="declared clipping bounds [lo, hi] of a sum or mean (never read off the data)",
        examples=[[0, 99]],
    )
    step: float | None = Field(default=None, description="the resolution of a sum or mean (default 1)")

    def _whole_domain_allowed(self) -> bool:
        return self.group_by is not None or self.sql is not None

    def spec(self) -> dict[str, Any]:
        out = super().spec() if self.where is not None or self.conditions is not None else {}
        if self.group_by is not None:
            out["group_by"] = list(self.group_by)
        if self.sql is not None:
            out["sql"] = self.sql  # with anything else, refused by the parser (400 naming the field)
        # The aggregate keys are checked by the query parser, as on a workload line (400 naming them).
        given = {"aggregate": self.aggregate, "of": self.of, "bounds": self.bounds, "step": self.step}
        out.update({k: v for k, v in given.items() if v is not None})
        return out


def _no_weights(queries: list[Any]) -> list[Any]:
    """A workload line's ``weight`` has no effect on a request (each query is charged the request's
    parameter), so it is refused rather than ignored."""
    for i, q in enumerate(queries):
        if isinstance(q, dict) and "weight" in q:
            raise ValueError(
                f"query #{i}: 'weight' is not used here; every query is charged the request's epsilon or rho"
            )
    return queries


class BatchRequest(_Body):
    """Several counting queries admitted and charged together (all or none), each with the same parameter."""

    queries: Annotated[list[QuerySpec], AfterValidator(_no_weights)] = Field(
        description="condition strings or workload-file objects ({'where': ...} or {'conditions': ...}, "
        "optionally with 'group_by'; or {'sql': 'SELECT ...'}), each optionally with 'aggregate', 'of', "
        "'bounds', 'step' (a sum or mean, as in workload files); a GROUP BY counts its cells toward the "
        "batch limit",
        examples=[["age < 30", {"where": "age >= 30 AND sex = 'Male'"}]],
    )
    epsilon: float | None = Field(default=None, description="per-query epsilon (pure and approx data sets)")
    rho: float | None = Field(default=None, description="per-query rho (zcdp and tcdp data sets)")
    mu: float | None = Field(default=None, description="per-query mu (gdp data sets)")
    epsilon_alpha: float | None = Field(default=None, description="per-query Renyi epsilon (rdp data sets)")
    consistent: bool = Field(
        default=False,
        description="also return consistent answers: the noisy counts, sums and means projected onto the "
        "answers of a non-negative table (post-processing, no privacy cost); a dry run only checks that "
        "they can be computed",
    )


class CostRequest(BatchRequest):
    """A dry run of a batch (nothing is spent); with ``allocation``, also each query's share of the
    batch's own guarantee, as ``POST .../plan`` computes it."""

    allocation: Literal["optimal", "even"] | None = Field(
        default=None,
        description="also return 'allocation': the batch's overlap cost (cost.batch.overlap, the "
        "guarantee charged for these queries at the per-query amount) split over its queries as "
        "POST .../plan does with that budget: optimal (each query its own share where the rows can "
        "afford it, MATH.md 2.10) or even (B / gamma each: the per-query amount when the overlap search "
        "was exact); pure, zcdp and gdp data sets",
    )
    objective: Literal["variance", "relative"] = Field(
        default="variance",
        description="with allocation 'optimal': least total variance, or least largest variance",
    )


class PlanRequest(_Body):
    """A release planned before any data is read (nothing is spent): each query's share of a total
    budget, its noise and error bar, and the same queries' total noise under every accounting."""

    queries: Annotated[list[QuerySpec], AfterValidator(_no_weights)] = Field(
        description="the queries, as in a batch",
        examples=[["age < 30", {"where": "age >= 30 AND sex = 'Male'"}]],
    )
    budget: float | None = Field(
        default=None,
        gt=0,
        description="the TOTAL budget to share, in the data set's amount (epsilon, rho or mu); or give "
        "'target_error'",
    )
    target_error: int | None = Field(
        default=None,
        ge=0,
        description="instead of 'budget': answer every query within +- this many rows at 'level', and "
        "say the smallest total budget that does",
    )
    allocation: Literal["optimal", "even"] = Field(
        default="optimal",
        description="optimal: each query its own share where the rows can afford it (MATH.md 2.10); even: "
        "B / gamma each",
    )
    objective: Literal["variance", "relative"] = Field(
        default="variance", description="for 'optimal': least total variance, or least largest variance"
    )
    level: float = Field(default=0.95, gt=0, lt=1, description="confidence level of the error bars")


class SparseVectorSession(_Body):
    """Open a sparse-vector session: "above / below" answers until ``max_positives`` of them are
    "above"; ``epsilon`` is charged on every row when it opens."""

    kind: Literal["sparse_vector"]
    epsilon: float = Field(description="total epsilon (threshold and query noise)")
    max_positives: int = Field(default=1, description="stop after this many 'above' answers (c)")
    monotonic: bool = Field(
        default=False, description="true if every query moves in the same direction between neighbours"
    )


class GuessAndCheckSession(_Body):
    """Open a guess-and-check session: each guess within ``tolerance`` is confirmed, a failed one gets a
    fresh noisy estimate, until ``max_failures`` failed; ``epsilon + epsilon_estimates`` is charged on
    every row when it opens."""

    kind: Literal["guess_and_check"]
    epsilon: float = Field(description="epsilon of the sparse-vector test of the guesses")
    tolerance: float = Field(description="largest accepted error of a guess (greater than 0)")
    epsilon_estimates: float | None = Field(
        default=None, description="epsilon of the estimates released for failed guesses (default: epsilon)"
    )
    max_failures: int = Field(default=1, description="stop after this many failed guesses (c)")


#: Open a session: the fields of its ``kind``, and no others.
SessionRequest = Annotated[SparseVectorSession | GuessAndCheckSession, Field(discriminator="kind")]


class SessionQueryRequest(_OneQuery):
    """One step: a query with a ``threshold`` (sparse vector) or a ``guess`` (guess-and-check)."""

    threshold: float | None = Field(default=None, description="sparse vector: compare the count with this")
    guess: float | None = Field(default=None, description="guess-and-check: the guessed count")

    @model_validator(mode="after")
    def _one_argument(self) -> SessionQueryRequest:
        if (self.threshold is None) == (self.guess is None):
            raise ValueError("give exactly one of 'threshold' (sparse vector) or 'guess' (guess-and-check)")
        return self

    @property
    def argument(self) -> tuple[str, float]:
        if self.threshold is not None:
            return "threshold", self.threshold
        assert self.guess is not None
        return "guess", self.guess


class DatasetRegistration(_Body):
    """Register a data set: a CSV or Parquet file readable by the service, its schema and engine."""

    name: str
    path: str
    schema_: dict[str, Any] = Field(alias="schema")
    engine: str = Field(default="duckdb", description="duckdb (default), pandas, polars or spark")
    definition: str = Field(
        default="pure",
        description="pure (epsilon), zcdp (rho), gdp (mu), rdp (epsilon_alpha at the order alpha, or rho "
        "with a curve of orders), tcdp (rho, with omega) or approx (epsilon, with delta)",
    )
    budget: float | None = Field(
        default=None, description="the global budget over all analysts, in the definition's amount"
    )
    epsilon: float | None = Field(
        default=None,
        description="instead of the amount: a target epsilon at the data set's delta (1e-6 by default), "
        "calibrated as 'overlapdp answer --epsilon' does (the largest amount whose (epsilon, delta) is at "
        "most it)",
    )
    budgets: list[float] | None = Field(
        default=None,
        description="rdp with 'orders', instead of the amount: one budget per order (the largest rho "
        "whose curve alpha rho stays within every one of them)",
    )
    delta: float | None = Field(
        default=None, description="delta of the (epsilon, delta) lines; approx: the budget's delta (1e-6)"
    )
    omega: float | None = Field(default=None, description="tcdp: the truncation order (> 1), required")
    alpha: float | None = Field(default=None, description="rdp: the Renyi order (> 1), or give 'orders'")
    orders: list[float] | None = Field(
        default=None,
        description="rdp: several Renyi orders (> 1), served as a curve: the amount is rho, each charge's "
        "curve is alpha rho at every order",
        examples=[[2, 4, 8, 16, 32, 64]],
    )
    composition: str | None = Field(
        default=None, description="approx: 'advanced' (the default; 'optimal' is refused for adaptive use)"
    )

    def params(self) -> dict[str, Any]:
        """The definition's parameters that were given."""
        given = {
            "delta": self.delta,
            "omega": self.omega,
            "alpha": self.alpha,
            "orders": self.orders,
            "composition": self.composition,
        }
        return {k: v for k, v in given.items() if v is not None}


class BudgetUpdate(_Body):
    definition: str
    budget: float | None = Field(default=None, description="in the definition's amount")
    epsilon: float | None = Field(
        default=None,
        description="instead of the amount: a target epsilon at the data set's delta (1e-6 by default), "
        "calibrated as 'overlapdp answer --epsilon' does (the largest amount whose (epsilon, delta) is at "
        "most it)",
    )
    budgets: list[float] | None = Field(
        default=None, description="rdp with 'orders', instead of the amount: one budget per order"
    )
    delta: float | None = Field(default=None, description="as at registration (omitted: unchanged)")
    omega: float | None = Field(default=None, description="as at registration (omitted: unchanged)")
    alpha: float | None = Field(default=None, description="as at registration (omitted: unchanged)")
    orders: list[float] | None = Field(default=None, description="as at registration (omitted: unchanged)")
    composition: str | None = Field(default=None, description="as at registration (omitted: unchanged)")

    def params(self) -> dict[str, Any] | None:
        """The definition's parameters given, or None (keep the data set's)."""
        given = {
            "delta": self.delta,
            "omega": self.omega,
            "alpha": self.alpha,
            "orders": self.orders,
            "composition": self.composition,
        }
        out = {k: v for k, v in given.items() if v is not None}
        return out or None


class AnalystCreate(_Body):
    name: str
    quotas: dict[str, float] = Field(default_factory=dict, description="data set -> quota")
    quota_epsilons: dict[str, float] = Field(
        default_factory=dict,
        description="data set -> quota given as a target epsilon at the data set's delta, calibrated as "
        "'overlapdp answer --epsilon' does (a data set in both 'quotas' and here is refused)",
    )


class QuotaUpdate(_Body):
    quota: float | None = Field(default=None, description="in the data set's amount")
    epsilon: float | None = Field(
        default=None,
        description="instead of the amount: a target epsilon at the data set's delta (1e-6 by default), "
        "calibrated as 'overlapdp answer --epsilon' does (the largest amount whose (epsilon, delta) is at "
        "most it)",
    )
    budgets: list[float] | None = Field(
        default=None, description="rdp with 'orders', instead of the amount: the quota per order"
    )
