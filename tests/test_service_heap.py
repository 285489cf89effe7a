"""The served heap: the held ledger is frozen out of the cyclic collector as it grows (service/_heap.py).

The freeze is only sound as a latency measure because the filters' state holds no reference cycles: a
dropped filter (or replica) must be freed by reference counting alone, with the collector off."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from overlapdp.errors import QuotaExceeded
from overlapdp.query import parse_where
from overlapdp.samples import adult_schema
from overlapdp.service import QueryService, _heap, open_ledger
from overlapdp.service.filters import ServiceFilter
from support.service import write_adult


@pytest.fixture
def heap() -> Iterator[None]:
    yield
    _heap.enable(0)
    gc.unfreeze()  # what the test froze goes back to the collector


def test_off_by_default_and_freezes_every_n_charges(heap: None) -> None:
    frozen = gc.get_freeze_count()
    assert not any(_heap.grew(1) for _ in range(5000))  # off: the library and tests never freeze
    assert gc.get_freeze_count() == frozen
    _heap.enable(every=10)
    verdicts = [_heap.grew(3) for _ in range(8)]  # 3, 6, 9, 12 -> freeze; 3, 6, 9, 12 -> freeze
    assert verdicts == [False, False, False, True, False, False, False, True]
    assert gc.get_freeze_count() > frozen
    with pytest.raises(ValueError):
        _heap.enable(-1)


def test_admitted_queries_and_replica_catch_ups_are_counted(heap: None, tmp_path: Path) -> None:
    """What stays held is counted: the queries of an admitted request (after the lock), and the charges a
    pooled replica catches up with; a refused request adds nothing."""
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    path, schema_json = write_adult(tmp_path)
    service.register_dataset("adult", str(path), schema_json, "pandas", "pure", 10.0)
    alice = service.authenticate(service.create_analyst("alice", {"adult": 0.25}).token)
    _heap.enable(every=6)
    frozen = gc.get_freeze_count()
    # single queries: admitted ones count; a refused one only the 2 charges its trial's replica (off
    # the lock, near the quota) caught up with, which the pool keeps
    service.query(alice, "adult", ["age < 30"], 0.1)
    service.query(alice, "adult", ["sex = 1"], 0.1)
    with pytest.raises(QuotaExceeded):
        service.query(alice, "adult", ["age < 20"], 0.1)  # 0.3 > 0.25 on young men
    service.query(alice, "adult", ["age > 60 AND sex = 0"], 0.1)
    assert gc.get_freeze_count() == frozen  # 3 held, 2 in the pooled replica
    service.query(alice, "adult", ["age BETWEEN 40 AND 50 AND sex = 0"], 0.1)  # 4 held: frozen
    assert gc.get_freeze_count() > frozen
    service.store.close()

    schema = adult_schema()
    f = ServiceFilter(schema, "pure", 10.0)
    for a in range(5):
        f.record(parse_where(schema, f"age < {30 + a}"), 0.1)
    _heap.enable(every=5)
    gc.unfreeze()
    frozen = gc.get_freeze_count()
    trial = f.trial(f.snapshot(), [(parse_where(schema, "sex = 1"), 0.1)])  # a replica catches up 5
    assert gc.get_freeze_count() > frozen
    ServiceFilter.finish(trial)


def test_a_dropped_filter_and_its_replicas_are_freed_without_the_collector() -> None:
    """Every structure a served filter builds (the library filter with its bounds, members and index,
    replicas from a trial, the exact spend's search, a recycled filter) is freed by reference counting:
    no cycle keeps it alive, so freezing it never hides garbage."""
    schema = adult_schema()
    queries = [parse_where(schema, f"age BETWEEN {a} AND {a + 9} AND sex = {a % 2}") for a in range(17, 77)]
    f = ServiceFilter(schema, "pure", 100.0)
    for q in queries[:40]:
        f.record(q, 0.5)
    batch = [(q, 0.5) for q in queries[40:]]
    trial = f.trial(f.snapshot(), batch)
    assert trial.admitted and trial.replica is not None
    sp = f.savepoint()
    assert f.settle(trial, batch)
    f.release(sp)
    f.recycle()
    ServiceFilter.finish(trial)
    # the exact search ran (the index was built); by hand: an age meets 10 ranges, 5 of each sex
    worst = max(
        sum(0.5 for a in range(17, 77) if a <= age <= a + 9 and a % 2 == sex)
        for age in range(100)
        for sex in (0, 1)
    )
    assert f.max_load() == worst == 2.5
    assert f.spend(f.snapshot()) == worst  # a replica built for a report, kept in the pool
    refs = [weakref.ref(f), weakref.ref(f._filter)] + [weakref.ref(r._filter) for r in f._pool]
    assert len(refs) >= 3
    del trial, sp  # (a savepoint names the filter it was opened on)
    was = gc.isenabled()
    gc.disable()
    try:
        del f
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        if was:
            gc.enable()
