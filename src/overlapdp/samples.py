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


# -- decoding the integer codes to Adult's labels --------------------------------------------------------
# private-pgm's coding (checked against the UCI file, /work/shared/data README): categorical codes follow
# the order of the values in UCI's adult.names, with one extra last code for a missing value ('?');
# age is years - 16, hours-per-week is hours - 1, education-num is the number - 1; fnlwgt, capital-gain
# and capital-loss are 100 equal-width bins over Adult's range (bin 0 of the two capital columns holds
# almost only zeros).
_NAMES_ORDER: dict[str, list[str]] = {
    "workclass": [
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
        "Without-pay", "Never-worked",
    ],
    "marital-status": [
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
        "Married-spouse-absent", "Married-AF-spouse",
    ],
    "occupation": [
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
        "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
        "Priv-house-serv", "Protective-serv", "Armed-Forces",
    ],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native-country": [
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
        "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
        "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
        "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
        "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ],
    "income>50K": ["<=50K", ">50K"],
}  # fmt: skip
_EDUCATION = [
    "Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
    "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school", "Doctorate",
]  # fmt: skip
# (lowest, highest) value in UCI Adult (train and test) of the three columns coded as 100 bins.
_BINNED_RANGE = {"fnlwgt": (12_285, 1_490_400), "capital-gain": (0, 99_999), "capital-loss": (0, 4_356)}
_OFFSET = {"age": 16, "education-num": 1, "hours-per-week": 1}


def decode_adult(frame: pd.DataFrame) -> pd.DataFrame:
    """Adult's integer codes (:func:`adult_schema`) as UCI's own labels and numbers (:func:`adult_raw_schema`).

    Categories become their strings (``sex`` 0 -> ``'Female'``), a missing-value code an empty cell as
    in UCI's file; ages, hours and education numbers become years, hours and 1..16, with ``education``
    added from ``education-num``; the three binned money columns become a representative value of their
    bin (its midpoint, 0 for bin 0), which falls in the raw schema's coarser bin in all but a few edge
    cases. Columns are renamed and ordered as :func:`adult_raw_schema`.
    """
    coded = adult_schema()
    out: dict[str, Any] = {}
    for name in coded.names:
        codes = frame[name].to_numpy(dtype=np.int64)
        if name in _NAMES_ORDER:
            labels = np.array([*_NAMES_ORDER[name], None], dtype=object)
            # Codes past the listed values (the extra "missing" code) all read as missing.
            out[name] = labels[np.minimum(codes, len(labels) - 1)]
        elif name in _OFFSET:
            out[name] = codes + _OFFSET[name]
        elif name in _BINNED_RANGE:
            lo, hi = _BINNED_RANGE[name]
            width = (hi - lo) / coded.attribute(name).size
            mid = np.rint(lo + (codes + 0.5) * width).astype(np.int64)
            out[name] = mid if name == "fnlwgt" else np.where(codes == 0, 0, mid)
        else:  # pragma: no cover - every coded attribute is listed above
            raise AssertionError(name)
    out["education"] = np.array(_EDUCATION, dtype=object)[out["education-num"] - 1]
    raw = adult_raw_schema()
    renamed = {n.replace("-", "_"): v for n, v in out.items()}
    renamed["income"] = renamed.pop("income>50K")
    return pd.DataFrame({name: renamed[name] for name in raw.names})


def synthetic_adult_labelled(rows: int = 48_842, seed: int | None = 0) -> pd.DataFrame:
    """:func:`synthetic_adult` decoded to UCI Adult's labels (:func:`decode_adult`), over
    :func:`adult_raw_schema`: what the demo serves by default."""
    return decode_adult(synthetic_adult(rows, seed=seed))
