"""The sessions room: a sparse-vector or guess-and-check session opened (its whole budget charged on
every row) and stepped, each step admitted like a query (:mod:`overlapdp.service.session_mechanisms`:
the mechanisms and their durable state).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from overlapdp.errors import FieldRefused, NotFound, QueryError
from overlapdp.mechanisms.calibration import laplace_scale
from overlapdp.service import definitions, session_mechanisms
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.queries import Queries
from overlapdp.service.responses import SessionInfo, SessionOpened, SessionStep
from overlapdp.service.session_mechanisms import session_json
from overlapdp.service.shared import Pending, check_key, fingerprint, recorded_query
from overlapdp.validation import check_finite, check_int, check_positive


class Sessions(Queries):
    """Sessions opened, stepped and read back for their analyst."""

    def open_session(
        self,
        analyst: AnalystRecord,
        dataset: str,
        kind: str,
        params: Mapping[str, Any],
        *,
        request_key: str | None = None,
        deadline: float | None = None,
    ) -> SessionOpened:
        """Open a sparse-vector or guess-and-check session; its whole budget is charged on every row now."""
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        loaded = self._loaded(state)
        if kind not in ("sparse_vector", "guess_and_check"):
            raise QueryError(f"unknown session kind {kind!r}; use 'sparse_vector' or 'guess_and_check'")
        clean = _session_params(kind, params)
        public, secret, epsilon = session_mechanisms.open_session(kind, clean, loaded.count)
        cost = definitions.pure_to_definition(state.record.definition, epsilon, state.params)
        pending = Pending(
            analyst=analyst.name,
            kind="session",
            request_key=check_key(request_key),
            request_hash=fingerprint("session", dataset, kind, clean),
            queries=[None],
            query_json=[None],
            loads=[definitions.load_of(state.record.definition, cost)],
            session_id=uuid.uuid4().hex,
            session_kind=kind,
            session_params=public,
            session_state=secret,
            deadline=deadline,
            on_bounds=self.limits.snapshot_min <= 1,
        )
        return self._submit(state, pending, SessionOpened)

    def session_query(
        self,
        analyst: AnalystRecord,
        session_id: str,
        spec: Any,
        arg: float,
        *,
        request_key: str | None = None,
        arg_name: str | None = None,
        deadline: float | None = None,
    ) -> SessionStep:
        """One step of a session: ``arg`` is the threshold (sparse vector) or the guess (guess-and-check).

        ``arg_name``, when given (``"threshold"`` or ``"guess"``), must be the one the session's kind
        takes: a guess sent to a sparse vector is refused (:class:`FieldRefused`), not used as a threshold.
        """
        deadline = self._deadline(deadline)
        session = self.store.get_session(session_id)
        if session is None or session.analyst != analyst.name:
            raise NotFound("unknown session")
        expected = _STEP_ARGUMENT.get(session.kind)
        if arg_name is not None and arg_name != expected:
            raise FieldRefused(arg_name, f"a {session.kind} session takes '{expected}', not '{arg_name}'")
        arg = check_finite(arg, "the threshold or guess", error=QueryError)
        state = self._state(session.dataset)
        self._loaded(state)
        (query,) = self._parse(state, [spec], deadline)
        pending = Pending(
            analyst=analyst.name,
            kind="session-query",
            request_key=check_key(request_key),
            request_hash=fingerprint("step", session_id, query.to_json(), arg),
            queries=[query],
            query_json=[recorded_query(spec, query)],
            loads=[0.0],
            session_id=session_id,
            step_arg=float(arg),
            deadline=deadline,
        )
        return self._submit(state, pending, SessionStep)

    def session_info(self, analyst: AnalystRecord, session_id: str) -> SessionInfo:
        session = self.store.get_session(session_id)
        if session is None or session.analyst != analyst.name:
            raise NotFound("unknown session")
        return session_json(session)


#: The parameters of each session kind (the HTTP bodies have the same fields, plus ``kind``).
_SESSION_PARAMS = {
    "sparse_vector": ("epsilon", "max_positives", "monotonic"),
    "guess_and_check": ("epsilon", "tolerance", "epsilon_estimates", "max_failures"),
}

#: The argument of a session step, by session kind.
_STEP_ARGUMENT = {"sparse_vector": "threshold", "guess_and_check": "guess"}


def _session_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The validated parameters a session is rebuilt from (they go into the ledger); a parameter the
    kind does not use is refused, never ignored."""
    allowed = _SESSION_PARAMS[kind]
    for name in params:
        if name not in allowed:
            raise FieldRefused(
                str(name)[:60],
                f"a {kind} session does not use {str(name)[:60]!r}; its parameters are "
                + ", ".join(repr(a) for a in allowed),
            )
    eps = definitions.check_amount("epsilon", params.get("epsilon"))
    if kind == "sparse_vector":
        return {
            "epsilon": eps,
            "max_positives": check_int(
                params.get("max_positives", 1), "max_positives", maximum=1_000_000, error=QueryError
            ),
            "monotonic": bool(params.get("monotonic", False)),
        }
    tol = check_positive(params.get("tolerance"), "tolerance", error=QueryError)
    eps_est = definitions.check_amount("epsilon_estimates", params.get("epsilon_estimates", eps))
    failures = check_int(params.get("max_failures", 1), "max_failures", maximum=1_000_000, error=QueryError)
    # Each failed guess releases a count with Laplace scale max_failures / epsilon_estimates.
    laplace_scale(eps_est, failures, name="epsilon_estimates")
    return {"epsilon": eps, "epsilon_estimates": eps_est, "tolerance": tol, "max_failures": failures}
