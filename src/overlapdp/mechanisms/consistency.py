"""Consistent answers: project noisy counts onto the answers of some non-negative table (MATH.md 6.5).

Independent noise makes the answers of an overlapping workload contradict each other (a total below the
sum of its disjoint parts, a part above its total, a negative count). This module finds the answers
``A x`` of a non-negative table ``x`` over the workload's cells that are closest to the noisy answers
``y`` in the weighted norm ``||v||_W^2 = sum_i v_i^2 / var_i`` (each answer weighted by the inverse of its
noise variance):

    minimise ||A x - y||_W  subject to  x >= 0.

Cells. ``A[i, c] = 1`` iff query ``i`` covers cell ``c``. Rows of the domain covered by the same set of
queries (the same "row pattern", :mod:`overlapdp.privacy.patterns`) form one cell: merging columns that
are equal leaves the cone ``{A x : x >= 0}`` unchanged, so this is exact, and the cells are enumerated
attribute by attribute over the per-attribute atoms (:mod:`overlapdp.overlap.atoms`), keeping only the
distinct partial patterns, so the full product of atoms is never built. Rows no query covers are left
out (a zero column). Beyond :data:`CELL_LIMIT` distinct cells (or the work limit) the request is refused
with :class:`ConsistencyError` naming the limit; nothing is approximated silently.

Guarantees.

- Privacy: it is post-processing of the released answers (Dwork and Roth 2014, Prop. 2.1); it reads no
  data and costs nothing.
- Error: the true answers are ``A x_true`` for the true (non-negative) table, so they lie in the closed
  convex cone ``K = {A x : x >= 0}``; the projection ``P`` onto ``K`` in the W-norm is non-expansive and,
  for any ``z`` in ``K``, ``||P y - z||_W <= ||y - z||_W`` (the projection inequality for a closed convex
  set in a Hilbert space). So on EVERY draw the weighted total squared error does not increase; with
  equal variances (every answer of a workload answered at one per-query budget) this is the plain total
  squared error. It does NOT bound each answer's error: one consistent answer can be further from its
  truth than its noisy answer was, so the noisy answers' per-answer error bars are not error bars of the
  consistent answers, and none are attached to them.
- Exactness: Lawson and Hanson's active-set method (:mod:`overlapdp._activeset`: the method of
  ``scipy.optimize.nnls``, with partial pricing and an updated factor, several times faster on these
  matrices; ``nnls`` itself takes over should rounding stop it) solves the problem exactly up to
  rounding: it ends only when no cell's gradient violates optimality, and the answer is checked
  against the optimality conditions before it is returned (``nnls``'s too: SciPy's can return a
  non-optimal point silently); none passing is a :class:`ConsistencyError`. The consistent answers are
  ``A x`` for the returned ``x >= 0``, so they are consistent up to float sums whatever the solver's
  accuracy in the objective. (Measured on 300 random 2-D boxes of Adult, 5,855 cells: nnls 0.24 s where
  ``lsq_linear``'s bounded trust-region method on the sparse matrix took 47 s, and its dense BVLS 14
  times nnls's time on 1 000 boxes, so a dense active-set method is used, up to :data:`MATRIX_LIMIT`
  entries.)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from overlapdp._activeset import corner_matrix, project_cells
from overlapdp.errors import ConsistencyError as ConsistencyError
from overlapdp.mechanisms._noisy_counts import NoisyAnswer
from overlapdp.mechanisms.sums import NoisyMean, NoisySum
from overlapdp.overlap.atoms import compute_atoms
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

#: Largest number of distinct cells (covering patterns) a workload may have for consistent answers.
CELL_LIMIT = 100_000
#: Largest intermediate (partial patterns x atoms of one attribute x query bytes) built while enumerating.
WORK_LIMIT_BYTES = 400_000_000
#: Largest queries x cells matrix solved (dense float64, 8 bytes an entry).
MATRIX_LIMIT = 10_000_000


@dataclass(frozen=True)
class Design:
    """The workload's 0/1 matrix over its cells: ``matrix[i, c]`` is True iff query i covers cell c."""

    matrix: npt.NDArray[np.bool_]  # queries x cells

    @property
    def cells(self) -> int:
        return int(self.matrix.shape[1])


