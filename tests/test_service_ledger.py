"""The ledger and admission without HTTP, on SQLite and (when available) PostgreSQL.

Truth is recomputed from the ledger's rows by the test itself (exact rational sums of the recorded
costs), never taken from the service's own counters.
"""

from __future__ import annotations

import sqlite3
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from overlapdp.service import QueryService, open_ledger
from overlapdp.service.core import Conflict, QuotaExceeded, ServiceError
from overlapdp.service.ledger import LedgerStore
from overlapdp.service.responses import BatchAnswer
from support.service import FailingCommit, fresh_postgres_ledger, write_adult

EPS = 0.0625  # a power of two: k * EPS is exact, so the expected number of admitted queries is exact


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return fresh_postgres_ledger()


def _setup(service: QueryService, folder: Path, *, budget: float = 100.0, quota: float = 1.0) -> Any:
    path, schema = write_adult(folder)
    service.register_dataset("adult", str(path), schema, "pandas", "pure", budget)
    alice = service.create_analyst("alice", {"adult": quota})
    return service.store.get_analyst(alice.name)


def _ledger_sum(store: LedgerStore, **filters: str) -> Fraction:
    return sum((Fraction(r.cost["load"]) for r in store.charges(**filters)), Fraction(0))  # type: ignore[arg-type]


# The queries of these tests all cover the row (age = 40, race = 0), so that row's load, the maximum over
# rows, is the plain sum of the ledger's costs whatever accountant the service uses.
def _query(i: int) -> str:
    return f"age BETWEEN {30 - i % 7} AND {41 + i % 5} AND race IN (0, {1 + i % 4})"


def test_sqlite_ledger_is_durable_wal(tmp_path: Path) -> None:
    store = open_ledger(tmp_path / "l.sqlite")
    conn = store._conn()  # type: ignore[attr-defined]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: the log is synced at each commit
    store.close()


def test_quota_is_never_exceeded_and_refusal_charges_nothing(ledger_url: str, tmp_path: Path) -> None:
    service = QueryService(open_ledger(ledger_url))
    alice = _setup(service, tmp_path)
    admitted = 0
    for i in range(40):
        try:
            service.query(alice, "adult", [_query(i)], EPS)
            admitted += 1
        except QuotaExceeded as exc:
            assert exc.details["remaining"] == pytest.approx(0.0, abs=1e-12)
            break
    assert admitted == 16  # exactly 1 / EPS
    rows_before = len(service.store.charges())
    with pytest.raises(QuotaExceeded):
        service.query(alice, "adult", [_query(99)], EPS)
    assert len(service.store.charges()) == rows_before
    assert _ledger_sum(service.store) == 1
    service.store.close()


def test_batch_is_all_or_nothing(ledger_url: str, tmp_path: Path) -> None:
    service = QueryService(open_ledger(ledger_url))
    alice = _setup(service, tmp_path)
    service.query(alice, "adult", [_query(i) for i in range(10)], EPS)
    with pytest.raises(QuotaExceeded):  # 7 more would need 17/16
        service.query(alice, "adult", [_query(i) for i in range(7)], EPS)
    assert _ledger_sum(service.store) == Fraction(10, 16)
    out = service.query(alice, "adult", [_query(i) for i in range(6)], EPS)
    assert len(out.answers) == 6
    assert _ledger_sum(service.store) == 1
    service.store.close()


