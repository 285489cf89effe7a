"""Benchmark of the paper's scale (issue 22): wide schemas, long workload files, long ledgers.

Run from the repository root:

    .venv/bin/python benchmarks/scale.py            # every row
    .venv/bin/python benchmarks/scale.py --quick    # 10 000 lines / charges, no 5 000-query rows
    .venv/bin/python benchmarks/scale.py --only wide

Rows, each against a baseline measured in the same run:

- wide: ``max_overlap`` on d attributes of 100 values, t queries each a range on 3 random attributes
  (Smith et al. PoPETs 2022's shapes) against CP-SAT (OR-Tools, the dev extra: a variable per
  attribute, a literal per query forcing the row into its box, 2 workers) on the same instance; the
  values must agree (both exact).
- parse: ``Workload.from_lines`` on N JSON lines of age ranges (Adult schema) against the reading line
  by line (``parse_line`` on each, what the reader did before), then ``overlapdp overlap`` end to end
  (a child process, wall clock).
- replay: ``PrivacyFilter.record_many`` of N charges (1-2 ranges on 5 Adult attributes, 3 Laplace
  scales) against ``record`` one by one (``process_time``, CPU seconds: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from overlapdp.overlap import max_overlap
from overlapdp.privacy import Laplace, PrivacyFilter, PureDP
from overlapdp.query import PredicateQuery, Workload, parse_line
from overlapdp.samples import adult_schema
from overlapdp.schema import IndexSet, IntAttribute, Schema

Row = tuple[str, str, float, str, float, str]


def wide_instance(d: int, t: int, seed: int = 0) -> tuple[Schema, list[dict[int, tuple[int, int]]]]:
    rng = np.random.default_rng(seed)
    boxes = []
    for _ in range(t):
        box = {}
        for j in rng.choice(d, size=3, replace=False).tolist():
            a, b = sorted(rng.integers(0, 100, 2).tolist())
            box[j] = (a, b + 1)
        boxes.append(box)
    return Schema(tuple(IntAttribute(f"a{i}", 0, 99) for i in range(d))), boxes


def cpsat(boxes: list[dict[int, tuple[int, int]]]) -> float:
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    xs: dict[int, Any] = {}
    ys = []
    for i, box in enumerate(boxes):
        y = m.new_bool_var(f"y{i}")
        ys.append(y)
        for j, (a, b) in box.items():
            x = xs.setdefault(j, m.new_int_var(0, 99, f"x{j}"))
            m.add(x >= a).only_enforce_if(y)
            m.add(x <= b - 1).only_enforce_if(y)
    m.maximize(sum(ys))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.max_time_in_seconds = 600
    if solver.solve(m) != cp_model.OPTIMAL:
        return float("nan")
    return float(solver.objective_value)


def wide_rows(shapes: list[tuple[int, int]]) -> list[Row]:
    rows: list[Row] = []
    for d, t in shapes:
        schema, boxes = wide_instance(d, t)
        qs = [
            PredicateQuery.from_coverages(
                schema, {j: IndexSet.interval(a, b) for j, (a, b) in box.items()}, id=f"q{i}"
            )
            for i, box in enumerate(boxes)
        ]
        start = time.perf_counter()
        r = max_overlap(qs)
        ours = time.perf_counter() - start
        try:
            start = time.perf_counter()
            truth = cpsat(boxes)
            base = time.perf_counter() - start
            agree = "yes" if r.exact and r.value == truth else f"NO ({r.value} vs {truth})"
            base_s = f"{base:.2f}"
        except ImportError:
            base, agree, base_s = float("nan"), "(no ortools)", "-"
        rows.append((f"wide {d} x {t} queries", f"{ours:.2f}", base, base_s, ours, agree))
    return rows


def sparse_rows(seeds: list[int], d: int = 100, t: int = 500, seconds: float = 30.0) -> list[Row]:
    """The issue's 10^200 shape: ``d`` attributes of 100 values, ``t`` ranges on 3 random attributes each,
    one instance per seed (seed 0: the issue's); ours at ``effort=seconds`` against CP-SAT (one-hot
    model, 2 workers) given the same seconds: each side's proven interval [best row found, upper bound]."""
    return [row for seed in seeds for row in _sparse_row(seed, d, t, seconds)]