@dataclass(frozen=True)
class ConsistentAnswers:
    """Answers of a non-negative table nearest the noisy ones in the inverse-variance weighted norm.

    ``values[i]`` is the consistent answer of query i (``sum`` of ``cells`` over the cells it covers);
    ``cells`` are the table's values (all >= 0) over :attr:`Design.matrix`'s columns. ``raw`` are the noisy
    answers they came from. No error bars: see the module docstring (the total weighted squared error
    does not increase; per-answer errors can).
    """

    values: list[float]
    raw: list[float]
    cells: npt.NDArray[np.float64]
    design: Design
    ids: list[str | None]
    solver: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "answers": [{"id": i, "answer": v} for i, v in zip(self.ids, self.values, strict=True)],
            "cells": self.design.cells,
            "solver": self.solver,
            "note": NOTE,
        }


#: What the consistent answers guarantee, as printed beside them.
NOTE = (
    "projection onto the answers of a non-negative table (weighted least squares, post-processing: no "
    "privacy cost); the total squared error (weighted by 1/variance) never increases, per-answer error "
    "bars do not carry over"
)


def workload_design(
    queries: Sequence[PredicateQuery],
    schema: Schema | None = None,
    *,
    limit: int | None = None,
    work_limit: int | None = None,
) -> Design:
    """The distinct covering patterns of ``queries`` (cells), as a queries x cells 0/1 matrix.

    Exact (module docstring). Raises :class:`ConsistencyError` naming the limit when the workload has
    more than ``limit`` cells (default :data:`CELL_LIMIT`), enumerating them would build more than
    ``work_limit`` bytes at once (default :data:`WORK_LIMIT_BYTES`), or the queries x cells matrix has
    more than :data:`MATRIX_LIMIT` entries.
    """
    limit = CELL_LIMIT if limit is None else limit
    work_limit = WORK_LIMIT_BYTES if work_limit is None else work_limit
    qs = list(queries)
    t = len(qs)
    if t == 0:
        raise ConsistencyError("queries: the workload is empty")
    atoms = compute_atoms(qs, schema)
    nbytes = (t + 7) // 8
    # Partial patterns: the queries covering some row, looking only at the attributes seen so far.
    current = np.packbits(np.ones((1, t), dtype=bool), axis=1)
    for a in atoms.attributes:
        table = np.zeros((a.size, t), dtype=bool)
        for i, cov in enumerate(a.query_atoms):
            table[cov.to_array(), i] = True
        packed = np.unique(np.packbits(table, axis=1), axis=0)  # atoms alike for every query: one
        size = current.shape[0] * packed.shape[0] * nbytes
        if size > work_limit:
            raise ConsistencyError(
                f"queries: enumerating the workload's cells would build {size:,} bytes "
                f"(limit {work_limit:,}); consistent answers need fewer or simpler queries"
            )
        combined = (current[:, None, :] & packed[None, :, :]).reshape(-1, nbytes)
        combined = combined[combined.any(axis=1)]  # rows no query covers: a zero column, dropped
        current = _unique_rows(combined)
        if current.shape[0] > limit:
            raise ConsistencyError(
                f"queries: the workload has more than {limit:,} cells (distinct sets of covering "
                f"queries, limit {limit:,}); consistent answers need fewer or simpler queries"
            )
    members = np.unpackbits(current, axis=1, count=t).astype(bool)
    members = members[members.any(axis=1)]
    design = Design(np.ascontiguousarray(members.T))
    _check_matrix(t, design.cells)
    return design


