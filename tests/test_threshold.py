"""The exact threshold decision (overlap/threshold.py, MATH.md 7.9) against brute force.

Every row of a small domain is enumerated and its load summed with Fractions; the search must say
"every row of the box fits" exactly when that is so, and otherwise show a row of the box that does not
fit. Thresholds sit on exact ties and one unit either side; loads are equal, dyadic, arbitrary floats,
and spread from 1e-300 to 1e300; the common unit is given or not."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overlapdp.errors import SearchGaveUp
from overlapdp.overlap import threshold, wcsp
from overlapdp.overlap.threshold import Problem, common_unit, exceeds, maximum
from support.marks import slow_after


def random_instance(rng: np.random.Generator, kind: str) -> tuple[Problem, list[tuple[int, ...]]]:
    sizes = rng.integers(2, 6, size=int(rng.integers(1, 5))).tolist()
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(rng.integers(0, 40))
    cover = np.ones((n, int(offsets[-1])), dtype=bool)
    for i in range(n):
        for p, size in enumerate(sizes):
            if rng.random() < 0.5:
                m = int(rng.integers(1, size + 1))
                seg = np.zeros(size, dtype=bool)
                seg[rng.choice(size, size=m, replace=False)] = True
                cover[i, offsets[p] : offsets[p + 1]] = seg
    if kind == "equal":
        loads = np.ones(n)
    elif kind == "dyadic":
        loads = rng.integers(1, 8, size=n) / 4.0
    elif kind == "floats":
        loads = rng.uniform(0.01, 1.0, size=n)
    elif kind == "zeros":
        loads = np.where(rng.random(n) < 0.3, 0.0, 1.0)
    else:  # magnitudes
        loads = 10.0 ** rng.uniform(-300, 300, size=n)
    box = np.zeros(int(offsets[-1]), dtype=bool)
    for p, size in enumerate(sizes):
        m = int(rng.integers(1, size + 1))
        box[offsets[p] + rng.choice(size, size=m, replace=False)] = True
    exact = [Fraction(float(x)) for x in loads]
    rows = list(itertools.product(*(range(s) for s in sizes)))
    return Problem(cover, loads, exact, offsets, box), rows


def row_load(pb: Problem, row: tuple[int, ...]) -> Fraction:
    cols = [int(pb.offsets[p]) + v for p, v in enumerate(row)]
    held = pb.cover[:, cols].all(axis=1) if pb.cover.shape[0] else np.zeros(0, dtype=bool)
    return sum((pb.exact[i] for i in np.flatnonzero(held).tolist()), Fraction(0))


def in_box(pb: Problem, row: tuple[int, ...]) -> bool:
    return all(pb.box[int(pb.offsets[p]) + v] for p, v in enumerate(row))


def probe_thresholds(pb: Problem, rows: list[tuple[int, ...]]) -> tuple[Fraction, ...]:
    """Thresholds to decide at, by brute force over the box's rows: the worst row's load exactly (a
    tie: everything fits), a third of the smallest load below it, and the lightest row's load."""
    loads = sorted({row_load(pb, r) for r in rows if in_box(pb, r)})
    smallest = min((x for x in pb.exact if x > 0), default=Fraction(1))
    return loads[-1], loads[-1] - smallest / 3, loads[0]


@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "zeros", "magnitudes"])
@pytest.mark.parametrize("with_unit", [False, True])
@pytest.mark.parametrize("seed", slow_after(range(40)))
def test_decision_matches_brute_force(kind: str, with_unit: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pb, rows = random_instance(rng, kind)
    if with_unit:
        pb.unit = common_unit(list(pb.exact))
    loads = sorted({row_load(pb, r) for r in rows if in_box(pb, r)})
    top = loads[-1]
    # thresholds: the worst row's load exactly (a tie: everything fits), just below it, between two
    # loads, and below everything
    smallest = min((x for x in pb.exact if x > 0), default=Fraction(1))
    for theta in {top, top - smallest / 3, top - Fraction(1, 10**30), loads[0], Fraction(-1)}:

        def fits(load: Fraction, theta: Fraction = theta) -> bool:
            return load <= theta

        found = exceeds(pb, fits, max_nodes=100_000)
        truth = [r for r in rows if in_box(pb, r) and not fits(row_load(pb, r))]
        if not truth:
            assert found is None, (theta, top)
        else:
            assert found is not None, (theta, top)
            assert in_box(pb, found) and not fits(row_load(pb, found))


@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "zeros", "magnitudes"])
@pytest.mark.parametrize("seed", slow_after(range(30)))
def test_the_heaviest_row_reported_is_a_row_of_the_box_that_fits(kind: str, seed: int) -> None:
    """``Problem.heaviest`` after a decision: a row of the box whose load, summed again by brute force,
    is the one reported, and fits; when the search weighed a row, and every row fits at the worst
    row's load, it is reported (the filter keeps it as the likeliest row to be full next)."""
    rng = np.random.default_rng(4400 + seed)
    pb, rows = random_instance(rng, kind)
    for theta in probe_thresholds(pb, rows):

        def fits(load: Fraction, theta: Fraction = theta) -> bool:
            return load <= theta

        pb.heaviest = None
        exceeds(pb, fits, max_nodes=100_000)
        if pb.heaviest is not None:
            row, load = pb.heaviest
            assert in_box(pb, row) and row_load(pb, row) == load and fits(load)


