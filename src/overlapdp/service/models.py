"""Request bodies of the HTTP API (pydantic); unknown fields are refused so typos do not pass silently."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: A query: SQL-style condition text, or ``{"where": "..."}``, or ``{"conditions": {...}}``.
QuerySpec = str | dict[str, Any]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