def _sparse_row(seed: int, d: int, t: int, seconds: float) -> list[Row]:
    schema, boxes = wide_instance(d, t, seed)
    qs = [
        PredicateQuery.from_coverages(
            schema, {j: IndexSet.interval(a, b) for j, (a, b) in box.items()}, id=f"q{i}"
        )
        for i, box in enumerate(boxes)
    ]
    start = time.perf_counter()
    r = max_overlap(qs, effort=seconds)
    ours = time.perf_counter() - start
    mine = f"[{float(r.lower):g}, {float(r.upper):g}]" + (" exact" if r.exact else "")
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from support import cpsat as cp

        got = cp.maximise(qs, [1] * len(qs), seconds=seconds)
        theirs = f"[{got.value}, {got.bound}] {got.status.lower()}"
        base, base_s = got.seconds, f"{got.seconds:.2f}"
    except ImportError:
        theirs, base, base_s = "(no ortools)", float("nan"), "-"
    return [
        (
            f"sparse {d} x {t} queries (10^{2 * d} rows), seed {seed}",
            f"{ours:.2f}",
            base,
            base_s,
            ours,
            f"ours {mine}; CP-SAT {theirs}",
        )
    ]


def parse_rows(n: int) -> list[Row]:
    schema = adult_schema()
    rng = np.random.default_rng(1)
    lines = []
    for i in range(n):
        a, b = sorted(rng.integers(0, 85, 2).tolist())
        lines.append(json.dumps({"id": f"q{i}", "conditions": {"age": {"range": [a, b]}}}))
    start = time.perf_counter()
    w = Workload.from_lines(schema, lines)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    old = Workload.from_items(schema, [parse_line(schema, json.loads(line))[0] for line in lines])
    base = time.perf_counter() - start
    same = "yes" if list(w.queries) == list(old.queries) else "NO"
    rows: list[Row] = [(f"parse {n} lines", f"{ours:.2f}", base, f"{base:.2f}", ours, same)]
    with tempfile.TemporaryDirectory() as tmp:
        schema.save(Path(tmp) / "schema.json")
        (Path(tmp) / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [
            sys.executable,
            "-m",
            "overlapdp.cli.main",
            "overlap",
            "--schema",
            str(Path(tmp) / "schema.json"),
            "--queries",
            str(Path(tmp) / "queries.jsonl"),
            "--json",
        ]
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        wall = time.perf_counter() - start
        value = json.loads(out)["value"]
        engine = max_overlap(w.queries).value
    rows.append(
        (
            f"overlapdp overlap, {n} lines (wall)",
            f"{wall:.2f}",
            float("nan"),
            "-",
            wall,
            f"value {value} = {engine}",
        )
    )
    return rows


def replay_rows(n: int) -> list[Row]:
    schema = adult_schema()
    rng = np.random.default_rng(0)
    names = ["age", "education-num", "hours-per-week", "sex", "race"]
    mechs = [Laplace(1.0), Laplace(2.0), Laplace(0.5)]
    items = []
    for i in range(n):
        covs = {}
        for name in rng.choice(names, size=int(rng.integers(1, 3)), replace=False).tolist():
            a, b = sorted(rng.integers(0, schema.attribute(name).size, 2).tolist())
            covs[name] = IndexSet.interval(a, b + 1)
        items.append((mechs[i % 3], PredicateQuery.from_coverages(schema, covs)))
    many = PrivacyFilter(schema, PureDP(1e9))
    start = time.process_time()
    many.record_many(items)
    ours = time.process_time() - start
    one = PrivacyFilter(schema, PureDP(1e9))
    start = time.process_time()
    for m, q in items:
        one.record(m, q)
    base = time.process_time() - start
    same = all(
        np.array_equal(a, b)
        for x, y in zip(many._bounds or [], one._bounds or [], strict=True)
        for a, b in zip(x.cells, y.cells, strict=True)
    )
    return [
        (
            f"replay {n} charges (CPU)",
            f"{ours:.2f}",
            base,
            f"{base:.2f}",
            ours,
            "tables equal" if same else "NO",
        )
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument(
        "--sparse-seeds", default="0,1,2,3", help="instances of the 10^200 shape (0: the issue's)"
    )
    args = ap.parse_args()
    n = 10_000 if args.quick else 100_000
    shapes = [(10_000, 1_000), (20_000, 1_000)] + ([] if args.quick else [(10_000, 5_000), (20_000, 5_000)])
    rows: list[Row] = []
    if "wide".startswith(args.only) or args.only in "wide":
        rows += wide_rows(shapes)
    if args.only in "sparse" and not args.quick:
        rows += sparse_rows([int(x) for x in args.sparse_seeds.split(",")])
    if args.only in "parse":
        rows += parse_rows(n)
    if args.only in "replay":
        rows += replay_rows(n)
    print(f"| {'row':50} | ours (s) | baseline (s) | ratio | agree |")
    print(f"|{'-' * 52}|----------|--------------|-------|-------|")
    for name, ours_s, base, base_s, ours, agree in rows:
        ratio = f"{base / ours:.1f}x" if base == base and ours > 0 else "-"
        print(f"| {name:50} | {ours_s:>8} | {base_s:>12} | {ratio:>5} | {agree} |")


if __name__ == "__main__":
    main()