@pytest.mark.parametrize("kind", ["equal", "floats", "magnitudes"])
@pytest.mark.parametrize("seed", slow_after(range(30)))
def test_the_climb_ends_at_a_row_no_single_move_makes_heavier(kind: str, seed: int) -> None:
    """The root's coordinate ascent (``_Search._climb``) from any row of the box: the row it returns is
    in the box, its load is the brute-force sum, at least the start's, and (run to its end) no change of
    one attribute's value within the box makes it heavier by more than the floats' guidance can miss."""
    rng = np.random.default_rng(4500 + seed)
    pb, _ = random_instance(rng, kind)
    search = threshold._Search(pb, lambda load: True)
    if search.n == 0 or search.k == 0:
        return
    atoms = search.atoms
    masks = [np.ones(t.shape[1], dtype=bool) for t in atoms.tables]
    alive = np.ones(search.n, dtype=bool)
    start = [int(rng.integers(t.shape[1])) for t in atoms.tables]
    start_load = row_load(pb, atoms.row(start, search.nattrs))
    choice, load = search._climb(start, alive, masks, rounds=1_000)
    assert load >= start_load * (1 - Fraction(1, 10**6))
    row = atoms.row(choice, search.nattrs)
    assert in_box(pb, row) and row_load(pb, row) == load
    # at its end no move gains: a known load comes back as it is (not summed again)
    assert search._climb(choice, alive, masks, load, rounds=1_000) == (choice, load)
    for j in range(search.k):
        for v in range(atoms.tables[j].shape[1]):
            other = list(choice)
            other[j] = v
            assert row_load(pb, atoms.row(other, search.nattrs)) <= load * (1 + Fraction(1, 10**6))


@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "magnitudes"])
@pytest.mark.parametrize("seed", slow_after(range(25)))
def test_kept_multipliers_of_any_value_never_change_a_decision(kind: str, seed: int) -> None:
    """Multipliers kept from earlier decisions (``Problem.warm``) are tried at the root before the LP:
    any non-negative ones bound every row (MATH.md 7.9), so whatever is kept (here random values from 0
    to 100x the loads, with zeros, negatives, nan and inf mixed in) the decision is still brute force's,
    at exact ties and a unit either side; after a root LP the searched charges' kept values on the box's
    attributes are its multipliers (finite, non-negative)."""
    rng = np.random.default_rng(4200 + seed)
    pb, rows = random_instance(rng, kind)
    n, k = pb.cover.shape[0], len(pb.offsets) - 1
    warm = rng.uniform(0, 100, size=(n, k)) * (pb.loads[:, None] if n else 1.0)
    warm[rng.random((n, k)) < 0.4] = 0.0
    odd = rng.random((n, k))
    warm[odd < 0.05] = -1.0
    warm[(odd >= 0.05) & (odd < 0.08)] = np.nan
    warm[(odd >= 0.08) & (odd < 0.1)] = np.inf
    pb.warm = warm
    for theta in probe_thresholds(pb, rows):

        def fits(load: Fraction, theta: Fraction = theta) -> bool:
            return load <= theta

        stats_before = dict(pb.stats)
        found = exceeds(pb, fits, max_nodes=100_000)
        truth = [r for r in rows if in_box(pb, r) and not fits(row_load(pb, r))]
        if not truth:
            assert found is None, theta
        else:
            assert found is not None and in_box(pb, found) and not fits(row_load(pb, found))
        if pb.stats.get("lp", 0) > stats_before.get("lp", 0):
            # the searched charges (live, meeting the box on every attribute) now hold the LP's on the
            # attributes where one of them misses part of the box
            seg = np.logical_or.reduceat(pb.cover & pb.box, pb.offsets[:-1], axis=1)
            mine = seg.all(axis=1) & (pb.loads > 0)
            whole = np.logical_and.reduceat(pb.cover | ~pb.box, pb.offsets[:-1], axis=1)
            box_attrs = (~whole[mine]).any(axis=0)
            kept = pb.warm[mine][:, box_attrs]
            assert np.isfinite(kept).all() and (kept >= 0).all()


