"""Benchmark of the maximum-overlap engine against baselines measured in the same run (issue 3).

Run from the repository root:

    .venv/bin/python benchmarks/overlap.py            # every row
    .venv/bin/python benchmarks/overlap.py --quick    # smaller baseline caps
    .venv/bin/python benchmarks/overlap.py --quick --only "Adult attrs|float weights"   # issue 22 item 4

Each row: workload, number of queries t, our time (median of a few runs), the baseline and its time
(capped: a ">" means it was stopped at the cap and the ratio is a lower bound), the ratio, whether the
values agree, and the issue's target. Baselines:

- sweep: the numpy difference array (issue 13 item 6), the peer at its best on boxes: +w at each
  box's low corner and -w past its high one (2^d corners by inclusion-exclusion, one np.bincount),
  cumulative sums along each axis, max; over the raw grid when it fits (else the grid compressed to the
  queries' endpoints). Three rows per workload, each side timed interleaved with its peer: "ours arrays
  given" (``max_overlap_boxes``) against "sweep (arrays given)", both on the same numpy arrays built
  before timing; "ours from queries, cached" (``max_overlap`` on query objects compiled before, their
  flat form cached) and "ours from queries, first call" (fresh copies, nothing cached) against "sweep
  (from queries)", which extracts the boxes from the same objects. The "compile" column is overlapdp's
  own ``compile_workload`` timed alone: part of "ours";
- dense: add every query to a numpy array over the raw domain of its attributes, one box at a time
  (exact, O(t * box size)); kept only for value sets (census), which are not boxes;
- graph: the paper's route (Smith et al. 2022): the pairwise-overlap graph (built with numpy: every
  pair of boxes compared at once, value sets by a product of membership tables), then networkx's
  exact maximum clique (exact only for ranges, by Helly; an upper bound for value sets). The issue 22
  box rows ("boxes on 5/8 Adult attrs, <generator>", "value sets on 5 Adult attrs, <generator>",
  generators of tests/support/generators.py ``constrained``) time CPU on both sides
  (``time.process_time``, ours with its toulbar2 children's; ours the median of 3-5 runs) and take the graph route at its best: the
  faster of networkx's branch and bound (``max_weight_clique``) and Bron-Kerbosch enumeration
  (``find_cliques``), each in a child process killed at the cap, graph building included;
- recompute: max_overlap from scratch on every admission (for the incremental index);
- dyadic: for "float weights" rows, ours on the same workload with the epsilons (U[0.01, 1]) rounded
  to multiples of 2^-10, timed interleaved (issue 22: float weights within 2x of dyadic ones).

Numbers are noisy on the shared 2-core machine; rerun decisive rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import multiprocessing
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from overlapdp.overlap import OverlapIndex, max_overlap, max_overlap_boxes
from overlapdp.overlap._compiled import compile_workload
from overlapdp.query import PredicateQuery
from overlapdp.samples import adult_schema
from overlapdp.schema import CategoricalAttribute, IndexSet, IntAttribute, Schema
from support.generators import BOX_KINDS, constrained

ADULT = adult_schema()
ADULT_CATEGORICAL = {
    "workclass",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "native-country",
    "income>50K",
}


class Capped(Exception):
    """A baseline ran past its time cap (``cpu``: the CPU seconds it had used, when measured)."""

    def __init__(self, cpu: float | None = None) -> None:
        super().__init__(cpu)
        self.cpu = cpu


# -- workloads ------------------------------------------------------------------------------------


def random_ranges(
    schema: Schema, names: Sequence[str], t: int, rng: np.random.Generator
) -> list[PredicateQuery]:
    """Each query: a random range on each attribute with probability 0.7 (else no condition)."""
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        for n in names:
            if rng.random() < 0.7:
                size = schema.attribute(n).size
                a, b = sorted(rng.integers(0, size, 2).tolist())
                covs[n] = IndexSet.interval(a, b + 1)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


def mixed(
    names: Sequence[str], t: int, rng: np.random.Generator, per_query: tuple[int, int]
) -> list[PredicateQuery]:
    """Random value sets on categorical attributes and ranges on ordered ones, 1-3 attributes a query."""
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        k = int(rng.integers(per_query[0], per_query[1] + 1))
        for n in rng.choice(list(names), size=min(k, len(names)), replace=False).tolist():
            size = ADULT.attribute(n).size
            if n in ADULT_CATEGORICAL:
                m = int(rng.integers(1, max(2, size)))
                covs[n] = IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
            else:
                a, b = sorted(rng.integers(0, size, 2).tolist())
                covs[n] = IndexSet.interval(a, b + 1)
        out.append(PredicateQuery.from_coverages(ADULT, covs, id=f"q{i}"))
    return out


def value_sets(names: Sequence[str], t: int, rng: np.random.Generator) -> list[PredicateQuery]:
    """Each query constrains each attribute with probability 0.7: a random non-empty proper value set
    on categorical attributes, a random range on ordered ones (issue 13: value sets over few atoms)."""
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        for n in names:
            if rng.random() < 0.7:
                size = ADULT.attribute(n).size
                if n in ADULT_CATEGORICAL:
                    m = int(rng.integers(1, size))
                    covs[n] = IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
                else:
                    a, b = sorted(rng.integers(0, size, 2).tolist())
                    covs[n] = IndexSet.interval(a, b + 1)
        out.append(PredicateQuery.from_coverages(ADULT, covs, id=f"q{i}"))
    return out


def census(t: int, rng: np.random.Generator) -> tuple[Schema, list[PredicateQuery]]:
    """A 64-value race attribute (6 race bits) queried by "includes race bit k", crossed with age ranges
    and sex: the non-interval subsets of the US census redistricting tables."""
    schema = Schema(
        (
            CategoricalAttribute("race", tuple(f"r{v:06b}" for v in range(64))),
            IntAttribute("age", 0, 84),
            CategoricalAttribute("sex", ("f", "m")),
        )
    )
    out = []
    for i in range(t):
        covs: dict[str, IndexSet] = {}
        if rng.random() < 0.8:
            bit = int(rng.integers(0, 6))
            covs["race"] = IndexSet.from_indices(v for v in range(64) if v >> bit & 1)
        a, b = sorted(rng.integers(0, 85, 2).tolist())
        covs["age"] = IndexSet.interval(a, b + 1)
        if rng.random() < 0.5:
            covs["sex"] = IndexSet.interval(int(rng.integers(0, 2)), 0)
            covs["sex"] = IndexSet.from_indices([int(rng.integers(0, 2))])
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return schema, out


def one_d(t: int, n: int, rng: np.random.Generator) -> tuple[Schema, list[PredicateQuery]]:
    schema = Schema((IntAttribute("x", 0, n - 1),))
    lo = rng.integers(0, n, t)
    hi = rng.integers(0, n, t)
    a, b = np.minimum(lo, hi), np.maximum(lo, hi) + 1
    qs = [
        PredicateQuery(schema, ((0, IndexSet.interval(int(x), int(y))),), id=f"q{i}")
        for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True))
    ]
    return schema, qs


def prefixes(n: int) -> tuple[Schema, list[PredicateQuery]]:
    schema = Schema((IntAttribute("x", 0, n - 1),))
    return schema, [
        PredicateQuery(schema, ((0, IndexSet.interval(0, k)),), id=f"p{k}") for k in range(1, n + 1)
    ]


def all_ranges(n: int) -> tuple[Schema, list[PredicateQuery]]:
    schema = Schema((IntAttribute("x", 0, n - 1),))
    return schema, [
        PredicateQuery(schema, ((0, IndexSet.interval(a, b)),), id=f"r{a}_{b}")
        for a in range(n)
        for b in range(a + 1, n + 1)
        if not (a == 0 and b == n)
    ]


# -- baselines ------------------------------------------------------------------------------------


def dense_baseline(queries: Sequence[PredicateQuery], cap: float) -> float:
    """Exact: a numpy array over the raw domain of the active attributes, one box add per query."""
    schema = queries[0].schema
    active = sorted({p for q in queries for p in q.active})
    sizes = [schema.attributes[p].size for p in active]
    if int(np.prod(sizes)) > 1 << 26:
        raise Capped("domain too large for a dense array")
    load = np.zeros(sizes)
    start = time.perf_counter()
    for i, q in enumerate(queries):
        if q.is_contradiction:
            continue
        load[np.ix_(*(q.coverage(p).to_array() for p in active))] += 1.0
        if i % 64 == 0 and time.perf_counter() - start > cap:
            raise Capped
    return float(load.max())


@dataclass
class BoxArrays:
    """Boxes ``[lo, hi)`` per query and attribute (t x d, unconstrained = the whole attribute)."""

    lo: np.ndarray
    hi: np.ndarray
    sizes: tuple[int, ...]


def boxes_from_queries(queries: Sequence[PredicateQuery]) -> BoxArrays:
    """Extract the boxes from the PredicateQuery objects (one Python loop, as compile_workload does).

    Contradictions are dropped; a query with a non-interval value set is refused (not a box)."""
    schema = queries[0].schema
    active = sorted({p for q in queries for p in q.active})
    col = {p: j for j, p in enumerate(active)}
    sizes = tuple(schema.attributes[p].size for p in active)
    rows: list[int] = []
    cols: list[int] = []
    los: list[int] = []
    his: list[int] = []
    void = np.zeros(len(queries), dtype=bool)
    for i, q in enumerate(queries):
        for pos, cov in q.constraints:
            ivs = cov.intervals
            if not ivs:
                void[i] = True
            elif len(ivs) > 1:
                raise ValueError(f"query {q.id} is not a box")
            else:
                rows.append(i)
                cols.append(col[pos])
                los.append(ivs[0][0])
                his.append(ivs[0][1])
    lo = np.zeros((len(queries), len(active)), dtype=np.int64)
    hi = np.tile(np.asarray(sizes, dtype=np.int64), (len(queries), 1))
    r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    lo[r, c] = los
    hi[r, c] = his
    return BoxArrays(lo[~void], hi[~void], sizes)


def sweep_depth(boxes: BoxArrays, weights: np.ndarray | None = None) -> float:
    """Maximum weighted depth of the boxes by a d-D difference array (exact for integer weights).

    +w at each low corner and -w at each high corner, signed by inclusion-exclusion over the 2^d
    corners, all added by one np.bincount; cumulative sums along each axis give the depth of every cell.
    Over the raw grid when it fits, else over the grid compressed to the boxes' endpoints."""
    lo, hi = boxes.lo, boxes.hi
    t, d = lo.shape
    # Counts: integer bincounts (no weight array), several times faster than float weights.
    w = np.ones(t, dtype=np.int64) if weights is None else weights
    if d == 0 or t == 0:
        return float(w.sum()) if t else 0.0
    shape = tuple(n + 1 for n in boxes.sizes)
    # The raw grid whenever it fits: measured faster than compressing (np.unique + searchsorted) even
    # for 10 000 ranges on 10^6 values.
    if float(np.prod(shape, dtype=np.float64)) > 1 << 26:
        # Compress each axis to the boxes' endpoints (the depth is constant between them).
        cols_lo, cols_hi, comp = [], [], []
        for j in range(d):
            cuts = np.unique(np.concatenate([lo[:, j], hi[:, j]]))
            cols_lo.append(np.searchsorted(cuts, lo[:, j]))
            cols_hi.append(np.searchsorted(cuts, hi[:, j]))
            comp.append(cuts.size)
        lo, hi, shape = np.stack(cols_lo, axis=1), np.stack(cols_hi, axis=1), tuple(comp)
        if int(np.prod(shape, dtype=np.float64)) > 1 << 26:
            raise Capped("compressed grid too large for a difference array")
    if d == 1:
        if weights is None:
            diff = np.bincount(lo[:, 0], None, shape[0]) - np.bincount(hi[:, 0], None, shape[0])
        else:
            diff = np.bincount(lo[:, 0], w, shape[0]) - np.bincount(hi[:, 0], w, shape[0])
        return float(np.cumsum(diff).max())
    flat, signed = [], []
    for corner in itertools.product((0, 1), repeat=d):
        idx = tuple(hi[:, j] if c else lo[:, j] for j, c in enumerate(corner))
        flat.append(np.ravel_multi_index(idx, shape))
        signed.append(w if sum(corner) % 2 == 0 else -w)
    grid = np.bincount(np.concatenate(flat), np.concatenate(signed), int(np.prod(shape))).reshape(shape)
    for axis in range(d):
        np.cumsum(grid, axis=axis, out=grid)
    return float(grid.max())


