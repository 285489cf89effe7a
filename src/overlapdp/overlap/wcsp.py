"""Exact route for value-set workloads on many attributes: a weighted constraint problem solved by toulbar2.

MATH.md section 7. A row is one atom per active attribute. Queries with the same set ``s`` of constrained
attributes form one cost table over the atoms of ``s``: the load of those queries that the atom tuple
does NOT satisfy. Minimising the sum of the tables over rows is maximising the covered load, since
the two add up to the total load of every row. toulbar2 (branch and bound with soft arc consistency,
de Givry et al.) proves the optimum; its dual bound is a lower bound on the minimum cost, hence
``total - dual`` is a safe upper bound on the maximum load when it stops early.

The tables hold integers, so the route is taken only when every load is an exact integer multiple of
one unit (``count`` always; ``sum`` with equal weights, or integer, half, quarter... weights); otherwise
rounding could move the optimum and :func:`integral_loads` returns None. Tables must fit a size budget
(queries constraining many attributes with many atoms each do not). The solver runs in a child process
(:mod:`overlapdp.overlap.wcsp_worker`) killed at the deadline.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.compiled import IntArray
from overlapdp.overlap.result import FloatArray

# Cells of one cost table, of all of them, and of one table of arity above 3 (toulbar2's n-ary tables
# are posted tuple by tuple from Python).
SCOPE_CELLS = 1 << 21
TOTAL_CELLS = 1 << 25
NARY_CELLS = 1 << 14
_CHUNK_ENTRIES = 1 << 22
# Integer costs stay far inside int64 (toulbar2's cost type) with this much headroom.
_MAX_TOTAL = 1 << 50
# Seconds the child needs to start, build its tables and report (measured ~0.8 s for 7.7 M table cells).
_STARTUP = 1.0
_WORKER = Path(__file__).with_name("wcsp_worker.py")


def available() -> bool:
    """Whether toulbar2's Python package is installed."""
    return importlib.util.find_spec("pytoulbar2") is not None


def integral_loads(loads: FloatArray) -> tuple[IntArray, float] | None:
    """``(k, unit)`` with ``loads == k * unit`` exactly, or None when the loads are not such multiples.

    The unit is the smallest load when every load is a multiple of it (equal weights, whatever they
    are); otherwise the greatest common divisor of dyadic loads (integers, halves, quarters, ...).
    """
    positive = loads[loads > 0]
    if positive.size == 0:
        return np.zeros(loads.shape[0], dtype=np.int64), 1.0
    unit = float(positive.min())
    k = np.round(loads / unit)
    if not (np.array_equal(k, loads / unit) and np.array_equal(k * unit, loads)):
        k, unit = _dyadic(loads)
        if unit == 0.0:
            return None
    if float(k.sum()) >= _MAX_TOTAL:
        return None
    return k.astype(np.int64), unit


