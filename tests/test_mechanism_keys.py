"""Mechanisms are grouped and their costs kept only by what decides their cost (MATH.md 5.3's optimal
composition groups identical mechanisms; the filters keep per-mechanism guarantees): a user's class
whose equality leaves out a field that changes the cost, or that reuses a library class's name, must
never be charged as its cheaper twin."""

from __future__ import annotations

import dataclasses

from overlapdp.privacy import ApproxDP, PrivacyFilter
from overlapdp.privacy import mechanisms as pm
from overlapdp.schema import IntAttribute, Schema

SCHEMA = Schema((IntAttribute("a", 0, 2), IntAttribute("b", 0, 1)))


@dataclasses.dataclass(frozen=True)
class _Repeated(pm.Laplace):
    """Laplace answered ``times`` times, a field the class's equality leaves out."""

    times: int = dataclasses.field(default=1, compare=False)

    @property
    def eps0(self) -> float:
        return pm.Laplace(self.scale, self.sensitivity).eps0 * self.times


@dataclasses.dataclass(frozen=True)
class Laplace(pm.Laplace):
    """A user's Laplace under the library's class name, on a query answered 4 times."""

    @property
    def eps0(self) -> float:
        return 4 * pm.Laplace(self.scale, self.sensitivity).eps0


def _optimal(budget: float) -> PrivacyFilter:
    return PrivacyFilter(SCHEMA, ApproxDP(budget, 1e-6), composition="optimal", adaptive=False)


def test_optimal_filter_charges_equal_but_dearer_mechanisms_their_own_cost() -> None:
    once, ten = _Repeated(1 / 101), _Repeated(1 / 101, times=10)
    assert once == ten and hash(once) == hash(ten)
    flt = _optimal(500.0)
    assert flt.try_charge(once).admitted
    assert not flt.try_charge(ten).admitted  # 101 + 1010 > 500 (it was admitted at 202)
    # and no other filter in the process inherits the cheaper one's cost
    assert not _optimal(500.0).try_charge(ten).admitted


def test_a_class_under_a_library_name_is_not_the_library_class() -> None:
    lib, mine = pm.Laplace(1.0), Laplace(1.0)
    assert lib.key != mine.key and repr(lib.key) != repr(mine.key)
    flt = _optimal(3.5)
    assert flt.try_charge(lib).admitted
    assert not flt.try_charge(mine).admitted  # 1 + 4 > 3.5 (it was admitted at 2)


def test_keys_group_the_library_mechanisms_and_never_a_users() -> None:
    assert pm.Laplace(2.0).key == pm.Laplace(2.0, sensitivity=1.0).key != pm.Laplace(2.0, 2.0).key
    assert pm.Gaussian(1.0).key == pm.Gaussian(1.0).key
    a, b = _Repeated(1.0), _Repeated(1.0)
    assert a.key == a.key and a.key != b.key  # stable for one object, never shared


def test_the_odometers_kept_guarantees_are_each_mechanisms_own() -> None:
    from overlapdp.privacy import odometer

    for m in (pm.Laplace(2.0), pm.Laplace(2.0), pm.Gaussian(1.5), _Repeated(1.0), _Repeated(1.0, times=7)):
        assert odometer._pure_of(m) == m.pure()
        assert odometer._zcdp_of(m) == m.zcdp()
    assert odometer._pure_of(_Repeated(1.0, times=7)).epsilon == 7.0  # type: ignore[union-attr]
