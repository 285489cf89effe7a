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
    def units(self) -> tuple[list[int], int]:
        """``(nums, k)``: the EXACT scaled loads are ``nums[q] / 2**k`` (``f`` of the original weight over
        $2^E$, or $4^E$ for ``l2``), on integers; the stored float loads may be rounded up from them."""
        if self.weights is None:
            return [1] * int(self.loads.shape[0]), 0
        pairs: list[tuple[int, int]] = []
        for w in self.weights.tolist():
            n, d = float(w).as_integer_ratio()
            k = d.bit_length() - 1 + self.shift  # w / 2**E == n / 2**k, k >= 1 when w > 0
            if self.name == "l2":
                n, k = n * n, 2 * k
            pairs.append((n, k))
        top = max((k for n, k in pairs if n), default=0)
        return [n << (top - k) if n else 0 for n, k in pairs], top

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
