"""Samples per second of overlapdp's exact discrete Laplace and discrete Gaussian samplers against
OpenDP's (Rust, exact) samplers, measured in the same run, interleaved.

Run: ``/work/main/.venv/bin/python benchmarks/mechanisms.py`` (``--quick`` for fewer repetitions,
``--only batch|call|add_noise`` for one group of rows).

- batch rows: both sides add noise to a vector of 10 000 integer counts (overlapdp ``sample_many``;
  OpenDP a vector measurement made once, ``make_laplace`` / ``make_gaussian`` on a vector of ints);
- one-draw-per-call rows: a loop of single noisy counts, one draw per call (overlapdp ``noise.sample``,
  the path a mechanism that needs one draw at a time takes, served from the source's pool of vectorised
  draws; OpenDP a scalar measurement made once on ``atom_domain(T=int)`` and called per count), and
  overlapdp's unpooled scalar sampler (the path for parameters whose integers exceed 2^31);
- add_noise rows: overlapdp's full noisy-count path (calibration, noise, error bars as objects), on a
  batch and one count per call, against OpenDP's bare measurements made once (no calibration, no error
  bars: these rows favour OpenDP).

Both sides draw from the operating system's CSPRNG (overlapdp's default and the only source its served
mode accepts; OpenDP's only source). Each row seeds its own generator for its counts, so a row run alone
does the same work. The table prints the median rate over repetitions and the ratio overlapdp / OpenDP
(> 1 means overlapdp is faster). Numbers are noisy on a shared machine.
"""

from __future__ import annotations

import os

# OpenDP is the peer: with RUST_BACKTRACE=1 in the environment every refusal (an error) builds a Rust
# backtrace, ~700 ms instead of ~0.02 ms. Set before OpenDP loads.
os.environ["RUST_BACKTRACE"] = "0"

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
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    add_noise,
    system_source,
)
from overlapdp.mechanisms.samplers import discrete_gaussian_scalar, discrete_laplace_scalar
from overlapdp.privacy.definitions import ZCDP, PureDP

BATCH = 10_000
CALLS_OURS = 20_000  # single draws per repetition (overlapdp)
CALLS_OPENDP = 2_000  # single draws per repetition (OpenDP: about 50-200 us a call here)


def paired(
    ours: Callable[[], object], n_ours: int, theirs: Callable[[], object], n_theirs: int, reps: int
) -> tuple[float, float]:
    """Median rates (items per second) of both sides, run alternately after one warm-up each, so that a
    change of load on the shared machine hits both alike."""
    ours()
    theirs()
    t_ours, t_theirs = [], []
    for _ in range(reps):
        t = time.perf_counter()
        ours()
        t_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs()
        t_theirs.append(time.perf_counter() - t)
    return n_ours / statistics.median(t_ours), n_theirs / statistics.median(t_theirs)


def counts_for(row_seed: int, n: int) -> np.ndarray:
    """The row's counts, from its own seeded generator (the counts do not change the noise's cost)."""
    return np.random.default_rng(row_seed).integers(0, 50_000, n, dtype=np.int64)


def opendp_vector(kind: str, scale: float) -> Callable[[list[int]], object]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    dom = dp.vector_domain(dp.atom_domain(T=int))
    if kind == "laplace":
        return dp.m.make_laplace(dom, dp.l1_distance(T=int), scale=scale)  # type: ignore[no-any-return]
    return dp.m.make_gaussian(dom, dp.l2_distance(T=int), scale=scale)  # type: ignore[no-any-return]


