"""What a query aggregates: a count (the default), or the SUM or MEAN of a numeric attribute clipped to
DECLARED bounds (never read off the data; MATH.md 2.8, 6.4).

A workload line may add ``"aggregate": "count" | "sum" | "mean"``, ``"of": <attribute>``,
``"bounds": [lo, hi]`` and ``"step": s`` to its query:
``{"id": "h", "where": "age >= 30", "aggregate": "sum", "of": "hours_per_week", "bounds": [0, 99]}``.

Granularity (MATH.md 6.4): the exact samplers add integer noise, so a value ``v`` enters a sum as the
integer ``k(v) = min(max(floor(v/s + 1/2), L), H)`` in units of the declared resolution ``s`` (``step``,
default 1), with ``L = lo/s`` and ``H = hi/s``, which must be integers (to a relative ``1e-9``; the
nearest integers are used). The released sum is ``s`` times a noisy integer. ``|L|, |H| <= 2^40``.
Sensitivity of the sum in units of ``s`` (MATH.md 2.8): ``max(|L|, |H|)`` when a row is added or removed;
when one row is replaced, ``max(H - L, |L|, |H|)`` (the row may leave or enter the query's rows, or be a
row that adds nothing: outside the domain of a ``"drop"`` schema, or missing the summed value), and
``H - L`` only for a query covering every row of a schema under which every row adds a value.

The clipping bounds come from the workload line or, when it has none, from ``declared`` (bounds the
data owner declared per attribute, e.g. in the schema); a sum without bounds is an error naming the
attribute. Only numeric attributes (integer ranges and binned numbers) can be summed: an integer
attribute's value is its integer, a binned attribute's value is the row's raw number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from overlapdp.errors import QueryError, SchemaError
from overlapdp.schema import BinnedAttribute, IntAttribute, Schema
from overlapdp.validation import check_finite

AggregateKind = Literal["count", "sum", "mean"]
AGGREGATES: tuple[AggregateKind, ...] = ("count", "sum", "mean")
Neighbouring = Literal["add_remove", "replace"]
#: Workload-line keys this module owns.
AGGREGATE_KEYS = ("aggregate", "of", "bounds", "step")
#: Largest clipping bound in units of the step (keeps sums of many rows and noise scales in range).
MAX_UNITS = 2**40


@dataclass(frozen=True)
class Clipping:
    """Declared clipping bounds ``[lo, hi]`` of attribute ``column`` and the resolution ``step``."""

    column: str
    lo: float
    hi: float
    step: float = 1.0

    def __post_init__(self) -> None:
        label = f"sum of {self.column!r}: "
        lo = check_finite(self.lo, f"{label}'bounds'", error=QueryError)
        hi = check_finite(self.hi, f"{label}'bounds'", error=QueryError)
        step = check_finite(self.step, f"{label}'step'", error=QueryError)
        if not step > 0:
            raise QueryError(f"{label}'step' must be positive, got {self.step!r}")
        if not lo < hi:
            raise QueryError(f"{label}'bounds' must be [lo, hi] with lo < hi, got [{self.lo!r}, {self.hi!r}]")
        for name, b in (("lo", lo), ("hi", hi)):
            ratio = Fraction(b) / Fraction(step)
            k = round(ratio)
            if abs(ratio - k) > Fraction(1, 10**9) * max(1, abs(k)):
                raise QueryError(
                    f"{label}'bounds' {name} = {b!r} is not a multiple of 'step' = {step!r} "
                    "(values are summed as integers in units of step)"
                )
            if abs(k) > MAX_UNITS:
                raise QueryError(f"{label}'bounds' {name} = {b!r} is more than 2^40 steps from 0")

    @property
    def units(self) -> tuple[int, int]:
        """``(L, H)``: the bounds in units of ``step`` (integers)."""
        s = Fraction(self.step)
        return round(Fraction(self.lo) / s), round(Fraction(self.hi) / s)

    def sensitivity(
        self,
        neighbouring: Neighbouring = "add_remove",
        *,
        covers_all: bool = False,
        schema: Schema | None = None,
    ) -> int:
        """The sum's sensitivity in units of ``step`` (MATH.md 2.8). Add/remove: ``max(|L|, |H|)`` (one row's
        contribution). Replace-one-row: ``max(H - L, |L|, |H|)``, because the replaced row may move into or
        out of the query's coverage, which changes the sum by a whole contribution (with ``0 < L``, e.g.
        bounds ``[10, 20]``, that is 20, more than ``H - L = 10``).

        ``H - L`` only when EVERY row a data set may hold adds a value in ``[L, H]``: the query covers the
        whole domain (``covers_all``) AND ``schema`` (required for it) admits no row that adds 0 to every
        sum, i.e. it refuses rows outside the domain (``outside="error"``; dropped rows stay in the data
        set and add nothing, MATH.md 1.2) and allows no missing value of the summed attribute (a NULL adds
        nothing, as in SQL). Otherwise replacing such a row by one at the far bound moves the sum by
        ``max(|L|, |H|)``. At least 1 (never less noise than a count)."""
        lo, hi = self.units
        if neighbouring == "add_remove":
            return max(1, abs(lo), abs(hi))
        if neighbouring == "replace":
            every_row_adds = covers_all and schema is not None and rows_all_add(schema, self.column)
            return max(1, hi - lo) if every_row_adds else max(1, hi - lo, abs(lo), abs(hi))
        raise QueryError(f"unknown neighbouring relation {neighbouring!r}; use 'add_remove' or 'replace'")

    def to_json(self) -> dict[str, Any]:
        return {"of": self.column, "bounds": [self.lo, self.hi], "step": self.step}


def rows_all_add(schema: Schema, column: str) -> bool:
    """Whether every row a data set over ``schema`` may hold adds a value of ``column`` to a sum of the
    rows it is in (MATH.md 1.2, 2.8): no row outside the domain is kept (``outside="error"``) and
    ``column`` allows no missing value. Only then can a sum covering every domain row rely on it."""
    if column not in schema.names:
        raise QueryError(f"{column!r} is not an attribute of the schema")
    return schema.outside == "error" and not schema.attribute(column).missing


@dataclass(frozen=True)
class Aggregate:
    """A query's aggregate: ``count`` (no clipping), or ``sum`` / ``mean`` of ``clipping.column``."""

    kind: AggregateKind = "count"
    clipping: Clipping | None = None

    def __post_init__(self) -> None:
        if (self.kind == "count") != (self.clipping is None):
            raise QueryError("a count has no clipping; a sum or mean needs one")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"aggregate": self.kind}
        if self.clipping is not None:
            out.update(self.clipping.to_json())
        return out


