"""Grouped counts (GROUP BY): one predicate query per cell of the grouped attributes' DOMAIN.

``{"id": "by_sex_race", "group_by": ["sex", "race"], "where": "age >= 30"}`` and
``SELECT sex, race, COUNT(*) FROM t WHERE age >= 30 GROUP BY sex, race`` (any single table name) are the
same :class:`QueryFamily`: for every combination of values of the grouped attributes taken from the
schema, the conjunction of the filter with ``sex = v AND race = w``. Cells with no rows are included.
Grouping by the values PRESENT in the data would release which values occur (a non-private function of
the data), so the cells come from the declared domain only; there is no other mode.

Privacy (MATH.md 2.5, parallel composition, Theorem 5 of Smith et al. 2022): two cells differ on
some grouped attribute, so they are pairwise disjoint and every row is covered by at most one of them.
The cells are ordinary predicate queries, so the maximum overlap engine and the accountants see that
by themselves: one family adds at most one query's load to any row (gamma 1), two families on the same
attributes add two. Binned attributes group by their bins.

Limits: a family may have at most :data:`~overlapdp.query.limits.MAX_GROUP_CELLS` (100 000) cells,
checked from the domain sizes before any cell is built (:class:`~overlapdp.errors.QueryTooComplexError`
with ``limit="cells"``). The SELECT form accepts exactly ``SELECT <the grouped attributes>, COUNT(*)
FROM <one table> [WHERE <condition>] [GROUP BY <attributes>]``, or the same with ``SUM(col)`` or
``AVG(col)`` in place of ``COUNT(*)`` (:func:`parse_select_aggregate`; the clipping bounds of a sum or
mean come from the workload line or the schema, never from the statement or the data); anything else
(joins, HAVING, ORDER BY, LIMIT, DISTINCT, sub-queries, other aggregates, two aggregates) is a
:class:`~overlapdp.errors.QueryError` naming it.
The WHERE condition is read by :func:`overlapdp.query.sql.parse_where`, with all its rules.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from overlapdp.errors import QueryError, QuerySyntaxError, QueryTooComplexError, SchemaError, with_prefix
from overlapdp.query.aggregate import AggregateKind, parse_sql_aggregate
from overlapdp.query.conjunction import PredicateQuery, query_label
from overlapdp.query.limits import MAX_GROUP_CELLS, check_condition_text, too_deep
from overlapdp.query.sql import parse_where
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import BinnedAttribute

#: A group's labels: ``(attribute, value)`` pairs in grouping order; the value is the categorical label,
#: the integer, or the bin's label (``"[0, 5000)"``).
GroupLabels = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class QueryFamily:
    """A grouped count (or sum or mean, :attr:`aggregate`): its ``id``, the filter ``where``, the grouped attributes ``by``, and its
    expansion into ``cells`` (one :class:`PredicateQuery` per point of the grouped attributes' domain, in
    lexicographic order of value indices), with each cell's ``groups`` labels.

    Cell ids are ``"{id}[a=v,b=w]"``. The cells are pairwise disjoint (module docstring), so releasing
    one answer per cell, each with the same per-query budget, costs every row at most one such budget.
    """

    id: str | None
    where: PredicateQuery
    by: tuple[str, ...]
    cells: tuple[PredicateQuery, ...]
    groups: tuple[GroupLabels, ...]
    #: What every cell aggregates (``"count"``, ``"sum"``, ``"mean"``); the clipping of a sum or mean is
    #: kept with the workload (:attr:`overlapdp.query.Workload.aggregates`).
    aggregate: str = "count"

    @property
    def schema(self) -> Schema:
        return self.where.schema

    @property
    def weight(self) -> float:
        return self.where.weight

    def __len__(self) -> int:
        return len(self.cells)

    def with_id(self, id: str | None) -> QueryFamily:
        """The same family under another id (the cells are renamed with it)."""
        family = group_by(self.schema, self.by, self.where.with_id(id), id=id)
        return dataclasses.replace(family, aggregate=self.aggregate)

    def group(self, i: int) -> dict[str, Any]:
        """Cell ``i``'s labels as ``{attribute: value}``."""
        return dict(self.groups[i])

    def to_json(self) -> dict[str, Any]:
        """The workload-line form (``group_by`` and the filter's ``conditions``) that is read back."""
        out: dict[str, Any] = {"group_by": list(self.by), "conditions": self.where.to_json()["conditions"]}
        if self.id is not None:
            out["id"] = self.id
        if self.weight != 1.0:
            out["weight"] = self.weight
        return out


