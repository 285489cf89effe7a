"""Registered data sets held in memory: schema, encoded rows and the engine that counts them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from overlapdp.engine import EncodedTable, encode_frame, exact_counts
from overlapdp.errors import DataError
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema, read_table

#: Engines the service can count with.
ENGINES = ("pandas",)


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise DataError(f"engine {engine!r} is not available; use one of {', '.join(ENGINES)}")
    return engine


@dataclass(frozen=True)
class LoadedDataset:
    """A data set ready to count: the exact counts never leave the service without noise."""

    name: str
    schema: Schema
    engine: str
    table: EncodedTable

    def counts(self, queries: Sequence[PredicateQuery]) -> list[int]:
        return exact_counts(queries, self.table)


def load_dataset(name: str, path: str | Path, schema_json: Any, engine: str) -> LoadedDataset:
    """Read and encode the file; errors name the file and the attribute, never a value."""
    check_engine(engine)
    schema = Schema.from_json(schema_json)
    frame = read_table(path)
    return LoadedDataset(name, schema, engine, encode_frame(schema, frame))
