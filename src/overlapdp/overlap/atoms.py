"""Per-attribute atoms: values that every query treats alike collapse into one atom (MATH.md 7.4).

For each attribute some query constrains ("active" attributes), the value indices ``0..n-1`` are cut at
every interval endpoint of every query's coverage into elementary segments; each query's coverage is then
a union of segments. Segments that no query tells apart (identical membership in every query) are merged
when that is cheap to decide exactly, which matters for value-set predicates on categorical attributes
(a range workload has at most ``2t+1`` segments per attribute, all distinct in membership when adjacent).

Atoms are exact: a query covers a value iff it covers the value's atom, so any maximum over domain rows
equals the maximum over atom tuples. Attributes no query constrains are dropped (one atom each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema

# Exact merging of identical segments builds a (segments x queries) bit matrix; bound its size.
_MERGE_LIMIT_BITS = 64_000_000


@dataclass(frozen=True)
class AttributeAtoms:
    """Atoms of one active attribute.

    ``value_atom[v]`` is the atom of value index ``v``; ``representative[a]`` is one value index in atom
    ``a``; ``query_atoms[i]`` is the set of atoms query ``i`` covers on this attribute (all atoms when the
    query does not constrain it).
    """

    position: int
    value_atom: npt.NDArray[np.int64]
    representative: npt.NDArray[np.int64]
    query_atoms: tuple[IndexSet, ...]

    @property
    def size(self) -> int:
        return int(self.representative.shape[0])


@dataclass(frozen=True)
class Atoms:
    """Atoms of every active attribute of a workload, in schema order."""

    schema: Schema
    attributes: tuple[AttributeAtoms, ...]

    @property
    def active(self) -> tuple[int, ...]:
        return tuple(a.position for a in self.attributes)

    @property
    def grid_size(self) -> int:
        """Number of atom tuples (the compressed domain)."""
        out = 1
        for a in self.attributes:
            out *= a.size
        return out

    def row(self, atom_tuple: Sequence[int]) -> tuple[int, ...]:
        """A full domain point (value indices) in the given atom tuple; inactive attributes take value 0."""
        row = [0] * len(self.schema)
        for a, t in zip(self.attributes, atom_tuple, strict=True):
            row[a.position] = int(a.representative[t])
        return tuple(row)


def compute_atoms(queries: Sequence[PredicateQuery], schema: Schema | None = None) -> Atoms:
    """Atoms of ``queries`` on every attribute at least one of them constrains."""
    if schema is None:
        if not queries:
            raise ValueError("compute_atoms needs a schema when there are no queries")
        schema = queries[0].schema
    per_attr: dict[int, list[tuple[int, IndexSet]]] = {}
    for i, q in enumerate(queries):
        for pos, cov in q.constraints:
            per_attr.setdefault(pos, []).append((i, cov))
    attrs = tuple(
        _attribute_atoms(pos, schema.attributes[pos].size, per_attr[pos], len(queries))
        for pos in sorted(per_attr)
    )
    return Atoms(schema, attrs)


def _attribute_atoms(pos: int, n: int, covs: list[tuple[int, IndexSet]], t: int) -> AttributeAtoms:
    # All interval endpoints at once: the cuts, and each endpoint's segment index by one searchsorted.
    counts = [len(cov.intervals) for _, cov in covs]
    flat = np.fromiter(
        (x for _, cov in covs for iv in cov.intervals for x in iv), dtype=np.int64, count=2 * sum(counts)
    )
    bounds = np.unique(np.concatenate([np.array([0, n], dtype=np.int64), flat]))
    n_seg = len(bounds) - 1
    mapped = np.searchsorted(bounds, flat).tolist()
    # Segments covered by each constraining query, as segment-index intervals. The map from endpoints to
    # segment indices is strictly increasing, so sorted, disjoint, non-adjacent intervals stay so.
    seg_sets: list[tuple[int, IndexSet]] = []
    k = 0
    for (i, _), c in zip(covs, counts, strict=True):
        seg_sets.append(
            (i, IndexSet(tuple(zip(mapped[k : k + 2 * c : 2], mapped[k + 1 : k + 2 * c : 2], strict=True))))
        )
        k += 2 * c
    seg_atom = np.arange(n_seg, dtype=np.int64)
    n_atoms = n_seg
    if (
        n_seg > 2
        and n_seg * len(covs) <= _MERGE_LIMIT_BITS
        and any(len(s.intervals) > 1 for _, s in seg_sets)
    ):
        member = np.zeros((n_seg, len(covs)), dtype=bool)
        for col, (_, s) in enumerate(seg_sets):
            for lo, hi in s.intervals:
                member[lo:hi, col] = True
        packed = np.packbits(member, axis=1)
        _, first, inverse = np.unique(packed, axis=0, return_index=True, return_inverse=True)
        # Number atoms by their first segment so that order follows the values where possible.
        order = np.argsort(first)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        seg_atom = rank[inverse.reshape(-1)].astype(np.int64)
        n_atoms = len(first)
    value_atom = np.repeat(seg_atom, np.diff(bounds))
    representative = np.zeros(n_atoms, dtype=np.int64)
    # First segment of each atom gives its representative value.
    seen = np.full(n_atoms, -1, dtype=np.int64)
    for seg in range(n_seg - 1, -1, -1):
        seen[seg_atom[seg]] = seg
    representative[:] = bounds[seen]
    everything = IndexSet.full(n_atoms)
    query_atoms: list[IndexSet] = [everything] * t
    for i, s in seg_sets:
        if n_atoms == n_seg:
            query_atoms[i] = s
        else:
            query_atoms[i] = IndexSet.from_indices(int(a) for a in np.unique(seg_atom[s.to_array()]))
    return AttributeAtoms(pos, value_atom, representative, tuple(query_atoms))
