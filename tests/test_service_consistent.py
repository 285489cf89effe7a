"""Consistent batches in the service (finding 9 of issue 26): the projection runs in a worker process,
before admission and within the request's time budget, and is recorded with the charges.

Through the Python client over HTTP (uvicorn in a thread of this process), with counts, not clocks:

- another analyst's queries are answered while a consistent batch's projection is held in its worker
  (a stand-in worker that waits for a gate), and no solver ever runs in the server's process (the
  previous service projected in the request's thread, holding the interpreter lock);
- a projection that cannot finish within the budget is a 503 with nothing charged: the worker stops
  itself at the deadline (driven clock), or is killed when it does not answer (a gate never opened);
- an idempotent replay returns the recorded answers and projection, with no second projection;
- the projected counts are the library's :func:`overlapdp.mechanisms.consistency.project` of the same noisy counts.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import overlapdp._activeset as activeset
from overlapdp.errors import ServiceRefused
from overlapdp.mechanisms.consistency import project, workload_design
from overlapdp.query import parse_where
from overlapdp.samples import adult_schema
from overlapdp.service import _projection as projection
from overlapdp.service._projection import ProjectionPool
from overlapdp.service.client import Client
from support.service import in_process, write_adult

GATE = Path(__file__).resolve().parent / "support" / "projection_gate.py"


def _boxes(n: int, seed: int = 5) -> list[str]:
    """``n`` distinct random age x hours-per-week boxes (hundreds to thousands of cells)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        a = sorted(rng.sample(range(85), 2))
        h = sorted(rng.sample(range(99), 2))
        out[f'age BETWEEN {a[0]} AND {a[1]} AND "hours-per-week" BETWEEN {h[0]} AND {h[1]}'] = None
    return list(out)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A service on HTTP with two analysts; every solver call in THIS process is counted."""
    calls: list[str] = []
    real_solve, real_nnls = activeset.solve, activeset._scipy_nnls
    import scipy.optimize

    real_scipy = scipy.optimize.nnls

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(activeset, "solve", counted("active-set", real_solve))
    monkeypatch.setattr(activeset, "_scipy_nnls", counted("nnls", real_nnls))
    monkeypatch.setattr(scipy.optimize, "nnls", counted("scipy", real_scipy))
    # in_process serves with a request budget no load exhausts (a 300-box projection takes seconds; on
    # a loaded machine more than the default 10 s): the tests of the budget drive the projection's clock
    with in_process(tmp_path) as srv:
        service = srv["service"]
        path, schema = write_adult(tmp_path)
        service.register_dataset("adult", str(path), schema, "pandas", "pure", 1e6)
        tokens = {a: service.create_analyst(a, {"adult": 1e5}).token for a in ("alice", "bob")}
        clients = {a: Client(srv["url"], t, timeout=120) for a, t in tokens.items()}
        try:
            yield {**srv, "clients": clients, "solver_calls": calls}
            pids = service.projections.workers
        finally:
            for c in clients.values():
                c.close()
    for pid in pids:  # closing the service stopped and reaped its workers
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _gated(service: Any, gate: Path, *mode: str, **kwargs: Any) -> ProjectionPool:
    service.projections.close()
    pool = ProjectionPool(1, command=[sys.executable, str(GATE), str(gate), *mode], **kwargs)
    service.projections = pool
    return pool


def _late_once_taken(monkeypatch: pytest.MonkeyPatch, gate: Path) -> None:
    """The projection's clock (``_projection._now``) runs past every deadline once the worker has taken
    the job (the gate worker writes ``GATE.pid`` then): the request gives up with its job in the worker,
    however loaded the machine. (On the wall clock, with a 1 s budget, a worker slow to start on a
    loaded machine was given up before it took the job: no pid, no kill, no late answer.)"""
    real = time.monotonic
    taken = Path(f"{gate}.pid")
    monkeypatch.setattr(projection, "_now", lambda: real() + (1e6 if taken.exists() else 0.0))


def _wait_for(condition: Any, what: str, seconds: float = 120.0) -> None:
    """Poll ``condition`` (a bound on a hang, not a timing assertion)."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, f"waited {seconds} s for {what}"
        time.sleep(0.01)


