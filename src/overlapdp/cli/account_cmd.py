"""``overlapdp account``: the privacy guarantee of a ledger, sequential and overlap-aware (MATH.md 2, 5).

Each ledger line (JSON Lines) is a query (``where`` or ``conditions``; neither means the whole domain)
plus a mechanism, either nested (``"mechanism": {"mechanism": "laplace", "scale": 10}``) or flat
(``"mechanism": "gaussian", "sigma": 5``), or an opaque guarantee (``"epsilon": .., "delta": ..``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from overlapdp.cli.app import app, console, emit_json
from overlapdp.errors import OverlapDPError, WorkloadError
from overlapdp.privacy.accountant import Odometer, OdometerReport, whole_domain
from overlapdp.privacy.definitions import check_delta
from overlapdp.privacy.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    Mechanism,
    OpaqueApproxDP,
    RandomizedResponse,
)
from overlapdp.query import PredicateQuery, parse_query
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


def parse_ledger_line(schema: Schema, obj: Any, n: int) -> tuple[str, Mechanism, PredicateQuery]:
    """(id, mechanism, query) of one ledger line; errors name the line."""
    try:
        if not isinstance(obj, dict):
            raise WorkloadError("a ledger line must be a JSON object")
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


def read_ledger(schema: Schema, path: Path, odometer: Odometer) -> None:
    """Parse every line first, then charge them all (a bad line charges nothing)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read ledger {path}: {exc.strerror}") from None
    parsed = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"ledger line {n}: not valid JSON ({exc.msg})") from None
        cid, mech, query = parse_ledger_line(schema, obj, n)
        if cid in seen:
            raise WorkloadError(f"ledger line {n}: duplicate id {cid!r}")
        seen.add(cid)
        parsed.append((cid, mech, query))
    if not parsed:
        raise WorkloadError(f"ledger {path} has no charges")
    for cid, mech, query in parsed:
        odometer.charge(mech, query, id=cid)


@app.command()
def account(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    ledger: Annotated[Path, typer.Option("--ledger", help="Ledger file, JSON Lines: query + mechanism.")],
    delta: Annotated[float, typer.Option("--delta", help="Target delta for (epsilon, delta).")] = 1e-6,
    neighbouring: Annotated[
        str, typer.Option("--neighbouring", help="add_remove (default) or replace (one row moves).")
    ] = "add_remove",
    effort: Annotated[
        float | None, typer.Option("--effort", help="Seconds per overlap search; past it a safe bound.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Privacy guarantee of a ledger under every definition, sequential and overlap-aware."""
    d = check_delta(delta)
    sch = Schema.load(schema)
    odo = Odometer(sch, neighbouring=neighbouring, effort=effort)
    read_ledger(sch, ledger, odo)
    report = odo.report(d)
    if as_json:
        emit_json(report.to_json())
        return
    _print(report)


def _fmt(x: Any) -> str:
    if isinstance(x, tuple):
        return f"RDP curve ({len(x)} orders)"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.6g}"


def _print(report: OdometerReport) -> None:
    out = Table(
        "definition",
        "sequential",
        "overlap-aware",
        f"seq. ε at δ={report.delta:g}",
        f"overlap ε at δ={report.delta:g}",
        "exact",
        title=f"privacy of {report.charges} charges ({report.neighbouring} neighbours)",
    )
    names = {"pure": "pure ε", "zcdp": "zCDP ρ", "gdp": "GDP μ", "rdp": "Rényi DP", "approx": "(ε, δ) PLD"}
    for key, g in report.definitions.items():
        out.add_row(
            names.get(key, key),
            _fmt(g.sequential),
            _fmt(g.overlap),
            _fmt(g.sequential_epsilon),
            _fmt(g.overlap_epsilon),
            "yes" if g.exact else "bound",
        )
    console.print(out)
    console.print(
        f"tightest: sequential ε = {_fmt(report.sequential_epsilon)} ({report.sequential_method}), "
        f"overlap-aware ε = {_fmt(report.overlap_epsilon)} ({report.overlap_method})"
    )
    if report.witness:
        console.print(f"worst row: {report.witness}")
