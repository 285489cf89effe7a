"""pandas in memory: the reference mapping (:func:`overlapdp.engine.encoding.encode_frame`) and numpy counts."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapdp.engine.aggregates import clip_units, encoded_sums, raw_numbers
from overlapdp.engine.base import DEFAULT_HISTOGRAM_LIMIT, DomainReport, Engine
from overlapdp.engine.bitmaps import CHUNK_ROWS
from overlapdp.engine.encoding import encode_frame
from overlapdp.engine.exact import exact_counts
from overlapdp.overlap.atoms import Atoms
from overlapdp.query import PredicateQuery
from overlapdp.query.aggregate import Clipping
from overlapdp.schema import Schema, read_table
from overlapdp.schema.attributes import MISSING, OUTSIDE


def group_atom_rows(
    codes: npt.NDArray[np.int64], atoms: Atoms
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Histogram of in-domain rows (``codes`` already filtered) over the atom tuples of ``atoms``."""
    k = len(atoms.attributes)
    if k == 0:
        return np.zeros((1, 0), dtype=np.int64), np.asarray([codes.shape[0]], dtype=np.int64)
    cols = [a.value_atom[codes[:, a.position]] for a in atoms.attributes]
    sizes = [a.size for a in atoms.attributes]
    if math.prod(sizes) < (1 << 62):
        key = np.ravel_multi_index(tuple(cols), sizes)
        uniq, counts = np.unique(key, return_counts=True)
        cells = np.stack(np.unravel_index(uniq, sizes), axis=1).astype(np.int64)
    else:
        rows, counts = np.unique(np.stack(cols, axis=1), axis=0, return_counts=True)
        cells = rows.astype(np.int64)
    return cells, counts.astype(np.int64)


class PandasEngine(Engine):
    """Exact counts over a pandas DataFrame, encoded once with the schema's own mapping."""

    name = "pandas"

    def __init__(
        self, schema: Schema, frame: pd.DataFrame, *, histogram_limit: int = DEFAULT_HISTOGRAM_LIMIT
    ) -> None:
        super().__init__(schema, histogram_limit=histogram_limit)
        self.table = encode_frame(schema, frame)
        t = self.table
        # no copy when every row fits (the usual case); column-major like the table
        self._ok_codes = t.codes if t.in_domain.all() else np.asfortranarray(t.codes[t.in_domain])
        self._frame = frame  # raw numbers for sums (a reference, not a copy)

    @classmethod
    def from_path(
        cls,
        schema: Schema,
        path: str | Path,
        *,
        encoding: str | None = None,
        sep: str | None = None,
        **kwargs: Any,
    ) -> PandasEngine:
        """CSV / TSV (initial spaces skipped; encoding and separator declared or detected,
        :mod:`overlapdp.files`) or Parquet, with clear errors naming the file."""
        return cls(schema, read_table(path, encoding=encoding, sep=sep), **kwargs)

    @classmethod
    def from_frame(cls, schema: Schema, frame: Any, **kwargs: Any) -> PandasEngine:
        """A pandas or Polars DataFrame or an Arrow table (converted to pandas)."""
        if not isinstance(frame, pd.DataFrame):
            frame = frame.to_pandas()
        return cls(schema, frame, **kwargs)

    def _compute_report(self) -> DomainReport:
        t = self.table
        missing: dict[str, int] = {}
        outside: dict[str, int] = {}
        for j, a in enumerate(self.schema):
            col = t.codes[:, j]
            # A missing value codes as the missing index where allowed, as MISSING where not.
            absent = a.null_index if a.null_index is not None else MISSING
            missing[a.name] = int((col == absent).sum())
            outside[a.name] = int((col == OUTSIDE).sum())
        return DomainReport(
            rows=t.rows,
            rows_outside=t.out_of_domain,
            missing=missing,
            outside=outside,
            missing_allowed=frozenset(a.name for a in self.schema if a.missing),
        )

    def _histogram(self, atoms: Atoms) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        return group_atom_rows(self._ok_codes, atoms)

    def _conditional_counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        return exact_counts(queries, self.table)

    def _conditional_sums(self, queries: Sequence[PredicateQuery], clipping: Clipping) -> list[int]:
        units = clip_units(raw_numbers(self._frame, clipping.column), clipping)
        return encoded_sums(self.table, units, queries, clipping)

    def _code_chunks(self, positions: Sequence[int]) -> Iterable[dict[int, npt.NDArray[np.integer]]]:
        codes = self._ok_codes
        for start in range(0, max(codes.shape[0], 1), CHUNK_ROWS):
            yield {p: codes[start : start + CHUNK_ROWS, p] for p in positions}
