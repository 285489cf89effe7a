"""Predicate queries: conjunctions of per-attribute predicates, their coverage and disjointness
(MATH.md 1.4, 1.5: $C_q=\\prod_j C_{\\phi_j}(A_j)$; two queries are disjoint iff some attribute's
predicates are)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from overlapdp.errors import QueryError
from overlapdp.query.predicates import Predicate
from overlapdp.schema import IndexSet, Schema


@dataclass(frozen=True)
class PredicateQuery:
    """A counting query ``q(D) = #{rows x in D : x in C_q}``.

    ``constraints`` holds the coverage of every attribute whose predicate is not a tautology, keyed by
    attribute position; tautology attributes are left out. A query with an empty coverage on some
    attribute is a contradiction (it covers no row).
    """

    schema: Schema = field(repr=False)
    constraints: tuple[tuple[int, IndexSet], ...]
    id: str | None = None
    weight: float = 1.0
    text: str | None = field(default=None, compare=False)
    # The overlap engine's flat form of the constraints (overlap/_compiled.py), filled on first use: a
    # declared slot, so that caching it does not give every query an instance dict.
    _overlap_flat: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @staticmethod
    def from_coverages(
        schema: Schema,
        coverages: Mapping[str, IndexSet] | Mapping[int, IndexSet],
        *,
        id: str | None = None,
        weight: float = 1.0,
        text: str | None = None,
    ) -> PredicateQuery:
        items: dict[int, IndexSet] = {}
        for key, cov in coverages.items():
            pos = key if isinstance(key, int) else schema.position(key)
            size = schema.attributes[pos].size
            cov = cov & IndexSet.full(size)
            items[pos] = items[pos] & cov if pos in items else cov
        constraints = tuple(
            sorted((p, c) for p, c in items.items() if not c.is_full(schema.attributes[p].size))
        )
        return PredicateQuery(schema, constraints, id=id, weight=_check_weight(weight, id), text=text)

    @staticmethod
    def build(
        schema: Schema,
        predicates: Mapping[str, Predicate],
        *,
        id: str | None = None,
        weight: float = 1.0,
    ) -> PredicateQuery:
        """A conjunction of ``{attribute: predicate}``; missing attributes are tautologies."""
        covs = {name: p.coverage(schema.attribute(name)) for name, p in predicates.items()}
        return PredicateQuery.from_coverages(schema, covs, id=id, weight=weight)

    def with_id(self, id: str | None) -> PredicateQuery:
        # Built directly (dataclasses.replace is ~5x slower: a ledger replay names every charge), the
        # engine's flat form carried over (it depends on the constraints alone).
        q = PredicateQuery(self.schema, self.constraints, id=id, weight=self.weight, text=self.text)
        if self._overlap_flat is not None:
            object.__setattr__(q, "_overlap_flat", self._overlap_flat)
        return q

    def with_weight(self, weight: float) -> PredicateQuery:
        return replace(self, weight=_check_weight(weight, self.id))

    # -- coverage -------------------------------------------------------------------------------------
    def coverage(self, attribute: str | int) -> IndexSet:
        """Coverage on one attribute (the full set for a tautology)."""
        pos = attribute if isinstance(attribute, int) else self.schema.position(attribute)
        for p, c in self.constraints:
            if p == pos:
                return c
        return IndexSet.full(self.schema.attributes[pos].size)

    def coverages(self) -> tuple[IndexSet, ...]:
        """Coverage on every attribute, in schema order."""
        return tuple(self.coverage(i) for i in range(len(self.schema)))

    @property
    def active(self) -> tuple[int, ...]:
        """Positions of the attributes this query constrains."""
        return tuple(p for p, _ in self.constraints)

    @property
    def is_contradiction(self) -> bool:
        return any(not c for _, c in self.constraints)

    @property
    def size(self) -> int:
        """Number of domain points covered, $|C_q|$."""
        return math.prod(len(c) for c in self.coverages())

    def covers(self, row: Sequence[int]) -> bool:
        """Whether the domain point ``row`` (value indices) lies in $C_q$."""
        return all(row[p] in c for p, c in self.constraints)

    def disjoint(self, other: PredicateQuery) -> bool:
        """True iff no row satisfies both (some attribute's coverages are disjoint)."""
        _same_schema(self, other)
        if self.is_contradiction or other.is_contradiction:
            return True
        mine = dict(self.constraints)
        return any(p in mine and mine[p].isdisjoint(c) for p, c in other.constraints)

    def describe(self) -> str:
        """A readable SQL-style form of the query."""
        if self.text:
            return self.text
        if not self.constraints:
            return "TRUE"
        parts = []
        for p, full_cov in self.constraints:
            attr = self.schema.attributes[p]
            name = _q(attr.name)
            # The missing value is described apart: IS NULL, never a value in a list.
            null = bool(full_cov & attr.null_set())
            cov = full_cov & attr.present()
            if not full_cov:
                parts.append("FALSE")
                continue
            if not cov:
                parts.append(f"{name} IS NULL")
                continue
            if cov == attr.present():
                text = f"{name} IS NOT NULL"
            elif attr.ordered and cov.is_interval():
                lo, hi = cov.intervals[0]
                text = f"{name} BETWEEN {attr.value_at(lo)!r} AND {attr.value_at(hi - 1)!r}"
            else:
                text = f"{name} IN ({', '.join(repr(attr.value_at(i)) for i in cov)})"
            parts.append(f"({text} OR {name} IS NULL)" if null and cov != attr.present() else text)
        return " AND ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``{"conditions": {attr: {"in": [...]}}}``) that :func:`parse_query` reads back."""
        conditions: dict[str, Any] = {}
        for p, cov in self.constraints:
            attr = self.schema.attributes[p]
            if attr.missing and cov == attr.null_set():
                conditions[attr.name] = {"is_null": True}
            elif cov & attr.null_set():
                # Covers the missing value: named by value indices (the missing one is the last).
                conditions[attr.name] = {"bins": list(cov)}
            elif attr.missing and cov == attr.present():
                conditions[attr.name] = {"is_null": False}
            elif attr.ordered and cov.is_interval() and cov and attr.kind == "int":
                lo, hi = cov.intervals[0]
                conditions[attr.name] = {"range": [attr.value_at(lo), attr.value_at(hi - 1)]}
            elif attr.kind == "binned":
                conditions[attr.name] = {"bins": list(cov)}
            else:
                conditions[attr.name] = {"in": [attr.value_at(i) for i in cov]}
        out: dict[str, Any] = {"conditions": conditions}
        if self.id is not None:
            out["id"] = self.id
        if self.weight != 1.0:
            out["weight"] = self.weight
        return out


def joint_coverage(queries: Iterable[PredicateQuery]) -> tuple[IndexSet, ...] | None:
    """$\\bigcap_q C_q$ as one coverage per attribute, or None when the queries do not overlap."""
    qs = list(queries)
    if not qs:
        raise QueryError("joint coverage of no queries is undefined")
    schema = qs[0].schema
    covs = [IndexSet.full(a.size) for a in schema.attributes]
    for q in qs:
        _same_schema(qs[0], q)
        for p, c in q.constraints:
            covs[p] = covs[p] & c
            if not covs[p]:
                return None
    return tuple(covs)


def _check_weight(weight: float, id: str | None) -> float:
    # Strict: a string ("2") or a boolean (true) is refused, not converted (JSON types are checked).
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise QueryError(f"{query_label(id)}weight must be a number, got {type(weight).__name__}")
    try:
        w = float(weight)
    except OverflowError:
        raise QueryError(f"{query_label(id)}weight must be a finite non-negative number") from None
    if not math.isfinite(w) or w < 0:
        raise QueryError(f"{query_label(id)}weight must be a finite non-negative number, got {weight!r}")
    return w


def query_label(id: str | None) -> str:
    """``"query 'x': "`` to start a message about query ``x``; empty for a query without an id."""
    return f"query {id!r}: " if id is not None else ""


def _same_schema(a: PredicateQuery, b: PredicateQuery) -> None:
    if a.schema is not b.schema and a.schema != b.schema:
        raise QueryError("queries are over different schemas")


def _q(name: str) -> str:
    return name if name.isidentifier() else '"' + name.replace('"', '""') + '"'
