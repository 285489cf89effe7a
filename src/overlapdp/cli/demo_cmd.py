"""``overlapdp demo``: the whole story on the embedded default, with no set-up and no network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from overlapdp.cli.app import app, console, emit_json
from overlapdp.display import spent

_STEPS = 4


@app.command()
def demo(
    data: Annotated[
        Path | None, typer.Option("--data", help="A CSV with Adult's columns (coded or raw UCI Adult).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Folder for the ledger, data and report.")] = Path(
        "overlapdp-demo"
    ),
    rows: Annotated[
        int, typer.Option("--rows", help="Rows of synthetic data when no --data is given.")
    ] = 48_842,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic data (not of the noise).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Serve a table to three analysts on loopback and compare sequential with overlap-aware accounting."""
    from overlapdp.cli.demo import describe_row, run_demo

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=as_json,
    ) as bar:
        task = bar.add_task("overlapdp demo", total=_STEPS)

        def progress(message: str, done: int) -> None:
            bar.update(task, description=message, completed=done)

        summary = run_demo(out, data=data, rows=rows, seed=seed, progress=progress)
        bar.update(task, completed=_STEPS)
    if as_json:
        emit_json(json.loads(json.dumps(summary.to_json(), default=str)))
        return
    console.print(
        f"[bold]{summary.rows:,}[/] rows ({summary.source}), served on loopback to 3 analysts ("
        + "; ".join(f"{a.name}: {a.role}" for a in summary.analysts)
        + "); "
        f"global budget ε = {summary.global_budget:g}, each analyst's quota ε = "
        f"{summary.analysts[0].quota:g}. Every ε here is pure DP."
    )
    table = Table(
        "analyst",
        "answered",
        "refused",
        "would answer:\nseq. / parallel",
        "ε: seq. / parallel /\noverlap-aware",
        title="per analyst: sequential (sum), parallel composition over declared partitions, overlap-aware",
    )
    for a in summary.analysts:
        table.add_row(
            a.name,
            str(a.answered),
            str(a.refused),
            f"{a.sequential_would_answer} / {a.partition_would_answer}",
            f"{spent(a.sequential_spent)} / {spent(a.partition_spent)} / {spent(a.overlap_spent)}",
        )
    console.print(table)
    answered = sum(a.answered for a in summary.analysts)
    seq_n = sum(a.sequential_would_answer for a in summary.analysts)
    par_n = sum(a.partition_would_answer for a in summary.analysts)
    console.print(
        f"Globally, pure ε: sequential accounting {spent(summary.global_sequential_spent)}, parallel "
        f"composition over declared partitions (as Tumult Analytics or OpenDP) "
        f"{spent(summary.global_partition_spent)}, overlap-aware {spent(summary.global_overlap_spent)} of "
        f"{summary.global_budget:g}. [bold green]{answered}[/] answers, where within the same quotas "
        f"sequential accounting would have allowed {seq_n} and parallel composition {par_n}."
    )
    plan = summary.planning
    if plan:
        v = plan["total_variance"]
        best = v["optimal overlap"]
        console.print(
            f"Planned ahead at ε = {plan['budget']:g} (no data read), the {plan['queries']} count queries' total "
            f"noise variance: sequential {v['sequential']:,.0f} ({v['sequential'] / best:.1f}x), parallel "
            f"composition {v['partitions']:,.0f} ({v['partitions'] / best:.2f}x), even overlap shares "
            f"{v['even overlap']:,.0f} ({v['even overlap'] / best:.2f}x), optimal overlap-aware allocation "
            f"{best:,.0f} (`overlapdp plan`)."
        )
    console.print(
        f"Worst row (it pays for {summary.worst_row_queries} charges, ε = {spent(summary.worst_row_load)}): "
        f"{describe_row(summary.worst_row)}"
    )
    console.print(
        f"Files in [bold]{summary.out}/[/]: report.html (plots, heat map), summary.html, ledger.sqlite, ledger.csv, summary.json"
    )
