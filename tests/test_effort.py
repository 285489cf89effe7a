"""The effort limit (issue 13 item 5; DESIGN.md, the effort limit): one deadline from the call, every
search stopping at its first clock check past it with a safe bound, the same stages with or without a
limit, and toulbar2's child process stopped at the deadline.

The deadline is driven by replacing ``overlapdp.overlap._clock.now`` (no sleeping, no timing
assertion): the same on a fast or a slow machine. Truth comes from brute force over the rows
(``brute_force_overlap``), never from the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from overlapdp.overlap import _clock, brute_force_overlap, max_overlap, wcsp
from overlapdp.overlap import boxes as box_route
from overlapdp.overlap import engine as engine_mod
from overlapdp.overlap._compiled import compile_workload
from overlapdp.overlap._gridbranch import Split, choose_split, compress, grid_branch, kept_tables
from overlapdp.overlap.bounds import colouring_bound
from overlapdp.overlap.branch import atom_tables, branch_and_bound
from overlapdp.overlap.exactness import exact_branch
from overlapdp.query import PredicateQuery
from overlapdp.samples import adult_schema
from overlapdp.schema import CategoricalAttribute, IndexSet, IntAttribute, Schema
from support.marks import slow_after

DEADLINE = 1.0  # in the stepped clock's time


class SteppedClock:
    """Reads 0.0 for the first ``n`` reads, then 1e9: past any deadline from then on. Counts the
    reads made after the jump (``late``): a search that stops at its first check past the deadline
    reads it once more."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads = 0
        self.late = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads > self.n:
            self.late += 1
            return 1e9
        return 0.0


def _workload(seed: int, t: int = 40, *, boxes: bool = False) -> list[PredicateQuery]:
    """``t`` random queries on 4 attributes of 5-6 values (value sets, or ranges only with ``boxes``),
    1-3 attributes each: small enough for brute force, not trivial for the searches."""
    schema = Schema(
        (
            IntAttribute("a", 0, 5),
            IntAttribute("b", 0, 5),
            CategoricalAttribute("c", tuple("uvwxy")),
            IntAttribute("d", 0, 4),
        )
    )
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        for name in rng.choice(schema.names, size=int(rng.integers(1, 4)), replace=False).tolist():
            size = schema.attribute(name).size
            if boxes or rng.random() < 0.5:
                lo, hi = sorted(rng.integers(0, size, 2).tolist())
                covs[name] = IndexSet.interval(lo, hi + 1)
            else:
                covs[name] = IndexSet.from_indices(
                    rng.choice(size, size=int(rng.integers(1, size)), replace=False)
                )
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


def _truth(queries: list[PredicateQuery], weights: list[float]) -> float:
    return float(brute_force_overlap(queries, weights, "sum").value)


def _weights(t: int, seed: int) -> list[float]:
    return np.random.default_rng(seed).integers(1, 9, t).astype(float).tolist()


def _prepared(queries: list[PredicateQuery], weights: list[float]) -> tuple[Any, Any, Any, np.ndarray]:
    c = compile_workload(queries, queries[0].schema)
    tables = atom_tables(c)
    loads = np.asarray(weights, dtype=float)[c.live]
    return c, compress(c, tables), kept_tables(tables), loads


def _load_at(queries: list[PredicateQuery], weights: list[float], row: tuple[int, ...]) -> float:
    return float(sum(w for q, w in zip(queries, weights, strict=True) if q.covers(row)))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 20])
