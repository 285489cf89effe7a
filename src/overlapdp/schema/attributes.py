"""The three kinds of attribute, each a finite set of values indexed ``0..size-1`` (MATH.md section 1).

- :class:`IntAttribute`: ordered integers ``min..max``;
- :class:`CategoricalAttribute`: an unordered list of values;
- :class:`BinnedAttribute`: numbers binned by declared edges, bin ``i`` is ``[edges[i], edges[i+1])``.

Each attribute turns a comparison with a constant into the set of value indices it covers (its
coverage) and maps raw data values to indices (``-1`` for a value outside the domain).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapdp.errors import DataError, QueryError, SchemaError
from overlapdp.schema.indexset import IndexSet

Comparison = Literal["<", "<=", ">", ">="]
Scalar = int | float | str | bool


def _as_number(attribute: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QueryError(
            f"attribute {attribute!r} is numeric; cannot compare it with a {type(value).__name__}"
        )
    if isinstance(value, float) and math.isnan(value):
        raise QueryError(f"attribute {attribute!r}: NaN is not a comparable value")
    return float(value) if isinstance(value, float) else value


class Attribute(ABC):
    """A finite attribute of the domain."""

    kind: ClassVar[str]
    ordered: ClassVar[bool]
    name: str

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of values (domain points on this attribute)."""

    @abstractmethod
    def index_of(self, value: Any) -> int | None:
        """Index of a raw value, or None when it lies outside the domain."""

    @abstractmethod
    def value_at(self, index: int) -> Scalar:
        """A readable value for index ``index`` (the bin's label for binned attributes)."""

    @abstractmethod
    def compare(self, op: Comparison, value: Any) -> IndexSet:
        """Coverage of ``attribute <op> value``; values outside the domain simply match nothing."""

    @abstractmethod
    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        """Map a column of raw values to indices, ``-1`` where a value is missing or out of domain."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The JSON form read by :func:`overlapdp.schema.Schema.from_json`."""

    def full(self) -> IndexSet:
        return IndexSet.full(self.size)

    def values_in(self, values: Sequence[Any]) -> IndexSet:
        """Coverage of ``attribute IN values``; values outside the domain are ignored (narrower, not an error)."""
        indices = [self.index_of(self._check_scalar(v)) for v in values]
        return IndexSet.from_indices(i for i in indices if i is not None)

    def _check_scalar(self, value: Any) -> Any:
        return value


@dataclass(frozen=True)
class IntAttribute(Attribute):
    """Ordered integers ``min..max`` (both included)."""

    name: str
    min: int
    max: int
    kind: ClassVar[str] = "int"
    ordered: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for bound in ("min", "max"):
            v = getattr(self, bound)
            if isinstance(v, bool) or not isinstance(v, int):
                raise SchemaError(f"attribute {self.name!r}: {bound} must be an integer, got {v!r}")
        if self.min > self.max:
            raise SchemaError(f"attribute {self.name!r}: min {self.min} > max {self.max}")

    @property
    def size(self) -> int:
        return self.max - self.min + 1

    def _check_scalar(self, value: Any) -> Any:
        _as_number(self.name, value)
        return value

    def index_of(self, value: Any) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            return None
        if isinstance(value, float | np.floating) and not float(value).is_integer():
            return None
        v = int(value)
        return v - self.min if self.min <= v <= self.max else None

    def value_at(self, index: int) -> int:
        return self.min + index

    def compare(self, op: Comparison, value: Any) -> IndexSet:
        v = _as_number(self.name, value)
        # Smallest / largest integer satisfying the comparison, then clipped to the domain.
        lo: float
        hi: float
        if op == "<":
            lo, hi = -math.inf, math.ceil(v) - 1
        elif op == "<=":
            lo, hi = -math.inf, math.floor(v)
        elif op == ">":
            lo, hi = math.floor(v) + 1, math.inf
        else:
            lo, hi = math.ceil(v), math.inf
        first = max(self.min, lo)
        last = min(self.max, hi)
        if first > last:
            return IndexSet.empty()
        return IndexSet.interval(int(first) - self.min, int(last) - self.min + 1)

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        numeric = _numeric_column(self.name, values)
        ok = (
            np.isfinite(numeric)
            & (numeric == np.floor(numeric))
            & (numeric >= self.min)
            & (numeric <= self.max)
        )
        out = np.full(len(numeric), -1, dtype=np.int64)
        out[ok] = numeric[ok].astype(np.int64) - self.min
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class CategoricalAttribute(Attribute):
    """An unordered list of distinct values; only ``=``, ``!=``, ``IN`` and ``NOT IN`` apply."""

    name: str
    values: tuple[Scalar, ...]
    kind: ClassVar[str] = "categorical"
    ordered: ClassVar[bool] = False
    _lookup: dict[Any, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.values:
            raise SchemaError(f"attribute {self.name!r}: a categorical attribute needs at least one value")
        lookup: dict[Any, int] = {}
        for i, v in enumerate(self.values):
            if not isinstance(v, str | int | float | bool):
                raise SchemaError(f"attribute {self.name!r}: value #{i} is not a string or number")
            if v in lookup:
                raise SchemaError(f"attribute {self.name!r}: duplicate value #{i}")
            lookup[v] = i
        object.__setattr__(self, "_lookup", lookup)

    @property
    def size(self) -> int:
        return len(self.values)

    def index_of(self, value: Any) -> int | None:
        if isinstance(value, np.generic):
            value = value.item()
        try:
            found = self._lookup.get(value)
        except TypeError:
            return None
        if found is None and not isinstance(value, str):
            found = self._lookup.get(str(value))
        return found

    def value_at(self, index: int) -> Scalar:
        return self.values[index]

    def compare(self, op: Comparison, value: Any) -> IndexSet:
        raise QueryError(
            f"attribute {self.name!r} is categorical (unordered); {op!r} does not apply, use = or IN"
        )

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        lookup = self._lookup

        def one(v: Any) -> int:
            if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
                return -1
            found = lookup.get(v)
            if found is None and not isinstance(v, str):
                # Text categories against a column read as numbers: compare as text.
                found = lookup.get(str(v))
            return -1 if found is None else found

        return np.fromiter((one(v) for v in values.tolist()), dtype=np.int64, count=len(values))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "values": list(self.values)}


