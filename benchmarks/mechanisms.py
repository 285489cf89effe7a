"""Samples per second of overlapdp's exact discrete Laplace and discrete Gaussian samplers against
OpenDP's (Rust, exact) samplers, measured in the same run on batches of 10 000 counts.

Run: ``/work/main/.venv/bin/python benchmarks/mechanisms.py`` (``--quick`` for fewer repetitions).
Both sides add noise to a vector of 10 000 integer counts; overlapdp draws from the operating
system's CSPRNG (its default), as OpenDP does. The table prints the median over repetitions and the
ratio overlapdp / OpenDP (> 1 means overlapdp is faster). Numbers are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

# Use this checkout's package, whatever is installed in the virtualenv.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from overlapdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    add_noise,
    system_source,
)
from overlapdp.privacy.definitions import ZCDP, PureDP

BATCH = 10_000


def rate(fn: Callable[[], object], reps: int, n: int = BATCH) -> float:
    fn()  # warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def opendp_samplers() -> dict[str, Callable[[float], Callable[[list[int]], object]]]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space_l1 = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    space_l2 = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
    return {
        "laplace": lambda scale: dp.m.make_laplace(*space_l1, scale=scale),
        "gaussian": lambda scale: dp.m.make_gaussian(*space_l2, scale=scale),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = 5 if args.quick else 15
    source = system_source()
    counts = np.arange(BATCH, dtype=np.int64)
    counts_list = counts.tolist()
    od = opendp_samplers()
    rows: list[tuple[str, float, float]] = []
    for scale in (1, 10, 1000):
        lap = DiscreteLaplace(Fraction(scale))
        ours = rate(lambda lap=lap: counts + lap.sample_many(source, BATCH), reps)
        meas = od["laplace"](float(scale))
        theirs = rate(lambda meas=meas: meas(counts_list), reps)
        rows.append((f"discrete Laplace, scale {scale}", ours, theirs))
    for sigma in (1, 10, 1000):
        gau = DiscreteGaussian(Fraction(sigma * sigma))
        ours = rate(lambda gau=gau: counts + gau.sample_many(source, BATCH), reps)
        meas = od["gaussian"](float(sigma))
        theirs = rate(lambda meas=meas: meas(counts_list), reps)
        rows.append((f"discrete Gaussian, sigma {sigma}", ours, theirs))
    # The full noisy-count path (calibration, noise, error bars as objects) for comparison.
    ours = rate(lambda: add_noise(counts, PureDP(0.1)), reps)
    meas = od["laplace"](10.0)
    rows.append(("add_noise (answers + error bars), eps 0.1", ours, rate(lambda: meas(counts_list), reps)))
    ours = rate(lambda: add_noise(counts, ZCDP(0.005)), reps)
    meas = od["gaussian"](10.0)
    rows.append(("add_noise (answers + error bars), rho 0.005", ours, rate(lambda: meas(counts_list), reps)))

    width = max(len(r[0]) for r in rows)
    print(f"batches of {BATCH} counts, median of {reps} runs, samples per second")
    print(f"{'sampler':<{width}}  {'overlapdp':>12}  {'OpenDP':>12}  {'ratio':>7}")
    for name, o, t in rows:
        print(f"{name:<{width}}  {o:>12,.0f}  {t:>12,.0f}  {o / t:>7.1f}")


if __name__ == "__main__":
    main()
