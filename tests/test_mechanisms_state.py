"""SparseVector and GuessAndCheck own their secret state: ``state()`` / ``restore()`` (svt_core,
MATH.md 4), and the service persists sessions only through them.

The reference for a restored run is the uninterrupted run on an identical seeded source: both runs build
the same mechanisms in the same order (the restarted one a fresh mechanism that is then restored, the
uninterrupted one a throwaway of the same parameters), so they read identical noise and must answer
identically from the snapshot point on iff the snapshot holds everything the answers depend on.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from overlapdp.mechanisms import (
    GuessAndCheck,
    SeededRandomSource,
    SnapshotError,
    SparseVector,
    ThresholdState,
)
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute
from overlapdp.service import session_mechanisms

SCHEMA = Schema((IntAttribute("i", 0, 19),))
QUERIES = [
    PredicateQuery.from_coverages(SCHEMA, {"i": IndexSet.interval(k, k + 1)}, id=f"q{k}") for k in range(20)
]
COUNTS = [3, 9, 4, 12, 7, 0, 15, 6, 8, 11, 2, 10, 5, 14, 1, 13, 9, 4, 7, 12]
SERVICE = Path(__file__).resolve().parents[1] / "src" / "overlapdp" / "service"


def count(q: PredicateQuery) -> int:
    return COUNTS[next(iter(q.coverage("i")))]


Data = Callable[[PredicateQuery], int]


def build_svt(rng: SeededRandomSource, data: Data = count) -> SparseVector:
    # Thresholds near the counts and little noise: the answers mix "above" and "below" before c = 4.
    return SparseVector(data, epsilon=2.0, max_positives=4, release_epsilon=1.0, rng=rng)


def build_gc(rng: SeededRandomSource, data: Data = count) -> GuessAndCheck:
    return GuessAndCheck(
        data,
        tolerance=2.5,
        max_failures=3,
        threshold_scale=Fraction(1, 2),
        query_scale=1,
        estimate_scale=2,
        rng=rng,
    )


def step_svt(mech: Any, k: int) -> Any:
    return mech.ask(QUERIES[k], COUNTS[k] + (k % 3) - 1)


def step_gc(mech: Any, k: int) -> Any:
    return mech.check(QUERIES[k], COUNTS[k] + 3 * (k % 3) - 2)


KINDS: dict[str, tuple[Callable[..., Any], Callable[[Any, int], Any]]] = {
    "sparse_vector": (build_svt, step_svt),
    "guess_and_check": (build_gc, step_gc),
}


def json_round_trip(state: ThresholdState) -> ThresholdState:
    return ThresholdState.from_json(json.loads(json.dumps(state.to_json())))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("cut", [0, 1, 3, 6, 12])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_restore_mid_stream_answers_as_the_uninterrupted_run(kind: str, cut: int, seed: int) -> None:
    build, step = KINDS[kind]
    n = len(QUERIES)

    source = SeededRandomSource(seed)
    mech = build(source)
    uninterrupted = [step(mech, k) for k in range(cut)]
    build(source)  # the throwaway: the same draws the restarted run's fresh mechanism makes
    uninterrupted += [step(mech, k) for k in range(cut, n)]

    source = SeededRandomSource(seed)
    first = build(source)
    restarted = [step(first, k) for k in range(cut)]
    snapshot = json_round_trip(first.state())
    del first
    second = build(source)
    second.restore(snapshot)
    restarted += [step(second, k) for k in range(cut, n)]

    assert restarted == uninterrupted
    # The snapshot's counters, counted from the answers themselves.
    positive = "above" if kind == "sparse_vector" else "estimate"
    assert snapshot.queries == sum(a.outcome != "exhausted" for a in uninterrupted[:cut])
    assert snapshot.positives == sum(a.outcome == positive for a in uninterrupted[:cut])
    assert snapshot.mechanism == kind
    outcomes = {a.outcome for a in uninterrupted}
    assert positive in outcomes and len(outcomes) >= 2  # the stream exercises both branches


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_exhausted_snapshot_restores_an_exhausted_mechanism_that_reads_nothing(kind: str) -> None:
    build, step = KINDS[kind]
    mech = build(SeededRandomSource(5))
    state = mech.state()
    full = ThresholdState(**{**state.__dict__, "positives": state.c, "queries": 7})
    assert full.exhausted and not state.exhausted
    reads: list[PredicateQuery] = []

    def recorded(q: PredicateQuery) -> int:
        reads.append(q)
        return count(q)

    fresh = build(SeededRandomSource(6), recorded)
    fresh.restore(full)
    assert fresh.exhausted
    answer = step(fresh, 8)
    assert answer.outcome == "exhausted" and answer.index == 7
    assert reads == []


def test_state_is_plain_json_and_round_trips_exactly() -> None:
    svt = SparseVector(count, epsilon=0.3, max_positives=2, monotonic=True, rng=9)
    for k in range(5):
        svt.ask(QUERIES[k], 6)
    data = svt.state().to_json()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {
        "mechanism",
        "threshold_noise",
        "positives",
        "queries",
        "c",
        "threshold_scale",
        "query_scale",
    }
    assert Fraction(data["query_scale"]) == svt.query_noise.scale  # exact, not a float
    assert ThresholdState.from_json(data) == svt.state()


def _svt(**params: Any) -> SparseVector:
    return SparseVector(count, **{"epsilon": 1.0, "max_positives": 2, "rng": 0, **params})


def _gc(**params: Any) -> GuessAndCheck:
    return GuessAndCheck.from_budget(
        count, **{"epsilon": 1.0, "tolerance": 2, "max_failures": 2, "rng": 0, **params}
    )


@pytest.mark.parametrize(
    ("source", "target", "field"),
    [
        (_gc, _svt, "guess_and_check"),  # another kind of mechanism
        (_svt, _gc, "sparse_vector"),
        (lambda: _svt(max_positives=3), _svt, "c"),
        # nu (and rho) drawn at other scales
        (
            lambda: _svt(monotonic=True, threshold_epsilon=0.25),
            lambda: _svt(threshold_epsilon=0.25),
            "query_scale",
        ),
        (lambda: _svt(threshold_epsilon=0.5), _svt, "threshold_scale"),
        (lambda: _gc(epsilon=2.0), _gc, "threshold_scale"),
    ],
)
def test_restore_refuses_a_snapshot_from_another_mechanism(
    source: Callable[[], Any], target: Callable[[], Any], field: str
) -> None:
    state = source().state()
    with pytest.raises(SnapshotError, match=field):
        target().restore(state)


GOOD = {
    "mechanism": "sparse_vector",
    "threshold_noise": -3,
    "positives": 1,
    "queries": 4,
    "c": 2,
    "threshold_scale": "7/2",
    "query_scale": "9",
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mechanism": "noisy_counts"}, "mechanism"),
        ({"threshold_noise": 1.5}, "threshold_noise"),
        ({"threshold_noise": "3"}, "threshold_noise"),
        ({"positives": True}, "positives"),
        ({"positives": 3}, "positives"),
        ({"positives": -1}, "positives"),
        ({"queries": 0}, "queries"),
        ({"c": 0}, "c"),
        ({"threshold_scale": "0"}, "threshold_scale"),
        ({"threshold_scale": "-1/2"}, "threshold_scale"),
        ({"query_scale": "abc"}, "query_scale"),
        ({"query_scale": 9.0}, "query_scale"),
        ({"query_scale": "1/0"}, "query_scale"),
        ({"extra": 1}, "extra"),
    ],
)
def test_from_json_names_the_field_of_a_corrupted_snapshot(change: dict[str, Any], field: str) -> None:
    assert ThresholdState.from_json(GOOD).queries == 4  # the unchanged snapshot is valid
    with pytest.raises(SnapshotError, match=field):
        ThresholdState.from_json({**GOOD, **change})


@pytest.mark.parametrize("missing", sorted(GOOD))
def test_from_json_names_a_missing_field(missing: str) -> None:
    with pytest.raises(SnapshotError, match=missing):
        ThresholdState.from_json({k: v for k, v in GOOD.items() if k != missing})


@pytest.mark.parametrize("data", [None, [], "state", 3])
def test_from_json_refuses_what_is_not_an_object(data: object) -> None:
    with pytest.raises(SnapshotError, match="JSON object"):
        ThresholdState.from_json(data)


@pytest.mark.parametrize("build", [_svt, _gc])
def test_restore_refuses_a_mechanism_that_has_answered_and_a_plain_dict(build: Callable[[], Any]) -> None:
    used = build()
    snapshot = used.state()
    if isinstance(used, SparseVector):
        used.ask(QUERIES[0], 5)
    else:
        used.check(QUERIES[0], 5)
    with pytest.raises(SnapshotError, match="already answered"):
        used.restore(snapshot)  # would rewind: the same rho could answer more than c positives
    with pytest.raises(SnapshotError, match="ThresholdState"):
        build().restore(snapshot.to_json())


# -- the service ---------------------------------------------------------------------------------------


def test_service_sessions_store_the_mechanism_snapshot_and_resume_from_it() -> None:
    params, state, _ = session_mechanisms.open_session(
        "sparse_vector", {"epsilon": 1.0, "max_positives": 1}, count
    )
    assert ThresholdState.from_json(state).mechanism == "sparse_vector"
    # Whatever rho the session drew, one far below pins the answer: restored, not drawn afresh.
    pinned = {**state, "threshold_noise": -(10**6), "queries": 2}
    answer, after, closed = session_mechanisms.session_step(
        "sparse_vector", params, pinned, count, QUERIES[0], 1000
    )
    assert answer["outcome"] == "above" and closed
    assert after == {**pinned, "positives": 1, "queries": 3}


@pytest.mark.parametrize("kind", ["sparse_vector", "guess_and_check"])
def test_service_resumes_a_session_stored_before_snapshots_named_their_mechanism(kind: str) -> None:
    """Rows written by the previous release hold three counters only; they still resume."""
    raw = (
        {"epsilon": 1.0, "max_positives": 1} if kind == "sparse_vector" else {"epsilon": 1.0, "tolerance": 1}
    )
    params, _, _ = session_mechanisms.open_session(kind, raw, count)
    old = {"threshold_noise": -(10**6), "positives": 0, "queries": 5}
    # count(q0) = 3: threshold 1000 / guess 1003 is far off, but rho = -10^6 makes it cross.
    arg = 1000 if kind == "sparse_vector" else 1003
    answer, after, closed = session_mechanisms.session_step(kind, params, old, count, QUERIES[0], arg)
    assert answer["outcome"] in ("above", "estimate") and closed
    assert after["threshold_noise"] == -(10**6) and after["queries"] == 6 and after["positives"] == 1


def test_service_fails_internally_on_a_stored_state_of_another_mechanism() -> None:
    params, _, _ = session_mechanisms.open_session(
        "sparse_vector", {"epsilon": 1.0, "max_positives": 1}, count
    )
    _, other, _ = session_mechanisms.open_session(
        "sparse_vector", {"epsilon": 1.0, "max_positives": 2}, count
    )
    with pytest.raises(RuntimeError, match="does not fit"):  # the ledger's fault: a 500, not a 400
        session_mechanisms.session_step("sparse_vector", params, other, count, QUERIES[0], 1)


def private_writes(source: str) -> list[tuple[int, str]]:
    """Assignments (plain, augmented, annotated, ``setattr``, ``del``) to an attribute whose name starts
    with ``_`` on any object but ``self`` / ``cls``: (line, attribute)."""
    found: list[tuple[int, str]] = []

    def foreign(obj: ast.expr) -> bool:
        return not (isinstance(obj, ast.Name) and obj.id in ("self", "cls"))

    def check(target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for t in target.elts:
                check(t)
        elif isinstance(target, ast.Starred):
            check(target.value)
        elif isinstance(target, ast.Attribute) and target.attr.startswith("_") and foreign(target.value):
            found.append((target.lineno, target.attr))

    for node in ast.walk(ast.parse(source)):
        targets: Sequence[ast.expr] = ()
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and str(name.value).startswith("_") and foreign(node.args[0]):
                found.append((node.lineno, str(name.value)))
        for t in targets:
            check(t)
    return found


def test_the_check_finds_private_writes() -> None:
    code = (
        "mech._rho = 1\nmech._asked += 1\na, m._x = 1, 2\nsetattr(m, '_y', 3)\nself._ok = 1\nm.public = 1\n"
    )
    assert private_writes(code) == [(1, "_rho"), (2, "_asked"), (3, "_x"), (4, "_y")]


def test_no_service_module_writes_a_private_attribute_of_another_object() -> None:
    """The service uses the mechanisms' state()/restore(), never their private fields."""
    modules = sorted(SERVICE.rglob("*.py"))
    assert len(modules) > 5
    offenders = {
        str(path.relative_to(SERVICE)): hits
        for path in modules
        if (hits := private_writes(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
