"""The solver fallback: maximum weighted depth as an integer programme solved by HiGHS (scipy.optimize.milp).

MATH.md 7.6: binary $z_{j,a}$ picks one atom $a$ per active attribute $j$ ($\\sum_a z_{j,a}=1$);
$0\\le y_q\\le 1$ with $y_q\\le\\sum_{a\\in S_{q,j}} z_{j,a}$ for every attribute $j$ query $q$ constrains;
maximise $\\sum_q f(w_q)\\,y_q$. For integral $z$ the right-hand sides are 0 or 1, so $y_q$ is 1 exactly
when the chosen row is covered by $q$ and the optimum is the maximum load. When HiGHS stops at its time
limit, its dual bound (from the LP relaxations of the open nodes) bounds the optimum from above; a
small slack covers the solver's floating-point tolerances.

HiGHS's time limit is wall-clock and read often by its simplex and branch and bound, but not during its
start-up and some presolve rules: measured on 2 000-3 000 value-set queries over Adult's 14 attributes
these run 0.2-0.3 s whatever the limit, several times that on a loaded machine. Under the effort limit
(``give_up``) HiGHS therefore runs in a thread of its own (it releases the GIL while it solves) that the
caller abandons at its deadline; the abandoned solve ends by its own time limit and its answer is dropped.
The thread is not a daemon: a daemon thread torn down at the interpreter's exit while HiGHS's own threads
ran aborted the process ("terminate called without an active exception", status 134) after its answer
was printed; now the exit waits for the abandoned solve's time limit (at most the effort left when it
started, plus HiGHS's start-up), the answer itself is not delayed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.result import FloatArray

# Slack added to HiGHS's dual bound: relative and absolute, well above its default tolerances (1e-6/1e-7).
_DUAL_SLACK_REL = 1e-6
_DUAL_SLACK_ABS = 1e-6


@dataclass
class MilpOutcome:
    cell: tuple[int, ...] | None
    best: float
    upper: float
    exact: bool


def solve_milp(
    tables: Sequence[AtomTable],
    loads: FloatArray,
    time_limit: float | None,
    *,
    give_up: float | None = None,
) -> MilpOutcome:
    """Maximise the total load over atom tuples within ``time_limit`` seconds; see the module docstring.

    With ``give_up`` (a ``_clock.now()`` time) the solve is abandoned when still running then: the
    outcome is the trivial bound (the total load), not exact. The answer is the same whether the solve
    runs in a thread or not.
    """
    if time_limit is not None and not math.isfinite(time_limit):
        time_limit = None
    if give_up is None or not math.isfinite(give_up):
        # (an infinite effort: no thread to abandon, and none left running without a time limit)
        return _solve_scaled(tables, loads, time_limit)
    done: list[MilpOutcome] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            done.append(_solve_scaled(tables, loads, time_limit))
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)

    worker = threading.Thread(target=work, name="overlapdp-highs", daemon=False)
    worker.start()
    worker.join(max(give_up - _clock.now(), 0.0))
    if failed:
        raise failed[0]
    if done:
        return done[0]
    keep = loads > 0
    return MilpOutcome(None, -1.0, float(loads[keep].sum()), False)


def _solve_scaled(tables: Sequence[AtomTable], loads: FloatArray, time_limit: float | None) -> MilpOutcome:
    len(tables)
    keep = np.flatnonzero(loads > 0)
    if keep.size == 0:
        return MilpOutcome(tuple(0 for _ in tables), 0.0, 0.0, True)
    # HiGHS stops within an ABSOLUTE gap of 1e-6: scale the objective so that gap is negligible.
    # Divide by the largest load first: 1e6 / top overflows for subnormal loads (an infinite cost).
    top = float(loads[keep].max())
    out = _solve(tables, loads / top * 1e6, keep, time_limit)
    return MilpOutcome(out.cell, out.best / 1e6 * top, out.upper / 1e6 * top, out.exact)


def _solve(
    tables: Sequence[AtomTable], loads: FloatArray, keep: np.ndarray, time_limit: float | None
) -> MilpOutcome:
    # scipy.optimize costs ~0.3 s to import: only when a programme is solved (not for `overlapdp --help`).
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    d = len(tables)
    n_atoms = [t.size for t in tables]
    offset = np.concatenate([[0], np.cumsum(n_atoms)]).astype(np.int64)
    nz = int(offset[-1])
    ny = keep.shape[0]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    r = 0
    # One-atom-per-attribute equalities.
    for j in range(d):
        rows.append(np.full(n_atoms[j], r, dtype=np.int64))
        cols.append(np.arange(offset[j], offset[j + 1], dtype=np.int64))
        vals.append(np.ones(n_atoms[j]))
        r += 1
    n_eq = r
    # Coverage constraints y_q - sum_{a in S_qj} z_ja <= 0 for attributes where q misses some atom.
    for j in range(d):
        member = tables[j].member[:, keep]
        partial = np.flatnonzero(~member.all(axis=0))
        if partial.size == 0:
            continue
        sub = member[:, partial]
        qa, qq = np.nonzero(sub.T)  # (query within partial, atom)
        base = r + np.arange(partial.size, dtype=np.int64)
        rows.append(base)
        cols.append(nz + partial.astype(np.int64))
        vals.append(np.ones(partial.size))
        rows.append(base[qa])
        cols.append(offset[j] + qq.astype(np.int64))
        vals.append(-np.ones(qa.size))
        r += partial.size
    a = coo_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nz + ny)
    ).tocsr()
    lb = np.concatenate([np.ones(n_eq), np.full(r - n_eq, -np.inf)])
    ub = np.concatenate([np.ones(n_eq), np.zeros(r - n_eq)])
    cost = np.concatenate([np.zeros(nz), -loads[keep]])
    integrality = np.concatenate([np.ones(nz), np.zeros(ny)])
    options: dict[str, object] = {"disp": False, "mip_rel_gap": 0.0}
    if time_limit is not None:
        options["time_limit"] = max(time_limit, 0.01)
    res = milp(
        cost,
        integrality=integrality,
        bounds=Bounds(np.zeros(nz + ny), np.ones(nz + ny)),
        constraints=[LinearConstraint(a, lb, ub)],
        options=options,
    )
    cell: tuple[int, ...] | None = None
    best = -1.0
    if res.x is not None:
        z = res.x[:nz]
        cell = tuple(int(np.argmax(z[offset[j] : offset[j + 1]])) for j in range(d))
        best = float(-res.fun)
    dual = getattr(res, "mip_dual_bound", None)
    total = float(loads[keep].sum())
    if res.status == 0:
        return MilpOutcome(cell, best, best, True)
    upper = total
    if dual is not None and np.isfinite(dual):
        upper = min(total, -float(dual) * (1 + _DUAL_SLACK_REL) + _DUAL_SLACK_ABS)
    return MilpOutcome(cell, best, max(upper, best), False)
