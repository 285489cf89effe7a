"""SQL-style conditions parsed with sqlglot into predicate queries.

Supported: ``=``, ``!=`` / ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``NOT IN``, ``NOT``,
``AND`` across attributes, ``OR`` when both sides constrain the same single attribute, parentheses and
``TRUE`` / ``FALSE``. Names that are not plain identifiers (``education-num``) are double-quoted.
Anything else is refused: a predicate query is a conjunction of per-attribute predicates (MATH.md 1).
"""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from overlapdp.errors import QueryError, QuerySyntaxError, SchemaError
from overlapdp.query.conjunction import PredicateQuery
from overlapdp.schema import IndexSet, Schema

# A condition tree evaluates to coverages keyed by attribute position (missing = tautology), or to
# None for a contradiction that involves no attribute (FALSE).
_Cov = dict[int, IndexSet]


def parse_where(schema: Schema, text: str, *, id: str | None = None, weight: float = 1.0) -> PredicateQuery:
    """Parse ``text`` (the part after WHERE) into a :class:`PredicateQuery` over ``schema``."""
    if not isinstance(text, str) or not text.strip():
        raise QuerySyntaxError(f"query {id!r}: empty condition")
    try:
        tree = sqlglot.condition(text)
    except (ParseError, TokenError) as exc:
        first = str(exc).splitlines()[0]
        raise QuerySyntaxError(f"query {id!r}: cannot parse condition: {first}") from None
    try:
        covs = _Walker(schema).walk(tree)
    except QueryError as exc:
        prefix = f"query {id!r}: " if id is not None else ""
        raise type(exc)(prefix + str(exc)) from None
    return PredicateQuery.from_coverages(schema, covs, id=id, weight=weight, text=text.strip())


class _Walker:
    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def walk(self, node: exp.Expr) -> _Cov:
        if isinstance(node, exp.Paren):
            return self.walk(node.this)
        if isinstance(node, exp.And):
            return _intersect(self.walk(node.left), self.walk(node.right))
        if isinstance(node, exp.Or):
            return self._or(node)
        if isinstance(node, exp.Not):
            return self._not(node)
        if isinstance(node, exp.Boolean):
            return {} if node.this else self._false()
        if isinstance(node, exp.Between):
            pos = self._column(node.this)
            attr = self.schema.attributes[pos]
            lo, hi = self._literal(node.args["low"]), self._literal(node.args["high"])
            if not attr.ordered:
                raise QueryError(
                    f"attribute {attr.name!r} is categorical (unordered); BETWEEN does not apply"
                )
            return {pos: attr.compare(">=", lo) & attr.compare("<=", hi)}
        if isinstance(node, exp.In):
            pos = self._column(node.this)
            if node.args.get("query") is not None:
                raise QueryError("IN with a sub-query is not a predicate on one attribute")
            values = [self._literal(v) for v in node.expressions]
            return {pos: self.schema.attributes[pos].values_in(values)}
        comparisons: dict[type[exp.Expression], str] = {
            exp.EQ: "=",
            exp.NEQ: "!=",
            exp.LT: "<",
            exp.LTE: "<=",
            exp.GT: ">",
            exp.GTE: ">=",
        }
        for cls, op in comparisons.items():
            if isinstance(node, cls):
                assert isinstance(node, exp.Binary)
                return self._compare(node, op)
        raise QueryError(f"unsupported condition {node.sql()!r}: use comparisons, BETWEEN, IN, NOT, AND, OR")

    def _false(self) -> _Cov:
        return {0: IndexSet.empty()}

    def _compare(self, node: exp.Binary, op: str) -> _Cov:
        left, right = node.left, node.right
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
        if isinstance(left, exp.Column):
            column, literal = left, right
        elif isinstance(right, exp.Column):
            column, literal, op = right, left, flip[op]
        else:
            raise QueryError(f"condition {node.sql()!r} must compare an attribute with a constant")
        pos = self._column(column)
        attr = self.schema.attributes[pos]
        value = self._literal(literal)
        if op == "=":
            return {pos: attr.values_in([value])}
        if op == "!=":
            return {pos: attr.values_in([value]).complement(attr.size)}
        if not attr.ordered:
            raise QueryError(
                f"attribute {attr.name!r} is categorical (unordered); {op!r} does not apply, use = or IN"
            )
        return {pos: attr.compare(op, value)}  # type: ignore[arg-type]

    def _or(self, node: exp.Or) -> _Cov:
        # Decided on the text, not on the coverages: "age = 3 OR race = 'x'" is refused even when
        # age = 3 happens to lie outside the domain.
        mentioned = self._mentioned(node)
        if len(mentioned) > 1:
            names = sorted(self.schema.attributes[p].name for p in mentioned)
            raise QueryError(
                f"OR across attributes ({', '.join(names)}) is not a predicate query; "
                "split it into separate queries"
            )
        left, right = self.walk(node.left), self.walk(node.right)
        # A tautology side makes the OR a tautology; a contradiction side is the neutral element.
        if not left or not right:
            return {}
        if _is_contradiction(left):
            return right
        if _is_contradiction(right):
            return left
        pos = next(iter(left))
        return {pos: left[pos] | right[pos]}

    def _not(self, node: exp.Not) -> _Cov:
        mentioned = self._mentioned(node)
        if len(mentioned) > 1:
            names = sorted(self.schema.attributes[p].name for p in mentioned)
            raise QueryError(f"NOT over several attributes ({', '.join(names)}) is not a predicate query")
        inner = self.walk(node.this)
        if not inner:
            return self._false()
        if _is_contradiction(inner):
            return {}
        pos, cov = next(iter(inner.items()))
        return {pos: cov.complement(self.schema.attributes[pos].size)}

    def _mentioned(self, node: exp.Expr) -> set[int]:
        return {self._column(c) for c in node.find_all(exp.Column)}

    def _column(self, node: exp.Expr) -> int:
        if not isinstance(node, exp.Column):
            raise QueryError(f"expected an attribute name, found {node.sql()!r}")
        if node.table:
            raise QueryError(f"qualified name {node.sql()!r}: use the bare attribute name")
        try:
            return self.schema.position(node.name)
        except SchemaError as exc:
            raise QueryError(str(exc)) from None

    def _literal(self, node: exp.Expr) -> Any:
        if isinstance(node, exp.Neg):
            value = self._literal(node.this)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise QueryError(f"cannot negate {node.this.sql()!r}")
            return -value
        if isinstance(node, exp.Paren):
            return self._literal(node.this)
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this
            text = node.this
            try:
                return int(text)
            except ValueError:
                return float(text)
        if isinstance(node, exp.Column):
            raise QueryError(
                f"{node.sql()!r} is read as an attribute name; quote text values with single quotes"
            )
        raise QueryError(f"expected a constant, found {node.sql()!r}")


def _is_contradiction(cov: _Cov) -> bool:
    return any(not c for c in cov.values())


def _intersect(a: _Cov, b: _Cov) -> _Cov:
    out = dict(a)
    for p, c in b.items():
        out[p] = out[p] & c if p in out else c
    return out
