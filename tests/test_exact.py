"""overlapdp.exact, the one module of exact arithmetic, against the definitions of its results.

Each rounding is checked against what it promises, computed independently on Fractions: the float is on
the safe side of the exact value and its neighbour towards the value is not (the nearest such float).
"""

from __future__ import annotations

import ast
import math
import sys
from fractions import Fraction
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from overlapdp.exact import exact_sum, float_down, float_up, fsum_up, sqrt_down, sqrt_up, sum_up

MAX = sys.float_info.max
finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_subnormal=True)
positive = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_subnormal=True)
fractions = st.builds(Fraction, st.integers(-(10**40), 10**40), st.integers(1, 10**40))


@given(fractions)
def test_float_up_and_down_are_the_nearest_floats_on_each_side(x: Fraction) -> None:
    up, down = float_up(x), float_down(x)
    assert Fraction(up) >= x and Fraction(math.nextafter(up, -math.inf)) < x
    assert Fraction(down) <= x and Fraction(math.nextafter(down, math.inf)) > x


def test_beyond_the_float_range() -> None:
    huge = Fraction(10**400)
    assert float_up(huge) == math.inf
    assert float_down(huge) == MAX
    assert float_down(-huge) == -math.inf
    assert float_up(-huge) == -MAX


@given(st.builds(Fraction, st.integers(0, 10**60), st.integers(1, 10**30)))
def test_square_roots_are_the_nearest_floats_on_each_side(x: Fraction) -> None:
    up, down = sqrt_up(x), sqrt_down(x)
    assert Fraction(up) ** 2 >= x
    assert up == 0 or Fraction(math.nextafter(up, 0.0)) ** 2 < x
    assert Fraction(down) ** 2 <= x
    assert Fraction(math.nextafter(down, math.inf)) ** 2 > x


@given(st.lists(finite, max_size=20))
def test_sums(values: list[float]) -> None:
    exact = sum((Fraction(v) for v in values), Fraction(0))
    assert exact_sum([Fraction(v) for v in values]) == exact
    assert sum_up(values) == float_up(exact)
    assert fsum_up(values) == float_up(exact)


def test_fsum_up_beyond_the_float_range() -> None:
    # fsum raises OverflowError here; the exact sum is then rounded (inf beyond the range)
    assert fsum_up([MAX, MAX]) == math.inf
    assert fsum_up([MAX, MAX, -MAX]) == MAX


def test_a_sum_rounded_to_nearest_would_be_below() -> None:
    # ten 0.1 sum (correctly rounded) to 1.0, below the exact sum of the ten floats
    assert math.fsum([0.1] * 10) == 1.0 < Fraction(0.1) * 10
    assert Fraction(sum_up([0.1] * 10)) >= Fraction(0.1) * 10


@given(st.lists(fractions, max_size=10))
def test_exact_sum_of_any_fractions(values: list[Fraction]) -> None:
    assert exact_sum(values) == sum(values, Fraction(0))


@given(positive)
def test_a_float_is_its_own_rounding(x: float) -> None:
    assert float_up(Fraction(x)) == x == float_down(Fraction(x))
    assert sqrt_up(Fraction(x) ** 2) == x == sqrt_down(Fraction(x) ** 2)


HELPERS = ("float_up", "float_down", "sqrt_up", "sqrt_down", "exact_sum", "sum_up", "fsum_up")
SRC = Path(__file__).resolve().parents[1] / "src" / "overlapdp"


def test_each_exact_helper_is_defined_once_in_exact_py() -> None:
    # float_up was written three times and float_down twice (issue 23): a new copy fails here
    where: dict[str, list[str]] = {name: [] for name in HELPERS}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.lstrip("_") in where:
                where[node.name.lstrip("_")].append(str(path.relative_to(SRC)))
    assert where == {name: ["exact.py"] for name in HELPERS}
