"""The ledger's records and the one interface both stores (SQLite, PostgreSQL) implement.

DESIGN.md, "Rules that keep it sound": the ledger records a charge durably BEFORE the answer leaves the
process, and admission and charge are one atomic step. Stores give this with :meth:`LedgerStore.admission`:
one transaction that holds a cross-process lock on one data set (SQLite ``BEGIN IMMEDIATE``, PostgreSQL
``SELECT ... FOR UPDATE`` on the data set's row) from the catch-up read to the commit of the new charges.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from overlapdp.errors import IdempotencyConflict as IdempotencyConflict
from overlapdp.errors import LedgerError as LedgerError

#: What rebuilding the filters needs of one charge: (seq, analyst, query JSON text or None, load).
LoadRow = tuple[int, str, str | None, float]
#: Per filter (an analyst's name, "" for the data set's own): ``(seq, budget)``, every row of the
#: filter's charges up to ``seq`` proven within ``budget`` by the admission that wrote it.
WithinMarks = dict[str, tuple[int, float]]


@dataclass(frozen=True)
class DatasetRecord:
    """A registered data set: where its rows live, its schema, engine and global budget; ``params``: its
    definition's fixed parameters (``delta``, tCDP's ``omega``, RDP's ``alpha``, ...), stored with the
    definition (:func:`encode_definition`)."""

    name: str
    path: str
    schema: dict[str, Any]
    engine: str
    definition: str
    budget: float
    created_at: float
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalystRecord:
    """An analyst: a hashed token, per-data-set quotas (in the data set's definition units)."""

    name: str
    token_hash: str
    quotas: dict[str, float]
    revoked: bool
    created_at: float


@dataclass(frozen=True)
class NewCharge:
    """A charge to insert: one released answer (or one opened session) and what it cost."""

    dataset: str
    analyst: str
    kind: str  # "query", "session", "session-query"
    query: dict[str, Any] | None
    mechanism: dict[str, Any]
    cost: dict[str, Any]  # {"definition": ..., "value": ..., "load": ...}; load 0 for session-query
    answer: dict[str, Any] | None
    request_key: str | None = None
    request_hash: str | None = None
    position: int = 0
    session: str | None = None
    id: str = ""
    created_at: float = 0.0

    @cached_property
    def encoded(self) -> tuple[str | None, str, str, str | None]:
        """The JSON columns (query, mechanism, cost, answer) as stored; computed once, so a batch's
        rows can be encoded before its admission takes the data set's lock."""
        return (
            None if self.query is None else dumps(self.query),
            dumps(self.mechanism),
            dumps(self.cost),
            None if self.answer is None else dumps(self.answer),
        )


@dataclass(frozen=True)
class ChargeRecord(NewCharge):
    """A committed charge with its position ``seq`` in the ledger (strictly increasing per data set)."""

    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.id,
            "dataset": self.dataset,
            "analyst": self.analyst,
            "kind": self.kind,
            "session": self.session,
            "request_key": self.request_key,
            "position": self.position,
            "query": self.query,
            "mechanism": self.mechanism,
            "cost": self.cost,
            "answer": self.answer,
            "created_at": self.created_at,
        }


@dataclass
class SessionRecord:
    """An interactive mechanism's durable state (sparse vector, guess-and-check)."""

    id: str
    dataset: str
    analyst: str
    kind: str
    params: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    created_at: float = 0.0


class AdmissionTransaction(abc.ABC):
    """What admission may do while it holds the data set's lock (all in one database transaction)."""

    @abc.abstractmethod
    def dataset(self) -> DatasetRecord: ...

    @abc.abstractmethod
    def savepoint(self) -> AbstractContextManager[None]:
        """A nested step: on an exception everything it wrote is rolled back, the transaction goes on."""

    @abc.abstractmethod
    def analyst(self, name: str) -> AnalystRecord | None: ...

    @abc.abstractmethod
    def charges_since(self, seq: int) -> list[ChargeRecord]:
        """This data set's charges with ``seq`` greater than the given one, in ledger order."""

    @abc.abstractmethod
    def loads_since(self, seq: int) -> list[LoadRow]:
        """``(seq, analyst, query JSON or None, load)`` of this data set's charges after ``seq``."""

    @abc.abstractmethod
    def find_request(self, analyst: str, request_key: str) -> list[ChargeRecord]:
        """The charges recorded under ``(analyst, request_key)`` (any data set), by position."""

    def within_marks(self) -> WithinMarks:
        """This data set's marks (:meth:`LedgerStore.within_marks`), read in this transaction."""
        return {}

    def mark_within(self, analyst: str, seq: int, budget: float) -> None:  # noqa: B027 (none kept)
        """Record that an admission of this transaction left every row of the filter of ``analyst``
        ("": the data set's own filter) within ``budget``, its charges being those up to ``seq``
        (replacing the filter's earlier mark; committed with the charges, or not at all)."""

    @abc.abstractmethod
    def insert(self, charge: NewCharge) -> ChargeRecord | None:
        """Insert one charge; None when ``(analyst, request_key, position)`` is already taken."""

    def insert_many(self, charges: Sequence[NewCharge]) -> list[int] | None:
        """Insert ``charges`` (each with its ``id`` set), in order: their ``seq`` numbers, or None when
        one's ``(analyst, request_key, position)`` is already taken (the caller's savepoint then undoes
        the others). One statement for them all where the store can (a batch's admission holds the
        data set's lock meanwhile)."""
        seqs = []
        for charge in charges:
            row = self.insert(charge)
            if row is None:
                return None
            seqs.append(row.seq)
        return seqs

    @abc.abstractmethod
    def session(self, session_id: str) -> SessionRecord | None: ...

    @abc.abstractmethod
    def insert_session(self, session: SessionRecord) -> None: ...

    @abc.abstractmethod
    def update_session(self, session: SessionRecord) -> None: ...


