"""Hypothesis strategies: random small schemas and random predicate queries over them, as SQL text."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from overlapdp.schema import Attribute, BinnedAttribute, CategoricalAttribute, IntAttribute, Schema

CATS = ["a", "b", "c", "d", "e"]


@st.composite
def attributes(draw: st.DrawFn, name: str) -> Attribute:
    kind = draw(st.sampled_from(["int", "categorical", "binned"]))
    if kind == "int":
        lo = draw(st.integers(-3, 5))
        return IntAttribute(name, lo, lo + draw(st.integers(0, 5)))
    if kind == "categorical":
        return CategoricalAttribute(name, tuple(CATS[: draw(st.integers(1, 5))]))
    n = draw(st.integers(1, 4))
    edges = sorted(draw(st.sets(st.integers(0, 40), min_size=n + 1, max_size=n + 1)))
    return BinnedAttribute(name, tuple(edges))


@st.composite
def schemas(draw: st.DrawFn, max_attributes: int = 3) -> Schema:
    m = draw(st.integers(1, max_attributes))
    return Schema(tuple(draw(attributes(f"x{j}")) for j in range(m)))


def representative(attr: Attribute, index: int) -> Any:
    """A raw value in domain point ``index`` (the lower edge for bins)."""
    if isinstance(attr, BinnedAttribute):
        return attr.edges[index]
    return attr.value_at(index)


def compose(values: Sequence[float], comp: str) -> float:
    """The comp of one row's weights, computed directly (count, l2, otherwise sum)."""
    if comp == "count":
        return float(len(values))
    if comp == "l2":
        return math.sqrt(math.fsum(v * v for v in values))
    return math.fsum(values)


def all_rows(schema: Schema) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(a.size) for a in schema)))


def _lit(v: Any) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


@st.composite
def atom_condition(draw: st.DrawFn, attr: Attribute) -> str:
    """A valid condition on one attribute: values in the domain, bounds in and just outside it.

    Every leaf covers at least one value (a value outside the domain, an inverted range or a range
    that covers nothing is an error, tested in test_query_limits.py); combinations may still be empty.
    """
    name = attr.name
    if isinstance(attr, CategoricalAttribute):
        pool = list(attr.values)
        op = draw(st.sampled_from(["=", "!=", "IN", "NOT IN"]))
        if op in ("IN", "NOT IN"):
            vals = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            return f"{name} {op} ({', '.join(_lit(v) for v in vals)})"
        return f"{name} {op} {_lit(draw(st.sampled_from(pool)))}"
    if isinstance(attr, BinnedAttribute):
        # Only bin-aligned conditions: comparisons at edges, equality at lower edges.
        lower = list(attr.edges[:-1])
        upper = [*attr.edges[1:], attr.edges[-1] + 7]
        op = draw(st.sampled_from(["<", ">=", "=", "!=", "IN", "BETWEEN"]))
        if op == "IN":
            vals = draw(st.lists(st.sampled_from(lower), min_size=1, max_size=3))
            return f"{name} IN ({', '.join(str(v) for v in vals)})"
        if op in ("=", "!=", ">="):
            return f"{name} {op} {draw(st.sampled_from(lower))}"
        if op == "BETWEEN":
            # x >= e1 AND x < e2 is the aligned form of a bin range (empty when e2 <= e1).
            return f"({name} >= {draw(st.sampled_from(lower))} AND {name} < {draw(st.sampled_from(upper))})"
        return f"{name} < {draw(st.sampled_from(upper))}"
    assert isinstance(attr, IntAttribute)
    lo, hi = attr.min, attr.max
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "BETWEEN", "IN", "NOT IN"]))
    if op == "BETWEEN":
        a = draw(st.integers(lo - 2, hi))
        return f"{name} BETWEEN {a} AND {draw(st.integers(max(a, lo), hi + 2))}"
    if op in ("IN", "NOT IN"):
        vals = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=3))
        return f"{name} {op} ({', '.join(str(v) for v in vals)})"
    bounds = {
        "=": (lo, hi),
        "!=": (lo, hi),
        "<": (lo + 1, hi + 2),
        "<=": (lo, hi + 2),
        ">": (lo - 2, hi - 1),
        ">=": (lo - 2, hi),
    }[op]
    return f"{name} {op} {draw(st.integers(*bounds))}"


@st.composite
def attribute_condition(draw: st.DrawFn, attr: Attribute) -> str:
    """Atoms combined with NOT and same-attribute OR."""
    base = draw(atom_condition(attr))
    shape = draw(st.sampled_from(["plain", "not", "or", "not-or"]))
    if shape == "not":
        return f"NOT ({base})"
    if shape in ("or", "not-or"):
        other = draw(atom_condition(attr))
        text = f"({base} OR {other})"
        return f"NOT {text}" if shape == "not-or" else text
    return base


@st.composite
def where_clauses(draw: st.DrawFn, schema: Schema) -> str:
    """A conjunction over a random subset of attributes (possibly none: TRUE)."""
    chosen = draw(st.lists(st.sampled_from(list(schema.attributes)), max_size=len(schema) + 1))
    if not chosen:
        return "TRUE"
    return " AND ".join(draw(attribute_condition(a)) for a in chosen)
