"""Polars in memory: the schema mapping as Polars expressions, grouping and sums in Polars.

The mapping follows :meth:`overlapdp.schema.Attribute.encode` (see :mod:`overlapdp.engine.sql` for the
rules): a missing value to the missing index where the schema allows it and to ``-2`` where not,
``-1`` outside the domain, else the value index.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from overlapdp.engine.aggregates import clip_units
from overlapdp.engine.base import DEFAULT_HISTOGRAM_LIMIT, DomainReport, Engine
from overlapdp.engine.bitmaps import CHUNK_ROWS
from overlapdp.errors import DataError
from overlapdp.overlap.atoms import Atoms
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Clipping
from overlapdp.schema import (
    Attribute,
    BinnedAttribute,
    CategoricalAttribute,
    IndexSet,
    IntAttribute,
    Schema,
)
from overlapdp.schema.attributes import MISSING, OUTSIDE

_CHUNK = 500


def _kind(dtype: pl.DataType) -> str:
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_integer():
        return "int"
    if dtype.is_float() or dtype.is_decimal():
        return "float"
    if dtype in (pl.Utf8, pl.Categorical) or isinstance(dtype, pl.Enum):
        return "string"
    return "other"


def _bin_tree(v: pl.Expr, edges: list[float], lo: int, hi: int) -> pl.Expr:
    if hi - lo == 1:
        return pl.lit(lo, dtype=pl.Int64)
    mid = (lo + hi) // 2
    return pl.when(v < edges[mid]).then(_bin_tree(v, edges, lo, mid)).otherwise(_bin_tree(v, edges, mid, hi))


def _code(attr: Attribute, col: pl.Expr, kind: str) -> pl.Expr:
    if isinstance(attr, CategoricalAttribute):
        missing = col.is_null() | col.is_nan() if kind == "float" else col.is_null()
        if kind == "string":
            pairs = [(x, i) for i, x in enumerate(attr.values) if isinstance(x, str)]
            mapped = col.cast(pl.Utf8).replace_strict(
                [p[0] for p in pairs], [p[1] for p in pairs], default=OUTSIDE, return_dtype=pl.Int64
            )
        else:
            numbers: dict[Any, int] = {}
            texts: list[tuple[str, int]] = []
            for i, x in enumerate(attr.values):
                if isinstance(x, str):
                    texts.append((x, i))
                elif isinstance(x, bool) == (kind == "bool"):
                    numbers.setdefault(x, i)
            by_text = col.cast(pl.Utf8).replace_strict(
                [t[0] for t in texts], [t[1] for t in texts], default=OUTSIDE, return_dtype=pl.Int64
            )
            mapped = by_text
            # Numbers first: pandas looks a value up as itself before trying its text.
            for value, i in reversed(list(numbers.items())):
                mapped = pl.when(col == value).then(pl.lit(i, dtype=pl.Int64)).otherwise(mapped)
        return pl.when(missing).then(pl.lit(_absent(attr), dtype=pl.Int64)).otherwise(mapped)
    if kind == "bool":
        col, kind = col.cast(pl.Int64), "int"
    v = col if kind == "int" else col.cast(pl.Float64, strict=False)
    missing = v.is_null() if kind == "int" else v.is_null() | v.is_nan()
    if isinstance(attr, IntAttribute):
        fits = v.is_between(attr.min, attr.max)
        if kind != "int":
            fits = fits & v.is_finite() & (v == v.floor())
        mapped = pl.when(fits).then(v.cast(pl.Int64) - attr.min).otherwise(pl.lit(OUTSIDE, dtype=pl.Int64))
    else:
        assert isinstance(attr, BinnedAttribute)
        edges = [float(e) for e in attr.edges]
        inside = (v >= edges[0]) & (v < edges[-1])
        mapped = (
            pl.when(inside)
            .then(_bin_tree(v, edges, 0, len(edges) - 1))
            .otherwise(pl.lit(OUTSIDE, dtype=pl.Int64))
        )
    return pl.when(missing).then(pl.lit(_absent(attr), dtype=pl.Int64)).otherwise(mapped)


def _absent(attr: Attribute) -> int:
    """The code of a missing value: the missing index where the schema allows it, else ``MISSING``."""
    return attr.null_index if attr.null_index is not None else MISSING


def _condition(code: pl.Expr, values: IndexSet) -> pl.Expr:
    parts: list[pl.Expr] = []
    singles: list[int] = []
    for lo, hi in values.intervals:
        if hi - lo <= 2:
            singles.extend(range(lo, hi))
        else:
            parts.append(code.is_between(lo, hi - 1))
    if singles:
        parts.append(code.is_in(singles))
    if not parts:
        return pl.lit(False)
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def raw_number(clipping: Clipping, kind: str) -> pl.Expr:
    """The summed column as doubles (null when missing or not a number). The clipped units are then
    computed by numpy (:func:`overlapdp.engine.aggregates.clip_units`): Polars rewrites ``v / step`` as
    a multiplication by ``1/step``, which rounds differently (``8.95 / 0.1 + 0.5`` is
    ``89.99999999999999`` in IEEE division, ``90`` through the reciprocal)."""
    raw = pl.col(clipping.column)
    if kind == "bool":
        raw = raw.cast(pl.Int64)
    return raw.cast(pl.Float64, strict=False)


class PolarsEngine(Engine):
    """Exact counts over a Polars DataFrame (a LazyFrame is collected once, encoded)."""

    name = "polars"

    def __init__(
        self,
        schema: Schema,
        frame: pl.DataFrame | pl.LazyFrame,
        *,
        histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT,
    ) -> None:
        super().__init__(schema, histogram_limit=histogram_limit)
        lazy = frame.lazy()
        try:
            types = lazy.collect_schema()
        except pl.exceptions.PolarsError as exc:
            raise DataError(f"cannot read the data with Polars ({type(exc).__name__})") from None
        missing = [a.name for a in schema if a.name not in types]
        if missing:
            raise DataError(
                f"column(s) {', '.join(repr(m) for m in missing)} named in the schema are missing from the data"
            )
        kinds = []
        for a in schema:
            kind = _kind(types[a.name])
            if kind == "other":
                raise DataError(
                    f"column {a.name!r} has type {types[a.name]}, which cannot be mapped onto the "
                    f"{a.kind} attribute {a.name!r}"
                )
            kinds.append(kind)
        self._check_numbers(lazy, kinds)
        codes = [
            _code(a, pl.col(a.name), k).alias(f"c{j}")
            for j, (a, k) in enumerate(zip(schema, kinds, strict=True))
        ]
        try:
            enc = lazy.select(codes).collect()
        except pl.exceptions.PolarsError as exc:
            raise DataError(f"cannot read the data with Polars ({type(exc).__name__})") from None
        ok = pl.all_horizontal([pl.col(f"c{j}") >= 0 for j in range(len(schema))])
        self.encoded = enc.with_columns(ok.alias("ok"))
        self._inside = self.encoded.filter(pl.col("ok"))
        self._sum_input = (lazy, kinds)  # the raw frame for sums over raw numbers

    def _check_numbers(self, lazy: pl.LazyFrame, kinds: list[str]) -> None:
        checks = [
            (
                a.name,
                (
                    pl.col(a.name).is_not_null() & pl.col(a.name).cast(pl.Float64, strict=False).is_null()
                ).sum(),
            )
            for a, k in zip(self.schema, kinds, strict=True)
            if k == "string" and not isinstance(a, CategoricalAttribute)
        ]
        if not checks:
            return
        row = lazy.select([e.alias(f"b{i}") for i, (_, e) in enumerate(checks)]).collect().row(0)
        for (name, _), bad in zip(checks, row, strict=True):
            if bad:
                raise DataError(
                    f"column {name!r}: {bad} value(s) are not numbers, but the schema declares it "
                    f"{self.schema.attribute(name).kind}"
                )

    @classmethod
    def from_path(
        cls,
        schema: Schema,
        path: str | Path,
        *,
        encoding: str | None = None,
        sep: str | None = None,
        **kwargs: Any,
    ) -> PolarsEngine:
        """Parquet, or CSV / TSV (encoding and separator declared or detected, :mod:`overlapdp.files`),
        read by Polars; a file that is not plain UTF-8 is decoded in Python first (Polars reads UTF-8)."""
        from overlapdp.files import csv_format, is_parquet

        p = Path(path)
        if not p.exists():
            raise DataError(f"data file {str(p)!r} does not exist")
        if p.is_dir():
            raise DataError(f"data file {str(p)!r} is a directory")
        if p.stat().st_size == 0:
            raise DataError(f"data file {str(p)!r} is empty")
        try:
            if is_parquet(p):
                frame = pl.read_parquet(p)
            else:
                fmt = csv_format(p, encoding=encoding, sep=sep)
                source: Path | io.BytesIO = p
                if fmt.encoding != "utf-8":
                    source = io.BytesIO(p.read_bytes().decode(fmt.encoding).encode("utf-8"))
                frame = pl.read_csv(source, separator=fmt.sep, infer_schema_length=None)
        except UnicodeDecodeError as exc:
            raise DataError(
                f"data file {str(p)!r} is not valid {encoding or 'UTF-8'} text (byte {exc.start}); give its --encoding"
            ) from None
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise DataError(
                f"cannot read data file {str(p)!r} ({type(exc).__name__}): check its --encoding and --sep"
            ) from None
        return cls(schema, frame, **kwargs)

    @classmethod
    def from_frame(cls, schema: Schema, frame: Any, **kwargs: Any) -> PolarsEngine:
        """A Polars, pandas or Arrow frame (converted to Polars)."""
        if not isinstance(frame, pl.DataFrame | pl.LazyFrame):
            out = pl.from_pandas(frame) if hasattr(frame, "iloc") else pl.from_arrow(frame)
            assert isinstance(out, pl.DataFrame)
            frame = out
        return cls(schema, frame, **kwargs)

    def _compute_report(self) -> DomainReport:
        exprs = [pl.len().alias("rows"), (~pl.col("ok")).sum().alias("outside")]
        for j, attr in enumerate(self.schema):
            exprs.append((pl.col(f"c{j}") == _absent(attr)).sum().alias(f"m{j}"))
            exprs.append((pl.col(f"c{j}") == OUTSIDE).sum().alias(f"o{j}"))
        allowed = (a.name for a in self.schema if a.missing)
        return DomainReport.from_counts(self.schema.names, self.encoded.select(exprs).row(0), allowed)

    def _histogram(self, atoms: Atoms) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        k = len(atoms.attributes)
        if k == 0:
            return np.zeros((1, 0), dtype=np.int64), np.asarray([self._inside.height], dtype=np.int64)
        exprs = [
            pl.col(f"c{a.position}")
            .replace_strict(list(range(a.value_atom.shape[0])), a.value_atom.tolist(), return_dtype=pl.Int64)
            .alias(f"a{i}")
            for i, a in enumerate(atoms.attributes)
        ]
        names = [f"a{i}" for i in range(k)]
        hist = self._inside.select(exprs).group_by(names).len()
        cells = hist.select(names).to_numpy().astype(np.int64).reshape(-1, k)
        return cells, hist["len"].to_numpy().astype(np.int64)

    def _code_chunks(self, positions: Sequence[int]) -> Iterable[dict[int, npt.NDArray[np.integer]]]:
        for start in range(0, max(self._inside.height, 1), CHUNK_ROWS):
            part = self._inside.slice(start, CHUNK_ROWS)
            yield {p: part[f"c{p}"].to_numpy() for p in positions}

    def _conditional_sums(self, queries: Sequence[PredicateQuery], clipping: Clipping) -> list[int]:
        lazy, kinds = self._sum_input
        codes = [
            _code(a, pl.col(a.name), k).alias(f"c{j}")
            for j, (a, k) in enumerate(zip(self.schema, kinds, strict=True))
        ]
        raw = raw_number(clipping, kinds[self.schema.position(clipping.column)]).alias("v")
        ok = pl.all_horizontal([pl.col(f"c{j}") >= 0 for j in range(len(self.schema))])
        try:
            inside = lazy.select([*codes, raw]).filter(ok).collect()
        except pl.exceptions.PolarsError as exc:
            raise DataError(f"cannot read the data with Polars ({type(exc).__name__})") from None
        values = inside["v"].to_numpy()  # nulls become NaN, which contribute nothing
        inside = inside.with_columns(pl.Series("u", clip_units(values, clipping), dtype=pl.Int64))
        out: list[int] = []
        for start in range(0, len(queries), _CHUNK):
            exprs = []
            for i, q in enumerate(queries[start : start + _CHUNK]):
                cond: pl.Expr = pl.lit(True)
                for pos, cov in q.constraints:
                    cond = cond & _condition(pl.col(f"c{pos}"), cov)
                exprs.append(
                    pl.when(cond).then(pl.col("u").cast(pl.Int128)).otherwise(0).sum().alias(f"q{i}")
                )
            out.extend(int(v or 0) for v in inside.select(exprs).row(0))
        return out

    def _conditional_counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        out: list[int] = []
        for start in range(0, len(queries), _CHUNK):
            exprs = []
            for i, q in enumerate(queries[start : start + _CHUNK]):
                if not q.constraints:
                    exprs.append(pl.len().alias(f"q{i}"))
                    continue
                cond = _condition(pl.col(f"c{q.constraints[0][0]}"), q.constraints[0][1])
                for pos, cov in q.constraints[1:]:
                    cond = cond & _condition(pl.col(f"c{pos}"), cov)
                exprs.append(cond.sum().alias(f"q{i}"))
            out.extend(int(v or 0) for v in self._inside.select(exprs).row(0))
        return out
