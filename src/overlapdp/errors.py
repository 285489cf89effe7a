"""The one exception tree: every error overlapdp raises on bad input or a refused request.

Every exception class of the library is defined here, as a subclass of :class:`OverlapDPError`; the
modules that raise them re-export them (``from overlapdp.privacy.definitions import BudgetError`` still
works), and a test checks that no exception class is defined anywhere else. Parameter checks that raise
them live in :mod:`overlapdp.validation`.

The CLI turns any :class:`OverlapDPError` into a one-line message and exit status 2; the HTTP service
turns it into a 4xx answer (a :class:`ServiceError` carries its own status, :class:`AuthError` is 401,
:class:`LedgerError` 409, any other 400). Messages name the offending part (attribute, field, file) and
never echo data values from a private table.
"""

from __future__ import annotations

from typing import Any


class OverlapDPError(Exception):
    """Base class of every error overlapdp raises on bad input."""


# -- schemas, queries, data and workloads ------------------------------------------------------------------


class SchemaError(OverlapDPError):
    """A schema is malformed: empty attribute, duplicate name, min > max, unsorted edges, ..."""


class QueryError(OverlapDPError):
    """A query does not fit the schema: unknown attribute, OR across attributes, ``<`` on a categorical."""


class QuerySyntaxError(QueryError):
    """A condition could not be parsed at all."""


class DataError(OverlapDPError):
    """A data file or frame cannot be read or mapped onto the schema."""


class UnsupportedDataError(DataError, TypeError):
    """Data of a kind no entry point accepts; the message lists the accepted kinds
    (:mod:`overlapdp.engine.inputs`). Also a :class:`TypeError`, which it is."""


class WorkloadError(OverlapDPError):
    """A workload file is malformed (bad JSON line, bad weight, duplicate id)."""


