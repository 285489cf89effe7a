"""Exact route for value-set workloads on many attributes: a weighted constraint problem solved by toulbar2.

MATH.md 7.6 (the ILP / MaxSAT family, here as a cost function network). A row is one atom per
active attribute: one variable each. A query constraining one attribute is a unary cost on the atoms it
does not cover. A query constraining several (a box; identical boxes merged) gets a Boolean variable
``b``: cost ``w`` when ``b = 0``, and for each attribute it constrains a hard binary constraint forbidding
``b = 1`` with an atom outside its set. An optimal assignment sets ``b = 1`` exactly for the boxes
containing the row (that is free, and allowed only then), so its cost is the load the row does NOT
carry; minimising it maximises the covered load, since the two add up to the total load. (Tables over
each query's whole scope are the other encoding; measured on 2 000 value-set queries over Adult's 14
attributes they are ~10x slower: 7.7 M table cells to propagate.) toulbar2 (depth-first branch and bound with soft local
consistencies: Cooper, de Givry, Sanchez, Schiex, Zytnicki, Werner, "Soft arc consistency revisited",
Artificial Intelligence 174, 2010) proves the optimum; its dual bound is a lower bound on the minimum cost, hence
``total - dual`` is a safe upper bound on the maximum load when it stops early.

Costs are integers, so the route is taken only when every load is an exact integer multiple of
one unit (``count`` always; ``sum`` with equal weights, or integer, half, quarter... weights); otherwise
rounding could move the optimum and :func:`integral_loads` returns None. The solver runs in a child process
(:mod:`overlapdp.overlap._wcsp_worker`) given the time left until the caller's deadline (wall clock). At
the deadline the parent sends it SIGVTALRM, the signal of toulbar2's own timer, so that toulbar2 stops at
its next node and reports its dual bound; a child still running at the end of the grace period the
caller allows for that report is killed (its bound is then lost, never wrong).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from overlapdp.overlap import _clock
from overlapdp.overlap._compiled import BoolArray, IntArray
from overlapdp.overlap.branch import AtomTable
from overlapdp.overlap.result import FloatArray

# Integer costs stay far inside int64 (toulbar2's cost type) with this much headroom.
MAX_TOTAL = 1 << 50
# Seconds the child needs at least to start, build the network and report (measured ~0.2 s).
STARTUP_SECONDS = 0.3
# Seconds before the deadline at which the child stops its search to report (at most 5% of its time).
_REPORT = 0.1
_WORKER = Path(__file__).with_name("_wcsp_worker.py")


@functools.cache
def available() -> bool:
    """Whether toulbar2's Python package is installed (looked up once)."""
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
    # A tiny unit can overflow the quotient to inf: then the check below fails, as it should.
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = loads / unit
        k = np.round(ratio)
        multiples = np.array_equal(k, ratio) and np.array_equal(k * unit, loads)
    if multiples:
        # k * unit equal in floats need not be equal exactly (fl(3 (1 + 2^-52)) = 3 + 2^-50 =
        # 3 (1 + 2^-52) + 2^-52): a multiple by a power of two is exact, the others are checked on
        # rationals (none when the loads are equal, the usual case)
        odd = np.flatnonzero((k > 1) & (np.frexp(k)[0] != 0.5))
        exact_unit = Fraction(unit)
        multiples = all(Fraction(float(loads[i])) == int(k[i]) * exact_unit for i in odd.tolist())
    if not multiples:
        k, unit = _dyadic(loads)
        if unit == 0.0:
            return None
    if float(k.sum()) >= MAX_TOTAL:
        return None
    return k.astype(np.int64), unit


def ceiling_loads(loads: FloatArray) -> tuple[IntArray, float] | None:
    """``(k, unit)`` with ``k * unit >= loads`` exactly and ``k * unit < loads + unit``: the loads
    rounded UP to multiples of a power-of-two unit, their sum under ``MAX_TOTAL``. toulbar2 on ``k``
    bounds the maximum load from above (every row's rounded load is at least its own, MATH.md 7.6),
    within ``unit`` per query covering the row, but proves nothing about the loads themselves."""
    positive = loads[loads > 0]
    if positive.size == 0 or not np.all(np.isfinite(loads)):
        return None
    # unit 2^(e - 49) with the total under 2^e: sum(k) <= total / unit + len(loads), checked below
    e = math.frexp(float(positive.sum()))[1]
    unit = math.ldexp(1.0, e - 49)
    k = np.ceil(np.ldexp(loads, 49 - e))  # exact unless scaled into subnormals: checked below
    if not np.all(k * unit >= loads) or float(k.sum()) >= MAX_TOTAL:
        return None
    return k.astype(np.int64), unit