def _library(queries: list[str], frame: Any, calls: list[str]) -> list[float]:
    """The library's projection of the counts (and noise) the service released (its own solver calls,
    in this process, are not the server's: taken off the count)."""
    schema = adult_schema()
    design = workload_design([parse_where(schema, w) for w in queries])
    before = len(calls)
    values = project(
        design, frame["answer"].astype(float).tolist(), (frame["noise_std"] ** 2).tolist()
    ).values
    del calls[before:]
    return values


def test_another_analysts_queries_are_answered_while_a_consistent_batch_projects(
    served: dict[str, Any], tmp_path: Path
) -> None:
    service = served["service"]
    gate = tmp_path / "gate"  # it holds the projection (the request budget is one no load exhausts)
    pool = _gated(service, gate)
    big = _boxes(300)
    out: dict[str, Any] = {}

    def alice() -> None:
        try:
            out["frame"] = served["clients"]["alice"].batch("adult", big, epsilon=0.01, consistent=True)
        except BaseException as exc:  # reported by the assertions below
            out["error"] = exc

    thread = threading.Thread(target=alice)
    thread.start()
    try:
        _wait_for(lambda: Path(f"{gate}.pid").exists() or not thread.is_alive(), "the projection")
        assert Path(f"{gate}.pid").exists(), f"the projection never reached a worker: {out}"
        bob = served["clients"]["bob"]
        for k in range(5):  # answered while alice's projection is held in its worker
            frame = bob.query("adult", f"age >= {20 + k}", epsilon=0.01)
            assert len(frame) == 1
        assert thread.is_alive() and "frame" not in out
        assert pool.started == 1 and pool.finished == 0
        assert service.store.charges(analyst="alice") == []  # nothing admitted before its projection
    finally:
        gate.touch()
        thread.join(timeout=300)
    assert "error" not in out, out
    frame = out["frame"]
    assert pool.finished == 1 and len(frame) == len(big)
    assert frame["consistent"].tolist() == pytest.approx(
        _library(big, frame, served["solver_calls"]), rel=1e-9, abs=1e-6
    )
    assert served["solver_calls"] == []  # no solver in the server's process


@pytest.mark.slow  # 1.2 s of CPU
def test_projected_counts_are_the_librarys_and_a_replay_does_not_project_again(
    served: dict[str, Any],
) -> None:
    service = served["service"]
    alice = served["clients"]["alice"]
    for queries in (_boxes(300), ["sex = 0", "sex = 1", "TRUE"] * 2):  # thousands of cells, and 2
        key = f"k-{len(queries)}"
        first = alice.batch("adult", queries, epsilon=0.01, consistent=True, key=key)
        started = service.projections.started
        again = alice.batch("adult", queries, epsilon=0.01, consistent=True, key=key)
        assert service.projections.started == started  # the replay computed nothing
        assert again.equals(first)  # the same noisy counts, intervals and consistent counts
        assert first["consistent"].tolist() == pytest.approx(
            _library(queries, first, served["solver_calls"]), rel=1e-9, abs=1e-6
        )
        recorded = service.store.charges(analyst="alice")[-len(queries) :]
        assert [c.answer["consistent"]["count"] for c in recorded] == first["consistent"].tolist()
        assert {c.answer["consistent"]["solver"] for c in recorded} == {"active-set"}
    assert service.projections.started == 2 and service.projections.spawned == 1
    assert served["solver_calls"] == []
    # The same key with a plain batch is another request: refused, nothing charged again.
    before = len(service.store.charges(analyst="alice"))
    with pytest.raises(ServiceRefused) as refused:
        alice.batch("adult", ["sex = 0", "sex = 1", "TRUE"] * 2, epsilon=0.01, key="k-6")
    assert refused.value.status == 409
    assert len(service.store.charges(analyst="alice")) == before


