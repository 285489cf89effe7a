"""``max_overlap_boxes``: the maximum (weighted) overlap of boxes given as numpy arrays.

The same engine, guarantees and answer as :func:`~overlapdp.overlap.max_overlap` (MATH.md 1.8, 7; the
magnitudes of MATH.md 7.8), for a workload that is already in array form: box ``i`` covers the rows
whose value index on attribute ``j`` lies in ``lo[i, j] .. hi[i, j] - 1`` (half-open, like
:class:`~overlapdp.schema.IndexSet`). No :class:`~overlapdp.query.PredicateQuery` is built and no step
is taken per box in Python: validation, compilation into segments (MATH.md 7.4), the search and the
witness's covering set are numpy operations, so a numpy user pays numpy costs.

- One attribute of at most 16 values per box (or 65 536) takes the endpoint sweep over its raw values
  (a difference array, as the numpy idiom) when float sums of the loads are exact (counts, dyadic
  weights); otherwise, and on several attributes, the engine's routes over segments.
- A box spanning a whole attribute (``lo == 0``, ``hi == size``) leaves it unconstrained; an empty box
  (``lo == hi`` on some attribute) covers no row, as a contradiction does.
- ``result.query_indices`` are the rows of the arrays covering the witness and ``result.queries`` their
  ``ids`` (``"#i"`` without ids); both are listed only when read (:class:`~overlapdp.overlap.result.LazyTuple`).
- Bad arrays raise :class:`~overlapdp.errors.OverlapInputError` (weights:
  :class:`~overlapdp.errors.WeightError`) naming the argument, the box and the attribute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, get_args

import numpy as np

from overlapdp.overlap import _clock, engine
from overlapdp.overlap._compiled import BoolArray, Compiled, IntArray, from_intervals
from overlapdp.overlap.exactness import BAND_TABLE_LIMIT, U, dyadic_exact, heaviest_rows, load_error
from overlapdp.overlap.grid import GRID_LIMIT
from overlapdp.overlap.magnitude import Loads
from overlapdp.overlap.result import (
    Comp,
    CompError,
    FloatArray,
    LazyTuple,
    OverlapInputError,
    OverlapResult,
    WeightError,
    comp_name,
)
from overlapdp.schema import IntAttribute, Schema
from overlapdp.validation import check_int, check_seconds

# The raw-value sweep of one attribute runs on up to this many values, or 16 per box (up to the grid's
# memory limit); larger attributes go through the segments.
SWEEP_1D_CELLS = 1 << 16
_ALGORITHMS = get_args(engine.Algorithm)


def max_overlap_boxes(
    domain: Schema | Sequence[int],
    lo: Any,
    hi: Any,
    weights: Any = None,
    comp: Comp = "count",
    *,
    effort: float | None = None,
    ids: Sequence[str] | None = None,
    algorithm: engine.Algorithm = "auto",
) -> OverlapResult:
    """The maximum (weighted) overlap $\\gamma_w$ of ``t`` boxes given as arrays (MATH.md 1.8, 7).

    ``domain``: a :class:`~overlapdp.schema.Schema` (the witness is then a row of it) or the number of
    values of each attribute (attributes ``x0, x1, ...`` of value indices ``0 .. size-1``). ``lo``,
    ``hi``: integer arrays of shape ``(t, d)`` with ``0 <= lo <= hi <= size`` per attribute (shape
    ``(t,)`` when ``d == 1``). ``weights``: ``t`` finite non-negative numbers (default 1; ignored for
    ``count``). ``comp``: ``"count"``, ``"sum"``, ``"l2"`` or a :class:`SetComp` over row indices.
    ``effort``, ``algorithm``: as :func:`~overlapdp.overlap.max_overlap`. The answer carries the same
    guarantees: ``lower`` is attained at the witness row, ``exact`` means ``value`` is the smallest
    float >= the maximum, otherwise ``value`` is a safe upper bound.
    """
    started = _clock.now()
    name = comp_name(comp)
    if name == "vector":
        raise CompError("comp: the vector comp is not supported with arrays; call once per component")
    if effort is not None:
        effort = check_seconds(effort, "effort", error=CompError)
    if algorithm not in _ALGORITHMS:
        raise CompError(f"unknown algorithm {algorithm!r}")
    schema = _schema(domain)
    sizes = np.array(schema.sizes, dtype=np.int64)
    lo_a, hi_a = _boxes(lo, hi, sizes)
    t = int(lo_a.shape[0])
    if ids is not None:
        ids = tuple(ids)  # a copy: the caller's list may change before the ids are read
        if len(ids) != t:
            raise OverlapInputError(f"ids: expected one id per box ({t}), got {len(ids)}")
    w = np.ones(t) if name in ("count", "set") else _weights(weights, t)
    if name == "count" and weights is not None:
        _weights(weights, t)  # checked even when ignored, as max_overlap does
    labels: Sequence[str | None] = ids if ids is not None else _Unnamed(t)
    if algorithm == "auto" and name != "set" and lo_a.shape[1] == 1 and t:
        fast = _sweep_1d(schema, lo_a[:, 0], hi_a[:, 0], Loads.of(name, w, labels))  # type: ignore[arg-type]
        if fast is not None:
            return _relabel(fast, ids)
    c = _compile(schema, lo_a, hi_a, sizes)
    res = engine._solve_compiled(c, comp, w, labels, effort, started, algorithm)
    return _relabel(res, ids)


def _sweep_1d(schema: Schema, lo: IntArray, hi: IntArray, lw: Loads) -> OverlapResult | None:
    """One attribute, not much larger than the boxes: the endpoint sweep over its raw values (a
    difference array, as the grid route does over segments; MATH.md 7.4), or None where that route is
    not certain to be exact (then the engine's grid resolves float ties, MATH.md 7.8).

    Exact when float sums of the loads are (:func:`~overlapdp.overlap.exactness.dyadic_exact` with the
    sum of the absolute entries, as the grid's bound): the first value of greatest depth then carries
    the exact maximum, and its covering boxes give ``lower`` exactly from the original weights. On other
    loads (ordinary float weights) every value whose float depth is within three times the sweep's
    error bound of the float maximum is valued exactly on integers (MATH.md 7.8, as the dense grid),
    from the loads' numpy limbs; None when that band is too large.
    """
    n = int(schema.attributes[0].size)
    t = int(lo.shape[0])
    if n + 1 > max(SWEEP_1D_CELLS, min(16 * t, GRID_LIMIT)):
        return None
    loads = lw.loads
    bound = 2.0 * float(loads.sum()) * (1 + 1e-9)
    if lw.name == "count":
        diff = np.bincount(lo, minlength=n + 1) - np.bincount(hi, minlength=n + 1)
    else:
        diff = np.bincount(lo, loads, n + 1) - np.bincount(hi, loads, n + 1)
    depth = np.cumsum(diff[:n])
    v = int(np.argmax(depth))
    if not dyadic_exact(lw, bound):
        # Each value is a sum of at most 2t + 1 loads and their negations (the bins, their difference,
        # the cumulative sum), every partial sum at most `bound`: Higham's gamma_n (MATH.md 7.8).
        err = 2 * U * (2 * t + 2) * bound + load_error(lw)
        cand = np.flatnonzero(depth >= depth[v] - 3 * err)
        if cand.size * t > BAND_TABLE_LIMIT:
            return None
        cover = (lo[None, :] <= cand[:, None]) & (cand[:, None] < hi[None, :])
        v = int(cand[heaviest_rows(lw, cover, np.arange(cover.shape[1], dtype=np.int64))])
    covering = np.flatnonzero((lo <= v) & (v < hi)).astype(np.int64)
    lower = lw.compose(covering)
    row = (v,)
    return OverlapResult(
        value=lower,
        exact=True,
        upper=lower,
        lower=lower,
        witness=schema.row(row),
        witness_row=row,
        queries=(),  # set by _relabel
        algorithm="sweep",
        query_indices=LazyTuple(int(covering.shape[0]), lambda: tuple(covering.tolist())),
    )


class _Unnamed(Sequence[str | None]):
    """``t`` missing ids (error messages then name a box by its row ``#i``)."""

    def __init__(self, t: int) -> None:
        self._t = t

    def __len__(self) -> int:
        return self._t

    def __getitem__(self, i: Any) -> Any:
        return None


def _relabel(res: OverlapResult, ids: Sequence[str] | None) -> OverlapResult:
    """The engine's result with its covering ids taken from ``ids`` (rows ``#i`` without), lazily."""
    indices = res.query_indices
    assert isinstance(indices, LazyTuple)

    def make() -> tuple[str, ...]:
        rows = indices.materialise()
        return tuple(f"#{i}" for i in rows) if ids is None else tuple(ids[i] for i in rows)

    return dataclasses.replace(res, queries=LazyTuple(len(indices), make))


def _schema(domain: Schema | Sequence[int]) -> Schema:
    if isinstance(domain, Schema):
        return domain
    if isinstance(domain, str | bytes) or not isinstance(domain, Sequence | np.ndarray):
        raise OverlapInputError(
            f"domain: expected a Schema or a sequence of attribute sizes, got {type(domain).__name__}"
        )
    sizes = list(domain)
    if not sizes:
        raise OverlapInputError("domain: at least one attribute size is needed")
    for j, n in enumerate(sizes):
        check_int(
            int(n) if isinstance(n, np.integer) else n,
            f"domain: size of attribute {j}",
            error=OverlapInputError,
        )
    return Schema(tuple(IntAttribute(f"x{j}", 0, int(n) - 1) for j, n in enumerate(sizes)))


def _as_int(name: str, value: Any) -> IntArray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise OverlapInputError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise OverlapInputError(f"{name}: value {int(arr.max())} is outside every attribute")
    return arr.astype(np.int64, copy=False)


def _boxes(lo: Any, hi: Any, sizes: IntArray) -> tuple[IntArray, IntArray]:
    """``lo``, ``hi`` as ``(t, d)`` int64 arrays, checked: shapes, ``0 <= lo <= hi <= size``."""
    d = int(sizes.shape[0])
    lo_a, hi_a = _as_int("lo", lo), _as_int("hi", hi)
    if lo_a.shape != hi_a.shape:
        raise OverlapInputError(f"lo and hi must have the same shape, got {lo_a.shape} and {hi_a.shape}")
    if lo_a.ndim == 1 and d == 1:
        lo_a, hi_a = lo_a[:, None], hi_a[:, None]
    if lo_a.ndim != 2 or lo_a.shape[1] != d:
        want = "(t,) or (t, 1)" if d == 1 else f"(t, {d})"
        raise OverlapInputError(f"lo: expected shape {want} for {d} attribute(s), got {lo_a.shape}")
    checks = (
        (lo_a < 0, "lo[{i}, {j}] = {lo} is below 0"),
        (hi_a > sizes, "hi[{i}, {j}] = {hi} is past the end of attribute {j} ({n} values)"),
        (lo_a > hi_a, "lo[{i}, {j}] = {lo} > hi[{i}, {j}] = {hi}"),
    )
    for bad, message in checks:
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            why = message.format(i=i, j=j, lo=int(lo_a[i, j]), hi=int(hi_a[i, j]), n=int(sizes[j]))
            raise OverlapInputError(f"{why} (boxes are [lo, hi) in value indices)")
    return lo_a, hi_a


def _weights(weights: Any, t: int) -> FloatArray:
    """``t`` finite non-negative weights (1 each when None)."""
    if weights is None:
        return np.ones(t)
    try:
        arr = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise WeightError("weights: expected an array of numbers") from None
    if arr.ndim != 1 or arr.shape[0] != t:
        raise WeightError(f"weights: expected shape ({t},), one weight per box, got {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i = int(bad[0])
        raise WeightError(f"weights[{i}] must be a finite non-negative number, got {float(arr[i])!r}")
    return arr


def _compile(schema: Schema, lo: IntArray, hi: IntArray, sizes: IntArray) -> Compiled:
    """Segments per attribute from the box arrays (MATH.md 7.4), in numpy only."""
    t = int(lo.shape[0])
    void: BoolArray = np.asarray((lo >= hi).any(axis=1), dtype=bool)
    rows = np.arange(t, dtype=np.int64)
    per_attribute = []
    for j in range(lo.shape[1]):
        # A box spanning the whole attribute does not constrain it (as a tautology is left out of a query).
        cons = ((lo[:, j] > 0) | (hi[:, j] < sizes[j])) & ~void
        if cons.all():
            per_attribute.append((j, rows, lo[:, j], hi[:, j]))
        elif cons.any():
            per_attribute.append((j, rows[cons], lo[cons, j], hi[cons, j]))
    return from_intervals(schema, t, void, per_attribute, True)
