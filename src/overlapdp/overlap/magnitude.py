"""Weights of any finite magnitude: loads normalised by a power of two, results composed exactly.

MATH.md 7.8 (magnitudes). The routes sum per-query loads $f(w_q)$ in floating point. Raw weights
overflow those sums (``5e307 + 8e307 + 1e308`` is ``inf``, and the dense grid's inclusion-exclusion then
makes ``inf - inf = nan``) and their squares underflow (``(1e-170)**2 == 0``), after which a route can
locate the maximum on a wrong row or report 0. So every route runs on NORMALISED loads:

- the weights are divided by $2^E$ where $2^{E-1}\\le\\max_q w_q<2^E$; in binary floating point that is
  exact unless the quotient falls below the normal range, so the largest scaled weight lies in
  $[\\tfrac12,1)$ and a row's load is at most the number of queries (no overflow);
- ``l2`` squares the scaled weights (the largest square lies in $[\\tfrac14,1)$);
- a scaled load that is not exactly representable (subnormal or below the smallest subnormal: a weight
  more than $2^{1021}$ times lighter than the heaviest, or its square) is rounded UP to the next float,
  so every stored load is at least the true one and differs from it by at most $2^{-1074}$ of the
  heaviest: the location of the maximum is then as good as with exact loads up to a relative
  $t\\cdot2^{-1073}$, far below one rounding of the result.

The reported value is not taken from those float sums: it is recomputed from the ORIGINAL weights of the
queries covering the witness row, exactly (integers / Fractions), and rounded UP to a float
(:func:`compose_up`). A value above the largest float (about 1.8e308) cannot be reported: it raises
:class:`MagnitudeError`, which names the heaviest query involved.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Literal

import numpy as np
import numpy.typing as npt

from overlapdp.errors import MagnitudeError as MagnitudeError
from overlapdp.exact import MAX_FLOAT, fsum_up, sqrt_up
from overlapdp.overlap.result import FloatArray

MIN_NORMAL = sys.float_info.min


def exponent(weights: FloatArray) -> int:
    """$E$ with $2^{E-1}\\le\\max w<2^E$ (0 when every weight is 0)."""
    top = float(np.max(weights)) if weights.size else 0.0
    return math.frexp(top)[1] if top > 0 else 0


def scale_up(values: FloatArray, shift: int) -> FloatArray:
    """``values / 2**shift``, each rounded UP when the quotient is not exact (it left the normal range)."""
    out = np.ldexp(values, -shift)
    inexact = np.ldexp(out, shift) != values
    if inexact.any():
        out[inexact] = np.nextafter(out[inexact], np.inf)
    return out


def square_up(values: FloatArray) -> FloatArray:
    """``values**2``, rounded UP where the square is not a normal float (underflow); elsewhere the usual
    rounding (relative 2^-53), which only moves the search, never the reported value."""
    out = values * values
    small = (out < MIN_NORMAL) & (values > 0)
    if small.any():
        out[small] = np.nextafter(out[small], np.inf)
    return out


def normalised_loads(name: str, weights: FloatArray) -> tuple[FloatArray, int]:
    """Per-query loads for the routes and the exponent $E$: ``sum`` loads are $w/2^E$, ``l2`` loads are
    $(w/2^E)^2$ (both rounded up where not exact); ``count`` loads are 1 with $E=0$."""
    if name == "count":
        return np.ones(weights.shape[0]), 0
    shift = exponent(weights)
    scaled = scale_up(weights, shift)
    return (square_up(scaled) if name == "l2" else scaled), shift


def unscale_up(name: str, total: float, shift: int, what: str) -> float:
    """A safe bound in scaled units (sum of loads) back in the units of the weights, rounded up."""
    total = max(float(total), 0.0)
    if name == "l2":
        total = sqrt_up(Fraction(total))
    try:
        out = math.ldexp(total, shift)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise MagnitudeError(
            f"{what}: the bound on the maximum overlap exceeds the largest float ({MAX_FLOAT:g})"
        )
    if shift < 0 and total > 0 and math.ldexp(out, -shift) < total:
        out = math.nextafter(out, math.inf)
    return out


def exact_total(name: str, weights: Sequence[float]) -> Fraction:
    """The exact $\\sum f(w)$ of float weights (``f(w)=w`` or ``w**2``), on integers."""
    nums: list[int] = []
    exps: list[int] = []
    for w in weights:
        n, d = float(w).as_integer_ratio()
        k = d.bit_length() - 1  # d == 2**k
        if name == "l2":
            n, k = n * n, 2 * k
        nums.append(n)
        exps.append(k)
    if not nums:
        return Fraction(0)
    top = max(exps)
    return Fraction(sum(n << (top - k) for n, k in zip(nums, exps, strict=True)), 1 << top)


def compose_up(name: str, weights: Sequence[float]) -> float:
    """``comp`` of explicit weights, exactly, rounded UP to a float (``inf`` when it exceeds the range).

    The sum takes ``math.fsum`` (correctly rounded) and one more exact sum for the sign of its error;
    when that overflows, and for ``l2``, the sum is taken on integers.
    """
    if name == "count":
        return float(len(weights))
    if not weights:
        return 0.0
    if name == "sum":
        return fsum_up(weights)
    fast = _l2_up_fast(np.asarray(weights, dtype=np.float64))
    return fast if fast is not None else sqrt_up(exact_total("l2", weights))


# Veltkamp's splitter for doubles (2^27 + 1), and the smallest scaled weight for which every partial
# product of Dekker's exact square stays a normal float.
_SPLIT = 134217729.0
_FAST_L2_SMALLEST = 2.0**-400


def _exact_square_terms(u: FloatArray) -> FloatArray:
    """Floats whose exact sum is the exact sum of ``u**2`` (Dekker's product: ``u*u = p + e``), valid
    when ``0.5 <= max u < 1`` and every non-zero ``u >= 2**-400`` (no partial product underflows)."""
    c = u * _SPLIT
    hi = c - (c - u)
    lo = u - hi
    p = u * u
    e = (((hi * hi - p) + hi * lo) + lo * hi) + lo * lo
    return np.concatenate([p, e])


def _l2_up_fast(w: FloatArray) -> float | None:
    """sqrt(sum w^2) rounded up, on floats with exact error terms; None when the weights span too wide
    a range for that (the caller then sums on integers)."""
    top = float(w.max()) if w.size else 0.0
    if top <= 0:
        return 0.0
    shift = math.frexp(top)[1]
    u = np.ldexp(w, -shift)
    nonzero = u[w > 0]  # a weight whose scaled value underflowed to 0 counts too
    if float(nonzero.min()) < _FAST_L2_SMALLEST:
        return None
    terms = _exact_square_terms(u).tolist()
    neg = [-x for x in terms]

    def at_least(r: float) -> bool:
        """Whether r^2 >= the exact sum of squares (the sign of an exact difference, via fsum)."""
        return math.fsum([*_exact_square_terms(np.array([r])).tolist(), *neg]) >= 0

    r = math.sqrt(math.fsum(terms))
    for _ in range(4):
        if not at_least(r):
            r = math.nextafter(r, math.inf)
            continue
        down = math.nextafter(r, -math.inf)
        if down > 0 and at_least(down):
            r = down
            continue
        break
    try:
        out = math.ldexp(r, shift)
    except OverflowError:
        return math.inf
    if shift < 0 and math.ldexp(out, -shift) < r:
        out = math.nextafter(out, math.inf)  # the result fell below the normal range
    return out


def check_representable(value: float, what: str) -> float:
    """``value`` when a computed maximum is a float (finite), else :class:`MagnitudeError` naming ``what``
    (a result beyond the float range; an input is checked by :mod:`overlapdp.validation`)."""
    if not math.isfinite(value):
        raise MagnitudeError(f"{what}: the maximum overlap exceeds the largest float ({MAX_FLOAT:g})")
    return value


# Bits per limb of the exact loads held in numpy (ExactLoads): a float64 sum of up to 2^29 limbs is exact.
LIMB_BITS = 24
_LIMB_MASK = (1 << LIMB_BITS) - 1
# Largest (queries x limbs) table of exact loads held in numpy (int64 entries); beyond it (weights
# spanning hundreds of binary orders of magnitude over many queries) the loads are Python integers.
LIMB_TABLE_LIMIT = 1 << 23
IntArray = npt.NDArray[np.int64]


def _carry(table: IntArray) -> None:
    """Normalise base-2^24 limbs in place (``table[j]`` is limb ``j``, entries non-negative): every limb
    below 2^24 but the last."""
    for j in range(table.shape[0] - 1):
        table[j + 1] += table[j] >> LIMB_BITS
        table[j] &= _LIMB_MASK


class ExactLoads:
    """Exact non-negative scaled loads ``nums[q] / 2**k`` on integers, computed with numpy (no Python step
    per query): MATH.md 7.8. Held as base-2^24 limbs (``limbs[j, q]`` is limb ``j`` of query ``q``, an
    ``(L, t)`` int64 table) unless that table would exceed ``LIMB_TABLE_LIMIT`` entries; ``nums``
    (Python integers) is built on demand.
    """

    def __init__(self, limbs: IntArray | None, k: int, nums: list[int] | None = None) -> None:
        self.limbs = limbs
        self.k = k
        self._nums = nums

    @staticmethod
    def ones(t: int) -> ExactLoads:
        return ExactLoads(np.ones((1, t), dtype=np.int64), 0)

    @staticmethod
    def of(weights: FloatArray, shift: int, square: bool) -> ExactLoads:
        """``f(w)`` of every weight over ``2^k`` exactly: ``w = b 2^p`` with ``b`` odd (from the binary
        exponent and the trailing zeros of the 53-bit significand) has, as ``float.as_integer_ratio``,
        the denominator ``2^(max(0, -p) + shift)`` after the scaling (doubled, and ``b 2^max(0,p)``
        squared, for ``l2``); ``k`` is the largest, and each numerator is shifted up to it."""
        t = int(weights.shape[0])
        pos = np.flatnonzero(weights > 0)
        if pos.size == 0:
            return ExactLoads(np.zeros((1, t), dtype=np.int64), 0)
        mant, e = np.frexp(weights[pos])
        m = np.ldexp(mant, 53).astype(np.int64)  # exact: the significand as an integer < 2^53
        low = m & -m
        tz = (np.frexp(low.astype(np.float64))[1] - 1).astype(np.int64)
        b = m >> tz  # odd, < 2^53
        p = e.astype(np.int64) - 53 + tz  # w == b * 2^p
        den = np.maximum(0, -p) + shift
        extra = np.maximum(0, p)
        if not square:
            k = int(den.max())
            shifts = k - den + extra  # nums = b << shifts
            if int((shifts - tz).max()) <= 62 - 53:
                # Every numerator (b has 53 - tz bits) fits in int64, the usual case: limbs straight
                # from it.
                nums = np.zeros(t, dtype=np.int64)
                nums[pos] = b << shifts
                limbs = np.stack([(nums >> (LIMB_BITS * j)) & _LIMB_MASK for j in range(3)])
                return ExactLoads(limbs, k)
            base = np.stack([b & _LIMB_MASK, (b >> LIMB_BITS) & _LIMB_MASK, b >> (2 * LIMB_BITS)])
        else:
            # b^2 from three 24-bit limbs (products < 2^48, column sums < 2^50: exact in int64).
            b3 = np.stack([b & _LIMB_MASK, (b >> LIMB_BITS) & _LIMB_MASK, b >> (2 * LIMB_BITS)])
            base = np.zeros((6, pos.size), dtype=np.int64)
            for i in range(3):
                for j in range(3):
                    base[i + j] += b3[i] * b3[j]
            _carry(base)
            den, extra = 2 * den, 2 * extra
            k = int(den.max())
            shifts = k - den + extra
        q, r = shifts // LIMB_BITS, shifts % LIMB_BITS
        width = int(q.max()) + base.shape[0] + 1
        if t * width > LIMB_TABLE_LIMIT:
            return ExactLoads(None, k, _python_nums(weights, shift, square))
        limbs = np.zeros((width, t), dtype=np.int64)
        flat = limbs.reshape(-1)
        for a in range(base.shape[0]):
            v = base[a] << r  # < 2^48
            at = (q + a) * t + pos  # one entry per query for each a: no repeated index
            flat[at] += v & _LIMB_MASK
            flat[at + t] += v >> LIMB_BITS
        _carry(limbs)
        return ExactLoads(limbs, k)

    @property
    def nums(self) -> list[int]:
        """The integers ``nums[q]`` (one Python integer per query, built once)."""
        if self._nums is None:
            assert self.limbs is not None
            width = self.limbs.shape[0]
            if width * LIMB_BITS <= 62:
                acc64 = np.zeros(self.limbs.shape[1], dtype=np.int64)
                for j in range(width):
                    acc64 += self.limbs[j] << (LIMB_BITS * j)
                self._nums = acc64.tolist()
            else:
                acc = self.limbs[width - 1].astype(object)
                for j in range(width - 2, -1, -1):
                    acc = (acc << LIMB_BITS) + self.limbs[j].astype(object)
                self._nums = [int(x) for x in acc.tolist()]
        return self._nums

    def total(self, indices: Sequence[int] | IntArray) -> int:
        """``sum(nums[q] for q in indices)``: numpy sums of each limb (int64 is exact for fewer than 2^39
        queries), then one Python step per limb."""
        idx = np.asarray(indices, dtype=np.int64)
        if self.limbs is None:
            nums = self.nums
            return sum(nums[i] for i in idx.tolist())
        sums = self.limbs[:, idx].sum(axis=1).tolist()
        return sum(int(x) << (LIMB_BITS * j) for j, x in enumerate(sums))

    def argmax_total(self, cover: npt.NDArray[np.bool_], indices: IntArray) -> int:
        """The first row of ``cover`` (rows x ``len(indices)``) whose selected queries have the largest
        exact total, without a Python integer per row: the limb sums (float64 products of 24-bit limbs,
        exact for fewer than 2^29 queries) are carried to normal form and compared limb by limb from the
        top (the larger total has the larger top limb, then the larger next one, ...)."""
        if self.limbs is None or cover.shape[1] >= 1 << 29:
            totals = self.totals(cover, indices)
            return max(range(len(totals)), key=totals.__getitem__)
        sums = (self.limbs[:, indices].astype(np.float64) @ cover.T.astype(np.float64)).astype(np.int64)
        _carry(sums)  # limbs x rows, each below 2^53 before the carries: int64 throughout
        cand = np.arange(cover.shape[0])
        for j in range(sums.shape[0] - 1, -1, -1):
            col = sums[j, cand]
            cand = cand[col == col.max()]
            if cand.size == 1:
                break
        return int(cand[0])

    def totals(self, cover: npt.NDArray[np.bool_], indices: IntArray) -> list[int]:
        """For each row of the boolean matrix ``cover`` (rows x ``len(indices)``), the exact total of the
        selected queries: float64 products of the 24-bit limbs (exact for fewer than 2^29 queries)."""
        if self.limbs is None or cover.shape[1] >= 1 << 29:
            nums = [self.nums[i] for i in indices.tolist()]
            return [sum(nums[j] for j in np.flatnonzero(row).tolist()) for row in cover]
        sums = cover.astype(np.float64) @ self.limbs[:, indices].T.astype(np.float64)
        return [sum(int(x) << (LIMB_BITS * j) for j, x in enumerate(row)) for row in sums.tolist()]


def _python_nums(weights: FloatArray, shift: int, square: bool) -> list[int]:
    """The exact loads on Python integers, one step per weight (weights spanning too wide a range for
    the numpy limbs)."""
    pairs: list[tuple[int, int]] = []
    for w in weights.tolist():
        n, d = float(w).as_integer_ratio()
        k = d.bit_length() - 1 + shift  # w / 2**E == n / 2**k, k >= 1 when w > 0
        if square:
            n, k = n * n, 2 * k
        pairs.append((n, k))
    top = max((k for n, k in pairs if n), default=0)
    return [n << (top - k) if n else 0 for n, k in pairs]


@dataclass(frozen=True)
class Loads:
    """``comp = g(sum of loads)`` (MATH.md 7.2) on normalised loads.

    ``loads`` are the routes' per-query loads in scaled units (see the module docstring), ``weights``
    the original weights (None for ``count``) and ``shift`` the exponent $E$ they were divided by.
    """

    name: Literal["count", "sum", "l2"]
    loads: FloatArray
    weights: FloatArray | None
    shift: int
    ids: Sequence[str | None] = ()

    @staticmethod
    def of(name: Literal["count", "sum", "l2"], weights: FloatArray, ids: Sequence[str | None] = ()) -> Loads:
        loads, shift = normalised_loads(name, weights)
        return Loads(name, loads, None if name == "count" else weights, shift, ids)

    def outer(self, total: float) -> float:
        """A bound in scaled units (a sum of loads) as a bound on ``comp``, rounded up."""
        if self.name == "count":
            return max(float(total), 0.0)
        return unscale_up(self.name, total, self.shift, self._heaviest(None))

    def compose(self, indices: Sequence[int] | npt.NDArray[np.int64]) -> float:
        """``comp`` of the ORIGINAL weights at ``indices``, exactly, rounded up; :class:`MagnitudeError`
        when it exceeds the largest float."""
        if self.weights is None:
            return float(len(indices))
        idx = np.asarray(indices, dtype=np.int64)
        value = compose_up(self.name, self.weights[idx].tolist())
        return check_representable(value, self._heaviest(idx))

    @cached_property
    def exact(self) -> ExactLoads:
        """The EXACT scaled loads as integers (:class:`ExactLoads`), computed once with numpy."""
        if self.weights is None:
            return ExactLoads.ones(int(self.loads.shape[0]))
        return ExactLoads.of(self.weights, self.shift, self.name == "l2")

    @property
    def units(self) -> tuple[list[int], int]:
        """``(nums, k)``: the EXACT scaled loads are ``nums[q] / 2**k`` (``f`` of the original weight over
        $2^E$, or $4^E$ for ``l2``), on integers; the stored float loads may be rounded up from them."""
        return self.exact.nums, self.exact.k

    @cached_property
    def unit_exponent(self) -> int:
        """``k`` of :attr:`units` (the exact scaled loads are multiples of ``2**-k``), from numpy on the
        weights' binary exponents: no Python step per weight (the dyadic test of every route reads it)."""
        if self.weights is None:
            return 0
        w = self.weights[self.weights > 0]
        if w.size == 0:
            return 0
        # w = M * 2**(e - 53) with M an integer in [2^52, 2^53) (subnormals too: frexp normalises);
        # its reduced denominator is 2**max(0, -(e - 53 + trailing zeros of M)).
        mant, e = np.frexp(w)
        m = np.ldexp(mant, 53).astype(np.int64)
        low = m & -m
        tz = np.frexp(low.astype(np.float64))[1] - 1
        den = np.maximum(0, 53 - e.astype(np.int64) - tz)
        top = int(den.max()) + self.shift
        return 2 * top if self.name == "l2" else top

    @cached_property
    def loads_exact(self) -> bool:
        """Whether every stored float load equals its exact scaled load (no rounding in scale / square).

        Vectorised: the scaled weight is exact iff scaling it back gives the weight; its square is
        exact iff Dekker's error term is 0 (for scaled weights >= 2^-400, where no partial product
        underflows; smaller ones are checked on integers)."""
        if self.weights is None:
            return True
        w = self.weights
        scaled = np.ldexp(w, -self.shift)
        if not bool(np.array_equal(np.ldexp(scaled, self.shift), w)):
            return False
        if self.name == "sum":
            return bool(np.array_equal(scaled, self.loads))
        small = (scaled > 0) & (scaled < _FAST_L2_SMALLEST)
        big = scaled[~small]
        terms = _exact_square_terms(big)
        if not (np.array_equal(terms[: big.size], self.loads[~small]) and not terms[big.size :].any()):
            return False
        for u, load in zip(scaled[small].tolist(), self.loads[small].tolist(), strict=True):
            if Fraction(u) ** 2 != Fraction(load):
                return False
        return True

    def _heaviest(self, idx: npt.NDArray[np.int64] | None) -> str:
        """Names the heaviest query (of ``idx``, or of all) for an error message."""
        if self.weights is None or self.weights.size == 0:
            return "workload"
        pool = np.arange(self.weights.size) if idx is None or idx.size == 0 else idx
        i = int(pool[int(np.argmax(self.weights[pool]))])
        qid = self.ids[i] if i < len(self.ids) else None
        return f"query {qid!r} (#{i}, weight {float(self.weights[i])!r})"