@pytest.mark.parametrize("seed", slow_after([0, 1]))
@pytest.mark.parametrize("search", ["branch", "gridbranch", "boxes", "exact_branch", "colouring"])
def test_each_search_stops_at_its_first_check_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch, search: str, seed: int, n: int
) -> None:
    """Each search reads the clock at most once past the deadline (the check that stops it) and
    returns a safe bound: best <= truth <= upper; exact only when it finished before."""
    queries = _workload(seed, boxes=search == "boxes")
    weights = _weights(len(queries), seed)
    truth = _truth(queries, weights)
    c, c2, t2, loads = _prepared(queries, weights)
    clock = SteppedClock(n)
    monkeypatch.setattr(_clock, "now", clock)
    if search == "branch":
        out = branch_and_bound(c2, t2, loads, deadline=DEADLINE, rel=0.0)
        best, upper, exact, cell = out.best, out.upper, out.exact, out.cell
    elif search == "gridbranch":
        split = choose_split(c2, loads, 64)
        if split is None or not split.rest:
            split = Split([0, 1], [2, 3])
        out = grid_branch(c2, t2, loads, split, deadline=DEADLINE, rel=0.0)
        best, upper, exact, cell = out.best, out.upper, out.exact, out.cell
    elif search == "boxes":
        assert box_route.applies(c)
        bo = box_route.max_depth(c, np.asarray(weights, dtype=float), DEADLINE)
        best, upper, exact, cell = bo.best, bo.upper, bo.exact, bo.cell
    elif search == "exact_branch":
        nums = [int(w) for w in loads]
        found = exact_branch(t2, loads, nums, 0, 0.0, 0, deadline=DEADLINE)
        # Past the deadline it gives up (None); otherwise it is the exact maximum.
        assert found is None or found[1] == truth
        # It also reads the clock once at its start (for its own cap, EXACT_SECONDS).
        assert clock.late <= (2 if n == 0 else 1)
        assert n > 0 or found is None
        return
    else:
        col = colouring_bound(t2, loads, DEADLINE)
        assert col is None or col >= truth
        assert clock.late <= 1
        return
    assert clock.late <= 1
    # Cut short only by the deadline (these calls set no node limit).
    assert exact or clock.late == 1
    if cell is not None:
        row = (c if search == "boxes" else c2).row(cell)
        assert _load_at(queries, weights, row) == best
    assert best <= truth <= upper
    assert exact == (exact and best == truth == upper)


@pytest.mark.parametrize("n", [0, 3, 10, 40, 200])
@pytest.mark.parametrize("algorithm", ["auto", "branch", "gridbranch", "lpbranch", "milp", "boxes"])
def test_max_overlap_past_the_deadline_is_a_safe_bound(
    monkeypatch: pytest.MonkeyPatch, algorithm: Any, n: int
) -> None:
    """Whichever stage the deadline falls in: lower <= truth <= value, the witness carries ``lower``,
    exact only if the optimum was proved, and few clock reads after the deadline (each later stage
    checks once and is skipped)."""
    queries = _workload(7, 60, boxes=algorithm == "boxes")
    weights = _weights(len(queries), 7)
    truth = _truth(queries, weights)
    clock = SteppedClock(n + 1)  # the first read fixes the deadline at the call
    monkeypatch.setattr(_clock, "now", clock)
    r = max_overlap(queries, weights, "sum", effort=DEADLINE, algorithm=algorithm)
    assert float(r.lower) <= truth <= float(r.value)
    assert r.witness_row is not None and _load_at(queries, weights, r.witness_row) == float(r.lower)
    assert not r.exact or float(r.value) == truth
    if n == 0 and algorithm in ("gridbranch", "milp"):
        assert not r.exact  # past the deadline from the start: no search ran
    assert clock.late <= 8


