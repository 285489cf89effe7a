"""The domain: an ordered list of attributes, read from JSON or inferred with declared bounds (MATH.md 1.1).

The schema also states, once, what happens to a row that does not fit its domain (a present value
outside an attribute's domain, or a missing value on an attribute without ``"missing": true``): the
data owner's decision ``"outside": "error"`` (the default: counting such data is an error that points
to ``overlapdp schema check`` and the ``missing`` option) or ``"outside": "drop"`` (such rows match no
query). Rows are never dropped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from overlapdp.errors import SchemaError
from overlapdp.schema.attributes import Attribute, BinnedAttribute, CategoricalAttribute, IntAttribute

OutsidePolicy = Literal["error", "drop"]
# Schemas with more attributes than this read a row from the values at index 0 (Schema.row).
_WIDE_ROW = 64
OUTSIDE_POLICIES: tuple[OutsidePolicy, ...] = ("error", "drop")


@dataclass(frozen=True)
class Schema:
    """The finite domain ``A_1 x ... x A_m``; a row is one value per attribute.

    ``outside`` is the policy for rows that do not fit the domain: ``"error"`` (default) or ``"drop"``.
    """

    attributes: tuple[Attribute, ...]
    outside: OutsidePolicy = field(default="error", kw_only=True)
    _by_name: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.attributes:
            raise SchemaError("a schema needs at least one attribute")
        if self.outside not in OUTSIDE_POLICIES:
            raise SchemaError(
                f"'outside' must be one of {', '.join(repr(p) for p in OUTSIDE_POLICIES)}, got {self.outside!r}"
            )
        by_name: dict[str, int] = {}
        for i, a in enumerate(self.attributes):
            if not isinstance(a.name, str) or not a.name:
                raise SchemaError(f"attribute #{i} has no name")
            if a.name in by_name:
                raise SchemaError(f"duplicate attribute name {a.name!r}")
            by_name[a.name] = i
        object.__setattr__(self, "_by_name", by_name)

    # -- access -----------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @property
    def domain_size(self) -> int:
        """Number of points in the domain (exact, may be huge)."""
        return math.prod(self.sizes)

    def __len__(self) -> int:
        return len(self.attributes)

    def __iter__(self) -> Iterator[Attribute]:
        return iter(self.attributes)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def position(self, name: str) -> int:
        """Index of attribute ``name``; exact match first, then a unique case-insensitive match."""
        found = self._by_name.get(name)
        if found is not None:
            return found
        folded = [i for n, i in self._by_name.items() if n.lower() == name.lower()]
        if len(folded) == 1:
            return folded[0]
        raise SchemaError(f"unknown attribute {name!r}; the schema has {', '.join(self.names)}")

    def attribute(self, name: str) -> Attribute:
        return self.attributes[self.position(name)]

    def row(self, indices: Sequence[int]) -> dict[str, Any]:
        """A readable row (value per attribute) from value indices.

        On a wide schema (thousands of attributes, most at index 0 in a witness row) the row starts
        from every attribute's value at index 0, read once and kept, and only the other indices are
        read: a witness over 10 000 attributes took 12 ms value by value."""
        attrs = self.attributes
        if len(attrs) <= _WIDE_ROW:
            return {a.name: a.value_at(int(i)) for a, i in zip(attrs, indices, strict=True)}
        if len(indices) != len(attrs):
            raise ValueError(f"a row of {len(attrs)} values was expected, got {len(indices)}")
        first: dict[str, Any] | None = self.__dict__.get("_first_values")
        if first is None:
            first = {a.name: a.value_at(0) for a in attrs}
            object.__setattr__(self, "_first_values", first)
        out = dict(first)
        for j in np.flatnonzero(np.asarray(indices, dtype=np.int64)).tolist():
            a = attrs[j]
            out[a.name] = a.value_at(int(indices[j]))
        return out

    # -- JSON -------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"attributes": [a.to_json() for a in self.attributes]}
        if self.outside != "error":
            out["outside"] = self.outside
        return out

    @staticmethod
    def from_json(obj: Any) -> Schema:
        """Read ``{"attributes": [...], "outside": "error" | "drop"}`` or the compact form
        ``{"age": 85, ...}`` (integers ``0..84``, policy ``"error"``)."""
        if not isinstance(obj, Mapping):
            raise SchemaError("a schema must be a JSON object")
        if "attributes" in obj:
            items = obj["attributes"]
            if not isinstance(items, list):
                raise SchemaError("'attributes' must be a list")
            policy = obj.get("outside", "error")
            if policy not in OUTSIDE_POLICIES:
                raise SchemaError(f'\'outside\' must be "error" or "drop", got {policy!r}')
            return Schema(
                tuple(attribute_from_json(item, i) for i, item in enumerate(items)),
                outside=cast(OutsidePolicy, policy),
            )
        attrs: list[Attribute] = []
        for name, size in obj.items():
            if isinstance(size, bool) or not isinstance(size, int):
                raise SchemaError(f"attribute {name!r}: the compact form needs an integer size, got {size!r}")
            if size < 1:
                raise SchemaError(f"attribute {name!r} is empty (size {size})")
            attrs.append(IntAttribute(str(name), 0, size - 1))
        return Schema(tuple(attrs))

    @staticmethod
    def load(path: str | Path) -> Schema:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaError(f"cannot read schema file {str(p)!r}: {exc.strerror or exc}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(
                f"schema file {str(p)!r} is not valid JSON (line {exc.lineno}: {exc.msg})"
            ) from None
        return Schema.from_json(obj)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def attribute_from_json(item: Any, position: int = 0) -> Attribute:
    """One attribute of the ``{"attributes": [...]}`` form."""
    if not isinstance(item, Mapping):
        raise SchemaError(f"attribute #{position} must be a JSON object")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"attribute #{position} needs a non-empty 'name'")
    kind = item.get("type")
    missing = item.get("missing", False)
    if not isinstance(missing, bool):
        raise SchemaError(f"attribute {name!r}: 'missing' must be true or false, got {missing!r}")
    try:
        if kind == "int":
            return IntAttribute(name, item["min"], item["max"], missing=missing)
        if kind == "categorical":
            values = item["values"]
            if not isinstance(values, list):
                raise SchemaError(f"attribute {name!r}: 'values' must be a list")
            if not values:
                raise SchemaError(f"attribute {name!r} is empty: 'values' has no entries")
            return CategoricalAttribute(name, tuple(values), missing=missing)
        if kind == "binned":
            edges = item["edges"]
            if not isinstance(edges, list):
                raise SchemaError(f"attribute {name!r}: 'edges' must be a list")
            return BinnedAttribute(name, tuple(edges), missing=missing)
    except KeyError as exc:
        raise SchemaError(f"attribute {name!r} of type {kind!r} needs the field {exc.args[0]!r}") from None
    raise SchemaError(f"attribute {name!r}: unknown type {kind!r} (use int, categorical or binned)")
