"""The figures an approximate-DP data set reports: the worst row's own spend and the room left on every
row, under the filter's combined rule (MATH.md 5.6).

A row's charges pass the rule while EITHER basic composition, ``s1 = sum eps <= E``, OR advanced
composition, ``sqrt(2 ln(1/delta') s2) + s2 / 2 <= E`` with ``s2 = sum eps^2``, holds (``delta' =
delta / 2``, the service's slack; the service's charges are (epsilon, 0), so the delta condition always
holds). So a row's spend is ``min(s1, adv(s2))``, the data set's or analyst's spend is the largest of
those over the rows, and the room one more charge of ``e`` on every row has is the smallest over the rows
of ``max(E - s1, sqrt(u(E)^2 - s2))``, where ``u(E)`` solves ``sqrt(2 ln(1/delta')) u + u^2 / 2 = E``
(the charge passes that row by basic composition, or by the advanced rule with ``s2 + e^2 <= u(E)^2``).

The two maxima over the rows of ``s1`` and ``s2`` may come from different rows: their combination
``min(max s1, adv(max s2))`` (what :meth:`PrivacyFilter.value` reports) bounds the spend from above but
can exceed the quota while every row is within it (450 charges of 0.001 on one row, one of 0.39 on
another: quota 0.4), and ``max(E - max s1, sqrt(u(E)^2 - max s2))`` bounds the room from below (0 there,
where 0.01 is left). :func:`joint_figures` evaluates every row pattern of the charges (when their grid
is small enough), :func:`bound_figures` combines per-track bounds (the safe fallback, no search). Every
figure is rounded the safe way: spends up, rooms down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from overlapdp.exact import float_down, float_up, sqrt_up
from overlapdp.privacy.patterns import row_patterns
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

#: Atom cells x distinct queries enumerated for the per-row figures (beyond it: the per-track bounds).
GRID_LIMIT = 200_000
# Relative margin on the transcendental parts (a few ulps of error each; far below any figure's meaning).
_UP, _DOWN = 1 + 1e-12, 1 - 1e-9


def _log_term(delta: float) -> float:
    return 2 * math.log(2 / delta)  # 2 ln(1/delta') with delta' = delta / 2 (measures/approx.py, the slack)


def advanced_up(s2: Fraction, delta: float) -> float:
    """An upper bound of the advanced rule's epsilon for a row whose sum of squared epsilons is ``s2``."""
    return (math.sqrt(_log_term(delta)) * sqrt_up(s2) + float_up(s2 / 2)) * _UP


def advanced_room(quota: float, s2: Fraction, delta: float) -> float:
    """The largest ``e`` (rounded down) with ``adv(s2 + e^2) <= quota``: ``sqrt(u(quota)^2 - s2)``; 0 when
    none."""
    log_term = _log_term(delta)
    u = 2 * quota / (math.sqrt(log_term + 2 * quota) + math.sqrt(log_term))  # stably
    left = Fraction(u * _DOWN) ** 2 - s2
    if left <= 0:
        return 0.0
    return max(0.0, math.sqrt(float(left)) * _DOWN)


def row_figures(s1: Fraction, s2: Fraction, quota: float, delta: float) -> tuple[float, float]:
    """One row's spend (rounded up) and room (rounded down) from upper bounds ``s1`` of its sum of
    epsilons and ``s2`` of its sum of squares (both figures stay safe with upper bounds)."""
    spent = min(float_up(s1), advanced_up(s2, delta))
    basic = Fraction(quota) - s1
    basic_room = float_down(basic) if basic > 0 else 0.0
    return spent, max(basic_room, advanced_room(quota, s2, delta))


def bound_figures(s1: Fraction, s2: Fraction, quota: float, delta: float) -> tuple[float, float]:
    """The spend and room from per-track upper bounds (``s1`` on every row's sum of epsilons, ``s2`` on
    every row's sum of squares, possibly different rows'): an upper bound of the spend and a lower bound
    of the room, since each row's own figures are at most / at least these."""
    return row_figures(s1, s2, quota, delta)


