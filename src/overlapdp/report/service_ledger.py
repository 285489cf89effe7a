"""The service's own ledger read back as charges: its SQLite file and its CSV export.

``overlapdp serve`` (and so ``overlapdp demo``) records every charge in a ``charges`` table (SQLite, or
PostgreSQL), one row per charge: the analyst, the kind (``query``, ``session``, ``session-query``), the
query as JSON, the mechanism and the cost as JSON, the time. The demo writes the same rows to
``ledger.csv`` (:meth:`~overlapdp.service.client.AdminClient.full_ledger`, structured cells as JSON).

Each row becomes the charge the service admitted, by the guarantee it charged (its cost's per-row
load in the data set's definition: ``service/definitions.py``, ``ServedMechanism``), never less:

- pure DP and approximate DP: the discrete Laplace's pure epsilon (an (epsilon, 0) charge);
- zCDP and tCDP: rho-zCDP (the discrete Gaussian; (rho, inf)-tCDP, MATH.md 5.9);
- GDP: the mu^2/2-zCDP the discrete Gaussian is declared as, rounded up (MATH.md 5.8);
- RDP of order alpha: the zCDP rho of the discrete Gaussian the service drew (recorded with the
  mechanism; else epsilon_alpha / alpha rounded up, whose RDP at alpha is the declared epsilon_alpha);
- a session (sparse vector, guess-and-check): its cost as above (the service derives it from the
  session's total epsilon, rounded up; the session's parameters need not name that total);
- a session's steps (``session-query``, cost 0, paid by the session) are no charge.

The queries are the recorded ones (:func:`overlapdp.service.recorded.recorded_query` reads the same
JSON); a session is charged over the whole domain.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from overlapdp.errors import OverlapDPError, WorkloadError
from overlapdp.exact import float_up
from overlapdp.privacy.mechanisms import Mechanism, OpaqueApproxDP, OpaqueTCDP
from overlapdp.privacy.odometer import whole_domain
from overlapdp.query import PredicateQuery, parse_query
from overlapdp.report.ledger import LedgerEntry
from overlapdp.schema import Schema

_SQLITE_MAGIC = b"SQLite format 3\x00"
#: The columns of the service's charges that a CSV export must have to be read as one.
_COLUMNS = ("analyst", "kind", "query", "mechanism", "cost")


def is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def is_csv_ledger(text: str) -> bool:
    """Whether a text file is the service's ledger as CSV (its header names the charges' columns)."""
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    if first.lstrip().startswith("{"):
        return False
    header = next(csv.reader([first]), [])
    return all(c in header for c in _COLUMNS)


def read_sqlite(schema: Schema, path: Path, *, dataset: str | None = None) -> list[LedgerEntry]:
    """The charges of one data set of a service's SQLite ledger (opened read-only)."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise WorkloadError(f"cannot open ledger {str(path)!r}: {exc}") from None
    try:
        try:
            names = [r[0] for r in con.execute("SELECT DISTINCT dataset FROM charges ORDER BY dataset")]
            chosen = _pick(names, dataset, str(path))
            rows = con.execute(
                "SELECT analyst, kind, query, mechanism, cost, created_at FROM charges "
                "WHERE dataset = ? ORDER BY seq",
                (chosen,),
            ).fetchall()
        except sqlite3.Error as exc:
            # not the service's ledger (another SQLite file), or a damaged one: one line
            raise WorkloadError(f"{str(path)!r} is not a readable overlapdp ledger ({exc})") from None
    finally:
        con.close()
    keys = ("analyst", "kind", "query", "mechanism", "cost", "created_at")
    return _entries(schema, (dict(zip(keys, r, strict=True)) for r in rows), str(path))


def read_csv_text(schema: Schema, text: str, *, source: str, dataset: str | None = None) -> list[LedgerEntry]:
    """The charges of one data set of the service's ledger exported as CSV."""
    rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    if "dataset" in (rows[0] if rows else {}):
        chosen = _pick(sorted({r["dataset"] for r in rows}), dataset, source)
        rows = [r for r in rows if r["dataset"] == chosen]
    elif dataset is not None:
        raise WorkloadError(f"--dataset {dataset!r}: ledger {source!r} has no dataset column")
    return _entries(schema, rows, source)


