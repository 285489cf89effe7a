"""Request bodies of the HTTP API (pydantic).

- Unknown fields are refused (422), so typos do not pass silently; unknown keys inside a query object
  are refused by the query parser (400).
- Types are strict: a number field takes a JSON number (an integer is accepted where a float is
  expected), never a string or a boolean, so ``"epsilon": true`` or ``"epsilon": "0.1"`` is a 422 and
  charges nothing (it used to be read as 1.0 and 0.1); an integer field takes a JSON integer, a
  boolean field ``true`` / ``false``.
- A query object may nest at most ``MAX_QUERY_JSON_DEPTH`` levels (422): deeper ones would exhaust the
  stack while the request is being hashed, before the parser's own, smaller limits apply.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

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


#: A query: SQL-style condition text, or ``{"where": "..."}``, or ``{"conditions": {...}}``.
QuerySpec = Annotated[str | dict[str, Any], AfterValidator(_shallow)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class QueryRequest(_Body):
    """One counting query; give the parameter of the data set's definition (``epsilon`` or ``rho``)."""

    query: QuerySpec = Field(examples=["age BETWEEN 30 AND 39 AND sex = 1"])
    epsilon: float | None = Field(default=None, description="per-query epsilon (pure DP data sets)")
    rho: float | None = Field(default=None, description="per-query rho (zCDP data sets)")


class BatchRequest(_Body):
    """Several counting queries admitted and charged together (all or none), each with the same parameter."""

    queries: list[QuerySpec]
    epsilon: float | None = None
    rho: float | None = None


class SessionRequest(_Body):
    """Open an interactive session; its whole epsilon is charged on every row when it opens."""

    kind: Literal["sparse_vector", "guess_and_check"]
    epsilon: float = Field(
        description="sparse vector: total epsilon; guess-and-check: epsilon of the SVT part"
    )
    max_positives: int = Field(default=1, description="sparse vector: stop after this many 'above' answers")
    monotonic: bool = False
    tolerance: float | None = Field(default=None, description="guess-and-check: largest accepted error")
    epsilon_estimates: float | None = Field(
        default=None, description="guess-and-check: epsilon of the estimates"
    )
    max_failures: int = Field(default=1, description="guess-and-check: stop after this many failed guesses")


class SessionQueryRequest(_Body):
    """One step: a query with a ``threshold`` (sparse vector) or a ``guess`` (guess-and-check)."""

    query: QuerySpec
    threshold: float | None = None
    guess: float | None = None


class DatasetRegistration(_Body):
    """Register a data set: a CSV or Parquet file readable by the service, its schema and engine."""

    name: str
    path: str
    schema_: dict[str, Any] = Field(alias="schema")
    engine: str = Field(default="duckdb", description="duckdb (default), pandas, polars or spark")
    definition: str = Field(default="pure", description="'pure' (epsilon) or 'zcdp' (rho)")
    budget: float = Field(description="the global budget over all analysts, in the definition's unit")


class BudgetUpdate(_Body):
    definition: str
    budget: float


class AnalystCreate(_Body):
    name: str
    quotas: dict[str, float] = Field(default_factory=dict, description="data set -> quota")


class QuotaUpdate(_Body):
    quota: float
