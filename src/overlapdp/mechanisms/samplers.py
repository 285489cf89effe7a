"""Exact samplers with integer arithmetic (Canonne, Kamath, Steinke 2020, "The Discrete Gaussian for
Differential Privacy", Algorithms 1-3; MATH.md 6.2).

- ``Bernoulli(exp(-gamma))`` for rational ``gamma = num/den`` by the alternating-series trick (Alg. 1):
  for ``gamma <= 1`` draw ``A_k ~ Bernoulli(gamma/k)`` for ``k = 1, 2, ...`` until one fails and return
  whether that ``k`` is odd; for ``gamma > 1`` multiply ``floor(gamma)`` draws of
  ``Bernoulli(exp(-1))`` and one of ``Bernoulli(exp(-(gamma - floor(gamma))))``.
- discrete Laplace of rational scale ``t = s/r`` (Alg. 2): ``U`` uniform in ``[0, s)`` kept with
  probability ``exp(-U/s)``, ``V`` geometric with ratio ``exp(-1)``, ``Y = floor((U + sV)/r)``, a uniform
  sign, ``-0`` rejected; the result has pmf ``(e^{1/t}-1)/(e^{1/t}+1) e^{-|y|/t}``.
- discrete Gaussian of rational variance parameter ``sigma2 = a/b`` (Alg. 3): propose ``Y`` from the
  discrete Laplace of scale ``t = floor(sigma)+1`` and keep it with probability
  ``exp(-(|Y| - sigma2/t)^2 / (2 sigma2))``; the result has pmf proportional to ``exp(-y^2/(2 sigma2))``.

Every Bernoulli draw compares a uniform integer (from :class:`RandomSource`, exact rejection sampling)
with an integer numerator: no floating point touches the noise. Each algorithm exists twice: a scalar
version on Python integers (any size) and a vectorised numpy version on 64-bit integers, used when the
operands provably fit (elements that do not fit fall back to the scalar version, so the batch is exact
too).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from overlapdp.mechanisms.randomness import RandomSource

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_TWO64 = 1 << 64
_MASK64 = _TWO64 - 1
# Denominators (times the alternating-series counter k < 2^8) must stay below 2^63.
_DEN_LIMIT = 1 << 55
_K_LIMIT = 1 << 8
# Numerators (squared, for the Gaussian) must stay below 2^62.
_ROOT_LIMIT = 1 << 31


# --------------------------------------------------------------------------------------------------
# scalar versions (Python integers, any size)
# --------------------------------------------------------------------------------------------------
def _unit_from(src: RandomSource, num: int, den: int, k: int) -> bool:
    """Continue the alternating-series loop for ``Bernoulli(exp(-num/den))``, ``num <= den``, at ``k``.

    Each step draws ``A_k ~ Bernoulli(num/(den k))`` as "a uniform integer below ``den k`` is below
    ``num``" (``randbelow`` inlined: this loop is the scalar samplers' hot path).
    """
    if num == 0:
        return True
    word = src.word
    while True:
        m = den * k
        if m > _MASK64:
            if src.randbelow(m) >= num:
                return k % 2 == 1
        else:
            floor = (_TWO64 - m) % m
            w = word()
            while w < floor:
                w = word()
            if w % m >= num:
                return k % 2 == 1
        k += 1


def _exp_neg_one(src: RandomSource) -> bool:
    """One draw of ``Bernoulli(exp(-1))``: the series loop for ``gamma = 1/1`` from ``k = 2``, since its
    first test ``A_1 ~ Bernoulli(1)`` always passes (starting at 1 only spends a word)."""
    return _unit_from(src, 1, 1, 2)


def bernoulli_exp_neg_scalar(src: RandomSource, num: int, den: int) -> bool:
    """One draw of ``Bernoulli(exp(-num/den))`` for integers ``num >= 0``, ``den >= 1`` (CKS Alg. 1)."""
    while num > den:
        if not _exp_neg_one(src):
            return False
        num -= den
    return _unit_from(src, num, den, 1)


def discrete_laplace_scalar(src: RandomSource, s: int, r: int) -> int:
    """One draw of the discrete Laplace of scale ``s/r`` (CKS Alg. 2)."""
    while True:
        u = src.randbelow(s)
        if not _unit_from(src, u, s, 1):
            continue
        v = 0
        while _exp_neg_one(src):
            v += 1
        y = (u + s * v) // r
        negative = src.word() & 1
        if negative and y == 0:
            continue
        return -y if negative else y


def gaussian_proposal_scale(a: int, b: int) -> int:
    """``t = floor(sigma) + 1`` for ``sigma^2 = a/b`` (``floor(sqrt(x)) = isqrt(floor(x))``)."""
    return math.isqrt(a // b) + 1


def discrete_gaussian_scalar(src: RandomSource, a: int, b: int) -> int:
    """One draw of the discrete Gaussian with ``sigma^2 = a/b`` (CKS Alg. 3)."""
    t = gaussian_proposal_scale(a, b)
    den = 2 * a * b * t * t
    while True:
        y = discrete_laplace_scalar(src, t, 1)
        # (|y| - sigma2/t)^2 / (2 sigma2) = (|y| t b - a)^2 / (2 a b t^2)
        diff = abs(y) * t * b - a
        if bernoulli_exp_neg_scalar(src, diff * diff, den):
            return y


# --------------------------------------------------------------------------------------------------
# vectorised versions (numpy int64, exact while operands fit; otherwise scalar fallback per element)
# --------------------------------------------------------------------------------------------------
def _below_const(src: RandomSource, m: int, n: int) -> npt.NDArray[np.uint64]:
    """``n`` uniform integers in ``[0, m)`` for one ``1 <= m < 2^64`` (exact rejection)."""
    if m & (m - 1) == 0:  # a power of two: mask, nothing rejected
        return src.words(n) & np.uint64(m - 1)
    floor = np.uint64(((1 << 64) - m) % m)
    w = src.words(n)  # a fresh writable array this function owns (RandomSource.words): rejected words
    bad = w < floor  # are redrawn in place
    while bad.any():
        idx = np.flatnonzero(bad)
        w[idx] = src.words(idx.size)
        bad[idx] = w[idx] < floor
    return w % np.uint64(m)


def _unit_batch(src: RandomSource, num: IntArray, den: int) -> BoolArray:
    """``Bernoulli(exp(-num_i/den))`` for each entry, ``0 <= num_i <= den < 2^55``."""
    n = num.size
    out = np.empty(n, dtype=np.bool_)
    idx = np.arange(n)
    live = num.astype(np.uint64)
    k = 1
    while idx.size:
        if k >= _K_LIMIT:  # probability about 1/255!: finish exactly in Python
            for i, x in zip(idx.tolist(), live.tolist(), strict=True):
                out[i] = _unit_from(src, int(x), den, k)
            break
        go_on = _below_const(src, den * k, idx.size) < live
        out[idx[~go_on]] = k % 2 == 1
        idx = idx[go_on]
        live = live[go_on]
        k += 1
    return out


def _exp_neg_one_batch(src: RandomSource, n: int) -> BoolArray:
    """``n`` draws of ``Bernoulli(exp(-1))``: the loop's first test (``gamma/1 = 1``) always passes."""
    out = np.empty(n, dtype=np.bool_)
    idx = np.arange(n)
    k = 2
    while idx.size:
        go_on = _below_const(src, k, idx.size) == 0
        out[idx[~go_on]] = k % 2 == 1
        idx = idx[go_on]
        k += 1
    return out