def test_a_projection_past_the_budget_stops_itself_and_charges_nothing(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = served["service"]
    service.projections.close()
    pool = service.projections = ProjectionPool(1, grace=600.0)  # it must stop itself: no kill
    alice = served["clients"]["alice"]
    left = projection._left
    monkeypatch.setattr(projection, "_left", lambda deadline: 0.0)  # the worker gets no time at all
    with pytest.raises(ServiceRefused) as refused:
        alice.batch("adult", _boxes(300), epsilon=0.01, consistent=True)
    assert refused.value.status == 503 and refused.value.body["error"] == "TimeBudgetExceeded"
    assert service.store.charges(analyst="alice") == []
    assert alice.me()["spent"].tolist() == [0.0]
    _wait_for(lambda: pool.cut == 1, "the worker's own stop")  # it answered "unfinished"
    assert pool.killed == 0 and pool.finished == 0
    monkeypatch.setattr(projection, "_left", left)
    frame = alice.batch("adult", _boxes(300), epsilon=0.01, consistent=True)  # the same worker
    assert len(frame) == 300 and pool.finished == 1 and pool.spawned == 1
    assert served["solver_calls"] == []


def test_a_worker_that_does_not_answer_is_killed_and_nothing_is_charged(
    served: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = served["service"]
    gate = tmp_path / "never"
    pool = _gated(service, gate, grace=0.1)
    _late_once_taken(monkeypatch, gate)
    alice = served["clients"]["alice"]
    with pytest.raises(ServiceRefused) as refused:
        alice.batch("adult", ["sex = 0", "sex = 1", "TRUE"], epsilon=0.01, consistent=True)
    assert refused.value.status == 503 and refused.value.body["error"] == "TimeBudgetExceeded"
    assert service.store.charges(analyst="alice") == []
    pid = int(Path(f"{gate}.pid").read_text())
    _wait_for(lambda: pool.killed == 1 and pool.workers == [], "the kill")

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    _wait_for(gone, "the worker's end")  # killed and reaped
    monkeypatch.setattr(projection, "_now", time.monotonic)
    # Other requests are answered meanwhile and after (what is held here is that the kill left the
    # service serving, not how fast).
    assert len(served["clients"]["bob"].query("adult", "age >= 30", epsilon=0.01)) == 1


def test_a_worker_past_the_deadline_keeps_its_grace_and_serves_the_next_batch(
    served: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = served["service"]
    gate = tmp_path / "late"
    pool = _gated(service, gate, grace=600.0)
    _late_once_taken(monkeypatch, gate)
    alice = served["clients"]["alice"]
    queries = ["sex = 0", "sex = 1", "TRUE"]
    with pytest.raises(ServiceRefused) as refused:  # the gate is shut past the request's deadline
        alice.batch("adult", queries, epsilon=0.01, consistent=True)
    assert refused.value.status == 503 and service.store.charges(analyst="alice") == []
    gate.touch()  # the worker answers late, within its grace: it is not killed, it goes back to the pool
    _wait_for(lambda: pool.finished == 1, "the late answer")
    monkeypatch.setattr(projection, "_now", time.monotonic)
    frame = alice.batch("adult", queries, epsilon=0.01, consistent=True)
    assert frame["consistent"].tolist() == pytest.approx(_library(queries, frame, served["solver_calls"]))
    assert pool.killed == 0 and pool.spawned == 1 and pool.finished == 2


def test_a_projection_without_an_optimal_answer_is_a_500_and_charges_nothing(
    served: dict[str, Any], tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    gate.touch()
    _gated(served["service"], gate, "fail")
    alice = served["clients"]["alice"]
    with pytest.raises(ServiceRefused) as refused:
        alice.batch("adult", ["sex = 0", "sex = 1", "TRUE"], epsilon=0.01, consistent=True)
    assert refused.value.status == 500 and "optimum" in refused.value.body["detail"]
    assert served["service"].store.charges(analyst="alice") == []


# -- counts, sums and means together (MATH.md 6.5.1) -----------------------------------------------------
HOURS = "hours-per-week"


def _aggregate_batch() -> list[Any]:
    """Counts, sums of two columns and a mean over overlapping boxes: three distinct clippings."""
    out: list[Any] = [*_boxes(30, seed=11), "age >= 30", "age < 30", "TRUE"]
    out += [
        {"where": "age >= 30", "aggregate": "sum", "of": HOURS, "bounds": [0, 99]},
        {"where": "age < 30", "aggregate": "sum", "of": HOURS, "bounds": [0, 99]},
        {"where": "TRUE", "aggregate": "sum", "of": HOURS, "bounds": [0, 99]},
        {"where": "age >= 30 AND sex = 1", "aggregate": "sum", "of": "age", "bounds": [0, 84]},
        {"where": "sex = 1", "aggregate": "mean", "of": HOURS, "bounds": [10, 60]},
        {"where": "TRUE", "aggregate": "mean", "of": HOURS, "bounds": [10, 60]},
    ]
    return out


def _library_objects(answers: list[dict[str, Any]], specs: list[Any], epsilon: float) -> list[Any]:
    """The service's released answers as the library's answers: each with the noise the library
    calibrates for the query's guarantee (not read off the service's figures) and the released value."""
    import dataclasses

    from overlapdp.mechanisms import add_noise
    from overlapdp.mechanisms.sums import add_mean_noise, add_sum_noise
    from overlapdp.privacy import PureDP
    from overlapdp.query.aggregate import Clipping

    out: list[Any] = []
    for a, spec in zip(answers, specs, strict=True):
        kind = spec.get("aggregate", "count") if isinstance(spec, dict) else "count"
        if kind == "count":
            (t,) = add_noise([0], PureDP(epsilon), level=0.95)
            out.append(dataclasses.replace(t, value=a["answer"]))
            continue
        clip = Clipping(spec["of"], *spec["bounds"])
        if kind == "sum":
            (s,) = add_sum_noise([0], clip, PureDP(epsilon), level=0.95)
            out.append(dataclasses.replace(s, value=a["answer"]))
            continue
        (m,) = add_mean_noise([0], [0], clip, PureDP(epsilon), level=0.95)
        parts = a["parts"]
        out.append(
            dataclasses.replace(
                m,
                value=a["answer"],
                sum=dataclasses.replace(m.sum, value=parts["sum"]["answer"]),
                count=dataclasses.replace(m.count, value=parts["count"]["answer"]),
            )
        )
    return out


def test_consistent_sums_and_means_are_the_librarys_and_stay_within_their_bounds(
    served: dict[str, Any],
) -> None:
    """A consistent batch of counts, sums and means is projected in the worker (no solver here), within
    the request's budget, and gives the library's :func:`project_aggregates` of the very answers it
    released; a consistent sum lies within its consistent count times its bounds, a mean within its
    bounds, and a replay returns the recorded projection."""
    from overlapdp.mechanisms.consistency import project_aggregates

    service = served["service"]
    alice = served["clients"]["alice"]
    specs = _aggregate_batch()
    body = {"queries": specs, "epsilon": 0.05, "consistent": True}
    out = alice._call("POST", "/v1/datasets/adult/batch", json=body, key="agg", spend=True)
    assert served["solver_calls"] == []  # the projection ran in the worker
    fit = out["consistent"]
    assert fit["answers"] == fit["counts"] and len(fit["answers"]) == len(specs)
    schema = adult_schema()
    from overlapdp.query import parse_line

    queries = [parse_line(schema, s if isinstance(s, dict) else {"where": s})[0] for s in specs]
    before = len(served["solver_calls"])
    lib = project_aggregates(workload_design(queries), _library_objects(out["answers"], specs, 0.05))
    del served["solver_calls"][before:]
    assert fit["answers"] == pytest.approx(lib.values, rel=1e-9, abs=1e-6)
    got = dict(
        zip(
            [s if isinstance(s, str) else (s["where"], s["aggregate"], s["of"]) for s in specs],
            fit["answers"],
            strict=True,
        )
    )
    # every row counted once, each adding hours in [0, 99]: the sums within 99 x their counts
    for where in ("age >= 30", "age < 30", "TRUE"):
        assert -1e-6 <= got[(where, "sum", HOURS)] <= 99 * got[where] + 1e-6
    assert got[("age >= 30", "sum", HOURS)] + got[("age < 30", "sum", HOURS)] == pytest.approx(
        got[("TRUE", "sum", HOURS)], rel=1e-9, abs=1e-6
    )
    assert got["age >= 30"] + got["age < 30"] == pytest.approx(got["TRUE"], rel=1e-9, abs=1e-6)
    assert 10 <= got[("sex = 1", "mean", HOURS)] <= 60 and 10 <= got[("TRUE", "mean", HOURS)] <= 60
    started = service.projections.started
    again = alice._call("POST", "/v1/datasets/adult/batch", json=body, key="agg", spend=True)
    assert again["consistent"] == fit and service.projections.started == started
    frame = alice.batch("adult", specs, epsilon=0.05, consistent=True)  # the client's column
    assert len(frame["consistent"]) == len(specs)