COUNT = Aggregate()


def check_summable(schema: Schema, column: Any, label: str = "") -> str:
    """The name of a numeric attribute of ``schema`` (integer range or binned); an error otherwise."""
    if not isinstance(column, str):
        raise QueryError(f"{label}'of' must be an attribute name (a string)")
    if column not in schema.names:
        raise QueryError(f"{label}'of' names {column[:60]!r}, which is not an attribute of the schema")
    attr = schema.attribute(column)
    if not isinstance(attr, IntAttribute | BinnedAttribute):
        raise QueryError(f"{label}'of': attribute {column!r} is {attr.kind}; only numbers can be summed")
    return column


def parse_aggregate(
    schema: Schema,
    spec: Mapping[str, Any],
    *,
    declared: Mapping[str, Sequence[float]] | None = None,
    label: str = "",
) -> Aggregate:
    """The aggregate of a workload line's ``aggregate`` / ``of`` / ``bounds`` / ``step`` keys.

    ``declared`` maps attribute names to bounds ``[lo, hi]`` or ``[lo, hi, step]`` declared by the data
    owner, used when the line gives no ``bounds``. Bounds are never taken from the data.
    """
    kind = spec.get("aggregate", "count")
    if kind not in AGGREGATES:
        raise QueryError(f"{label}'aggregate' must be one of {', '.join(AGGREGATES)}, got {str(kind)[:40]!r}")
    if kind == "count":
        extra = [k for k in ("of", "bounds", "step") if k in spec]
        if extra:
            raise QueryError(f"{label}{extra[0]!r} is only meaningful with 'aggregate': 'sum' or 'mean'")
        return COUNT
    if "of" not in spec:
        raise QueryError(f"{label}'aggregate': {kind!r} needs 'of', the attribute to {kind}")
    column = check_summable(schema, spec["of"], label)
    bounds: Any = spec.get("bounds")
    step: Any = spec.get("step")
    if bounds is None:
        decl = None if declared is None else declared.get(column)
        if decl is None:
            raise QueryError(
                f"{label}'bounds' missing: a {kind} of {column!r} needs declared clipping bounds "
                "[lo, hi] (on the workload line or declared for the attribute); they are never read "
                "off the data"
            )
        bounds = list(decl[:2])
        if step is None and len(decl) > 2:
            step = decl[2]
    if not isinstance(bounds, list | tuple) or len(bounds) != 2:
        raise QueryError(f"{label}'bounds' must be a list [lo, hi] of two numbers")
    lo = check_finite(bounds[0], f"{label}'bounds'", error=QueryError)
    hi = check_finite(bounds[1], f"{label}'bounds'", error=QueryError)
    st = 1.0 if step is None else check_finite(step, f"{label}'step'", error=QueryError)
    try:
        clip = Clipping(column, lo, hi, st)
    except QueryError as exc:
        raise QueryError(f"{label}{exc}") from None
    return Aggregate(kind, clip)


