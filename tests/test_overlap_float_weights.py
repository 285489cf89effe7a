"""Ordinary float weights on the fast paths (issue 22 item 5, MATH.md 7.8): the exact loads as integers
from numpy (no Python step per query), the 1-D raw sweep and the grid band resolved with them, and the
answer still the smallest float at or above the exact maximum. Truth: Fractions over every row."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from overlapdp.overlap import exactness, max_overlap_boxes
from overlapdp.overlap import magnitude as mag
from overlapdp.overlap.arrays import _sweep_1d
from overlapdp.overlap.magnitude import ExactLoads, Loads
from overlapdp.schema import IntAttribute, Schema


def smallest_float_at_least(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


def brute(sizes: list[int], lo: np.ndarray, hi: np.ndarray, w: list[float]) -> Fraction:
    """The exact maximum over every row (Fractions of the float weights)."""
    best = Fraction(0)
    for row in np.ndindex(*sizes):
        inside = np.all((lo <= np.array(row)) & (np.array(row) < hi), axis=1)
        best = max(best, sum((Fraction(w[i]) for i in np.flatnonzero(inside)), Fraction(0)))
    return best


def integer_units(weights: list[float], shift: int, square: bool) -> tuple[list[int], int]:
    """The definition, one weight at a time: f(w) / 2^shift = n / 2^k on Python integers."""
    pairs = []
    for w in weights:
        n, d = w.as_integer_ratio()
        k = d.bit_length() - 1 + shift
        if square:
            n, k = n * n, 2 * k
        pairs.append((n, k))
    top = max((k for n, k in pairs if n), default=0)
    return [n << (top - k) if n else 0 for n, k in pairs], top


weights_anywhere = st.one_of(
    st.just(0.0),
    st.floats(0.01, 1.0),
    st.floats(5e-324, 1e-300),
    st.floats(1e300, 1.7e308),
    st.integers(-1074, 1023).map(lambda e: 2.0**e),
    st.integers(1, 2**53).map(float),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(weights_anywhere, min_size=1, max_size=12), st.sampled_from(["sum", "l2"]), st.booleans())
@example([0.1, 1e300], "sum", False)
@example([5e-324, 1.7e308], "l2", False)
@example([5e-324, 1.7e308], "sum", True)
@example([3.0, 4.0, 0.0, 8.0], "sum", True)
def test_exact_loads_equal_the_integer_definition(weights: list[float], comp: str, python: bool) -> None:
    """nums and k (numpy limbs, or the Python fallback past the table limit), and exact totals of any
    subsets, against the definition on Python integers."""
    w = np.array(weights)
    shift = Loads.of(comp, w).shift  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        if python:
            mp.setattr(mag, "LIMB_TABLE_LIMIT", 0)
        ex = ExactLoads.of(w, shift, comp == "l2")
    nums, k = integer_units(weights, shift, comp == "l2")
    # Past the table limit, only the int64 fast path (three limbs) keeps numpy.
    assert ex.limbs is None or not python or not any(nums) or ex.limbs.shape[0] == 3
    assert ex.nums == nums and (ex.k == k or not any(nums))
    rng = np.random.default_rng(len(weights))
    cover = rng.random((5, len(weights))) < 0.5
    idx = np.arange(len(weights), dtype=np.int64)
    assert ex.totals(cover, idx) == [sum(n for n, c in zip(nums, row, strict=True) if c) for row in cover]
    assert ex.total(idx[cover[0]]) == sum(n for n, c in zip(nums, cover[0], strict=True) if c)


def test_heaviest_settles_sets_tied_after_rounding() -> None:
    """{1, 2^-60} and {1} both round to 1.0: the exact comparison picks the heavier; 0.1 + 0.2 is
    heavier than 0.3 exactly (the float sums say so too)."""
    lw = Loads.of("sum", np.array([1.0, 2.0**-60, 1.0, 0.1, 0.2, 0.3]))
    assert exactness.heaviest(lw, [np.array([2]), np.array([0, 1])]) == 1
    assert exactness.heaviest(lw, [np.array([5]), np.array([3, 4])]) == 1
    assert exactness.heaviest(lw, [np.array([0]), np.array([2])]) == 0  # equal: the first
    l2 = Loads.of("l2", np.array([1.0, 2.0**-40, 1.0]))
    assert exactness.heaviest(l2, [np.array([2]), np.array([0, 1])]) == 1


@settings(max_examples=150, deadline=None)
@given(
    comp=st.sampled_from(["sum", "l2"]),
    weights=st.lists(
        st.sampled_from([1.0, 0.25, 2.0**-60, 0.1, 0.2, 0.3, 1e-300, 3.0, 2.0**40]), min_size=1, max_size=12
    ),
    seed=st.integers(0, 2**31),
    rows=st.integers(1, 40),
)
def test_heaviest_rows_is_heaviest_of_the_rows(comp: str, weights: list[float], seed: int, rows: int) -> None:
    """The vectorised band comparison picks the same set as :func:`exactness.heaviest` (the first of
    exact equals), and its total is the largest by Fractions: the few distinct weights make many rows tie
    exactly and many more tie after rounding."""
    lw = Loads.of(comp, np.array(weights))  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    cover = rng.random((rows, len(weights))) < 0.5
    cover[rng.integers(0, rows, rows // 2)] = cover[0]  # repeated rows, as a grid's band has
    live = np.arange(len(weights), dtype=np.int64)
    got = exactness.heaviest_rows(lw, cover, live)
    assert got == exactness.heaviest(lw, [live[row] for row in cover])

    def exact(row: np.ndarray) -> Fraction:
        return sum(
            (Fraction(w) ** (2 if comp == "l2" else 1) for w, c in zip(weights, row, strict=True) if c),
            Fraction(0),
        )

    totals = [exact(r) for r in cover]
    assert totals[got] == max(totals) and got == totals.index(max(totals))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)), min_size=1, max_size=12),
        )
    ),
    st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.7, 1e16, 1.0, 2.0**-60, 1 / 3]), min_size=12, max_size=12),
)
def test_one_attribute_float_weights_stay_on_the_raw_sweep(case: Any, weights: list[float]) -> None:
    """Regression (issue 22 item 5): non-dyadic weights left the raw-value sweep for the engine's grid
    (and a Python step per query). Now the sweep itself resolves its tie band exactly."""
    n, ivs = case
    lo = np.array([min(a, b - 1) for a, b in ivs], dtype=np.int64)
    hi = np.array([max(a + 1, b) for a, b in ivs], dtype=np.int64)
    w = weights[: len(ivs)]
    schema = Schema((IntAttribute("x", 0, n - 1),))
    res = _sweep_1d(schema, lo, hi, Loads.of("sum", np.array(w)))
    assert res is not None and res.exact
    assert res.value == smallest_float_at_least(brute([n], lo[:, None], hi[:, None], w))


@contextmanager
def counting(name: str) -> Iterator[Callable[[], int]]:
    """Counts calls of the C method ``name`` (e.g. float.as_integer_ratio) while the block runs."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "c_call" and getattr(arg, "__name__", "") == name:
            calls += 1

    sys.setprofile(profile)
    try:
        yield lambda: calls
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("d", [1, 2])
def test_float_weights_take_no_python_step_per_query(d: int) -> None:
    """Regression (issue 22 item 5): the exact loads were built one ``as_integer_ratio`` per query (77%
    of a 1-D workload's time); now once per workload with numpy. Counted, not timed."""
    rng = np.random.default_rng(22)
    t, n = 5_000, 2_000
    a, b = rng.integers(0, n, (t, d)), rng.integers(0, n, (t, d))
    lo, hi = np.minimum(a, b), np.maximum(a, b) + 1
    w = rng.uniform(0.01, 1.0, t)
    with counting("as_integer_ratio") as calls:
        r = max_overlap_boxes([n + 1] * d, lo, hi, w, "sum")
    assert r.exact
    assert calls() < 100
