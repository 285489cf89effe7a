"""The embedded default: Adult's schema and a synthetic table with Adult's shape.

The schema is the integer-coded domain of UCI Adult as used by private-pgm (``data/adult-domain.json``,
every attribute ``0..size-1``). The synthetic table is sampled from a Chow-Liu
tree fitted on the public UCI Adult data; it is for demonstrations and benchmarks.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from overlapdp.schema import Schema


def adult_schema() -> Schema:
    """Adult's integer-coded domain (14 attributes, e.g. age 0..84, race 0..4, sex 0..1)."""
    text = resources.files("overlapdp").joinpath("data/adult-domain.json").read_text(encoding="utf-8")
    return Schema.from_json(json.loads(text))


def adult_raw_schema() -> Schema:
    """A schema for UCI Adult's raw file: categorical strings, integer ages and hours, binned money."""
    text = resources.files("overlapdp").joinpath("data/adult-raw-schema.json").read_text(encoding="utf-8")
    return Schema.from_json(json.loads(text))


def synthetic_adult(rows: int = 48_842, seed: int | None = 0) -> pd.DataFrame:
    """A synthetic table over :func:`adult_schema` sampled from a Chow-Liu tree fitted on public UCI Adult.

    Each attribute is drawn given its parent in the tree (``data/adult-synthetic-model.json``, made by
    ``tools/fit_synthetic_model.py``), so one-way marginals and the strongest pairwise dependencies
    (income-relationship, age-marital status, ...) look like Adult's. Not private data about anyone;
    a seed makes it reproducible (``seed=None`` draws fresh).
    """
    rng = np.random.default_rng(seed)
    schema = adult_schema()
    model = _synthetic_model()
    columns: dict[str, np.ndarray] = {}
    for name in model["order"]:
        size = schema.attribute(name).size
        parent = model["parents"][name]
        table = np.asarray(model["tables"][name], dtype=np.int64)
        if parent is None:
            counts = np.bincount(table[:, 1], weights=table[:, 2], minlength=size)
            columns[name] = rng.choice(size, size=rows, p=counts / counts.sum())
            continue
        psize = schema.attribute(parent).size
        cond = np.zeros((psize, size))
        np.add.at(cond, (table[:, 0], table[:, 1]), table[:, 2])
        marginal = cond.sum(axis=0)
        # A parent value never seen in Adult: fall back to the child's marginal.
        cond[cond.sum(axis=1) == 0] = marginal
        cdf = np.cumsum(cond / cond.sum(axis=1, keepdims=True), axis=1)
        u = rng.random(rows)
        pv = columns[parent]
        out = np.empty(rows, dtype=np.int64)
        for value in range(psize):
            sel = pv == value
            if sel.any():
                out[sel] = np.searchsorted(cdf[value], u[sel], side="right")
        columns[name] = np.minimum(out, size - 1)
    return pd.DataFrame({name: columns[name].astype(np.int64) for name in schema.names})


@cache
def _synthetic_model() -> dict[str, Any]:
    text = (
        resources.files("overlapdp").joinpath("data/adult-synthetic-model.json").read_text(encoding="utf-8")
    )
    model: dict[str, Any] = json.loads(text)
    return model
