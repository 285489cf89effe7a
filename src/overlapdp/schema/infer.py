"""Infer a schema from a CSV file or DataFrame, with the bounds declared by the user.

Bounds taken from the data would leak (the maximum age in a table is a fact about one person), so
numeric columns need declared ``bounds`` (integers) or ``edges`` (binned); text columns need declared
``categories`` unless the caller states that the set of values is public with ``categories_from_data``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from overlapdp.errors import DataError, SchemaError
from overlapdp.schema.attributes import Attribute, BinnedAttribute, CategoricalAttribute, IntAttribute, Scalar
from overlapdp.schema.domain import Schema

if TYPE_CHECKING:  # imported where a table is read (DESIGN.md: heavy dependencies are imported where used)
    import pandas as pd


def infer_schema(
    frame: pd.DataFrame,
    *,
    bounds: Mapping[str, tuple[int, int]] | None = None,
    edges: Mapping[str, Sequence[float]] | None = None,
    categories: Mapping[str, Sequence[Scalar]] | None = None,
    categories_from_data: bool = False,
    columns: Sequence[str] | None = None,
) -> Schema:
    """One attribute per column (or per name in ``columns``), never with bounds read off the data."""
    import pandas as pd

    bounds = dict(bounds or {})
    edges = dict(edges or {})
    categories = dict(categories or {})
    names = list(columns) if columns is not None else [str(c) for c in frame.columns]
    for declared in (*bounds, *edges, *categories):
        if declared not in frame.columns:
            raise SchemaError(f"declared attribute {declared!r} is not a column of the data")
    attrs: list[Attribute] = []
    for name in names:
        if name not in frame.columns:
            raise SchemaError(f"column {name!r} is not in the data")
        if sum(name in d for d in (bounds, edges, categories)) > 1:
            raise SchemaError(f"column {name!r} is declared more than once (bounds, edges, categories)")
        if name in bounds:
            lo, hi = bounds[name]
            attrs.append(IntAttribute(name, int(lo), int(hi)))
        elif name in edges:
            attrs.append(BinnedAttribute(name, tuple(float(e) for e in edges[name])))
        elif name in categories:
            attrs.append(CategoricalAttribute(name, tuple(categories[name])))
        elif pd.api.types.is_numeric_dtype(frame[name]) and not pd.api.types.is_bool_dtype(frame[name]):
            raise SchemaError(
                f"column {name!r} is numeric: declare its bounds (min:max) or bin edges; "
                "bounds are never inferred from the data, since that leaks"
            )
        elif categories_from_data:
            present = frame[name].dropna().unique().tolist()
            attrs.append(CategoricalAttribute(name, tuple(sorted(present, key=str))))
        else:
            raise SchemaError(
                f"column {name!r} holds text: declare its categories, or state that the values present "
                "are public (categories_from_data); the set of values in the data can leak"
            )
    return Schema(tuple(attrs))


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV or Parquet file with clear errors naming the file."""
    import pandas as pd

    p = Path(path)
    if not p.exists():
        raise DataError(f"data file {str(p)!r} does not exist")
    try:
        if p.suffix.lower() in {".parquet", ".pq"}:
            frame = pd.read_parquet(p)
        else:
            frame = pd.read_csv(p, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"data file {str(p)!r} is empty") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"cannot read data file {str(p)!r}: {first}") from None
    if len(frame.columns) == 0:
        raise DataError(f"data file {str(p)!r} has no columns")
    return frame