@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "zeros", "magnitudes"])
def test_the_kept_multipliers_tried_before_the_set_up_never_clear_a_row_over(kind: str) -> None:
    """Before building its search the decision tries the kept multipliers' Lagrangian bound on the
    charges' coverages as they are (``_cleared_at_once``). Wherever it clears a box, brute force must
    find every row of it fitting: at the worst row's load, just below it (a third of the smallest load,
    and 1e-30) and above it; kept multipliers random (0 to 100x the loads, with zeros, negatives, nan
    and inf mixed in), none, or a root LP's; hints right, absent, or wrong (any hint is safe: it only ends
    the test sooner). It must clear some boxes (the bound is taken) and leave others to the search."""
    rng = np.random.default_rng(4400)
    cleared = left = 0
    for _ in range(60):
        pb, rows = random_instance(rng, kind)
        n, k = pb.cover.shape[0], len(pb.offsets) - 1
        if rng.random() < 0.5:
            pb.unit = common_unit(list(pb.exact))
        warm = rng.uniform(0, 100, size=(n, k)) * (pb.loads[:, None] if n else 1.0)
        odd = rng.random((n, k))
        warm[odd < 0.4] = 0.0
        warm[(odd >= 0.4) & (odd < 0.45)] = -1.0
        warm[(odd >= 0.45) & (odd < 0.48)] = np.nan
        warm[(odd >= 0.48) & (odd < 0.5)] = np.inf
        pb.warm = warm if rng.random() < 0.5 else np.zeros((n, k))
        top = probe_thresholds(pb, rows)[0]
        smallest = min((x for x in pb.exact if x > 0), default=Fraction(1))
        total = sum(pb.exact, Fraction(0))
        for theta in (top, top - smallest / 3, top - Fraction(1, 10**30), top + smallest, total * 2):
            if rng.random() < 0.5:  # a root LP's multipliers (kept by a search at the worst row's load)
                exceeds(pb, lambda x, t=top: x <= t, max_nodes=100_000)
            pb.hint = [float(theta), None, float(theta) * 0.5, -1.0][int(rng.integers(0, 4))]
            if threshold._cleared_at_once(pb, lambda x, t=theta: x <= t):
                assert all(row_load(pb, r) <= theta for r in rows if in_box(pb, r)), theta
                cleared += 1
            else:
                left += 1
    assert cleared > 0 and left > 0


@pytest.mark.parametrize("seed", range(12))
def test_a_decision_proven_by_its_root_lp_is_proven_again_without_one(seed: int) -> None:
    """The root LP's multipliers are kept: asked again, a decision its root LP proved (every row fits,
    one node) is proven by them, with no LP. 120 charges on 2-3 of 5 attributes of 6 values (the
    worst row by brute force over the 7 776 rows); the threshold is raised from the worst row's load
    until the root LP alone proves it."""
    rng = np.random.default_rng(4300 + seed)
    sizes = [6] * 5
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = 120
    cover = np.ones((n, 30), dtype=bool)
    for i in range(n):
        for p in rng.choice(5, size=int(rng.integers(2, 4)), replace=False).tolist():
            cover[i, offsets[p] + rng.choice(6, size=int(rng.integers(1, 4)), replace=False)] = False
            cover[i, offsets[p] : offsets[p + 1]] = ~cover[i, offsets[p] : offsets[p + 1]]
    loads = rng.uniform(0.5, 1.5, n)
    exact = [Fraction(float(x)) for x in loads]
    grid = np.array(list(itertools.product(range(6), repeat=5)))
    held = np.ones((len(grid), n), dtype=bool)
    for p in range(5):
        held &= cover[:, offsets[p] + grid[:, p]].T
    top = max(sum((exact[i] for i in np.flatnonzero(h)), Fraction(0)) for h in held)
    box = np.ones(30, dtype=bool)
    for f in (Fraction(1, 5), Fraction(7, 20), Fraction(1, 2), Fraction(3, 4), Fraction(1)):
        theta = top * (1 + f)
        pb = Problem(cover, loads, exact, offsets, box, warm=np.zeros((n, 5)))
        assert exceeds(pb, lambda x, t=theta: x <= t, max_nodes=100_000) is None
        if pb.stats.get("lp") == 1 and pb.stats.get("nodes") == 1:
            break
    else:
        pytest.fail("no threshold proven by the root LP alone")
    kept = pb.warm
    assert kept is not None and kept.any() and (kept >= 0).all()
    assert exceeds(pb, lambda x: x <= theta, max_nodes=100_000) is None
    # (proven before the search is even built: no node more)
    assert pb.stats["lp"] == 1 and pb.stats["warm"] == 1 and pb.stats["nodes"] == 1
    # without the kept multipliers the same decision solves its LP again
    pb.warm = None
    assert exceeds(pb, lambda x: x <= theta, max_nodes=100_000) is None
    assert pb.stats["lp"] == 2


