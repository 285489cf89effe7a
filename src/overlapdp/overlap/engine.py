"""``max_overlap``: the maximum (weighted) overlap of a workload, its witness row, chosen algorithm.

MATH.md section 1 (per-row view) $\\gamma_w(Q)=\\max_{x}\\mathrm{comp}(\\{q: x\\in C_q\\})$, section 7 for the
algorithms. The route is picked from the workload's shape:

1. no query, or no active attribute: trivial;
2. the dense segment grid when it fits in memory (one active attribute: the endpoint sweep);
3. two active attributes with one interval each: sweep plus a lazy max/add segment tree;
4. otherwise exact branch and bound over attributes, and HiGHS (scipy ``milp``) when it stalls.

Every answer is checked from its witness: the queries covering the witness row are found again from the
raw intervals and their comp is ``lower``. If the effort limit stops the search, ``value`` is the SAFE
UPPER BOUND (the smallest of the search frontier's bound, the solver's dual bound, a colouring bound and
the comp of all queries) and ``exact`` is False (DESIGN.md: never under-report).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from overlapdp.overlap.bounds import colouring_bound
from overlapdp.overlap.branch import AtomTable, atom_tables, branch_and_bound
from overlapdp.overlap.compiled import Compiled, IntArray, check_schema, compile_workload
from overlapdp.overlap.grid import grid_feasible, grid_maximum
from overlapdp.overlap.milp import solve_milp
from overlapdp.overlap.result import (
    Comp,
    CompError,
    FloatArray,
    Loads,
    OverlapResult,
    SetComp,
    check_vectors,
    check_weights,
    comp_name,
)
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

Algorithm = Literal["auto", "grid", "sweep2d", "branch", "milp"]

# Branch and bound expansions before the solver takes over (when the comp is additive).
BRANCH_NODE_LIMIT = 4000
# Relative slack on float bounds that are sums of many loads.
_BOUND_SLACK = 1e-12


def max_overlap(
    queries: Sequence[PredicateQuery],
    weights: Any = None,
    comp: Comp = "count",
    *,
    effort: float | None = None,
    schema: Schema | None = None,
    algorithm: Algorithm = "auto",
) -> OverlapResult:
    """The maximum (weighted) overlap $\\gamma_w$ of ``queries`` (MATH.md sections 1, 2 and 7).

    ``weights`` default to each query's ``.weight`` (ignored for ``count``); for ``comp="vector"`` give
    one weight vector per query (each component is maximised on its own, with its own witness).
    ``effort`` is a time limit in seconds (None: none); past it the answer is a safe upper bound with
    ``exact=False``. ``algorithm`` forces a route (for tests and benchmarks); ``"auto"`` picks one.
    """
    name = comp_name(comp)
    queries = list(queries)
    sch = check_schema(queries, schema)
    if effort is not None and (
        isinstance(effort, bool) or not isinstance(effort, int | float) or not effort >= 0
    ):
        raise CompError(f"effort must be a non-negative number of seconds or None, got {effort!r}")
    if algorithm not in ("auto", "grid", "sweep2d", "branch", "milp"):
        raise CompError(f"unknown algorithm {algorithm!r}")
    ids = [q.id for q in queries]
    t = len(queries)
    deadline = None if effort is None else time.monotonic() + float(effort)
    if name == "vector":
        vectors = check_vectors(weights, t, ids)
        if sch is None:
            return _empty(np.zeros(vectors.shape[1] if vectors.ndim == 2 else 0))
        return _vector(queries, sch, vectors, deadline, algorithm)
    if name == "count":
        w = np.ones(t)
        if weights is not None:
            check_weights(weights, t, ids)
    else:
        w = check_weights([q.weight for q in queries] if weights is None else weights, t, ids)
    if sch is None:
        return _empty(0.0)
    c = compile_workload(queries, sch)
    if isinstance(comp, SetComp):
        return _set_comp(queries, c, comp, deadline)
    assert name in ("count", "sum", "l2")
    lw = Loads(name, w * w if name == "l2" else w)  # type: ignore[arg-type]
    return _scalar(queries, c, lw, deadline, algorithm)


def _empty(value: float | FloatArray) -> OverlapResult:
    return OverlapResult(value, True, value, value, None, None, (), "empty")


def _ids(queries: Sequence[PredicateQuery], indices: IntArray) -> tuple[str, ...]:
    return tuple(queries[i].id if queries[i].id is not None else f"#{i}" for i in indices.tolist())


def _finish(
    queries: Sequence[PredicateQuery],
    c: Compiled,
    cell: tuple[int, ...] | None,
    lw: Loads,
    exact: bool,
    upper_load: float,
    algorithm: str,
) -> OverlapResult:
    """The result from a witness cell: covering queries and ``lower`` recomputed from raw intervals."""
    if cell is None:
        # The search stopped before any row: any point of the heaviest query is a witness.
        cell = _cell_of_query(c, int(c.live[np.argmax(lw.loads[c.live])]))
    row = c.row(cell)
    covering = c.covering(row)
    lower = lw.compose(covering)
    upper = lower if exact else max(lower, lw.outer(upper_load * (1 + _BOUND_SLACK)))
    return OverlapResult(
        value=upper,
        exact=exact,
        upper=upper,
        lower=lower,
        witness=c.schema.row(row),
        witness_row=row,
        queries=_ids(queries, covering),
        algorithm=algorithm,
        query_indices=tuple(covering.tolist()),
    )


def _cell_of_query(c: Compiled, qi: int) -> tuple[int, ...]:
    cell = []
    for a in c.attributes:
        hit = np.flatnonzero(a.query == qi)
        cell.append(int(a.lo[hit[0]]) if hit.size else 0)
    return tuple(cell)


def _scalar(
    queries: Sequence[PredicateQuery], c: Compiled, lw: Loads, deadline: float | None, algorithm: str
) -> OverlapResult:
    if c.live.size == 0 or not c.attributes:
        return _finish(queries, c, tuple(0 for _ in c.attributes), lw, True, 0.0, "trivial")
    d = len(c.attributes)
    if algorithm == "grid" or (algorithm == "auto" and grid_feasible(c)):
        if not grid_feasible(c):
            raise CompError("the dense grid does not fit the memory limit for this workload")
        ((_, cell),) = grid_maximum(c, lw.loads[:, None])
        return _finish(queries, c, cell, lw, True, 0.0, "sweep" if d == 1 else "grid")
    if algorithm == "sweep2d" or (algorithm == "auto" and d == 2 and c.single_interval):
        if not (d == 2 and c.single_interval):
            raise CompError("sweep2d needs two active attributes and one interval per query")
        from overlapdp.overlap.sweep import sweep_2d

        _, cell2 = sweep_2d(c, lw.loads)
        return _finish(queries, c, cell2, lw, True, 0.0, "sweep2d")
    return _search(queries, c, lw, deadline, algorithm)


def _search(
    queries: Sequence[PredicateQuery], c: Compiled, lw: Loads, deadline: float | None, algorithm: str
) -> OverlapResult:
    """Branch and bound, then HiGHS if it stalls; safe bounds when the deadline passes."""
    tables = atom_tables(c)
    loads = lw.loads[c.live]
    safe = [float(loads.sum())]
    cell: tuple[int, ...] | None = None
    best = -1.0
    used = "branch"
    if algorithm != "milp":
        node_limit = None if algorithm == "branch" else BRANCH_NODE_LIMIT
        out = branch_and_bound(c, tables, loads, deadline=deadline, node_limit=node_limit)
        if out.exact:
            return _finish(queries, c, _segments(tables, out.cell), lw, True, 0.0, "branch")
        safe.append(out.upper)
        if out.cell is not None:
            cell, best = out.cell, out.best
    if algorithm in ("milp", "auto") and (deadline is None or time.monotonic() < deadline):
        used = "milp" if algorithm == "milp" else "branch+milp"
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        m = solve_milp(tables, loads, remaining)
        if m.cell is not None and m.best > best:
            cell, best = m.cell, m.best
        if m.exact:
            return _finish(queries, c, _segments(tables, cell), lw, True, 0.0, used)
        safe.append(m.upper)
    col = colouring_bound(tables, loads)
    if col is not None:
        safe.append(col)
    return _finish(queries, c, _segments(tables, cell), lw, False, min(safe), used)


def _segments(tables: Sequence[AtomTable], cell: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Atom indices of the search to segment indices of the compiled workload."""
    if cell is None:
        return None
    return tuple(int(t.segment[a]) for t, a in zip(tables, cell, strict=True))


