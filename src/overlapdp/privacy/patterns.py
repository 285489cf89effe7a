"""Row patterns: the distinct sets of queries that cover some domain row (MATH.md 1.8).

Two rows covered by the same queries pay the same under every definition, so the guarantees of a ledger
depend only on these patterns. They are enumerated over the atom grid (exact: atoms are cells every
query treats alike), only when the grid is small; callers fall back to safe bounds otherwise. Used for
replace-one-row neighbours (the exact maximum over PAIRS of rows, MATH.md 1.2, with the row outside the
domain when the schema drops such rows: :func:`neighbour_patterns`) where it is cheap.
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


@dataclass(frozen=True)
class NeighbourPatterns:
    """The row patterns a replace-one-row neighbour moves between: ``members`` as in :class:`Patterns`,
    ``rows[p]`` one row of pattern p, or None for a row outside the domain (covered by no query)."""

    members: npt.NDArray[np.bool_]
    rows: tuple[tuple[int, ...] | None, ...]

    def domain_row(self, a: int, b: int) -> tuple[int, ...]:
        """A domain row of the pair of patterns (a, b): a's, or b's when a is the outside row."""
        row = self.rows[a] if self.rows[a] is not None else self.rows[b]
        return row if row is not None else next(r for r in self.rows if r is not None)


def neighbour_patterns(
    queries: Sequence[PredicateQuery], schema: Schema, limit: int = PATTERN_LIMIT
) -> NeighbourPatterns | None:
    """The patterns of every row a data set may hold (MATH.md 1.2): each domain row's and, when the
    schema drops rows outside its domain (``outside="drop"``), the empty pattern of such a row: it is
    in the data set and no query counts it, so replacing a domain row by it (or it by a domain row)
    changes every count covering the domain row. With ``outside="error"`` such data is refused, so no
    such row exists. None when the grid is too large."""
    pats = row_patterns(queries, schema, limit)
    if pats is None:
        return None
    rows: tuple[tuple[int, ...] | None, ...] = pats.rows
    members = pats.members
    if schema.outside == "drop":
        members = np.vstack([members, np.zeros((1, members.shape[1]), dtype=bool)])
        rows = (*rows, None)
    return NeighbourPatterns(members, rows)


def maximal(patterns: Patterns) -> Patterns:
    """Only the patterns whose query set is not contained in another's (MATH.md 2.2: only maximal
    overlapping sets matter for a monotone comp)."""
    m = patterns.members
    keep = []
    for p in range(m.shape[0]):
        sub = m[p]
        contained = np.all(m[:, sub], axis=1) & (m.sum(axis=1) > sub.sum())
        if not contained.any():
            keep.append(p)
    return Patterns(m[keep], tuple(patterns.rows[p] for p in keep))


def maximal_patterns(queries: Sequence[PredicateQuery], schema: Schema, cap: int = 2_000) -> Patterns | None:
    """The MAXIMAL covering patterns (no other row is covered by a superset of queries), or None when
    more than ``cap`` partial patterns survive at some step.

    Built attribute by attribute over the atoms: a partial pattern is the set of queries still
    compatible with a choice of atoms on the attributes seen so far. A partial pattern contained in
    another stays contained after any choice on the remaining attributes (both are intersected with the
    same atom's queries), so dominated partials are dropped at every step: the maximum of any monotone
    composition over rows is attained on the result (MATH.md 2.2: only maximal overlapping sets matter).
    """
    t = len(queries)
    if t == 0:
        return Patterns(np.zeros((1, 0), dtype=bool), (tuple([0] * len(schema)),))
    atoms = compute_atoms(list(queries), schema)
    vecs = np.ones((1, t), dtype=bool)
    rows: list[list[int]] = [[0] * len(schema)]
    for a in atoms.attributes:
        tab = np.zeros((a.size, t), dtype=bool)
        for i, cov in enumerate(a.query_atoms):
            tab[cov.to_array(), i] = True
        combos = (vecs[:, None, :] & tab[None, :, :]).reshape(-1, t)
        _, first = np.unique(combos, axis=0, return_index=True)
        keep = _undominated(combos[first])
        if len(keep) > cap:
            return None
        chosen = first[keep]
        new_rows = []
        for c in chosen:
            row = list(rows[int(c) // a.size])
            row[a.position] = int(a.representative[int(c) % a.size])
            new_rows.append(row)
        vecs, rows = combos[chosen], new_rows
    return Patterns(vecs, tuple(tuple(r) for r in rows))


def _undominated(members: npt.NDArray[np.bool_]) -> list[int]:
    """Indices of distinct rows of ``members`` that are not a proper subset of another row."""
    order = np.argsort(-members.sum(axis=1), kind="stable")
    kept: list[int] = []
    for p in order:
        if kept and bool(np.any(np.all(members[kept] >= members[p], axis=1))):
            continue
        kept.append(int(p))
    return kept
