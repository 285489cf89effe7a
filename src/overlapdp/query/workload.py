"""Workloads: ordered lists of predicate queries with ids and weights, read from JSON Lines.

Each line is ``{"where": "..."}`` or ``{"conditions": {...}}``, with optional ``"id"`` (a string or an
integer; default: the line number) and ``"weight"`` (a JSON number, finite and non-negative; default 1).
Any other key is an error (a misspelt ``"wieght"`` would otherwise be silently ignored), except
``"text"``, the condition as written, which the service's ledger records next to ``"conditions"`` and
which is ignored here. Types are strict: ``"weight": "2"`` or ``true`` is an error. Blank lines and
lines starting with ``#`` are skipped.

A line may also say what it aggregates (:mod:`overlapdp.query.aggregate`): ``"aggregate"`` (``"count"``,
the default, ``"sum"`` or ``"mean"``), ``"of"`` (the numeric attribute), ``"bounds"`` (``[lo, hi]``,
declared clipping bounds; else the bounds declared for the attribute, else an error) and ``"step"``
(the resolution, default 1). :attr:`Workload.aggregates` holds them, one per query.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from overlapdp.errors import OverlapDPError, QueryError, WorkloadError, with_prefix
from overlapdp.query.aggregate import AGGREGATE_KEYS, COUNT, Aggregate, parse_aggregate
from overlapdp.query.conjunction import PredicateQuery, query_label
from overlapdp.query.jsonform import parse_conditions
from overlapdp.query.sql import parse_where
from overlapdp.schema import Schema


def parse_query(
    schema: Schema, spec: str | Mapping[str, Any], *, id: str | None = None, weight: float | None = None
) -> PredicateQuery:
    """A query from SQL text, ``{"where": ...}`` or ``{"conditions": ...}`` (plus ``id`` / ``weight``)."""
    if isinstance(spec, str):
        return parse_where(schema, spec, id=id, weight=1.0 if weight is None else weight)
    if not isinstance(spec, Mapping):
        raise QueryError(f"{query_label(id)}expected a condition string or an object")
    unknown = [k for k in spec if k not in _QUERY_KEYS]
    if unknown:
        raise QueryError(
            f"{query_label(id)}unknown key {str(unknown[0])[:60]!r} (a query object takes "
            f"{', '.join(repr(k) for k in _QUERY_KEYS)})"
        )
    qid = spec.get("id", id)
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, str | int)):
        raise QueryError(f"{query_label(id)}'id' must be a string or an integer")
    qid = None if qid is None else str(qid)
    w = spec.get("weight", 1.0) if weight is None else weight
    has_where, has_cond = "where" in spec, "conditions" in spec
    if has_where == has_cond:
        raise QueryError(f"{query_label(qid)}give exactly one of 'where' or 'conditions'")
    if has_where:
        if not isinstance(spec["where"], str):
            raise QueryError(
                f"{query_label(qid)}'where' must be a string, got {type(spec['where']).__name__}"
            )
        return parse_where(schema, spec["where"], id=qid, weight=w)
    return parse_conditions(schema, spec["conditions"], id=qid, weight=w)


_QUERY_KEYS = ("where", "conditions", "id", "weight", "text")


@dataclass(frozen=True)
class Workload(Sequence[PredicateQuery]):
    """An ordered list of predicate queries with unique ids."""

    schema: Schema
    queries: tuple[PredicateQuery, ...]
    #: One aggregate per query (empty: every query is a count).
    aggregates: tuple[Aggregate, ...] = ()

    def __post_init__(self) -> None:
        if self.aggregates and len(self.aggregates) != len(self.queries):
            raise WorkloadError("a workload needs one aggregate per query (or none: all counts)")
        seen: set[str] = set()
        for q in self.queries:
            if q.id is None:
                raise WorkloadError("every query of a workload needs an id")
            if q.id in seen:
                raise WorkloadError(f"duplicate query id {q.id!r}")
            seen.add(q.id)

    @staticmethod
    def of(schema: Schema, specs: Iterable[str | Mapping[str, Any] | PredicateQuery]) -> Workload:
        """Build from condition strings, JSON objects or queries; missing ids become ``q1, q2, ...``.
        A JSON object may carry the aggregate keys of a workload line (``aggregate``, ``of``, ...)."""
        queries = []
        aggregates: list[Aggregate] = []
        for i, spec in enumerate(specs, start=1):
            agg = COUNT
            if isinstance(spec, Mapping) and any(k in spec for k in AGGREGATE_KEYS):
                rest = {k: v for k, v in spec.items() if k not in AGGREGATE_KEYS}
                q = parse_query(schema, rest)
                agg = parse_aggregate(
                    schema, {k: spec[k] for k in AGGREGATE_KEYS if k in spec}, label=query_label(q.id)
                )
            else:
                q = spec if isinstance(spec, PredicateQuery) else parse_query(schema, spec)
            queries.append(q if q.id is not None else q.with_id(f"q{i}"))
            aggregates.append(agg)
        if all(a == COUNT for a in aggregates):
            aggregates = []
        return Workload(schema, tuple(queries), tuple(aggregates))

    @staticmethod
    def read_jsonl(
        schema: Schema, path: str | Path, *, declared: Mapping[str, Sequence[float]] | None = None
    ) -> Workload:
        """A JSON Lines workload; ``declared`` maps attributes to clipping bounds ``[lo, hi(, step)]``
        for sums and means whose line gives none (:func:`overlapdp.query.aggregate.parse_aggregate`)."""
        p = Path(path)
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise WorkloadError(f"cannot read workload file {str(p)!r}: {exc.strerror or exc}") from None
        return Workload.from_lines(schema, lines, source=str(p), declared=declared)

    @staticmethod
    def from_lines(
        schema: Schema,
        lines: Iterable[str],
        *,
        source: str = "<workload>",
        declared: Mapping[str, Sequence[float]] | None = None,
    ) -> Workload:
        queries = []
        aggregates: list[Aggregate] = []
        for n, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{source} line {n}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise WorkloadError(f"{source} line {n}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise WorkloadError(f"{source} line {n}: expected a JSON object")
            agg_spec = {k: obj.pop(k) for k in AGGREGATE_KEYS if k in obj}
            try:
                q = parse_query(schema, obj, id=f"line{n}" if "id" not in obj else None)
                agg = parse_aggregate(schema, agg_spec, declared=declared, label=query_label(q.id))
            except OverlapDPError as exc:
                raise with_prefix(exc, f"{source} line {n}: ") from None
            queries.append(q)
            aggregates.append(agg)
        if all(a == COUNT for a in aggregates):
            aggregates = []
        return Workload(schema, tuple(queries), tuple(aggregates))

    def write_jsonl(self, path: str | Path) -> None:
        with Path(path).open("w", encoding="utf-8") as fh:
            for i, q in enumerate(self.queries):
                line = q.to_json()
                if self.aggregates and self.aggregates[i] != COUNT:
                    line.update(self.aggregates[i].to_json())
                fh.write(json.dumps(line) + "\n")

    @property
    def ids(self) -> list[str]:
        return [q.id or "" for q in self.queries]

    def aggregate(self, i: int) -> Aggregate:
        """The aggregate of query ``i`` (a count unless the workload says otherwise)."""
        return self.aggregates[i] if self.aggregates else COUNT

    @property
    def weights(self) -> list[float]:
        return [q.weight for q in self.queries]

    def __len__(self) -> int:
        return len(self.queries)

    @overload
    def __getitem__(self, i: int) -> PredicateQuery: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[PredicateQuery]: ...
    def __getitem__(self, i: int | slice) -> PredicateQuery | Sequence[PredicateQuery]:
        return self.queries[i]

    def __iter__(self) -> Iterator[PredicateQuery]:
        return iter(self.queries)
