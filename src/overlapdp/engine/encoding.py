"""Map a table's columns onto the schema: one array of value indices per attribute.

A missing value (None, NaN, an empty cell) maps to the attribute's missing index when the schema allows
it (``"missing": true``, MATH.md 1.1) and to ``MISSING`` (-2) otherwise; a present value outside
the domain maps to ``OUTSIDE`` (-1). A row with a negative code on any attribute is outside the domain:
what happens to it is the schema's ``"outside"`` policy (an error, or dropped: it then lies outside
every query's coverage, including a query with no conditions), checked by the engines
(:meth:`overlapdp.engine.Engine.counts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from overlapdp.errors import DataError
from overlapdp.schema import Schema


@dataclass(frozen=True)
class EncodedTable:
    """Value indices per attribute (``codes[:, j]``, negative outside the domain) and the in-domain mask."""

    schema: Schema
    codes: npt.NDArray[np.int64]
    in_domain: npt.NDArray[np.bool_]
    out_of_domain_by_attribute: dict[str, int]

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def out_of_domain(self) -> int:
        return int((~self.in_domain).sum())


def encode_frame(schema: Schema, frame: pd.DataFrame) -> EncodedTable:
    """Encode ``frame`` against ``schema``; a schema attribute missing from the frame is an error."""
    missing = [a.name for a in schema if a.name not in frame.columns]
    if missing:
        raise DataError(
            f"column(s) {', '.join(repr(m) for m in missing)} named in the schema are missing from the data"
        )
    # Column-major: every reader takes one attribute's column at a time (counts, the report, sums), so
    # each column is contiguous (row-major writes and reads were strided: a third of the encoding time
    # on 10x Adult, benchmarks/engines.py --only raw).
    codes = np.empty((len(frame), len(schema)), dtype=np.int64, order="F")
    per_attr: dict[str, int] = {}
    in_domain: npt.NDArray[np.bool_] = np.ones(len(frame), dtype=bool)
    for j, attr in enumerate(schema):
        col = attr.encode(frame[attr.name])
        codes[:, j] = col
        inside = col >= 0
        per_attr[attr.name] = len(col) - int(np.count_nonzero(inside))
        in_domain &= inside
    return EncodedTable(schema, codes, in_domain, per_attr)