@pytest.mark.parametrize("n", [1, 4, 10, 16, 40])
def test_a_cut_search_returns_the_best_bound_found_not_the_count_of_every_query(
    monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """Issue 22: cut while the tables are built or just after, the answer is the tables' bound (per
    attribute and the assignment bound, MATH.md 2.7.1), well below the count of every query, and never
    below the exact maximum."""
    queries = _adult_mixed(300, 21)
    truth = max_overlap(queries).value  # 149
    clock = SteppedClock(n + 1)
    monkeypatch.setattr(_clock, "now", clock)
    r = max_overlap(queries, effort=DEADLINE)
    assert truth <= r.value < 0.95 * len(queries)
    if n >= 16:  # every attribute tabulated: the assignment bound (172 here), not the count (300)
        assert r.value <= 1.2 * truth


def test_stage_time_limits_do_not_depend_on_the_effort_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 13: a 0.9 s workload took 3.4 s with a 30 s limit, 12.4 s with 120 s): HiGHS's
    first try got a share of the limit, so a longer limit made it longer. Its time limit must be its
    own cap, the same with no limit and with a generous one."""
    queries = _workload(3, 60)
    seen: dict[Any, list[float | None]] = {}
    real = engine_mod.solve_milp

    def record(key: Any) -> Any:
        def solve(tables: Any, loads: Any, time_limit: float | None, **kw: Any) -> Any:
            seen.setdefault(key, []).append(time_limit)
            return real(tables, loads, time_limit, **kw)

        return solve

    monkeypatch.setattr(_clock, "now", lambda: 0.0)  # frozen: the time limits are the caps exactly
    for effort in (None, 30.0, 120.0):
        monkeypatch.setattr(engine_mod, "solve_milp", record(effort))
        r = max_overlap(queries, _weights(60, 3), "sum", effort=effort, algorithm="milp")
        assert r.exact
    # Forced HiGHS runs "to the deadline": without a limit, none.
    assert seen[None] == [None]
    auto: dict[Any, list[float | None]] = {}
    real_lp = engine_mod._lp_maximum

    def record_lp(key: Any) -> Any:
        def solve(tables: Any, loads: Any, until: float | None, stop: Any = None) -> Any:
            seen.setdefault(key, []).append(until)
            return real_lp(tables, loads, until, stop)

        return solve

    for effort in (None, 30.0, 120.0):
        seen.clear()
        monkeypatch.setattr(engine_mod, "_lp_maximum", record_lp(effort))
        # Value sets on 14 attributes (no grid fits): the LP branch and bound's stage comes first (and
        # proves it), with its own cap as its deadline (the frozen clock reads 0).
        r = max_overlap(_adult_mixed(300, 15), None, "count", effort=effort)
        assert r.exact
        auto[effort] = seen.get(effort, [])
    assert auto[None] == [engine_mod.LPBRANCH_SECONDS]
    assert auto[None] == auto[30.0] == auto[120.0]
    # Wide and sparse (ranges on 3 of 40 attributes): HiGHS's first try is the main search, with its
    # own long cap (a restart after 5 s left the 10^200-row shape unproved in 30 s).
    sparse: dict[Any, list[float | None]] = {}
    for effort in (None, 120.0, 300.0):
        seen.clear()
        monkeypatch.setattr(engine_mod, "solve_milp", record(effort))
        r = max_overlap(_wide_sparse(40, 60, 3), None, "count", effort=effort)
        assert r.exact and "milp" in r.algorithm
        sparse[effort] = seen.get(effort, [])
    assert sparse[None] == [engine_mod.SPARSE_MILP_SECONDS]
    assert sparse[None] == sparse[120.0] == sparse[300.0]
    # Under a shorter limit it ends a share of the time before the deadline, so that its best row and
    # bound come back (past the deadline it would be abandoned: nothing found, the trivial bound).
    seen.clear()
    monkeypatch.setattr(engine_mod, "solve_milp", record("cut"))
    assert max_overlap(_wide_sparse(40, 60, 3), None, "count", effort=30.0).exact
    assert seen["cut"][0] == pytest.approx(30.0 * (1 - engine_mod.SPARSE_MILP_MARGIN))


def _wide_sparse(d: int, t: int, seed: int) -> list[PredicateQuery]:
    """``t`` ranges on 3 of ``d`` attributes of 100 values each (the paper's sparse shape)."""
    schema = Schema(tuple(IntAttribute(f"x{j}", 0, 99) for j in range(d)))
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        covs = {}
        for j in rng.choice(d, size=3, replace=False).tolist():
            lo, hi = sorted(rng.integers(0, 100, 2).tolist())
            covs[f"x{j}"] = IndexSet.interval(lo, hi + 1)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


BATTERY = [
    ("value sets, sum", lambda: (_workload(11, 50), _weights(50, 11), "sum")),
    ("value sets, count", lambda: (_workload(12, 80), None, "count")),
    ("boxes, sum", lambda: (_workload(13, 70, boxes=True), _weights(70, 13), "sum")),
    ("value sets, l2", lambda: (_workload(14, 40), _weights(40, 14), "l2")),
    ("adult, 300 mixed", lambda: (_adult_mixed(300, 15), None, "count")),
]


def _adult_mixed(t: int, seed: int) -> list[PredicateQuery]:
    """Value sets and ranges on 1-3 of Adult's 14 attributes (the shape of issue 13's workload)."""
    schema = adult_schema()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        for name in rng.choice(list(schema.names), size=int(rng.integers(1, 4)), replace=False).tolist():
            size = schema.attribute(name).size
            if rng.random() < 0.5 and size > 2:
                covs[name] = IndexSet.from_indices(
                    rng.choice(size, size=int(rng.integers(1, size)), replace=False)
                )
            else:
                lo, hi = sorted(rng.integers(0, size, 2).tolist())
                covs[name] = IndexSet.interval(lo, hi + 1)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


@pytest.mark.parametrize("algorithm", ["auto", "branch", "gridbranch", "milp"])
@pytest.mark.parametrize("case", BATTERY, ids=[b[0] for b in BATTERY])
def test_a_generous_limit_gives_the_answer_without_a_limit(case: Any, algorithm: Any) -> None:
    """Same value, witness, exactness and route with ``effort=1e4`` as with none (real clock)."""
    queries, weights, comp = case[1]()
    if algorithm != "auto" and len(queries) > 100:
        pytest.skip("forced searches only on the small workloads")
    free = max_overlap(queries, weights, comp, algorithm=algorithm)
    limited = max_overlap(queries, weights, comp, effort=1e4, algorithm=algorithm)
    assert free.exact and limited.exact
    assert float(limited.value) == float(free.value)
    assert limited.witness_row == free.witness_row
    assert limited.algorithm == free.algorithm
    if len(queries) <= 100:
        w = [1.0] * len(queries) if weights is None else weights
        expected = float(brute_force_overlap(queries, w, comp).value)  # type: ignore[arg-type]
        assert float(free.value) == pytest.approx(expected, rel=1e-12)


def _hard_problem() -> wcsp.Problem:
    """toulbar2's network for 2 000 value sets and ranges on Adult's 14 attributes (seconds to solve)."""
    queries = _adult_mixed(2000, 2024)
    c = compile_workload(queries, queries[0].schema)
    tables = kept_tables(atom_tables(c))
    integral = wcsp.integral_loads(np.ones(c.live.size))
    assert integral is not None
    return wcsp.build(tables, integral[0])


@pytest.mark.skipif(not wcsp.available(), reason="toulbar2 (the 'solvers' extra) is not installed")
def test_the_solver_child_is_terminated_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent reads the child's outcome once the deadline has passed: the child is stopped (asked,
    then killed at the end of the grace) and no process is left; the outcome is not exact."""
    clock = SteppedClock(1)  # start() reads 0.0 (a deadline 10 s away); every later read is past it
    monkeypatch.setattr(_clock, "now", clock)
    run = wcsp.start(_hard_problem(), 0, 10.0)
    assert isinstance(run, wcsp.Run)
    out = run.outcome(10.5)
    assert run._proc.returncode is not None  # reaped: not running
    with pytest.raises(ProcessLookupError):
        os.kill(run.pid, 0)
    assert not out.exact


@pytest.mark.skipif(not wcsp.available(), reason="toulbar2 (the 'solvers' extra) is not installed")
def test_the_solver_child_stops_itself_on_the_wall_clock(tmp_path: Path) -> None:
    """Given 0.3 s (wall), the worker stops toulbar2 through its timer handler on SIGALRM and
    reports a dual bound, without being killed (before, only a CPU-time timer of whole seconds)."""
    pb = _hard_problem()
    # the writer the parent uses, so the child reads every key it expects
    wcsp.write(pb, str(tmp_path / "problem.npz"), pb.total - pb.constant + 1, 0.3, 0, first=False)
    worker = Path(wcsp.__file__).with_name("_wcsp_worker.py")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(worker), str(tmp_path / "problem.npz"), str(tmp_path / "out.json")],
        env=env,
        timeout=120,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["complete"] is False
    assert float(result["dual"]) >= 0.0


def test_a_peeks_searches_share_one_effort_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generic-mode peek runs two searches (the held maximum, then the peeked query's coverage); the
    index's effort limit holds for the peek as a whole: the second search gets only the time the first
    left (each search here "takes" 0.7 of a 1.0 limit on a clock the test drives). The results stay
    exact (nothing was cut) and equal brute force."""
    from overlapdp.overlap import index as index_mod
    from overlapdp.overlap.index import OverlapIndex

    queries = _workload(3, t=12)
    schema = queries[0].schema
    idx = OverlapIndex(schema, "sum", dense_limit=1)  # generic mode: peeks search
    for i, q in enumerate(queries[:-1]):
        idx.insert(q.with_id(f"q{i}"), 1.0, defer=True)
    clock = [0.0]
    monkeypatch.setattr(_clock, "now", lambda: clock[0])
    calls: list[tuple[float, float | None]] = []
    real = index_mod.max_overlap

    def timed(*args: Any, **kwargs: Any) -> Any:
        calls.append((clock[0], kwargs.get("effort")))
        out = real(*args, **kwargs)
        clock[0] += 0.7
        return out

    monkeypatch.setattr(index_mod, "max_overlap", timed)
    idx.effort = 1.0
    got = idx.peek(queries[-1], 1.0)
    assert len(calls) == 2
    (t1, e1), (t2, e2) = calls
    assert e1 == 1.0 and t1 == 0.0
    assert e2 is not None and t2 + e2 <= 1.0 + 1e-12  # the peek's deadline, not a fresh 1.0
    assert got.exact
    assert float(got.value) == float(brute_force_overlap(queries, [1.0] * len(queries)).value)


