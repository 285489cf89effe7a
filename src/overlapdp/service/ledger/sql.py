"""The SQL both ledger stores share; each store supplies connections, a lock and its dialect.

Every statement is written with ``?`` placeholders; the PostgreSQL store rewrites them to ``%s``.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from overlapdp.service.ledger.base import (
    AdmissionTransaction,
    AnalystRecord,
    ChargeRecord,
    DatasetRecord,
    LedgerError,
    LedgerStore,
    LoadRow,
    NewCharge,
    SessionRecord,
    WithinMarks,
    decode_definition,
    dumps,
    encode_definition,
    loads,
)

CHARGE_COLUMNS = (
    "seq, id, dataset, analyst, kind, session, request_key, request_hash, position, "
    "query, mechanism, cost, answer, created_at"
)
INSERT_CHARGE = (
    "INSERT INTO charges (id, dataset, analyst, kind, session, request_key, request_hash, position, "
    "query, mechanism, cost, answer, created_at, load) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
LOADS = "SELECT seq, analyst, query, load FROM charges WHERE dataset = ? AND seq > ? ORDER BY seq"
MARKS = "SELECT analyst, seq, budget FROM within_marks WHERE dataset = ?"
MARK = (
    "INSERT INTO within_marks (dataset, analyst, seq, budget) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (dataset, analyst) DO UPDATE SET seq = excluded.seq, budget = excluded.budget"
)


def _marks(rows: Sequence[Any]) -> WithinMarks:
    return {str(a): (int(s), float(b)) for a, s, b in rows}


def charge_params(c: NewCharge) -> tuple[Any, ...]:
    return (
        c.id or uuid.uuid4().hex,
        c.dataset,
        c.analyst,
        c.kind,
        c.session,
        c.request_key,
        c.request_hash,
        c.position,
        *c.encoded,
        c.created_at or time.time(),
        float(c.cost.get("load", 0.0)),
    )


def charge_from_row(row: Sequence[Any]) -> ChargeRecord:
    (seq, id_, dataset, analyst, kind, session, key, rhash, pos, query, mech, cost, answer, created) = row
    return ChargeRecord(
        seq=int(seq),
        id=str(id_),
        dataset=str(dataset),
        analyst=str(analyst),
        kind=str(kind),
        session=session,
        request_key=key,
        request_hash=rhash,
        position=int(pos),
        query=loads(query),
        mechanism=loads(mech),
        cost=loads(cost),
        answer=loads(answer),
        created_at=float(created),
    )


def dataset_from_row(row: Sequence[Any]) -> DatasetRecord:
    name, path, schema, engine, definition, budget, created = row
    defn, params = decode_definition(str(definition))
    return DatasetRecord(
        str(name), str(path), loads(schema), str(engine), defn, float(budget), float(created), params
    )


def analyst_from_row(row: Sequence[Any]) -> AnalystRecord:
    name, token_hash, quotas, revoked, created = row
    return AnalystRecord(str(name), str(token_hash), loads(quotas), bool(revoked), float(created))


def session_from_row(row: Sequence[Any]) -> SessionRecord:
    id_, dataset, analyst, kind, params, state, closed, created = row
    return SessionRecord(
        str(id_),
        str(dataset),
        str(analyst),
        str(kind),
        loads(params),
        loads(state),
        bool(closed),
        float(created),
    )


class SQLLedger(LedgerStore):
    """Shared implementation: subclasses give ``_connect``, ``_lock_dataset`` and the DDL."""

    DDL: tuple[str, ...] = ()
    BEGIN_WRITE = "BEGIN"

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._all: list[Any] = []
        self._all_lock = threading.Lock()
        with self._tx(write=True) as conn:
            for stmt in self.DDL:
                self._exec(conn, stmt)

    # -- dialect hooks --------------------------------------------------------------------------
    @abc.abstractmethod
    def _connect(self) -> Any: ...

    @abc.abstractmethod
    def _lock_dataset(self, conn: Any, dataset: str) -> DatasetRecord | None:
        """Take the data set's cross-process lock inside the open transaction and read its row."""

    def _sql(self, sql: str) -> str:
        return sql

    # -- plumbing -------------------------------------------------------------------------------
    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _exec(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(self._sql(sql), tuple(params))

    @contextmanager
    def _tx(self, *, write: bool) -> Iterator[Any]:
        conn = self._conn()
        self._exec(conn, self.BEGIN_WRITE if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            self._exec(conn, "ROLLBACK")
            raise
        self._exec(conn, "COMMIT")

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                # A connection of a finished thread may already be gone.
                with contextlib.suppress(Exception):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

    # -- admission ------------------------------------------------------------------------------
    @contextmanager
    def admission(self, dataset: str) -> Iterator[AdmissionTransaction]:
        with self._tx(write=True) as conn:
            record = self._lock_dataset(conn, dataset)
            if record is None:
                raise LedgerError(f"unknown data set {dataset!r}")
            yield _Admission(self, conn, record)

    # -- administration -------------------------------------------------------------------------
    def put_dataset(self, record: DatasetRecord) -> None:
        with self._tx(write=True) as conn:
            if self._exec(conn, "SELECT 1 FROM datasets WHERE name = ?", (record.name,)).fetchone():
                raise LedgerError(f"data set {record.name!r} is already registered")
            self._exec(
                conn,
                "INSERT INTO datasets (name, path, schema, engine, definition, budget, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.name,
                    record.path,
                    dumps(record.schema),
                    record.engine,
                    encode_definition(record.definition, record.params),
                    record.budget,
                    record.created_at or time.time(),
                ),
            )

    def set_budget(
        self, name: str, definition: str, budget: float, params: dict[str, Any] | None = None
    ) -> None:
        with self._tx(write=True) as conn:
            record = self._lock_dataset(conn, name)
            if record is None:
                raise LedgerError(f"unknown data set {name!r}")
            params = record.params if params is None else params
            if (definition, params) != (record.definition, record.params) and self._exec(
                conn, "SELECT 1 FROM charges WHERE dataset = ? LIMIT 1", (name,)
            ).fetchone():
                # The charges' loads are in the definition's amount and were admitted under its
                # parameters: read under others they could under-report (e.g. rho read as epsilon).
                raise LedgerError(
                    f"data set {name!r} already has charges under {record.definition!r}; "
                    "its privacy definition and parameters can no longer change"
                )
            self._exec(
                conn,
                "UPDATE datasets SET definition = ?, budget = ? WHERE name = ?",
                (encode_definition(definition, params), budget, name),
            )

    def get_dataset(self, name: str) -> DatasetRecord | None:
        with self._tx(write=False) as conn:
            row = self._exec(
                conn,
                "SELECT name, path, schema, engine, definition, budget, created_at FROM datasets WHERE name = ?",
                (name,),
            ).fetchone()
        return None if row is None else dataset_from_row(row)

    def list_datasets(self) -> list[DatasetRecord]:
        with self._tx(write=False) as conn:
            rows = self._exec(
                conn,
                "SELECT name, path, schema, engine, definition, budget, created_at FROM datasets ORDER BY name",
            ).fetchall()
        return [dataset_from_row(r) for r in rows]

    def put_analyst(self, record: AnalystRecord) -> None:
        with self._tx(write=True) as conn:
            if self._exec(conn, "SELECT 1 FROM analysts WHERE name = ?", (record.name,)).fetchone():
                raise LedgerError(f"analyst {record.name!r} already exists")
            self._exec(
                conn,
                "INSERT INTO analysts (name, token_hash, quotas, revoked, created_at) VALUES (?, ?, ?, ?, ?)",
                (
                    record.name,
                    record.token_hash,
                    dumps(record.quotas),
                    int(record.revoked),
                    record.created_at or time.time(),
                ),
            )

    def set_quota(self, analyst: str, dataset: str, quota: float) -> None:
        with self._tx(write=True) as conn:
            if self._lock_dataset(conn, dataset) is None:
                raise LedgerError(f"unknown data set {dataset!r}")
            row = self._exec(conn, "SELECT quotas FROM analysts WHERE name = ?", (analyst,)).fetchone()
            if row is None:
                raise LedgerError(f"unknown analyst {analyst!r}")
            quotas = dict(loads(row[0]))
            quotas[dataset] = quota
            self._exec(conn, "UPDATE analysts SET quotas = ? WHERE name = ?", (dumps(quotas), analyst))

    def revoke(self, analyst: str) -> None:
        with self._tx(write=True) as conn:
            cur = self._exec(conn, "UPDATE analysts SET revoked = 1 WHERE name = ?", (analyst,))
            if cur.rowcount == 0:
                raise LedgerError(f"unknown analyst {analyst!r}")

    def rotate_token(self, analyst: str, token_hash: str) -> None:
        with self._tx(write=True) as conn:
            cur = self._exec(
                conn, "UPDATE analysts SET token_hash = ?, revoked = 0 WHERE name = ?", (token_hash, analyst)
            )
            if cur.rowcount == 0:
                raise LedgerError(f"unknown analyst {analyst!r}")

    _ANALYST = "SELECT name, token_hash, quotas, revoked, created_at FROM analysts"

    def analyst_by_token_hash(self, token_hash: str) -> AnalystRecord | None:
        with self._tx(write=False) as conn:
            row = self._exec(conn, self._ANALYST + " WHERE token_hash = ?", (token_hash,)).fetchone()
        return None if row is None else analyst_from_row(row)

    def get_analyst(self, name: str) -> AnalystRecord | None:
        with self._tx(write=False) as conn:
            row = self._exec(conn, self._ANALYST + " WHERE name = ?", (name,)).fetchone()
        return None if row is None else analyst_from_row(row)

    def list_analysts(self) -> list[AnalystRecord]:
        with self._tx(write=False) as conn:
            rows = self._exec(conn, self._ANALYST + " ORDER BY name").fetchall()
        return [analyst_from_row(r) for r in rows]

    def charges(
        self,
        *,
        dataset: str | None = None,
        analyst: str | None = None,
        after: int = 0,
        limit: int | None = None,
    ) -> list[ChargeRecord]:
        sql = f"SELECT {CHARGE_COLUMNS} FROM charges WHERE seq > ?"
        params: list[Any] = [after]
        if dataset is not None:
            sql += " AND dataset = ?"
            params.append(dataset)
        if analyst is not None:
            sql += " AND analyst = ?"
            params.append(analyst)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._tx(write=False) as conn:
            rows = self._exec(conn, sql, params).fetchall()
        return [charge_from_row(r) for r in rows]

    def is_recorded(self, analyst: str, request_key: str) -> bool:
        sql = "SELECT 1 FROM charges WHERE analyst = ? AND request_key = ? LIMIT 1"
        with self._tx(write=False) as conn:
            return self._exec(conn, sql, (analyst, request_key)).fetchone() is not None

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self._tx(write=False) as conn:
            return _read_session(self, conn, session_id)

    def loads_since(self, dataset: str, seq: int) -> list[LoadRow]:
        with self._tx(write=False) as conn:
            rows = self._exec(conn, LOADS, (dataset, seq)).fetchall()
        return [(int(a), str(b), c, float(d)) for a, b, c, d in rows]

    def within_marks(self, dataset: str) -> WithinMarks:
        with self._tx(write=False) as conn:
            return _marks(self._exec(conn, MARKS, (dataset,)).fetchall())

    def bulk_insert(self, charges: Sequence[NewCharge]) -> None:
        by_dataset = sorted({c.dataset for c in charges})
        with self._tx(write=True) as conn:
            for name in by_dataset:
                if self._lock_dataset(conn, name) is None:
                    raise LedgerError(f"unknown data set {name!r}")
            self._executemany(conn, INSERT_CHARGE, [charge_params(c) for c in charges])

    def _executemany(self, conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        conn.executemany(self._sql(sql), rows)


_SESSION = "SELECT id, dataset, analyst, kind, params, state, closed, created_at FROM sessions WHERE id = ?"


def _read_session(store: SQLLedger, conn: Any, session_id: str) -> SessionRecord | None:
    row = store._exec(conn, _SESSION, (session_id,)).fetchone()
    return None if row is None else session_from_row(row)


class _Admission(AdmissionTransaction):
    def __init__(self, store: SQLLedger, conn: Any, record: DatasetRecord) -> None:
        self._store = store
        self._conn = conn
        self._record = record

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._store._exec(self._conn, sql, params)

    def dataset(self) -> DatasetRecord:
        return self._record

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self._exec("SAVEPOINT admit_one")
        try:
            yield
        except BaseException:
            self._exec("ROLLBACK TO SAVEPOINT admit_one")
            self._exec("RELEASE SAVEPOINT admit_one")
            raise
        self._exec("RELEASE SAVEPOINT admit_one")

    def analyst(self, name: str) -> AnalystRecord | None:
        row = self._exec(SQLLedger._ANALYST + " WHERE name = ?", (name,)).fetchone()
        return None if row is None else analyst_from_row(row)

    def charges_since(self, seq: int) -> list[ChargeRecord]:
        rows = self._exec(
            f"SELECT {CHARGE_COLUMNS} FROM charges WHERE dataset = ? AND seq > ? ORDER BY seq",
            (self._record.name, seq),
        ).fetchall()
        return [charge_from_row(r) for r in rows]

    def loads_since(self, seq: int) -> list[LoadRow]:
        rows = self._exec(LOADS, (self._record.name, seq)).fetchall()
        return [(int(a), str(b), c, float(d)) for a, b, c, d in rows]

    def within_marks(self) -> WithinMarks:
        return _marks(self._exec(MARKS, (self._record.name,)).fetchall())

    def mark_within(self, analyst: str, seq: int, budget: float) -> None:
        self._exec(MARK, (self._record.name, analyst, seq, budget))

    def find_request(self, analyst: str, request_key: str) -> list[ChargeRecord]:
        rows = self._exec(
            f"SELECT {CHARGE_COLUMNS} FROM charges WHERE analyst = ? AND request_key = ? ORDER BY position",
            (analyst, request_key),
        ).fetchall()
        return [charge_from_row(r) for r in rows]

    def insert(self, charge: NewCharge) -> ChargeRecord | None:
        params = charge_params(charge)
        row = self._exec(INSERT_CHARGE + " ON CONFLICT DO NOTHING RETURNING seq", params).fetchone()
        if row is None:
            return None
        return charge_from_row((row[0], *params[:-1]))

    def insert_many(self, charges: Sequence[NewCharge]) -> list[int] | None:
        name = self._record.name
        if not all(c.id and c.dataset == name for c in charges):
            return super().insert_many(charges)
        params = [charge_params(c) for c in charges]
        # This transaction holds the data set's lock: every row of it after ``top`` is one of these.
        top = self._exec("SELECT COALESCE(MAX(seq), 0) FROM charges WHERE dataset = ?", (name,)).fetchone()[0]
        self._store._executemany(self._conn, INSERT_CHARGE + " ON CONFLICT DO NOTHING", params)
        rows = self._exec("SELECT id, seq FROM charges WHERE dataset = ? AND seq > ?", (name, top)).fetchall()
        seq_of = {str(i): int(s) for i, s in rows}
        if len(seq_of) != len(params):
            return None  # one was already taken (an idempotency key used concurrently)
        return [seq_of[p[0]] for p in params]

    def session(self, session_id: str) -> SessionRecord | None:
        return _read_session(self._store, self._conn, session_id)

    def insert_session(self, session: SessionRecord) -> None:
        self._exec(
            "INSERT INTO sessions (id, dataset, analyst, kind, params, state, closed, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session.id,
                session.dataset,
                session.analyst,
                session.kind,
                dumps(session.params),
                dumps(session.state),
                int(session.closed),
                session.created_at or time.time(),
            ),
        )

    def update_session(self, session: SessionRecord) -> None:
        self._exec(
            "UPDATE sessions SET state = ?, closed = ? WHERE id = ?",
            (dumps(session.state), int(session.closed), session.id),
        )
