"""``overlapdp account``: the privacy guarantee of a ledger, sequential and overlap-aware (MATH.md 2, 5).

Each ledger line (JSON Lines) is a query (``where`` or ``conditions``; neither means the whole domain)
plus a mechanism, either nested (``"mechanism": {"mechanism": "laplace", "scale": 10}``) or flat
(``"mechanism": "gaussian", "sigma": 5``), or an opaque guarantee (``"epsilon": .., "delta": ..``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from overlapdp.cli.app import app, console, emit_json
from overlapdp.errors import WorkloadError

if TYPE_CHECKING:  # the command imports them when it runs, so that `overlapdp --help` stays fast
    from overlapdp.privacy.accountant import Odometer, OdometerReport
    from overlapdp.schema import Schema


def read_ledger(schema: Schema, path: Path, odometer: Odometer) -> None:
    """Parse every line first, then charge them all (a bad line charges nothing)."""
    from overlapdp.privacy.ledger_lines import parse_ledger_line

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
    from overlapdp.privacy.accountant import Odometer
    from overlapdp.privacy.definitions import check_delta
    from overlapdp.schema import Schema

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
