"""Sessions: the sparse-vector and guess-and-check mechanisms (:class:`overlapdp.mechanisms.SparseVector`,
:class:`overlapdp.mechanisms.GuessAndCheck`) whose secret state (noisy threshold, answers so far) is
kept durably in the ledger between steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from overlapdp.mechanisms import GuessAndCheck, MechanismError, SnapshotError, SparseVector, ThresholdState
from overlapdp.privacy import BudgetError
from overlapdp.query import PredicateQuery
from overlapdp.service.definitions import check_amount
from overlapdp.service.ledger import SessionRecord
from overlapdp.service.responses import SessionInfo

# -- interactive mechanisms ----------------------------------------------------------------------

Count = Callable[[PredicateQuery], int]


def open_session(
    kind: str, params: dict[str, Any], count: Count
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Create a session's mechanism: (public params, secret durable state, epsilon charged when it opens).

    Sparse vector: ``epsilon`` = epsilon_1 + epsilon_2 (Lyu, Su, Li 2017; MATH.md 4.1), stops after
    ``max_positives`` "above" answers. Guess-and-check: epsilon_SVT + c/b (Lyu 2022 App. B; MATH.md 4.2).
    The charge is the mechanism's declared guarantee (computed from its rounded-up noise scales).
    """
    try:
        mech = _build(kind, params, count)
    except MechanismError as exc:  # a noise scale beyond the supported range
        raise BudgetError(
            f"epsilon is too small for this session's noise with its max_positives / max_failures ({exc})"
        ) from None
    return dict(params), _state_of(mech), float(mech.guarantee.epsilon)


def session_step(
    kind: str, params: dict[str, Any], state: dict[str, Any], count: Count, query: PredicateQuery, arg: float
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """One step on a restored mechanism: (answer, new durable state, closed)."""
    mech = _build(kind, params, count)
    _restore(mech, state)
    if isinstance(mech, SparseVector):
        a = mech.ask(query, arg)
        answer: dict[str, Any] = {"outcome": a.outcome, "above": a.above, "positives_left": a.positives_left}
    else:
        g = mech.check(query, arg)
        answer = {"outcome": g.outcome, "ok": g.outcome == "confirmed", "estimates_left": g.estimates_left}
        if g.estimate is not None:
            answer["estimate"] = g.estimate.value
            answer["ci95"] = [g.estimate.low, g.estimate.high]
    return answer, _state_of(mech), bool(mech.exhausted)


def _build(kind: str, params: dict[str, Any], count: Count) -> SparseVector | GuessAndCheck:
    if kind == "sparse_vector":
        return SparseVector(
            count,
            epsilon=params["epsilon"],
            max_positives=params.get("max_positives", 1),
            monotonic=bool(params.get("monotonic", False)),
            served=True,
        )
    eps_svt = check_amount("epsilon", params.get("epsilon"))
    eps_est = check_amount("epsilon_estimates", params.get("epsilon_estimates", eps_svt))
    return GuessAndCheck.from_budget(
        count,
        epsilon=eps_svt + eps_est,
        estimate_fraction=eps_est / (eps_svt + eps_est),
        tolerance=params["tolerance"],
        max_failures=params.get("max_failures", 1),
        served=True,
    )


# The mechanisms' secret state (threshold noise, answers so far) is persisted in the ledger (sessions
# table) as their own snapshot, so that a session survives a restart and two instances see the same state.
def _state_of(mech: SparseVector | GuessAndCheck) -> dict[str, Any]:
    return mech.state().to_json()


# What the ledger held before snapshots named their mechanism, c and noise scales.
_OLD_STATE = {"threshold_noise", "positives", "queries"}


def _restore(mech: SparseVector | GuessAndCheck, state: dict[str, Any]) -> None:
    if set(state) == _OLD_STATE:
        # An older row: its counters were written by a mechanism built from this session's own params,
        # so that mechanism's identity is this one's.
        state = {**mech.state().to_json(), **state}
    try:
        mech.restore(ThresholdState.from_json(state))
    except SnapshotError as exc:
        # A stored state that does not fit its session is the ledger's fault, not the request's: it
        # fails as an internal error (nothing charged, nothing released), not as a 400.
        raise RuntimeError(f"the session's stored state does not fit its mechanism: {exc}") from None


def session_json(session: SessionRecord) -> SessionInfo:
    return SessionInfo(
        id=session.id,
        dataset=session.dataset,
        kind=session.kind,  # type: ignore[arg-type]  # checked when the session opened
        params=dict(session.params),
        positives=session.state.get("positives", 0),
        queries=session.state.get("queries", 0),
        closed=session.closed,
    )