def test_the_lp_decides_what_the_tables_cannot() -> None:
    """A box where every value's table is above the threshold yet no row is (pairs of attributes that
    disagree): the LP bound and the unit prove it at the root, with no branching."""
    # two attributes of 2 values; 4 charges, one per row, load 1: every value's table holds 2, every
    # row 1; with the unit, the LP's 2 ... proves nothing, but the threshold 1 is reached exactly:
    # rows each pay 1; a threshold of 1 fits everywhere.
    offsets = np.array([0, 2, 4])
    cover = np.array(
        [[1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1]],
        dtype=bool,
    )
    pb = Problem(cover, np.ones(4), [Fraction(1)] * 4, offsets, np.ones(4, dtype=bool), unit=Fraction(1))
    assert exceeds(pb, lambda x: x <= 1, max_nodes=10_000) is None
    row = exceeds(pb, lambda x: x <= Fraction(1, 2), max_nodes=10_000)
    assert row is not None and row_load(pb, row) == 1


@pytest.mark.parametrize(
    ("theta", "unit", "top"),
    [(24, 1, 25), (Fraction(49, 2), 1, 25), (Fraction(95, 4), Fraction(1, 4), 24), (24, None, 24)],
)
def test_the_lp_may_stop_below_the_next_multiple_of_the_unit(
    theta: Fraction, unit: Fraction | None, top: int
) -> None:
    """With loads that are multiples of a unit, a bound below the next multiple above the threshold
    proves it (rounded down, MATH.md 7.9), so the dual simplex may stop there (just below it); without
    a unit, just below the threshold. Each stop's level is checked against the rule it must respect:
    a bound at it, rounded down to the unit, fits."""
    n = 30
    pb = Problem(
        np.ones((n, 2), dtype=bool),
        np.ones(n),
        [Fraction(1)] * n,
        np.array([0, 2]),
        np.ones(2, dtype=bool),
        unit=None if unit is None else Fraction(unit),
    )
    search = threshold._Search(pb, lambda load: load <= theta)
    level = search._enough()
    assert level is not None
    got = Fraction(level) * search.scale
    assert top * (1 - Fraction(1, 10**6)) < got < top
    if unit is not None:
        assert (got // unit) * unit <= theta
    else:
        assert got <= theta


def test_the_node_limit_gives_up_instead_of_guessing() -> None:
    rng = np.random.default_rng(7)
    sizes = [6] * 6
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = 200
    cover = np.ones((n, int(offsets[-1])), dtype=bool)
    for i in range(n):
        for p in rng.choice(6, size=3, replace=False).tolist():
            seg = np.zeros(6, dtype=bool)
            seg[rng.choice(6, size=3, replace=False)] = True
            cover[i, offsets[p] : offsets[p + 1]] = seg
    pb = Problem(cover, np.ones(n), [Fraction(1)] * n, offsets, np.ones(int(offsets[-1]), dtype=bool))
    # at the worst row's load (43, by brute force over the 46 656 rows) every row fits, and one node
    # proves neither that nor a row over it (below it, the root's climb finds a row that does not fit)
    with pytest.raises(SearchGaveUp):
        exceeds(pb, lambda x: x <= 43, max_nodes=1)
    assert exceeds(pb, lambda x: x <= 43, max_nodes=100_000) is None
    row = exceeds(pb, lambda x: x <= 42, max_nodes=100_000)
    assert row is not None
    assert int(np.all([cover[:, offsets[p] + v] for p, v in enumerate(row)], axis=0).sum()) == 43


def test_without_highspy_the_search_is_still_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threshold, "_highs_available", lambda: False)
    for seed in range(20):
        rng = np.random.default_rng(1000 + seed)
        pb, rows = random_instance(rng, "equal")
        top = max(row_load(pb, r) for r in rows if in_box(pb, r))
        assert exceeds(pb, lambda x, t=top: x <= t, max_nodes=100_000) is None
        if top > 0:
            found = exceeds(pb, lambda x, t=top: x < t, max_nodes=100_000)
            assert found is not None and row_load(pb, found) == top


@pytest.mark.slow  # 1.0 s of CPU
@settings(max_examples=200, deadline=None)
@given(st.lists(st.fractions(min_value=0, max_value=1000, max_denominator=64), min_size=1, max_size=8))
def test_common_unit_divides_every_value(values: list[Fraction]) -> None:
    u = common_unit(values)
    positive = [v for v in values if v > 0]
    if not positive:
        assert u is None
        return
    assert u is not None and u > 0
    assert all((v / u).denominator == 1 for v in positive)
    # and it is the largest: the quotients share no common factor
    import math

    g = 0
    for v in positive:
        g = math.gcd(g, int(v / u))
    assert g == 1


