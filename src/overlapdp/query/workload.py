"""Workloads: ordered lists of predicate queries with ids and weights, read from JSON Lines.

Each line is ``{"where": "..."}`` or ``{"conditions": {...}}``, with optional ``"id"`` (a string or an
integer; default: the line number) and ``"weight"`` (a JSON number, finite and non-negative; default 1).
Any other key is an error (a misspelt ``"wieght"`` would otherwise be silently ignored), except
``"text"``, the condition as written, which the service's ledger records next to ``"conditions"`` and
which is ignored here. Types are strict: ``"weight": "2"`` or ``true`` is an error. Blank lines and
lines starting with ``#`` are skipped.

GROUP BY (:mod:`overlapdp.query.groupby`): a line with ``"group_by": [attributes]`` (and ``"where"`` or
``"conditions"`` for the filter, or neither for every row), or ``{"sql": "SELECT a, COUNT(*) FROM t ...
GROUP BY a"}``, is a :class:`QueryFamily` and expands into one query per cell of the grouped attributes'
domain, in place; the workload keeps the families (:attr:`Workload.families`) so answers can carry
their group labels.
A line may also say what it aggregates (:mod:`overlapdp.query.aggregate`): ``"aggregate"`` (``"count"``,
the default, ``"sum"`` or ``"mean"``), ``"of"`` (the numeric attribute), ``"bounds"`` (``[lo, hi]``,
declared clipping bounds; else the bounds declared for the attribute, else an error) and ``"step"``
(the resolution, default 1). :attr:`Workload.aggregates` holds them, one per query. A SELECT may say it
instead: ``{"sql": "SELECT SUM(hours_per_week) FROM t WHERE age >= 30", "bounds": [0, 99]}``, ``AVG(x)``,
and ``SELECT sex, AVG(x) FROM t GROUP BY sex`` (one mean per cell), with the bounds on the line or
declared; then ``aggregate`` and ``of`` are not given (:func:`parse_line`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from json.scanner import make_scanner
from operator import attrgetter
from pathlib import Path
from typing import Any, overload

from overlapdp.errors import OverlapDPError, QueryError, WorkloadError, with_prefix
from overlapdp.query.aggregate import AGGREGATE_KEYS, COUNT, Aggregate, AggregateKind, parse_aggregate
from overlapdp.query.conjunction import PredicateQuery, query_label
from overlapdp.query.groupby import GroupLabels, QueryFamily, group_by, is_select, parse_select_aggregate
from overlapdp.query.jsonform import parse_conditions
from overlapdp.query.limits import MAX_GROUP_CELLS
from overlapdp.query.sql import parse_where
from overlapdp.schema import IndexSet, Schema


def parse_query(
    schema: Schema, spec: str | Mapping[str, Any], *, id: str | None = None, weight: float | None = None
) -> PredicateQuery:
    """A query from SQL text, ``{"where": ...}`` or ``{"conditions": ...}`` (plus ``id`` / ``weight``).

    A GROUP BY (``group_by``, a SELECT statement) is several queries: :func:`parse_item` reads it."""
    if is_select(spec) or (isinstance(spec, Mapping) and any(k in spec for k in _FAMILY_KEYS)):
        raise QueryError(
            f"{query_label(id)}a SELECT statement or a 'group_by' (a family of queries, one per cell) "
            "is read by parse_item or Workload.of, not parse_query"
        )
    if isinstance(spec, str):
        return parse_where(schema, spec, id=id, weight=1.0 if weight is None else weight)
    if not isinstance(spec, Mapping):
        raise QueryError(f"{query_label(id)}expected a condition string or an object")
    qid = _checked_keys_and_id(spec, _QUERY_KEYS, "a query object", id)
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
#: Keys of a grouped query line (besides ``where`` / ``conditions``, ``id`` and ``weight``).
_FAMILY_KEYS = ("group_by", "sql")


def parse_item(
    schema: Schema,
    spec: str | Mapping[str, Any],
    *,
    id: str | None = None,
    weight: float | None = None,
    max_cells: int = MAX_GROUP_CELLS,
) -> PredicateQuery | QueryFamily:
    """A workload item: a :class:`QueryFamily` for ``{"group_by": [...], "where": ...}``,
    ``{"sql": "SELECT ..."}`` or SELECT text, otherwise one query (:func:`parse_query`). A family of
    more than ``max_cells`` cells is refused before it is expanded (``QueryTooComplexError``).

    Counts only: a SELECT with ``SUM`` / ``AVG`` needs clipping bounds and is read by :func:`parse_line`
    (here it is a :class:`QueryError` naming 'bounds')."""
    item, kind, column = _parse_item(schema, spec, id=id, weight=weight, max_cells=max_cells)
    if kind != "count":
        raise QueryError(
            f"{query_label(item.id)}a {kind} of {column!r} is not answered here: it needs declared clipping "
            "'bounds' [lo, hi], which a workload line gives (parse_line, Workload.of); this reader takes "
            "counts only"
        )
    return item


def parse_line(
    schema: Schema,
    spec: str | Mapping[str, Any],
    *,
    declared: Mapping[str, Sequence[float]] | None = None,
    id: str | None = None,
    weight: float | None = None,
    max_cells: int = MAX_GROUP_CELLS,
) -> tuple[PredicateQuery | QueryFamily, Aggregate]:
    """A workload item (:func:`parse_item`'s forms) and its :class:`Aggregate`.

    The aggregate comes from the line's ``aggregate`` / ``of`` keys, or from the SELECT statement's
    ``SUM(col)`` / ``AVG(col)`` (then ``aggregate`` and ``of`` are refused: the statement names them).
    The clipping bounds of a sum or mean come from the line's ``bounds`` (and ``step``), else from
    ``declared`` (bounds the data owner declared per attribute, e.g. in the schema), else it is an
    error naming 'bounds'; never from the data (:func:`overlapdp.query.aggregate.parse_aggregate`).
    ``{"sql": "SELECT SUM(hours) FROM t WHERE age >= 30", "bounds": [0, 99]}`` and ``{"where":
    "age >= 30", "aggregate": "sum", "of": "hours", "bounds": [0, 99]}`` are the same query and aggregate.
    """
    agg_spec: dict[str, Any] = {}
    from_sql = is_select(spec)
    if isinstance(spec, Mapping):
        agg_spec = {k: spec[k] for k in AGGREGATE_KEYS if k in spec}
        spec = {k: v for k, v in spec.items() if k not in AGGREGATE_KEYS}
        from_sql = "sql" in spec
    item, kind, column = _parse_item(schema, spec, id=id, weight=weight, max_cells=max_cells)
    label = query_label(item.id)
    if from_sql:
        clash = [k for k in ("aggregate", "of") if k in agg_spec]
        if clash:
            raise QueryError(
                f"{label}{clash[0]!r} is named by the SQL statement's aggregate "
                "(COUNT(*), SUM(col) or AVG(col)); drop it (give only 'bounds' and 'step')"
            )
        if kind != "count":
            agg_spec = {"aggregate": kind, "of": column, **agg_spec}
    agg = parse_aggregate(schema, agg_spec, declared=declared, label=label)
    if isinstance(item, QueryFamily) and item.aggregate != agg.kind:
        item = dataclasses.replace(item, aggregate=agg.kind)
    return item, agg


def _parse_item(
    schema: Schema,
    spec: str | Mapping[str, Any],
    *,
    id: str | None,
    weight: float | None,
    max_cells: int,
) -> tuple[PredicateQuery | QueryFamily, AggregateKind, str | None]:
    """:func:`parse_item` with the SELECT statement's aggregate ``(kind, column)`` (a count otherwise)."""
    if is_select(spec):
        assert isinstance(spec, str)
        return parse_select_aggregate(
            schema, spec, id=id, weight=1.0 if weight is None else weight, max_cells=max_cells
        )
    if not isinstance(spec, Mapping) or not any(k in spec for k in _FAMILY_KEYS):
        return parse_query(schema, spec, id=id, weight=weight), "count", None
    qid = _checked_keys_and_id(spec, (*_QUERY_KEYS, *_FAMILY_KEYS), "a grouped query", id)
    w = spec.get("weight", 1.0) if weight is None else weight
    if "sql" in spec:
        others = [k for k in ("group_by", "where", "conditions") if k in spec]
        if others:
            raise QueryError(f"{query_label(qid)}'sql' holds the whole statement; drop {others[0]!r}")
        if not is_select(spec["sql"]):
            raise QueryError(f"{query_label(qid)}'sql' must be a SELECT statement")
        return parse_select_aggregate(schema, spec["sql"], id=qid, weight=w, max_cells=max_cells)
    if "where" in spec and "conditions" in spec:
        raise QueryError(f"{query_label(qid)}give at most one of 'where' or 'conditions'")
    filt: PredicateQuery | None = None
    if "where" in spec or "conditions" in spec:
        filt = parse_query(
            schema, {k: spec[k] for k in ("where", "conditions") if k in spec}, id=qid, weight=w
        )
    return group_by(schema, spec["group_by"], filt, id=qid, weight=w, max_cells=max_cells), "count", None


@dataclass(frozen=True)
class Workload(Sequence[PredicateQuery]):
    """An ordered list of predicate queries with unique ids."""

    schema: Schema
    queries: tuple[PredicateQuery, ...]
    #: The GROUP BY families whose cells are among ``queries`` (contiguous, in order).
    families: tuple[QueryFamily, ...] = ()
    #: One aggregate per query (empty: every query is a count).
    aggregates: tuple[Aggregate, ...] = ()

    def __post_init__(self) -> None:
        if self.aggregates and len(self.aggregates) != len(self.queries):
            raise WorkloadError("a workload needs one aggregate per query (or none: all counts)")
        ids = list(map(_ID, self.queries))  # in C: 100 000-line workloads are read in well under 2 s
        if None in ids:
            raise WorkloadError("every query of a workload needs an id")
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            for i in ids:
                if i in seen:
                    raise WorkloadError(f"duplicate query id {i!r}")
                seen.add(i)

    @staticmethod
    def of(
        schema: Schema,
        specs: Iterable[str | Mapping[str, Any] | PredicateQuery | QueryFamily],
        *,
        declared: Mapping[str, Sequence[float]] | None = None,
    ) -> Workload:
        """Build from condition strings, JSON objects, queries or families (SELECT text, ``group_by``
        objects, :class:`QueryFamily`); missing ids become ``q1, q2, ...``. A JSON object may carry the
        aggregate keys of a workload line (``aggregate``, ``of``, ``bounds``, ``step``); a SELECT with
        ``SUM(col)`` / ``AVG(col)`` takes its bounds from the object's ``bounds`` or from ``declared``
        (:func:`parse_line`)."""
        items: list[PredicateQuery | QueryFamily] = []
        aggregates: list[Aggregate] = []
        for i, spec in enumerate(specs, start=1):
            if isinstance(spec, PredicateQuery | QueryFamily):
                q: PredicateQuery | QueryFamily = spec
                agg = COUNT
            else:
                q, agg = parse_line(schema, spec, declared=declared)
            items.append(q if q.id is not None else q.with_id(f"q{i}"))
            aggregates.append(agg)
        return Workload.from_items(schema, items, aggregates)

    @staticmethod
    def from_items(
        schema: Schema,
        items: Iterable[PredicateQuery | QueryFamily],
        aggregates: Sequence[Aggregate] | None = None,
    ) -> Workload:
        """Queries and families in order, each family expanded into its cells in place; ``aggregates``
        (one per item; default all counts) is repeated for every cell of a family."""
        queries: list[PredicateQuery] = []
        families: list[QueryFamily] = []
        per_query: list[Aggregate] = []
        listed = list(items)
        aggs = list(aggregates) if aggregates is not None else [COUNT] * len(listed)
        if len(aggs) != len(listed):
            raise WorkloadError("give one aggregate per item (or none: all counts)")
        for item, agg in zip(listed, aggs, strict=True):
            if isinstance(item, QueryFamily):
                if item.aggregate != agg.kind:  # e.g. a SUM family given without its clipping
                    raise WorkloadError(
                        f"family {item.id!r} aggregates {item.aggregate!r} but is given the aggregate "
                        f"{agg.kind!r}; read it with parse_line to take its clipping bounds"
                    )
                families.append(item)
                queries.extend(item.cells)
                per_query.extend([agg] * len(item.cells))
            else:
                queries.append(item)
                per_query.append(agg)
        if all(a == COUNT for a in per_query):
            per_query = []
        return Workload(schema, tuple(queries), tuple(families), tuple(per_query))

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
        queries: list[PredicateQuery | QueryFamily] = []
        aggregates: list[Aggregate] = []
        # A plain query line's coverage depends on its condition alone: each distinct condition is
        # parsed once (a workload of 100 000 ranges holds a few thousand distinct ones), later lines
        # only check their id and weight and share the constraints.
        seen: dict[Hashable, _Parsed] = {}
        plain = True  # every item so far is a query counted (no family, no other aggregate)
        for n, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                obj = _loads(text)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{source} line {n}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise WorkloadError(f"{source} line {n}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise WorkloadError(f"{source} line {n}: expected a JSON object")
            key = _plain_key(obj)
            if key is not None:
                hit = seen.get(key)
                if hit is not None:
                    quick = _quick_query(schema, obj, hit, n)
                    if quick is not None:
                        queries.append(quick)
                        aggregates.append(COUNT)
                        continue
            try:
                q, agg = parse_line(
                    schema, obj, declared=declared, id=f"line{n}" if "id" not in obj else None
                )
            except OverlapDPError as exc:
                raise with_prefix(exc, f"{source} line {n}: ") from None
            if isinstance(q, PredicateQuery) and agg == COUNT:
                if key is not None:
                    # The engine's flat form (overlap/_compiled.py) depends on the constraints alone:
                    # computed once here, shared by every later line with this condition.
                    from overlapdp.overlap._compiled import _flat

                    seen[key] = (q.constraints, q.text, _flat(q))
            else:
                plain = False
            queries.append(q)
            aggregates.append(agg)
        if plain:
            return Workload(schema, tuple(queries))  # type: ignore[arg-type]
        return Workload.from_items(schema, queries, aggregates)

    def write_jsonl(self, path: str | Path) -> None:
        """One line per query, and one ``group_by`` line per family (read back as the same cells)."""
        first = {f.cells[0].id: f for f in self.families if f.cells}
        skip = {c.id for f in self.families for c in f.cells}
        with Path(path).open("w", encoding="utf-8") as fh:
            for i, q in enumerate(self.queries):
                agg = self.aggregates[i] if self.aggregates else COUNT
                if q.id in first:
                    line = first[q.id].to_json()
                elif q.id not in skip:
                    line = q.to_json()
                else:
                    continue
                if agg != COUNT:
                    line.update(agg.to_json())
                fh.write(json.dumps(line) + "\n")

    def groups(self) -> dict[str, tuple[str, GroupLabels]]:
        """Cell id -> (its family's id, its group labels), for every cell of every family."""
        out: dict[str, tuple[str, GroupLabels]] = {}
        for f in self.families:
            for c, g in zip(f.cells, f.groups, strict=True):
                if c.id is not None:
                    out[c.id] = (f.id or "", g)
        return out

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


_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    """``json.loads`` of a stripped line: the C scanner at once (no regex passes for surrounding
    whitespace); anything it does not read whole goes through ``json.loads`` for its error."""
    try:
        obj, end = _SCAN(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return obj


# A parsed plain condition: the query's constraints, its text and the engine's flat form of them.
_Parsed = tuple[tuple[tuple[int, IndexSet], ...], str | None, bytes]
_ID = attrgetter("id")
_PLAIN_KEYS = frozenset(("where", "conditions", "id", "weight", "text"))


def _plain_key(obj: Mapping[str, Any]) -> Hashable | None:
    """A key for the condition of a plain query line (exactly one of ``where`` / ``conditions``, no
    other key than ``id``, ``weight`` and ``text``), or None for any other line.

    A condition is keyed by its ``repr``: on values read from JSON (dicts, lists, strings, numbers,
    booleans, null) it tells types apart (``1``, ``1.0`` and ``True``, which are equal in Python) and
    keeps every value exactly (floats print their shortest round-trip form), in C."""
    if not obj.keys() <= _PLAIN_KEYS:
        return None
    if "conditions" in obj:
        return None if "where" in obj else ("conditions", repr(obj["conditions"]))
    where = obj.get("where")
    return ("where", where) if type(where) is str else None


def _quick_query(
    schema: Schema,
    obj: Mapping[str, Any],
    parsed: _Parsed,
    n: int,
) -> PredicateQuery | None:
    """The query of a plain line whose condition was parsed before, when its id and weight are plainly
    valid (a string or integer id, a finite non-negative number); None otherwise (the full reader then
    reports what is wrong, as for any line)."""
    qid = obj.get("id", f"line{n}")
    if type(qid) is not str and type(qid) is not int:
        return None
    w = obj.get("weight", 1.0)
    if type(w) is not float and type(w) is not int:
        return None
    try:
        weight = float(w)
    except OverflowError:
        return None
    if not (0 <= weight < math.inf):
        return None
    constraints, text, flat = parsed
    q = PredicateQuery(schema, constraints, id=str(qid), weight=weight, text=text)
    object.__setattr__(q, "_overlap_flat", flat)  # the frozen query's cache field, as _compiled sets it
    return q


def _checked_keys_and_id(
    spec: Mapping[str, Any], allowed: Sequence[str], what: str, id: str | None
) -> str | None:
    """Refuse a key not in ``allowed`` (naming it and the keys ``what`` takes); the spec's id (a string
    or an integer, as text) or ``id``."""
    unknown = [k for k in spec if k not in allowed]
    if unknown:
        raise QueryError(
            f"{query_label(id)}unknown key {str(unknown[0])[:60]!r} ({what} takes "
            f"{', '.join(repr(k) for k in allowed)})"
        )
    qid = spec.get("id", id)
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, str | int)):
        raise QueryError(f"{query_label(id)}'id' must be a string or an integer")
    return None if qid is None else str(qid)
