"""Exact threshold decision: does some row of a box pay more than a threshold? (MATH.md 7.9)

The question a privacy filter asks near its budget (MATH.md 2.7.1) is a decision, not an optimisation:
given charges (each a product of value sets, one per attribute, with a load) and the coverage of a new
one, is there a row of that coverage whose load does not fit? This module answers it exactly by a
depth-first branch and bound over the attributes' values:

- the values of each attribute that every charge treats alike are merged into atoms;
- a node is a box (a set of atoms per attribute); its charges are those meeting it;
- bounds, cheapest first: the per-attribute load tables (a row's load is at most the largest load of a
  value on any one attribute), then the LP relaxation of the one-hot model, solved by HiGHS (highspy,
  warm-started from node to node), made a rigorous bound through its duals: for ANY multipliers
  $\\mu_{ia}\\ge0$, $\\max_{x\\in R}L(x)\\le\\sum_i(w_i-\\sum_a\\mu_{ia})^++\\sum_a\\max_{v\\in R_a}\\sum_i\\mu_{ia}[v\\in C_{i,a}]$
  (Lagrangian relaxation of $y_i\\le\\sum_{v\\in C_{i,a}}x_{a,v}$; MATH.md 7.9), evaluated in floats and
  widened past their round-off, so the solver's tolerances never make a bound unsafe;
- when every load is a multiple of a common unit (equal epsilons, dyadic ones), so is every row's load,
  and a bound is rounded down to a multiple of it before the test (a bound of 24.7 units proves 24);
- the LP's solution, rounded to a row (the heaviest value of each attribute), is tried first: a row
  that does not fit ends the search with a refusal (its load summed exactly);
- branching: on the attribute with the fewest values whose load table could still exceed the threshold
  (fail first), one child per such value, the LP's favourite first; the other values are proved by
  their table at once.

Every prune compares an exact upper bound (a Fraction) with the caller's exact test; a leaf (every charge
of the box holding all of it) is summed with Fractions. The answer is therefore exact whatever the
floats do. Without highspy the same search runs on the tables alone (exact, slower).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from overlapdp.errors import SearchGaveUp
from overlapdp.overlap import _clock

BoolArray = np.ndarray
FloatArray = np.ndarray

# Float round-off of a bound computed from n loads and k attributes is far below this relative margin
# per term (4 (n + k + 2) 2^-53, for n + k < 2^40); see _widened.
_U = 2.0**-53
# Loads below this (relative to the heaviest, after scaling by a power of two) are raised to it for the
# LP (an upper bound; keeps HiGHS away from subnormals).
_FLOOR = 2.0**-900


def common_unit(values: Sequence[Fraction]) -> Fraction | None:
    """The largest Fraction of which every positive value is an integer multiple (their gcd), or None
    when there is no positive value."""
    g: Fraction | None = None
    for v in values:
        if v <= 0:
            continue
        if g is None:
            g = v
            continue
        den = g.denominator * v.denominator // math.gcd(g.denominator, v.denominator)
        g = Fraction(
            math.gcd(g.numerator * (den // g.denominator), v.numerator * (den // v.denominator)), den
        )
    return g


def unit_gcd(g: Fraction | None, v: Fraction) -> Fraction | None:
    """:func:`common_unit` of ``g``'s values and ``v``, incrementally."""
    return common_unit([x for x in (g, v) if x is not None])


@dataclass
class Problem:
    """A decision instance: charges (rows of ``cover``: one boolean block per attribute, side by side)
    with float ``loads`` (for bounds) and exact ones, restricted to a box."""

    cover: BoolArray  # charges x cells
    loads: FloatArray  # float, each >= 0 (the nearest float of the exact load, or above it)
    exact: Sequence[Fraction]
    offsets: np.ndarray  # cell offset of each attribute, and the total at the end
    box: BoolArray  # cells
    unit: Fraction | None = None
    stats: dict[str, int] = field(default_factory=dict)


class _Atoms:
    """Per relevant attribute, the box's values grouped by which charges hold them."""

    def __init__(self, cover: BoolArray, offsets: np.ndarray, box: BoolArray) -> None:
        self.attrs: list[int] = []
        self.tables: list[BoolArray] = []  # per relevant attribute: charges x atoms
        self.values: list[list[int]] = []  # per relevant attribute: a value index of each atom
        self.fixed: dict[int, int] = {}  # irrelevant attribute -> a value of the box
        for p in range(len(offsets) - 1):
            seg = slice(int(offsets[p]), int(offsets[p + 1]))
            vals = np.flatnonzero(box[seg])
            sub = cover[:, seg][:, vals]
            if sub.all():
                self.fixed[p] = int(vals[0])
                continue
            packed = np.packbits(sub, axis=0)  # one column of bytes per value
            _, first, inverse = np.unique(packed.T, axis=0, return_index=True, return_inverse=True)
            self.attrs.append(p)
            self.tables.append(sub[:, first])
            self.values.append([int(vals[i]) for i in first])
            del inverse

    def row(self, choice: Sequence[int], nattrs: int) -> tuple[int, ...]:
        out = [0] * nattrs
        for p, v in self.fixed.items():
            out[p] = v
        for j, p in enumerate(self.attrs):
            out[p] = self.values[j][choice[j]]
        return tuple(out)


