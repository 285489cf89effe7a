"""The three kinds of attribute, each a finite set of values indexed ``0..size-1`` (MATH.md 1.1).

- :class:`IntAttribute`: ordered integers ``min..max``;
- :class:`CategoricalAttribute`: an unordered list of values;
- :class:`BinnedAttribute`: numbers binned by declared edges, bin ``i`` is ``[edges[i], edges[i+1])``.

Each attribute turns a comparison with a constant into the set of value indices it covers (its
coverage) and maps raw data values to indices (``-1`` for a value outside the domain, ``-2`` for a
missing value the attribute does not allow).

Missing values (MATH.md 1.1): an attribute declared with ``missing=True`` (JSON ``"missing":
true``) has one more value, the missing value (NULL, NaN, an empty cell), at the last index
``size - 1``. It is a value of the finite domain like any other, so coverage, overlap and accounting
are unchanged in kind. Only ``IS NULL`` covers it; comparisons, ``=``, ``IN`` and ranges never do, and
their negations (``!=``, ``NOT IN``, ``NOT``) do not either: SQL's three-valued logic, where a
comparison with NULL is UNKNOWN and so is its negation (:class:`overlapdp.query.predicates.Truth`).

Queries are checked against the domain (:meth:`Attribute.values_in`, :meth:`Attribute.interval`): a
value that is not in the domain, an inverted range and a range that covers no value of the domain are
:class:`~overlapdp.errors.DomainValueError` naming the attribute, the value and the nearest valid values
(``did you mean 'Female'?``), since such a query is almost always a typo and would otherwise be a
silently empty count that is still answered and recorded.
"""

from __future__ import annotations

import difflib
import math
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # pandas is imported where a column is encoded (DESIGN.md: heavy imports where used)
    import pandas as pd

from overlapdp.errors import DataError, DomainValueError, QueryError, SchemaError
from overlapdp.schema.indexset import IndexSet

Comparison = Literal["<", "<=", ">", ">="]
Scalar = int | float | str | bool

#: Codes of :meth:`Attribute.encode` (and of every engine's mapping) for a value that is not in the
#: domain: a present value outside it, and a missing value on an attribute that does not allow one.
OUTSIDE = -1
MISSING = -2


def _check_missing(name: str, missing: Any) -> None:
    if not isinstance(missing, bool):
        raise SchemaError(f"attribute {name!r}: 'missing' must be true or false, got {missing!r}")


def _is_missing(v: Any) -> bool:
    """None, NaN (float or numpy) and pandas' NA / NaT: what pandas' ``isna`` calls missing."""
    import pandas as pd

    if v is None or v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, float | np.floating) and math.isnan(v)


#: pandas' inferred kinds of an object column whose values are all of one kind (no mixed types).
_ONE_KIND = frozenset({"string", "empty", "integer", "floating", "boolean"})


def _arrow_strings(values: pd.Series) -> Any:
    """The column's Arrow chunked array when pandas keeps it as Arrow text, else None."""
    array = getattr(values, "array", None)
    data = getattr(array, "_pa_array", None)
    if data is None:
        return None
    import pyarrow as pa

    return data if pa.types.is_string(data.type) or pa.types.is_large_string(data.type) else None


