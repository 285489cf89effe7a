"""The durable ledger of charges: SQLite by default, PostgreSQL for several service instances."""

from __future__ import annotations

from pathlib import Path

from overlapdp.service.ledger.base import (
    AdmissionTransaction,
    AnalystRecord,
    ChargeRecord,
    DatasetRecord,
    IdempotencyConflict,
    LedgerError,
    LedgerStore,
    NewCharge,
    SessionRecord,
)
from overlapdp.service.ledger.sqlite import SQLiteLedger


def open_ledger(url: str | Path) -> LedgerStore:
    """``postgresql://...`` opens a PostgreSQL ledger; anything else (or ``sqlite:///path``) a SQLite file."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        from overlapdp.service.ledger.postgres import PostgresLedger

        return PostgresLedger(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") - 1 :]
    return SQLiteLedger(text)


__all__ = [
    "AdmissionTransaction",
    "AnalystRecord",
    "ChargeRecord",
    "DatasetRecord",
    "IdempotencyConflict",
    "LedgerError",
    "LedgerStore",
    "NewCharge",
    "SQLiteLedger",
    "SessionRecord",
    "open_ledger",
]
