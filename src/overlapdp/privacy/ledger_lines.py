"""The JSON form of one ledger line: a query plus the mechanism (or opaque guarantee) that answered it.

Shared by ``overlapdp account`` and :mod:`overlapdp.report.ledger`. A line names its query with
``where`` or ``conditions`` (neither means the whole domain) and its mechanism either nested
(``"mechanism": {"mechanism": "laplace", "scale": 10}``) or flat (``"mechanism": "gaussian",
"sigma": 5``), or gives an opaque guarantee (``"epsilon": .., "delta": ..``).

A line with ``"group_by"`` (or a whole ``"sql": "SELECT ... GROUP BY ..."``) records a GROUP BY
(:mod:`overlapdp.query.groupby`): :func:`parse_ledger_charges` gives one charge per cell (ids
``"{id}[a=v]"``), each with the line's mechanism. Charging the filter once instead would be the same per
row under add/remove, but not under replace-one-row, where a row moving between two cells changes both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overlapdp.errors import OverlapDPError, WorkloadError
from overlapdp.privacy.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    Mechanism,
    OpaqueApproxDP,
    RandomizedResponse,
)
from overlapdp.privacy.odometer import whole_domain
from overlapdp.query import PredicateQuery, QueryFamily, parse_item, parse_query
from overlapdp.schema import Schema

_MECHANISMS = (
    "laplace",
    "discrete_laplace",
    "gaussian",
    "discrete_gaussian",
    "randomized_response",
    "approx",
)


def parse_mechanism(spec: Mapping[str, Any]) -> Mechanism:
    """A mechanism from its JSON form (see the module docstring); bad specs raise OverlapDPError."""
    name = spec.get("mechanism")
    if name is None:
        if "epsilon" in spec:
            return OpaqueApproxDP(spec["epsilon"], spec.get("delta", 0.0))
        raise WorkloadError("no mechanism: give 'mechanism' or an opaque 'epsilon' (and 'delta')")
    if not isinstance(name, str):
        raise WorkloadError(f"mechanism must be a name, got {name!r}")
    key = name.lower().replace("-", "_").replace(" ", "_")

    def arg(field: str, default: Any = None) -> Any:
        if field not in spec and default is None:
            raise WorkloadError(f"mechanism {name!r} needs {field!r}")
        return spec.get(field, default)

    if key == "laplace":
        return Laplace(arg("scale"), arg("sensitivity", 1.0))
    if key == "discrete_laplace":
        return DiscreteLaplace(arg("scale"), arg("sensitivity", 1))
    if key == "gaussian":
        return Gaussian(arg("sigma"), arg("sensitivity", 1.0))
    if key == "discrete_gaussian":
        return DiscreteGaussian(arg("sigma"), arg("sensitivity", 1))
    if key in ("randomized_response", "rr"):
        return RandomizedResponse(arg("epsilon"), arg("categories", 2))
    if key in ("approx", "opaque"):
        return OpaqueApproxDP(arg("epsilon"), spec.get("delta", 0.0))
    raise WorkloadError(f"unknown mechanism {name!r} (known: {', '.join(_MECHANISMS)})")


def parse_ledger_charges(schema: Schema, obj: Any, n: int) -> list[tuple[str, Mechanism, PredicateQuery]]:
    """The charges of one ledger line: one, or one per cell of a GROUP BY line; errors name the line."""
    if not isinstance(obj, dict) or not ("group_by" in obj or "sql" in obj):
        return [parse_ledger_line(schema, obj, n)]
    try:
        mech_field = obj.get("mechanism")
        mech = parse_mechanism(mech_field) if isinstance(mech_field, Mapping) else parse_mechanism(obj)
        qid = obj.get("id")
        cid = str(qid) if qid is not None else f"line{n}"
        keys = ("where", "conditions", "group_by", "sql")
        family = parse_item(schema, {k: obj[k] for k in keys if k in obj}, id=cid)
        if not isinstance(family, QueryFamily):  # SELECT COUNT(*) without GROUP BY: one query
            return [(cid, mech, family)]
        return [(c.id or cid, mech, c) for c in family.cells]
    except OverlapDPError as exc:
        raise type(exc)(f"ledger line {n}: {exc}") from None


def parse_ledger_line(schema: Schema, obj: Any, n: int) -> tuple[str, Mechanism, PredicateQuery]:
    """(id, mechanism, query) of one ledger line of one query (:func:`parse_ledger_charges` reads
    GROUP BY lines too); errors name the line."""
    try:
        if not isinstance(obj, dict):
            raise WorkloadError("a ledger line must be a JSON object")
        if "group_by" in obj or "sql" in obj:
            raise WorkloadError("a GROUP BY line is several charges: read it with parse_ledger_charges")
        mech_field = obj.get("mechanism")
        mech = parse_mechanism(mech_field) if isinstance(mech_field, Mapping) else parse_mechanism(obj)
        qid = obj.get("id")
        cid = str(qid) if qid is not None else f"line{n}"
        if "where" in obj or "conditions" in obj:
            query = parse_query(schema, {k: obj[k] for k in ("where", "conditions") if k in obj}, id=cid)
        else:
            query = whole_domain(schema, id=cid)
        return cid, mech, query
    except OverlapDPError as exc:
        raise type(exc)(f"ledger line {n}: {exc}") from None