class _LP:
    """The LP relaxation of the one-hot model over the atoms, kept in one HiGHS instance whose column
    bounds change from node to node (the dual simplex restarts from the last basis)."""

    def __init__(self, tables: list[BoolArray], w: FloatArray) -> None:
        import highspy

        n = len(w)
        self.n = n
        self.k = [t.shape[1] for t in tables]
        self.off = np.concatenate([[0], np.cumsum(self.k)]).astype(np.int64)
        nx = int(self.off[-1])
        self.ncol = n + nx
        inf = highspy.kHighsInf
        starts = [0]
        index: list[int] = []
        rows_lo: list[float] = []
        rows_up: list[float] = []
        pj: list[int] = []
        pa: list[int] = []
        for a, t in enumerate(tables):
            partial = ~t.all(axis=1)
            for j in np.flatnonzero(partial).tolist():
                vs = np.flatnonzero(t[j])
                index.append(j)
                index.extend((n + int(self.off[a]) + vs).tolist())
                starts.append(len(index))
                rows_lo.append(-inf)
                rows_up.append(0.0)
                pj.append(j)
                pa.append(a)
        self.npairs = len(pj)
        values = np.empty(len(index))
        pos = 0
        for r in range(self.npairs):
            length = starts[r + 1] - starts[r]
            values[pos] = 1.0
            values[pos + 1 : pos + length] = -1.0
            pos += length
        for a in range(len(tables)):
            index.extend(range(n + int(self.off[a]), n + int(self.off[a + 1])))
            starts.append(len(index))
            rows_lo.append(1.0)
            rows_up.append(1.0)
        values = np.concatenate([values, np.ones(len(index) - pos)])
        lp = highspy.HighsLp()
        lp.num_col_ = self.ncol
        lp.num_row_ = len(rows_lo)
        lp.col_cost_ = np.concatenate([-w, np.zeros(nx)])
        lp.col_lower_ = np.zeros(self.ncol)
        lp.col_upper_ = np.ones(self.ncol)
        lp.row_lower_ = np.array(rows_lo)
        lp.row_upper_ = np.array(rows_up)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = values
        lp.a_matrix_.num_col_ = self.ncol
        lp.a_matrix_.num_row_ = len(rows_lo)
        # the plain binding: highspy.Highs adds Python callbacks and prints a banner on stdout
        h = getattr(highspy, "_Highs", highspy.Highs)()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("simplex_strategy", 1)  # dual simplex: warm after bound changes
        h.setOptionValue("threads", 1)
        h.setOptionValue("presolve", "off")  # node re-solves start from the last basis
        h.passModel(lp)
        self.h = h
        self.pj = np.array(pj, dtype=np.int64)
        self.pa = np.array(pa, dtype=np.int64)
        self.cols = np.arange(self.ncol, dtype=np.int32)
        self.lower = np.zeros(self.ncol)
        self.upper = np.ones(self.ncol)

    def solve(self, alive: BoolArray, masks: list[BoolArray]) -> tuple[np.ndarray, np.ndarray] | None:
        """Multipliers (charges x attributes, >= 0) and the primal x per atom, or None when HiGHS fails."""
        upper = np.concatenate([alive.astype(float), *[m.astype(float) for m in masks]])
        diff = np.flatnonzero(upper != self.upper)
        if diff.size:  # only what changed: HiGHS keeps more of its factorisation
            self.h.changeColsBounds(
                int(diff.size), diff.astype(np.int32), self.lower[: diff.size], upper[diff]
            )
            self.upper = upper
        self.h.run()
        import highspy

        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        sol = self.h.getSolution()
        duals = np.asarray(sol.row_dual)[: self.npairs]
        mu = np.zeros((self.n, len(self.k)))
        # HiGHS minimises -w.y; a row y - sum x <= 0 has a dual <= 0, whose negation is the multiplier
        mu[self.pj, self.pa] = np.maximum(-duals, 0.0)
        mu[~np.isfinite(mu)] = 0.0
        return mu, np.asarray(sol.col_value)[self.n :]


