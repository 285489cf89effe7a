"""OverlapIndex after any random sequence of add / peek / remove equals a fresh brute-force computation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlapdp.overlap import (
    CompError,
    DuplicateQueryError,
    OverlapIndex,
    SchemaMismatchError,
    SetComp,
    UnknownQueryError,
    WeightError,
    brute_force_overlap,
)
from overlapdp.query import PredicateQuery, parse_where
from overlapdp.schema import IntAttribute, Schema
from strategies import schemas, where_clauses
from support.overlap import check_result, truth, weights_st


@given(
    st.data(),
    st.sampled_from(["count", "sum", "l2", "vector"]),
    st.sampled_from([1 << 22, 1]),
)
def test_index_matches_fresh_computation(data: st.DataObject, comp: str, dense_limit: int) -> None:
    """dense_limit=1 forces the generic mode (restricted recomputation) from the first attribute on."""
    schema = data.draw(schemas())
    k = data.draw(st.integers(1, 3))
    index = OverlapIndex(schema, comp, dense_limit=dense_limit)
    held: dict[str, tuple[PredicateQuery, Any]] = {}
    counter = 0
    for _ in range(data.draw(st.integers(1, 12))):
        op = data.draw(st.sampled_from(["add", "add", "peek", "remove"]))
        if op == "remove" and held:
            qid = data.draw(st.sampled_from(sorted(held)))
            index.remove(qid)
            del held[qid]
        elif op in ("add", "peek"):
            q = parse_where(schema, data.draw(where_clauses(schema)), id=f"q{counter}")
            counter += 1
            w: Any = [data.draw(weights_st) for _ in range(k)] if comp == "vector" else data.draw(weights_st)
            queries = [p for p, _ in held.values()] + [q]
            weights = [v for _, v in held.values()] + [w]
            r = index.add(q, w) if op == "add" else index.peek(q, w)
            check_result(index, queries, weights, comp, r)
            if op == "add":
                held[q.id] = (q, w)  # type: ignore[index]
        queries = [p for p, _ in held.values()]
        weights = [v for _, v in held.values()]
        assert len(index) == len(held)
        assert all(qid in index for qid in held)
        check_result(index, queries, weights, comp, index.result())


def test_index_bad_input() -> None:
    schema = Schema((IntAttribute("a", 0, 9),))
    index = OverlapIndex(schema, "sum")
    q = parse_where(schema, "a < 5", id="x")
    index.add(q, 1.0)
    with pytest.raises(DuplicateQueryError):
        index.add(q, 1.0)
    with pytest.raises(DuplicateQueryError):
        index.add(parse_where(schema, "a < 5"), 1.0)
    with pytest.raises(UnknownQueryError):
        index.remove("nope")
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(WeightError):
            index.peek(parse_where(schema, "a > 2", id="y"), bad)
    with pytest.raises(SchemaMismatchError):
        index.add(parse_where(Schema((IntAttribute("a", 0, 3),)), "a < 2", id="z"))
    vec = OverlapIndex(schema, "vector")
    vec.add(q, [1.0, 2.0])
    with pytest.raises(WeightError, match="length 3"):
        vec.add(parse_where(schema, "a > 2", id="y"), [1.0, 2.0, 3.0])
    with pytest.raises(CompError):
        vec.add(parse_where(schema, "a > 2", id="y"))
    with pytest.raises(CompError):
        OverlapIndex(schema, "median")


def test_index_empty_and_rollback() -> None:
    schema = Schema((IntAttribute("a", 0, 9), IntAttribute("b", 0, 9)))
    index = OverlapIndex(schema, "sum")
    assert index.value == 0.0 and index.witness is None and len(index) == 0
    a = parse_where(schema, "a < 5", id="a", weight=1.0)
    b = parse_where(schema, "a > 3 AND b < 2", id="b", weight=2.0)
    assert index.add(a).value == 1.0
    assert index.peek(b).value == 3.0
    assert index.value == 1.0
    index.add(b)
    assert index.value == 3.0 and set(index.result().queries) == {"a", "b"}
    index.remove("b")
    assert index.value == 1.0 and index.result().queries == ("a",)
    index.remove("a")
    assert index.value == 0.0 and index.witness is None


@pytest.mark.parametrize("big", [2.0**60, 1e17, 3e16])
def test_removing_a_huge_weight_does_not_erase_small_loads(big: float) -> None:
    # Float cancellation: (1 + big) - big is 0 in floats when big >= 2^53. The index must still find
    # the row that pays 1 after the big query is removed (brute force over every row is the truth).
    schema = Schema((IntAttribute("a", 0, 9), IntAttribute("b", 0, 3)))
    small = parse_where(schema, "a >= 5 AND b = 2", id="small")
    huge = parse_where(schema, "a >= 0", id="huge")
    for comp in ("sum", "l2", "vector"):
        index = OverlapIndex(schema, comp)
        w_small: Any = [1.0, 0.5] if comp == "vector" else 1.0
        w_huge: Any = [big, big] if comp == "vector" else big
        index.add(small, w_small)
        index.add(huge, w_huge)
        index.remove("huge")
        r = index.result()
        check_result(index, [small], [w_small], comp, r)
        assert np.all(np.asarray(r.value) == np.asarray(truth([small], [w_small], comp)))


@given(st.data())
def test_index_with_set_comp(data: st.DataObject) -> None:
    """A SetComp index (recomputation) agrees with brute force; indices follow insertion order."""
    schema = data.draw(schemas())
    comp = SetComp(value=lambda idx: math.sqrt(len(idx)), upper=lambda idx: math.sqrt(len(idx)))
    index = OverlapIndex(schema, comp)
    held: list[PredicateQuery] = []
    for i in range(data.draw(st.integers(1, 6))):
        q = parse_where(schema, data.draw(where_clauses(schema)), id=f"q{i}")
        peeked = index.peek(q)
        assert float(peeked.value) == pytest.approx(math.sqrt(float(brute_force_overlap([*held, q]).value)))
        index.add(q)
        held.append(q)
        if data.draw(st.booleans()):
            gone = held.pop(data.draw(st.integers(0, len(held) - 1)))
            index.remove(gone.id)  # type: ignore[arg-type]
        assert index.ids() == [h.id for h in held]
        want = math.sqrt(float(brute_force_overlap(held).value)) if held else 0.0
        assert float(index.value) == pytest.approx(want)
