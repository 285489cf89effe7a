"""The privacy definitions as the accountant sees them: one :class:`Measure` each (MATH.md 1, 2, 5, 7),
one module each (:mod:`.pure`, :mod:`.zcdp`, :mod:`.gdp`, :mod:`.rdp`, :mod:`.tcdp`, :mod:`.approx`) over
the abstractions of :mod:`.base` (its docstring says what a measure knows), and the registry
:data:`MEASURES` the odometer and the filter loop over, neither naming a definition.
"""

from __future__ import annotations

from typing import Any

from overlapdp.errors import AdaptivityError as AdaptivityError
from overlapdp.privacy.definitions import BudgetError
from overlapdp.privacy.measures.approx import ApproxMeasure
from overlapdp.privacy.measures.base import NEAR as NEAR
from overlapdp.privacy.measures.base import (
    AccountingContext,
    AdditiveMeasure,
    DefinitionGuarantee,
    FilterOptions,
    FilterRule,
    Measure,
    TrackSpec,
    num,
)
from overlapdp.privacy.measures.gdp import GDPMeasure
from overlapdp.privacy.measures.pure import PureMeasure
from overlapdp.privacy.measures.rdp import RDPMeasure
from overlapdp.privacy.measures.tcdp import TCDPMeasure
from overlapdp.privacy.measures.zcdp import ZCDPMeasure
from overlapdp.privacy.neighbouring import DEFAULT_DELTA as DEFAULT_DELTA

# -- the registry -------------------------------------------------------------------------------------------
#: Every definition the accountant supports, in report order (the odometer's ``approx`` comes last: it
#: may use the others' values as bounds).
MEASURES: tuple[Measure[Any], ...] = (
    PureMeasure(),
    ZCDPMeasure(),
    GDPMeasure(),
    RDPMeasure(),
    TCDPMeasure(),
    ApproxMeasure(),
)


def count_measure(name: str, kind: type[Exception] = BudgetError) -> AdditiveMeasure[Any, Any]:
    """The measure of a definition one count's noise is calibrated to (:attr:`Measure.counts`: pure DP,
    zCDP, GDP), or ``kind`` listing them."""
    for m in MEASURES:
        if m.counts and m.name == name and isinstance(m, AdditiveMeasure):
            return m
    names = ", ".join(m.name for m in MEASURES if m.counts)
    raise kind(f"unknown definition {str(name)[:40]!r}; choose one of {names}")


def measure_named(name: str, kind: type[Exception] = BudgetError) -> Measure[Any]:
    """The measure of the definition called ``name`` (a report's key, a data set's definition), or
    ``kind`` listing the names."""
    for m in MEASURES:
        if m.name == name:
            return m
    names = ", ".join(m.name for m in MEASURES)
    raise kind(f"privacy definition {str(name)[:40]!r} is not supported; use one of {names}")


def measure_for(budget: object) -> Measure[Any]:
    """The measure whose budgets have ``budget``'s type (RDP on the budget's own order grid)."""
    for m in MEASURES:
        if isinstance(budget, m.budget_type):
            return m.for_budget(budget)
    raise BudgetError(f"unsupported budget type {type(budget).__name__}")


__all__ = [
    "DEFAULT_DELTA",
    "MEASURES",
    "NEAR",
    "AccountingContext",
    "AdaptivityError",
    "AdditiveMeasure",
    "ApproxMeasure",
    "DefinitionGuarantee",
    "FilterOptions",
    "FilterRule",
    "GDPMeasure",
    "Measure",
    "PureMeasure",
    "RDPMeasure",
    "TCDPMeasure",
    "TrackSpec",
    "ZCDPMeasure",
    "count_measure",
    "measure_for",
    "measure_named",
    "num",
]
