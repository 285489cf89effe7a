"""Answer a whole workload from one histogram of atom tuples (the batch path).

The engine groups the in-domain rows by the atom tuple of the workload's active attributes (MATH.md
7.4: atoms are exact, a query covers a value iff it covers the value's atom), so

    q(D) = sum over histogram cells h with atom_k(h) in A_{q,k} for every attribute k q constrains of n_h.

Queries are grouped by the set of attributes they constrain (their signature); per signature the
histogram is marginalised onto those attributes and every query of the group is answered at once:

- dense: prefix sums of the dense marginal (a summed-area table); each query's coverage is a union of
  boxes of atoms and each box sum is ``2**k`` lookups (inclusion-exclusion), when the grid is small;
- sparse: a boolean mask over the marginal's non-empty cells built from per-attribute lookup tables,
  then a matrix-vector product with the cell counts.

The dense path is int64 throughout. The sparse path multiplies 0/1 masks with counts in float64, exact
because counts are integers below 2**53 (every partial sum is an integer no larger than the rows).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from overlapdp.overlap.atoms import Atoms
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet

# A query's constraints as (histogram column, atom set); None for a contradiction.
QueryColumns = tuple[tuple[int, IndexSet], ...] | None

_DENSE_CELLS = 1 << 22  # largest dense marginal grid (32 MiB of int64)
_MAX_BOXES = 4096  # a query whose coverage needs more boxes goes to the sparse path
_DENSE_WEIGHT = 0.5  # relative cost of one dense-grid cell against one masked histogram cell
_MASK_BUDGET = 1 << 24  # booleans per chunk of the sparse path
_EXACT_LIMIT = 1 << 53


def histogram_columns(atoms: Atoms, queries: Sequence[PredicateQuery]) -> list[QueryColumns]:
    """Each query's constraints in histogram columns, with atom sets in place of value sets."""
    column_of = {a.position: k for k, a in enumerate(atoms.attributes)}
    out: list[QueryColumns] = []
    for i, q in enumerate(queries):
        if q.is_contradiction:
            out.append(None)
            continue
        cons = []
        for pos, _ in q.constraints:
            k = column_of[pos]
            cons.append((k, atoms.attributes[k].query_atoms[i]))
        out.append(tuple(cons))
    return out


def answer_from_histogram(
    atoms: Atoms,
    cells: npt.NDArray[np.int64],
    weights: npt.NDArray[np.int64],
    queries: Sequence[QueryColumns],
) -> npt.NDArray[np.int64]:
    """Exact count of every query from the histogram ``(cells, weights)`` (see the module docstring)."""
    total = int(weights.sum()) if weights.size else 0
    if total >= _EXACT_LIMIT:
        raise ValueError("more than 2**53 rows: float64 products would not be exact")
    sizes = [a.size for a in atoms.attributes]
    out = np.zeros(len(queries), dtype=np.int64)
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, cons in enumerate(queries):
        if cons is None:
            continue
        if any(not s for _, s in cons):
            continue
        groups[tuple(k for k, _ in cons)].append(i)
    w = weights.astype(np.float64)
    # Contiguous columns: every group gathers a few of them.
    columns = [np.ascontiguousarray(cells[:, c]) for c in range(cells.shape[1])]
    for signature, members in groups.items():
        if not signature:
            out[members] = total
            continue
        sig_sizes = [sizes[k] for k in signature]
        by_column = [dict(queries[i] or ()) for i in members]
        sets = [[d[k] for d in by_column] for k in signature]
        # The group's own atoms: cut each attribute only where this group's queries cut it, so the
        # dense grid is no larger than the group needs (a query covers an atom iff it covers its cut).
        cuts = [_group_cuts(col, size) for col, size in zip(sets, sig_sizes, strict=True)]
        local_sizes = [len(c) - 1 for c in cuts]
        grid = math.prod(local_sizes)
        # Rough costs in element operations: building and prefix-summing the dense grid, against
        # masking every histogram cell once per query and attribute.
        dense_cost = _DENSE_WEIGHT * grid * len(signature) + cells.shape[0] * len(signature)
        mask_cost = 2 * len(members) * cells.shape[0] * len(signature)
        if grid <= _DENSE_CELLS and dense_cost <= mask_cost:
            boxes = _box_arrays(sets, cuts)
            if boxes is not None:
                out[members] = _dense(columns, w, signature, sig_sizes, cuts, boxes, len(members))
                continue
        out[members] = _sparse(cells, w, signature, sig_sizes, sets)
    return out


def _group_cuts(col: list[IndexSet], size: int) -> npt.NDArray[np.int64]:
    """Sorted cut points ``0 = c_0 < ... < c_m = size`` at every interval end of the group's sets."""
    ends = [x for s in col for iv in s.intervals for x in iv]
    return np.unique(np.asarray([0, size, *ends], dtype=np.int64))


