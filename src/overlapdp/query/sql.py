"""SQL-style conditions parsed with sqlglot into predicate queries.

Supported: ``=``, ``!=`` / ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``NOT IN``, ``NOT``,
``IS NULL``, ``IS NOT NULL`` (on an attribute declared with ``"missing": true`` only), ``AND`` across
attributes, ``OR`` when both sides constrain the same single attribute, parentheses and ``TRUE`` /
``FALSE``. Missing values follow SQL's three-valued logic (:mod:`overlapdp.query.predicates`): a
comparison, ``!=``, ``NOT IN`` or a ``NOT`` of a comparison never covers the missing value; only ``IS
NULL`` does. Names that are not plain identifiers (``education-num``) are double-quoted.
Anything else is refused: a predicate query is a conjunction of per-attribute predicates (MATH.md 1.4).

Checks, in order, each a typed :class:`~overlapdp.errors.OverlapDPError` naming what is wrong:

1. size (:mod:`overlapdp.query.limits`): at most 10 000 characters, nesting depth 16, 1 000 terms,
   checked by a linear scan before sqlglot sees the text (:class:`~overlapdp.errors.QueryTooComplexError`);
2. syntax (:class:`~overlapdp.errors.QuerySyntaxError`);
3. every leaf against the domain (:class:`~overlapdp.errors.DomainValueError`): a value that is not in
   the domain (``sex = 'female'``, ``race IN ('Whte')``, ``age = 200``), an inverted ``BETWEEN`` and a
   comparison or ``BETWEEN`` that covers no value of the domain (``age > 300``, ``age < 17`` when the
   domain starts at 17) are errors with the nearest valid values.

A contradiction built from valid leaves (``sex = 'Male' AND sex = 'Female'``, ``age > 30 AND age <
20``, ``NOT age >= 0``) stays a legal, empty query, as do the explicit ``FALSE`` and ``IN ()``: each
leaf says something true of the domain, the emptiness is the query's logic (generated workloads that
intersect ranges produce such queries on purpose), and a query that covers no row adds no load to any
row (MATH.md 1.8), so it costs nothing. The JSON form (:mod:`overlapdp.query.jsonform`) follows the same
rules.
"""

from __future__ import annotations

import difflib
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from overlapdp.errors import QueryError, QuerySyntaxError, SchemaError, with_prefix
from overlapdp.query.conjunction import PredicateQuery, query_label
from overlapdp.query.limits import check_condition_text, too_deep
from overlapdp.query.predicates import IsNull, Truth
from overlapdp.schema import IndexSet, Schema

# A condition tree evaluates to three-valued truths keyed by attribute position (absent = tautology);
# FALSE (which involves no attribute) is FALSE on every value of the first attribute.
_Cov = dict[int, Truth]


def _syntax_message(text: str, exc: ParseError | TokenError) -> str:
    """Where and why a condition does not parse, in the condition's own words (never sqlglot's class
    names, such as ``<class 'sqlglot.expressions.core.Condition'>``)."""
    shown = text if len(text) <= 120 else text[:117] + "..."
    errors = getattr(exc, "errors", None) or []
    if not errors:  # the tokenizer: an unclosed quote or a character SQL does not know
        return f"cannot parse condition {shown!r}: an unclosed quote or a character that is not SQL"
    e = errors[0]
    word = str(e.get("highlight") or "")
    col = e.get("col")
    where = f" at character {int(col) - len(word) + 1}" if isinstance(col, int) and word else ""
    description = str(e.get("description") or "")
    if description.startswith("Required keyword"):
        why = f"{word!r}{where} needs a value after it"
    elif description.startswith("Expecting "):
        why = f"expected {description.removeprefix('Expecting ')!r} near {word!r}{where}"
    elif word:
        why = f"unexpected {word!r}{where}"
        if word.isalpha() and word.upper() not in _KEYWORDS:
            close = difflib.get_close_matches(word.upper(), _KEYWORDS, n=1, cutoff=0.7)
            if close:
                why += f" (did you mean {close[0]}?)"
    else:
        why = "incomplete condition"
    return f"cannot parse condition {shown!r}: {why}"