def _highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:  # pragma: no cover - highspy is a dependency
        return False
    return True


def exceeds(
    pb: Problem,
    fits: Callable[[Fraction], bool],
    *,
    max_nodes: int,
    deadline: float | None = None,
) -> tuple[int, ...] | None:
    """A row of ``pb.box`` whose exact load does not ``fits``, or None when every row of the box fits
    (module docstring; MATH.md 7.9). ``fits`` must be monotone (a load that fits, every smaller one
    fits). Raises :class:`SearchGaveUp` past ``max_nodes`` nodes or the ``deadline``
    (:func:`overlapdp.overlap._clock.now`)."""
    cover, box, offsets = pb.cover, pb.box, pb.offsets
    nattrs = len(offsets) - 1
    starts = offsets[:-1]
    stats = pb.stats
    live = pb.loads > 0
    meets = live
    if live.any():
        meets = np.logical_or.reduceat(cover & box, starts, axis=1).all(axis=1) & live
    idx = np.flatnonzero(meets)
    if idx.size == 0:
        return None if fits(Fraction(0)) else _first_row(box, offsets)
    sub = cover[idx]
    raw = pb.loads[idx]
    exact = [pb.exact[i] for i in idx.tolist()]
    atoms = _Atoms(sub, offsets, box)
    unit = pb.unit
    n = idx.size
    k = len(atoms.tables)
    # Float work is in units of a power of two at or above the heaviest load (exact unless a quotient is
    # subnormal: such loads are raised to a floor, an upper bound), so no sum overflows or underflows.
    finite = bool(np.isfinite(raw).all())
    top = float(raw.max()) if finite else 1.0
    shift = math.frexp(top)[1] if top > 0 else 0
    scale = Fraction(2) ** shift
    w = np.maximum(np.ldexp(raw, -shift), np.where(raw > 0, _FLOOR, 0.0)) if finite else raw
    widen_rel = 1 + 4 * (n + k + 2) * _U

    def exact_load(alive: BoolArray) -> Fraction:
        return _exact_sum([exact[i] for i in np.flatnonzero(alive).tolist()])

    def clear(ub: float, extra: float = 0.0) -> bool:
        """Whether a float bound ``ub`` in scaled units (plus an absolute float error ``extra``) shows
        that every row fits."""
        if not finite or not math.isfinite(ub) or not math.isfinite(extra):
            return False
        bound = (Fraction(ub) * Fraction(widen_rel) + Fraction(extra)) * scale
        if unit is not None:
            bound = (bound // unit) * unit
        return fits(bound)

    if k == 0:  # every charge meeting the box holds all of it: one load
        return None if fits(exact_load(np.ones(n, dtype=bool))) else atoms.row([], nattrs)
    # the largest float load that fits (scaled): branching prefers values whose table exceeds it
    theta = _largest_fitting(lambda t: fits(t * scale), float(w.sum()) if finite else 0.0)
    wf = [t.astype(np.float64) for t in atoms.tables]
    lp = _LP(atoms.tables, w) if finite and _highs_available() else None
    nodes = 0
    masks0 = [np.ones(t.shape[1], dtype=bool) for t in atoms.tables]
    # each node carries its parent's multipliers: their bound is valid in the child too (MATH.md 7.9),
    # and often clears it without an LP solve
    stack: list[tuple[BoolArray, list[BoolArray], np.ndarray | None]] = [
        (np.ones(n, dtype=bool), masks0, None)
    ]
    while stack:
        alive, masks, inherited = stack.pop()
        nodes += 1
        if nodes > max_nodes or (deadline is not None and _clock.now() > deadline):
            stats["nodes"] = stats.get("nodes", 0) + nodes
            raise SearchGaveUp
        for j in range(k):
            if not masks[j].all():
                alive = alive & atoms.tables[j][:, masks[j]].any(axis=1)
        if not alive.any():
            if fits(Fraction(0)):
                continue
            return atoms.row([int(np.flatnonzero(m)[0]) for m in masks], nattrs)
        wa = np.where(alive, w, 0.0)
        if clear(float(wa.sum())):
            continue
        counts = [np.where(masks[j], wa @ wf[j], -1.0) for j in range(k)]
        tops = [float(c.max()) for c in counts]
        if clear(min(tops)):
            continue
        # a leaf: every charge alive holds every atom of the box on every attribute
        whole = all(atoms.tables[j][alive][:, masks[j]].all() for j in range(k))
        if whole:
            if fits(exact_load(alive)):
                continue
            return atoms.row([int(np.flatnonzero(m)[0]) for m in masks], nattrs)
        xs: list[np.ndarray] | None = None
        mu_node = inherited
        if inherited is not None:
            bound, err = _lagrangian(inherited, w, alive, atoms.tables, masks)
            if clear(bound, err):
                stats["inherited"] = stats.get("inherited", 0) + 1
                continue
        if lp is not None:
            got = lp.solve(alive, masks)
            stats["lp"] = stats.get("lp", 0) + 1
            if got is not None:
                mu, x = got
                mu_node = mu
                bound, err = _lagrangian(mu, w, alive, atoms.tables, masks)
                if clear(bound, err):
                    continue
                xs = [x[int(lp.off[j]) : int(lp.off[j + 1])] for j in range(k)]
        # the LP's favourite row (or the heaviest values): a refusal when it does not fit
        choice = []
        for j in range(k):
            pref = counts[j] if xs is None else np.where(masks[j], xs[j] + 1e-9 * counts[j], -1.0)
            choice.append(int(np.argmax(pref)))
        held = alive.copy()
        for j in range(k):
            held &= atoms.tables[j][:, choice[j]]
        if not fits(exact_load(held)):
            stats["nodes"] = stats.get("nodes", 0) + nodes
            return atoms.row(choice, nattrs)
        # branch: fail first (fewest values whose table may exceed the threshold), then the lowest table
        best: tuple[int, float] | None = None
        pick = -1
        for j in range(k):
            if masks[j].sum() < 2:
                continue
            c = counts[j]
            key = (int((c > theta).sum()), -tops[j])
            if best is None or key < best:
                best, pick = key, j
        if pick < 0:  # every attribute down to one atom: this is a leaf (caught above)
            continue  # pragma: no cover
        c = counts[pick]
        children = [v for v in np.flatnonzero(masks[pick]).tolist() if not clear(float(c[v]))]
        pref = c if xs is None else xs[pick] + 1e-9 * c
        children.sort(key=lambda v: float(pref[v]))  # pushed first = explored last
        col = atoms.tables[pick]
        for v in children:
            child = list(masks)
            m = np.zeros_like(masks[pick])
            m[v] = True
            child[pick] = m
            stack.append((alive & col[:, v], child, mu_node))
    stats["nodes"] = stats.get("nodes", 0) + nodes
    return None


def _lagrangian(
    mu: np.ndarray, w: FloatArray, alive: BoolArray, tables: list[BoolArray], masks: list[BoolArray]
) -> tuple[float, float]:
    """The Lagrangian bound of a box for multipliers ``mu`` (MATH.md 7.9) in floats, and an absolute
    bound on its round-off (the inputs are exact floats; each term is a sum of non-negative products)."""
    m = mu * alive[:, None]
    wa = np.where(alive, w, 0.0)
    s = m.sum(axis=1)
    first = np.maximum(wa - s, 0.0).sum()
    second = 0.0
    for j, t in enumerate(tables):
        col = m[:, j] @ t
        second += float(col[masks[j]].max())
    total = float(first) + second
    k = len(tables)
    n = int(alive.sum())
    # every intermediate is within (n + k + 2) roundings of a non-negative sum of at most these terms
    scale = float(wa.sum()) + float(m.sum()) + total
    err = 4 * (n + k + 4) * _U * scale
    return total, err


def _largest_fitting(fits: Callable[[Fraction], bool], hi: float) -> float:
    """The largest float ``t`` in [0, hi] with ``fits(t)`` (bisection on the floats' order), or -1.0
    when 0 does not fit; a heuristic threshold for branching only."""
    if not fits(Fraction(0)):
        return -1.0
    if not math.isfinite(hi) or fits(Fraction(hi)):
        return hi
    lo_i, hi_i = 0, int(np.float64(hi).view(np.int64))
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if fits(Fraction(float(np.int64(mid).view(np.float64)))):
            lo_i = mid
        else:
            hi_i = mid
    return float(np.int64(lo_i).view(np.float64))


def _first_row(box: BoolArray, offsets: np.ndarray) -> tuple[int, ...]:
    return tuple(int(np.flatnonzero(box[offsets[p] : offsets[p + 1]])[0]) for p in range(len(offsets) - 1))


def _exact_sum(values: Sequence[Fraction]) -> Fraction:
    if not values:
        return Fraction(0)
    den = max(v.denominator for v in values)
    if any(den % v.denominator for v in values):
        return sum(values, Fraction(0))
    return Fraction(sum(v.numerator * (den // v.denominator) for v in values), den)


__all__ = ["Problem", "common_unit", "exceeds", "unit_gcd"]
