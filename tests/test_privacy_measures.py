"""The measures registry (privacy/measures/): one Measure per definition, each filter exact at its
budget against Fraction arithmetic of the declared costs, and an odometer and filter that name no
definition themselves (MATH.md 2.7; MATH.md 7.8)."""

from __future__ import annotations

import ast
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import overlapdp.privacy
from overlapdp.privacy import (
    GDP,
    MEASURES,
    RDP,
    TCDP,
    ZCDP,
    ApproxDP,
    BudgetError,
    Gaussian,
    Laplace,
    Mechanism,
    PrivacyFilter,
    PureDP,
)
from overlapdp.privacy.measures import RDPMeasure, measure_for
from overlapdp.schema import IntAttribute, Schema

SCHEMA = Schema((IntAttribute("a", 0, 3),))
ORDERS = (1.5, 2.0, 8.0)
# Parameters whose floats do not add exactly (0.1, 0.3, 1/3 ...): sums land on both sides of the budget.
SCALES = [10.0, 10 / 3, 3.0, 5.0, 1 / 0.3, 7.0, 1.1]
DEFINITIONS = tuple(m.name for m in MEASURES)


def test_one_measure_per_definition_in_report_order() -> None:
    assert [m.name for m in MEASURES] == list(DEFINITIONS) == ["pure", "zcdp", "gdp", "rdp", "tcdp", "approx"]
    budgets = [
        PureDP(1.0),
        ZCDP(1.0),
        GDP(1.0),
        RDP(ORDERS, (1.0, 1.0, 1.0)),
        TCDP(1.0, 2.0),
        ApproxDP(1.0, 1e-6),
    ]
    for budget, name in zip(budgets, DEFINITIONS, strict=True):
        assert [m.name for m in MEASURES if isinstance(budget, m.budget_type)] == [name]
        assert measure_for(budget).name == name
    rdp = measure_for(budgets[3])
    assert isinstance(rdp, RDPMeasure) and rdp.orders == ORDERS  # the budget's own grid
    with pytest.raises(BudgetError, match="unsupported budget type"):
        measure_for(object())


def _truth_and_budget(
    name: str, mechs: list[Mechanism], factor: int
) -> tuple[PureDP | ZCDP | GDP | RDP | TCDP | ApproxDP, bool]:
    """A budget at the float nearest the exact total of the declared costs (so it falls on either side
    of it), and whether that total fits it in exact arithmetic."""
    if name in ("pure", "approx"):
        total = factor * sum(Fraction(m.pure().epsilon) for m in mechs)  # type: ignore[union-attr]
        b = float(total)
        budget: PureDP | ZCDP | GDP | RDP | ApproxDP = PureDP(b) if name == "pure" else ApproxDP(b, 1e-6)
        return budget, total <= Fraction(b)
    if name == "zcdp":
        total = factor * sum(Fraction(m.zcdp().rho) for m in mechs)  # type: ignore[union-attr]
        return ZCDP(float(total)), total <= Fraction(float(total))
    if name == "tcdp":  # Gaussian charges are (rho, inf)-tCDP: omega never decides here
        total = factor * sum(Fraction(m.zcdp().rho) for m in mechs)  # type: ignore[union-attr]
        return TCDP(float(total), 3.0), total <= Fraction(float(total))
    if name == "gdp":
        squares = factor * sum(Fraction(m.gdp().mu) ** 2 for m in mechs)  # type: ignore[union-attr]
        b = math.sqrt(float(squares))
        return GDP(b), squares <= Fraction(b) ** 2
    curves = [m.rdp(ORDERS).epsilons for m in mechs]  # type: ignore[union-attr]
    totals = [factor * sum(Fraction(c[k]) for c in curves) for k in range(len(ORDERS))]
    return RDP(ORDERS, tuple(float(t) for t in totals)), all(t <= Fraction(float(t)) for t in totals)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(DEFINITIONS),
    scales=st.lists(st.sampled_from(SCALES), min_size=1, max_size=12),
    neighbouring=st.sampled_from(["add_remove", "replace"]),
)
def test_each_filter_is_exact_at_its_budget(name: str, scales: list[float], neighbouring: str) -> None:
    # Every charge covers the whole domain, so one row pays them all: each is admitted up to the last,
    # which is admitted iff the exact total (doubled for replace-one-row; on mu^2 for GDP) fits.
    # (epsilon, delta): with at most 12 charges advanced composition is above the sum, so the basic
    # rule decides.
    mechs: list[Mechanism] = [Gaussian(s) if name in ("zcdp", "gdp", "tcdp") else Laplace(s) for s in scales]
    budget, fits = _truth_and_budget(name, mechs, 2 if neighbouring == "replace" else 1)
    flt = PrivacyFilter(SCHEMA, budget, neighbouring=neighbouring)
    admitted = [flt.try_charge(m).admitted for m in mechs]
    assert admitted[:-1] == [True] * (len(mechs) - 1)
    assert admitted[-1] == fits