def group_by(
    schema: Schema,
    by: Any,
    where: str | PredicateQuery | None = None,
    *,
    id: str | None = None,
    weight: float | None = None,
    max_cells: int = MAX_GROUP_CELLS,
) -> QueryFamily:
    """Expand ``where`` (condition text, a query, or None for every row) grouped by the attributes
    ``by`` into one cell per point of their domain (module docstring). ``max_cells`` may lower the
    limit on cells (the service passes what is left of its batch limit); it is checked first."""
    names = _check_by(schema, by, id)
    if where is None:
        base = PredicateQuery.from_coverages(schema, {}, id=id, weight=1.0 if weight is None else weight)
    elif isinstance(where, PredicateQuery):
        if where.schema is not schema and where.schema != schema:
            raise QueryError(f"{query_label(id)}the filter is over another schema")
        base = where if weight is None else where.with_weight(weight)
    else:
        base = parse_where(schema, where, id=id, weight=1.0 if weight is None else weight)
    positions = [schema.position(n) for n in names]
    sizes = [schema.attributes[p].size for p in positions]
    check_cells(sizes, names, id, max_cells)
    own = dict(base.constraints)
    base_text = base.describe() if base.constraints else None
    cells: list[PredicateQuery] = []
    groups: list[GroupLabels] = []
    # Per grouped attribute and value: the cell's coverage there (the filter's, cut to the value), its
    # label and its SQL text, computed once (a family may have 100 000 cells).
    parts = []
    for pos, size in zip(positions, sizes, strict=True):
        attr = schema.attributes[pos]
        column = []
        for i in range(size):
            single = IndexSet.from_indices([i])
            cov = own[pos] & single if pos in own else single
            column.append(
                (cov, cov.is_full(size), (attr.name, attr.value_at(i)), _cell_condition(schema, pos, i))
            )
        parts.append(column)
    rest = {p: c for p, c in own.items() if p not in positions}
    for combo in itertools.product(*parts):
        covs = dict(rest)
        for pos, (cov, full, _, _) in zip(positions, combo, strict=True):
            if not full:  # an attribute with one value: the cell does not constrain it
                covs[pos] = cov
        label = tuple(c[2] for c in combo)
        cid = None if id is None else f"{id}[{','.join(f'{a}={v}' for a, v in label)}]"
        text = " AND ".join(c[3] for c in combo)
        if base_text:
            text = f"({base_text}) AND {text}"
        # The filter's weight was checked when it was built; the coverages are within the domain.
        cells.append(
            PredicateQuery(schema, tuple(sorted(covs.items())), id=cid, weight=base.weight, text=text)
        )
        groups.append(label)
    return QueryFamily(id, base, tuple(names), tuple(cells), tuple(groups))


def _cell_condition(schema: Schema, pos: int, i: int) -> str:
    """SQL text for "attribute at ``pos`` holds value index ``i``" (a bin as its two edges)."""
    attr = schema.attributes[pos]
    name = attr.name if attr.name.isidentifier() else '"' + attr.name.replace('"', '""') + '"'
    if isinstance(attr, BinnedAttribute):
        return f"{name} >= {attr.edges[i]!r} AND {name} < {attr.edges[i + 1]!r}"
    value = attr.value_at(i)
    if value is None:  # a missing value, where the schema declares one
        return f"{name} IS NULL"
    if isinstance(value, str):
        return f"{name} = '" + value.replace("'", "''") + "'"
    return f"{name} = {value!r}"


def check_cells(
    sizes: Sequence[int], names: Sequence[str], id: str | None = None, maximum: int = MAX_GROUP_CELLS
) -> int:
    """The number of cells, or :class:`QueryTooComplexError` (``limit="cells"``) above ``maximum``
    (never above :data:`MAX_GROUP_CELLS`)."""
    limit = min(maximum, MAX_GROUP_CELLS)
    total = math.prod(sizes)
    if total > limit:
        raise QueryTooComplexError(
            f"{query_label(id)}GROUP BY {', '.join(names)} has {total} cells "
            f"({' x '.join(str(s) for s in sizes)} domain values); the limit is {limit} cells",
            limit="cells",
            maximum=limit,
        )
    return total


