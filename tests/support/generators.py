"""Workload generators drawn the way an outside reviewer would (shared/TESTING.md: never one generator).

``mixed(kind, t, seed)`` draws ``t`` predicate queries over a schema (Adult's by default), each on 2-5
attributes: value sets on the categorical attributes, ranges on the ordered ones, with the widths of
``kind``:

- ``narrow``: ranges up to a tenth of the attribute, 1-3 values;
- ``wide``: half of the attribute up to all but one value;
- ``half``: exactly half of every attribute;
- ``skewed``: value sets and range centres drawn with Zipf weights (popular values shared);
- ``uniform``: random endpoints and random value sets (the benchmarks' historical generator);
- ``adult``: around a random row of the real Adult data (``../shared/data``; ``uniform`` without it);
- ``third``: on any attribute, a range of up to a third of it or a set of 3 values, evenly (the
  service benchmark's mixed queries, ``benchmarks/service.py``).

``constrained(kind, names, t, seed, sets=...)`` draws queries on a fixed list of attributes instead (each
constrained with probability 0.7): ranges on every one (categorical attributes read as value indices:
boxes), or value sets on the categorical ones. It also takes ``up-to-half`` (``BOX_KINDS``): 1 value up
to half of the attribute, the issue 22 reviewer's "wide ranges".
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from overlapdp.query import PredicateQuery
from overlapdp.samples import adult_schema
from overlapdp.schema import IndexSet, Schema

ADULT = adult_schema()
CATEGORICAL = frozenset(
    {"workclass", "marital-status", "occupation", "relationship", "race", "sex", "native-country"}
)
KINDS = ("narrow", "wide", "half", "skewed", "uniform", "adult", "third")
BOX_KINDS = ("narrow", "wide", "half", "skewed", "uniform", "adult", "up-to-half")


@cache
def adult_rows() -> np.ndarray | None:
    """The integer-coded Adult rows (shared/data), or None when the data is not beside the checkout."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        path = parent / "shared" / "data" / "adult" / "adult.csv"
        if path.is_file():
            import pandas as pd

            return pd.read_csv(path).to_numpy()
    return None


