"""Empirical lower bounds on a mechanism's epsilon (a statistical privacy audit).

Run the mechanism many times on each of two neighbouring data sets ``D0`` and ``D1``. For any event
``E`` on the outputs, a mechanism that is ``(epsilon, delta)``-DP satisfies
``P[M(D0) in E] <= e^epsilon P[M(D1) in E] + delta``, so with Clopper-Pearson bounds ``p0_lower`` (for
``P[M(D0) in E]``) and ``p1_upper`` (for ``P[M(D1) in E]``), each at confidence ``1 - alpha/2``,

    ``epsilon >= log((p0_lower - delta) / p1_upper)``

holds with probability at least ``1 - alpha`` (Jagielski, Ullman, Oprea 2020; Ding et al. 2018 use the
same event-counting idea). To stay honest the event is CHOSEN on one half of the runs (among threshold
events on a score, or likelihood-ratio-ordered sets of outputs) and the bound is EVALUATED on the other
half only, so the search cannot overfit the reported number. Both directions (``D0`` vs ``D1`` and
``D1`` vs ``D0``) are searched.

A mechanism is flagged when its lower bound exceeds its declared epsilon: with probability at least
``1 - alpha`` a flagged mechanism really violates its declaration.
"""

from __future__ import annotations

import math
from collections import Counter as Multiset
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import beta

from overlapdp.mechanisms.randomness import RandomSource, SeededRandomSource