def sweep_baseline(queries: Sequence[PredicateQuery], cap: float) -> float:
    """The difference-array sweep from the PredicateQuery objects (extraction included)."""
    return sweep_depth(boxes_from_queries(queries))


def sweep_given(boxes: BoxArrays) -> Callable[[Sequence[PredicateQuery], float], float]:
    """The difference-array sweep on boxes extracted before timing (the same input as a numpy peer)."""
    return lambda queries, cap: sweep_depth(boxes)


def _graph_clique(queries: Sequence[PredicateQuery], out: Any) -> None:
    g = overlap_graph(queries)
    clique, _ = nx.max_weight_clique(g, weight=None)
    out.put(float(len(clique)))


def graph_baseline(queries: Sequence[PredicateQuery], cap: float) -> float:
    """The paper's route: pairwise-overlap graph (numpy pairs, :func:`overlap_matrix`), exact maximum
    clique (networkx), in a child process that is killed at the cap (the clique search cannot be
    interrupted otherwise)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_graph_clique, args=(queries, out))
    proc.start()
    proc.join(cap)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise Capped
    return float(out.get(timeout=5))


def overlap_matrix(queries: Sequence[PredicateQuery]) -> np.ndarray:
    """The pairwise-overlap graph as a boolean matrix, in numpy, the fastest way measured: boxes by
    comparing the extracted ``lo``/``hi`` arrays of every pair (broadcast, one attribute at a time);
    value sets by one matrix product of 0/1 membership tables per active attribute (two queries meet
    when their sets meet on every attribute)."""
    t = len(queries)
    try:
        b = boxes_from_queries(queries)
    except ValueError:
        b = None
    if b is not None and b.lo.shape[0] == t:
        adj = np.ones((t, t), dtype=bool)
        for j in range(b.lo.shape[1]):
            lo, hi = b.lo[:, j], b.hi[:, j]
            adj &= (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
        np.fill_diagonal(adj, False)
        return adj
    schema = queries[0].schema
    adj = np.ones((t, t), dtype=bool)
    void = np.array([q.is_contradiction for q in queries], dtype=bool)
    adj[void, :] = False
    adj[:, void] = False
    active = sorted({p for q in queries for p in q.active})
    for p in active:
        member = np.ones((t, schema.attributes[p].size), dtype=np.float32)
        for i, q in enumerate(queries):
            cov = dict(q.constraints).get(p)
            if cov is not None:
                member[i] = 0.0
                for a, e in cov.intervals:
                    member[i, a:e] = 1.0
        adj &= (member @ member.T) > 0.5
    np.fill_diagonal(adj, False)
    return adj


def overlap_graph(queries: Sequence[PredicateQuery]) -> nx.Graph:
    """The networkx graph of :func:`overlap_matrix` (edges added from the matrix's upper triangle)."""
    adj = overlap_matrix(queries)
    g = nx.Graph()
    g.add_nodes_from(range(len(queries)))
    rows, cols = np.nonzero(np.triu(adj, 1))
    g.add_edges_from(zip(rows.tolist(), cols.tolist(), strict=True))
    return g


def _clique_child(queries: Sequence[PredicateQuery], how: str, out: Any) -> None:
    start = time.process_time()
    g = overlap_graph(queries)
    if how == "bron-kerbosch":
        size = max((len(c) for c in nx.find_cliques(g)), default=0)
    else:
        clique, _ = nx.max_weight_clique(g, weight=None)
        size = len(clique)
    out.put((float(size), time.process_time() - start))


CLIQUES = ("max_weight_clique", "bron-kerbosch")


def _child_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def graph_cpu(queries: Sequence[PredicateQuery], cap: float, how: str) -> tuple[float, float]:
    """The paper's route at its best: the overlap graph from numpy pairs, networkx's exact maximum clique
    (``how``: branch and bound or Bron-Kerbosch enumeration), in a child process killed once it has
    used ``cap`` seconds of CPU (or after ``6 * cap`` seconds of wall time on a loaded machine; the
    :class:`Capped` then carries the CPU it had used, a lower bound of its time). Returns the clique
    size and the child's CPU time (building the graph included)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_clique_child, args=(queries, how, out))
    proc.start()
    assert proc.pid is not None
    start = time.perf_counter()
    used = 0.0
    while proc.is_alive():
        proc.join(0.1)
        try:
            used = _child_cpu(proc.pid)
        except (OSError, IndexError, ValueError):
            continue  # exited between the two calls
        if proc.is_alive() and (used >= cap or time.perf_counter() - start >= 6 * cap):
            proc.kill()
            proc.join()
            raise Capped(used)
    value, cpu = out.get(timeout=5)
    return float(value), float(cpu)


def cpu_now() -> float:
    """CPU seconds of this process (every thread) and of its ended children: toulbar2 runs in a child
    process, whose work counts on our side."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def cpu_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median CPU time (:func:`cpu_now`: this process and the solver children it ran) of ``runs`` calls."""
    times, out = [], None
    for _ in range(runs):
        start = cpu_now()
        out = fn()
        times.append(cpu_now() - start)
    return statistics.median(times), out


def box_row(
    name: str,
    queries: Sequence[PredicateQuery],
    cap: float,
    *,
    runs: int = 3,
    ratio_target: float | None = None,
    seconds_target: float | None = None,
    upper_only: bool = False,
) -> Row:
    """One row of the box / value-set table, CPU seconds on both sides: ours (median of ``runs``)
    against the graph route at its best (the faster of the two clique searches, each capped)."""
    ours, res = cpu_time(lambda: max_overlap(queries), runs)
    value = float(res.value)
    best: tuple[float, float, str] | None = None
    capped_cpu = 0.0
    for how in CLIQUES:
        try:
            bv, bt = graph_cpu(queries, cap if best is None else min(cap, 4 * best[1] + 1), how)
        except Capped as e:
            capped_cpu = max(capped_cpu, e.cpu or 0.0)
            continue
        if best is None or bt < best[1]:
            best = (bv, bt, how)
    exact = "" if res.exact else f" [not exact: {float(res.lower):g}..{float(res.upper):g}]"
    if best is None:
        # Both searches stopped: the most CPU either had used is a lower bound of the route's time.
        base_time, capped, equal, label = capped_cpu, True, "n/a (capped)", "graph (capped)"
    else:
        bv, base_time, how = best
        capped = False
        label = f"graph ({how})"
        if upper_only:
            equal = "yes" if bv >= value - 1e-9 else f"NO ({value:g} > {bv:g})"
            equal += " (graph: upper bound on sets)"
        else:
            equal = "yes" if abs(bv - value) < 1e-9 else f"NO ({value:g} vs {bv:g})"
    targets, met = [], res.exact
    if ratio_target is not None:
        targets.append(f">= {ratio_target:g}x")
        met = met and base_time / max(ours, 1e-9) >= ratio_target
    if seconds_target is not None:
        targets.append(f"< {seconds_target:g} s")
        met = met and ours < seconds_target and (capped or ours <= base_time)
    row = Row(
        f"{name} ({res.algorithm}, value {value:g}){exact}",
        len(queries),
        ours,
        label,
        base_time,
        capped,
        equal,
        ", ".join(targets) or "-",
        "yes" if met else "NO",
    )
    progress(row)
    return row


def progress(row: Row) -> None:
    """One measured row on stderr at once (the table comes at the end)."""
    print(f"[{time.strftime('%H:%M:%S')}] {row}", file=sys.stderr, flush=True)


# -- table ----------------------------------------------------------------------------------------


@dataclass
class Row:
    workload: str
    t: int
    ours: float
    baseline: str
    base_time: float | None
    capped: bool
    equal: str
    target: str
    met: str
    compile_time: float | None = None


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def measure(
    name: str,
    queries: Sequence[PredicateQuery],
    baseline: str,
    base_fn: Callable[[Sequence[PredicateQuery], float], float] | None,
    cap: float,
    target: float | None,
    *,
    runs: int = 3,
    effort: float | None = None,
    note_equal: str = "",
    ratio_target: float | None = None,
    base_runs: int = 1,
    time_compile: bool = False,
) -> Row:
    ours, res = median_time(lambda: max_overlap(queries, effort=effort), runs)
    value = float(res.value)
    compile_time = None
    if time_compile:
        schema = queries[0].schema
        compile_time, _ = median_time(lambda: compile_workload(queries, schema), runs)
    base_time: float | None = None
    capped = False
    equal = "-"
    if base_fn is not None:
        start = time.perf_counter()
        try:
            # Fast baselines: median of ``base_runs`` runs, like ours.
            base_time, bv = median_time(lambda: base_fn(queries, cap), base_runs)
            equal = "yes" if abs(bv - value) < 1e-9 else f"NO ({value:g} vs {bv:g})"
        except Capped:
            base_time = time.perf_counter() - start
            capped = True
            equal = "n/a (capped)"
    exact = "" if res.exact else f" [not exact: {float(res.lower):g}..{float(res.upper):g}]"
    tgt = "-" if target is None else f"< {target:g} s"
    met = "-" if target is None else ("yes" if ours < target and res.exact else "NO")
    if ratio_target is not None:
        # Against the baseline in the same run; a capped baseline makes the ratio a lower bound.
        tgt = f">= {ratio_target:g}x"
        ratio = (base_time or 0.0) / max(ours, 1e-9)
        met = "yes" if ratio >= ratio_target and res.exact else "NO"
    return Row(
        f"{name} ({res.algorithm}, value {value:g}){exact}",
        len(queries),
        ours,
        baseline,
        base_time,
        capped,
        equal + note_equal,
        tgt,
        met,
        compile_time,
    )


def interleaved(
    fns: Sequence[Callable[[], Any]], runs: int, setup: Callable[[], None] | None = None
) -> list[float]:
    """Median time of each of ``fns``, run in turn ``runs`` times (``setup`` before each, untimed)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for k, fn in enumerate(fns):
            if setup is not None:
                setup()
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return [statistics.median(ts) for ts in times]


def sweep_rows(name: str, queries: Sequence[PredicateQuery], cap: float, target: float | None) -> list[Row]:
    """Three rows per box workload, each side timed interleaved with its baseline (medians of 7):

    - ours (arrays given): ``max_overlap_boxes`` on the same numpy arrays as the sweep (arrays given);
    - ours (from queries, cached): ``max_overlap`` on query objects whose flat form is already cached
      (a workload compiled before, e.g. a filter's history), against the sweep from the same objects;
    - ours (from queries, first call): on fresh copies of the queries each run (nothing cached; the
      copies are made outside the timing), against the sweep from the same objects.

    The compile column is overlapdp's own ``compile_workload`` alone (cached / cold); part of ours.
    """
    runs = 7
    boxes = boxes_from_queries(queries)
    schema = queries[0].schema
    res = max_overlap(queries)
    value = float(res.value)
    rows: list[Row] = []

    def row(variant: str, r: Any, ours: float, base: str, bt: float, bv: float, ct: float | None) -> Row:
        equal = "yes" if abs(bv - float(r.value)) < 1e-9 and float(r.value) == value else "NO"
        exact = "" if r.exact else " [not exact]"
        tgt = "-" if target is None else f"< {target:g} s"
        met = "-" if target is None else ("yes" if ours < target and r.exact else "NO")
        label = f"{name}, ours {variant} ({r.algorithm}, value {float(r.value):g}){exact}"
        return Row(label, len(queries), ours, base, bt, False, equal, tgt, met, ct)

    arr = max_overlap_boxes(boxes.sizes, boxes.lo, boxes.hi)
    ours, base = interleaved(
        [lambda: max_overlap_boxes(boxes.sizes, boxes.lo, boxes.hi), lambda: sweep_depth(boxes)], runs
    )
    rows.append(row("arrays given", arr, ours, "sweep (arrays given)", base, sweep_depth(boxes), None))
    compile_workload(queries, schema)  # caches every query's flat form
    ours, base, ct = interleaved(
        [
            lambda: max_overlap(queries),
            lambda: sweep_baseline(queries, cap),
            lambda: compile_workload(queries, schema),
        ],
        runs,
    )
    rows.append(row("from queries, cached", res, ours, "sweep (from queries)", base, sweep_depth(boxes), ct))
    fresh: list[list[PredicateQuery]] = []
    used: list[list[PredicateQuery]] = []

    def copies() -> None:
        # Made, and the previous copies freed, outside the timing; replace(): no cached flat form.
        used.clear()
        gc.collect()
        fresh.append([dataclasses.replace(q) for q in queries])

    def cold(fn: Callable[[list[PredicateQuery]], Any]) -> Callable[[], Any]:
        def run() -> Any:
            used.append(fresh.pop())
            return fn(used[-1])

        return run

    ours, base, ct = interleaved(
        [
            cold(lambda qs: max_overlap(qs)),
            cold(lambda qs: sweep_baseline(qs, cap)),
            cold(lambda qs: compile_workload(qs, schema)),
        ],
        runs,
        setup=copies,
    )
    rows.append(
        row("from queries, first call", res, ours, "sweep (from queries)", base, sweep_depth(boxes), ct)
    )
    return rows


def float_rows(
    name: str, queries: Sequence[PredicateQuery], rng: np.random.Generator, runs: int = 5
) -> list[Row]:
    """Issue 22 item 5: ordinary float weights (epsilons drawn from U[0.01, 1]) against the same
    workload with dyadic weights (those epsilons rounded to multiples of 2^-10, where float sums are
    exact), CPU time, from the query objects and from arrays (``max_overlap_boxes``), interleaved."""
    eps = rng.uniform(0.01, 1.0, len(queries))
    dyadic = np.round(eps * 1024) / 1024
    boxes = boxes_from_queries(queries)
    rows: list[Row] = []
    for variant, fn in (
        ("from queries", lambda w: max_overlap(queries, w, "sum")),
        ("arrays given", lambda w: max_overlap_boxes(boxes.sizes, boxes.lo, boxes.hi, w, "sum")),
    ):
        times: dict[str, list[float]] = {"float": [], "dyadic": []}
        res: dict[str, Any] = {}
        for _ in range(runs):
            for label, w in (("float", eps), ("dyadic", dyadic)):
                start = cpu_now()
                res[label] = fn(w)
                times[label].append(cpu_now() - start)
        ours, base = statistics.median(times["float"]), statistics.median(times["dyadic"])
        r, rd = res["float"], res["dyadic"]
        exact = "" if r.exact else " [not exact]"
        rows.append(
            Row(
                f"{name}, float weights, {variant} ({r.algorithm}, value {float(r.value):.6g}){exact}",
                len(queries),
                ours,
                f"ours, dyadic weights ({rd.algorithm})",
                base,
                False,
                "-",
                "within 2x",
                "yes" if ours <= 2 * base and r.exact and rd.exact else "NO",
            )
        )
        progress(rows[-1])
    return rows


def index_row(n_existing: int, n_measured: int, rng: np.random.Generator, cap: float) -> Row:
    names = ["age", "education-num", "hours-per-week"]
    history = random_ranges(ADULT, names, n_existing + n_measured, rng)
    index = OverlapIndex(ADULT, "sum")
    for q in history[:n_existing]:
        index.add(q, 1.0)
    times = []
    for q in history[n_existing:]:
        start = time.perf_counter()
        index.peek(q, 1.0)
        index.add(q, 1.0)
        times.append(time.perf_counter() - start)
    ours = statistics.median(times)
    # Baseline: recompute from scratch for a few admissions.
    base_times = []
    for q in history[n_existing : n_existing + 5]:
        start = time.perf_counter()
        max_overlap([*history[:n_existing], q], comp="sum")
        base_times.append(time.perf_counter() - start)
    full = max_overlap(history, comp="sum")
    equal = "yes" if abs(float(full.value) - float(index.value)) < 1e-9 else "NO"
    return Row(
        f"OverlapIndex peek+add, {n_existing} held, 3 Adult attrs",
        n_existing,
        ours,
        "recompute",
        statistics.median(base_times),
        False,
        equal,
        "< 0.002 s",
        "yes" if ours < 0.002 else "NO",
    )


def print_table(rows: list[Row]) -> None:
    header = [
        "workload",
        "t",
        "ours (s)",
        "compile (s)",
        "baseline",
        "base (s)",
        "ratio",
        "equal?",
        "target",
        "met?",
    ]
    lines = [header]
    for r in rows:
        if r.base_time is None:
            bt, ratio = "-", "-"
        else:
            bt = (">" if r.capped else "") + (
                f"{r.base_time:.4f}" if r.base_time >= 0.01 else f"{r.base_time:.2g}"
            )
            q = r.base_time / max(r.ours, 1e-9)
            # Below 1: the baseline is faster; say by how much rather than print a small fraction.
            ratio = (">" if r.capped else "") + (
                f"{q:.0f}x"
                if q >= 10
                else f"{q:.2g}x"
                if q >= 1
                else f"ours {1 / q:.3g}x slower"
                if q > 0.1
                else f"ours {1 / q:.0f}x slower"
            )
        ct = "-" if r.compile_time is None else f"{r.compile_time:.4f}"
        lines.append(
            [r.workload, str(r.t), f"{r.ours:.4f}", ct, r.baseline, bt, ratio, r.equal, r.target, r.met]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lower baseline caps")
    parser.add_argument(
        "--box-cap", type=float, default=None, help="CPU seconds cap of the graph route on the box rows"
    )
    parser.add_argument(
        "--only", default="", help="run only rows whose name contains this text (or one of several, a|b)"
    )
    args = parser.parse_args()
    cap = 20.0 if args.quick else 120.0
    rows: list[Row] = []

    def want(text: str) -> bool:
        return any(part.strip().lower() in text.lower() for part in args.only.split("|"))

    # Every row (or group) draws from its own seeded generator, so ``--only`` runs the same workload.
    def rng(seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    three = ["age", "education-num", "hours-per-week"]
    five = [*three, "capital-gain", "fnlwgt"]
    # Box workloads against the numpy difference-array sweep (issue 13 item 6): two rows each.
    if want("1-D random sweep"):
        for t, seed, target in ((100_000, 1310, 0.3), (10_000, 1311, None)):
            _, qs = one_d(t, 1_000_000, rng(seed))
            rows += sweep_rows("1-D random ranges, domain 10^6", qs, cap, target)
    if want("1-D prefix sweep"):
        _, qs = prefixes(10_000)
        rows += sweep_rows("1-D prefix ranges, domain 10^4", qs, cap, None)
    if want("1-D all sweep"):
        _, qs = all_ranges(200)
        rows += sweep_rows("1-D all ranges, domain 200", qs, cap, None)
    if want("3 adult sweep"):
        qs = random_ranges(ADULT, three, 10_000, rng(1312))
        rows += sweep_rows("ranges on 3 Adult attrs", qs, cap, 1.0)
    if want("3 adult graph"):
        for t, seed in ((1_000, 1313), (3_000, 1314)):
            qs = random_ranges(ADULT, three, t, rng(seed))
            rows.append(
                measure("ranges on 3 Adult attrs vs graph (>=100x)", qs, "graph", graph_baseline, cap, None)
            )
    if want("5 adult"):
        for t in (1_000, 10_000):
            qs = random_ranges(ADULT, five, t, rng(1315 + t))
            rows.append(
                measure(
                    "ranges on 5 Adult attrs, effort 120 s",
                    qs,
                    "graph",
                    graph_baseline,
                    cap,
                    None,
                    runs=1,
                    effort=120.0,
                )
            )
    if want("mixed"):
        analyst = ["age", "education-num", "race", "sex", "marital-status", "workclass"]
        qs = mixed(analyst, 2_000, rng(1316), (1, 3))
        rows.append(
            measure(
                "mixed sets+ranges, 6 Adult attrs",
                qs,
                "graph",
                graph_baseline,
                cap,
                2.0,
                note_equal=" (graph: upper bound on sets)",
            )
        )
        qs = mixed(ADULT.names, 2_000, rng(1317), (1, 3))
        # Effort 0.5 s shows how closely the limit is kept (a safe bound, no exactness target).
        for effort in (0.5, 2.0, None):
            label = "no effort limit" if effort is None else f"effort {effort:g} s"
            rows.append(
                measure(
                    f"mixed sets+ranges, all 14 Adult attrs, {label}",
                    qs,
                    "graph",
                    graph_baseline if effort is None else None,
                    cap,
                    None if effort == 0.5 else 2.0,
                    runs=1,
                    effort=effort,
                    note_equal=" (graph: upper bound on sets)" if effort is None else "",
                )
            )
    if want("census"):
        _, qs = census(2_000, rng(1318))
        rows.append(measure("census race bits x age x sex", qs, "dense", dense_baseline, cap, None))
        _, qs = census(1_000, rng(1319))
        rows.append(
            measure(
                "census race bits x age x sex",
                qs,
                "graph",
                graph_baseline,
                cap,
                None,
                note_equal=" (graph: upper bound on sets)",
            )
        )
    # Issue 13 item 4: the boxes route (exact weighted depth); each row has its own generator so that
    # ``--only`` runs the same workload. The graph baseline is capped at 60 s here.
    box_cap = min(cap, 60.0) if args.box_cap is None else args.box_cap
    eight = [*five, "capital-loss", "workclass", "occupation"]
    # The issue 13 rows ("the benchmark's own generator", random_ranges / value_sets), now as the issue
    # 22 rows: CPU time, the graph route at its best.
    if want("boxes on 5 Adult attrs, t = 400"):
        qs = random_ranges(ADULT, five, 400, rng(1301))
        rows.append(box_row("boxes on 5 Adult attrs, t = 400", qs, box_cap, runs=5, ratio_target=10.0))
    if want("boxes on 5 Adult attrs, t = 2000"):
        qs = random_ranges(ADULT, five, 2_000, rng(1302))
        rows.append(box_row("boxes on 5 Adult attrs, t = 2000", qs, box_cap, seconds_target=2.0))
    if want("boxes on 8 Adult attrs, t = 1000"):
        qs = random_ranges(ADULT, eight, 1_000, rng(1303))
        rows.append(box_row("boxes on 8 Adult attrs, t = 1000", qs, box_cap, seconds_target=1.0))
    if want("value sets on 5 Adult attrs (boxes)"):
        names = ["age", "hours-per-week", "capital-gain", "marital-status", "occupation"]
        qs = value_sets(names, 1_000, rng(1304))
        rows.append(
            box_row(
                "value sets on 5 Adult attrs (boxes), t = 1000",
                qs,
                box_cap,
                seconds_target=1.0,
                upper_only=True,
            )
        )
    # Issue 22 item 4: boxes on every distribution. CPU time on both sides; the graph route at its
    # best (numpy pairs, the faster of networkx's two exact clique searches). Seeds per row.
    for k, shape in enumerate(BOX_KINDS):
        if want(f"boxes on 5 Adult attrs, {shape}, t = 400"):
            qs = constrained(shape, five, 400, 2200 + k, sets=False)
            rows.append(
                box_row(
                    f"boxes on 5 Adult attrs, {shape}, t = 400",
                    qs,
                    box_cap,
                    runs=5,
                    ratio_target=10.0 if shape in ("narrow", "wide", "half") else None,
                )
            )
    for k, shape in enumerate(BOX_KINDS):
        if want(f"boxes on 8 Adult attrs, {shape}, t = 1000"):
            qs = constrained(shape, eight, 1_000, 2210 + k, sets=False)
            rows.append(
                box_row(f"boxes on 8 Adult attrs, {shape}, t = 1000", qs, box_cap, seconds_target=1.0)
            )
    vs_names = ["age", "hours-per-week", "capital-gain", "marital-status", "occupation"]
    for k, shape in enumerate(BOX_KINDS):
        if want(f"value sets on 5 Adult attrs, {shape}, t = 1000"):
            qs = constrained(shape, vs_names, 1_000, 2220 + k, sets=True)
            rows.append(
                box_row(
                    f"value sets on 5 Adult attrs, {shape}, t = 1000",
                    qs,
                    box_cap,
                    seconds_target=1.0,
                    upper_only=True,
                )
            )
    # Issue 22 item 5: float weights on the fast path (1-D, 2-D, and the boxes route on 5 attributes).
    if want("float weights"):
        _, qs = one_d(100_000, 1_000_000, rng(2230))
        rows += float_rows("1-D random ranges, domain 10^6", qs, rng(2231))
        qs = random_ranges(ADULT, ["age", "hours-per-week"], 10_000, rng(2232))
        rows += float_rows("ranges on 2 Adult attrs", qs, rng(2233))
        qs = constrained("uniform", eight, 1_000, 2236, sets=False)
        rows += float_rows("boxes on 8 Adult attrs, uniform", qs, rng(2237), runs=3)
        # Not only one generator: the hardest of the others with these weights (boxes up to half of
        # each attribute; 1.7-2.3 s of CPU, the cell search's proof).
        qs = constrained("up-to-half", eight, 1_000, 2236, sets=False)
        rows += float_rows("boxes on 8 Adult attrs, up-to-half", qs, rng(2237), runs=3)
        # Last: weighted boxes on 5 attributes (0.2 s of CPU each, float or dyadic).
        qs = random_ranges(ADULT, five, 1_000, rng(2234))
        rows += float_rows("boxes on 5 Adult attrs", qs, rng(2235), runs=3)
    if want("index"):
        rows.append(index_row(10_000, 1_000, rng(1320), cap))
    print_table(rows)


if __name__ == "__main__":
    main()
