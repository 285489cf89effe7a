"""Independent parts of a workload: the maximum of a sum of loads splits over them (MATH.md 7.10).

Two reductions, both exact and both computed with numpy over all intervals at once (no Python step
per query; one per active attribute):

- A *conflict-free* attribute is one on which some segment is covered by every query constraining it
  (for intervals: they pairwise intersect). Fixing the row there satisfies all those constraints at
  once, whatever the other attributes take, so the attribute drops out.
- The remaining attributes fall into connected groups (two attributes are joined when one query
  constrains both). A query constrains attributes of one group only, so a row's load is the sum over
  groups of the loads of that group's queries, each depending on the row's values in that group alone:
  the maximum is the sum of the groups' maxima, plus the load of the *free* queries (those constraining
  only conflict-free attributes, which the fixed values satisfy).

On the wide sparse workloads of Smith et al. (10 000 attributes, 1 000 queries on 3 each) most queries
are free and the rest form hundreds of parts of a few queries; the engine solves each part as a small
workload of its own (its own schema of the part's attributes, its queries renumbered).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from overlapdp.overlap._compiled import AttributeSegments, Compiled, IntArray
from overlapdp.schema import Schema


@dataclass(frozen=True)
class Part:
    """One connected group: ``compiled`` is a workload of its own over a schema of the group's
    attributes (in schema order), its query ``i`` being the parent's query ``queries[i]`` and its
    attribute ``k`` the parent's schema position ``positions[k]``."""

    compiled: Compiled
    queries: IntArray
    positions: IntArray


@dataclass(frozen=True)
class Parts:
    """The split of a workload: its ``parts``, the ``free`` live queries (covered by any row that takes
    the ``fixed_values`` on the conflict-free attributes at schema positions ``fixed_positions``)."""

    parts: tuple[Part, ...]
    free: IntArray
    fixed_positions: IntArray
    fixed_values: IntArray


def split(c: Compiled) -> Parts | None:
    """The parts of ``c``, or None when there is nothing to gain (one group, no conflict-free attribute).

    Cost: a few numpy passes over the intervals and the segments of all active attributes, one small
    Python step per active attribute (gathering their arrays) and per part.
    """
    attrs = c.attributes
    d = len(attrs)
    if d == 0 or c.live.size == 0:
        return None
    sizes = np.fromiter((a.size for a in attrs), dtype=np.int64, count=d)
    counts = np.fromiter((a.query.shape[0] for a in attrs), dtype=np.int64, count=d)
    aid = np.repeat(np.arange(d, dtype=np.int64), counts)
    query = np.concatenate([a.query for a in attrs])
    lo = np.concatenate([a.lo for a in attrs])
    hi = np.concatenate([a.hi for a in attrs])
    # Attribute j's segments s = 0 .. size-1 sit at off[j] + s; slot off[j] + size (past its last
    # segment) is where all its intervals end, so the running count there is 0 and no attribute's
    # count leaks into the next.
    off = np.zeros(d + 1, dtype=np.int64)
    np.cumsum(sizes + 1, out=off[1:])
    n = int(off[-1])
    diff = np.bincount(off[aid] + lo, minlength=n + 1) - np.bincount(off[aid] + hi, minlength=n + 1)
    cover = np.cumsum(diff[:n])
    # A query's intervals on one attribute are disjoint, so a segment's count is its number of
    # covering queries; the constraining queries are the distinct (attribute, query) pairs (intervals
    # are listed by attribute, then in query order).
    first = np.ones(query.shape[0], dtype=bool)
    first[1:] = (aid[1:] != aid[:-1]) | (query[1:] != query[:-1])
    need = np.bincount(aid[first], minlength=d)
    full = cover == np.repeat(need, sizes + 1)
    full[off[1:] - 1] = False  # the past-the-end slots are no segment
    hit_at = np.flatnonzero(full)
    hit_attr = np.searchsorted(off, hit_at, side="right") - 1
    free_attr, first_hit = np.unique(hit_attr, return_index=True)
    conflict_free = np.zeros(d, dtype=bool)
    conflict_free[free_attr] = True
    cuts = np.concatenate([a.cuts for a in attrs])  # attribute j's cuts sit at off[j] .. off[j] + size
    positions = np.fromiter((a.position for a in attrs), dtype=np.int64, count=d)
    fixed_positions = positions[free_attr]
    fixed_values = cuts[hit_at[first_hit]]
    # Connected groups of the remaining attributes: components of the bipartite graph query - attribute.
    t = c.t
    if not conflict_free.any() and int(np.bincount(query[first], minlength=t).max()) == d:
        return None  # a query constrains every attribute: one group (no union-find needed)
    keep = ~conflict_free[aid] & first
    eq, ea = query[keep], aid[keep]
    label_q, label_a, groups = _components(t, d, eq, ea)
    live_mask = np.zeros(t, dtype=bool)
    live_mask[c.live] = True
    touched = np.zeros(t, dtype=bool)
    touched[eq] = True
    free = np.flatnonzero(live_mask & ~touched).astype(np.int64)
    if groups <= 1 and not conflict_free.any():
        return None
    # Queries and attributes of each group, in increasing order (np.argsort stable on the labels).
    part_q = np.flatnonzero(touched)
    q_order = part_q[np.argsort(label_q[part_q], kind="stable")]
    q_bounds = np.searchsorted(label_q[q_order], np.arange(groups + 1))
    part_a = np.flatnonzero(~conflict_free)
    a_order = part_a[np.argsort(label_a[part_a], kind="stable")]
    a_bounds = np.searchsorted(label_a[a_order], np.arange(groups + 1))
    # A query's number inside its part (parts hold disjoint queries, so one array serves all of them).
    renumber = np.zeros(t, dtype=np.int64)
    out: list[Part] = []
    for g in range(groups):
        qs = q_order[q_bounds[g] : q_bounds[g + 1]]
        js = a_order[a_bounds[g] : a_bounds[g + 1]]
        renumber[qs] = np.arange(qs.shape[0], dtype=np.int64)
        out.append(_part(c, qs, js.tolist(), renumber))
    return Parts(tuple(out), free, fixed_positions, fixed_values)