def fits(
    s1: Fraction,
    s2: Fraction,
    added: Sequence[tuple[PredicateQuery | None, float, int]],
    quota: float,
    delta: float,
) -> bool:
    """Whether every row stays within ``quota`` whatever rows the ``added`` charges cover, from per-track
    upper bounds: every row passes basic composition with all of them, or every row passes the advanced
    rule with all of them (exact sums; the advanced epsilon bounded from above)."""
    add1 = sum((Fraction(load) * times for _, load, times in added), Fraction(0))
    add2 = sum((Fraction(load) ** 2 * times for _, load, times in added), Fraction(0))
    return s1 + add1 <= Fraction(quota) or advanced_up(s2 + add2, delta) <= quota


def joint_figures(
    schema: Schema,
    charges: Sequence[tuple[PredicateQuery, float, int]],
    quota: float,
    delta: float,
    limit: int = GRID_LIMIT,
) -> tuple[float, float] | None:
    """The spend (the largest over the rows of the row's own ``min(s1, adv(s2))``, rounded up) and the
    room (the smallest over the rows of ``max(quota - s1, sqrt(u^2 - s2))``, rounded down), by
    enumerating every row pattern of the charges' queries; None when their grid exceeds ``limit``.

    The rows are located by float sums bracketed past their round-off; the candidates' sums are then
    exact (Fractions), so the figures are those of the exact sums, rounded the safe way."""
    if not charges:
        return 0.0, quota
    # charges on the same rows are summed exactly first, in the order they came: the figures are the
    # same whether the charges were admitted one by one or replayed grouped (``times``) after a restart
    index: dict[object, int] = {}
    queries: list[PredicateQuery] = []
    l1: list[Fraction] = []
    l2: list[Fraction] = []
    for q, load, times in charges:
        key = (q.is_contradiction, tuple((p, tuple(map(tuple, c.intervals))) for p, c in q.constraints))
        k = index.get(key)
        if k is None:
            k = index[key] = len(queries)
            queries.append(q)
            l1.append(Fraction(0))
            l2.append(Fraction(0))
        l1[k] += Fraction(load) * times
        l2[k] += Fraction(load) ** 2 * times
    pats = row_patterns(queries, schema, limit=limit)
    if pats is None:
        return None
    members = pats.members
    w = np.array([[float_up(a), float_up(b)] for a, b in zip(l1, l2, strict=True)])
    sums = members.astype(float) @ w  # (patterns, 2): every row's sum of epsilons and of squares, in floats
    # Each float sum is within 4 (n + 2) 2^-53 (relative) of the sum of its float loads, each rounded
    # up from its exact load by at most 2^-52 (the service's loads are normal floats): so the exact sums
    # lie between ``down`` and ``up`` times it. The rows that could be the worst (largest spend, smallest
    # room) by these brackets are then summed exactly (usually a handful), so the figures are exact.
    err = Fraction(4 * (len(queries) + 2), 2**53)
    up, down = 1 + err, (1 - err) / (1 + Fraction(1, 2**52))
    brackets = []
    for s1, s2 in sums:
        f1, f2 = Fraction(float(s1)), Fraction(float(s2))
        hi, lo = row_figures(f1 * up, f2 * up, quota, delta), row_figures(f1 * down, f2 * down, quota, delta)
        brackets.append((lo[0], hi[0], hi[1], lo[1]))  # spend low / high, room low / high
    spend_floor = max(b[0] for b in brackets)
    room_ceiling = min(b[2] for b in brackets)
    spent, room = 0.0, math.inf
    for k, (_, spend_hi, _, room_hi) in enumerate(brackets):
        if spend_hi < spend_floor and room_hi > room_ceiling:
            continue  # neither the worst spend nor the smallest room
        idx = np.flatnonzero(members[k]).tolist()
        e1 = sum((l1[i] for i in idx), Fraction(0))
        e2 = sum((l2[i] for i in idx), Fraction(0))
        row_spent, row_room = row_figures(e1, e2, quota, delta)
        spent, room = max(spent, row_spent), min(room, row_room)
    return spent, room