def _geometric_batch(src: RandomSource, n: int) -> IntArray:
    """``n`` counts of successes of ``Bernoulli(exp(-1))`` before the first failure."""
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        hit = _exp_neg_one_batch(src, idx.size)
        idx = idx[hit]
        v[idx] += 1
    return v


def bernoulli_exp_neg_batch(src: RandomSource, num: IntArray, den: int) -> BoolArray:
    """``Bernoulli(exp(-num_i/den))`` for each entry, ``num_i >= 0`` (< 2^62), ``1 <= den < 2^55``."""
    whole = num // den
    frac = num - whole * den
    alive = np.ones(num.size, dtype=np.bool_)
    idx = np.flatnonzero(whole > 0)
    j = 0
    while idx.size:  # floor(gamma) factors of Bernoulli(exp(-1)), stopping at the first failure
        hit = _exp_neg_one_batch(src, idx.size)
        alive[idx[~hit]] = False
        idx = idx[hit]
        j += 1
        idx = idx[whole[idx] > j]
    idx = np.flatnonzero(alive)
    alive[idx] = _unit_batch(src, frac[idx], den)
    return alive


def discrete_laplace_batch(src: RandomSource, s: int, r: int, n: int) -> IntArray:
    """``n`` draws of the discrete Laplace of scale ``s/r`` (CKS Alg. 2, vectorised)."""
    if s >= _DEN_LIMIT or r >= _DEN_LIMIT:
        return np.array([discrete_laplace_scalar(src, s, r) for _ in range(n)], dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        # About 63% of U survive and few signed zeros are rejected: over-draw to finish in one pass.
        m = need + need // 2 + need // 8 + 16
        u = _below_const(src, s, m).astype(np.int64)
        u = u[_unit_batch(src, u, s)]
        v = _geometric_batch(src, u.size)
        y = (u + s * v) // r
        negative = (src.words(y.size) & np.uint64(1)).astype(np.bool_)
        keep = ~(negative & (y == 0))
        y = np.where(negative, -y, y)[keep]
        take = min(y.size, need)
        out[filled : filled + take] = y[:take]  # i.i.d. draws: keeping the first ones is unbiased
        filled += take
    return out


def discrete_gaussian_batch(src: RandomSource, a: int, b: int, n: int) -> IntArray:
    """``n`` draws of the discrete Gaussian with ``sigma^2 = a/b`` (CKS Alg. 3, vectorised)."""
    t = gaussian_proposal_scale(a, b)
    den = 2 * a * b * t * t
    if den >= _DEN_LIMIT or t >= _DEN_LIMIT:
        return np.array([discrete_gaussian_scalar(src, a, b) for _ in range(n)], dtype=np.int64)
    # |y| t b - a fits in 31 bits (so its square fits in 62) iff |y| <= limit.
    limit = (_ROOT_LIMIT - a) // (t * b) if a < _ROOT_LIMIT else -1
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        m = need + need // 2 + 16
        y = discrete_laplace_batch(src, t, 1, m)
        ay = np.abs(y)
        fits = ay <= limit
        accept = np.empty(m, dtype=np.bool_)
        diff = ay[fits] * (t * b) - a
        accept[fits] = bernoulli_exp_neg_batch(src, diff * diff, den)
        for i in np.flatnonzero(~fits).tolist():
            d = abs(int(y[i])) * t * b - a
            accept[i] = bernoulli_exp_neg_scalar(src, d * d, den)
        y = y[accept]
        take = min(y.size, need)
        out[filled : filled + take] = y[:take]
        filled += take
    return out