@dataclass(frozen=True)
class BinnedAttribute(Attribute):
    """Numbers binned by declared edges: bin ``i`` is ``[edges[i], edges[i+1])``.

    Values below the first edge or at / above the last are outside the domain. Queries see bins:
    a comparison must not split a bin (``x < 5000`` with 5000 an edge is fine; ``x < 2500`` inside
    the bin ``[1, 5000)`` is an error, since the count would silently be of a different set of rows),
    and ``=`` / ``IN`` name a bin by any value inside it.
    """

    name: str
    edges: tuple[float, ...]
    kind: ClassVar[str] = "binned"
    ordered: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if len(self.edges) < 2:
            raise SchemaError(f"attribute {self.name!r}: a binned attribute needs at least two edges")
        for i, e in enumerate(self.edges):
            if isinstance(e, bool) or not isinstance(e, int | float) or not math.isfinite(e):
                raise SchemaError(f"attribute {self.name!r}: edge #{i} is not a finite number")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise SchemaError(f"attribute {self.name!r}: edges must be strictly increasing")

    @property
    def size(self) -> int:
        return len(self.edges) - 1

    def _check_scalar(self, value: Any) -> Any:
        _as_number(self.name, value)
        return value

    def index_of(self, value: Any) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            return None
        v = float(value)
        if not (self.edges[0] <= v < self.edges[-1]):
            return None
        return int(np.searchsorted(np.asarray(self.edges), v, side="right")) - 1

    def value_at(self, index: int) -> str:
        lo, hi = self.edges[index], self.edges[index + 1]
        return f"[{_fmt(lo)}, {_fmt(hi)})"

    def compare(self, op: Comparison, value: Any) -> IndexSet:
        v = _as_number(self.name, value)
        covered: list[int] = []
        for i in range(self.size):
            lo, hi = self.edges[i], self.edges[i + 1]
            # A bin holds [lo, hi): decide whether all, none or some of it satisfies the comparison.
            if op == "<":
                all_in, none_in = hi <= v, lo >= v
            elif op == "<=":
                all_in, none_in = hi <= v, lo > v
            elif op == ">":
                all_in, none_in = lo > v, hi <= v
            else:
                all_in, none_in = lo >= v, hi <= v
            if all_in:
                covered.append(i)
            elif not none_in:
                raise QueryError(
                    f"attribute {self.name!r} is binned; '{op} {_fmt(v)}' splits the bin {self.value_at(i)}: "
                    "compare with bin edges (for example '<' or '>=' an edge)"
                )
        return IndexSet.from_indices(covered)

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        numeric = _numeric_column(self.name, values)
        idx = np.searchsorted(np.asarray(self.edges, dtype=float), numeric, side="right") - 1
        ok = np.isfinite(numeric) & (numeric >= self.edges[0]) & (numeric < self.edges[-1])
        return np.where(ok, idx, -1).astype(np.int64)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "edges": list(self.edges)}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _numeric_column(name: str, values: pd.Series) -> npt.NDArray[np.float64]:
    """Numbers of a column; missing cells become NaN (out of domain), text is an error (never echoed)."""
    numeric = pd.to_numeric(values, errors="coerce")
    bad = int(numeric.isna().sum() - values.isna().sum())
    if bad > 0:
        raise DataError(
            f"column {name!r}: {bad} value(s) are not numbers, but the schema declares it numeric"
        )
    return numeric.to_numpy(dtype=float, na_value=np.nan)