class QueryTooComplexError(QuerySyntaxError):
    """A condition exceeds a parser limit (length, nesting depth or number of terms).

    Raised before the condition reaches the SQL parser, so that no input can exhaust the stack (a deep
    condition used to raise RecursionError: an HTTP 500 and a traceback per request). ``limit`` names
    the limit (``"characters"``, ``"depth"``, ``"terms"``) and ``maximum`` its value.
    """

    def __init__(self, message: str, *, limit: str | None = None, maximum: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum


class DomainValueError(QueryError):
    """A condition names a value, or a range, that the attribute's domain does not hold.

    ``sex = 'female'`` when the domain has ``'Female'``, ``race IN ('Whte')``, ``age BETWEEN 200 AND
    300``, an inverted range ``[60, 20]``: each would be a silently empty query (answered with noise
    around zero and recorded), so it is refused. ``attribute`` and ``value`` name the offending part
    and ``suggestions`` holds the nearest valid values (the message says "did you mean ...?").
    """

    def __init__(
        self,
        message: str,
        *,
        attribute: str | None = None,
        value: object = None,
        suggestions: tuple[object, ...] = (),
    ) -> None:
        super().__init__(message)
        self.attribute = attribute
        self.value = value
        self.suggestions = suggestions


def with_prefix(exc: OverlapDPError, prefix: str) -> OverlapDPError:
    """A copy of ``exc`` (same type and attributes) whose message starts with ``prefix``."""
    import copy

    out = copy.copy(exc)
    out.args = (prefix + str(exc),)
    return out


class OutsideDomainError(DataError):
    """The data has rows outside the schema's domain and the schema's policy is ``"outside": "error"``.

    ``attributes`` names the attributes with a value outside the domain or a missing value the schema
    does not allow; the message gives no counts (exact figures are for ``overlapdp schema check``).
    """

    def __init__(self, message: str, *, attributes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.attributes = attributes


# -- optional dependencies -------------------------------------------------------------------------------
class MissingExtraError(OverlapDPError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    Also an :class:`ImportError`, so code that treats a missing module as "not available" still does.
    """

    def __init__(self, message: str = "", *, extra: str = "", module: str | None = None) -> None:
        super().__init__(message)
        self.extra = extra
        self.module = module


# -- privacy parameters and budgets ------------------------------------------------------------------------
class BudgetError(OverlapDPError):
    """A privacy parameter or budget is not a positive finite number (or delta is outside (0, 1)).

    Raised by the privacy definitions (:mod:`overlapdp.privacy.definitions`), the calibrations and the
    checks of :mod:`overlapdp.validation` when a budget-like value is refused."""


class AdaptivityError(BudgetError):
    """The requested filter is not valid when costs are chosen adaptively (MATH.md 2)."""


# -- mechanisms ------------------------------------------------------------------------------------------
class MechanismError(OverlapDPError):
    """A mechanism was configured or used wrongly (c < 1, tolerance <= 0, non-integer sensitivity, a
    confidence level outside (0, 1), ...)."""


class InsecureRandomnessError(MechanismError):
    """A seeded (reproducible, hence predictable) generator was passed where a served context needs the
    operating system's CSPRNG (DESIGN.md: a seeded generator exists for tests only)."""


class CoverageError(MechanismError):
    """A query reaches outside the coverage an interactive mechanism declared (it would read rows whose
    privacy loss the mechanism's declaration does not account for)."""


class BudgetExceededError(MechanismError):
    """A mechanism or a child would spend beyond its declared or remaining budget; nothing was charged."""


class SnapshotError(MechanismError):
    """A mechanism state (snapshot) is malformed, or was taken from another mechanism than the one it is
    restored into (another kind, ``c`` or noise scale), or is restored into a mechanism that has
    already answered queries."""


# -- the overlap engine ------------------------------------------------------------------------------------
class OverlapInputError(OverlapDPError):
    """Bad input to the overlap engine (base class of the errors below)."""


class WeightError(OverlapInputError, WorkloadError, QueryError):
    """A weight is negative, NaN, infinite, not a number (an integer beyond the float range included), or
    vectors differ in length. A weight is part of a query, so this is also a :class:`QueryError`: the
    engine's ``max_overlap`` / ``OverlapIndex.add`` and ``parse_where`` refuse a bad weight alike."""


class CompError(OverlapInputError):
    """An unknown composition function, or weights that do not fit it."""


class SchemaMismatchError(OverlapInputError, QueryError):
    """A query is over another schema than the workload's."""


class DuplicateQueryError(OverlapInputError, WorkloadError):
    """An :class:`~overlapdp.overlap.OverlapIndex` already holds a query with this id (or the id is
    missing)."""


class UnknownQueryError(OverlapInputError, WorkloadError):
    """An :class:`~overlapdp.overlap.OverlapIndex` holds no query with this id."""


class DomainTooLargeError(OverlapInputError):
    """A reference algorithm (brute force, subset enumeration) was asked to do too much work."""


class SearchGaveUp(OverlapDPError):
    """Internal: a bounded exact search (the lazy filter's threshold search, MATH.md 2.7.1) visited more
    nodes than it may; its caller then decides with the overlap index. Never reaches a user."""


class NeedsTrial(OverlapDPError):
    """Internal: a service batch the filters' lazy bounds alone could not admit under the data set's
    lock; it is tried off the lock against a snapshot and comes back for the decision. Never reaches a
    user."""


class MagnitudeError(WeightError):
    """A composed load (a row's sum of weights, or the square root of its sum of squares) exceeds the
    largest float, so no finite value can be reported; the message names the heaviest query."""


# -- answering, consistency and reports --------------------------------------------------------------------
class AnswerError(OverlapDPError):
    """A bad request to answer a workload (definition, accounting, level, empty workload)."""


class LevelError(AnswerError, MechanismError):
    """A confidence level outside (0, 1). The one level check (:func:`overlapdp.validation.check_level`)
    serves workloads (which raise :class:`AnswerError`) and mechanisms (:class:`MechanismError`) alike,
    so its error is both."""


class ConsistencyError(OverlapDPError):
    """Consistent answers cannot be computed for this workload (too many cells, bad answers)."""


class ReportInputError(OverlapDPError):
    """Bad input to a report: unknown or repeated heat-map attribute, empty workload, bad ledger field."""


# -- the HTTP service (server side) ------------------------------------------------------------------------
# The class name of a ServiceError is the ``error`` field of the HTTP answer (the client matches on
# "QuotaExceeded"), so these names are part of the wire format.
class ServiceError(OverlapDPError):
    """A request the service refuses; ``status`` is its HTTP status and ``details`` extra fields of the
    answer's body."""

    status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class BadRequest(ServiceError):
    """A request whose fields contradict each other (e.g. several amounts given): HTTP 400."""

    status = 400


class NotFound(ServiceError):
    """An unknown data set, analyst or session: HTTP 404."""

    status = 404


class MethodNotAllowed(ServiceError):
    """A route that exists but does not take the request's method: HTTP 405 (the ``Allow`` header lists
    the methods it takes)."""

    status = 405


class Conflict(ServiceError):
    """A request that conflicts with the service's state (an exhausted session, ...): HTTP 409."""

    status = 409


class QuotaExceeded(ServiceError):
    """The analyst's quota or the data set's global budget cannot admit the request: HTTP 403."""

    status = 403


class TooLarge(ServiceError):
    """A body, batch or condition over its limit: HTTP 413."""

    status = 413


class FieldRefused(ServiceError):
    """A field the request may not carry here (422, like a body that fails validation), e.g. a
    ``guess`` sent to a sparse-vector session; ``field`` names it."""

    status = 422

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Unavailable(ServiceError):
    """The data set is registered but its rows cannot be read by this instance: HTTP 409."""

    status = 409


class TimeBudgetExceeded(ServiceError):
    """The request's own time budget ran out before it could be decided: HTTP 503 for this request
    alone; nothing of it was charged and no answer was released (retry it, or send a smaller batch)."""

    status = 503


class TooManyRequests(ServiceError):
    """The analyst already has as many requests in progress as the service allows at once: HTTP 429
    with ``Retry-After`` (seconds) and ``retry_after`` in the body; nothing was read or charged."""

    status = 429


class AuthError(OverlapDPError):
    """A missing, malformed, wrong or revoked token (HTTP 401)."""


class LedgerError(OverlapDPError):
    """The ledger cannot be opened or is inconsistent with the request (unknown data set, ...): HTTP 409."""


class IdempotencyConflict(LedgerError):
    """An idempotency key was reused for a different request."""


# -- the HTTP client ---------------------------------------------------------------------------------------
class ServiceRefused(OverlapDPError):
    """The service answered with an error status; ``status``, ``error`` and ``body`` say why."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {"detail": body}
        self.error = str(self.body.get("error", "HTTPError"))
        detail = self.body.get("detail", "")
        super().__init__(f"{status} {self.error}: {detail}")


class QuotaRefused(ServiceRefused):
    """403: the quota (or the data set's global budget) cannot pay; ``remaining`` is at most the analyst's rest.

    The client's view of the server's :class:`QuotaExceeded`; ``overlapdp.client.QuotaExceeded`` is
    this class under its old name."""

    @property
    def remaining(self) -> float | None:
        """The body's ``remaining_at_least`` (a lower bound on the rest of the quota; ``remaining`` from
        an older service)."""
        value = self.body.get("remaining_at_least", self.body.get("remaining"))
        return None if value is None else float(value)
