"""The embedded ledger: one SQLite file (write-ahead log, ``synchronous=FULL``).

Admission runs under ``BEGIN IMMEDIATE``, which takes SQLite's single write lock for the whole file: a
cross-process lock that is coarser than one data set, so it also serialises several service processes
that share the file. ``synchronous=FULL`` makes each commit durable (fsync of the log) before
:meth:`~overlapdp.service.ledger.base.LedgerStore.admission` returns, hence before any answer leaves.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from overlapdp.service.ledger.base import DatasetRecord, LedgerError
from overlapdp.service.ledger.sql import SQLLedger, dataset_from_row

_DDL = (
    """CREATE TABLE IF NOT EXISTS datasets (
        name TEXT PRIMARY KEY, path TEXT NOT NULL, schema TEXT NOT NULL, engine TEXT NOT NULL,
        definition TEXT NOT NULL, budget REAL NOT NULL, created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS analysts (
        name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, quotas TEXT NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS charges (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, dataset TEXT NOT NULL,
        analyst TEXT NOT NULL, kind TEXT NOT NULL, session TEXT, request_key TEXT, request_hash TEXT,
        position INTEGER NOT NULL, query TEXT, mechanism TEXT NOT NULL, cost TEXT NOT NULL, answer TEXT,
        created_at REAL NOT NULL, load REAL NOT NULL DEFAULT 0,
        UNIQUE (analyst, request_key, position))""",
    "CREATE INDEX IF NOT EXISTS charges_dataset_seq ON charges (dataset, seq)",
    "CREATE INDEX IF NOT EXISTS charges_analyst_seq ON charges (analyst, seq)",
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, dataset TEXT NOT NULL, analyst TEXT NOT NULL, kind TEXT NOT NULL,
        params TEXT NOT NULL, state TEXT NOT NULL, closed INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL)""",  # (dataset, analyst or "" for the data set's own filter): every row of that filter's charges up
    # to seq was proven within budget by an admission (see LedgerStore.within_marks)
    """CREATE TABLE IF NOT EXISTS within_marks (
        dataset TEXT NOT NULL, analyst TEXT NOT NULL, seq INTEGER NOT NULL, budget REAL NOT NULL,
        PRIMARY KEY (dataset, analyst))""",
)


class SQLiteLedger(SQLLedger):
    """A ledger in one SQLite file; safe for threads and for several processes on one machine."""

    DDL = _DDL
    BEGIN_WRITE = "BEGIN IMMEDIATE"

    def __init__(self, path: str | Path, *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self._timeout = timeout
        if not self.path.parent.is_dir():
            raise LedgerError(f"the ledger's folder {str(self.path.parent)!r} does not exist")
        super().__init__(str(self.path))

    def _connect(self) -> Any:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the SQLite ledger {str(self.path)!r}: {exc}") from None
        return conn

    def _lock_dataset(self, conn: Any, dataset: str) -> DatasetRecord | None:
        # BEGIN IMMEDIATE already holds the file's write lock.
        row = conn.execute(
            "SELECT name, path, schema, engine, definition, budget, created_at FROM datasets WHERE name = ?",
            (dataset,),
        ).fetchone()
        return None if row is None else dataset_from_row(row)