def _check_by(schema: Schema, by: Any, id: str | None) -> list[str]:
    if isinstance(by, str) or not isinstance(by, Sequence) or not by:
        raise QueryError(f"{query_label(id)}'group_by' must be a non-empty list of attribute names")
    names: list[str] = []
    for name in by:
        if not isinstance(name, str):
            raise QueryError(
                f"{query_label(id)}'group_by' must list attribute names (strings), got {type(name).__name__}"
            )
        try:
            schema.position(name)
        except SchemaError as exc:
            raise QueryError(f"{query_label(id)}group_by: {exc}") from None
        if name in names:
            raise QueryError(f"{query_label(id)}group_by names {name!r} twice")
        names.append(name)
    return names


# -- the SELECT form -------------------------------------------------------------------------------


def is_select(text: Any) -> bool:
    """Whether ``text`` is a SELECT statement (not a condition): it starts with the keyword SELECT."""
    if not isinstance(text, str):
        return False
    head = text.lstrip()[:7]
    return head[:6].lower() == "select" and (len(head) == 6 or not (head[6].isalnum() or head[6] == "_"))


def parse_select(
    schema: Schema, text: str, *, id: str | None = None, weight: float = 1.0, max_cells: int = MAX_GROUP_CELLS
) -> QueryFamily | PredicateQuery:
    """``SELECT a, b, COUNT(*) FROM t [WHERE cond] GROUP BY a, b`` as a :class:`QueryFamily`;
    ``SELECT COUNT(*) FROM t [WHERE cond]`` (no GROUP BY) as one :class:`PredicateQuery`.

    The SELECT list must hold the GROUP BY attributes (the same set) and one aggregate; cells follow
    the GROUP BY order. Size limits are checked on the text before sqlglot sees it. Counts only: a
    ``SUM`` or ``AVG`` needs clipping bounds, which a statement alone does not carry, so it is refused
    here (a :class:`~overlapdp.errors.QueryError` naming 'bounds') and read by
    :func:`parse_select_aggregate` with the bounds of a workload line or the schema.
    """
    item, kind, column = parse_select_aggregate(schema, text, id=id, weight=weight, max_cells=max_cells)
    if kind != "count":
        raise QueryError(
            f"{query_label(id)}a {kind} of {column!r} needs declared clipping 'bounds' [lo, hi]: give "
            "them on the workload line or declare them in the schema (never read off the data)"
        )
    return item


def parse_select_aggregate(
    schema: Schema, text: str, *, id: str | None = None, weight: float = 1.0, max_cells: int = MAX_GROUP_CELLS
) -> tuple[QueryFamily | PredicateQuery, AggregateKind, str | None]:
    """A SELECT statement (:func:`parse_select`'s forms, with ``COUNT(*)``, ``SUM(col)`` or ``AVG(col)``
    as its one aggregate) and what it aggregates: ``(item, kind, column)``, ``column`` None for a count.

    The clipping bounds of a sum or mean are NOT part of the statement: the caller takes them from the
    workload line or the schema's declared bounds (:func:`overlapdp.query.aggregate.parse_aggregate`),
    never from the data. A family's :attr:`QueryFamily.aggregate` is the kind.
    """
    prefix = query_label(id)
    if not isinstance(text, str) or not text.strip():
        raise QuerySyntaxError(f"{prefix}a SELECT statement must be non-empty text")
    try:
        check_condition_text(text, "statement")
        try:
            statements = sqlglot.parse(text)
        except (ParseError, TokenError) as exc:
            first = str(exc).splitlines()[0]
            raise QuerySyntaxError(f"cannot parse the statement: {first[:200]}") from None
        tree = _one_select(statements)
        by = _group_columns(tree)
        columns, (kind, column) = _select_list(schema, tree)
        if sorted(columns) != sorted(by):
            raise QueryError(
                f"the SELECT list names {_names(columns)} but GROUP BY names {_names(by)}; "
                "select exactly the grouped attributes and one aggregate"
            )
        where = tree.args.get("where")
        condition = where.this.sql() if isinstance(where, exp.Where) else None
    except RecursionError:
        raise with_prefix(too_deep("statement"), prefix) from None
    except QueryError as exc:
        raise with_prefix(exc, prefix) from None
    base = (
        parse_where(schema, condition, id=id, weight=weight)
        if condition is not None
        else PredicateQuery.from_coverages(schema, {}, id=id, weight=weight)
    )
    if not by:
        return base, kind, column
    family = group_by(schema, by, base, id=id, max_cells=max_cells)
    return dataclasses.replace(family, aggregate=kind), kind, column


