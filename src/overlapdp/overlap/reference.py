"""Reference algorithms for tests and benchmarks: slow, simple, independent of the engine's routes.

- :func:`brute_force_overlap`: every row of the domain (MATH.md 1.8, the per-row view);
- :func:`subset_overlap`: every subset of the queries, kept when its joint coverage is non-empty
  (the definition $\\max\\{\\mathrm{comp}(Q') : \\bigcap_{q\\in Q'} C_q\\neq\\emptyset\\}$);
- :func:`graph_overlap`: the paper's route (Smith et al. 2022): the pairwise-overlap graph $G_Q$, an
  exact maximum (weight) clique with networkx, and a greedy colouring bound. A clique is the answer
  only when pairwise overlap implies joint overlap (one interval per attribute: boxes have Helly number
  2); otherwise its value is only an upper bound (coverages $\\{a,b\\},\\{b,c\\},\\{a,c\\}$).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from overlapdp.overlap.magnitude import (
    check_representable,
    compose_up,
    exact_total,
    normalised_loads,
    unscale_up,
)
from overlapdp.overlap.result import (
    Comp,
    DomainTooLargeError,
    OverlapResult,
    SetComp,
    check_vectors,
    check_weights,
    comp_name,
)
from overlapdp.query import PredicateQuery, joint_coverage
from overlapdp.schema import Schema

if TYPE_CHECKING:  # networkx (~0.1 s) is imported by the graph route only, a reference
    import networkx as nx

BRUTE_FORCE_LIMIT = 2_000_000
SUBSET_LIMIT = 20


def _weights(queries: Sequence[PredicateQuery], weights: Any, name: str) -> list[Any]:
    ids = [q.id for q in queries]
    if name == "vector":
        return [np.asarray(v, dtype=float) for v in check_vectors(weights, len(queries), ids)]
    if name == "count":
        return [1.0] * len(queries)
    raw = [q.weight for q in queries] if weights is None else weights
    return [float(v) for v in check_weights(raw, len(queries), ids)]


def _compose(indices: Sequence[int], w: Sequence[Any], comp: Comp) -> Any:
    if isinstance(comp, SetComp):
        return float(comp.value(list(indices)))
    if comp == "vector":
        k = len(w[0]) if w else 0
        return sum((w[i] for i in indices), np.zeros(k))
    # Exact, rounded up (MATH.md 7.8): no float square underflows, no sum overflows to inf.
    value = compose_up("l2" if comp == "l2" else "sum", [w[i] for i in indices])
    return check_representable(value, f"the row covered by {len(indices)} queries")


def _ids(queries: Sequence[PredicateQuery], indices: Sequence[int]) -> tuple[str, ...]:
    return tuple(str(queries[i].id) if queries[i].id is not None else f"#{i}" for i in indices)


def brute_force_overlap(
    queries: Sequence[PredicateQuery],
    weights: Any = None,
    comp: Comp = "count",
    *,
    schema: Schema | None = None,
) -> OverlapResult:
    """The maximum over every row of the domain of comp(queries covering it); small domains only."""
    name = comp_name(comp)
    queries = list(queries)
    w = _weights(queries, weights, name)
    if not queries:
        return OverlapResult(0.0, True, 0.0, 0.0, None, None, (), "brute-force")
    sch = schema or queries[0].schema
    if sch.domain_size > BRUTE_FORCE_LIMIT:
        raise DomainTooLargeError(f"brute force over {sch.domain_size} rows exceeds {BRUTE_FORCE_LIMIT}")
    if name == "vector":
        k = len(w[0])
        best_v = np.full(k, -1.0)
        best_rows: list[tuple[int, ...]] = [()] * k
        for row in itertools.product(*(range(a.size) for a in sch)):
            v = _compose([i for i, q in enumerate(queries) if q.covers(row)], w, comp)
            for j in range(k):
                if v[j] > best_v[j]:
                    best_v[j], best_rows[j] = v[j], row
        parts = []
        for j in range(k):
            cov = [i for i, q in enumerate(queries) if q.covers(best_rows[j])]
            parts.append(
                OverlapResult(
                    float(best_v[j]),
                    True,
                    float(best_v[j]),
                    float(best_v[j]),
                    sch.row(best_rows[j]),
                    best_rows[j],
                    _ids(queries, cov),
                    "brute-force",
                    query_indices=tuple(cov),
                )
            )
        return OverlapResult(best_v, True, best_v, best_v, None, None, (), "brute-force", tuple(parts))
    best = -1.0
    best_row: tuple[int, ...] = ()
    best_cov: list[int] = []
    for row in itertools.product(*(range(a.size) for a in sch)):
        cov = [i for i, q in enumerate(queries) if q.covers(row)]
        v = float(_compose(cov, w, comp))
        if v > best:
            best, best_row, best_cov = v, row, cov
    return OverlapResult(
        best,
        True,
        best,
        best,
        sch.row(best_row),
        best_row,
        _ids(queries, best_cov),
        "brute-force",
        query_indices=tuple(best_cov),
    )


def subset_overlap(queries: Sequence[PredicateQuery], weights: Any = None, comp: Comp = "count") -> float:
    """The definition: the best comp over subsets with a non-empty joint coverage (small ``t`` only)."""
    name = comp_name(comp)
    if name == "vector":
        raise DomainTooLargeError("subset enumeration covers the scalar comps only")
    queries = list(queries)
    w = _weights(queries, weights, name)
    if len(queries) > SUBSET_LIMIT:
        raise DomainTooLargeError(f"subset enumeration over {len(queries)} queries exceeds {SUBSET_LIMIT}")
    best = float(_compose([], w, comp)) if isinstance(comp, SetComp) else 0.0
    for r in range(1, len(queries) + 1):
        for subset in itertools.combinations(range(len(queries)), r):
            if joint_coverage(queries[i] for i in subset) is not None:
                best = max(best, float(_compose(subset, w, comp)))
    return best


def overlap_graph(queries: Sequence[PredicateQuery]) -> nx.Graph:
    """The pairwise-overlap graph $G_Q$: a vertex per query that covers a row, an edge per overlapping pair."""
    import networkx as nx

    g = nx.Graph()
    live = [i for i, q in enumerate(queries) if not q.is_contradiction]
    g.add_nodes_from(live)
    for a, b in itertools.combinations(live, 2):
        if not queries[a].disjoint(queries[b]):
            g.add_edge(a, b)
    return g


def graph_overlap(
    queries: Sequence[PredicateQuery], weights: Any = None, comp: Comp = "count"
) -> OverlapResult:
    """The paper's route: exact maximum (weight) clique of $G_Q$, greedy colouring as ``upper``.

    ``value`` is the clique's comp. It is ``exact`` when the clique's joint coverage is non-empty
    (always so for one interval per attribute, by Helly); otherwise it is only an upper bound of the
    true maximum, and ``lower`` is the comp of a greedily grown jointly-overlapping part of it.
    """
    name = comp_name(comp)
    if name not in ("count", "sum", "l2"):
        raise DomainTooLargeError("the graph route covers count, sum and l2")
    queries = list(queries)
    w = _weights(queries, weights, name)
    if not queries:
        return OverlapResult(0.0, True, 0.0, 0.0, None, None, (), "graph")
    g = overlap_graph(queries)
    if g.number_of_nodes() == 0:
        return OverlapResult(0.0, True, 0.0, 0.0, None, None, (), "graph")
    # Normalised loads (MATH.md 7.8): squares neither underflow nor overflow, sums stay finite.
    scaled, shift = normalised_loads(name, np.asarray(w, dtype=float))
    loads = scaled.tolist()
    import networkx as nx

    if name == "count":
        clique, _ = nx.max_weight_clique(g, weight=None)
    else:
        # Every maximal clique, then the best comp, compared exactly: float sums of the normalised
        # loads tie where the exact ones do not (1.0 + 5e-324 against 1.0), and the first tied clique
        # would under-report the maximum (MATH.md 7.8).
        clique = max(nx.find_cliques(g), key=lambda c: exact_total(name, [w[i] for i in c]))
    value = float(_compose(sorted(clique), w, comp))
    colours = nx.greedy_color(g, strategy="largest_first")
    top: dict[int, float] = {}
    for v, col in colours.items():
        top[col] = max(top.get(col, 0.0), loads[v])
    colour_sum = math.fsum(top.values())
    colour_bound = (
        colour_sum
        if name == "count"
        else unscale_up(name, math.nextafter(colour_sum, math.inf), shift, "the colouring bound")
    )
    # Grow a jointly-overlapping subset of the clique, heaviest first: an attained lower value.
    chosen: list[int] = []
    for i in sorted(clique, key=lambda i: -loads[i]):
        if joint_coverage([queries[j] for j in [*chosen, i]]) is not None:
            chosen.append(i)
    joint = joint_coverage([queries[j] for j in chosen])
    assert joint is not None
    row = tuple(cov.min() for cov in joint)
    covering = [i for i, q in enumerate(queries) if q.covers(row)]
    lower = float(_compose(covering, w, comp))
    exact = len(chosen) == len(clique)
    return OverlapResult(
        value=value,
        exact=exact,
        upper=max(value, lower),
        lower=lower,
        witness=queries[0].schema.row(row),
        witness_row=row,
        queries=_ids(queries, covering),
        algorithm=f"graph (colouring bound {colour_bound:g})",
        query_indices=tuple(covering),
    )
