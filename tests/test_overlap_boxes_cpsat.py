"""The boxes route on Adult-sized workloads against an independent exact solver (issue 22 item 4).

CP-SAT (OR-Tools, the ``dev`` extra; skipped without it) maximises the one-hot model of
tests/support/cpsat.py, built straight from the queries' coverages. Workloads take the shapes of the
lead's generators (tests/support/generators.py ``constrained``, ``up-to-half`` too): boxes (a range of the shape's width on every
constrained attribute, categorical ones included) and value sets on Adult's categorical attributes.
Weights are small integers (CP-SAT's coefficients), so the route's answer must equal the optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from overlapdp.overlap import max_overlap
from support import cpsat
from support.generators import BOX_KINDS, constrained

FIVE = ["age", "education-num", "hours-per-week", "capital-gain", "fnlwgt"]
EIGHT = [*FIVE, "capital-loss", "workclass", "occupation"]
SETS = ["age", "hours-per-week", "capital-gain", "marital-status", "occupation"]


@pytest.mark.slow
@pytest.mark.skipif(not cpsat.available(), reason="OR-Tools (the dev extra) is not installed")
@pytest.mark.parametrize("kind", BOX_KINDS)
@pytest.mark.parametrize(("names", "sets"), [(FIVE, False), (EIGHT, False), (SETS, True)])
def test_boxes_route_matches_cpsat(kind: str, names: list[str], sets: bool) -> None:
    queries = constrained(kind, names, 200, 22 + len(names), sets=sets)
    weights = np.random.default_rng(7).integers(1, 4, len(queries)).tolist()
    r = max_overlap(queries, [float(w) for w in weights], "sum")
    # Small value-set workloads fit the grid; a workload that splits (MATH.md 7.10) says "parts(k: ...)"
    # with the route of each part, "free" when every query meets every other.
    routes = r.algorithm.split(": ")[1][:-1].split("+") if r.algorithm.startswith("parts(") else [r.algorithm]
    assert set(routes) <= {"boxes", "grid", "sweep", "sweep2d", "free"} and r.exact, r.algorithm
    truth = cpsat.maximise(queries, weights, seconds=120)
    assert truth.status == "OPTIMAL"
    assert r.value == truth.value
    assert r.witness_row is not None
    assert r.lower == sum(w for q, w in zip(queries, weights, strict=True) if q.covers(r.witness_row))
