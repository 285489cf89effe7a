"""The shared ledger: PostgreSQL (psycopg 3), for several service instances on one ledger.

Admission locks the data set's row with ``SELECT ... FOR UPDATE`` at READ COMMITTED: every instance
that admits a charge on the same data set waits for the previous commit, and each later statement of
the transaction sees every charge committed before the lock was granted (so the catch-up read is
complete). A commit returns only once the write-ahead log is flushed (``synchronous_commit`` on, the
default), before any answer leaves.
"""

from __future__ import annotations

from typing import Any

from overlapdp.service.ledger.base import DatasetRecord, LedgerError
from overlapdp.service.ledger.sql import SQLLedger, dataset_from_row

_DDL = (
    # Two instances starting together must not race on CREATE TABLE IF NOT EXISTS.
    "SELECT pg_advisory_xact_lock(7317042)",
    """CREATE TABLE IF NOT EXISTS datasets (
        name TEXT PRIMARY KEY, path TEXT NOT NULL, schema TEXT NOT NULL, engine TEXT NOT NULL,
        definition TEXT NOT NULL, budget DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS analysts (
        name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, quotas TEXT NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0, created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS charges (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE,
        dataset TEXT NOT NULL, analyst TEXT NOT NULL, kind TEXT NOT NULL, session TEXT,
        request_key TEXT, request_hash TEXT, position INTEGER NOT NULL, query TEXT,
        mechanism TEXT NOT NULL, cost TEXT NOT NULL, answer TEXT,
        created_at DOUBLE PRECISION NOT NULL, load DOUBLE PRECISION NOT NULL DEFAULT 0,
        UNIQUE (analyst, request_key, position))""",
    "CREATE INDEX IF NOT EXISTS charges_dataset_seq ON charges (dataset, seq)",
    "CREATE INDEX IF NOT EXISTS charges_analyst_seq ON charges (analyst, seq)",
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, dataset TEXT NOT NULL, analyst TEXT NOT NULL, kind TEXT NOT NULL,
        params TEXT NOT NULL, state TEXT NOT NULL, closed INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL)""",  # (dataset, analyst or "" for the data set's own filter): every row of that filter's charges up
    # to seq was proven within budget by an admission (see LedgerStore.within_marks)
    """CREATE TABLE IF NOT EXISTS within_marks (
        dataset TEXT NOT NULL, analyst TEXT NOT NULL, seq BIGINT NOT NULL, budget DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (dataset, analyst))""",
)


class PostgresLedger(SQLLedger):
    """A ledger in a PostgreSQL database given by a ``postgresql://`` URL."""

    DDL = _DDL

    def __init__(self, url: str) -> None:
        try:
            import psycopg  # noqa: F401  (checked here so a missing driver is a clear error)
        except ImportError:  # psycopg is the 'postgres' extra
            raise LedgerError(
                "the PostgreSQL ledger needs the 'postgres' extra: pip install 'overlapdp[postgres]'"
            ) from None
        super().__init__(url)

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            # The message may contain the host and user but never the password (psycopg masks it).
            raise LedgerError(f"cannot connect to the PostgreSQL ledger: {exc}".splitlines()[0]) from None

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _lock_dataset(self, conn: Any, dataset: str) -> DatasetRecord | None:
        row = conn.execute(
            "SELECT name, path, schema, engine, definition, budget, created_at FROM datasets "
            "WHERE name = %s FOR UPDATE",
            (dataset,),
        ).fetchone()
        return None if row is None else dataset_from_row(row)

    def _executemany(self, conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with conn.cursor() as cur:
            cur.executemany(self._sql(sql), rows)
