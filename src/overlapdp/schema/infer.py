"""Infer a schema from a CSV file or DataFrame, with the bounds declared by the user.

Bounds taken from the data would leak (the maximum age in a table is a fact about one person), so
numeric columns need declared ``bounds`` (integers) or ``edges`` (binned); text columns need declared
``categories`` unless the caller states that the set of values is public with ``categories_from_data``.

Missing cells are the data owner's explicit choice (``missing``): ``"value"`` (the default) declares
``"missing": true`` on every column that has a missing cell, so those rows count with the missing value
(MATH.md 1.1); ``"drop"`` declares no missing value and sets the schema's ``"outside": "drop"``, so
rows with a missing cell (or any value outside the domain) are left out of every count. Either way the
schema, which analysts see, then tells which columns have missing cells (with ``"value"``) or that rows
may be dropped (with ``"drop"``); edit it before publishing if that is itself sensitive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from overlapdp.errors import DataError, SchemaError
from overlapdp.schema.attributes import Attribute, BinnedAttribute, CategoricalAttribute, IntAttribute, Scalar
from overlapdp.schema.domain import Schema
from overlapdp.tables import column_names, numeric_columns, present_values
from overlapdp.tables import has_missing as has_missing_value

if TYPE_CHECKING:  # imported where a table is read (DESIGN.md: heavy dependencies are imported where used)
    import pandas as pd


@dataclass(frozen=True)
class Vocabulary:
    """How errors name what to declare: the Python parameters by default, a command's flags from the CLI."""

    bounds: str = "bounds (min:max)"
    edges: str = "edges"
    categories: str = "categories"
    categories_from_data: str = "categories_from_data"


def infer_schema(
    frame: pd.DataFrame | Any,
    *,
    bounds: Mapping[str, tuple[int, int]] | None = None,
    edges: Mapping[str, Sequence[float]] | None = None,
    categories: Mapping[str, Sequence[Scalar]] | None = None,
    categories_from_data: bool = False,
    columns: Sequence[str] | None = None,
    missing: Literal["value", "drop"] = "value",
    vocabulary: Vocabulary = Vocabulary(),
) -> Schema:
    """One attribute per column (or per name in ``columns``), never with bounds read off the data.

    ``frame`` is any table :mod:`overlapdp.tables` accepts (pandas, Polars eager or lazy, Arrow, a DuckDB
    relation, Spark): only its column names and types are read, whether a column holds a missing value,
    and with ``categories_from_data`` the distinct values of the text columns, computed by the table's
    own library. ``vocabulary`` names the parameters in errors (the CLI's flags there). Every column
    that needs a declaration is named in one
    :class:`~overlapdp.errors.SchemaError` (all numeric columns without bounds or edges, all text columns
    without categories), so one run shows everything to declare.
    """
    if missing not in ("value", "drop"):
        raise SchemaError(f"missing must be 'value' or 'drop', got {missing!r}")
    bounds = dict(bounds or {})
    edges = dict(edges or {})
    categories = dict(categories or {})
    present = column_names(frame)
    numeric = numeric_columns(frame)
    names = list(columns) if columns is not None else present
    for declared in (*bounds, *edges, *categories):
        if declared not in present:
            raise SchemaError(f"declared attribute {declared!r} is not a column of the data")
    attrs: list[Attribute] = []
    undeclared_numeric: list[str] = []
    text: list[str] = []
    for name in names:
        if name not in present:
            raise SchemaError(f"column {name!r} is not in the data")
        if sum(name in d for d in (bounds, edges, categories)) > 1:
            raise SchemaError(f"column {name!r} is declared more than once (bounds, edges, categories)")
        has_missing = missing == "value" and has_missing_value(frame, name)
        if name in bounds:
            lo, hi = bounds[name]
            attrs.append(IntAttribute(name, int(lo), int(hi), missing=has_missing))
        elif name in edges:
            attrs.append(BinnedAttribute(name, tuple(float(e) for e in edges[name]), missing=has_missing))
        elif name in categories:
            attrs.append(CategoricalAttribute(name, tuple(categories[name]), missing=has_missing))
        elif name in numeric:
            undeclared_numeric.append(name)
        elif categories_from_data:
            values = present_values(frame, name)
            attrs.append(CategoricalAttribute(name, tuple(sorted(values, key=str)), missing=has_missing))
        else:
            text.append(name)
    problems = []
    if undeclared_numeric:
        problems.append(
            f"{_columns(undeclared_numeric)} numeric: declare {_its(undeclared_numeric)} bounds "
            f"({vocabulary.bounds}) or bin edges ({vocabulary.edges}); "
            "bounds are never inferred from the data, since that leaks"
        )
    if text:
        problems.append(
            f"{_columns(text, 'hold')} text: declare {_its(text)} categories ({vocabulary.categories}), or "
            f"state that the values present are public ({vocabulary.categories_from_data}); the set of "
            "values in the data can leak"
        )
    if problems:
        raise SchemaError("; ".join(problems))
    return Schema(tuple(attrs), outside="drop" if missing == "drop" else "error")


def _columns(names: Sequence[str], verb: str = "be") -> str:
    """``column 'a' is`` / ``columns 'a', 'b' are`` (``verb="hold"``: holds / hold)."""
    one = len(names) == 1
    if verb == "be":
        verb = "is" if one else "are"
    elif one:
        verb += "s"
    return f"column{'' if one else 's'} {', '.join(repr(n) for n in names)} {verb}"


def _its(names: Sequence[str]) -> str:
    return "its" if len(names) == 1 else "their"


def read_table(path: str | Path, *, encoding: str | None = None, sep: str | None = None) -> pd.DataFrame:
    """Read a CSV / TSV (encoding and separator declared or detected, :mod:`overlapdp.files`) or a
    Parquet file, with one-line errors naming the file."""
    import pandas as pd

    from overlapdp.files import csv_format, is_parquet, separator_name

    p = Path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist")
    if p.is_dir():
        raise DataError(f"data file {str(p)!r} is a directory")
    fmt = None
    try:
        if is_parquet(p):
            frame = pd.read_parquet(p)
        else:
            fmt = csv_format(p, encoding=encoding, sep=sep)
            frame = pd.read_csv(p, sep=fmt.sep, encoding=fmt.encoding, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"data file {str(p)!r} is empty") from None
    except UnicodeDecodeError as exc:
        enc = fmt.encoding if fmt is not None else "utf-8"
        raise DataError(
            f"data file {str(p)!r} is not valid {enc} text (byte {exc.start}); give its --encoding"
        ) from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        how = f" (read with separator {separator_name(fmt.sep)}; give --sep)" if fmt is not None else ""
        raise DataError(f"cannot read data file {str(p)!r}: {first}{how}") from None
    if len(frame.columns) == 0:
        raise DataError(f"data file {str(p)!r} has no columns")
    return frame