@pytest.mark.slow
def test_a_process_exits_cleanly_after_an_effort_limit_abandoned_a_solver() -> None:
    """A search cut by its effort limit abandons a running HiGHS solve (milp.py); the process must still
    exit cleanly. With the abandoned solve on a daemon thread, the interpreter's exit tore it down while
    HiGHS's own threads ran: "terminate called without an active exception", exit status 134 (about
    two runs in three on this workload), after a correct answer had been printed."""
    script = (
        "import numpy as np\n"
        "from overlapdp.overlap import max_overlap\n"
        "from overlapdp.query import PredicateQuery\n"
        "from overlapdp.samples import adult_schema\n"
        "from overlapdp.schema import IndexSet\n"
        "s = adult_schema(); rng = np.random.default_rng(1); qs = []\n"
        "for i in range(3000):\n"
        "    covs = {}\n"
        "    for a in rng.choice(len(s.attributes), size=int(rng.integers(1, 5)), replace=False):\n"
        "        at = s.attributes[int(a)]\n"
        "        if at.size > 4 and rng.random() < 0.5:\n"
        "            lo = int(rng.integers(0, at.size - 1)); covs[at.name] = IndexSet.interval(lo, min(at.size, lo + 1 + int(rng.integers(1, max(2, at.size // 3)))))\n"
        "        else:\n"
        "            covs[at.name] = IndexSet.from_indices(rng.choice(at.size, size=min(at.size, 3), replace=False).tolist())\n"
        "    qs.append(PredicateQuery.from_coverages(s, covs).with_id(f'q{i}'))\n"
        "r = max_overlap(qs, effort=1.0)\n"
        "print('answered', r.exact, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=120, capture_output=True)
    assert b"answered" in done.stdout
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"terminate called" not in done.stderr


@pytest.mark.parametrize("algorithm", ["auto", "milp"])
def test_an_infinite_effort_is_no_limit(algorithm: str) -> None:
    """``effort=inf`` (accepted, as by ``--effort inf``) behaves as no limit: the exact answer of brute
    force, no solver thread left behind (it raised OverflowError in the solver thread's join and left
    HiGHS running without a time limit)."""
    import math
    import threading

    queries = _workload(4, t=30)
    got = max_overlap(queries, effort=math.inf, algorithm=algorithm)
    truth = brute_force_overlap(queries, [1.0] * len(queries))
    assert got.exact and float(got.value) == float(truth.value)
    assert not [t for t in threading.enumerate() if t.name == "overlapdp-highs"]