def _set_comp(
    queries: Sequence[PredicateQuery], c: Compiled, comp: SetComp, deadline: float | None
) -> OverlapResult:
    """A user-supplied monotone set function: branch and bound with ``comp.upper`` as the bound."""
    live = c.live

    def value(idx: IntArray) -> float:
        return float(comp.value(live[idx].tolist()))

    def upper(idx: IntArray) -> float:
        return float(comp.upper(live[idx].tolist()))

    if live.size == 0 or not c.attributes:
        cell: tuple[int, ...] | None = tuple(0 for _ in c.attributes)
        exact, bound = True, 0.0
        algorithm = "trivial"
    else:
        tables = atom_tables(c)
        out = branch_and_bound(c, tables, None, set_value=value, set_upper=upper, deadline=deadline)
        cell, exact, bound = _segments(tables, out.cell), out.exact, out.upper
        if cell is None:
            cell = _cell_of_query(c, int(live[0]))
        algorithm = "branch"
    assert cell is not None
    row = c.row(cell)
    covering = c.covering(row)
    lower = float(comp.value(covering.tolist()))
    upper_v = lower if exact else max(lower, min(bound, float(comp.upper(live.tolist()))))
    return OverlapResult(
        value=upper_v,
        exact=exact,
        upper=upper_v,
        lower=lower,
        witness=c.schema.row(row),
        witness_row=row,
        queries=_ids(queries, covering),
        algorithm=algorithm,
        query_indices=tuple(covering.tolist()),
    )