@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "zeros", "magnitudes"])
@pytest.mark.parametrize("seed", slow_after(range(30)))
def test_maximum_matches_brute_force_and_its_cut_bound_is_safe(kind: str, seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    pb, rows = random_instance(rng, kind)
    if seed % 2:
        pb.unit = common_unit(list(pb.exact))
    truth = max(row_load(pb, r) for r in rows if in_box(pb, r))
    got = maximum(pb)
    assert got.exact and got.load == truth == got.upper
    assert got.row is not None and in_box(pb, got.row) and row_load(pb, got.row) == truth
    # cut after a few nodes: the best row is a real row, the bound never below the truth
    for limit in (1, 2, 5):
        cut = maximum(pb, max_nodes=limit)
        assert cut.row is not None and in_box(pb, cut.row) and row_load(pb, cut.row) == cut.load
        assert cut.load <= truth <= cut.upper
        if cut.exact:
            assert cut.load == truth
    # stopped by another solver (``stop``, asked before every node) after as many nodes: the same
    for limit in (0, 1, 2, 5):
        asked = [0]

        def stop(limit: int = limit, asked: list[int] = asked) -> bool:
            asked[0] += 1
            return asked[0] > limit

        cut = maximum(pb, stop=stop)
        assert cut.load <= truth <= cut.upper
        assert cut.exact == (asked[0] <= limit) and (not cut.exact or cut.load == truth)
        # (stopped before any row was found: some row of the box, its load at least the 0 reported)
        assert cut.row is not None and in_box(pb, cut.row) and row_load(pb, cut.row) >= cut.load


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=0, max_value=1e300),
    st.floats(min_value=1e-300, max_value=1e300),
    st.one_of(st.none(), st.floats(min_value=-1e300, max_value=1e300)),
)
def test_the_largest_fitting_float_is_found_from_any_hint(
    theta: float, hi: float, hint: float | None
) -> None:
    """The search's threshold (its float pre-check trusts that it fits) is the largest float that fits,
    whatever the hint: exact, far off, negative or absent."""
    limit = Fraction(theta)
    got = threshold._largest_fitting(lambda x: x <= limit, hi, hint)
    if theta >= hi:
        assert got == hi
    else:
        assert got == theta  # floats: theta itself is the largest float <= theta


@pytest.mark.parametrize("kind", ["equal", "floats", "magnitudes"])
@pytest.mark.parametrize("duals", [False, True])
@pytest.mark.parametrize("seed", slow_after(range(30)))
def test_child_bounds_never_cut_a_row_over_them(kind: str, duals: bool, seed: int) -> None:
    """The bound the branching uses to drop a child at once (the parent's multipliers with one attribute
    fixed, MATH.md 7.9) is at least the load of every row of that child, by brute force over the real
    rows; for random multipliers and for the LP's own duals at a random sub-box."""
    rng = np.random.default_rng(1000 + seed)
    pb, _ = random_instance(rng, kind)
    search = threshold._Search(pb, lambda load: True)
    if search.k == 0 or not search.finite:
        return
    tables = search.atoms.tables
    masks = []
    for t in tables:
        m = rng.random(t.shape[1]) < 0.7
        m[int(rng.integers(t.shape[1]))] = True
        masks.append(m)
    alive = np.ones(search.n, dtype=bool)
    for t, m in zip(tables, masks, strict=True):
        alive &= t[:, m].any(axis=1)
    if duals:
        got = threshold._LP(tables, search.w).solve(alive, masks)
        assert got is not None
        mu = got[0]
    else:
        mu = rng.uniform(0, 1, size=(search.n, search.k)) * rng.choice([0.0, 0.3, 1.0], size=(search.n, 1))
    child = threshold._child_bounds(mu, search.w, alive, search.wf, masks)
    for j in range(search.k):
        for v in np.flatnonzero(masks[j]).tolist():
            fixed = list(masks)
            fixed[j] = np.zeros_like(masks[j])
            fixed[j][v] = True
            worst = Fraction(0)
            for choice in itertools.product(*(np.flatnonzero(m).tolist() for m in fixed)):
                worst = max(worst, row_load(pb, search.atoms.row(choice, search.nattrs)))
            value = float(child.values[j][v])
            bound = (Fraction(value) + Fraction(child.error(value))) * search.scale
            assert worst <= bound


