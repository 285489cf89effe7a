"""An independent exact reference: CP-SAT (OR-Tools) on the one-hot model of a workload.

One 0/1 variable per attribute value (exactly one per attribute: the row), one per query, and
``y[q] <= sum of x[a][v]`` over q's values on each attribute q constrains; the load of the row is the
weighted sum of the y. Built straight from the queries' coverages (no atoms, nothing shared with the
engine). Weights must be integers (CP-SAT's coefficients). ``available()`` says whether OR-Tools is
installed (the ``dev`` extra)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from overlapdp.query import PredicateQuery


def available() -> bool:
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Outcome:
    status: str  # "OPTIMAL", "FEASIBLE", "INFEASIBLE" or "UNKNOWN"
    value: int | None  # the best load found (maximise), or None
    bound: int | None  # the proven upper bound (maximise), or None
    seconds: float


def _model(
    queries: Sequence[PredicateQuery], weights: Sequence[int], within: PredicateQuery | None
) -> tuple[object, list[object]]:
    from ortools.sat.python import cp_model

    schema = queries[0].schema if queries else within.schema  # type: ignore[union-attr]
    m = cp_model.CpModel()
    allowed: list[list[int]] = []
    for p, a in enumerate(schema.attributes):
        vals = list(range(a.size))
        if within is not None:
            cov = dict(within.constraints).get(p)
            if cov is not None:
                vals = [v for v in vals if v in cov]
        allowed.append(vals)
    x = [{v: m.NewBoolVar(f"x{p}_{v}") for v in vals} for p, vals in enumerate(allowed)]
    for p in range(len(allowed)):
        m.AddExactlyOne(list(x[p].values()))
    ys = []
    for i, q in enumerate(queries):
        y = m.NewBoolVar(f"y{i}")
        ys.append(y)
        if q.is_contradiction:
            m.Add(y == 0)
            continue
        for p, cov in q.constraints:
            held = [x[p][v] for v in allowed[p] if v in cov]
            if len(held) == len(allowed[p]):
                continue
            if not held:
                m.Add(y == 0)
                break
            m.AddBoolOr(held).OnlyEnforceIf(y)
    del weights
    return m, ys


def maximise(
    queries: Sequence[PredicateQuery],
    weights: Sequence[int],
    *,
    within: PredicateQuery | None = None,
    seconds: float = 60.0,
    workers: int = 2,
) -> Outcome:
    """The largest load of a row (of ``within``'s coverage when given)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    m, ys = _model(queries, weights, within)
    m.Maximize(sum(w * y for w, y in zip(weights, ys, strict=True)))  # type: ignore[attr-defined]
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = seconds
    s.parameters.num_workers = workers
    st = s.Solve(m)
    name = s.StatusName(st)
    found = st in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return Outcome(
        name,
        round(s.ObjectiveValue()) if found else None,
        round(s.BestObjectiveBound()) if found else None,
        time.perf_counter() - t0,
    )


def exceeds(
    queries: Sequence[PredicateQuery],
    weights: Sequence[int],
    within: PredicateQuery,
    threshold: int,
    *,
    seconds: float = 60.0,
    workers: int = 2,
) -> Outcome:
    """The decision: is there a row of ``within``'s coverage with load above ``threshold``?
    ``status`` is FEASIBLE/OPTIMAL (yes), INFEASIBLE (no) or UNKNOWN (out of time)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    m, ys = _model(queries, weights, within)
    m.Add(sum(w * y for w, y in zip(weights, ys, strict=True)) >= threshold + 1)  # type: ignore[attr-defined]
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = seconds
    s.parameters.num_workers = workers
    st = s.Solve(m)
    return Outcome(s.StatusName(st), None, None, time.perf_counter() - t0)
