"""Answer a whole workload from one histogram of atom tuples (the batch path).

The engine groups the in-domain rows by the atom tuple of the workload's active attributes (MATH.md
section 7: atoms are exact, a query covers a value iff it covers the value's atom), so

    q(D) = sum over histogram cells h with atom_k(h) in A_{q,k} for every attribute k q constrains of n_h.

Queries are grouped by the set of attributes they constrain (their signature); per signature the
histogram is marginalised onto those attributes and every query of the group is answered at once:

- dense: a contraction of the dense marginal with per-query 0/1 indicator vectors (one matrix product per
  attribute), when the marginal grid is small;
- sparse: a boolean mask over the marginal's non-empty cells built from per-attribute lookup tables,
  then a matrix-vector product with the cell counts.

Counts are integers below 2**53, so the float64 products are exact (every partial sum is an integer
no larger than the number of rows).
"""

from __future__ import annotations

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

_DENSE_CELLS = 1 << 22  # largest dense marginal grid (32 MiB of float64)
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
    for signature, members in groups.items():
        if not signature:
            out[members] = total
            continue
        sig_sizes = [sizes[k] for k in signature]
        grid = math.prod(sig_sizes)
        by_column = [dict(queries[i] or ()) for i in members]
        sets = [[d[k] for d in by_column] for k in signature]
        if grid <= _DENSE_CELLS and grid * (len(members) + 1) <= max(
            4 * len(members) * cells.shape[0] * len(signature), 1 << 20
        ):
            out[members] = _dense(cells, w, signature, sig_sizes, grid, sets)
        else:
            out[members] = _sparse(cells, w, signature, sig_sizes, sets)
    return out


def _indicators(sets: list[IndexSet], size: int) -> npt.NDArray[np.float64]:
    ind = np.zeros((len(sets), size), dtype=np.float64)
    for r, s in enumerate(sets):
        for lo, hi in s.intervals:
            ind[r, lo:hi] = 1.0
    return ind


def _dense(
    cells: npt.NDArray[np.int64],
    w: npt.NDArray[np.float64],
    signature: tuple[int, ...],
    sizes: list[int],
    grid: int,
    sets: list[list[IndexSet]],
) -> npt.NDArray[np.int64]:
    if cells.shape[0]:
        key = np.ravel_multi_index(tuple(cells[:, k] for k in signature), sizes)
        marginal = np.bincount(key, weights=w, minlength=grid)
    else:
        marginal = np.zeros(grid, dtype=np.float64)
    n = len(sets[0])
    # Contract one attribute at a time: (n, s0) @ (s0, rest) -> (n, rest), then per query row.
    r = _indicators(sets[0], sizes[0]) @ marginal.reshape(sizes[0], -1)
    for j in range(1, len(signature)):
        r = np.einsum("qa,qar->qr", _indicators(sets[j], sizes[j]), r.reshape(n, sizes[j], -1))
    return np.rint(r.reshape(n)).astype(np.int64)


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
    sub = cells[:, list(signature)]
    if math.prod(sizes) < (1 << 62):
        key = np.ravel_multi_index(tuple(sub.T), sizes)
        uniq, inverse = np.unique(key, return_inverse=True)
        cols = np.unravel_index(uniq, sizes)
    else:
        uniq_rows, inverse = np.unique(sub, axis=0, return_inverse=True)
        cols = tuple(uniq_rows[:, j] for j in range(len(signature)))
    mw = np.bincount(inverse.reshape(-1), weights=w)
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
