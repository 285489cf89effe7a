"""Exact (NOT private) counts of predicate queries, for the data owner and for tests.

Nothing here adds noise: releasing these numbers spends no budget only because it offers no privacy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from overlapdp.engine.encoding import EncodedTable, encode_frame
from overlapdp.engine.inputs import data_kind, open_data, unsupported
from overlapdp.query import PredicateQuery


def exact_counts(queries: Iterable[PredicateQuery], data: pd.DataFrame | EncodedTable | Any) -> list[int]:
    """$q(D)$ for each query: rows in the domain whose values lie in the query's coverage.

    ``data`` is an :class:`EncodedTable`, a pandas DataFrame (encoded here with the schema's reference
    mapping), or any other table :func:`overlapdp.engine.inputs.open_data` accepts (Polars, Arrow, a
    DuckDB relation), counted by its natural engine in one pass.
    """
    qs = list(queries)
    kind = data_kind(data)
    if kind is None:
        raise unsupported(data)
    if not qs:
        return []
    if kind == "engine":  # the caller's engine: used, not closed
        from overlapdp.engine.base import Engine

        assert isinstance(data, Engine)
        return data.counts(qs)
    if kind not in ("encoded", "pandas"):
        with open_data(data, qs[0].schema) as engine:
            return engine.counts(qs)
    table = data if isinstance(data, EncodedTable) else encode_frame(qs[0].schema, data)
    schema = table.schema
    # One lookup table per (attribute, coverage) turns membership into a single fancy-index.
    lookups: dict[tuple[int, object], np.ndarray] = {}
    out: list[int] = []
    for q in qs:
        mask = table.in_domain.copy()
        for pos, cov in q.constraints:
            key = (pos, cov)
            lut = lookups.get(key)
            if lut is None:
                size = schema.attributes[pos].size
                lut = np.zeros(size + 2, dtype=bool)
                lut[:size] = cov.mask(size)
                lookups[key] = lut
            # -1 and -2 (outside the domain, missing where not allowed) index the trailing False entries.
            mask &= lut[table.codes[:, pos]]
        out.append(int(mask.sum()))
    return out
