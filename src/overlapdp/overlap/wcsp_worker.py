"""Child process that solves one weighted constraint problem with toulbar2 (see :mod:`overlapdp.overlap.wcsp`).

Run as ``python .../overlap/wcsp_worker.py RESULT_PATH`` (a script, so that the child does not import
the whole package: that alone takes most of a second); reads an ``.npz`` from standard input
(domain sizes, initial upper bound, time limit, and the cost tables by scope) and writes a JSON object to
RESULT_PATH: the best assignment found (one atom index per attribute) with its cost, and toulbar2's
global dual bound (a lower bound on the minimum cost). toulbar2 keeps global state and installs its own
CPU-time alarm, so it runs in a process of its own: a crash or a kill cannot take the caller down.
"""

from __future__ import annotations

import io
import json
import sys
import time

import numpy as np

_STARTED = time.monotonic()
# Seconds kept for toulbar2's timer to take effect (it overshoots by ~0.3 s) and for reporting.
_MARGIN = 0.5


def solve(data: dict[str, np.ndarray]) -> dict[str, object]:
    """toulbar2 on the problem in ``data``; the keys are those written by ``overlap.wcsp``."""
    import pytoulbar2

    sizes = data["sizes"].tolist()
    ub = int(data["ub"])
    seconds = float(data["seconds"])  # wall seconds from this process's start; 0: no limit
    cfn = pytoulbar2.CFN(ubinit=ub, verbose=-1)
    # Measured on 2 000 value-set queries over Adult's 14 attributes: dominance elimination costs more
    # than it prunes (18.6 s -> 15.2 s without), and plain depth-first branch and bound beats hybrid
    # best-first search (15.2 s -> 7.9 s).
    cfn.Option.DEE = 0
    cfn.Option.hbfs = 0
    for j, n in enumerate(sizes):
        cfn.AddVariable(f"a{j}", list(range(n)))
    for k in range(int(data["n_scopes"])):
        scope = data[f"scope{k}"].tolist()
        costs = data[f"costs{k}"].tolist()
        cfn.AddFunction(scope, costs)
    # CFN.Solve() hides whether the search ran to its end, and after a complete search the dual bound
    # is not raised to the optimum; so run its steps here. solve() returns whether a solution was
    # found; toulbar2 sets its "limited" option when a limit (here only the timer) cut the search.
    if seconds > 0:
        # toulbar2's timer counts whole CPU seconds; the parent kills this process at its deadline.
        left = seconds - (time.monotonic() - _STARTED) - _MARGIN
        if left < 1.0:
            return {"values": None, "cost": None, "dual": 0.0, "complete": False}
        cfn.CFN.timer(int(left))
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
    values = [int(v) for v in cfn.CFN.solution()]
    cost = float(cfn.CFN.wcsp.getDPrimalBound())
    return {"values": values, "cost": cost, "dual": dual, "complete": complete}


def main() -> None:
    result_path = sys.argv[1]
    data = dict(np.load(io.BytesIO(sys.stdin.buffer.read())))
    result = solve(data)
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
