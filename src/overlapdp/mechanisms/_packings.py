"""Packing plans: per-query shares that are within budget on every row by construction (MATH.md 2.10.1).

A *packing* is a set of pairwise disjoint queries (no row lies in two of them), so a row pays at most
one of its members. Give packing ``P_j`` an amount ``c_j >= 0`` and the whole workload (whose rows hold
at most ``gamma`` queries each) an amount ``c_0``, and let each query's cost be the sum of the amounts
of the columns holding it: a row then pays at most ``gamma c_0 + sum_j c_j``, whatever the row. So
choosing the amounts is a convex problem over a few hundred columns, with no search over rows at all,
and the plan's certificate is the columns themselves (checked pairwise disjoint on the coverage
tables). Even shares are the plan with ``c_0`` alone; the best amounts are found by column generation:

- the restricted problem (the columns found so far) minimises ``log F(A c) + p log(cost of c)``, ``F``
  the weighted variance: both terms are invariant to scaling ``c`` (F is homogeneous of degree ``-p``),
  so the minimum of the budget-constrained problem is the unconstrained one scaled to the budget;
  SciPy's L-BFGS-B solves it (a few hundred variables, bounds ``c >= 0``);
- at its solution, with ``pi_q = p w_q e_q^(-p-1)`` and ``nu = pi . e / B``, a packing ``P`` improves
  the plan iff ``sum_{q in P} pi_q > nu`` (the KKT conditions of the restricted problem); candidates
  come from each attribute's weighted interval scheduling (queries pairwise disjoint on that one
  attribute, exact by dynamic programming on their spans), completed greedily and improved by swaps,
  and from a greedy weighted independent set of the overlap graph (pricing heuristics: a missed column
  costs objective, never safety).

The amounts are finally rounded DOWN to integers of a power-of-two unit, so every share is an exact
float and the budget inequality is checked on Python integers.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

#: Most queries a packing plan is built for: the overlap graph holds t^2 entries (float32 for the
#: heuristics' products: 36 MB at 3 000 queries).
PACKING_MAX = 3000
#: Rounds of column generation at most, and candidate columns added per round at most.
MAX_ROUNDS = 400
_PER_ROUND = 24
#: Column generation stops when the last _STALL rounds lowered the objective by less than _PROGRESS
#: (relative): its tail gains little, and the rows' constraint generation may use the time better.
_STALL = 8
_PROGRESS = 0.01


@dataclass(frozen=True)
class Packing:
    """A packing plan: each query's additive ``costs`` (exact floats; every row's sum is at most the
    limit, MATH.md 2.10.1), its ``objective`` (sum of ``w_q costs_q^-p``), how many ``columns`` carry a
    positive amount (the whole workload's among them when ``even_part``), and the ``rounds`` used."""

    costs: np.ndarray
    objective: float
    columns: int
    rounds: int
    even_part: bool
    #: the certificate: the columns of positive amount (query positions; the first may be the whole
    #: workload, whose rows hold at most gamma of them) and their exact amounts, ``costs`` being their sums
    sets: tuple[tuple[int, ...], ...] = ()
    amounts: tuple[float, ...] = ()


def overlap_graph(tables: list[np.ndarray]) -> np.ndarray:
    """(queries x queries) whether two queries share a row: products of value sets meet iff they meet
    on every attribute. The per-attribute products count common values in float32, exact below 2^24
    (each count is at most the attribute's number of values); the diagonal is False."""
    t = tables[0].shape[0]
    g = np.ones((t, t), dtype=bool)
    for tab in tables:
        f = tab.astype(np.float32)
        g &= (f @ f.T) > 0.5
    np.fill_diagonal(g, False)
    return g


def packing_plan(
    tables: list[np.ndarray],
    w: np.ndarray,
    p: int,
    limit: float,
    gamma: int,
    until: Callable[[], bool],
    graph: np.ndarray | None = None,
) -> Packing | None:
    """The packing plan of the module docstring for queries with 0/1 coverage ``tables`` (one per
    attribute, queries x values), weights ``w`` (at most 1), variance ``~ c^-p``, row budget ``limit``
    (additive) and ``gamma`` (every row holds at most that many queries: certified). Column generation
    runs while ``until()`` is False; None when there are too many queries for the graph."""
    t = int(w.size)
    if t > PACKING_MAX or t < 2:
        return None
    g = overlap_graph(tables) if graph is None else graph
    pricing = _Pricing(tables, g)
    # the whole workload first: even shares, the plan to beat
    cols: list[np.ndarray] = [np.arange(t)]
    keys: set[bytes] = set()
    k = [float(gamma)]
    c = np.array([limit / gamma])
    best: tuple[float, np.ndarray, int] = (math.inf, c, 1)
    history: list[float] = []
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007 - reported
        c, e, f = _master(cols, np.array(k), c, w, p, limit, t)
        if f < best[0]:
            best = (f, c.copy(), len(cols))
        history.append(best[0])
        if until() or (len(history) > _STALL and history[-1] > history[-1 - _STALL] * (1 - _PROGRESS)):
            break  # out of time, or the last rounds gained too little to be worth more
        pi = p * w * e ** (-p - 1.0)
        nu = float(pi @ e) / limit
        new = []
        for s in pricing.candidates(pi):
            key = np.sort(s).astype(np.int32).tobytes()
            if float(pi[s].sum()) > nu * (1 + 1e-7) and key not in keys:
                keys.add(key)
                new.append((float(pi[s].sum()), s))
        if not new:
            break
        new.sort(key=lambda x: -x[0])
        for _, s in new[:_PER_ROUND]:
            cols.append(np.sort(s))
            k.append(1.0)
        # new columns start small: the restricted problem's solution moves from the last one
        c = np.concatenate([c, np.full(min(len(new), _PER_ROUND), float(c.mean()) * 0.05)])
    f, c, ncols = best
    if not math.isfinite(f):
        return None
    costs, sets, amounts = _exact_costs(cols[:ncols], k[:ncols], c, limit, t, g)
    if costs is None:
        return None
    obj = float(np.sum(w / costs**p))
    return Packing(costs, obj, len(sets), rounds, bool(c[0] > 0), sets, amounts)


def _master(
    cols: list[np.ndarray], k: np.ndarray, c0: np.ndarray, w: np.ndarray, p: int, limit: float, t: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """The restricted problem on ``cols`` (costs ``k`` per unit amount): amounts scaled to cost
    ``limit``, the shares ``e = A c`` and their objective."""
    import scipy.sparse as sp
    from scipy.optimize import minimize

    lengths = np.array([s.size for s in cols])
    a = sp.csc_matrix(
        (np.ones(int(lengths.sum())), np.concatenate(cols), np.concatenate([[0], np.cumsum(lengths)])),
        shape=(t, len(cols)),
    )
    at = a.T.tocsr()

    def h(c: np.ndarray) -> tuple[float, np.ndarray]:
        e = a @ c
        f = float(np.sum(w * e ** (-p)))
        s = float(k @ c)
        grad = (at @ (-p * w * e ** (-p - 1.0))) / f + p * k / s
        return math.log(f) + p * math.log(s), grad

    scale = limit / float(k @ c0)
    floor = 1e-12 * limit  # every amount stays positive: each query keeps a share (the first column)
    res = minimize(
        h,
        np.maximum(c0 * scale, floor),
        jac=True,
        method="L-BFGS-B",
        bounds=[(floor, None)] * len(cols),
        options={"maxiter": 400, "ftol": 1e-12, "gtol": 1e-10},
    )
    c = np.asarray(res.x) * (limit / float(k @ np.asarray(res.x)))
    e = a @ c
    return c, e, float(np.sum(w * e ** (-p)))


def _exact_costs(
    cols: list[np.ndarray], k: list[float], c: np.ndarray, limit: float, t: int, g: np.ndarray
) -> tuple[np.ndarray | None, tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """Each query's cost ``2^-K M_q`` with ``M_q`` the sum of its columns' integer amounts ``m_j``, and
    ``sum_j k_j m_j <= N = floor(limit (1 - 2^-50) 2^K) < 2^52`` checked on integers (MATH.md 2.10.1): the amounts
    rounded down from ``c``. Every packing is checked pairwise disjoint on the graph first (a column that
    is not is dropped: never trusted). None when a query is left without a share; with the costs, the
    columns of positive amount and their amounts ``2^-K m_j`` (exact floats)."""
    ks = [int(x) for x in k]
    ok = [j == 0 or not g[np.ix_(s, s)].any() for j, s in enumerate(cols)]
    total = sum(
        (Fraction(float(cj)) * kj for cj, kj, good in zip(c, ks, ok, strict=True) if good), Fraction(0)
    )
    if total <= 0:
        return None, (), ()
    # The unit 2^-K: limit 2^K < 2^52, and the queries' costs, about N * spread units in all, under 2^49,
    # so they are integers toulbar2 takes (overlap/wcsp.py): the engine, hence the odometer, can then
    # check the plan exactly (1 000 mixed Adult queries: Adult-like and half-domain plans proved in
    # 0.4-1.4 s, not within 30 s before). Flooring loses under a unit per column, at most 2^-35 of the
    # limit (spread is at most the number of queries, PACKING_MAX).
    spread = sum(float(cj) * len(s) for cj, s, good in zip(c, cols, ok, strict=True) if good) / float(total)
    kexp = min(52 - math.frexp(limit)[1], 49 - math.frexp(limit * max(spread, 1.0))[1])
    # 2^-50 below the limit, as every plan of the allocation (a mechanism built from a share, e.g. a
    # Laplace scale 1 / share, may declare a cost an ulp above it)
    n_units = math.floor(Fraction(limit) * (1 - Fraction(1, 2**50)) * 2**kexp)
    m = [
        math.floor(Fraction(float(cj)) * n_units / total) if good else 0
        for cj, good in zip(c, ok, strict=True)
    ]
    if sum(mj * kj for mj, kj in zip(m, ks, strict=True)) > n_units:  # pragma: no cover - floors
        raise AssertionError("rounded amounts over the budget")
    units = np.zeros(t, dtype=np.int64)
    for s, mj in zip(cols, m, strict=True):
        if mj:
            units[s] += mj
    if np.any(units <= 0):
        return None, (), ()
    kept = [(tuple(int(i) for i in s), math.ldexp(mj, -kexp)) for s, mj in zip(cols, m, strict=True) if mj]
    # each M_q <= N < 2^53: its float is exact, and so is the power-of-two scaling
    return (
        np.ldexp(units.astype(np.float64), -kexp),
        tuple(s for s, _ in kept),
        tuple(a for _, a in kept),
    )


class _Pricing:
    """Candidate packings of large price ``sum pi_q`` (module docstring)."""

    def __init__(self, tables: list[np.ndarray], g: np.ndarray) -> None:
        self.g = g
        self.gf = g.astype(np.float32)
        self.t = g.shape[0]
        self.rng = np.random.default_rng(0)
        # per attribute: the queries constraining it (not every value, some value) and their spans
        self.spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for tab in tables:
            idx = np.flatnonzero(~tab.all(axis=1) & tab.any(axis=1))
            if idx.size < 2:
                continue
            sub = tab[idx]
            first = sub.argmax(axis=1)
            last = sub.shape[1] - 1 - sub[:, ::-1].argmax(axis=1)
            order = np.argsort(last, kind="stable")
            self.spans.append((idx[order], first[order], last[order]))

    def candidates(self, pi: np.ndarray) -> list[np.ndarray]:
        out = [self.improve(self.fill(s, pi), pi) for s in self.schedules(pi)]
        for trial in range(3):
            out.append(self.improve(self.greedy(pi, trial > 0), pi))
        # every candidate is a packing by construction; one that is not (a bug) is never offered
        return [s for s in out if not self.g[np.ix_(s, s)].any()]

    def schedules(self, pi: np.ndarray) -> list[np.ndarray]:
        """Per attribute, the heaviest set of queries whose spans on it are pairwise disjoint (weighted
        interval scheduling): disjoint spans make disjoint queries."""
        out = []
        for idx, first, last in self.spans:
            lasts = last.tolist()
            m = len(lasts)
            best = [0.0] * (m + 1)
            prev = [0] * m
            take = [False] * m
            weights = pi[idx].tolist()
            for i in range(m):
                j = bisect.bisect_left(lasts, int(first[i]), 0, i)  # the spans ending before i's
                prev[i] = j
                with_i = weights[i] + best[j]
                if with_i > best[i]:
                    best[i + 1], take[i] = with_i, True
                else:
                    best[i + 1] = best[i]
            chosen = []
            i = m
            while i > 0:
                if take[i - 1]:
                    chosen.append(int(idx[i - 1]))
                    i = prev[i - 1]
                else:
                    i -= 1
            out.append(np.array(chosen, dtype=np.int64))
        return out

    def fill(self, s: np.ndarray, pi: np.ndarray) -> np.ndarray:
        """``s`` completed to a maximal packing, heaviest queries first."""
        ins = np.zeros(self.t, dtype=bool)
        ins[s] = True
        free = ~ins & ~self.g[:, ins].any(axis=1)
        while free.any():
            v = int(np.argmax(np.where(free, pi, -1.0)))
            ins[v] = True
            free &= ~self.g[v]
            free[v] = False
        return np.flatnonzero(ins)

    def greedy(self, pi: np.ndarray, noisy: bool) -> np.ndarray:
        """A maximal packing picked by weight over the weight of its free neighbourhood (GWMIN2)."""
        val = pi * self.rng.uniform(0.7, 1.3, self.t) if noisy else pi
        val = (val / float(val.max())).astype(np.float32)  # float32 products on weights at most 1
        free = np.ones(self.t, dtype=bool)
        near = self.gf @ val
        chosen = []
        while free.any():
            # only free queries are candidates (the float32 sums below may leave near a hair negative)
            cand = np.flatnonzero(free)
            score = val[cand] / (val[cand] + np.maximum(near[cand], 0.0) + 1e-30)
            v = int(cand[int(np.argmax(score))])
            chosen.append(v)
            gone = free & self.g[v]
            gone[v] = True
            free &= ~gone
            near -= self.gf[:, gone] @ val[gone]
        return np.array(chosen, dtype=np.int64)

    def improve(self, s: np.ndarray, pi: np.ndarray) -> np.ndarray:
        """Swaps: a query outside heavier than its neighbours inside replaces them (then refill)."""
        ins = np.zeros(self.t, dtype=bool)
        ins[s] = True
        p32 = pi.astype(np.float32)
        for _ in range(50):
            clash = self.gf @ (p32 * ins)
            gain = np.where(ins, -1.0, pi - clash)
            u = int(np.argmax(gain))
            if gain[u] <= 1e-6 * pi[u]:
                break
            ins &= ~self.g[u]
            ins[u] = True
            ins[self.fill(np.flatnonzero(ins), pi)] = True
        return np.flatnonzero(ins)
