"""Row patterns: the distinct sets of queries that cover some domain row (MATH.md section 1, per-row view).

Two rows covered by the same queries pay the same under every definition, so the guarantees of a ledger
depend only on these patterns. They are enumerated over the atom grid (exact: atoms are cells every
query treats alike), only when the grid is small; callers fall back to safe bounds otherwise. Used for
replace-one-row neighbours (item 5: the exact maximum over PAIRS of rows) where it is cheap.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp.overlap.atoms import compute_atoms
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

#: Largest (atom cells x queries) matrix enumerated.
PATTERN_LIMIT = 20_000_000


@dataclass(frozen=True)
class Patterns:
    """``members[p, i]`` is True iff query i covers the rows of pattern p; ``rows[p]`` is one such row."""

    members: npt.NDArray[np.bool_]
    rows: tuple[tuple[int, ...], ...]


def row_patterns(
    queries: Sequence[PredicateQuery], schema: Schema, limit: int = PATTERN_LIMIT
) -> Patterns | None:
    """Every distinct covering pattern with a representative row, or None when the grid is too large."""
    t = len(queries)
    if t == 0:
        return Patterns(np.zeros((1, 0), dtype=bool), (tuple([0] * len(schema)),))
    atoms = compute_atoms(list(queries), schema)
    if atoms.grid_size * t > limit:
        return None
    # membership per attribute: (atoms of attribute, queries) boolean tables
    tables = []
    for a in atoms.attributes:
        tab = np.zeros((a.size, t), dtype=bool)
        for i, cov in enumerate(a.query_atoms):
            tab[cov.to_array(), i] = True
        tables.append(tab)
    cells = list(itertools.product(*(range(a.size) for a in atoms.attributes)))
    members = np.ones((len(cells), t), dtype=bool)
    if tables:
        idx = np.asarray(cells, dtype=np.int64).reshape(len(cells), len(tables))
        for j, tab in enumerate(tables):
            members &= tab[idx[:, j]]
    uniq, first = np.unique(members, axis=0, return_index=True)
    rows = tuple(atoms.row(cells[int(f)]) if tables else tuple([0] * len(schema)) for f in first)
    return Patterns(uniq, rows)


def maximal(patterns: Patterns) -> Patterns:
    """Only the patterns whose query set is not contained in another's (MATH.md 2: only maximal
    overlapping sets matter for a monotone comp)."""
    m = patterns.members
    keep = []
    for p in range(m.shape[0]):
        sub = m[p]
        contained = np.all(m[:, sub], axis=1) & (m.sum(axis=1) > sub.sum())
        if not contained.any():
            keep.append(p)
    return Patterns(m[keep], tuple(patterns.rows[p] for p in keep))