def _vector(
    queries: Sequence[PredicateQuery],
    schema: Schema,
    vectors: FloatArray,
    deadline: float | None,
    algorithm: str,
) -> OverlapResult:
    """One ``sum`` maximum per component (RDP orders, MATH.md section 2), each with its own witness."""
    c = compile_workload(queries, schema)
    k = vectors.shape[1]
    parts: list[OverlapResult] = []
    if algorithm in ("auto", "grid") and c.live.size and c.attributes and grid_feasible(c, 1):
        # As many components per dense grid as fit the memory limit (RDP has dozens of orders).
        chunk = max(1, min(k, next(n for n in range(k, 0, -1) if n == 1 or grid_feasible(c, n))))
        for start in range(0, k, chunk):
            block = vectors[:, start : start + chunk]
            for j, (_, cell) in enumerate(grid_maximum(c, block), start=start):
                lw = Loads("sum", vectors[:, j])
                parts.append(
                    _finish(queries, c, cell, lw, True, 0.0, "sweep" if len(c.attributes) == 1 else "grid")
                )
    else:
        for j in range(k):
            parts.append(_scalar(queries, c, Loads("sum", vectors[:, j]), deadline, algorithm))
    value = np.array([float(p.value) for p in parts])
    return OverlapResult(
        value=value,
        exact=all(p.exact for p in parts),
        upper=np.array([float(p.upper) for p in parts]),
        lower=np.array([float(p.lower) for p in parts]),
        witness=None,
        witness_row=None,
        queries=(),
        algorithm="vector:" + "/".join(sorted({p.algorithm for p in parts})),
        components=tuple(parts),
    )


def composed(values: Sequence[float], comp: str) -> float:
    """``comp`` of explicit weights (for references and tests): count, sum or l2."""
    if comp == "count":
        return float(len(values))
    if comp == "l2":
        return math.sqrt(math.fsum(v * v for v in values))
    return math.fsum(values)