def _check_matrix(t: int, n: int) -> None:
    if t * n > MATRIX_LIMIT:
        raise ConsistencyError(
            f"queries: {t} queries x {n:,} cells is more than the solver's limit of {MATRIX_LIMIT:,} "
            "matrix entries; consistent answers need fewer or simpler queries"
        )


def _unique_rows(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    if rows.shape[0] <= 1:
        return rows
    view = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1])))
    _, first = np.unique(view.reshape(-1), return_index=True)
    return rows[np.sort(first)]


def project(
    design: Design,
    values: Sequence[float] | npt.NDArray[np.float64],
    variances: Sequence[float] | npt.NDArray[np.float64],
    ids: Sequence[str | None] | None = None,
) -> ConsistentAnswers:
    """``A x`` for the ``x >= 0`` minimising ``sum_i (A x - y)_i^2 / var_i`` (module docstring).

    Variances must be finite and >= 0. Zero variances (noiseless answers) are weighted as 1e12 times the
    largest positive variance's weight (and when every variance is 0 the answers are used equally).
    """
    start = time.perf_counter()
    y = np.asarray(values, dtype=np.float64)
    var = np.asarray(variances, dtype=np.float64)
    t = design.matrix.shape[0]
    if y.shape != (t,) or var.shape != (t,):
        raise ConsistencyError(f"answers: expected {t} answers and variances, got {y.shape} and {var.shape}")
    if not np.all(np.isfinite(y)):
        raise ConsistencyError("answers: every answer must be a finite number")
    if not np.all(np.isfinite(var)) or np.any(var < 0):
        raise ConsistencyError("answers: every noise variance must be finite and >= 0")
    n = design.cells
    _check_matrix(t, n)
    found = project_cells(design.matrix, y, var)
    if found.x is None or found.fitted is None:  # no deadline: both methods failed on rounding
        raise ConsistencyError(
            "answers: the least-squares solver did not reach the optimum (rounding); nothing is returned"
        )
    x = np.maximum(found.x, 0.0)  # already >= 0; guards -0.0
    return ConsistentAnswers(
        values=[float(v) for v in found.fitted],
        raw=[float(v) for v in y],
        cells=x,
        design=design,
        ids=list(ids) if ids is not None else [None] * t,
        solver=found.solver,
        seconds=time.perf_counter() - start,
    )


def make_consistent(
    queries: Sequence[PredicateQuery],
    answers: Any,
    *,
    limit: int | None = None,
) -> ConsistentAnswers:
    """Consistent versions of noisy answers of ``queries`` (module docstring; post-processing).

    ``answers`` is a :class:`~overlapdp.mechanisms.answering.WorkloadAnswers` or a sequence of
    :class:`~overlapdp.mechanisms.NoisyAnswer` (one per query, in order); each is weighted by the inverse
    of its noise's variance. The raw answers are not modified.
    """
    items = getattr(answers, "answers", answers)
    noisy = list(items)
    qs = list(queries)
    if len(noisy) != len(qs):
        raise ConsistencyError(f"answers: {len(noisy)} answers for {len(qs)} queries")
    for i, a in enumerate(noisy):
        if not isinstance(a, NoisyAnswer):
            raise ConsistencyError(f"answers: entry #{i} is not a NoisyAnswer ({type(a).__name__})")
    design = workload_design(qs, limit=limit)
    return project(
        design,
        [float(a.value) for a in noisy],
        [a.noise.variance for a in noisy],
        ids=[q.id for q in qs],
    )


#: Most distinct clippings (summed column and bounds) projected together: each doubles the generators
#: of every cell (MATH.md 6.5.1).
CLIPPING_LIMIT = 4