def _as_number(attribute: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QueryError(
            f"attribute {attribute!r} is numeric; cannot compare it with a {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise QueryError(f"attribute {attribute!r}: {value!r} is not a finite number")
    return float(value) if isinstance(value, float) else value


class Attribute(ABC):
    """A finite attribute of the domain."""

    kind: ClassVar[str]
    ordered: ClassVar[bool]
    name: str
    missing: bool

    @property
    @abstractmethod
    def value_count(self) -> int:
        """Number of present (non-missing) values: the ones the schema lists, bins or ranges over."""

    @property
    def size(self) -> int:
        """Number of values (domain points on this attribute), the missing value included if allowed."""
        return self.value_count + 1 if self.missing else self.value_count

    @property
    def null_index(self) -> int | None:
        """The index of the missing value (the last one), or None when the attribute has none."""
        return self.value_count if self.missing else None

    def null_set(self) -> IndexSet:
        """``{null_index}``, or the empty set when the attribute allows no missing value."""
        return IndexSet.interval(self.value_count, self.size)

    def present(self) -> IndexSet:
        """Every value but the missing one: what ``IS NOT NULL`` covers."""
        return IndexSet.full(self.value_count)

    @abstractmethod
    def index_of(self, value: Any) -> int | None:
        """Index of a raw value, or None when it lies outside the domain."""

    def value_at(self, index: int) -> Scalar | None:
        """A readable value for index ``index`` (the bin's label for binned attributes); None for the
        missing value."""
        if index == self.null_index:
            return None
        return self._value_at(index)

    @abstractmethod
    def _value_at(self, index: int) -> Scalar:
        """The readable value of a present index."""

    @abstractmethod
    def compare(self, op: Comparison, value: Any) -> IndexSet:
        """Coverage of ``attribute <op> value``; values outside the domain simply match nothing."""

    def encode(self, values: pd.Series) -> npt.NDArray[np.int64]:
        """Map a column of raw values to indices: a missing value (None, NaN, pd.NA) to the missing
        index when the attribute allows it and to ``MISSING`` (-2) otherwise, a present value outside
        the domain to ``OUTSIDE`` (-1)."""
        codes, absent = self._encode_present(values)
        return np.where(absent, self.value_count if self.missing else MISSING, codes).astype(
            np.int64, copy=False
        )

    @abstractmethod
    def _encode_present(self, values: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Indices of present values (``OUTSIDE`` where not in the domain) and the missing-value mask."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form read by :func:`overlapdp.schema.Schema.from_json`."""
        out = self._json()
        if self.missing:
            out["missing"] = True
        return out

    @abstractmethod
    def _json(self) -> dict[str, Any]:
        """The JSON form without the missing flag."""

    def full(self) -> IndexSet:
        return IndexSet.full(self.size)

    def values_in(self, values: Sequence[Any]) -> IndexSet:
        """Coverage of ``attribute IN values``.

        Every value must be a value of the domain: one that is not (a typo such as ``'female'`` for
        ``'Female'``, an impossible number such as ``age = 200``) raises
        :class:`~overlapdp.errors.DomainValueError` naming the attribute, the value and the nearest
        valid values. An empty list is a well-formed empty set (a contradiction).
        """
        out = []
        for v in values:
            if v is None:
                raise QueryError(
                    f"attribute {self.name!r}: NULL is not a value to compare with; "
                    + (
                        'use IS NULL (JSON {"is_null": true}) for the missing value'
                        if self.missing
                        else "the schema allows no missing value on this attribute"
                    )
                )
            i = self.index_of(self._check_scalar(v))
            if i is None:
                raise self.not_in_domain(v)
            out.append(i)
        return IndexSet.from_indices(out)

    def interval(
        self, lo: Any = None, hi: Any = None, *, lo_open: bool = False, hi_open: bool = False
    ) -> IndexSet:
        """Coverage of the range from ``lo`` to ``hi`` (None: unbounded; ``*_open``: bound excluded).

        A bound may lie outside the domain (``age <= 500`` is clipped to the domain), but an inverted
        range (``lo > hi``) and a range that covers no value of the domain (``age > 300``,
        ``age BETWEEN 200 AND 300``, ``age < 17`` when the domain starts at 17) raise
        :class:`~overlapdp.errors.DomainValueError` naming the attribute and the domain's bounds. Only
        ordered attributes have ranges.
        """
        if not self.ordered:
            raise QueryError(
                f"attribute {self.name!r} is categorical (unordered); a range does not apply, use = or IN"
            )
        for bound in (lo, hi):
            if bound is not None:
                _as_number(self.name, bound)
        if lo is not None and hi is not None and lo == hi and (lo_open or hi_open):
            raise DomainValueError(
                f"attribute {self.name!r}: {_range_text(lo, hi, lo_open, hi_open)} is empty "
                f"(both bounds are {_show(lo)} and one is excluded)",
                attribute=self.name,
                value=(lo, hi),
                suggestions=(),
            )
        if lo is not None and hi is not None and lo > hi:
            raise DomainValueError(
                f"attribute {self.name!r}: {_range_text(lo, hi, lo_open, hi_open)} is inverted "
                f"(the lower bound {_show(lo)} is above the upper bound {_show(hi)}); "
                f"did you mean {_range_text(hi, lo, hi_open, lo_open)}?",
                attribute=self.name,
                value=(lo, hi),
                suggestions=((hi, lo),),
            )
        # A range never covers the missing value (a comparison with NULL is not true).
        cov = self.present()
        if lo is not None:
            cov = cov & self.compare(">" if lo_open else ">=", lo)
        if hi is not None:
            cov = cov & self.compare("<" if hi_open else "<=", hi)
        if not cov:
            raise DomainValueError(
                f"attribute {self.name!r}: {_range_text(lo, hi, lo_open, hi_open)} covers no value of "
                f"the domain ({self.describe_domain()})",
                attribute=self.name,
                value=(lo, hi),
                suggestions=self.bounds(),
            )
        return cov

    def describe_domain(self) -> str:
        """A short description of the domain for error messages."""
        return self._describe() + (", or missing" if self.missing else "")

    def _describe(self) -> str:
        return f"{self.value_count} values"

    def bounds(self) -> tuple[Any, ...]:
        """The smallest and largest values (ordered attributes), for suggestions."""
        return ()

    def suggest(self, value: Any) -> tuple[Any, ...]:
        """The nearest valid values to ``value`` (at most three), best first."""
        return ()

    def not_in_domain(self, value: Any) -> DomainValueError:
        """The error for a value that is not in the domain, with suggestions."""
        suggestions = self.suggest(value)
        message = (
            f"attribute {self.name!r}: {_show(value)} is not a value of the domain ({self.describe_domain()})"
        )
        if suggestions:
            message += "; did you mean " + " or ".join(_show(s) for s in suggestions) + "?"
        note = _lookalike_note(value)
        if note:
            message += f" ({note})"
        return DomainValueError(message, attribute=self.name, value=value, suggestions=suggestions)

    def _check_scalar(self, value: Any) -> Any:
        return value


@dataclass(frozen=True)
class IntAttribute(Attribute):
    """Ordered integers ``min..max`` (both included)."""

    name: str
    min: int
    max: int
    missing: bool = field(default=False, kw_only=True)
    kind: ClassVar[str] = "int"
    ordered: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for bound in ("min", "max"):
            v = getattr(self, bound)
            if isinstance(v, bool) or not isinstance(v, int):
                raise SchemaError(f"attribute {self.name!r}: {bound} must be an integer, got {v!r}")
        if self.min > self.max:
            raise SchemaError(f"attribute {self.name!r}: min {self.min} > max {self.max}")
        _check_missing(self.name, self.missing)

    @property
    def value_count(self) -> int:
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

    def _value_at(self, index: int) -> int:
        return self.min + index

    def _describe(self) -> str:
        return f"integers {self.min} to {self.max}"

    def bounds(self) -> tuple[Any, ...]:
        return (self.min,) if self.min == self.max else (self.min, self.max)

    def suggest(self, value: Any) -> tuple[Any, ...]:
        """The nearest bound for a value outside ``min..max``; the integers around a fraction inside."""
        if value < self.min:
            return (self.min,)
        if value > self.max:
            return (self.max,)
        return tuple(dict.fromkeys((math.floor(value), math.ceil(value))))

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

    def _encode_present(self, values: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        numeric = _numeric_column(self.name, values)
        ok = (
            np.isfinite(numeric)
            & (numeric == np.floor(numeric))
            & (numeric >= self.min)
            & (numeric <= self.max)
        )
        out = np.full(len(numeric), OUTSIDE, dtype=np.int64)
        out[ok] = numeric[ok].astype(np.int64) - self.min
        return out, np.isnan(numeric)

    def _json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class CategoricalAttribute(Attribute):
    """An unordered list of distinct values; only ``=``, ``!=``, ``IN`` and ``NOT IN`` apply."""

    name: str
    values: tuple[Scalar, ...]
    missing: bool = field(default=False, kw_only=True)
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
        _check_missing(self.name, self.missing)

    @property
    def value_count(self) -> int:
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

    def _value_at(self, index: int) -> Scalar:
        return self.values[index]

    def _describe(self) -> str:
        if len(self.values) <= 8:
            return "one of " + ", ".join(_show(v) for v in self.values)
        return f"{len(self.values)} values, listed in the schema"

    def suggest(self, value: Any) -> tuple[Any, ...]:
        """Values equal up to case, Unicode look-alikes and spacing first, then close spellings.

        A value that differs only in case (``'female'``), width or compatibility forms (NFKC), zero-width
        characters, surrounding spaces or Cyrillic / Greek look-alike letters (``'Whitе'`` with a
        Cyrillic ``е``) is matched by its skeleton; otherwise :func:`difflib.get_close_matches` on the
        skeletons proposes up to three values.
        """
        text = str(value)
        key = _skeleton(text)
        skeletons: dict[str, list[Scalar]] = {}
        for v in self.values:
            skeletons.setdefault(_skeleton(str(v)), []).append(v)
        if key in skeletons:
            return tuple(skeletons[key][:3])
        close = difflib.get_close_matches(key, list(skeletons), n=3, cutoff=0.6)
        return tuple(v for k in close for v in skeletons[k])[:3]

    def compare(self, op: Comparison, value: Any) -> IndexSet:
        raise QueryError(
            f"attribute {self.name!r} is categorical (unordered); {op!r} does not apply, use = or IN"
        )

    def _code_of(self, v: Any) -> int:
        """The index of one present raw value, ``OUTSIDE`` when it is not in the domain."""
        found = self._lookup.get(v)
        if found is None and not isinstance(v, str):
            # Text categories against a column read as numbers: compare as text.
            found = self._lookup.get(str(v))
        return OUTSIDE if found is None else found

    def _encode_present(self, values: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Vectorised: the column is factorised by pandas (hashing in C, missing cells as -1, as
        ``isna`` sees them), and only its distinct values are looked up in Python.

        Factorising merges values that compare equal across types (``1``, ``1.0`` and ``True``), whose
        text fallbacks differ (``'1'``, ``'1.0'``, ``'True'``): a column of Python objects of mixed
        kinds is therefore encoded one cell at a time, as before (rare: a frame built by hand)."""
        import pandas as pd

        if values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) not in _ONE_KIND:
            return self._encode_cells(values)
        arrow = _arrow_strings(values)
        if arrow is not None:
            # pandas' Arrow-backed text (the default string type of pandas 3): Arrow looks each cell
            # up among the schema's text values in one pass (a text cell never matches a number)
            import pyarrow as pa
            import pyarrow.compute as pc

            texts = [(i, v) for i, v in enumerate(self.values) if isinstance(v, str)]
            found = pc.index_in(arrow, value_set=pa.array([v for _, v in texts], type=pa.string()))
            at = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
            index = np.append(np.asarray([i for i, _ in texts], dtype=np.int64), OUTSIDE)
            absent = np.asarray(arrow.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            return np.where(absent, MISSING, index[at]), absent
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        # -1 (missing) indexes the appended MISSING code
        mapped = np.fromiter((self._code_of(v) for v in uniques.tolist()), dtype=np.int64, count=len(uniques))
        out = np.append(mapped, MISSING)[codes]
        return out, codes < 0

    def _encode_cells(self, values: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        codes = np.fromiter(
            (MISSING if _is_missing(v) else self._code_of(v) for v in values.tolist()),
            dtype=np.int64,
            count=len(values),
        )
        return codes, codes == MISSING

    def _json(self) -> dict[str, Any]:
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
    missing: bool = field(default=False, kw_only=True)
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
        _check_missing(self.name, self.missing)

    @property
    def value_count(self) -> int:
        return len(self.edges) - 1

    def _check_scalar(self, value: Any) -> Any:
        _as_number(self.name, value)
        return value

    def index_of(self, value: Any) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            return None
        if not (self.edges[0] <= value < self.edges[-1]):
            return None
        v = float(value)
        return int(np.searchsorted(np.asarray(self.edges), v, side="right")) - 1

    def _value_at(self, index: int) -> str:
        lo, hi = self.edges[index], self.edges[index + 1]
        return f"[{_fmt(lo)}, {_fmt(hi)})"

    def _describe(self) -> str:
        return f"{self.value_count} bins covering [{_fmt(self.edges[0])}, {_fmt(self.edges[-1])})"

    def bounds(self) -> tuple[Any, ...]:
        return (self.edges[0], self.edges[-1])

    def suggest(self, value: Any) -> tuple[Any, ...]:
        """The first bin's lower edge below the domain; the last bin's lower edge above it."""
        return (self.edges[0],) if value < self.edges[0] else (self.edges[-2],)

    def compare(self, op: Comparison, value: Any) -> IndexSet:
        v = _as_number(self.name, value)
        covered: list[int] = []
        for i in range(self.value_count):
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

    def _encode_present(self, values: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        numeric = _numeric_column(self.name, values)
        idx = np.searchsorted(np.asarray(self.edges, dtype=float), numeric, side="right") - 1
        ok = np.isfinite(numeric) & (numeric >= self.edges[0]) & (numeric < self.edges[-1])
        return np.where(ok, idx, OUTSIDE).astype(np.int64), np.isnan(numeric)

    def _json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "edges": list(self.edges)}


# A few letters of other scripts that render like Latin ones (from Unicode's confusables.txt, the
# Cyrillic and Greek letters most often typed by accident); NFKC handles width and compatibility forms.
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁһӏԛԝАВЕКМНОРСТХУІЈЅαβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijsdhlqwABEKMHOPCTXYIJSaBeikvopTuxABEZHIKMNOPTYX",
)
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


def _skeleton(text: str) -> str:
    """A comparison key: NFKC, look-alike letters mapped to Latin, invisible characters dropped,
    spacing collapsed, case folded."""
    t = unicodedata.normalize("NFKC", text).translate(_INVISIBLE).translate(_CONFUSABLES)
    return " ".join(t.split()).casefold()


def _lookalike_note(value: Any) -> str:
    """Names the non-ASCII characters of a text value that look like ASCII ones (or are invisible)."""
    if not isinstance(value, str):
        return ""
    odd = []
    for ch in dict.fromkeys(value):
        if ord(ch) in _CONFUSABLES or ord(ch) in _INVISIBLE:
            odd.append(f"U+{ord(ch):04X} {unicodedata.name(ch, '?')}")
    return "it contains " + ", ".join(odd[:3]) if odd else ""


def _show(value: Any) -> str:
    """A value for a message: its repr, cut short (an analyst's value may be long)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _range_text(lo: Any, hi: Any, lo_open: bool, hi_open: bool) -> str:
    if lo is None and hi is None:
        return "the unbounded range"
    if lo is None:
        return f"'{'<' if hi_open else '<='} {_show(hi)}'"
    if hi is None:
        return f"'{'>' if lo_open else '>='} {_show(lo)}'"
    return f"the range {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}{')' if hi_open else ']'}"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _numeric_column(name: str, values: pd.Series) -> npt.NDArray[np.float64]:
    """Numbers of a column; missing cells become NaN (out of domain), text is an error (never echoed)."""
    import pandas as pd

    numeric = pd.to_numeric(values, errors="coerce")
    bad = int(numeric.isna().sum() - values.isna().sum())
    if bad > 0:
        raise DataError(
            f"column {name!r}: {bad} value(s) are not numbers, but the schema declares it numeric"
        )
    return numeric.to_numpy(dtype=float, na_value=np.nan)
