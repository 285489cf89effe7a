"""Sparse-vector variants that are NOT private, kept only so audits can show they are caught.

Lyu, Su and Li (PVLDB 2017, Section 3 and Table 1) list published SVT variants whose privacy claims
fail. Each function below runs one such variant on a vector of exact query answers and returns its
output as a tuple ("above" / "below", or the released value); :func:`claimed_epsilon` is the epsilon its authors claimed. NEVER use these to
release data: the project's correct mechanism is :class:`overlapdp.mechanisms.SparseVector`.

- ``no_query_noise``: compares ``q_i(D) >= T + rho`` with no noise on the queries and never stops
  (Stoddard et al. 2014; Lyu et al. Algorithm 5, infinite privacy loss): two queries that move in
  opposite directions between neighbours give an output impossible on one of them.
- ``reused_noise_release``: on "above" releases ``q_i(D) + nu_i``, the SAME noise used in the
  comparison (Roth 2011; Lyu et al. Algorithm 3): the released value bounds the threshold noise, and a
  run of "below" answers then leaks through every one of them.
- ``no_stop``: Lyu et al.'s Algorithm 1 noise but without stopping after ``c`` positives: each further
  "above" on a query that moves against the others costs more, without bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

import numpy as np

from overlapdp.mechanisms.noise import DiscreteLaplace
from overlapdp.mechanisms.randomness import RandomSource
from overlapdp.mechanisms.rationals import round_up
from overlapdp.mechanisms.sparse_vector import optimal_split

Variant = Literal["no_query_noise", "reused_noise_release", "no_stop"]
VARIANTS: tuple[Variant, ...] = ("no_query_noise", "reused_noise_release", "no_stop")


def claimed_epsilon(variant: Variant, epsilon: float) -> float:
    """Each variant is run with the budget it claims to satisfy: ``epsilon`` itself."""
    return epsilon


def run_variant(
    variant: Variant,
    answers: Sequence[int],
    threshold: float,
    *,
    epsilon: float,
    c: int,
    source: RandomSource,
) -> tuple[object, ...]:
    """One run of a broken variant on exact ``answers`` (sensitivity 1), returned as a tuple."""
    eps1, eps2 = optimal_split(epsilon, c)
    rho = DiscreteLaplace(round_up(Fraction(1) / Fraction(eps1))).sample(source)
    nu = DiscreteLaplace(round_up(Fraction(2 * c) / Fraction(eps2)))
    out: list[object] = []
    positives = 0
    for q in answers:
        if variant == "no_query_noise":
            out.append("above" if q >= threshold + rho else "below")
            continue
        noise = nu.sample(source)
        if q + noise >= threshold + rho:
            positives += 1
            out.append(q + noise if variant == "reused_noise_release" else "above")
            if variant == "reused_noise_release" and positives >= c:
                break
        else:
            out.append("below")
    return tuple(out)


def run_variant_many(
    variant: Variant,
    answers: Sequence[int],
    threshold: float,
    *,
    epsilon: float,
    c: int,
    n: int,
    source: RandomSource,
) -> list[tuple[object, ...]]:
    """``n`` independent runs of :func:`run_variant`, with the noise drawn in vectorised batches."""
    eps1, eps2 = optimal_split(epsilon, c)
    rho = DiscreteLaplace(round_up(Fraction(1) / Fraction(eps1))).sample_many(source, n)
    k = len(answers)
    nu = DiscreteLaplace(round_up(Fraction(2 * c) / Fraction(eps2))).sample_many(source, n * k).reshape(n, k)
    q = np.asarray(answers, dtype=np.int64)
    if variant == "no_query_noise":
        nu[:] = 0
    above = (q + nu) >= threshold + rho[:, None]
    outs: list[tuple[object, ...]] = []
    values = (q + nu).tolist()
    for row, vals in zip(above.tolist(), values, strict=True):
        if variant != "reused_noise_release":
            outs.append(tuple("above" if h else "below" for h in row))
            continue
        out: list[object] = []
        positives = 0
        for hit, v in zip(row, vals, strict=True):
            if hit:
                positives += 1
                out.append(v)
                if positives >= c:
                    break
            else:
                out.append("below")
        outs.append(tuple(out))
    return outs