@dataclass(frozen=True)
class AggregateSystem:
    """The released figures of a workload of counts, sums and means as one projection problem (MATH.md
    6.5.1): figure ``f`` (a count, a sum, or a mean's sum then its count) belongs to query
    ``owners[f]`` and reads each corner of a cell's box with ``factor[f]``; ``values`` and
    ``variances`` are the noisy figures and their noise's variances. ``kinds`` and ``bounds`` say, per
    query, how its consistent answer is read back from the fitted figures (:func:`finish_aggregates`)."""

    owners: npt.NDArray[np.intp]
    factor: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]
    variances: npt.NDArray[np.float64]
    kinds: tuple[str, ...]
    bounds: tuple[tuple[float, float] | None, ...]


def check_aggregate_shape(design: Design, clippings: Sequence[Any], means: int) -> None:
    """:class:`ConsistencyError` naming the limit when consistent answers of ``design``'s queries with
    these ``clippings`` (one per sum or mean, None for a count) and ``means`` means cannot be projected:
    more than :data:`CLIPPING_LIMIT` distinct clippings, or a matrix past :data:`MATRIX_LIMIT` entries
    (before anything is released: a service refuses the request with it)."""
    distinct = list(dict.fromkeys(c for c in clippings if c is not None))
    if len(distinct) > CLIPPING_LIMIT:
        raise ConsistencyError(
            f"answers: {len(distinct)} distinct sums (column and bounds); consistent answers project at "
            f"most {CLIPPING_LIMIT} together (each doubles the generators of every cell, MATH.md 6.5.1)"
        )
    _check_matrix(design.matrix.shape[0] + means, design.cells * 2 ** len(distinct))


def aggregate_system(
    design: Design, answers: Sequence[NoisyAnswer | NoisySum | NoisyMean]
) -> AggregateSystem:
    """The projection problem of :func:`project_aggregates` (module docstring, MATH.md 6.5.1), checked
    against its limits (:func:`check_aggregate_shape`)."""
    t = design.matrix.shape[0]
    if len(answers) != t:
        raise ConsistencyError(f"answers: {len(answers)} answers for {t} queries")
    clips = list(
        dict.fromkeys(
            a.clipping if isinstance(a, NoisySum) else a.sum.clipping
            for a in answers
            if isinstance(a, NoisySum | NoisyMean)
        )
    )
    check_aggregate_shape(design, clips, sum(isinstance(a, NoisyMean) for a in answers))
    # every row contributes (1, v_1, ..., v_k) with v_j in [L_j, H_j]: the cone of a cell is spanned by
    # the 2^k corners of that box (MATH.md 6.5.1)
    ends = [(min(float(c.lo), 0.0), max(float(c.hi), 0.0)) for c in clips]
    corners = np.array(list(itertools.product(*ends)), dtype=np.float64).reshape(-1, len(clips))
    rows: list[npt.NDArray[np.float64]] = []  # one per released figure: its factor per corner
    values: list[float] = []
    variances: list[float] = []
    owner: list[int] = []
    ones = np.ones(corners.shape[0])

    def count_part(i: int, a: NoisyAnswer) -> None:
        rows.append(ones)
        values.append(float(a.value))
        variances.append(a.noise.variance)
        owner.append(i)

    def sum_part(i: int, a: NoisySum) -> None:
        rows.append(corners[:, clips.index(a.clipping)])
        values.append(float(a.value))
        variances.append(a.std**2)
        owner.append(i)

    kinds: list[str] = []
    bounds: list[tuple[float, float] | None] = []
    for i, a in enumerate(answers):
        if isinstance(a, NoisySum):
            sum_part(i, a)
            kinds.append("sum")
            bounds.append(None)
        elif isinstance(a, NoisyMean):
            sum_part(i, a.sum)
            count_part(i, a.count)
            kinds.append("mean")
            bounds.append((float(a.sum.clipping.lo), float(a.sum.clipping.hi)))
        else:
            count_part(i, a)
            kinds.append("count")
            bounds.append(None)
    y = np.asarray(values, dtype=np.float64)
    var = np.asarray(variances, dtype=np.float64)
    if not np.all(np.isfinite(y)) or not np.all(np.isfinite(var)) or np.any(var < 0):
        raise ConsistencyError("answers: every answer and noise variance must be finite (variances >= 0)")
    return AggregateSystem(
        owners=np.asarray(owner, dtype=np.intp),
        factor=np.stack(rows),
        values=y,
        variances=var,
        kinds=tuple(kinds),
        bounds=tuple(bounds),
    )


