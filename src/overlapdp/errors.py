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


class WorkloadError(OverlapDPError):
    """A workload file is malformed (bad JSON line, bad weight, duplicate id)."""
