"""Non-negative least squares for consistent answers (MATH.md 6.5): Lawson and Hanson's active-set method.

Solves ``min ||A x - y||_2`` subject to ``x >= 0`` for the weighted 0/1 matrices of
:mod:`overlapdp.mechanisms.consistency` (queries x cells, often many more cells than queries). The method is the
one of ``scipy.optimize.nnls`` (Lawson and Hanson 1974, ch. 23: a passive set grown one column at a
time, each least-squares subproblem solved exactly, a step back to the boundary when a passive
variable would turn negative), with three changes that make it several times faster here and let it
stop at a deadline:

- Partial pricing. The column that enters is the most violating one among a working set (the
  :data:`BATCH` most violating columns of the last full pass); the full gradient over all cells is
  computed only when the working set has no violator left. Any violating column may enter (each step
  strictly lowers the objective, so the method still ends), and it ends only when the FULL gradient has
  no violator, so the answer is the same optimum.
- The subproblem's triangular factor ``R`` (``R^T R = A_P^T A_P``) is updated, not recomputed: a column
  is appended by one triangular solve, a column leaving is removed by Givens rotations, and the final
  solution gets one step of iterative refinement against ``A_P`` itself (corrected semi-normal
  equations).
- The BLAS does the work (gradients as matrix-vector products over a cells x queries copy of ``A``),
  and the clock is read at every step: past ``deadline`` it returns with ``finished`` False.

Every answer is checked against the optimality (KKT) conditions before it is returned, within
:data:`CHECK` (relative): no cell's gradient positive, none nonzero where the cell's value is. Should
rounding stop the method, ``scipy.optimize.nnls`` takes over, and its answer is checked the same way:
it is not trusted unchecked, since SciPy's rewritten ``nnls`` (1.12 and later; scipy/scipy#25389) can
return a non-optimal point silently (1.17.1, equal weights: 3 of the first 2 221 random 0/1 designs
of up to 40 x 60 with integer answers; the one kept in the tests, 26 x 47, at objective 14.35 where
the optimum is 2.25).

Measured on 1 000 random age x hours boxes of Adult (7 414 cells, true counts plus discrete Laplace
noise, one core, loaded 2-core machine): noise of scale 1 000, 0.7 s where ``nnls`` took 3.2 s; scale 10
(610 cells in the answer, ~1 900 steps), 4.5 s where ``nnls`` took 22-42 s; the same optimum (objective
equal to 1e-12, or lower than ``nnls``'s where it stopped early: fitted answers 0.05 apart). Its
matrix-vector products are small: OpenBLAS's threads only add overhead (the second case took 18.9 s
with two threads on the loaded machine, 5.6 s with one), so the service's workers run with one.

Stand-alone on purpose: it imports numpy and ``scipy.linalg.blas`` only, so that the service's worker
process (``service/_projection_worker.py``) loads this file by its path without importing the package.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Columns kept in the working set after a full pass (the most violating ones).
BATCH = 256
#: Relative tolerance of the optimality test (times queries x largest entry x largest answer).
TOLERANCE = 1e-12
#: Relative tolerance of the final optimality check (looser than :data:`TOLERANCE`: the refinement and
#: the last solve move the gradients by rounding).
CHECK = 1e-9


@dataclass(frozen=True)
class Solution:
    """``x`` (cells, all >= 0) and the answers ``A x``; both None when ``finished`` is False (cut by the
    deadline) or ``failed`` (no method gave an answer that passed the optimality check). ``solver``
    names the method that produced them; ``steps`` counts its columns entered."""

    x: FloatArray | None
    fitted: FloatArray | None
    finished: bool
    solver: str
    steps: int
    failed: bool = False


def project_cells(
    matrix: npt.NDArray[np.bool_] | FloatArray,
    values: FloatArray,
    variances: FloatArray,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Solution:
    """``A x`` for the ``x >= 0`` minimising ``sum_i (A x - y)_i^2 / var_i`` (``matrix`` is ``A``, queries x
    cells; inputs already checked by :func:`overlapdp.mechanisms.consistency.project`). Zero variances are weighted
    as 1e12 times the largest positive variance's weight (every variance 0: all weighted equally).
    ``deadline`` is a ``clock()`` time; past it the result is not finished (nothing else is returned)."""
    if deadline is not None and clock() > deadline:
        return Solution(None, None, False, "active-set", 0)
    positive = variances[variances > 0]
    floor = float(positive.max()) * 1e-12 if positive.size else 1.0
    sqrt_w = 1.0 / np.sqrt(np.maximum(variances, floor))
    # Scale so the largest weight is 1: the tolerances are relative to sensible magnitudes.
    sqrt_w = sqrt_w / sqrt_w.max()
    # cells x queries, each column of A weighted: a row per cell, read contiguously when it enters.
    at = np.ascontiguousarray(matrix.T, dtype=np.float64)
    at *= sqrt_w[None, :]
    wy = values * sqrt_w
    found = solve(at, wy, deadline=deadline, clock=clock)
    solver = "active-set"
    if found is None:
        return Solution(None, None, False, solver, 0)
    if isinstance(found, _Trouble) or not _optimal(at, wy, found[0]):
        # Rounding broke the method's invariants (a column entering that the passive ones span, no
        # progress, or a final point off the optimality conditions): Lawson and Hanson's reference code,
        # which refactors from scratch, takes over; its answer is checked too.
        found = _scipy_nnls(at, wy)
        solver = "nnls"
        if isinstance(found, _Trouble) or not _optimal(at, wy, found[0]):
            return Solution(None, None, True, solver, 0, failed=True)
    x, steps = found
    fitted = matrix.astype(np.float64) @ x
    return Solution(x, fitted, True, solver, steps)


def corner_matrix(cover: npt.NDArray[np.bool_] | FloatArray, factor: FloatArray) -> FloatArray:
    """The matrix of consistent counts, sums and means (MATH.md 6.5.1): released figure ``f`` reads cell
    ``c``'s corner ``k`` with ``cover[f, c] * factor[f, k]`` (figures x (cells x corners), cell-major),
    ``cover`` the 0/1 rows of the queries the figures belong to, ``factor`` each figure's reading of
    the corners (1 for a count, the corner's value of its sum's column for a sum). Here so that the
    library and the service's worker process build it with the very same operations."""
    cov = np.asarray(cover, dtype=np.float64)
    return np.asarray((cov[:, :, None] * factor[:, None, :]).reshape(cov.shape[0], -1))


