"""The boxes route on Adult-sized workloads against an independent exact solver (issue 22 item 4).

CP-SAT (OR-Tools, the ``dev`` extra; skipped without it) maximises the one-hot model of
tests/support/cpsat.py, built straight from the queries' coverages. Workloads take the shapes of the
lead's generators (tests/support/generators.py): boxes (a range of the shape's width on every
constrained attribute, categorical ones included) and value sets on Adult's categorical attributes.
Weights are small integers (CP-SAT's coefficients), so the route's answer must equal the optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from overlapdp.overlap import max_overlap
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet
from support import cpsat
from support.generators import ADULT, CATEGORICAL, _coverage, adult_rows

FIVE = ["age", "education-num", "hours-per-week", "capital-gain", "fnlwgt"]
EIGHT = [*FIVE, "capital-loss", "workclass", "occupation"]
SETS = ["age", "hours-per-week", "capital-gain", "marital-status", "occupation"]


def shaped(kind: str, names: list[str], t: int, seed: int, sets: bool) -> list[PredicateQuery]:
    """Each query constrains each of ``names`` with probability 0.7, with the generator's widths: a
    range everywhere (``sets`` False; a name outside CATEGORICAL draws a range), or value sets on the
    categorical attributes."""
    rng = np.random.default_rng(seed)
    data = adult_rows() if kind == "adult" else None
    out = []
    for i in range(t):
        row = None if data is None else data[int(rng.integers(0, len(data)))]
        covs: dict[str, IndexSet] = {}
        for n in names:
            if rng.random() < 0.7:
                p = ADULT.position(n)
                anchor = None if row is None else int(row[p])
                as_name = n if sets and n in CATEGORICAL else "range"
                covs[n] = _coverage(kind, as_name, ADULT.attributes[p].size, rng, anchor)
        out.append(PredicateQuery.from_coverages(ADULT, covs, id=f"q{i}"))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not cpsat.available(), reason="OR-Tools (the dev extra) is not installed")
@pytest.mark.parametrize("kind", ["narrow", "wide", "half", "skewed", "uniform", "adult"])
@pytest.mark.parametrize(("names", "sets"), [(FIVE, False), (EIGHT, False), (SETS, True)])
def test_boxes_route_matches_cpsat(kind: str, names: list[str], sets: bool) -> None:
    queries = shaped(kind, names, 200, 22 + len(names), sets)
    weights = np.random.default_rng(7).integers(1, 4, len(queries)).tolist()
    r = max_overlap(queries, [float(w) for w in weights], "sum")
    assert r.algorithm in ("boxes", "grid") and r.exact  # small value-set workloads fit the grid
    truth = cpsat.maximise(queries, weights, seconds=120)
    assert truth.status == "OPTIMAL"
    assert r.value == truth.value
    assert r.witness_row is not None
    assert r.lower == sum(w for q, w in zip(queries, weights, strict=True) if q.covers(r.witness_row))
