"""Atoms are exact: a query covers a value iff it covers the value's atom, and merged atoms are alike."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from overlapdp.overlap import compute_atoms
from overlapdp.query import parse_where
from strategies import schemas, where_clauses


@given(st.data())
def test_atoms_preserve_coverage(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    queries = [
        parse_where(schema, data.draw(where_clauses(schema))) for _ in range(data.draw(st.integers(1, 6)))
    ]
    atoms = compute_atoms(queries)
    for a in atoms.attributes:
        n = schema.attributes[a.position].size
        assert a.value_atom.shape == (n,)
        assert set(a.value_atom.tolist()) == set(range(a.size))
        for i, q in enumerate(queries):
            cov = q.coverage(a.position)
            for v in range(n):
                assert (v in cov) == (int(a.value_atom[v]) in a.query_atoms[i])
        # Values in one atom are alike for every query; values in different atoms differ for some query.
        sig = {v: tuple(v in q.coverage(a.position) for q in queries) for v in range(n)}
        for v, w in itertools.combinations(range(n), 2):
            same_atom = a.value_atom[v] == a.value_atom[w]
            if same_atom:
                assert sig[v] == sig[w]
            if any(len(q.coverage(a.position).intervals) > 1 for q in queries) and sig[v] == sig[w]:
                assert same_atom
        for t in range(a.size):
            assert a.value_atom[a.representative[t]] == t
    # Every active attribute is constrained by some query; the rest are dropped.
    assert set(atoms.active) == {p for q in queries for p in q.active}
