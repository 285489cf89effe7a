"""An exact tie at the budget is admitted on a large domain as on a small one (issue 26, finding 5).

The worst row carries 0.890625 and a whole-domain charge of 0.109375 brings it to exactly 1.0 (dyadic
loads: every float sum is exact, so is the overlap index's value). Before the fix the filter widened even
an exact index value by 1e-9, then at the tie enumerated every row pattern with Fractions, which on
Adult's 14 attributes it gave up on: refused, "over budget", ``proven=False``; on a 2-attribute schema
the same charges were admitted.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from overlapdp.privacy import GDP, Gaussian, Laplace, PureDP
from overlapdp.privacy.privacy_filter import PrivacyFilter
from overlapdp.query import PredicateQuery
from overlapdp.samples import adult_schema
from overlapdp.schema import IntAttribute, Schema
from overlapdp.schema.indexset import IndexSet


def _one_value_charges(schema: Schema) -> list[PredicateQuery]:
    """Up to three charges per attribute, each on one value: the worst row holds one per attribute."""
    out = []
    for a in schema.attributes:
        for v in range(min(a.size, 3)):
            out.append(PredicateQuery.from_coverages(schema, {a.name: IndexSet.from_indices([v])}))
    return out


SCHEMAS = [adult_schema(), Schema((IntAttribute("a", 0, 1), IntAttribute("b", 0, 1)))]


def _filter(schema: Schema, budget: PureDP | GDP, lazy: bool) -> PrivacyFilter:
    flt = PrivacyFilter(schema, budget)
    if not lazy:  # the overlap index alone decides (as once the lazy bounds are dropped)
        flt._bounds = None
        flt._members = None
    return flt


@pytest.mark.parametrize("schema", SCHEMAS, ids=["adult", "two"])
@pytest.mark.parametrize("lazy", [True, False])
def test_a_pure_tie_at_the_budget_is_admitted(schema: Schema, lazy: bool) -> None:
    flt = _filter(schema, PureDP(1.0), lazy)
    for i, q in enumerate(_one_value_charges(schema)):
        assert flt.try_charge(Laplace(1.0, 0.0625), q, id=f"c{i}").admitted
    rest = Fraction(0.890625) - Fraction(0.0625) * len(schema.attributes)  # dyadic: every sum exact
    assert flt.try_charge(Laplace(1.0, float(rest))).admitted
    assert flt.value() == 0.890625
    tie = flt.try_charge(Laplace(1.0, 0.109375))
    assert tie.admitted, (tie.reason, tie.proven)
    assert flt.value() == 1.0 and flt.spent() == 1.0
    over = flt.try_charge(Laplace(1.0, 2.0**-40))  # above the budget: refused, a row shown over it
    assert not over.admitted and over.proven


@pytest.mark.parametrize("schema", SCHEMAS, ids=["adult", "two"])
@pytest.mark.parametrize("lazy", [True, False])
def test_a_gdp_tie_at_the_budget_is_admitted(schema: Schema, lazy: bool) -> None:
    """Sums of mu^2 compared exactly: charges of mu = 1/4 (mu^2 = 1/16), fifteen on the worst row, then
    the sixteenth makes it exactly 1 = GDP(1)^2."""
    flt = _filter(schema, GDP(1.0), lazy)
    for i, q in enumerate(_one_value_charges(schema)):
        assert flt.try_charge(Gaussian(4.0), q, id=f"c{i}").admitted
    for j in range(15 - len(schema.attributes)):
        assert flt.try_charge(Gaussian(4.0), id=f"w{j}").admitted
    assert Fraction(flt.value()) ** 2 >= Fraction(15, 16)  # type: ignore[arg-type]
    tie = flt.try_charge(Gaussian(4.0), id="tie")
    assert tie.admitted, (tie.reason, tie.proven)
    assert flt.value() == 1.0
    assert not flt.try_charge(Gaussian(2.0**20), id="over").admitted