def _coverage(
    kind: str, name: str, size: int, rng: np.random.Generator, anchor: int | None, *, sets: bool = True
) -> IndexSet:
    cat = sets and name in CATEGORICAL
    if kind == "narrow":
        if cat:
            m = int(rng.integers(1, min(3, size) + 1))
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
        w = int(rng.integers(1, max(2, size // 10 + 1)))
        a = int(rng.integers(0, size - w + 1))
        return IndexSet.interval(a, a + w)
    if kind == "wide":
        if cat:
            m = int(rng.integers(max(1, size // 2), size)) if size > 2 else 1
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
        w = int(rng.integers(max(1, size // 2), size))
        a = int(rng.integers(0, size - w + 1))
        return IndexSet.interval(a, a + w)
    if kind == "half":
        m = max(1, size // 2)
        if cat:
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
        a = int(rng.integers(0, size - m + 1))
        return IndexSet.interval(a, a + m)
    if kind == "up-to-half":
        m = int(rng.integers(1, max(2, size // 2 + 1)))
        if cat:
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
        a = int(rng.integers(0, size - m + 1))
        return IndexSet.interval(a, a + m)
    if kind == "skewed":
        p = 1.0 / np.arange(1, size + 1) ** 1.5
        p /= p.sum()
        if cat:
            m = min(size, int(rng.integers(1, max(2, size // 2 + 1))))
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False, p=p).tolist())
        c = int(rng.choice(size, p=p))
        w = int(rng.integers(1, max(2, size // 3)))
        a = max(0, min(size - w, c - w // 2))
        return IndexSet.interval(a, a + w)
    if kind == "third":
        if size > 4 and rng.random() < 0.5:
            a = int(rng.integers(0, size - 1))
            w = int(rng.integers(1, max(1, (size - 1) // 3) + 1))
            return IndexSet.interval(a, min(size - 1, a + w) + 1)
        return IndexSet.from_indices(rng.choice(size, size=min(size, 3), replace=False).tolist())
    if kind == "uniform" or anchor is None:
        if cat:
            m = int(rng.integers(1, max(2, size)))
            return IndexSet.from_indices(rng.choice(size, size=m, replace=False).tolist())
        lo, hi = sorted(rng.integers(0, size, 2).tolist())
        return IndexSet.interval(lo, hi + 1)
    if kind == "adult":
        if cat:
            m = int(rng.integers(1, max(2, size // 2 + 1)))
            others = [v for v in range(size) if v != anchor]
            pick = [anchor, *rng.choice(others, size=min(m - 1, len(others)), replace=False).tolist()]
            return IndexSet.from_indices(sorted(pick))
        w = int(rng.integers(1, max(2, size // 4)))
        a = max(0, min(size - w, anchor - int(rng.integers(0, w))))
        return IndexSet.interval(a, a + w)
    raise ValueError(f"unknown generator {kind!r}")


def mixed(
    kind: str, t: int, seed: int, *, schema: Schema = ADULT, lo: int = 2, hi: int = 5, prefix: str = "q"
) -> list[PredicateQuery]:
    """``t`` queries of generator ``kind`` (module docstring), on ``lo``-``hi`` attributes each."""
    rng = np.random.default_rng(seed)
    names = [a.name for a in schema.attributes]
    data = adult_rows() if kind == "adult" and schema is ADULT else None
    out = []
    for i in range(t):
        k = int(rng.integers(lo, min(hi, len(names)) + 1))
        row = None if data is None else data[int(rng.integers(0, len(data)))]
        covs: dict[str, IndexSet] = {}
        for j in sorted(rng.choice(len(names), size=k, replace=False).tolist()):
            anchor = None if row is None else int(row[j])
            covs[names[j]] = _coverage(kind, names[j], schema.attributes[j].size, rng, anchor)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"{prefix}{i}"))
    return out


def constrained(
    kind: str, names: list[str], t: int, seed: int, *, sets: bool, schema: Schema = ADULT
) -> list[PredicateQuery]:
    """``t`` queries each constraining each of ``names`` with probability 0.7, with the widths of ``kind``
    (``BOX_KINDS``): a range on every attribute (``sets`` False: boxes), or value sets on the
    categorical ones."""
    rng = np.random.default_rng(seed)
    data = adult_rows() if kind == "adult" and schema is ADULT else None
    out = []
    for i in range(t):
        row = None if data is None else data[int(rng.integers(0, len(data)))]
        covs: dict[str, IndexSet] = {}
        for n in names:
            if rng.random() < 0.7:
                p = schema.position(n)
                anchor = None if row is None else int(row[p])
                covs[n] = _coverage(kind, n, schema.attributes[p].size, rng, anchor, sets=sets)
        out.append(PredicateQuery.from_coverages(schema, covs, id=f"q{i}"))
    return out


def random_coverages(
    rng: np.random.Generator, schema: Schema, ranges: float = 0.35, sets: float = 0.25, empty: float = 0.0
) -> dict[str, IndexSet]:
    """Per attribute: a range (``ranges``), an arbitrary value set (``sets``), an empty set (``empty``: a
    contradiction, no row) or no condition (the rest), for small-domain brute-force tests (value sets
    break the Helly property: queries that meet pairwise may share no row). One ``rng.random()`` per
    attribute, then the draws of its condition."""
    covs: dict[str, IndexSet] = {}
    for a in schema.attributes:
        r = rng.random()
        if r < ranges:
            lo, hi = sorted(rng.integers(0, a.size, 2).tolist())
            covs[a.name] = IndexSet.interval(lo, hi + 1)
        elif r < ranges + sets:
            m = int(rng.integers(1, a.size + 1))
            covs[a.name] = IndexSet.from_indices(sorted(rng.choice(a.size, size=m, replace=False).tolist()))
        elif r < ranges + sets + empty:
            covs[a.name] = IndexSet.empty()
    return covs