def _pick(names: list[str], dataset: str | None, source: str) -> str:
    if not names:
        raise WorkloadError(f"ledger {source!r} has no charges")
    if dataset is None:
        if len(names) > 1:
            raise WorkloadError(
                f"ledger {source!r} holds several data sets ({', '.join(names)}): choose one with --dataset"
            )
        return names[0]
    if dataset not in names:
        raise WorkloadError(f"ledger {source!r} has no charges on {dataset!r} (it has {', '.join(names)})")
    return dataset


def _json(value: Any, field: str, n: int, source: str) -> Any:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass
    raise WorkloadError(f"{source} row {n}: {field} is not JSON")


def _entries(schema: Schema, rows: Iterable[Mapping[str, Any]], source: str) -> list[LedgerEntry]:
    out: list[LedgerEntry] = []
    for n, row in enumerate(rows, start=1):
        cost = _json(row.get("cost"), "cost", n, source)
        if not isinstance(cost, dict):
            raise WorkloadError(f"{source} row {n}: cost is not a JSON object")
        if "paid_by_session" in cost:
            continue  # a session's step: its session paid
        mechanism = _json(row.get("mechanism"), "mechanism", n, source) or {}
        cid = f"c{n}"
        try:
            mech = charged(cost, mechanism, str(row.get("kind") or "query"))
            query = _query(schema, _json(row.get("query"), "query", n, source), cid)
        except OverlapDPError as exc:
            raise WorkloadError(f"{source} row {n}: {exc}") from None
        created = row.get("created_at")
        t = float(created) if created not in (None, "") else None
        analyst = row.get("analyst")
        out.append(LedgerEntry(cid, mech, query, None if analyst in (None, "") else str(analyst), t))
    if not out:
        raise WorkloadError(f"ledger {source!r} has no charges")
    if all(e.time is not None for e in out):
        out.sort(key=lambda e: e.time or 0.0)
    return out


def _query(schema: Schema, spec: Any, cid: str) -> PredicateQuery:
    if isinstance(spec, Mapping) and ("where" in spec or "conditions" in spec):
        return parse_query(schema, {k: spec[k] for k in ("where", "conditions") if k in spec}, id=cid)
    return whole_domain(schema, id=cid)


def _amount(cost: Mapping[str, Any], key: str) -> float:
    value = cost.get(key, cost.get("load"))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise WorkloadError(f"the cost's {key!r} is not a non-negative number: {value!r}")
    return float(value)


def _half_square_up(x: float) -> float:
    """x^2 / 2 rounded up (exactly, in rationals)."""
    return float_up(Fraction(x) * Fraction(x) / 2)


def charged(cost: Mapping[str, Any], mechanism: Mapping[str, Any], kind: str) -> Mechanism:
    """The mechanism a service charge stands for (module docstring), from its recorded cost and
    mechanism."""
    from overlapdp.privacy.measures import (
        ApproxMeasure,
        GDPMeasure,
        PureMeasure,
        RDPMeasure,
        TCDPMeasure,
        ZCDPMeasure,
        measure_named,
    )

    definition = cost.get("definition")
    measure = measure_named(str(definition), WorkloadError)
    if isinstance(measure, PureMeasure | ApproxMeasure):
        return OpaqueApproxDP(_amount(cost, "epsilon"), 0.0)
    if isinstance(measure, ZCDPMeasure | TCDPMeasure):
        return OpaqueTCDP(_amount(cost, "rho"), math.inf)
    if isinstance(measure, GDPMeasure):
        return OpaqueTCDP(_half_square_up(_amount(cost, "mu")), math.inf)
    if isinstance(measure, RDPMeasure):
        rho = mechanism.get("rho")
        if kind == "query" and isinstance(rho, int | float) and not isinstance(rho, bool) and rho > 0:
            return OpaqueTCDP(float(rho), math.inf)
        alpha = mechanism.get("alpha")
        if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not alpha > 1:
            raise WorkloadError("an RDP charge without its order alpha")
        return OpaqueTCDP(float_up(Fraction(_amount(cost, "epsilon_alpha")) / Fraction(alpha)), math.inf)
    raise WorkloadError(f"unknown privacy definition {definition!r} in the cost")