def finish_aggregates(system: AggregateSystem, fitted: Sequence[float]) -> list[float]:
    """Each query's consistent answer from the fitted figures (one per figure, in order): a count or a
    sum its own; a mean its consistent sum over its consistent count, clamped to its bounds (the middle
    of the bounds when that count is 0)."""
    out: list[float] = []
    k = 0
    for kind, b in zip(system.kinds, system.bounds, strict=True):
        if kind == "mean":
            assert b is not None
            total, count = float(fitted[k]), float(fitted[k + 1])
            k += 2
            lo, hi = b
            out.append(min(max(total / count, lo), hi) if count > 0 else (lo + hi) / 2)
        else:
            out.append(float(fitted[k]))
            k += 1
    return out


def project_aggregates(
    design: Design,
    answers: Sequence[NoisyAnswer | NoisySum | NoisyMean],
    ids: Sequence[str | None] | None = None,
) -> ConsistentAnswers:
    """Consistent counts, clipped sums and means of one workload (MATH.md 6.5.1): the noisy counts and
    sums (a mean's two halves) are projected together, in the inverse-variance weighted norm, onto the
    answers of some table whose every row is counted once and adds to each sum a value between
    ``min(lo, 0)`` and ``max(hi, 0)`` (a missing value adds 0), so each consistent sum lies between its
    consistent count times those bounds; a consistent mean is its consistent sum over its consistent
    count, clamped to the bounds (the middle of the bounds when that count is 0).

    Post-processing: no privacy cost. The weighted total squared error of the released figures (counts,
    sums, a mean's halves) never increases; per-answer errors can, so no error bars are attached.
    ``design`` is :func:`workload_design` of the same queries, in order. At most
    :data:`CLIPPING_LIMIT` distinct clippings (:class:`ConsistencyError` otherwise). The problem is
    :func:`aggregate_system`, solved on :func:`overlapdp._activeset.corner_matrix`, read back by
    :func:`finish_aggregates`: the service's worker process solves the same problem the same way."""
    start = time.perf_counter()
    t = design.matrix.shape[0]
    system = aggregate_system(design, answers)
    matrix = corner_matrix(design.matrix[system.owners], system.factor)
    found = project_cells(matrix, system.values, system.variances)
    if found.x is None or found.fitted is None:
        raise ConsistencyError(
            "answers: the least-squares solver did not reach the optimum (rounding); nothing is returned"
        )
    return ConsistentAnswers(
        values=finish_aggregates(system, [float(v) for v in found.fitted]),
        raw=[float(a.value) for a in answers],
        cells=np.maximum(found.x, 0.0),
        design=design,
        ids=list(ids) if ids is not None else [None] * t,
        solver=found.solver,
        seconds=time.perf_counter() - start,
    )


def squared_error(
    values: Sequence[float], truth: Sequence[float], variances: Sequence[float] | None = None
) -> float:
    """``sum_i (values_i - truth_i)^2 / var_i`` (plain total squared error when ``variances`` is None)."""
    v = np.asarray(values, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    if variances is None:
        return float(np.dot(v, v))
    return float(np.sum(v * v / np.asarray(variances, dtype=np.float64)))


__all__ = [
    "CELL_LIMIT",
    "NOTE",
    "AggregateSystem",
    "ConsistencyError",
    "ConsistentAnswers",
    "Design",
    "aggregate_system",
    "check_aggregate_shape",
    "finish_aggregates",
    "make_consistent",
    "project",
    "project_aggregates",
    "squared_error",
    "workload_design",
]