def drop_conflict_free(c: Compiled) -> tuple[Compiled, dict[int, int]] | None:
    """``c`` without its conflict-free attributes (reduction (i) of MATH.md 7.10, valid for ANY
    monotone comp: fixing such an attribute at its common value only adds covering queries) and the
    fixed value index per dropped schema position; None when no attribute is conflict-free. The
    workload keeps its schema and query numbering (a row of it leaves the dropped attributes at 0:
    set them to the fixed values)."""
    found = split(c)
    if found is None or found.fixed_positions.size == 0:
        return None
    dropped = set(found.fixed_positions.tolist())
    kept = tuple(a for a in c.attributes if a.position not in dropped)
    fixed = dict(zip(found.fixed_positions.tolist(), found.fixed_values.tolist(), strict=True))
    return Compiled(c.schema, c.t, c.live, kept, c.single_interval), fixed


def _components(t: int, d: int, query: IntArray, attr: IntArray) -> tuple[IntArray, IntArray, int]:
    """Connected components of the graph with an edge between query ``query[k]`` and attribute
    ``attr[k]``: each query's and attribute's label, numbered ``0 .. groups-1`` over the nodes that
    have an edge (others get -1), and the number of groups."""
    nodes = t + d
    u, v = query, t + attr
    root = _roots(nodes, u, v)
    has_edge = np.zeros(nodes, dtype=bool)
    has_edge[u] = True
    has_edge[v] = True
    used, dense = np.unique(root[has_edge], return_inverse=True)
    out = np.full(nodes, -1, dtype=np.int64)
    out[has_edge] = dense.reshape(-1)
    return out[:t], out[t:], int(used.shape[0])


# Rounds of hooking before the union-find hands over to scipy's (random sparse graphs need a handful).
_HOOK_ROUNDS = 64


def _roots(nodes: int, u: IntArray, v: IntArray) -> IntArray:
    """Each node's component, named by its smallest node: parallel union-find in numpy (every round
    hooks each root to the smallest root it shares an edge with, then jumps pointers to the roots;
    ``parent[x] <= x`` throughout, so the pointers form a forest). scipy's ``connected_components``
    (0.6 s to import) takes over on graphs that need many rounds."""
    parent = np.arange(nodes, dtype=np.int64)
    for _ in range(_HOOK_ROUNDS):
        pu, pv = parent[u], parent[v]
        apart = pu != pv
        if not apart.any():
            return parent
        np.minimum.at(parent, np.maximum(pu[apart], pv[apart]), np.minimum(pu[apart], pv[apart]))
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    graph = coo_array((np.ones(u.shape[0], dtype=np.int8), (u, v)), shape=(nodes, nodes)).tocsr()
    _, labels = connected_components(graph, directed=False)
    # Name each component by its smallest node, as above.
    first = np.full(int(labels.max()) + 1 if nodes else 0, nodes, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(nodes, dtype=np.int64))
    out: IntArray = first[labels].astype(np.int64)
    return out


def _part(c: Compiled, queries: IntArray, members: list[int], renumber: IntArray) -> Part:
    """The self-contained workload of one group (``members``: indices into ``c.attributes``)."""
    n = int(queries.shape[0])
    attrs: list[AttributeSegments] = []
    single = True
    for k, j in enumerate(members):
        a = c.attributes[j]
        q = renumber[a.query]
        if single and q.shape[0] > 1 and bool(np.any(q[1:] == q[:-1])):
            single = False
        mask = None if a.mask is None else a.mask[queries]
        attrs.append(AttributeSegments(k, a.cuts, q, a.lo, a.hi, mask, n))
    positions = np.array([c.attributes[j].position for j in members], dtype=np.int64)
    schema = Schema(tuple(c.schema.attributes[p] for p in positions.tolist()))
    sub = Compiled(schema, n, np.arange(n, dtype=np.int64), tuple(attrs), single)
    return Part(sub, queries, positions)


class Picked(Sequence[str | None]):
    """``ids[indices[i]]``, read one at a time (error messages name a query by its id)."""

    __slots__ = ("_ids", "_indices")

    def __init__(self, ids: Sequence[str | None], indices: IntArray) -> None:
        self._ids = ids
        self._indices = indices

    def __len__(self) -> int:
        return int(self._indices.shape[0])

    @overload
    def __getitem__(self, i: int) -> str | None: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str | None]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str | None] | None:
        if isinstance(i, slice):
            return [self[k] for k in range(len(self))[i]]
        j = int(self._indices[i])
        return self._ids[j] if j < len(self._ids) else None
