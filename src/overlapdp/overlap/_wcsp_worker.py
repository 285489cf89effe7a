"""Child process that solves one weighted constraint problem with toulbar2 (see :mod:`overlapdp.overlap.wcsp`).

Run as ``python .../overlap/_wcsp_worker.py PROBLEM.npz RESULT.json`` (a script, so that the child does
not import the whole package: that alone takes most of a second). Reads the network (atoms per
attribute, initial upper bound, time limit, unary costs, the boxes) and writes to RESULT.json the best
assignment found (one atom index per attribute; the box variables are dropped) with its cost,
toulbar2's global dual bound (a lower bound on the minimum cost), and whether the search ran to its end
(then the cost is the minimum). toulbar2 keeps global state and installs its own CPU-time alarm, so it
runs in a process of its own: a crash or a kill cannot take the caller down. The caller's deadline is
wall-clock, and toulbar2's timer counts CPU time (which falls behind on a loaded machine): so its timer
handler, which turns SIGVTALRM into a clean stop at the next search node, is also installed for SIGALRM,
armed on the wall clock to fire a little before the deadline; the parent sends SIGVTALRM at the deadline
should the child still run, and kills it at the end of its grace.
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np


def solve(data: dict[str, np.ndarray]) -> dict[str, object]:
    """toulbar2 on the network in ``data``; the keys are those written by ``overlap.wcsp``."""
    import pytoulbar2

    sizes = data["sizes"].tolist()
    ub = int(data["ub"])
    seconds = float(data["seconds"])  # wall seconds left at the parent's start(); 0: no limit
    sent = float(data["sent"])  # the parent's time.monotonic() then (one clock for all processes)
    backtracks = int(data["backtracks"])  # 0: no limit
    box_weight = data["box_weight"].tolist()
    box_constrained = data["box_constrained"]
    cfn = pytoulbar2.CFN(ubinit=ub, verbose=-1)
    # Measured on 2 000 value-set queries over Adult's 14 attributes (tables by scope, before the box
    # variables): dominance elimination cost more than it pruned, and plain depth-first branch and
    # bound beat hybrid best-first search; kept as they are no slower with box variables.
    cfn.Option.DEE = 0
    cfn.Option.hbfs = 0
    if backtracks > 0:
        cfn.Option.backtrackLimit = backtracks
    if int(data["first"]):
        # a decision: any row better than the initial bound answers it (stop at the first one)
        cfn.Option.allSolutions = 1
    for j, n in enumerate(sizes):
        cfn.AddVariable(f"a{j}", list(range(n)))
        cfn.AddFunction([j], data[f"unary{j}"].tolist())
    # Any cost >= ub is forbidden: the hard constraints cost ub.
    for k, w in enumerate(box_weight):
        b = cfn.AddVariable(f"b{k}", [0, 1])
        cfn.AddFunction([b], [w, 0])
        for j in np.flatnonzero(box_constrained[:, k]).tolist():
            allowed = data[f"member{j}"][:, k]
            table = np.zeros((sizes[j], 2), dtype=np.int64)
            table[~allowed, 1] = ub
            cfn.AddFunction([j, b], table.reshape(-1).tolist())
    # CFN.Solve() hides whether the search ran to its end, and after a complete search the dual bound
    # is not raised to the optimum; so run its steps here. solve() returns whether a solution was
    # found; toulbar2 sets its "limited" option when a limit (the timer or the backtrack limit) cut the search.
    if seconds > 0:
        # toulbar2's timer counts whole CPU seconds, which never run faster than wall seconds: rounded
        # up it cannot fire before the deadline, and it is only a backstop (should the parent be gone).
        # Installing it installs toulbar2's SIGVTALRM handler, through which the parent stops the
        # search at the wall-clock deadline.
        left = seconds - (time.monotonic() - sent)
        cfn.CFN.timer(max(1, math.ceil(left) + 1))
        _wall_timer(left)
    cfn.CFN.wcsp.updateDUb(ub)
    try:
        cfn.CFN.wcsp.sortConstraints()
    except cfn.Contradiction:
        # No assignment costs less than ub: impossible here, the caller's incumbent costs ub - 1.
        return {"values": None, "cost": None, "dual": float(ub), "complete": True}
    cfn.CFN.solve()
    complete = not bool(cfn.Option.limited)
    dual = float(cfn.GetDDualBound())
    if not cfn.CFN.solutions():
        return {"values": None, "cost": None, "dual": dual, "complete": complete}
    values = [int(v) for v in cfn.CFN.solution()[: len(sizes)]]
    cost = float(cfn.CFN.wcsp.getDPrimalBound())
    return {"values": values, "cost": cost, "dual": dual, "complete": complete}


def _wall_timer(seconds: float) -> None:
    """Stop toulbar2 after ``seconds`` of wall time: SIGALRM (real-time timer) gets the SIGVTALRM
    handler that ``CFN.timer`` installed. Signals reach this process's one thread (the parent starts it
    with one BLAS thread), whose thread-local flag toulbar2 reads."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    handler = libc.signal(signal.SIGVTALRM, None)  # read toulbar2's handler (default for an instant)
    libc.signal(signal.SIGVTALRM, handler)
    libc.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


def main() -> None:
    problem_path, result_path = sys.argv[1], sys.argv[2]
    with np.load(problem_path) as npz:
        data = dict(npz)
    result = solve(data)
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