def declared_bounds(schema_json: Any) -> dict[str, list[float]]:
    """Clipping bounds declared in a schema's JSON: an attribute object of the ``{"attributes": [...]}``
    form may carry ``"bounds": [lo, hi]`` and ``"step": s`` for sums and means of it
    (``{"name": "hours_per_week", "type": "int", "min": 1, "max": 99, "bounds": [0, 99]}``). Checked
    when a query uses them (:func:`parse_aggregate`); the shape is checked here (:class:`SchemaError`)."""
    out: dict[str, list[float]] = {}
    items = schema_json.get("attributes") if isinstance(schema_json, Mapping) else None
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, Mapping) or "bounds" not in item:
            continue
        name, bounds = item.get("name"), item["bounds"]
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise SchemaError(f"attribute {name!r}: 'bounds' must be a list [lo, hi] of two numbers")
        out[str(name)] = [*bounds, *([item["step"]] if "step" in item else [])]
    return out


def with_declared_bounds(
    schema_json: dict[str, Any], declared: Mapping[str, Sequence[float]]
) -> dict[str, Any]:
    """``schema_json`` (the ``{"attributes": [...]}`` form, e.g. ``Schema.to_json()``, which keeps no
    clipping bounds) with each declared attribute's ``"bounds"`` (and ``"step"``) put back, so that a
    stored schema keeps what :func:`declared_bounds` reads."""
    out = dict(schema_json)
    items = []
    for item in schema_json.get("attributes", []):
        got = declared.get(str(item.get("name"))) if isinstance(item, Mapping) else None
        if got is not None:
            item = {**item, "bounds": [got[0], got[1]], **({"step": got[2]} if len(got) > 2 else {})}
        items.append(item)
    out["attributes"] = items
    return out


def load_declared_bounds(path: str | Path) -> dict[str, list[float]]:
    """:func:`declared_bounds` of a schema file (an unreadable file is left to ``Schema.load``)."""
    try:
        return declared_bounds(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def parse_sql_aggregate(schema: Schema, text: str) -> tuple[AggregateKind, str | None]:
    """The aggregate of a SQL select expression: ``COUNT(*)``, ``SUM(col)`` or ``AVG(col)`` (``MEAN``).

    Returns ``(kind, column)`` (column None for a count). For a SELECT parser to call at its single
    place where an aggregate other than ``COUNT(*)`` is handled; clipping bounds come from the workload
    or the declared bounds (:func:`parse_aggregate`), never from the SQL text or the data.
    """
    if not isinstance(text, str) or len(text) > 1000:
        raise QueryError("an aggregate must be a short SQL expression such as SUM(hours_per_week)")
    # sqlglot is imported where SQL is parsed (DESIGN.md: heavy dependencies are imported where used)
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        tree = sqlglot.parse_one(text)
    except (ParseError, TokenError):
        raise QueryError(f"cannot parse the aggregate {text[:60]!r}") from None
    if isinstance(tree, exp.Count):
        inner = tree.this
        if isinstance(inner, exp.Star):
            return "count", None
        raise QueryError("only COUNT(*) is supported among counts")
    kinds: dict[type[exp.Expression], AggregateKind] = {exp.Sum: "sum", exp.Avg: "mean"}
    kind = next((k for t, k in kinds.items() if isinstance(tree, t)), None)
    if kind is None and isinstance(tree, exp.Anonymous) and str(tree.name).upper() == "MEAN":
        kind = "mean"
        args = tree.expressions
        inner = args[0] if len(args) == 1 else None
    else:
        inner = tree.this if kind is not None else None
    if kind is None:
        raise QueryError(f"unsupported aggregate {text[:60]!r}; use COUNT(*), SUM(column) or AVG(column)")
    if not isinstance(inner, exp.Column) or inner.table:
        raise QueryError(f"{text[:60]!r}: the argument of {kind.upper()} must be one column name")
    return kind, check_summable(schema, inner.name)