def _dyadic(loads: FloatArray) -> tuple[FloatArray, float]:
    """``(k, unit)`` for loads that are integers times ``2**-s``; unit 0.0 when there is no such ``s``."""
    for shift in range(53):
        scaled = loads * float(2**shift)  # exact: a power of two
        if float(scaled.max()) >= 2.0**53:
            break
        if np.array_equal(scaled, np.round(scaled)):
            ints = scaled.astype(np.int64)
            g = int(np.gcd.reduce(ints[ints > 0]))
            unit = g / float(2**shift)
            k = (ints // g).astype(np.float64)
            if np.array_equal(k * unit, loads):
                return k, unit
            break
    return np.zeros(0), 0.0


@dataclass(frozen=True)
class Problem:
    """Cost tables by scope (attribute positions), the constant load, and the total integer load."""

    sizes: list[int]
    scopes: list[tuple[int, ...]]
    costs: list[IntArray]
    constant: int
    total: int


def build(tables: Sequence[AtomTable], weights: IntArray) -> Problem | None:
    """The cost tables for integer ``weights`` (one per live query); None past the size budget."""
    sizes = [t.size for t in tables]
    keep = np.flatnonzero(weights > 0)
    constrained = np.array([~t.member[:, keep].all(axis=0) for t in tables]).reshape(len(tables), -1)
    groups: dict[tuple[int, ...], list[int]] = {}
    for col, q in enumerate(keep.tolist()):
        groups.setdefault(tuple(np.flatnonzero(constrained[:, col]).tolist()), []).append(q)
    constant = 0
    scopes: list[tuple[int, ...]] = []
    costs: list[IntArray] = []
    cells_total = 0
    for scope, members in groups.items():
        w = weights[members]
        if not scope:
            constant += int(w.sum())  # covered by every row
            continue
        cells = math.prod(sizes[j] for j in scope)
        if cells > SCOPE_CELLS or (len(scope) > 3 and cells > NARY_CELLS):
            return None
        cells_total += cells
        if cells_total > TOTAL_CELLS:
            return None
        scopes.append(scope)
        costs.append(int(w.sum()) - _covered(tables, scope, members, w))
    return Problem(sizes, scopes, costs, constant, int(weights[keep].sum()))


def _covered(tables: Sequence[AtomTable], scope: tuple[int, ...], members: list[int], w: IntArray) -> IntArray:
    """Flat table (last attribute fastest): the weight of ``members`` covering each atom tuple of ``scope``."""
    rows = math.prod(tables[j].size for j in scope[:-1])
    # Queries in chunks: the intermediate (rows x chunk) product stays within a few million entries.
    chunk = max(1, _CHUNK_ENTRIES // max(rows, 1))
    table = np.zeros(math.prod(tables[j].size for j in scope), dtype=np.int64)
    for start in range(0, len(members), chunk):
        part = members[start : start + chunk]
        m = [tables[j].member[:, part].astype(np.int64) for j in scope]
        acc = m[0] * w[start : start + chunk]  # (atoms of scope[0], queries)
        for nxt in m[1:-1]:
            acc = (acc[:, None, :] * nxt[None, :, :]).reshape(-1, len(part))
        table += acc.sum(axis=1) if len(m) == 1 else (acc @ m[-1].T).reshape(-1)
    return table


@dataclass
class WcspOutcome:
    """Best atom tuple found and its integer load, a safe integer upper bound, and whether proved."""

    cell: tuple[int, ...] | None
    best: int
    upper: int | None
    exact: bool
    failure: str | None = None


def solve(problem: Problem, incumbent: int, deadline: float | None) -> WcspOutcome:
    """Run toulbar2 in a child process until ``deadline`` (``time.monotonic()``); see the module docstring.

    ``incumbent`` is the integer load of a row already known: only rows at least as good are searched.
    """
    seconds = 0.0
    wait: float | None = None
    if deadline is not None:
        wait = deadline - time.monotonic()
        if wait < _STARTUP + 1.5:  # toulbar2 needs a whole CPU second after its start
            return WcspOutcome(None, -1, None, False, "too little time")
        seconds = wait - 0.05  # the child's own stop, a little before it is killed
    variable = problem.total - problem.constant
    ub = variable - max(incumbent - problem.constant, 0) + 1
    buf = io.BytesIO()
    arrays: dict[str, np.ndarray] = {
        "sizes": np.array(problem.sizes, dtype=np.int64),
        "ub": np.array(ub, dtype=np.int64),
        "seconds": np.array(seconds, dtype=np.float64),
        "n_scopes": np.array(len(problem.scopes), dtype=np.int64),
    }
    for k, (scope, table) in enumerate(zip(problem.scopes, problem.costs, strict=True)):
        arrays[f"scope{k}"] = np.array(scope, dtype=np.int64)
        arrays[f"costs{k}"] = table
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    fd, path = tempfile.mkstemp(prefix="overlapdp-wcsp-", suffix=".json")
    os.close(fd)
    try:
        proc = subprocess.Popen(
            [sys.executable, str(_WORKER), path],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = proc.communicate(buf.getvalue(), timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return WcspOutcome(None, -1, None, False, "stopped at the deadline")
        if proc.returncode != 0:
            return WcspOutcome(None, -1, None, False, err.decode(errors="replace").strip()[-500:])
        with open(path, encoding="utf-8") as fh:
            result = json.load(fh)
    finally:
        os.unlink(path)
    dual = float(result["dual"])
    # The minimum uncovered load is an integer >= dual, so at most ``variable - floor(dual)`` is covered;
    # the 1e-6 absorbs a float rendering of an integral dual bound just above it, never more.
    upper = problem.constant + variable - math.floor(dual + 1e-6)
    if result["values"] is None:
        # A complete search that found nothing cheaper than ub proves the incumbent optimal.
        proved = bool(result["complete"])
        return WcspOutcome(None, -1, incumbent if proved else max(upper, incumbent), proved)
    cost = round(float(result["cost"]))
    best = problem.constant + variable - cost
    cell = tuple(int(v) for v in result["values"])
    if result["complete"]:
        return WcspOutcome(cell, best, best, True)
    return WcspOutcome(cell, best, max(upper, best), upper <= best)