@pytest.mark.parametrize("seed", range(20))
def test_lp_duals_give_the_lp_value(seed: int) -> None:
    """Solved to the end (no threshold given), the LP's duals give its optimal value as their Lagrangian
    bound (MATH.md 7.9: LP duality), checked against scipy's linprog on the same relaxation built
    independently. (A wrong objective bound once stopped HiGHS at its first iterate.)"""
    from scipy.optimize import linprog

    rng = np.random.default_rng(2000 + seed)
    pb, _ = random_instance(rng, "floats")
    search = threshold._Search(pb, lambda load: True)
    if search.k == 0:
        return
    tables, n = search.atoms.tables, search.n
    sizes = [t.shape[1] for t in tables]
    nx = sum(sizes)
    first = np.concatenate([[0], np.cumsum(sizes)])
    a_ub, a_eq = [], []
    for j, t in enumerate(tables):
        for i in range(n):
            if not t[i].all():
                row = np.zeros(n + nx)
                row[i] = 1.0
                row[n + first[j] : n + first[j + 1]] = -t[i].astype(float)
                a_ub.append(row)
        row = np.zeros(n + nx)
        row[n + first[j] : n + first[j + 1]] = 1.0
        a_eq.append(row)
    cost = np.concatenate([-search.w, np.zeros(nx)])
    ref = linprog(
        cost,
        A_ub=np.array(a_ub) if a_ub else None,
        b_ub=np.zeros(len(a_ub)) if a_ub else None,
        A_eq=np.array(a_eq),
        b_eq=np.ones(len(a_eq)),
        bounds=(0, 1),
    )
    assert ref.status == 0
    alive = np.ones(n, dtype=bool)
    masks = [np.ones(size, dtype=bool) for size in sizes]
    got = threshold._LP(tables, search.w).solve(alive, masks)
    assert got is not None
    bound, err = threshold._lagrangian(got[0], search.w, alive, search.wf, masks)
    assert bound + err >= -ref.fun - 1e-9  # a valid bound (weak duality) ...
    assert bound <= -ref.fun + 1e-6  # ... and the optimal one


@pytest.mark.parametrize("kind", ["equal", "floats"])
@pytest.mark.parametrize("seed", range(20))
def test_the_lp_starts_at_the_selective_assignment_bound(kind: str, seed: int) -> None:
    """The dual simplex's first basis is dual feasible and prices the assignment bound of each charge's
    load on its most selective attribute (MATH.md 7.9), computed here from the tables alone: stopped
    before its first iteration, HiGHS reports that bound as its (dual feasible) objective; solved, the
    LP still ends at the relaxation's value (test above), whatever the start."""
    rng = np.random.default_rng(3100 + seed)
    pb, _ = random_instance(rng, kind)
    search = threshold._Search(pb, lambda load: True)
    tables, w = search.atoms.tables, search.w
    constrains = np.stack([~t.all(axis=1) for t in tables], axis=1) if tables else None
    if constrains is None or not constrains.any():
        return
    bound = float(w[~constrains.any(axis=1)].sum())
    for j, t in enumerate(tables):
        mine = [
            i
            for i in range(len(w))
            if constrains[i].any()
            # the attribute where the charge holds the smallest share of the atoms (the first of ties)
            and j == min(np.flatnonzero(constrains[i]), key=lambda a: tables[a][i].sum() / tables[a].shape[1])
        ]
        bound += max(sum(w[i] for i in mine if t[i, v]) for v in range(t.shape[1]))
    lp = threshold._LP(tables, w)
    lp.h.setOptionValue("simplex_iteration_limit", 0)
    lp.h.run()
    assert lp.h.getInfo().simplex_iteration_count == 0
    assert lp.h.getInfo().dual_solution_status == 2  # feasible
    assert -lp.h.getInfo().objective_function_value == pytest.approx(bound, rel=1e-12, abs=1e-12)


# -- toulbar2 beside the branch and bound (integral loads) ------------------------------------------

needs_toulbar2 = pytest.mark.skipif(not wcsp.available(), reason="toulbar2 (pytoulbar2) not installed")


@needs_toulbar2
@pytest.mark.parametrize("kind", ["equal", "dyadic", "floats", "magnitudes"])
@pytest.mark.parametrize("seed", slow_after(range(12)))
def test_toulbar2_decides_when_the_branch_and_bound_gives_up(kind: str, seed: int) -> None:
    """The branch and bound cut before its first node (a node limit of 0): toulbar2 is started then and
    its answer is the decision, equal to brute force: None when every row of the box fits, else a row
    of the box that does not (checked on the exact loads). Arbitrary floats share units so small that
    their totals pass toulbar2's integers (2^50; past 2^63 a 64-bit sum wraps): the decision then
    gives up, never answers wrongly."""
    rng = np.random.default_rng(500 + seed)
    pb, rows = random_instance(rng, kind)
    pb.unit = common_unit(list(pb.exact))
    inside = [r for r in rows if in_box(pb, r)]
    top = max(row_load(pb, r) for r in inside)
    smallest = min((x for x in pb.exact if x > 0), default=Fraction(1))
    for theta in {top, top - smallest, top - smallest / 2, Fraction(0), Fraction(-1)}:

        def fits(load: Fraction, theta: Fraction = theta) -> bool:
            return load <= theta

        truth = [r for r in inside if not fits(row_load(pb, r))]
        search = threshold._Search(pb, fits)
        if search.n == 0 or search.k == 0:
            continue  # no charge meets the box, or one load for all of it: nothing for toulbar2
        try:
            found = exceeds(pb, fits, max_nodes=0)
        except SearchGaveUp:
            assert kind in ("floats", "magnitudes")  # units past toulbar2's integers: no decision
            continue
        if not truth:
            assert found is None, (theta, top)
        else:
            assert found is not None and in_box(pb, found) and not fits(row_load(pb, found))


