"""Consistent answers on Adult: error of the raw noisy answers against their projection (issue 15 item 5).

    .venv/bin/python benchmarks/consistency.py [--repeats 20] [--only TEXT]

Each row is one Adult workload (marginals and ranges), answered with a total budget of epsilon = 1 (pure
DP, shared by maximum overlap as ``overlapdp answer`` does) ``--repeats`` times with fresh noise; truth is
the exact counts of ``../shared/data/adult/adult.csv`` (else ``samples.synthetic_adult``). Printed: the
number of queries and cells, the root mean squared error per answer of the raw and the consistent
answers over all repeats, their ratio (consistent / raw; < 1 is better) and the median projection time
(cells enumerated and the solver, after counting). Each row seeds its own noise (seeded source: a
benchmark, not a release).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from overlapdp.engine import PandasEngine
from overlapdp.mechanisms import SeededRandomSource
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.mechanisms.consistency import make_consistent
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.samples import adult_schema, synthetic_adult
from overlapdp.schema import Schema

REPO = Path(__file__).resolve().parents[1]
ADULT = next(
    (p / "shared" / "data" / "adult" / "adult.csv" for p in REPO.parents if (p / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "adult" / "adult.csv",
)


def _q(schema: Schema, texts: list[str]) -> list[PredicateQuery]:
    return [parse_where(schema, w, id=f"q{i}") for i, w in enumerate(texts)]


def _values(schema: Schema, name: str) -> range:
    return range(schema.attributes[schema.position(name)].size)


def one_way(schema: Schema) -> list[str]:
    """The total and the 1-way marginals of five categorical attributes."""
    out = ["TRUE"]
    for a in ("sex", "race", "relationship", '"marital-status"', '"income>50K"'):
        out += [f"{a} = {v}" for v in _values(schema, a.strip('"'))]
    return out


def two_way(schema: Schema) -> list[str]:
    """The total, three 1-way marginals and their three 2-way marginals."""
    attrs = ["sex", "race", '"income>50K"']
    out = ["TRUE"]
    for a in attrs:
        out += [f"{a} = {v}" for v in _values(schema, a.strip('"'))]
    for i, a in enumerate(attrs):
        for b in attrs[i + 1 :]:
            for u in _values(schema, a.strip('"')):
                out += [f"{a} = {u} AND {b} = {v}" for v in _values(schema, b.strip('"'))]
    return out


def age_hierarchy(_: Schema) -> list[str]:
    """Hierarchical ranges on age (0..84): the whole range, halves, quarters, ... down to width 6."""
    out: list[str] = []
    level = [(0, 85)]
    while level:
        nxt = []
        for lo, hi in level:
            out.append(f"age >= {lo} AND age < {hi}")
            if hi - lo >= 12:
                mid = (lo + hi) // 2
                nxt += [(lo, mid), (mid, hi)]
        level = nxt
    return out


def marginals_and_ranges(schema: Schema) -> list[str]:
    """Age decades x sex, sex and income marginals, prefix ranges of hours-per-week, the total."""
    out = ["TRUE"] + [f"sex = {v}" for v in range(2)] + [f'"income>50K" = {v}' for v in range(2)]
    for lo in range(0, 85, 10):
        out += [f"age >= {lo} AND age < {lo + 10}"]
        out += [f"age >= {lo} AND age < {lo + 10} AND sex = {s}" for s in range(2)]
    out += [f'"hours-per-week" < {h}' for h in (20, 35, 40, 45, 60)]
    return out


def random_boxes(schema: Schema, count: int = 60, seed: int = 4) -> list[str]:
    """``count`` random age x hours-per-week boxes plus the total (2-D ranges, many cells)."""
    rng = np.random.default_rng(seed)
    out = ["TRUE"]
    for _ in range(count):
        a = sorted(rng.integers(0, 85, 2).tolist())
        h = sorted(rng.integers(0, 99, 2).tolist())
        out.append(f'age BETWEEN {a[0]} AND {a[1]} AND "hours-per-week" BETWEEN {h[0]} AND {h[1]}')
    return out


WORKLOADS: dict[str, Callable[[Schema], list[str]]] = {
    "1-way marginals + total": one_way,
    "2-way marginals (sex, race, income)": two_way,
    "age hierarchy (ranges)": age_hierarchy,
    "age x sex + ranges + marginals": marginals_and_ranges,
    "60 random age x hours boxes": random_boxes,
}


def row(name: str, schema: Schema, frame: pd.DataFrame, repeats: int, seed: int) -> dict[str, object]:
    qs = _q(schema, WORKLOADS[name](schema))
    plan = plan_answers(qs, 1.0, "pure", "overlap")
    raw_sq: list[float] = []
    fit_sq: list[float] = []
    times: list[float] = []
    cells = 0
    with PandasEngine(schema, frame) as eng:
        truth = np.asarray(eng.counts(qs), dtype=float)
        for r in range(repeats):
            res = answer_workload(eng, qs, plan, rng=SeededRandomSource(seed * 1000 + r))
            start = time.perf_counter()
            fitted = make_consistent(qs, res)
            times.append(time.perf_counter() - start)
            cells = fitted.design.cells
            raw_sq.append(float(np.sum((np.asarray(fitted.raw) - truth) ** 2)))
            fit_sq.append(float(np.sum((np.asarray(fitted.values) - truth) ** 2)))
    n = len(qs) * repeats
    raw = (sum(raw_sq) / n) ** 0.5
    fit = (sum(fit_sq) / n) ** 0.5
    return {
        "workload": name,
        "queries": len(qs),
        "gamma": plan.gamma,
        "cells": cells,
        "raw RMSE": raw,
        "consistent RMSE": fit,
        "ratio": fit / raw,
        "time (median s)": statistics.median(times),
        "never worse": all(f <= s * (1 + 1e-9) + 1e-6 for f, s in zip(fit_sq, raw_sq, strict=True)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", help="run the rows whose name contains this text")
    args = parser.parse_args(argv)
    schema = adult_schema()
    if ADULT.exists():
        frame, source = pd.read_csv(ADULT), str(ADULT)
    else:
        frame, source = synthetic_adult(48_842), "samples.synthetic_adult(48842) (shared Adult absent)"
    print(
        f"data: {source} ({len(frame)} rows); pure DP, total epsilon = 1 shared by maximum overlap; "
        f"{args.repeats} repeats per row"
    )
    rows = [
        row(name, schema, frame, args.repeats, seed)
        for seed, name in enumerate(WORKLOADS)
        if not args.only or args.only in name
    ]
    table = pd.DataFrame(rows)
    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4g}".format
    ):
        print(table.to_string(index=False))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
