"""The administration room: data sets (registration, budgets, status), analysts (quotas, tokens,
authentication, their spend) and the ledger's pages.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from overlapdp.errors import Conflict, NotFound, QueryError
from overlapdp.query.aggregate import declared_bounds, with_declared_bounds
from overlapdp.service import definitions
from overlapdp.service.auth import AuthError, hash_token, new_token, same_hash
from overlapdp.service.datasets import check_engine, load_dataset
from overlapdp.service.ledger import AnalystRecord, DatasetRecord, LedgerError
from overlapdp.service.responses import (
    AdminDatasetInfo,
    AnalystCreated,
    AnalystInfo,
    DatasetInfo,
    DatasetStatus,
    EpsilonDelta,
    Guarantee,
    LedgerEntry,
    NewToken,
    QuotaInfo,
)
from overlapdp.service.shared import DatasetState, ServiceBase


class Administration(ServiceBase):
    """Data sets, analysts, tokens and the ledger, as the custodian and each analyst see them."""

    def register_dataset(
        self,
        name: str,
        path: str,
        schema: Any,
        engine: str,
        definition: str,
        budget: float,
        params: Mapping[str, Any] | None = None,
    ) -> AdminDatasetInfo:
        """Register a data set served under ``definition`` (:data:`definitions.SERVED`) with a global
        ``budget`` in its amount and its fixed ``params`` (:func:`definitions.check_params`)."""
        _check_name("data set name", name)
        clean = definitions.check_params(definition, params)
        budget = definitions.check_amount("budget", budget)
        check_engine(engine)
        declared = declared_bounds(schema)  # a malformed 'bounds' is refused before anything is read
        loaded = load_dataset(name, path, schema, engine, pool=self.limits.engine_pool)
        # the declared clipping bounds are kept with the schema: a sum or mean may then omit 'bounds'
        stored = with_declared_bounds(loaded.schema.to_json(), declared)
        record = DatasetRecord(name, str(path), stored, engine, definition, budget, time.time(), clean)
        try:
            self.store.put_dataset(record)
        except BaseException:
            loaded.close()
            raise
        state = self._install(record, loaded)
        return self._admin_info(state)

    def refresh_dataset(self, name: str) -> None:
        """Read the data set's record again (budget, definition) as an admission does: for an instance
        that only answers dry runs (:mod:`overlapdp.service._dryrun_worker`), so another instance's
        change is seen; a changed definition replays the ledger."""
        state = self._state(name)
        record = self.store.get_dataset(name)
        if record is None:
            raise NotFound(f"unknown data set {name!r}")
        with state.admit_lock:
            changed = (record.definition, record.params) != state.built_for
            state.record = record
            if changed:
                state.reset()
                state.catch_up(self.store.loads_since(name, 0), lambda: self.store.within_marks(name))
            state.global_filter.budget = record.budget

    def set_budget(
        self, name: str, definition: str, budget: float, params: Mapping[str, Any] | None = None
    ) -> AdminDatasetInfo:
        """Change the global budget; the definition or its parameters (``params``: None keeps them under
        the same definition) only while the data set has no charges (the ledger refuses otherwise)."""
        definitions.served(definition)
        budget = definitions.check_amount("budget", budget)
        state = self._state(name)
        if params is None and definition == state.record.definition:
            clean = state.record.params
        else:
            clean = definitions.check_params(definition, params)
        try:
            self.store.set_budget(name, definition, budget, clean)
        except LedgerError as exc:
            raise Conflict(str(exc)) from None
        record = self.store.get_dataset(name)
        assert record is not None
        with state.admit_lock:
            changed = (record.definition, record.params) != state.built_for
            state.record = record
            if changed:
                state.reset()
                state.catch_up(self.store.loads_since(name, 0), lambda: self.store.within_marks(name))
            state.global_filter.budget = record.budget
        return self._admin_info(state)

    @staticmethod
    def _public_fields(state: DatasetState) -> dict[str, Any]:
        rec = state.record
        return {
            "name": rec.name,
            "definition": rec.definition,
            "parameter": definitions.amount_name(rec.definition, rec.params),
            "parameters": dict(state.params),
            "schema": rec.schema,
            "available": state.loaded is not None,
        }

    @classmethod
    def _admin_fields(cls, state: DatasetState) -> dict[str, Any]:
        rec = state.record
        return {
            **cls._public_fields(state),
            "path": rec.path,
            "engine": rec.engine,
            "budget": rec.budget,
            "budget_epsilon_delta": EpsilonDelta(
                **definitions.epsilon_delta(rec.definition, state.params, rec.budget)
            ),
            "rows": _rows(state),
        }

    def _admin_info(self, state: DatasetState) -> AdminDatasetInfo:
        return AdminDatasetInfo(**self._admin_fields(state))

    def list_datasets(self) -> list[AdminDatasetInfo]:
        """Every registered data set, as the custodian sees it."""
        return [self._admin_info(self._state(r.name)) for r in self.store.list_datasets()]

    def datasets_for(self, analyst: AnalystRecord) -> list[DatasetInfo]:
        """The data sets ``analyst`` has a quota on, without where their rows live."""
        return [
            DatasetInfo(**self._public_fields(self._state(r.name)))
            for r in self.store.list_datasets()
            if r.name in analyst.quotas
        ]

    def dataset_for(self, analyst: AnalystRecord, name: str) -> DatasetInfo:
        if name not in analyst.quotas:
            raise NotFound(f"unknown data set {name!r}")
        return DatasetInfo(**self._public_fields(self._state(name)))

    def dataset_status(self, name: str) -> DatasetStatus:
        """Global spend and the guarantee over all analysts (concurrent composition, MATH.md 3.7)."""
        state = self._state(name)
        self._catch_up(state)
        with state.admit_lock:
            # the exact spends are computed off the lock on snapshots (an overlap search each)
            rec = state.record
            snaps = {a: (f, f.snapshot()) for a, f in state.analyst_filters.items()}
            glob = state.global_filter
            gsnap = glob.snapshot()
            admin = self._admin_fields(state)
            seq = state.last_seq
        per_analyst = {a: f.account(s, f.budget)[0] for a, (f, s) in snaps.items()}
        spent, left = glob.account(gsnap, rec.budget)
        guarantee = definitions.global_guarantee(
            rec.definition, list(per_analyst.values()), spent, state.params
        )
        return DatasetStatus(
            **admin,
            spent=spent,
            spent_epsilon_delta=EpsilonDelta(
                **definitions.epsilon_delta(rec.definition, state.params, spent)
            ),
            remaining=left,
            spent_by_analyst=per_analyst,
            guarantee=Guarantee(**guarantee),
            curve=definitions.curve_figures(rec.definition, state.params, spent, rec.budget),
            ledger_seq=seq,
        )

    def _catch_up(self, state: DatasetState) -> None:
        """Bring the filters up to the ledger's committed rows."""
        with state.admit_lock:
            name = state.record.name
            state.catch_up(
                self.store.loads_since(name, state.last_seq), lambda: self.store.within_marks(name)
            )

    # -- analysts ---------------------------------------------------------------------------------
    def create_analyst(self, name: str, quotas: Mapping[str, float]) -> AnalystCreated:
        _check_name("analyst name", name)
        clean = self._check_quotas(quotas)
        token = new_token()
        self.store.put_analyst(AnalystRecord(name, hash_token(token), clean, False, time.time()))
        return AnalystCreated(name=name, token=token, quotas=clean)

    def _check_quotas(self, quotas: Mapping[str, float]) -> dict[str, float]:
        clean: dict[str, float] = {}
        for ds, amount in quotas.items():
            if self.store.get_dataset(ds) is None:
                raise NotFound(f"unknown data set {ds!r}")
            clean[ds] = definitions.check_amount(f"quota for {ds!r}", amount)
        return clean

    def set_quota(self, analyst: str, dataset: str, quota: float) -> AnalystInfo:
        self._check_quotas({dataset: quota})
        try:
            self.store.set_quota(analyst, dataset, float(quota))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)
        return self.analyst_info(self._analyst(analyst))

    def revoke(self, analyst: str) -> None:
        try:
            self.store.revoke(analyst)
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)

    def rotate_token(self, analyst: str) -> NewToken:
        token = new_token()
        try:
            self.store.rotate_token(analyst, hash_token(token))
        except LedgerError as exc:
            raise NotFound(str(exc)) from None
        self._tokens.drop_analyst(analyst)
        return NewToken(name=analyst, token=token)

    def _analyst(self, name: str) -> AnalystRecord:
        rec = self.store.get_analyst(name)
        if rec is None:
            raise NotFound(f"unknown analyst {name!r}")
        return rec

    def list_analysts(self) -> list[AnalystInfo]:
        return [self.analyst_info(a) for a in self.store.list_analysts()]

    def authenticate(self, token: str | None) -> AnalystRecord:
        """The analyst holding ``token``; :class:`AuthError` for a missing, wrong or revoked one."""
        if not token or len(token) > 200:
            raise AuthError("a valid analyst token is required")
        token_hash = hash_token(token)
        rec = self._tokens.get(token_hash)
        if rec is None:
            rec = self.store.analyst_by_token_hash(token_hash)
            if rec is None or rec.revoked or not same_hash(rec.token_hash, token_hash):
                raise AuthError("a valid analyst token is required")
            self._tokens.put(token_hash, rec)
        return rec

    def analyst_info(self, analyst: AnalystRecord) -> AnalystInfo:
        """Quotas, spend and remaining budget per data set (overlap-aware: spend is the worst row's load)."""
        per: dict[str, QuotaInfo] = {}
        for ds, quota in sorted(analyst.quotas.items()):
            state = self._state(ds)
            self._catch_up(state)
            with state.admit_lock:
                f = state.analyst_filters.get(analyst.name)
                snap = f.snapshot() if f is not None else None
            defn, params = state.record.definition, state.params
            if f is not None and snap is not None:
                spent, left = f.account(snap, quota)  # off the lock
            else:
                spent, left = 0.0, definitions.remaining(defn, quota, 0.0, params)
            per[ds] = QuotaInfo(
                definition=defn,  # type: ignore[arg-type]  # checked at registration
                quota=quota,
                spent=spent,
                remaining=left,
                spent_epsilon_delta=EpsilonDelta(**definitions.epsilon_delta(defn, params, spent)),
                quota_epsilon_delta=EpsilonDelta(**definitions.epsilon_delta(defn, params, quota)),
                curve=definitions.curve_figures(defn, params, spent, quota),
            )
        return AnalystInfo(name=analyst.name, revoked=analyst.revoked, datasets=per)

    # -- ledger -----------------------------------------------------------------------------------
    def ledger(
        self, *, dataset: str | None = None, analyst: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[LedgerEntry]:
        limit = max(1, min(int(limit), self.limits.max_ledger_page))
        rows = self.store.charges(dataset=dataset, analyst=analyst, after=max(0, int(after)), limit=limit)
        return [LedgerEntry(**r.to_json()) for r in rows]


def _rows(state: DatasetState) -> int | None:
    return None if state.loaded is None else state.loaded.rows


def _check_name(what: str, name: str) -> None:
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 100
        or not all(c.isalnum() or c in "-_." for c in name)
    ):
        raise QueryError(f"{what} must be 1-100 letters, digits, '-', '_' or '.'")
