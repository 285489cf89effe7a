"""The embedded default: Adult's schema and a synthetic table with Adult's shape.

The schema is the integer-coded domain of UCI Adult as used by private-pgm (``data/adult-domain.json``,
every attribute ``0..size-1``). The synthetic table is drawn from hand-set marginals with a few
dependencies (income rises with education and hours); it is for demonstrations and benchmarks only and
carries no information about real people.
"""

from __future__ import annotations

import json
from importlib import resources

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
    """A synthetic table over :func:`adult_schema` (not private data; a seed makes it reproducible)."""
    rng = np.random.default_rng(seed)
    sizes = dict(zip(adult_schema().names, adult_schema().sizes, strict=True))

    def skewed(name: str, weights: list[float]) -> np.ndarray:
        p = np.asarray(weights, dtype=float)
        p = np.concatenate([p, np.full(sizes[name] - len(p), p.min() / 4)]) if len(p) < sizes[name] else p
        return rng.choice(sizes[name], size=rows, p=p / p.sum())

    age = np.clip(rng.gamma(5.5, 4.0, rows) + 4, 0, sizes["age"] - 1).astype(int)
    education = np.clip(rng.normal(9.5, 2.5, rows), 0, sizes["education-num"] - 1).astype(int)
    hours = np.clip(rng.normal(39, 11, rows), 0, sizes["hours-per-week"] - 1).astype(int)
    sex = (rng.random(rows) < 0.67).astype(int)
    score = 0.35 * (education - 9) + 0.05 * (hours - 40) + 0.04 * (np.minimum(age, 45) - 25) + 0.6 * sex - 2.2
    income = (rng.random(rows) < 1 / (1 + np.exp(-score))).astype(int)
    gain = np.where(rng.random(rows) < 0.08, rng.integers(1, sizes["capital-gain"], rows), 0)
    loss = np.where(rng.random(rows) < 0.05, rng.integers(1, sizes["capital-loss"], rows), 0)
    frame = pd.DataFrame(
        {
            "age": age,
            "workclass": skewed("workclass", [70, 8, 6, 4, 3, 3, 1, 1, 4]),
            "fnlwgt": np.clip(rng.normal(35, 15, rows), 0, sizes["fnlwgt"] - 1).astype(int),
            "education-num": education,
            "marital-status": skewed("marital-status", [46, 33, 14, 3, 3, 1, 0.5]),
            "occupation": skewed("occupation", [13, 12, 12, 12, 11, 10, 6, 6, 5, 4, 3, 3, 2, 1, 0.5]),
            "relationship": skewed("relationship", [40, 26, 16, 10, 5, 3]),
            "race": skewed("race", [85, 10, 3, 1, 1]),
            "sex": sex,
            "capital-gain": gain,
            "capital-loss": loss,
            "hours-per-week": hours,
            "native-country": skewed("native-country", [90, 2, 1, 1, 1, 0.5, 0.5]),
            "income>50K": income,
        }
    )
    return frame