def _one_select(statements: list[exp.Expr | None]) -> exp.Select:
    found = [s for s in statements if s is not None]
    if len(found) != 1:
        raise QuerySyntaxError(f"expected one SELECT statement, found {len(found)}")
    tree = found[0]
    if not isinstance(tree, exp.Select):
        raise QueryError(f"only SELECT ... FROM one table is supported, not {type(tree).__name__.upper()}")
    # A whitelist: every clause other than these (JOIN, HAVING, ORDER BY, LIMIT, DISTINCT, WITH,
    # TABLESAMPLE, WINDOW, ...) changes what is counted, and is refused by name.
    names = {
        "joins": "JOIN",
        "having": "HAVING",
        "order": "ORDER BY",
        "limit": "LIMIT",
        "offset": "OFFSET",
        "distinct": "DISTINCT",
        "with_": "WITH",
        "with": "WITH",
        "windows": "WINDOW",
        "qualify": "QUALIFY",
        "laterals": "LATERAL",
        "into": "INTO",
        "sample": "TABLESAMPLE",
        "pivots": "PIVOT",
    }
    for key, value in tree.args.items():
        if value and key not in ("expressions", "from", "from_", "group", "where"):
            name = names.get(key, key.rstrip("_").upper())
            raise QueryError(f"{name} is not supported: a grouped count reads one table with COUNT(*)")
    source = tree.args.get("from") or tree.args.get("from_")
    if source is None:
        raise QueryError("the statement needs FROM <table>")
    table = source.this
    if not isinstance(table, exp.Table):
        raise QueryError("FROM must name one table (no sub-query, no join)")
    for key, value in table.args.items():
        if value and key not in ("this", "db", "catalog", "alias"):
            name = names.get(key, key.rstrip("_").upper())
            raise QueryError(f"{name} is not supported: FROM names one whole table")
    return tree


def _group_columns(tree: exp.Select) -> list[str]:
    group = tree.args.get("group")
    if group is None:
        return []
    if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
        raise QueryError("ROLLUP, CUBE and GROUPING SETS are not supported: list the attributes")
    names: list[str] = []
    for node in group.expressions:
        if not isinstance(node, exp.Column) or node.table:
            raise QueryError(f"GROUP BY must list bare attribute names, found {node.sql()[:80]!r}")
        if node.name in names:
            raise QueryError(f"GROUP BY names {node.name!r} twice")
        names.append(node.name)
    return names


def _select_list(schema: Schema, tree: exp.Select) -> tuple[list[str], tuple[AggregateKind, str | None]]:
    columns: list[str] = []
    aggregates: list[tuple[AggregateKind, str | None]] = []
    for node in tree.expressions:
        inner = node.this if isinstance(node, exp.Alias) else node
        if isinstance(inner, exp.Column) and not inner.table:
            columns.append(inner.name)
        elif isinstance(inner, exp.AggFunc) or (
            isinstance(inner, exp.Anonymous) and str(inner.name).upper() == "MEAN"
        ):
            aggregates.append(_aggregate(schema, inner))
        else:
            raise QueryError(
                "the SELECT list may hold the grouped attributes and one aggregate (COUNT(*), SUM(col), "
                f"AVG(col)), found {node.sql()[:80]!r}"
            )
    if len(aggregates) != 1:
        raise QueryError(
            "the SELECT list needs exactly one aggregate (COUNT(*), SUM(col) or AVG(col)), "
            f"found {len(aggregates)}"
        )
    return columns, aggregates[0]


def _aggregate(schema: Schema, node: exp.Func) -> tuple[AggregateKind, str | None]:
    """The one place that decides which aggregates are answered: ``COUNT(*)``, ``SUM(col)`` and
    ``AVG(col)`` (also written ``MEAN(col)``) of a numeric attribute, read by
    :func:`overlapdp.query.aggregate.parse_sql_aggregate`; DISTINCT and everything else is refused."""
    if node.args.get("distinct") or isinstance(node.this, exp.Distinct):
        raise QueryError(f"aggregate {node.sql()[:80]!r} is not supported: DISTINCT is not answered")
    return parse_sql_aggregate(schema, node.sql())


def _names(names: Sequence[str]) -> str:
    return "(" + ", ".join(names) + ")" if names else "no attribute"


def family_labels(family: QueryFamily) -> Mapping[str, GroupLabels]:
    """Cell id -> its labels (cells without ids are left out)."""
    return {c.id: g for c, g in zip(family.cells, family.groups, strict=True) if c.id is not None}
