"""IndexSet algebra against Python sets."""

from hypothesis import given
from hypothesis import strategies as st

from overlapdp.schema import IndexSet

sets = st.sets(st.integers(0, 30), max_size=20)


@given(sets, sets)
def test_algebra_matches_python_sets(a: set[int], b: set[int]) -> None:
    x, y = IndexSet.from_indices(a), IndexSet.from_indices(b)
    assert set(x) == a and len(x) == len(a)
    assert set(x & y) == a & b
    assert set(x | y) == a | b
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert set(x.complement(31)) == set(range(31)) - a
    assert list(x.to_array()) == sorted(a)
    assert [i for i in range(31) if x.mask(31)[i]] == sorted(a)
    for i in range(-1, 32):
        assert (i in x) == (i in a)


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=6))
def test_from_intervals_normalises(pairs: list[tuple[int, int]]) -> None:
    x = IndexSet.from_intervals(pairs)
    expected = {i for lo, hi in pairs for i in range(lo, hi)}
    assert set(x) == expected
    # canonical: sorted, disjoint and non-adjacent
    for (_, h1), (l2, _) in zip(x.intervals, x.intervals[1:], strict=False):
        assert h1 < l2