#: ``sampler(which, n, source)`` returns ``n`` outputs of the mechanism on data set ``which`` (0 or 1).
Sampler = Callable[[int, int, RandomSource], Sequence[Any]]


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two one-sided Clopper-Pearson bounds on a binomial proportion, each at level ``1 - alpha``."""
    lower = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def _epsilon_bound(k0: int, n0: int, k1: int, n1: int, alpha: float, delta: float) -> float:
    p0_low, _ = clopper_pearson(k0, n0, alpha / 2)
    _, p1_up = clopper_pearson(k1, n1, alpha / 2)
    if p0_low - delta <= 0:
        return 0.0
    return max(0.0, math.log((p0_low - delta) / p1_up))


@dataclass(frozen=True)
class AuditResult:
    """The honest (held-out) lower bound and how it was obtained."""

    epsilon_lower: float
    event: str
    direction: str
    k_first: int
    k_second: int
    n_per_side: int
    confidence: float
    delta: float
    search_epsilon: float

    def flags(self, declared_epsilon: float) -> bool:
        """True when the audit proves (at its confidence) that ``declared_epsilon`` is violated."""
        return self.epsilon_lower > declared_epsilon


def _threshold_counts(
    search: list[npt.NDArray[np.float64]], held: list[npt.NDArray[np.float64]], alpha: float, delta: float
) -> tuple[float, str, int, int, int]:
    """Best threshold event on the search half; returns (search eps, description, direction, held k's)."""
    values = np.unique(np.concatenate(search))
    if values.size > 2000:
        values = np.unique(np.quantile(values, np.linspace(0, 1, 2001)))
    s0, s1 = np.sort(search[0]), np.sort(search[1])
    h0, h1 = np.sort(held[0]), np.sort(held[1])
    n = s0.size
    best: tuple[float, str, int, int, int] = (-1.0, "", 0, 0, 0)
    for kind in ("score >= ", "score <= "):
        if kind == "score >= ":
            k0 = n - np.searchsorted(s0, values, "left")
            k1 = n - np.searchsorted(s1, values, "left")
            g0 = h0.size - np.searchsorted(h0, values, "left")
            g1 = h1.size - np.searchsorted(h1, values, "left")
        else:
            k0 = np.searchsorted(s0, values, "right")
            k1 = np.searchsorted(s1, values, "right")
            g0 = np.searchsorted(h0, values, "right")
            g1 = np.searchsorted(h1, values, "right")
        best = _best_of(best, k0, k1, g0, g1, n, alpha, delta, [f"{kind}{v:g}" for v in values.tolist()])
    return best


def _ratio_counts(
    search: Sequence[Sequence[Hashable]],
    held: Sequence[Sequence[Hashable]],
    alpha: float,
    delta: float,
    limit: int = 500,
) -> tuple[float, str, int, int, int]:
    """Best likelihood-ratio-ordered set of outputs (Neyman-Pearson sets) on the search half."""
    c0, c1 = Multiset(search[0]), Multiset(search[1])
    support = [o for o, _ in (c0 + c1).most_common(limit)]
    ids = {o: i for i, o in enumerate(support)}
    m = len(support)

    def counts(xs: Sequence[Hashable]) -> npt.NDArray[np.int64]:
        codes = np.fromiter((ids.get(x, m) for x in xs), dtype=np.int64, count=len(xs))
        return np.bincount(codes, minlength=m + 1)[:m]

    n = len(search[0])
    a0, a1, b0, b1 = counts(search[0]), counts(search[1]), counts(held[0]), counts(held[1])
    best: tuple[float, str, int, int, int] = (-1.0, "", 0, 0, 0)
    log_ratio = np.log((a0 + 0.5) / (a1 + 0.5))
    for order in (np.argsort(-log_ratio, kind="stable"), np.argsort(log_ratio, kind="stable")):
        names = [f"output among the {j + 1} outputs of highest estimated likelihood ratio" for j in range(m)]
        best = _best_of(
            best,
            np.cumsum(a0[order]),
            np.cumsum(a1[order]),
            np.cumsum(b0[order]),
            np.cumsum(b1[order]),
            n,
            alpha,
            delta,
            names,
        )
    return best


def _best_of(
    best: tuple[float, str, int, int, int],
    k0: npt.NDArray[np.int64],
    k1: npt.NDArray[np.int64],
    g0: npt.NDArray[np.int64],
    g1: npt.NDArray[np.int64],
    n: int,
    alpha: float,
    delta: float,
    names: list[str],
) -> tuple[float, str, int, int, int]:
    # A cheap point-estimate screen first; exact Clopper-Pearson only for the most promising events.
    p0, p1 = (k0 + 0.5) / (n + 1), (k1 + 0.5) / (n + 1)
    screen = np.abs(np.log(p0 / p1)) * np.sqrt(np.minimum(k0, k1) + 1)
    for i in np.argsort(-screen)[:60].tolist():
        for direction, (a, b) in enumerate(((int(k0[i]), int(k1[i])), (int(k1[i]), int(k0[i])))):
            eps = _epsilon_bound(a, n, b, n, alpha, delta)
            if eps > best[0]:
                held = (int(g0[i]), int(g1[i])) if direction == 0 else (int(g1[i]), int(g0[i]))
                best = (eps, names[i], direction, *held)
    return best


def audit_epsilon(
    sampler: Sampler,
    *,
    runs: int,
    score: Callable[[Any], float] | None = None,
    delta: float = 0.0,
    confidence: float = 0.95,
    rng: int | RandomSource = 0,
) -> AuditResult:
    """An empirical lower bound on epsilon from ``runs`` runs on each neighbour (see the module doc).

    ``score`` maps an output to a number for threshold events; without it, numeric outputs are their
    own score and other (hashable) outputs are searched by likelihood-ratio-ordered sets.
    """
    if runs < 20:
        raise ValueError("an audit needs at least 20 runs per data set")
    source = rng if isinstance(rng, RandomSource) else SeededRandomSource(rng)
    alpha = 1 - confidence
    outs = [list(sampler(b, runs, source)) for b in (0, 1)]
    half = runs // 2
    search = [o[:half] for o in outs]
    held = [o[half : 2 * half] for o in outs]
    numeric = score is not None or all(
        isinstance(x, int | float | np.integer | np.floating) for x in search[0]
    )
    if numeric:
        f = score if score is not None else float

        def as_scores(xs: Sequence[Any]) -> npt.NDArray[np.float64]:
            return np.fromiter((f(x) for x in xs), dtype=np.float64, count=len(xs))

        search_eps, event, direction, g_first, g_second = _threshold_counts(
            [as_scores(x) for x in search], [as_scores(x) for x in held], alpha, delta
        )
    else:
        search_eps, event, direction, g_first, g_second = _ratio_counts(search, held, alpha, delta)
    return AuditResult(
        epsilon_lower=_epsilon_bound(g_first, half, g_second, half, alpha, delta),
        event=event,
        direction="D0 vs D1" if direction == 0 else "D1 vs D0",
        k_first=g_first,
        k_second=g_second,
        n_per_side=half,
        confidence=confidence,
        delta=delta,
        search_epsilon=max(search_eps, 0.0),
    )


def repeat(run: Callable[[int, RandomSource], Any]) -> Sampler:
    """A sampler that calls ``run(which, source)`` once per output (for mechanisms that run once)."""

    def sampler(which: int, n: int, source: RandomSource) -> list[Any]:
        return [run(which, source) for _ in range(n)]

    return sampler
