"""Sparse-vector variants that are NOT private, kept only so audits can show they are caught.

Lyu, Su and Li (PVLDB 2017, Section 3 and Table 1) list published SVT variants whose privacy claims
fail; the last two variants below are plausible implementation slips instead. Each function runs one
variant on a vector of exact query answers and returns its output as a tuple ("above" / "below", or the
released value); :func:`claimed_epsilon` is the epsilon claimed for it. NEVER use these to release data:
the project's correct mechanism is :class:`overlapdp.mechanisms.SparseVector`.

- ``no_query_noise``: compares ``q_i(D) >= T + rho`` with no noise on the queries and never stops
  (Stoddard et al. 2014; Lyu et al. Algorithm 5, infinite privacy loss): two queries that move in
  opposite directions between neighbours give an output impossible on one of them.
- ``reused_noise_release``: on "above" releases ``q_i(D) + nu_i``, the SAME noise used in the
  comparison (Roth 2011; Lyu et al. Algorithm 3): the released value bounds the threshold noise, and a
  run of "below" answers then leaks through every one of them.
- ``no_stop``: Lyu et al.'s Algorithm 1 noise but without stopping after ``c`` positives: each further
  "above" on a query that moves against the others costs more, without bound.
- ``fresh_threshold_noise``: Algorithm 1 with a FRESH threshold noise ``rho_i`` for every query (a
  plausible implementation slip): the "below" answers are no longer paid for once by ``epsilon_1``; each
  one leaks, so a long sequence of queries all shifted by +1 on the neighbour costs more and more.
- ``monotonic_noise``: Algorithm 1 with the MONOTONIC split and query noise ``Lap(c Delta/epsilon_2)``
  used on queries that are not monotonic (some move up, some down between the neighbours): its loss
  reaches ``epsilon_1 + 2 epsilon_2`` (``1.5 epsilon`` for ``c = 1``) when many "below" answers on
  queries moving one way pin the threshold and the "above" answer is on a query moving the other way.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Literal

import numpy as np

from overlapdp.mechanisms.noise import DiscreteLaplaceNoise
from overlapdp.mechanisms.randomness import RandomSource
from overlapdp.mechanisms.rationals import round_up
from overlapdp.mechanisms.sparse_vector import optimal_split

Variant = Literal[
    "no_query_noise", "reused_noise_release", "no_stop", "fresh_threshold_noise", "monotonic_noise"
]
VARIANTS: tuple[Variant, ...] = (
    "no_query_noise",
    "reused_noise_release",
    "no_stop",
    "fresh_threshold_noise",
    "monotonic_noise",
)
# The variants that stop after c positive answers, as the correct mechanism does.
_STOPPING: frozenset[Variant] = frozenset(
    {"reused_noise_release", "fresh_threshold_noise", "monotonic_noise"}
)


def claimed_epsilon(variant: Variant, epsilon: float) -> float:
    """Each variant is run with the budget it claims to satisfy: ``epsilon`` itself."""
    return epsilon


@lru_cache(maxsize=64)
def _noises(variant: Variant, epsilon: float, c: int) -> tuple[DiscreteLaplaceNoise, DiscreteLaplaceNoise]:
    """The threshold and query noise of ``variant`` (scales rounded up, like the correct mechanism)."""
    monotonic = variant == "monotonic_noise"
    eps1, eps2 = optimal_split(epsilon, c, monotonic=monotonic)
    spread = c if monotonic else 2 * c
    return (
        DiscreteLaplaceNoise(round_up(Fraction(1) / Fraction(eps1))),
        DiscreteLaplaceNoise(round_up(Fraction(spread) / Fraction(eps2))),
    )


def _thresholds(threshold: float | Sequence[float], k: int) -> list[float]:
    if isinstance(threshold, int | float):
        return [threshold] * k
    ts = list(threshold)
    if len(ts) != k:
        raise ValueError(f"threshold: one per query needed, got {len(ts)} for {k} queries")
    return ts


def run_variant(
    variant: Variant,
    answers: Sequence[int],
    threshold: float | Sequence[float],
    *,
    epsilon: float,
    c: int,
    source: RandomSource,
) -> tuple[object, ...]:
    """One run of a broken variant on exact ``answers`` (sensitivity 1), returned as a tuple;
    ``threshold`` is one ``T`` for all queries or one ``T_i`` per query."""
    threshold_noise, nu = _noises(variant, epsilon, c)
    ts = _thresholds(threshold, len(answers))
    rho = threshold_noise.sample(source)
    out: list[object] = []
    positives = 0
    for q, t in zip(answers, ts, strict=True):
        if variant == "no_query_noise":
            out.append("above" if q >= t + rho else "below")
            continue
        if variant == "fresh_threshold_noise":
            rho = threshold_noise.sample(source)
        noise = nu.sample(source)
        if q + noise >= t + rho:
            positives += 1
            out.append(q + noise if variant == "reused_noise_release" else "above")
            if variant in _STOPPING and positives >= c:
                break
        else:
            out.append("below")
    return tuple(out)


def run_variant_many(
    variant: Variant,
    answers: Sequence[int],
    threshold: float | Sequence[float],
    *,
    epsilon: float,
    c: int,
    n: int,
    source: RandomSource,
) -> list[tuple[object, ...]]:
    """``n`` independent runs of :func:`run_variant`, with the noise drawn in vectorised batches, one
    query at a time for the runs still going (so a variant that stops costs only the queries it asks)."""
    threshold_noise, nu = _noises(variant, epsilon, c)
    ts = _thresholds(threshold, len(answers))
    fresh = variant == "fresh_threshold_noise"
    rho = None if fresh else threshold_noise.sample_many(source, n)
    outs: list[list[object]] = [[] for _ in range(n)]
    positives = np.zeros(n, dtype=np.int64)
    alive = np.arange(n)
    for q, t in zip(answers, ts, strict=True):
        if alive.size == 0:
            break
        m = alive.size
        r = threshold_noise.sample_many(source, m) if rho is None else rho[alive]
        noise = np.zeros(m, dtype=np.int64) if variant == "no_query_noise" else nu.sample_many(source, m)
        noisy = q + noise
        above = noisy >= t + r
        if variant == "reused_noise_release":
            labels: list[object] = [
                v if h else "below" for h, v in zip(above.tolist(), noisy.tolist(), strict=True)
            ]
        else:
            labels = ["above" if h else "below" for h in above.tolist()]
        for i, label in zip(alive.tolist(), labels, strict=True):
            outs[i].append(label)
        if variant in _STOPPING:
            positives[alive[above]] += 1
            alive = alive[positives[alive] < c]
    return [tuple(o) for o in outs]
