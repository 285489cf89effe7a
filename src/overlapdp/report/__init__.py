"""Reports of a workload or a ledger: numbers, PNG plots and one HTML file (DESIGN.md step 7).

- :func:`build_report` (and :func:`workload_report`, :func:`ledger_report`) write ``report.html`` and
  the PNGs into a folder and return a :class:`ReportSummary`;
- :func:`heat_map`: the per-row load over two attributes (max over the others), exact (MATH.md 1.8, 2.4);
- :func:`read_ledger` / :func:`parse_ledger`: the ``overlapdp account`` ledger with optional
  ``analyst`` and ``time`` fields.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.report.build import ReportSummary, build_report, ledger_report, workload_report
    from overlapdp.report.ledger import BudgetCurve, LedgerEntry, budget_curve, parse_ledger, read_ledger
    from overlapdp.report.loads import HeatMap, ReportInputError, Spend, choose_axes, heat_map, workload_spend

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "ReportSummary": "build",
    "build_report": "build",
    "ledger_report": "build",
    "workload_report": "build",
    "BudgetCurve": "ledger",
    "LedgerEntry": "ledger",
    "budget_curve": "ledger",
    "parse_ledger": "ledger",
    "read_ledger": "ledger",
    "HeatMap": "loads",
    "ReportInputError": "loads",
    "Spend": "loads",
    "choose_axes": "loads",
    "heat_map": "loads",
    "workload_spend": "loads",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "BudgetCurve",
    "HeatMap",
    "LedgerEntry",
    "ReportInputError",
    "ReportSummary",
    "Spend",
    "budget_curve",
    "build_report",
    "choose_axes",
    "heat_map",
    "ledger_report",
    "parse_ledger",
    "read_ledger",
    "workload_report",
    "workload_spend",
]