def opendp_scalar(kind: str, scale: float) -> Callable[[int], object]:
    """OpenDP's per-call sampler: a measurement on one integer, made once, called once per count."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=int), dp.absolute_distance(T=int)
    if kind == "laplace":
        return dp.m.make_laplace(*space, scale=scale)  # type: ignore[no-any-return]
    return dp.m.make_gaussian(*space, scale=scale)  # type: ignore[no-any-return]


Row = tuple[str, float, float]


def batch_rows(reps: int) -> list[Row]:
    source = system_source()
    rows: list[Row] = []
    for i, scale in enumerate((1, 10, 1000)):
        counts = counts_for(100 + i, BATCH)
        counts_list = counts.tolist()
        lap = DiscreteLaplaceNoise(Fraction(scale))
        meas = opendp_vector("laplace", float(scale))
        o, t = paired(
            lambda lap=lap, c=counts: c + lap.sample_many(source, BATCH),
            BATCH,
            lambda meas=meas, c=counts_list: meas(c),
            BATCH,
            reps,
        )
        rows.append((f"batch of {BATCH}: discrete Laplace, scale {scale}", o, t))
    for i, sigma in enumerate((1, 10, 1000)):
        counts = counts_for(110 + i, BATCH)
        counts_list = counts.tolist()
        gau = DiscreteGaussianNoise(Fraction(sigma * sigma))
        meas = opendp_vector("gaussian", float(sigma))
        o, t = paired(
            lambda gau=gau, c=counts: c + gau.sample_many(source, BATCH),
            BATCH,
            lambda meas=meas, c=counts_list: meas(c),
            BATCH,
            reps,
        )
        rows.append((f"batch of {BATCH}: discrete Gaussian, sigma {sigma}", o, t))
    return rows


def call_rows(reps: int) -> list[Row]:
    source = system_source()
    rows: list[Row] = []
    for i, scale in enumerate((1, 10, 1000)):
        ours_counts = counts_for(200 + i, CALLS_OURS).tolist()
        their_counts = ours_counts[:CALLS_OPENDP]
        lap = DiscreteLaplaceNoise(Fraction(scale))
        meas = opendp_scalar("laplace", float(scale))

        def ours(lap: DiscreteLaplaceNoise = lap, cs: list[int] = ours_counts) -> object:
            sample = lap.sample
            return [c + sample(source) for c in cs]

        def scalar(s: int = scale, cs: list[int] = ours_counts) -> object:
            return [c + discrete_laplace_scalar(source, s, 1) for c in cs]

        def theirs(meas: Callable[[int], object] = meas, cs: list[int] = their_counts) -> object:
            return [meas(c) for c in cs]

        o, t = paired(ours, CALLS_OURS, theirs, CALLS_OPENDP, reps)
        rows.append((f"one draw per call: discrete Laplace, scale {scale}", o, t))
        o, t = paired(scalar, CALLS_OURS, theirs, CALLS_OPENDP, reps)
        rows.append(("  unpooled scalar sampler (parameters >= 2^31)", o, t))
    for i, sigma in enumerate((1, 10, 1000)):
        ours_counts = counts_for(210 + i, CALLS_OURS).tolist()
        their_counts = ours_counts[:CALLS_OPENDP]
        gau = DiscreteGaussianNoise(Fraction(sigma * sigma))
        meas = opendp_scalar("gaussian", float(sigma))

        def ours_g(gau: DiscreteGaussianNoise = gau, cs: list[int] = ours_counts) -> object:
            sample = gau.sample
            return [c + sample(source) for c in cs]

        def scalar_g(a: int = sigma * sigma, cs: list[int] = ours_counts) -> object:
            return [c + discrete_gaussian_scalar(source, a, 1) for c in cs]

        def theirs_g(meas: Callable[[int], object] = meas, cs: list[int] = their_counts) -> object:
            return [meas(c) for c in cs]

        o, t = paired(ours_g, CALLS_OURS, theirs_g, CALLS_OPENDP, reps)
        rows.append((f"one draw per call: discrete Gaussian, sigma {sigma}", o, t))
        o, t = paired(scalar_g, CALLS_OURS, theirs_g, CALLS_OPENDP, reps)
        rows.append(("  unpooled scalar sampler (parameters >= 2^31)", o, t))
    return rows


def add_noise_rows(reps: int) -> list[Row]:
    # The full noisy-count path (calibration, noise, error bars as objects) against OpenDP's bare
    # vector measurement (no calibration, no error bars): the comparison favours OpenDP.
    counts = counts_for(300, BATCH)
    counts_list = counts.tolist()
    meas = opendp_vector("laplace", 10.0)
    o, t = paired(lambda: add_noise(counts, PureDP(0.1)), BATCH, lambda: meas(counts_list), BATCH, reps)
    rows: list[Row] = [("add_noise (answers + error bars), eps 0.1", o, t)]
    counts = counts_for(301, BATCH)
    counts_list = counts.tolist()
    meas = opendp_vector("gaussian", 10.0)
    o, t = paired(lambda: add_noise(counts, ZCDP(0.005)), BATCH, lambda: meas(counts_list), BATCH, reps)
    rows.append(("add_noise (answers + error bars), rho 0.005", o, t))
    # One count per call through the full path, against OpenDP's scalar measurement made once.
    for seed, budget, kind, scale, name in (
        (302, PureDP(0.1), "laplace", 10.0, "eps 0.1"),
        (303, ZCDP(0.005), "gaussian", 10.0, "rho 0.005"),
    ):
        cs = counts_for(seed, CALLS_OURS).tolist()
        theirs_cs = cs[:CALLS_OPENDP]
        one = opendp_scalar(kind, scale)

        def ours(b: PureDP | ZCDP = budget, cs: list[int] = cs) -> object:
            return [add_noise([c], b) for c in cs]

        def theirs(one: Callable[[int], object] = one, cs: list[int] = theirs_cs) -> object:
            return [one(c) for c in cs]

        o, t = paired(ours, CALLS_OURS, theirs, CALLS_OPENDP, reps)
        rows.append((f"add_noise of one count per call, {name}", o, t))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", choices=("batch", "call", "add_noise"), help="one group of rows")
    args = parser.parse_args()
    reps = 5 if args.quick else 15
    rows: list[Row] = []
    if args.only in (None, "batch"):
        rows.extend(batch_rows(reps))
    if args.only in (None, "call"):
        rows.extend(call_rows(reps))
    if args.only in (None, "add_noise"):
        rows.extend(add_noise_rows(reps))
    width = max(len(r[0]) for r in rows)
    print(f"OS CSPRNG on both sides; median of {reps} interleaved runs; samples per second")
    print(f"{'sampler':<{width}}  {'overlapdp':>12}  {'OpenDP':>12}  {'ratio':>7}")
    for name, o, t in rows:
        print(f"{name:<{width}}  {o:>12,.0f}  {t:>12,.0f}  {o / t:>7.1f}")


if __name__ == "__main__":
    main()
