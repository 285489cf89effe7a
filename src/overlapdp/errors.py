"""One exception hierarchy for everything the user can get wrong.

The CLI turns any :class:`OverlapDPError` into a one-line message and exit status 2; the HTTP service
turns it into a 4xx answer. Messages name the offending part (attribute, field, file) and never echo
data values from a private table.
"""

from __future__ import annotations


class OverlapDPError(Exception):
    """Base class of every error overlapdp raises on bad input."""


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


class MissingExtraError(OverlapDPError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    Also an :class:`ImportError`, so code that treats a missing module as "not available" still does.
    """

    def __init__(self, message: str = "", *, extra: str = "", module: str | None = None) -> None:
        super().__init__(message)
        self.extra = extra
        self.module = module