def test_fits_is_exact_at_the_budget() -> None:
    # ten charges of 0.1 exceed 1.0 exactly (Fraction(0.1) > 1/10) though their float sum is 1.0
    tenth = Fraction(0.1)
    assert math.fsum([0.1] * 10) == 1.0 and 10 * tenth > 1
    pure, zcdp, gdp, rdp, tcdp, approx = MEASURES
    assert not pure.fits([10 * tenth], PureDP(1.0)) and pure.fits([9 * tenth], PureDP(1.0))
    assert not zcdp.fits([10 * tenth], ZCDP(1.0))
    assert not tcdp.fits([10 * tenth], TCDP(1.0, 2.0)) and tcdp.fits([9 * tenth], TCDP(1.0, 2.0))
    assert gdp.fits([Fraction(1)], GDP(1.0)) and not gdp.fits([1 + Fraction(1, 2**80)], GDP(1.0))
    assert not rdp.fits([(Fraction(0), 10 * tenth)], RDP((2.0, 4.0), (5.0, 1.0)))
    assert approx.fits([Fraction(0), Fraction(0), Fraction(1)], ApproxDP(1.0, 1e-6))
    # basic: 10 x 0.1 > 1 exactly; advanced: sqrt(2 ln(2e6) 0.1) + 0.05 = 1.75 > 1
    assert not approx.fits([10 * tenth**2, Fraction(0), 10 * tenth], ApproxDP(1.0, 1e-6))
    assert not approx.fits([Fraction(0), Fraction(1, 10**6), Fraction(0)], ApproxDP(1.0, 1e-6))  # delta


_NAMES = set(DEFINITIONS)
_GUARANTEES = {"PureDP", "ZCDP", "GDP", "RDP", "TCDP", "ApproxDP"}


@pytest.mark.parametrize("module", ["odometer.py", "privacy_filter.py"])
def test_the_odometer_and_the_filter_name_no_definition(module: str) -> None:
    """No string dispatch on a definition's name and no isinstance test of a guarantee type (beyond an
    ``assert`` that narrows a type): both loop over MEASURES."""
    tree = ast.parse((Path(overlapdp.privacy.__file__).parent / module).read_text(encoding="utf-8"))
    asserted = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert) for n in ast.walk(a)}
    strings = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in _NAMES
    ]
    tests = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "isinstance"
        and id(n) not in asserted
        and _GUARANTEES & {x.id for x in ast.walk(n.args[1]) if isinstance(x, ast.Name)}
    ]
    assert strings == [] and tests == []


# Comparisons with a definition's name string that are not about a privacy definition, with the reason.
_NOT_DEFINITIONS = {
    ("privacy/ledger_lines.py", "key in ('approx', 'opaque')"): "a ledger line's mechanism kind",
    ("report/build.py", "basis == 'pure'"): "a report's basis option ('delta' or 'pure')",
}


def _name_comparisons(root: Path) -> list[tuple[str, str]]:
    """Every comparison (``==``, ``!=``, ``in``, a ``match`` case) of a string that is a definition's name
    (a constant, or a tuple / list / set of them) in the package outside ``privacy/measures/``."""

    def names_in(node: ast.AST) -> bool:
        items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return any(isinstance(i, ast.Constant) and i.value in _NAMES for i in items)

    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("privacy/measures/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                compared = any(names_in(x) for x in (node.left, *node.comparators))
            else:
                compared = isinstance(node, ast.MatchValue) and names_in(node.value)
            if compared:
                found.append((rel, ast.unparse(node)))
    return found


def test_no_definition_is_named_outside_the_measures() -> None:
    """Issue 23: the service, the planner, the utility gain and the displays dispatched on a definition's
    name 49 times in 6 modules; each operation is now a method or attribute of its Measure, so a new
    definition is one module in privacy/measures/."""
    root = Path(overlapdp.privacy.__file__).parent.parent
    found = [f for f in _name_comparisons(root) if f not in _NOT_DEFINITIONS]
    assert found == []