class LedgerStore(abc.ABC):
    """A durable ledger; the same schema and guarantees on SQLite and PostgreSQL."""

    url: str

    @abc.abstractmethod
    def admission(self, dataset: str) -> AbstractContextManager[AdmissionTransaction]:
        """One transaction holding the cross-process lock of ``dataset``; commits on normal exit.

        Raises :class:`LedgerError` when the data set is not registered.
        """

    # -- administration (each call is its own transaction) ------------------------------------------
    @abc.abstractmethod
    def put_dataset(self, record: DatasetRecord) -> None: ...

    @abc.abstractmethod
    def set_budget(
        self, name: str, definition: str, budget: float, params: dict[str, Any] | None = None
    ) -> None:
        """Change the budget; the definition or its parameters only while the data set has no charges."""

    @abc.abstractmethod
    def get_dataset(self, name: str) -> DatasetRecord | None: ...

    @abc.abstractmethod
    def list_datasets(self) -> list[DatasetRecord]: ...

    @abc.abstractmethod
    def put_analyst(self, record: AnalystRecord) -> None: ...

    @abc.abstractmethod
    def set_quota(self, analyst: str, dataset: str, quota: float) -> None: ...

    @abc.abstractmethod
    def revoke(self, analyst: str) -> None: ...

    @abc.abstractmethod
    def rotate_token(self, analyst: str, token_hash: str) -> None: ...

    @abc.abstractmethod
    def analyst_by_token_hash(self, token_hash: str) -> AnalystRecord | None: ...

    @abc.abstractmethod
    def get_analyst(self, name: str) -> AnalystRecord | None: ...

    @abc.abstractmethod
    def list_analysts(self) -> list[AnalystRecord]: ...

    @abc.abstractmethod
    def charges(
        self,
        *,
        dataset: str | None = None,
        analyst: str | None = None,
        after: int = 0,
        limit: int | None = None,
    ) -> list[ChargeRecord]:
        """Committed charges in ledger order, optionally filtered."""

    def within_marks(self, dataset: str) -> WithinMarks:
        """The data set's within-budget marks, written by admissions (:meth:`AdmissionTransaction.mark_within`):
        a restart (or another instance catching up) records the ledger's charges without deciding
        them, so its filters cannot know that every row is within budget, and near the budget that
        takes a search of the whole domain no request's time allows (MATH.md 7.9). A filter whose
        charges are those a mark covers, under a budget at least the mark's, knows it from the mark.
        A store without marks answers none (every filter then decides as before)."""
        return {}

    @abc.abstractmethod
    def loads_since(self, dataset: str, seq: int) -> list[LoadRow]:
        """What the filters need of each charge after ``seq``: ``(seq, analyst, query JSON, load)``."""

    def is_recorded(self, analyst: str, request_key: str) -> bool:
        """Whether a request of ``analyst`` under ``request_key`` is committed (read outside any
        admission: a hint that spares work, the admission decides). A store that cannot tell says False."""
        return False

    @abc.abstractmethod
    def get_session(self, session_id: str) -> SessionRecord | None: ...

    @abc.abstractmethod
    def bulk_insert(self, charges: Sequence[NewCharge]) -> None:
        """Insert many charges in one transaction under the data set's lock (benchmarks, migrations)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def iter_charges(self, dataset: str, *, page: int = 20_000) -> Iterator[ChargeRecord]:
        """All charges of one data set in ledger order, a page at a time."""
        after = 0
        while True:
            rows = self.charges(dataset=dataset, after=after, limit=page)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1].seq


def encode_definition(definition: str, params: dict[str, Any] | None) -> str:
    """The ledger's ``definition`` column: the name, then the parameters' canonical JSON (if any), so that
    a ledger written before parameters existed reads back unchanged."""
    return definition if not params else f"{definition} {dumps(params)}"


def decode_definition(text: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = text.partition(" ")
    return name, (json.loads(rest) if rest else {})


#: One encoder for every call: ``json.dumps`` with options builds a new one each time, which was a
#: fifth of a 1 000-charge batch's time under the admission lock.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def dumps(obj: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) for ledger columns and request fingerprints."""
    return _CANONICAL.encode(obj)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
