"""``overlapdp report``: an HTML report with PNG plots of a workload or a ledger (MATH.md 1.8, 2.4)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from overlapdp.cli.app import Encoding, app, console, emit_json, err_console, warn
from overlapdp.display import spent
from overlapdp.errors import OverlapDPError

if TYPE_CHECKING:  # the command imports them when it runs, so that `overlapdp --help` stays fast
    from overlapdp.query import Workload
    from overlapdp.report.build import ReportSummary
    from overlapdp.report.ledger import LedgerEntry


@app.command()
def report(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    queries: Annotated[
        Path | None, typer.Option("--queries", help="Workload file, JSON Lines ('weight' per line).")
    ] = None,
    ledger: Annotated[
        Path | None,
        typer.Option(
            "--ledger",
            help="Ledger as for 'account' (JSON Lines, optionally with 'analyst' and 'time', or the "
            "service's ledger.sqlite / ledger.csv).",
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            help="Total budget (workload: spread for the utility gain, default 1; ledger: epsilon line).",
        ),
    ] = None,
    x: Annotated[str | None, typer.Option("--x", help="Heat map: attribute along x.")] = None,
    y: Annotated[str | None, typer.Option("--y", help="Heat map: attribute along y.")] = None,
    delta: Annotated[float, typer.Option("--delta", help="Ledger: target delta for epsilon.")] = 1e-6,
    effort: Annotated[
        float | None, typer.Option("--effort", help="Seconds per overlap search; past it a safe bound.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Folder for report.html and the PNGs.")] = Path(
        "overlapdp-report"
    ),
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="The data set, when the service's ledger holds several.")
    ] = None,
    encoding: Encoding = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """HTML report and PNG plots: overlap-aware vs sequential spend, utility gain, per-row load heat map."""
    from overlapdp.privacy.definitions import check_delta
    from overlapdp.query import Workload
    from overlapdp.report import build_report, read_ledger
    from overlapdp.schema import Schema

    if (queries is None) == (ledger is None):
        raise OverlapDPError("give exactly one of --queries (a workload) or --ledger")
    if effort is not None and not effort >= 0:
        raise OverlapDPError(f"--effort {effort!r}: give a non-negative number of seconds")
    d = check_delta(delta)
    sch = Schema.load(schema)
    source: Workload | list[LedgerEntry]
    if queries is not None:
        source = Workload.read_jsonl(sch, queries, encoding=encoding)
    else:
        assert ledger is not None
        source = read_ledger(sch, ledger, encoding=encoding, dataset=dataset)
    if len(source) == 0:
        raise OverlapDPError(f"{queries}: the workload is empty, nothing to report")
    with err_console.status(
        f"report on {len(source)} {'queries' if queries else 'charges'}...", spinner="dots"
    ):
        summary = build_report(sch, source, out, budget=budget, x=x, y=y, delta=d, effort=effort)
    heat = summary.numbers.get("heat_map")
    if heat is not None and not heat["exact"]:
        warn("some heat-map cells are safe upper bounds (the overlap search hit its effort limit)")
    if as_json:
        emit_json(summary.to_json())
        return
    _print(summary)


def _print(summary: ReportSummary) -> None:
    n = summary.numbers
    t = Table(show_header=False, title=f"{summary.kind} report")
    if summary.kind == "workload":
        t.add_row("queries (t)", f"{n['t']:g}")
        t.add_row("maximum overlap (γ)", spent(n["gamma"]))
        for s in n["spend"]:
            t.add_row(
                f"U ({s['comp']})",
                f"{s['gain']:.1%}  ({spent(s['sequential'], 4)} → {spent(s['overlap'], 4)})",
            )
        for p in n.get("allocation", []):
            # total noise variance at the same budget: sequential / parallel / even overlap / optimal
            t.add_row(
                f"noise variance ({p['definition']})",
                f"seq. {p['sequential']:.4g} / parallel {p['partitions']:.4g} / even overlap "
                f"{p['even overlap']:.4g} / optimal {p['optimal overlap']:.4g}",
            )
    else:
        t.add_row("charges", str(n["charges"]))
        t.add_row(f"sequential ε (δ={n['delta']:g})", _f(n["sequential_epsilon"]))
        t.add_row(f"overlap-aware ε (δ={n['delta']:g})", _f(n["overlap_epsilon"]))
    if "heat_map" in n:
        h = n["heat_map"]
        t.add_row(
            "heat map max",
            f"{spent(h['maximum'], 4)} at {h['x']}={h['argmax'][0]}, {h['y']}={h['argmax'][1]}",
        )
    console.print(t)
    console.print(f"report: {summary.html}", highlight=False)
    for path in summary.plots.values():
        console.print(f"plot:   {path}", highlight=False)


def _f(x: float | None) -> str:
    """A certified epsilon: rounded up (never shown below its value)."""
    from overlapdp.display import spent

    return "inf" if x is None else spent(x)