def _two_attribute_instance() -> Problem:
    """Four charges of load 1, one per row of a 2 x 2 box, and one over all of it: each row pays 2."""
    offsets = np.array([0, 2, 4])
    cover = np.array([[1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], dtype=bool)
    return Problem(cover, np.ones(5), [Fraction(1)] * 5, offsets, np.ones(4, dtype=bool), unit=Fraction(1))


@needs_toulbar2
@pytest.mark.parametrize("theta", [2, 1])
def test_toulbar2_joins_and_its_answer_stops_the_branch_and_bound(
    monkeypatch: pytest.MonkeyPatch, theta: int
) -> None:
    """Once the branch and bound has run ``WCSP_JOIN_SECONDS`` (here 0) toulbar2 starts beside it; its
    answer (polled before every node) stops the branch and bound, held here until then: every row
    fits at 2, and at 1 its row pays 2."""
    monkeypatch.setattr(threshold, "WCSP_JOIN_SECONDS", 0.0)
    real = threshold._Search.run
    held: list[bool] = []

    def run(self: Any, on_row: Any, max_nodes: Any, deadline: Any, stop: Any = None) -> Any:
        give_up = time.monotonic() + 120.0  # a bound on a hang, not on speed
        while not stop():
            assert time.monotonic() < give_up, "toulbar2 did not answer on 5 charges"
            time.sleep(0.005)
        held.append(True)
        return real(self, on_row, max_nodes, deadline, stop)  # stopped before its first node

    monkeypatch.setattr(threshold._Search, "run", run)
    pb = _two_attribute_instance()
    found = exceeds(pb, lambda x: x <= theta, max_nodes=10_000)
    assert held == [True]
    if theta == 2:
        assert found is None
    else:
        assert found is not None and row_load(pb, found) == 2


@pytest.mark.parametrize("cpu_step", [0.0, 1.0])
def test_toulbar2_joins_on_the_search_threads_processor_time(
    monkeypatch: pytest.MonkeyPatch, cpu_step: float
) -> None:
    """The join waits for ``WCSP_JOIN_SECONDS`` of the search's processor time, not wall time: with
    the wall clock racing (a loaded server) and no processor time used, no child is started; once the
    processor time has passed it, one is (injected clocks; the start is recorded, not run)."""
    wall, cpu = [0.0], [0.0]

    def now() -> float:
        wall[0] += 100.0
        return wall[0]

    def spent() -> float:
        cpu[0] += cpu_step
        return cpu[0]

    monkeypatch.setattr(threshold._clock, "now", now)
    monkeypatch.setattr(threshold._clock, "cpu", spent)
    monkeypatch.setattr(threshold, "_toulbar2_may_join", lambda search: True)
    started: list[int] = []

    def start(problem: Any, incumbent: int, deadline: Any, **kw: Any) -> Any:
        started.append(incumbent)
        return wcsp.WcspOutcome(None, -1, None, False, "not run here")

    monkeypatch.setattr(threshold.wcsp, "start", start)
    pb = _two_attribute_instance()
    # no deadline (the racing wall clock would pass any): the branch and bound decides alone
    assert exceeds(pb, lambda x: x <= 2, max_nodes=10_000) is None
    assert started == ([] if cpu_step == 0.0 else [3])  # L = 3: the first load that does not fit


@needs_toulbar2
def test_a_toulbar2_row_that_fits_is_not_believed(monkeypatch: pytest.MonkeyPatch) -> None:
    """toulbar2's rows are weighed on the exact loads before they answer anything: a reported row
    that fits (a wrong answer, forced here) is dropped, and the branch and bound decides (every row
    pays 2, which fits)."""
    monkeypatch.setattr(threshold, "WCSP_JOIN_SECONDS", 0.0)

    def wrong(self: Any, grace: Any = None) -> Any:
        self.cancel()  # the real child is not needed
        self._result = wcsp.WcspOutcome((0, 0), 3, None, False)
        return self._result

    monkeypatch.setattr(wcsp.Run, "poll", wrong)
    monkeypatch.setattr(wcsp.Run, "outcome", wrong)
    pb = _two_attribute_instance()
    assert exceeds(pb, lambda x: x <= 2, max_nodes=10_000) is None
    with pytest.raises(SearchGaveUp):  # the branch and bound cut at once, toulbar2's row dropped
        exceeds(pb, lambda x: x <= 2, max_nodes=0)


@needs_toulbar2
@pytest.mark.parametrize("theta", [Fraction(17, 2), Fraction(9), Fraction(19, 2)])
def test_toulbar2_never_decides_on_units_past_its_integers(theta: Fraction) -> None:
    """Loads 1.0 beside 1e-3 share the unit 2^-60 (1e-3's lowest bit), so each 1.0 is 2^60 units and
    nine of them overflow 64-bit integers: toulbar2 must not be asked (its costs would wrap; a 1 000-
    query plan's decision answered "every row fits" beside a row of load 1.44 over a limit of 1). The
    branch and bound cut at node 0, the decision is then a row over theta, or it gives up: never a
    wrong answer."""
    offsets = np.array([0, 2, 4])
    cover = np.array([[1, 1, 1, 1]] * 9 + [[1, 0, 1, 0]], dtype=bool)
    loads = [1.0] * 9 + [1e-3]
    exact = [Fraction(x) for x in loads]
    pb = Problem(cover, np.array(loads), exact, offsets, np.ones(4, dtype=bool), unit=common_unit(exact))
    assert pb.unit is not None and 9 * (exact[0] / pb.unit) >= 2**63
    truth = 9 + Fraction(1e-3)
    try:
        found = exceeds(pb, lambda load: load <= theta, max_nodes=0)
    except SearchGaveUp:
        return
    if theta < truth:
        assert found is not None and row_load(pb, found) > theta
    else:
        assert found is None


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_dominated_values_are_exactly_those_another_value_holds(n: int, m: int, seed: int) -> None:
    """``_dominated`` (the branch and bound's children, MATH.md 7.9) against the definition: a value is
    dropped iff another value's charges include all of its charges, and of equal values all but the
    first; so every value is kept or held by a kept one."""
    rng = np.random.default_rng(seed)
    t = rng.random((n, m)) < 0.5
    got = threshold._dominated(t.astype(np.float64))
    for a in range(m):
        within = [b for b in range(m) if b != a and not (t[:, a] & ~t[:, b]).any()]
        want = any((t[:, b] & ~t[:, a]).any() or b < a for b in within)
        assert bool(got[a]) == want
    kept = np.flatnonzero(~got)
    assert kept.size >= 1
    for a in range(m):
        assert any(not (t[:, a] & ~t[:, b]).any() for b in kept)


@pytest.mark.parametrize("seed", range(3))
def test_atoms_group_the_box_values_by_their_charges(seed: int) -> None:
    """The search's atoms against a grouping by hand: per attribute, the box's values with the same
    charges are one atom (one column each, all distinct), every value's charges are its atom's
    column, and an attribute is left out (fixed to its first box value) exactly when every charge
    holds every value of the box there. Up to 300 attributes (the key's attribute bytes)."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        nattrs = int(rng.choice([1, 3, 7, 300]))
        sizes = rng.integers(1, 7, nattrs)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n = int(rng.integers(0, 25))
        cover = rng.random((n, int(offsets[-1]))) < rng.choice([0.2, 0.6, 0.95])
        box = rng.random(int(offsets[-1])) < 0.7
        for a in range(nattrs):
            if rng.random() < 0.3:
                cover[:, offsets[a] : offsets[a + 1]] = True
            if not box[offsets[a] : offsets[a + 1]].any():
                box[int(offsets[a])] = True
        atoms = threshold._Atoms(cover, offsets, box)
        relevant = []
        for a in range(nattrs):
            vals = [v for v in range(int(sizes[a])) if box[offsets[a] + v]]
            columns = {v: tuple(cover[:, offsets[a] + v].tolist()) for v in vals}
            if all(all(c) for c in columns.values()):
                assert atoms.fixed[a] == vals[0]
                continue
            relevant.append(a)
            j = atoms.attrs.index(a)
            table, values = atoms.tables[j], atoms.values[j]
            got = [tuple(table[:, i].tolist()) for i in range(table.shape[1])]
            assert len(set(got)) == len(got) == len(set(columns.values()))
            assert all(columns[v] == got[i] for i, v in enumerate(values))
            assert {columns[v] for v in vals} == set(got)
        assert atoms.attrs == relevant
        assert set(atoms.fixed) == set(range(nattrs)) - set(relevant)