def _optimal(at: FloatArray, y: FloatArray, x: FloatArray) -> bool:
    """Whether ``x`` meets the optimality conditions of ``min ||A x - y||, x >= 0`` within :data:`CHECK`:
    ``x >= 0``; every gradient entry ``g_c = a_c . (y - A x) <= CHECK * s`` with ``s`` = queries x
    largest entry x largest answer; and ``x_c |g_c| <= CHECK * s * largest answer / largest entry``
    (complementarity, in the units of x times g)."""
    if not np.all(x >= 0):
        return False
    t = at.shape[1]
    amax = float(np.abs(at).max()) if at.size else 0.0
    ymax = float(np.abs(y).max()) if t else 0.0
    if amax == 0.0 or ymax == 0.0:
        return True
    scale = t * amax * ymax
    g = at @ (y - at.T @ x)
    return bool(
        g.max(initial=-np.inf) <= CHECK * scale
        and float(np.max(x * np.abs(g), initial=0.0)) <= CHECK * scale * ymax / amax
    )


class _Trouble:
    """Marker: the active-set method gave up on rounding (see :func:`solve`)."""


_TROUBLE = _Trouble()


def solve(
    at: FloatArray,
    y: FloatArray,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    batch: int = BATCH,
) -> tuple[FloatArray, int] | _Trouble | None:
    """``argmin ||A x - y||, x >= 0`` for ``A = at.T`` (``at``: cells x queries, C order): ``(x, steps)``;
    None past ``deadline``; :data:`_TROUBLE` when rounding stops the method (then nothing is known)."""
    from scipy.linalg.blas import drot, dtrsv

    n, t = at.shape
    x = np.zeros(n)
    ymax = float(np.abs(y).max()) if t else 0.0
    amax = float(np.abs(at).max()) if at.size else 0.0
    if ymax == 0.0 or amax == 0.0:
        return x, 0
    tol = TOLERANCE * t * amax * ymax
    passive: list[int] = []  # the passive columns, in the order of R's columns
    in_p = np.zeros(n, dtype=bool)
    rows = np.empty((min(t, n) + 1, t))  # rows[k] = column passive[k] of A
    r_fac = np.zeros((0, 0))  # upper triangular, C order (its transpose is a Fortran lower factor)
    aty = at @ y
    work = np.zeros(0, dtype=np.intp)
    a_work = at[work]
    resid = y.copy()
    steps = 0
    limit = 50 * n + 1000  # more steps than this: no progress (rounding), see _TROUBLE

    def factor_solve(b: FloatArray) -> FloatArray:
        u = dtrsv(r_fac.T, b, lower=1, trans=0)  # R^T u = b
        return np.asarray(dtrsv(r_fac.T, u, lower=1, trans=1, overwrite_x=1))  # R z = u

    while True:
        if deadline is not None and clock() > deadline:
            return None
        j = -1
        if work.size:
            g = a_work @ resid
            g[in_p[work]] = -np.inf
            k = int(np.argmax(g))
            if g[k] > tol:
                j = int(work[k])
        if j < 0:  # the working set is settled: price every cell
            g = at @ resid
            g[in_p] = -np.inf
            violating = np.flatnonzero(g > tol)
            if violating.size == 0:
                break
            work = violating[np.argsort(-g[violating], kind="stable")[:batch]]
            a_work = at[work]
            j = int(work[0])
        steps += 1
        if steps > limit:
            return _TROUBLE
        col = at[j]
        p = len(passive)
        grown = np.zeros((p + 1, p + 1))
        norm2 = float(col @ col)
        if p:
            off = np.asarray(dtrsv(r_fac.T, rows[:p] @ col, lower=1, trans=0))
            d2 = norm2 - float(off @ off)
            if not d2 > 1e-14 * norm2:  # the passive columns span it: impossible without rounding
                return _TROUBLE
            grown[:p, :p] = r_fac
            grown[:p, p] = off
            grown[p, p] = np.sqrt(d2)
        else:
            grown[0, 0] = np.sqrt(norm2)
        r_fac = grown
        rows[p] = col
        passive.append(j)
        in_p[j] = True
        entered = True
        while True:  # Lawson and Hanson's inner loop: stay feasible
            if deadline is not None and clock() > deadline:
                return None
            z = factor_solve(aty[passive])
            if entered and not z[-1] > 0:
                # The column entering gets a positive value in exact arithmetic (Lawson and Hanson,
                # Lemma 23.17); without it the method would pick it again and again.
                return _TROUBLE
            entered = False
            xp = x[passive]
            neg = z <= 0
            if not neg.any():
                x[passive] = z
                break
            # Step from xp toward z until the first passive variable reaches 0; those at 0 leave.
            ratios = np.full(len(passive), np.inf)
            ratios[neg] = xp[neg] / (xp[neg] - z[neg])
            first = int(np.argmin(ratios))
            xp = xp + ratios[first] * (z - xp)
            leave = xp <= 0
            leave[first] = True
            x[passive] = np.where(leave, 0.0, xp)
            for pos in sorted(np.flatnonzero(leave).tolist(), reverse=True):
                r_fac = _drop_column(r_fac, pos, drot)
                q = len(passive)
                rows[pos : q - 1] = rows[pos + 1 : q]
                in_p[passive[pos]] = False
                del passive[pos]
            if not passive:
                break
        resid = y - rows[: len(passive)].T @ x[passive] if passive else y.copy()
    if passive:
        # One step of iterative refinement against A_P itself (corrected semi-normal equations).
        a_p = rows[: len(passive)]
        xp = x[passive]
        better = xp + factor_solve(a_p @ (y - a_p.T @ xp))
        if np.all(better > 0):
            x[passive] = better
    return x, steps


def _drop_column(r_fac: FloatArray, pos: int, drot: Callable[..., object]) -> FloatArray:
    """The factor of the passive columns without column ``pos``: shift the columns after it left, then
    zero the subdiagonal this leaves by Givens rotations of neighbouring rows (in place, BLAS ``drot``)."""
    q = r_fac.shape[0]
    r_fac[:, pos : q - 1] = r_fac[:, pos + 1 : q]
    for i in range(pos, q - 1):
        a, b = float(r_fac[i, i]), float(r_fac[i + 1, i])
        h = float(np.hypot(a, b))
        c, s = (a / h, b / h) if h else (1.0, 0.0)
        drot(r_fac[i, i : q - 1], r_fac[i + 1, i : q - 1], c, s, overwrite_x=1, overwrite_y=1)
    return np.ascontiguousarray(r_fac[: q - 1, : q - 1])


def _scipy_nnls(at: FloatArray, y: FloatArray) -> tuple[FloatArray, int] | _Trouble:
    import scipy.optimize

    try:
        x, _ = scipy.optimize.nnls(np.ascontiguousarray(at.T), y, maxiter=max(50 * at.shape[0], 1000))
    except RuntimeError:  # its iteration cap (not seen in practice)
        return _TROUBLE
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0), 0