def test_idempotency_key_replays_the_recorded_answer(ledger_url: str, tmp_path: Path) -> None:
    service = QueryService(open_ledger(ledger_url))
    alice = _setup(service, tmp_path)
    first = service.query(alice, "adult", [_query(1), _query(2)], EPS, request_key="k-1")
    again = service.query(alice, "adult", [_query(1), _query(2)], EPS, request_key="k-1")
    assert again.replayed and not first.replayed
    assert [a.answer for a in again.answers] == [a.answer for a in first.answers]
    assert [a.charge for a in again.answers] == [a.charge for a in first.answers]
    assert len(service.store.charges()) == 2
    with pytest.raises(Conflict):
        service.query(alice, "adult", [_query(3)], EPS, request_key="k-1")
    # After a restart the key still replays.
    service.store.close()
    restarted = QueryService(open_ledger(ledger_url))
    third = restarted.query(alice, "adult", [_query(1), _query(2)], EPS, request_key="k-1")
    assert third.replayed and [a.answer for a in third.answers] == [a.answer for a in first.answers]
    assert len(restarted.store.charges()) == 2
    restarted.store.close()


def test_restart_rebuilds_the_filters_from_the_ledger(ledger_url: str, tmp_path: Path) -> None:
    service = QueryService(open_ledger(ledger_url))
    alice = _setup(service, tmp_path)
    for i in range(12):
        service.query(alice, "adult", [_query(i)], EPS)
    session = service.open_session(alice, "adult", "sparse_vector", {"epsilon": 0.125, "max_positives": 1})
    sid = session.session.id
    # A threshold far below any count answers "above" at once and closes the session (c = 1).
    step = service.session_query(alice, sid, "sex = 1", -1e9)
    assert step.answer.above and step.answer.closed
    service.store.close()
    restarted = QueryService(open_ledger(ledger_url))
    info = restarted.analyst_info(alice).datasets["adult"]
    assert Fraction(info.spent) == _ledger_sum(restarted.store) == Fraction(14, 16)
    with pytest.raises(QuotaExceeded):
        restarted.query(alice, "adult", [_query(0) for _ in range(3)], EPS)
    with pytest.raises(Conflict):  # the closed session stays closed
        restarted.session_query(alice, sid, "sex = 1", -1e9)
    restarted.store.close()