Boxes = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def _box_arrays(sets: list[list[IndexSet]], cuts: list[npt.NDArray[np.int64]]) -> Boxes | None:
    """Every query's coverage as disjoint boxes in the group's cut coordinates: ``(owners, lo, hi)``.

    None when some query needs more than ``_MAX_BOXES`` boxes (the sparse path takes the group).
    """
    k = len(sets)
    n = len(sets[0])
    if all(len(s.intervals) == 1 for col in sets for s in col):
        lo = np.empty((n, k), dtype=np.int64)
        hi = np.empty((n, k), dtype=np.int64)
        for j, col in enumerate(sets):
            ends = np.asarray([s.intervals[0] for s in col], dtype=np.int64)
            lo[:, j] = np.searchsorted(cuts[j], ends[:, 0])
            hi[:, j] = np.searchsorted(cuts[j], ends[:, 1])
        return np.arange(n, dtype=np.int64), lo, hi
    if _boxes(sets) > _MAX_BOXES:
        return None
    owners: list[int] = []
    lows: list[tuple[int, ...]] = []
    highs: list[tuple[int, ...]] = []
    for q in range(n):
        per_attr = [sets[j][q].intervals for j in range(k)]
        for box in itertools.product(*per_attr):
            owners.append(q)
            lows.append(tuple(lo for lo, _ in box))
            highs.append(tuple(hi for _, hi in box))
    lo_a = np.asarray(lows, dtype=np.int64).reshape(-1, k)
    hi_a = np.asarray(highs, dtype=np.int64).reshape(-1, k)
    for j in range(k):
        lo_a[:, j] = np.searchsorted(cuts[j], lo_a[:, j])
        hi_a[:, j] = np.searchsorted(cuts[j], hi_a[:, j])
    return np.asarray(owners, dtype=np.int64), lo_a, hi_a


def _indicators(sets: list[IndexSet], size: int) -> npt.NDArray[np.float64]:
    ind = np.zeros((len(sets), size), dtype=np.float64)
    for r, s in enumerate(sets):
        for lo, hi in s.intervals:
            ind[r, lo:hi] = 1.0
    return ind


def _dense(
    columns: list[npt.NDArray[np.int64]],
    w: npt.NDArray[np.float64],
    signature: tuple[int, ...],
    sizes: list[int],
    cuts: list[npt.NDArray[np.int64]],
    boxes: Boxes,
    n: int,
) -> npt.NDArray[np.int64]:
    """Box sums over the dense marginal's prefix sums (summed-area table), all in int64.

    The marginal is over the group's cut segments (``cuts``); each query's coverage is a union of
    disjoint boxes of segments, and a box sum takes ``2**k`` lookups by inclusion-exclusion.
    """
    k = len(signature)
    local = [len(c) - 1 for c in cuts]
    grid = math.prod(local)
    if w.shape[0]:
        # Row-major key of each cell's segment tuple, through one lookup table per attribute.
        key = np.zeros(w.shape[0], dtype=np.int64)
        for j, c in enumerate(signature):
            stride = math.prod(local[j + 1 :])
            lut = np.searchsorted(cuts[j], np.arange(sizes[j], dtype=np.int64), side="right") - 1
            key += (lut * stride)[columns[c]]
        marginal = np.rint(np.bincount(key, weights=w, minlength=grid)).astype(np.int64)
    else:
        marginal = np.zeros(grid, dtype=np.int64)
    prefix = np.zeros([s + 1 for s in local], dtype=np.int64)
    inner = marginal.reshape(local)
    for axis in range(k):
        inner = np.cumsum(inner, axis=axis)
    prefix[tuple(slice(1, None) for _ in range(k))] = inner
    owners, lo, hi = boxes
    shape = prefix.shape
    flat = prefix.reshape(-1)
    box_sums = np.zeros(lo.shape[0], dtype=np.int64)
    for corner in itertools.product((0, 1), repeat=k):
        idx = tuple(hi[:, j] if corner[j] else lo[:, j] for j in range(k))
        sign = 1 if (k - sum(corner)) % 2 == 0 else -1
        box_sums += sign * flat[np.ravel_multi_index(idx, shape)]
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, owners, box_sums)
    return out


def _boxes(sets: list[list[IndexSet]]) -> int:
    """Number of boxes of the largest query of a group (product of its interval counts)."""
    return max(math.prod(len(sets[j][q].intervals) for j in range(len(sets))) for q in range(len(sets[0])))


def _sparse(
    cells: npt.NDArray[np.int64],
    w: npt.NDArray[np.float64],
    signature: tuple[int, ...],
    sizes: list[int],
    sets: list[list[IndexSet]],
) -> npt.NDArray[np.int64]:
    n = len(sets[0])
    if not cells.shape[0]:
        return np.zeros(n, dtype=np.int64)
    # Masks run over the histogram cells directly: marginalising first (a sort) costs more than it
    # saves for the few queries a signature usually has.
    cols = tuple(cells[:, c] for c in signature)
    mw = w
    luts = [_indicators(sets[j], sizes[j]).astype(bool) for j in range(len(signature))]
    out = np.zeros(n, dtype=np.int64)
    step = max(1, _MASK_BUDGET // max(1, mw.shape[0]))
    for start in range(0, n, step):
        stop = min(n, start + step)
        mask = luts[0][start:stop][:, cols[0]]
        for j in range(1, len(signature)):
            mask &= luts[j][start:stop][:, cols[j]]
        out[start:stop] = np.rint(mask.astype(np.float64) @ mw).astype(np.int64)
    return out
