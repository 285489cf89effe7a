"""Privacy loss distributions (PLD) on a grid, pessimistic by construction (MATH.md 5.4).

A PLD of a dominating pair (P, Q) is the law of $L=\\ln\\frac{P(o)}{Q(o)}$ for $o\\sim P$; its privacy
profile is $\\delta(\\varepsilon)=\\mu_\\infty+\\sum_\\ell p_\\ell\\max(0,1-e^{\\varepsilon-\\ell})$ and composition is
convolution (Koskela et al. 2020; Meiser-Mohammadi 2018). Here the losses live on the grid
$\\ell_i=(\\text{offset}+i)h$ and every construction only ever makes the PLD WORSE than the truth:

- :meth:`PLD.from_atoms` rounds every loss UP to the grid (a post-processing-free pessimistic rounding);
- :meth:`PLD.from_profile` is connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
  arXiv 2207.04380): the grid PLD whose profile interpolates the true profile linearly in $e^\\varepsilon$
  between grid points; the profile is convex in $e^\\varepsilon$, so the interpolation lies above it and the
  result dominates the mechanism; the mass beyond the top grid point goes to $\\mu_\\infty$;
- tails are truncated safely: the lower tail's mass is moved UP to the first kept loss, the upper tail's
  mass is added to the infinity atom.

Add/remove neighbours: a PLD may carry the other direction in ``other`` (None means the mechanism is
symmetric, as every noise-adding mechanism of this package is); compositions compose both directions and
every query takes the worse of the two (MATH.md 5.4).

Floating point: FFT convolution has an absolute round-off of order 1e-16 per bin relative to the largest
bin; deltas far below 1e-12 are beyond this module's resolution and should not be requested.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from overlapdp.privacy.definitions import BudgetError, check_delta

#: Default grid interval of losses (dp_accounting's default too).
DEFAULT_H = 1e-4
#: Default tail mass dropped (safely) on each side after each convolution.
DEFAULT_TAIL = 1e-16

Profile = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False)
class PLD:
    """A pessimistic privacy loss distribution on the grid ``(offset + i) * h``.

    ``probs`` are the finite masses (non-negative, total ``1 - inf_mass`` up to round-off), ``inf_mass``
    the mass at $+\\infty$. ``other`` is the PLD of the other neighbouring direction when it differs.
    """

    h: float
    offset: int
    probs: np.ndarray = field(repr=False)
    inf_mass: float
    other: PLD | None = None

    # -- construction --------------------------------------------------------------------------------
    @staticmethod
    def identity(h: float = DEFAULT_H) -> PLD:
        """The PLD of a mechanism that reveals nothing (loss 0 with probability 1)."""
        return PLD(h, 0, np.ones(1), 0.0)

    @staticmethod
    def from_atoms(
        losses: Sequence[float] | np.ndarray,
        probs: Sequence[float] | np.ndarray,
        inf_mass: float = 0.0,
        h: float = DEFAULT_H,
    ) -> PLD:
        """A PLD from finitely many loss atoms, each loss rounded UP to the grid (pessimistic)."""
        ls = np.asarray(losses, dtype=float)
        ps = np.asarray(probs, dtype=float)
        if ls.shape != ps.shape or ls.ndim != 1 or ls.size == 0:
            raise BudgetError("a PLD needs as many loss values as probabilities (at least one)")
        # a tiny tolerance so that a loss already on the grid is not pushed one step up by round-off
        idx = np.ceil(ls / h - 1e-9).astype(np.int64)
        lo = int(idx.min())
        out = np.zeros(int(idx.max()) - lo + 1)
        np.add.at(out, idx - lo, ps)
        return PLD(h, lo, out, float(inf_mass))

    @staticmethod
    def from_profile(profile: Profile, lo_loss: float, hi_loss: float, h: float = DEFAULT_H) -> PLD:
        """Connect-the-dots (Doroshenko et al. 2022, Alg. 1) from an exact privacy profile.

        ``profile`` maps an array of epsilons to the true deltas of ONE direction; the grid runs from
        ``floor(lo_loss/h)`` to ``ceil(hi_loss/h)``. Valid for any grid (MATH.md 5.4): the mass of losses
        above the top point goes to infinity (delta(top)), that below the bottom to the bottom point.
        """
        jlo = math.floor(lo_loss / h)
        jhi = max(math.ceil(hi_loss / h), jlo + 1)
        eps = np.arange(jlo, jhi + 1) * h
        deltas = np.asarray(profile(eps), dtype=float)
        # a profile is non-increasing; enforce it against round-off in the caller's closed form
        deltas = np.minimum.accumulate(np.clip(deltas, 0.0, 1.0))
        d = deltas[:-1] - deltas[1:]  # d_j = delta_j - delta_{j+1} >= 0
        eh = math.exp(h)
        em1 = math.expm1(h)
        probs = np.empty(eps.size)
        # p_j = (e^h d_{j-1} - d_j) / (e^h - 1) for interior j, p_top = e^h d_{top-1} / (e^h - 1)
        probs[1:-1] = (eh * d[:-1] - d[1:]) / em1
        probs[-1] = eh * d[-1] / em1
        probs = np.clip(probs, 0.0, None)
        inf_mass = float(deltas[-1])
        probs[0] = max(0.0, 1.0 - inf_mass - float(probs[1:].sum()))
        return PLD(h, jlo, probs, inf_mass)._trimmed()

    # -- queries --------------------------------------------------------------------------------------
    @property
    def directions(self) -> tuple[PLD, ...]:
        return (self,) if self.other is None else (self, self.other)

    @property
    def losses(self) -> np.ndarray:
        return (self.offset + np.arange(self.probs.size)) * self.h

    def delta_at(self, epsilon: float) -> float:
        """$\\delta(\\varepsilon)$, the worse of both directions."""
        return max(d._delta_one(epsilon) for d in self.directions)

    def epsilon_at(self, delta: float) -> float:
        """Smallest epsilon >= 0 with delta_at(epsilon) <= delta (inf if the infinity atom exceeds it)."""
        check_delta(delta)
        return max(d._epsilon_one(delta) for d in self.directions)

    def _delta_one(self, epsilon: float) -> float:
        ls = self.losses
        sel = ls > epsilon
        return min(1.0, self.inf_mass + float(np.sum(self.probs[sel] * -np.expm1(epsilon - ls[sel]))))

    def _grid_deltas(self) -> tuple[np.ndarray, np.ndarray]:
        """(A_j, B_j): mass strictly above l_j and sum_{i>j} p_i e^{l_j - l_i}."""
        # scipy.signal takes ~0.4 s to import: imported where used (DESIGN.md)
        from scipy.signal import lfilter

        p = self.probs
        above = np.concatenate([np.cumsum(p[::-1])[::-1][1:], [0.0]])
        # B_j = e^{-h} (p_{j+1} + B_{j+1}), computed from the top as a first-order recursion
        eh = math.exp(-self.h)
        shifted = np.concatenate([p[1:], [0.0]])[::-1]
        b = lfilter([eh], [1.0, -eh], shifted)[::-1]
        return above, np.asarray(b)

    def _epsilon_one(self, delta: float) -> float:
        if self.inf_mass > delta:
            return math.inf
        above, b = self._grid_deltas()
        dj = self.inf_mass + above - b  # delta at each grid loss
        ok = np.nonzero(dj <= delta)[0]
        j = int(ok[0])  # the top point always qualifies: dj[-1] == inf_mass
        lj = (self.offset + j) * self.h
        if j == 0:
            # below the lowest loss: delta(eps) = 1 - e^eps * sum p_i e^{-l_i}
            # below the lowest loss: delta(eps) = inf + sum p - e^eps * sum p_i e^{-l_i}
            num0 = self.inf_mass + above[0] + self.probs[0] - delta
            den0 = (self.probs[0] + b[0]) * math.exp(-lj)
            if num0 <= 0 or den0 <= 0:
                return 0.0
            return max(0.0, min(lj, math.log(num0 / den0) + 1e-12))
        lprev = lj - self.h
        num = self.inf_mass + above[j - 1] - delta
        den = b[j - 1]
        eps = lprev + math.log(num / den) if num > 0 and den > 0 else lprev
        # exact solution inside the segment; never beyond the safe grid point l_j
        eps = min(lj, max(lprev, eps) + 1e-12 * max(1.0, abs(eps)))
        return max(0.0, eps)

    # -- composition ----------------------------------------------------------------------------------
    def compose(self, other: PLD, tail: float = DEFAULT_TAIL) -> PLD:
        """The PLD of running both mechanisms (convolution of the losses; MATH.md 5.4)."""
        if not math.isclose(self.h, other.h, rel_tol=1e-12):
            raise BudgetError("PLDs on different grids cannot be composed")
        first = _convolve_one(self, other, tail)
        if self.other is None and other.other is None:
            return first
        second = _convolve_one(self.other or self, other.other or other, tail)
        return PLD(first.h, first.offset, first.probs, first.inf_mass, second)

    def self_compose(self, k: int, tail: float = DEFAULT_TAIL) -> PLD:
        """k-fold composition by repeated squaring (O(log k) convolutions)."""
        if k < 0:
            raise BudgetError("a composition count must be non-negative")
        result: PLD | None = None
        base = self
        while k:
            if k & 1:
                result = base if result is None else result.compose(base, tail)
            k >>= 1
            if k:
                base = base.compose(base, tail)
        return result if result is not None else PLD.identity(self.h)

    def truncated(self, tail: float = DEFAULT_TAIL) -> PLD:
        """Drop at most ``tail`` mass on each side: the lower tail moves up onto the first kept loss,
        the upper tail joins the infinity atom (both only increase the privacy loss)."""
        p = self.probs
        if p.size <= 2 or tail <= 0:
            return self
        c = np.cumsum(p)
        lo = int(np.searchsorted(c, tail, side="right"))  # entries [0, lo) have total mass <= tail
        rc = np.cumsum(p[::-1])
        hi_drop = int(np.searchsorted(rc, tail, side="right"))
        hi = p.size - hi_drop
        lo = min(lo, hi - 1)
        if lo <= 0 and hi >= p.size:
            return self
        kept = p[lo:hi].copy()
        kept[0] += float(c[lo - 1]) if lo > 0 else 0.0
        inf_mass = self.inf_mass + (float(rc[hi_drop - 1]) if hi_drop > 0 else 0.0)
        return PLD(self.h, self.offset + lo, kept, inf_mass, self.other)

    def _trimmed(self) -> PLD:
        nz = np.nonzero(self.probs)[0]
        if nz.size == 0:
            return PLD(self.h, 0, np.zeros(1), self.inf_mass, self.other)
        return PLD(
            self.h, self.offset + int(nz[0]), self.probs[nz[0] : nz[-1] + 1], self.inf_mass, self.other
        )


def _convolve_one(a: PLD, b: PLD, tail: float) -> PLD:
    # scipy.signal takes ~0.4 s to import: imported where used (DESIGN.md)
    from scipy.signal import fftconvolve

    pa, pb = a.probs, b.probs
    # direct convolution is exact and faster for a short factor; FFT otherwise
    probs = np.convolve(pa, pb) if min(pa.size, pb.size) <= 64 else fftconvolve(pa, pb)
    probs = np.clip(probs, 0.0, None)
    inf_mass = 1.0 - (1.0 - a.inf_mass) * (1.0 - b.inf_mass)
    return PLD(a.h, a.offset + b.offset, probs, inf_mass).truncated(tail)


def compose_all(plds: Sequence[PLD], counts: Sequence[int] | None = None, tail: float = DEFAULT_TAIL) -> PLD:
    """Compose ``counts[i]`` copies of ``plds[i]`` for every i: each group by repeated squaring, then the
    groups smallest-first (a Huffman order keeps the FFTs small)."""
    if not plds:
        raise BudgetError("nothing to compose")
    cs = list(counts) if counts is not None else [1] * len(plds)
    groups = [p.self_compose(c, tail) for p, c in zip(plds, cs, strict=True) if c > 0]
    if not groups:
        return PLD.identity(plds[0].h)
    heap = [(g.probs.size, i, g) for i, g in enumerate(groups)]
    heapq.heapify(heap)
    counter = len(heap)
    while len(heap) > 1:
        _, _, x = heapq.heappop(heap)
        _, _, y = heapq.heappop(heap)
        z = x.compose(y, tail)
        heapq.heappush(heap, (z.probs.size, counter, z))
        counter += 1
    return heap[0][2]