#: The words a condition may use, for suggestions after a typo (``BETWEN``: did you mean BETWEEN?).
_KEYWORDS = ("AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "LIKE", "TRUE", "FALSE")


def parse_where(schema: Schema, text: str, *, id: str | None = None, weight: float = 1.0) -> PredicateQuery:
    """Parse ``text`` (the part after WHERE) into a :class:`PredicateQuery` over ``schema``.

    Raises :class:`~overlapdp.errors.QueryTooComplexError` (a limit, before parsing),
    :class:`~overlapdp.errors.QuerySyntaxError`, :class:`~overlapdp.errors.DomainValueError` (a value
    or range outside the domain) or :class:`~overlapdp.errors.QueryError`; never RecursionError.
    """
    prefix = query_label(id)
    if not isinstance(text, str):
        raise QuerySyntaxError(f"{prefix}a condition must be a string, got {type(text).__name__}")
    if not text.strip():
        raise QuerySyntaxError(f"{query_label(id)}empty condition")
    try:
        check_condition_text(text)
        try:
            tree = sqlglot.condition(text)
        except (ParseError, TokenError) as exc:
            raise QuerySyntaxError(_syntax_message(text, exc)) from None
        covs = _Walker(schema).walk(tree)
    except RecursionError:
        raise with_prefix(too_deep(), prefix) from None
    except QueryError as exc:
        raise with_prefix(exc, prefix) from None
    # Only TRUE is counted: UNKNOWN (a comparison with a missing value) is left out, as in SQL.
    true = {pos: t.true for pos, t in covs.items()}
    return PredicateQuery.from_coverages(schema, true, id=id, weight=weight, text=text.strip())


class _Walker:
    """Evaluates a sqlglot tree; AND / OR chains are walked iteratively (their length does not use
    the stack), only parentheses and NOT recurse, and their depth is bounded by the pre-scan."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def walk(self, node: exp.Expr) -> _Cov:
        if isinstance(node, exp.Paren):
            return self.walk(node.this)
        if isinstance(node, exp.And):
            cov: _Cov = {}
            for part in _chain(node, exp.And):
                cov = _intersect(cov, self.walk(part))
            return cov
        if isinstance(node, exp.Or):
            return self._or(node)
        if isinstance(node, exp.Not):
            return self._not(node)
        if isinstance(node, exp.Boolean):
            return {} if node.this else self._false()
        if isinstance(node, exp.Between):
            pos = self._column(node.this)
            attr = self.schema.attributes[pos]
            if not attr.ordered:
                raise QueryError(
                    f"attribute {attr.name!r} is categorical (unordered); BETWEEN does not apply"
                )
            lo, hi = self._literal(node.args["low"]), self._literal(node.args["high"])
            return {pos: Truth.comparison(attr, attr.interval(lo, hi))}
        if isinstance(node, exp.In):
            pos = self._column(node.this)
            if node.args.get("query") is not None:
                raise QueryError("IN with a sub-query is not a predicate on one attribute")
            values = [self._literal(v) for v in node.expressions]
            attr = self.schema.attributes[pos]
            return {pos: Truth.comparison(attr, attr.values_in(values))}
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise QueryError(
                    f"unsupported condition {_sql(node)!r}: IS only takes NULL (IS NULL, IS NOT NULL)"
                )
            pos = self._column(node.this)
            return {pos: IsNull().truth(self.schema.attributes[pos])}
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
        raise QueryError(f"unsupported condition {_sql(node)!r}: use comparisons, BETWEEN, IN, NOT, AND, OR")

    def _false(self) -> _Cov:
        return {0: Truth(IndexSet.empty())}

    def _compare(self, node: exp.Binary, op: str) -> _Cov:
        left, right = node.left, node.right
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
        if isinstance(left, exp.Column):
            column, literal = left, right
        elif isinstance(right, exp.Column):
            column, literal, op = right, left, flip[op]
        else:
            raise QueryError(f"condition {_sql(node)!r} must compare an attribute with a constant")
        pos = self._column(column)
        attr = self.schema.attributes[pos]
        value = self._literal(literal)
        if op == "=":
            return {pos: Truth.comparison(attr, attr.values_in([value]))}
        if op == "!=":
            # NOT (x = v): UNKNOWN, so not counted, where x is missing.
            return {pos: Truth.comparison(attr, attr.values_in([value])).negate(attr)}
        if not attr.ordered:
            raise QueryError(
                f"attribute {attr.name!r} is categorical (unordered); {op!r} does not apply, use = or IN"
            )
        if op in ("<", "<="):
            return {pos: Truth.comparison(attr, attr.interval(None, value, hi_open=op == "<"))}
        return {pos: Truth.comparison(attr, attr.interval(value, None, lo_open=op == ">"))}

    def _or(self, node: exp.Or) -> _Cov:
        # Decided on the text, before the values: "age = 3 OR race = 'x'" is refused as a whole even
        # when age = 3 lies outside the domain. One chain is one OR node here (linear, not quadratic).
        mentioned = self._mentioned(node)
        if len(mentioned) > 1:
            names = sorted(self.schema.attributes[p].name for p in mentioned)
            raise QueryError(
                f"OR across attributes ({', '.join(names)}) is not a predicate query; "
                "split it into separate queries"
            )
        # A tautology side makes the OR a tautology; a side FALSE on every value is the neutral element.
        out: _Cov = {}
        for part in _chain(node, exp.Or):
            cov = self.walk(part)
            if not cov:
                return {}
            if _is_false(cov):
                continue
            pos, c = next(iter(cov.items()))
            out[pos] = out[pos].either(c) if pos in out else c
        return out or self._false()

    def _not(self, node: exp.Not) -> _Cov:
        mentioned = self._mentioned(node)
        if len(mentioned) > 1:
            names = sorted(self.schema.attributes[p].name for p in mentioned)
            raise QueryError(f"NOT over several attributes ({', '.join(names)}) is not a predicate query")
        inner = self.walk(node.this)
        if not inner:
            return self._false()
        if _is_false(inner):
            return {}
        pos, cov = next(iter(inner.items()))
        return {pos: cov.negate(self.schema.attributes[pos])}

    def _mentioned(self, node: exp.Expr) -> set[int]:
        # find_all is a breadth-first loop, not a recursion.
        return {self._column(c) for c in node.find_all(exp.Column)}

    def _column(self, node: exp.Expr) -> int:
        if not isinstance(node, exp.Column):
            raise QueryError(f"expected an attribute name, found {_sql(node)!r}")
        if node.table:
            raise QueryError(f"qualified name {_sql(node)!r}: use the bare attribute name")
        try:
            return self.schema.position(node.name)
        except SchemaError as exc:
            raise QueryError(str(exc)) from None

    def _literal(self, node: exp.Expr) -> Any:
        if isinstance(node, exp.Neg):
            value = self._literal(node.this)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise QueryError(f"cannot negate {_sql(node.this)!r}")
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
                pass
            try:
                return float(text)
            except ValueError:
                raise QueryError(f"cannot read the number {_sql(node)!r}") from None
        if isinstance(node, exp.Column):
            raise QueryError(
                f"{_sql(node)!r} is read as an attribute name; quote text values with single quotes"
            )
        if isinstance(node, exp.Null):
            raise QueryError("NULL is not a value to compare with; use IS NULL or IS NOT NULL")
        raise QueryError(f"expected a constant, found {_sql(node)!r}")


def _chain(node: exp.Expr, cls: type[exp.Connector]) -> list[exp.Expr]:
    """The operands of a chain ``a OP b OP c ...`` (a left-deep tree), left to right, without recursion."""
    out: list[exp.Expr] = []
    stack: list[exp.Expr] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cls):
            stack.append(n.right)
            stack.append(n.left)
        else:
            out.append(n)
    return out


def _sql(node: exp.Expr) -> str:
    """A node's SQL for a message, cut short."""
    text = node.sql()
    return text if len(text) <= 80 else text[:77] + "..."


def _is_false(cov: _Cov) -> bool:
    """FALSE on every row: some attribute's condition is FALSE on every value (not merely UNKNOWN)."""
    return any(c.is_false() for c in cov.values())


def _intersect(a: _Cov, b: _Cov) -> _Cov:
    out = dict(a)
    for p, c in b.items():
        out[p] = out[p].both(c) if p in out else c
    return out
