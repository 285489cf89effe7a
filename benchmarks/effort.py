"""The effort limit of max_overlap: wall-clock overrun past the limit, and no slow-down of finishing cases.

Run: ``PYTHONPATH=src python -m benchmarks.effort [--quick] [--load N]``

Two tables (issue 13 item 5):

1. **Overrun.** A workload that cannot finish in the time given (3 000 value sets and ranges on 1-4 of
   Adult's 14 attributes; exact takes well over 10 s here) under efforts 0.5, 1, 2 and 5 s: wall time
   from the call to the answer divided by the effort (target <= 1.10), and the safe bound it returns.
2. **Finishing workloads.** Workloads solved exactly without a limit, timed with no limit, 30 s
   (``answering.DEFAULT_EFFORT``) and 120 s, interleaved in one run: target equal within noise, same value.

``--load N`` runs N busy processes alongside (the machine's other users): the limit is wall-clock, so
it must hold under load too. Imports (SciPy, toulbar2's child start-up) are warmed up before timing; a
first call in a fresh process pays SciPy's import (~0.3 s) on top, reported apart.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.overlap import ADULT, mixed, random_ranges
from overlapdp.overlap import max_overlap
from overlapdp.query import PredicateQuery


def _busy(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.monotonic()
    out = fn()
    return time.monotonic() - start, out


def overrun_rows(queries: Sequence[PredicateQuery], efforts: Sequence[float], runs: int) -> None:
    print(
        f"\n## Overrun: {len(queries)} mixed value sets and ranges on Adult's 14 attributes (cannot finish)\n"
    )
    print("| effort (s) | wall (s), median | wall / effort, median | worst | target | met | bound returned |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for effort in efforts:
        times, res = [], None
        for _ in range(runs):
            t, res = _timed(lambda e=effort: max_overlap(queries, effort=e))
            times.append(t)
        assert res is not None
        med, worst = statistics.median(times), max(times)
        met = "yes" if worst / effort <= 1.10 else "NO"
        state = "exact" if res.exact else f"safe bound {float(res.value):g} (lower {float(res.lower):g})"
        print(
            f"| {effort:g} | {med:.3f} | {med / effort:.3f} | {worst / effort:.3f} | <= 1.10 | {met} | {state} |"
        )


def finishing_rows(workloads: Sequence[tuple[str, list[PredicateQuery]]], runs: int) -> None:
    print("\n## Finishing workloads: the same time with and without a limit\n")
    print(
        "| workload | t | no limit (s) | 30 s limit (s) | 120 s limit (s) | 30 / none | 120 / none | same answer |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, qs in workloads:
        times: dict[float | None, list[float]] = {None: [], 30.0: [], 120.0: []}
        answers: dict[float | None, Any] = {}
        for _ in range(runs):
            for effort in times:  # interleaved: drifts in the machine's load hit all three alike
                t, res = _timed(lambda e=effort, q=qs: max_overlap(q, effort=e))
                times[effort].append(t)
                answers[effort] = res
        med = {e: statistics.median(ts) for e, ts in times.items()}
        base = answers[None]
        same = all(a.exact == base.exact and float(a.value) == float(base.value) for a in answers.values())
        print(
            f"| {name} ({base.algorithm}) | {len(qs)} | {med[None]:.3f} | {med[30.0]:.3f} | {med[120.0]:.3f} "
            f"| {med[30.0] / med[None]:.2f} | {med[120.0] / med[None]:.2f} | {'yes' if same else 'NO'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per row, efforts 0.5 and 2 s only")
    parser.add_argument("--load", type=int, default=0, help="busy processes to run alongside")
    parser.add_argument("--only", default="", help="'overrun' or 'finishing'")
    parser.add_argument("--runs", type=int, default=3, help="repeats per row (medians)")
    parser.add_argument("--rows", default="", help="finishing rows whose name contains this text")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    efforts = (0.5, 2.0) if args.quick else (0.5, 1.0, 2.0, 5.0)
    hard = mixed(ADULT.names, 3_000, np.random.default_rng(1), (1, 4))
    finishing = [
        (
            "mixed sets+ranges, all 14 Adult attrs",
            mixed(ADULT.names, 2_000, np.random.default_rng(1317), (1, 3)),
        ),
        (
            "mixed sets+ranges, 6 Adult attrs",
            mixed(
                ["age", "education-num", "race", "sex", "marital-status", "workclass"],
                2_000,
                np.random.default_rng(1316),
                (1, 3),
            ),
        ),
        (
            "boxes on 5 Adult attrs",
            random_ranges(
                ADULT,
                ["age", "education-num", "hours-per-week", "capital-gain", "fnlwgt"],
                400,
                np.random.default_rng(1301),
            ),
        ),
        (
            "mixed sets+ranges, 14 Adult attrs (admission size)",
            mixed(ADULT.names, 200, np.random.default_rng(7), (1, 3)),
        ),
    ]
    t_first, _ = _timed(lambda: max_overlap(hard[:300], effort=5.0))
    print(f"warm-up (imports: SciPy, toulbar2's first child): {t_first:.3f} s")
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(args.load)]
    for p in busy:
        p.start()
    try:
        if args.load:
            print(f"with {args.load} busy processes alongside")
        if args.only in ("", "overrun"):
            overrun_rows(hard, efforts, runs)
        if args.only in ("", "finishing"):
            finishing_rows([w for w in finishing if args.rows in w[0]], runs)
    finally:
        stop.set()
        for p in busy:
            p.join()


if __name__ == "__main__":
    main()