def test_two_instances_sharing_a_ledger_never_overspend(ledger_url: str, tmp_path: Path) -> None:
    """Two QueryService objects (as two processes would) on one ledger, 4 threads each, one quota."""
    first = QueryService(open_ledger(ledger_url))
    alice = _setup(first, tmp_path, budget=0.75, quota=1.0)  # the global budget binds first
    second = QueryService(open_ledger(ledger_url))
    answered: list[str] = []
    lock = threading.Lock()

    def storm(service: QueryService, offset: int) -> None:
        for i in range(40):
            try:
                out = service.query(alice, "adult", [_query(offset + i)], EPS)
            except QuotaExceeded:
                return
            with lock:
                answered.append(out.answers[0].charge)

    threads = [
        threading.Thread(target=storm, args=(svc, k * 100)) for k in range(4) for svc in (first, second)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    rows = first.store.charges()
    assert _ledger_sum(first.store) == Fraction(3, 4)  # 12 queries of 1/16
    assert sorted(answered) == sorted(r.id for r in rows)
    for svc in (first, second):
        status = svc.dataset_status("adult")
        assert Fraction(status.spent) == Fraction(3, 4)
        assert status.guarantee.epsilon <= 0.75
    first.store.close()
    second.store.close()


def test_no_answer_without_its_charge(tmp_path: Path) -> None:
    store = open_ledger(tmp_path / "l.sqlite")
    service = QueryService(store)
    alice = _setup(service, tmp_path)
    service.query(alice, "adult", [_query(0)], EPS)
    service.store = FailingCommit(store)
    with pytest.raises(ServiceError) as err:
        service.query(alice, "adult", [_query(1)], EPS)
    assert err.value.status == 503 and "no answer was released" in str(err.value)
    service.store = store
    assert len(store.charges()) == 1
    # The failed request's staged charge is forgotten: the spend is the ledger's again.
    assert Fraction(service.analyst_info(alice).datasets["adult"].spent) == Fraction(1, 16)
    service.query(alice, "adult", [_query(2)], EPS)
    assert Fraction(service.analyst_info(alice).datasets["adult"].spent) == Fraction(2, 16)
    store.close()


def test_sqlite_commit_happens_before_the_answer(tmp_path: Path) -> None:
    """The charge is visible to another connection as soon as the call returns (committed, not pending)."""
    store = open_ledger(tmp_path / "l.sqlite")
    service = QueryService(store)
    alice = _setup(service, tmp_path)
    out = service.query(alice, "adult", [_query(0)], EPS)
    other = sqlite3.connect(tmp_path / "l.sqlite")
    rows = other.execute("SELECT id, answer FROM charges").fetchall()
    assert rows and rows[0][0] == out.answers[0].charge and f'"count":{out.answers[0].answer}' in rows[0][1]
    other.close()
    store.close()


def _brute_force_max_load(service: QueryService, **filters: str) -> float:
    """max over every (age, sex, race) point of the summed loads of the recorded queries covering it."""
    schema = service._state("adult").schema
    from overlapdp.query import parse_query

    charges = [
        (parse_query(schema, r.query) if r.query else None, r.cost["load"])
        for r in service.store.charges(**filters)
    ]
    pos = [schema.position(a) for a in ("age", "sex", "race")]
    best = 0.0
    row = [0] * len(schema)
    for age in range(schema.attributes[pos[0]].size):
        for sex in range(schema.attributes[pos[1]].size):
            for race in range(schema.attributes[pos[2]].size):
                row[pos[0]], row[pos[1]], row[pos[2]] = age, sex, race
                load = sum(w for q, w in charges if q is None or q.covers(row))
                best = max(best, load)
    return best


def test_disjoint_queries_are_charged_by_maximum_overlap(tmp_path: Path) -> None:
    """Overlap-aware admission against a brute-force per-row maximum (MATH.md 1.8, 2.7)."""
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    alice = _setup(service, tmp_path, budget=10.0, quota=1.0)
    bob = service.create_analyst("bob", {"adult": 1.0})
    bob_rec = service.store.get_analyst(bob.name)
    service.query(alice, "adult", ["sex = 0"], 0.625)
    service.query(alice, "adult", ["sex = 1 AND race IN (1, 2)"], 0.625)  # disjoint: both fit in 1.0
    service.query(alice, "adult", ["sex = 1 AND race = 0 AND age < 30"], 0.375)
    with pytest.raises(QuotaExceeded):  # would put 1.25 on the rows with sex = 0 and age < 20
        service.query(alice, "adult", ["age < 20"], 0.625)
    service.query(alice, "adult", ["age < 20 AND sex = 1"], 0.375)  # 0.625 + 0.375 = 1.0 at most
    service.query(bob_rec, "adult", ["race = 4", "race = 3"], 0.5)
    info = service.analyst_info(alice).datasets["adult"]
    assert info.spent == pytest.approx(_brute_force_max_load(service, analyst="alice")) == pytest.approx(1.0)
    status = service.dataset_status("adult")
    assert status.spent == pytest.approx(_brute_force_max_load(service))
    # Concurrent composition of the two analysts: the sum of their spends (pure DP, Vadhan and Wang 2021).
    bob_spent = _brute_force_max_load(service, analyst="bob")
    assert bob_spent == pytest.approx(0.5)
    guarantee = status.guarantee
    assert guarantee.by_concurrent_composition == pytest.approx(1.0 + bob_spent)
    assert guarantee.epsilon == pytest.approx(min(status.spent, 1.0 + bob_spent))
    service.store.close()


def test_dry_run_prices_a_batch_by_its_overlap_and_spends_nothing(tmp_path: Path) -> None:
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    alice = _setup(service, tmp_path, budget=10.0, quota=1.0)
    service.query(alice, "adult", ["sex = 0"], 0.25)
    batch = ["age < 30 AND sex = 1", "age >= 30 AND sex = 1", "age BETWEEN 25 AND 35"]
    out = service.cost(alice, "adult", batch, 0.25)
    # By hand: the first two are disjoint; the third meets each of them: the worst row pays 0.5 of the
    # batch, and 0.25 + 0.25 = 0.5 on the rows with sex = 0 aged 25 to 35, or sex = 1 aged 25 to 35.
    assert out.cost.batch is not None
    assert (out.cost.batch.overlap, out.cost.batch.sequential) == (pytest.approx(0.5), pytest.approx(0.75))
    assert out.spent_after == pytest.approx(0.5) and out.admissible is True
    assert out.exact and out.remaining == pytest.approx(0.75)  # small: every figure searched exactly
    assert len(service.store.charges()) == 1
    service.query(alice, "adult", batch, 0.25)
    assert service.analyst_info(alice).datasets["adult"].spent == pytest.approx(
        _brute_force_max_load(service, analyst="alice")
    )
    service.store.close()


def test_same_idempotency_key_on_two_instances_is_charged_once(ledger_url: str, tmp_path: Path) -> None:
    first = QueryService(open_ledger(ledger_url))
    alice = _setup(first, tmp_path)
    second = QueryService(open_ledger(ledger_url))
    results: list[BatchAnswer] = []
    barrier = threading.Barrier(8)

    def submit(service: QueryService) -> None:
        barrier.wait(timeout=30)
        results.append(service.query(alice, "adult", [_query(1), _query(2)], EPS, request_key="same"))

    threads = [threading.Thread(target=submit, args=(svc,)) for _ in range(4) for svc in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 8 and sum(not r.replayed for r in results) == 1
    counts = {tuple(a.answer for a in r.answers) for r in results}
    assert len(counts) == 1
    assert len(first.store.charges()) == 2 and _ledger_sum(first.store) == 2 * Fraction(EPS)
    for svc in (first, second):
        assert Fraction(svc.analyst_info(alice).datasets["adult"].spent) == 2 * Fraction(EPS)
    first.store.close()
    second.store.close()


def test_insert_many_gives_each_charge_the_seq_it_is_read_back_with(ledger_url: str, tmp_path: Path) -> None:
    # A batch's rows go in with one statement (issue 27: the admission lock was held 215 ms for a
    # 1 000-query batch inserted row by row, 18 ms now); each answer must still carry its own row's seq.
    from overlapdp.service.ledger import NewCharge

    service = QueryService(open_ledger(ledger_url))
    _setup(service, tmp_path)
    service.query(service.store.get_analyst("alice"), "adult", [_query(0)], EPS)  # a row before them  # type: ignore[arg-type]

    def charge(i: int, key: str) -> NewCharge:
        return NewCharge(
            dataset="adult",
            analyst="alice",
            kind="query",
            query={"where": _query(i)},
            mechanism={"kind": "laplace"},
            cost={"definition": "pure", "epsilon": EPS, "load": EPS},
            answer={"count": i},
            request_key=key,
            request_hash="h",
            position=i,
            id=f"{key}-{i:04d}",
        )

    with service.store.admission("adult") as tx:
        seqs = tx.insert_many([charge(i, "k1") for i in range(50)])
    assert seqs is not None and len(seqs) == 50
    back = {c.id: (c.seq, c.answer) for c in service.store.charges(analyst="alice")}
    assert [back[f"k1-{i:04d}"] for i in range(50)] == [(s, {"count": i}) for i, s in enumerate(seqs)]
    # a taken (analyst, request key, position): None, and the savepoint keeps nothing of the call
    with service.store.admission("adult") as tx, pytest.raises(RuntimeError), tx.savepoint():
        assert tx.insert_many([charge(i, "k2") for i in range(3)] + [charge(7, "k1")]) is None
        raise RuntimeError  # (what admission does on None: the request fails, its rows go)
    assert len(service.store.charges(analyst="alice")) == 51
    service.store.close()


# Eight disjoint cells of (age < 30 or not) x sex x (race 0 or not): every row is in one. Each cell
# charged twice at 0.5 puts every row at exactly 1.0, the quota, while every attribute's table holds
# four cells' charges on one value (4.0): the filter's bounds cannot show the rows within the quota,
# only a search of the whole domain can. A restart records the ledger's charges without deciding them.
_CELLS = [
    f"age {a} 30 AND sex = {s} AND race {r} 0" for a in ("<", ">=") for s in (0, 1) for r in ("=", "<>")
]


def _filled(ledger_url: str, tmp_path: Path) -> QueryService:
    service = QueryService(open_ledger(ledger_url))
    alice = _setup(service, tmp_path, budget=100.0, quota=1.0)
    for _ in range(2):
        for cell in _CELLS:
            service.query(alice, "adult", [cell], 0.5)
    with pytest.raises(QuotaExceeded):
        service.query(alice, "adult", [_CELLS[0]], 0.5)
    assert _brute_force_max_load(service, analyst="alice") == 1.0
    return service


def _known_within_after_restart(ledger_url: str) -> tuple[QueryService, bool]:
    restarted = QueryService(open_ledger(ledger_url))
    state = restarted._state("adult")
    restarted._snapshots(state, "alice")  # (what a request does first: catch up, set the quota)
    return restarted, state.analyst_filters["alice"].known_within


def test_a_restart_knows_every_row_within_the_quota_from_the_ledgers_mark(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission that filled the quota wrote a mark with its charges: the restarted filter knows
    its rows within the quota without searching the whole domain (which on hundreds of charges near
    a quota takes longer than any request: every request answered 503 after a restart), and the
    claim holds (brute force over every row). Without the mark the search would be needed."""
    service = _filled(ledger_url, tmp_path)
    service.store.close()
    from overlapdp.privacy.privacy_filter import PrivacyFilter

    def no_search(self: PrivacyFilter) -> bool:
        if not self.known_within:
            raise AssertionError("a search of the whole domain after the restart")
        return True

    monkeypatch.setattr(PrivacyFilter, "_establish_within", no_search)
    restarted, known = _known_within_after_restart(ledger_url)
    assert known
    assert _brute_force_max_load(restarted, analyst="alice") <= 1.0
    alice = restarted.store.get_analyst("alice")
    with pytest.raises(QuotaExceeded):  # full: refused with a row shown, no search of the domain
        restarted.query(alice, "adult", [_CELLS[3]], 0.5)
    restarted.store.close()


def test_a_mark_is_not_learned_under_a_lower_quota_or_past_unmarked_charges(
    ledger_url: str, tmp_path: Path
) -> None:
    """A mark proves the rows within the budget it was written under, for the charges up to it: a
    quota lowered since (rows at 1.0 over 0.75) or a charge inserted after it without an admission
    leaves the restarted filter not knowing (it searches, as before)."""
    service = _filled(ledger_url, tmp_path)
    service.set_quota("alice", "adult", 0.75)
    service.store.close()
    restarted, known = _known_within_after_restart(ledger_url)
    assert not known and _brute_force_max_load(restarted, analyst="alice") > 0.75
    restarted.set_quota("alice", "adult", 1.0)
    restarted.store.close()
    # back at 1.0 the mark holds again; then a charge recorded with no admission comes after it
    restarted, known = _known_within_after_restart(ledger_url)
    assert known
    from overlapdp.service.ledger.base import NewCharge

    restarted.store.bulk_insert(
        [
            NewCharge(
                dataset="adult",
                analyst="alice",
                kind="query",
                query={"conditions": {"sex": {"in": [0]}}},
                mechanism={"name": "laplace", "definition": "pure", "epsilon": 0.25},
                cost={"definition": "pure", "epsilon": 0.25, "load": 0.25},
                answer=None,
            )
        ]
    )
    restarted.store.close()
    again, known = _known_within_after_restart(ledger_url)
    assert not known and _brute_force_max_load(again, analyst="alice") > 1.0
    again.store.close()