def _dyadic(loads: FloatArray) -> tuple[FloatArray, float]:
    """``(k, unit)`` for loads that are integers times ``2**-s``; unit 0.0 when there is no such ``s``.

    ``s`` is read from the floats themselves (the exponent of each one's lowest set bit), so loads of
    any magnitude qualify (a plan's shares of a budget of 3e-5 are multiples of ``2**-61``)."""
    positive = loads[loads > 0]
    mantissas, exponents = np.frexp(positive)
    whole = np.ldexp(mantissas, 53).astype(np.int64)  # exact: a float's mantissa has 53 bits
    lowest = np.frexp((whole & -whole).astype(np.float64))[1] - 1  # trailing zero bits of each
    shift = max(0, int(-(exponents.astype(np.int64) - 53 + lowest).min()))
    scaled = np.ldexp(loads, shift)  # exact: a power of two
    if float(scaled.max()) >= 2.0**53 or not np.array_equal(scaled, np.round(scaled)):
        return np.zeros(0), 0.0
    ints = scaled.astype(np.int64)
    g = int(np.gcd.reduce(ints[ints > 0]))
    unit = math.ldexp(g, -shift)
    k = (ints // g).astype(np.float64)
    if not np.array_equal(k * unit, loads):
        return np.zeros(0), 0.0
    return k, unit


@dataclass(frozen=True)
class Problem:
    """The cost function network: one variable per active attribute (its atoms), unary costs for the
    queries constraining one attribute, and the boxes of the others (deduplicated) with their weights.

    ``box_member[j][a, k]``: box ``k`` allows atom ``a`` of attribute ``j``; ``box_constrained[j, k]``:
    box ``k`` constrains attribute ``j`` at all. ``constant`` is the weight of queries covering every row.
    """

    sizes: list[int]
    unary: list[IntArray]
    box_weight: IntArray
    box_member: list[BoolArray]
    box_constrained: BoolArray
    constant: int
    total: int


def build(tables: Sequence[AtomTable], weights: IntArray) -> Problem:
    """The network for integer ``weights`` (one per live query)."""
    sizes = [t.size for t in tables]
    keep = np.flatnonzero(weights > 0)
    stacked = np.concatenate([t.member[:, keep] for t in tables], axis=0)  # (all atoms, queries)
    # Identical coverages are one box with the summed weight.
    _, first, inverse = np.unique(
        np.packbits(stacked.T, axis=1), axis=0, return_index=True, return_inverse=True
    )
    w = np.bincount(inverse.reshape(-1), weights=weights[keep], minlength=first.shape[0])
    w = np.round(w).astype(np.int64)
    cols = keep[first]
    member = [t.member[:, cols] for t in tables]
    constrained = np.array([~m.all(axis=0) for m in member]).reshape(len(tables), -1)
    arity = constrained.sum(axis=0)
    unary = []
    for j, m in enumerate(member):
        single = constrained[j] & (arity == 1)
        unary.append(((~m[:, single]).astype(np.int64) @ w[single]).astype(np.int64))
    multi = arity >= 2
    return Problem(
        sizes=sizes,
        unary=unary,
        box_weight=w[multi],
        box_member=[m[:, multi] for m in member],
        box_constrained=constrained[:, multi],
        constant=int(w[arity == 0].sum()),
        total=int(w.sum()),
    )


@dataclass
class WcspOutcome:
    """Best atom tuple found and its integer load, a safe integer upper bound, and whether proved."""

    cell: tuple[int, ...] | None
    best: int
    upper: int | None
    exact: bool
    failure: str | None = None


def start(
    problem: Problem,
    incumbent: int,
    deadline: float | None,
    *,
    backtracks: int | None = None,
    first: bool = False,
) -> Run | WcspOutcome:
    """Start toulbar2 in a child process that stops by ``deadline``; see the module docstring.

    ``incumbent`` is the integer load of a row already known: only rows at least as good are searched.
    ``backtracks`` caps the search by work rather than time (the same on every machine); a search it
    cuts is reported like one cut by the timer: a safe bound, not exact. ``first``: a decision ("is
    there a row of load at least ``incumbent``?"): the child stops at the first such row, reported
    with ``exact`` False (it need not be the best); a complete search that finds none is exact.
    Returns the running child, or at once an empty outcome when there is too little time to start one.
    """
    seconds = 0.0
    if deadline is not None:
        wait = deadline - _clock.now()
        if wait < STARTUP_SECONDS:
            return WcspOutcome(None, -1, None, False, "too little time")
        # The child stops itself this much before the deadline (wall clock), so that its report is
        # ready when the caller reads it at the deadline.
        seconds = wait - min(_REPORT, 0.05 * wait)
    variable = problem.total - problem.constant
    ub = variable - max(incumbent - problem.constant, 0) + 1
    folder = tempfile.mkdtemp(prefix="overlapdp-wcsp-")
    write(problem, os.path.join(folder, "problem.npz"), ub, seconds, backtracks or 0, first)
    return Run(problem, incumbent, deadline, folder, first)


def write(problem: Problem, path: str, ub: int, seconds: float, backtracks: int, first: bool) -> None:
    """Write the network the child (``_wcsp_worker.py``) reads: the one place its keys are spelled.

    ``ub``: toulbar2's initial upper bound (costs at or above it are forbidden); ``seconds``: wall
    seconds the child may search (0: no limit); ``backtracks``: 0 for no limit; ``first``: stop at
    the first row under ``ub``.
    """
    arrays: dict[str, np.ndarray] = {
        "sizes": np.array(problem.sizes, dtype=np.int64),
        "ub": np.array(ub, dtype=np.int64),
        "seconds": np.array(seconds, dtype=np.float64),
        # The real monotonic clock (system-wide) when ``seconds`` was measured: the child subtracts
        # its own start-up, interpreter included.
        "sent": np.array(time.monotonic(), dtype=np.float64),
        "backtracks": np.array(backtracks, dtype=np.int64),
        "first": np.array(int(first), dtype=np.int64),
        "box_weight": problem.box_weight,
        "box_constrained": problem.box_constrained,
    }
    for j, (unary, member) in enumerate(zip(problem.unary, problem.box_member, strict=True)):
        arrays[f"unary{j}"] = unary
        arrays[f"member{j}"] = member
    np.savez(path, **arrays)  # type: ignore[arg-type]


class Run:
    """A running toulbar2 child: poll it, read its outcome, or stop it. Files live in one temp folder."""

    def __init__(
        self, problem: Problem, incumbent: int, deadline: float | None, folder: str, first: bool = False
    ) -> None:
        self._problem = problem
        self._first = first
        self._incumbent = incumbent
        self._deadline = deadline
        self._folder = folder
        self._result: WcspOutcome | None = None
        self._err = open(os.path.join(folder, "stderr"), "wb")  # noqa: SIM115 (closed in _collect())
        # Standard input, output and error are files, so no pipe can fill up and block either side.
        self._proc = subprocess.Popen(
            [
                sys.executable,
                str(_WORKER),
                os.path.join(folder, "problem.npz"),
                os.path.join(folder, "out.json"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            # One thread: the stop signal must reach the thread whose flag toulbar2 reads.
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        )

    def proved(self) -> bool:
        """Whether the child has ended with a proved optimum (never blocks)."""
        outcome = self.poll()
        return outcome is not None and outcome.exact

    def poll(self) -> WcspOutcome | None:
        """The outcome once the child has ended, else None (never blocks)."""
        if self._result is None and self._proc.poll() is not None:
            self._collect()
        return self._result

    def outcome(self, grace: float | None = None) -> WcspOutcome:
        """Wait for the child until the deadline, then ask it to stop (SIGVTALRM: toulbar2 ends its
        search and reports its bound) and wait until ``grace`` (a ``_clock.now()`` time, at the
        deadline when None), then kill it; return what it found."""
        if self._result is None:
            try:
                if self._deadline is None:
                    self._proc.wait()
                elif not self._wait_until(self._deadline):
                    self._proc.send_signal(signal.SIGVTALRM)
                    if not self._wait_until(self._deadline if grace is None else grace):
                        self._proc.kill()
                        self._proc.wait()
            except BaseException:
                self.cancel()  # interrupted while waiting: no orphan solver left running
                raise
            self._collect()
        assert self._result is not None
        return self._result

    def _wait_until(self, at: float) -> bool:
        """Wait for the child to end until ``at``; whether it has ended."""
        try:
            self._proc.wait(timeout=max(at - _clock.now(), 0.0))
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def pid(self) -> int:
        """The child's process id (for tests)."""
        return self._proc.pid

    def cancel(self) -> None:
        """Stop the child (its answer is no longer needed) and remove its files."""
        if self._result is None:
            self._proc.kill()
            self._proc.wait()
            self._collect()

    def _collect(self) -> None:
        self._err.close()
        try:
            self._result = self._read()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _read(self) -> WcspOutcome:
        code = self._proc.returncode
        if code is not None and code < 0:
            return WcspOutcome(None, -1, None, False, "stopped at the deadline")
        if code != 0:
            with open(os.path.join(self._folder, "stderr"), "rb") as fh:
                return WcspOutcome(None, -1, None, False, fh.read().decode(errors="replace").strip()[-500:])
        with open(os.path.join(self._folder, "out.json"), encoding="utf-8") as fh:
            result = json.load(fh)
        problem, incumbent = self._problem, self._incumbent
        variable = problem.total - problem.constant
        dual = float(result["dual"])
        # The minimum uncovered load is an integer >= dual, so at most ``variable - floor(dual)`` is
        # covered; the 1e-6 absorbs a float rendering of an integral dual bound just above it, never more.
        upper = problem.constant + variable - math.floor(dual + 1e-6)
        if result["values"] is None:
            # A complete search that found nothing cheaper than ub proves the incumbent optimal.
            proved = bool(result["complete"])
            return WcspOutcome(None, -1, incumbent if proved else max(upper, incumbent), proved)
        cost = round(float(result["cost"]))
        best = problem.constant + variable - cost
        cell = tuple(int(v) for v in result["values"])
        if self._first:
            return WcspOutcome(cell, best, None, False)  # a row at least as good, not the best
        if result["complete"]:
            return WcspOutcome(cell, best, best, True)
        return WcspOutcome(cell, best, max(upper, best), upper <= best)
