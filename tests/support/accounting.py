"""The accountant's brute-force truth: every row's covering charges composed directly, per definition.

Used by test_accountant.py and test_accountant_tightness.py.
"""

from __future__ import annotations

import math

import numpy as np

from overlapdp.privacy import Mechanism, compose_approx
from overlapdp.query import PredicateQuery

DELTA = 1e-5
ORDERS = (1.5, 2.0, 4.0, 16.0, 64.0)


def covering(row: tuple[int, ...], queries: list[PredicateQuery]) -> list[int]:
    return [i for i, q in enumerate(queries) if q.covers(row)]


def brute(rows_loads: list[list[int]], mechs: list[Mechanism]) -> dict[str, object]:
    """Per-definition maximum over rows of the composition of the covering charges, computed directly."""
    out: dict[str, object] = {}
    if all(m.pure() for m in mechs):
        out["pure"] = max(math.fsum(mechs[i].pure().epsilon for i in r) for r in rows_loads)  # type: ignore[union-attr]
    if all(m.zcdp() for m in mechs):
        out["zcdp"] = max(math.fsum(mechs[i].zcdp().rho for i in r) for r in rows_loads)  # type: ignore[union-attr]
    if all(m.gdp() for m in mechs):
        out["gdp"] = max(math.sqrt(math.fsum(mechs[i].gdp().mu ** 2 for i in r)) for r in rows_loads)  # type: ignore[union-attr]
    if all(m.tcdp() for m in mechs):  # (sum of rho, smallest omega) of the row's charges
        out["tcdp"] = (
            max(math.fsum(mechs[i].tcdp().rho for i in r) for r in rows_loads),  # type: ignore[union-attr]
            min((mechs[i].tcdp().omega for r in rows_loads for i in r), default=math.inf),  # type: ignore[union-attr]
        )
    if all(m.rdp(ORDERS) for m in mechs):
        curves = [
            np.sum([mechs[i].rdp(ORDERS).epsilons for i in r], axis=0) if r else np.zeros(len(ORDERS))
            for r in rows_loads
        ]  # type: ignore[union-attr]
        out["rdp"] = tuple(np.max(np.array(curves), axis=0))
    out["approx"] = max(
        compose_approx([mechs[i] for i in r]).epsilon_at(DELTA) if r else 0.0 for r in rows_loads
    )
    return out
