"""What the report plots: per-row load heat maps and sequential vs overlap-aware spend (MATH.md 1.8, 2.4).

The load of a row $x$ is $\\sum_{q\\ni x} w_q$ (the per-row view of MATH.md 1.8: a row only pays for
the queries covering it), and the maximum weighted overlap with the additive comp is its maximum over
the domain, $\\gamma_w(Q)=\\max_x \\sum_{q\\ni x}w_q$ (MATH.md 2.4, pure DP / zCDP closed form).
The heat map over two attributes ``(x, y)`` shows, for each pair of values, the maximum load over every
row with those two values (the other attributes free). Its maximum is therefore $\\gamma_w(Q)$ itself,
which :func:`heat_map` checks against :func:`overlapdp.overlap.max_overlap`.

Exactness. Atoms are exact (a query covers a value iff it covers the value's atom), so the maximum over
rows of one (x-atom, y-atom) cell is the maximum over atom tuples of that cell. Small atom grids are filled
densely; larger ones ask :func:`max_overlap` per cell for the queries covering the cell, with the x and y
constraints dropped. When an effort limit stops that search the cell holds max_overlap's SAFE UPPER
BOUND and the map says it is not exact (DESIGN.md: never under-report).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from overlapdp import validation
from overlapdp.errors import ReportInputError as ReportInputError
from overlapdp.errors import WorkloadError
from overlapdp.overlap import compute_atoms, max_overlap
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema

FloatArray = npt.NDArray[np.float64]

# The dense atom grid is used while it has at most this many cells ...
DENSE_CELLS = 4_000_000
# ... and the per-query box additions touch at most this many cells in total (t x cells bound).
DENSE_WORK = 200_000_000


@dataclass(frozen=True)
class HeatMap:
    """``values[i, j]`` = max load over rows with ``x`` = value ``i`` and ``y`` = value ``j``.

    ``x_labels`` / ``y_labels`` name the domain values (bins by their label). ``exact`` is False when a
    cell holds a safe upper bound (the per-cell search hit its effort limit). ``method`` is ``"dense"``
    (atom grid) or ``"cells"`` (max_overlap per atom cell).
    """

    x: str
    y: str
    x_labels: tuple[str, ...]
    y_labels: tuple[str, ...]
    values: FloatArray
    exact: bool
    method: str
    load: str = "sum of weights"

    @property
    def maximum(self) -> float:
        return float(self.values.max()) if self.values.size else 0.0

    def argmax(self) -> tuple[str, str]:
        """(x label, y label) of a cell attaining the maximum."""
        i, j = np.unravel_index(int(np.argmax(self.values)), self.values.shape)
        return self.x_labels[int(i)], self.y_labels[int(j)]


def check_weights(queries: Sequence[PredicateQuery], weights: Sequence[float] | None) -> FloatArray:
    """One finite non-negative weight per query (the queries' own by default)."""
    values = [q.weight for q in queries] if weights is None else list(weights)

    def field(i: int) -> str:
        return f"the weight of query #{i}"

    return validation.check_weights(values, len(queries), field, error=ReportInputError)


def choose_axes(
    schema: Schema, queries: Sequence[PredicateQuery], x: str | None = None, y: str | None = None
) -> tuple[str, str]:
    """``x`` and ``y`` as given (checked); a missing one is the attribute constrained by the most queries
    (schema order breaks ties) among the others."""
    if len(schema) < 2:
        raise ReportInputError("a heat map needs a schema with at least two attributes")
    for flag, name in (("--x", x), ("--y", y)):
        if name is not None:
            _position(schema, name, flag)
    if x is not None and x == y:
        raise ReportInputError(f"--x and --y are both {x!r}: choose two different attributes")
    counts = [0] * len(schema)
    for q in queries:
        for pos, _ in q.constraints:
            counts[pos] += 1
    order = [schema.names[p] for p in sorted(range(len(schema)), key=lambda p: (-counts[p], p))]
    if x is None:
        x = next(n for n in order if n != y)
    if y is None:
        y = next(n for n in order if n != x)
    return x, y


def _position(schema: Schema, name: str, flag: str) -> int:
    if name not in schema:
        raise ReportInputError(f"{flag} {name!r}: unknown attribute (known: {', '.join(schema.names)})")
    return schema.position(name)


def _labels(schema: Schema, pos: int) -> tuple[str, ...]:
    attr = schema.attributes[pos]
    # The missing value (an attribute's last index when the schema allows it) reads as NULL.
    return tuple("NULL" if i == attr.null_index else str(attr.value_at(i)) for i in range(attr.size))


def heat_map(
    queries: Sequence[PredicateQuery],
    x: str,
    y: str,
    *,
    weights: Sequence[float] | None = None,
    schema: Schema | None = None,
    effort: float | None = None,
    method: str = "auto",
    load: str = "sum of weights",
) -> HeatMap:
    """Per-(x value, y value) maximum over the other attributes of the row load (module docstring).

    ``weights`` default to each query's ``.weight``. ``method``: ``"auto"``, ``"dense"`` or ``"cells"``.
    """
    qs = list(queries)
    if not qs:
        raise ReportInputError("the workload is empty: nothing to plot")
    sch = schema if schema is not None else qs[0].schema
    px, py = _position(sch, x, "--x"), _position(sch, y, "--y")
    if px == py:
        raise ReportInputError(f"--x and --y are both {x!r}: choose two different attributes")
    if method not in ("auto", "dense", "cells"):
        raise ReportInputError(f"unknown heat-map method {method!r}")
    w = check_weights(qs, weights)
    atoms = compute_atoms(qs, sch)
    # Axes of the atom grid: every active attribute, plus x and y even when no query constrains them.
    n = len(qs)
    axes: dict[int, tuple[npt.NDArray[np.int64], int, tuple[IndexSet, ...]]] = {}
    for a in atoms.attributes:
        axes[a.position] = (a.value_atom, a.size, a.query_atoms)
    for p in (px, py):
        if p not in axes:
            size = sch.attributes[p].size
            axes[p] = (np.zeros(size, dtype=np.int64), 1, (IndexSet.full(1),) * n)
    positions = sorted(axes)
    shape = tuple(axes[p][1] for p in positions)
    cells = math.prod(shape)
    dense_ok = cells <= DENSE_CELLS and cells * n <= DENSE_WORK
    if method == "dense" and not dense_ok:
        raise ReportInputError(f"the atom grid has {cells} cells: too large for the dense method")
    use_dense = method == "dense" or (method == "auto" and dense_ok)
    ix, iy = positions.index(px), positions.index(py)
    exact = True
    if use_dense:
        grid = np.zeros(shape, dtype=np.float64)
        for i in range(n):
            if w[i] == 0:
                continue
            idx = [axes[p][2][i].to_array() for p in positions]
            if any(a.size == 0 for a in idx):
                continue  # a contradiction covers no row
            grid[np.ix_(*idx)] += w[i]
        other = tuple(k for k in range(len(positions)) if k not in (ix, iy))
        cell_max = grid.max(axis=other) if other else grid
        if ix > iy:
            cell_max = cell_max.T
        algo = "dense"
    else:
        cell_max, exact = _per_cell(qs, w, sch, px, py, axes, effort)
        algo = "cells"
    values = cell_max[np.ix_(axes[px][0], axes[py][0])].astype(np.float64)
    return HeatMap(x, y, _labels(sch, px), _labels(sch, py), values, exact, algo, load)


def _per_cell(
    qs: list[PredicateQuery],
    w: FloatArray,
    sch: Schema,
    px: int,
    py: int,
    axes: dict[int, tuple[npt.NDArray[np.int64], int, tuple[IndexSet, ...]]],
    effort: float | None,
) -> tuple[FloatArray, bool]:
    """max_overlap (comp sum) of the queries covering each (x-atom, y-atom) cell, x and y dropped."""
    nx, ny = axes[px][1], axes[py][1]
    qx, qy = axes[px][2], axes[py][2]
    # Each query without its x and y constraints (the cell fixes them).
    free = [
        PredicateQuery(sch, tuple((p, c) for p, c in q.constraints if p not in (px, py)), id=f"q{i}")
        for i, q in enumerate(qs)
    ]
    out = np.zeros((nx, ny), dtype=np.float64)
    exact = True
    cache: dict[tuple[int, ...], float] = {}
    for a in range(nx):
        in_x = [i for i in range(len(qs)) if a in qx[i] and w[i] > 0]
        for b in range(ny):
            sub = tuple(i for i in in_x if b in qy[i])
            if not sub:
                continue
            if sub not in cache:
                res = max_overlap(
                    [free[i] for i in sub], weights=w[list(sub)], comp="sum", schema=sch, effort=effort
                )
                exact = exact and bool(res.exact)
                cache[sub] = float(res.value if res.exact else res.upper)
            out[a, b] = cache[sub]
    return out, exact


@dataclass(frozen=True)
class Spend:
    """Sequential vs overlap-aware composition of one comp family (MATH.md 2.4)."""

    comp: str  # count (gamma vs t), sum (pure DP / zCDP), l2 (Gaussian DP)
    sequential: float
    overlap: float
    exact: bool
    witness: dict[str, object] | None
    witness_row: tuple[int, ...] | None

    @property
    def gain(self) -> float:
        """U = 1 - gamma_w(Q) / comp(Q) (MATH.md 2.6)."""
        return 1 - self.overlap / self.sequential if self.sequential > 0 else 0.0


def workload_spend(
    queries: Sequence[PredicateQuery], *, schema: Schema | None = None, effort: float | None = None
) -> list[Spend]:
    """t vs gamma, sum(w) vs gamma_sum, ||w||_2 vs gamma_l2; gamma is max_overlap's value, which is its
    safe upper bound when the search stops early (so the gain is under-stated, never over)."""
    qs = list(queries)
    if not qs:
        raise WorkloadError("the workload is empty: nothing to report")
    w = check_weights(qs, None)
    out = []
    seqs = {
        "count": float(len(qs)),
        "sum": math.fsum(w.tolist()),
        "l2": math.sqrt(math.fsum((w * w).tolist())),
    }
    for comp, seq in seqs.items():
        res = max_overlap(qs, comp=comp, schema=schema, effort=effort)  # type: ignore[arg-type]
        out.append(Spend(comp, seq, float(res.value), bool(res.exact), res.witness, res.witness_row))
    return out


def check_heat_against(heat: HeatMap, value: float, exact: bool, what: str) -> None:
    """The heat map's maximum must equal max_overlap's exact value (and never exceed a safe bound)."""
    tol = 1e-9 * max(1.0, abs(value))
    if exact and heat.exact and abs(heat.maximum - value) > tol:
        raise RuntimeError(f"heat map maximum {heat.maximum} differs from {what} {value}")
    if heat.exact and heat.maximum > value + tol:
        raise RuntimeError(f"heat map maximum {heat.maximum} exceeds the bound {what} {value}")


__all__ = [
    "HeatMap",
    "ReportInputError",
    "Spend",
    "check_heat_against",
    "choose_axes",
    "heat_map",
    "workload_spend",
]
