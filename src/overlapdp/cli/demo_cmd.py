"""``overlapdp demo``: the whole story on the embedded default, with no set-up and no network."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from overlapdp.cli.app import app, console
from overlapdp.engine import encode_frame, exact_counts
from overlapdp.query import Workload
from overlapdp.samples import adult_schema, synthetic_adult
from overlapdp.schema import read_table

DEMO_WORKLOAD = [
    "age BETWEEN 20 AND 29",
    "age BETWEEN 30 AND 39",
    "age BETWEEN 40 AND 49",
    "age >= 25 AND age < 45 AND sex = 1",
    'age < 30 AND "hours-per-week" >= 40',
    "race IN (1, 2) AND sex = 0",
    'race = 0 AND "income>50K" = 1',
    '"education-num" >= 13 AND "income>50K" = 1',
]


@app.command()
def demo(
    data: Annotated[
        Path | None, typer.Option("--data", help="A CSV with Adult's integer-coded columns.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Folder for the output files.")] = Path("overlapdp-demo"),
    rows: Annotated[
        int, typer.Option("--rows", help="Rows of synthetic data when no --data is given.")
    ] = 48_842,
) -> None:
    """Run the end-to-end example on a synthetic table with Adult's schema (or --data)."""
    schema = adult_schema()
    with console.status("preparing data"):
        frame = read_table(data) if data is not None else synthetic_adult(rows)
        out.mkdir(parents=True, exist_ok=True)
        workload = Workload.of(schema, DEMO_WORKLOAD)
        workload.write_jsonl(out / "workload.jsonl")
        schema.save(out / "schema.json")
        counts = exact_counts(workload, encode_frame(schema, frame))
    table = Table(
        "id", "condition", "exact count", title=f"{len(frame):,} rows ({'file' if data else 'synthetic'})"
    )
    for q, c in zip(workload, counts, strict=True):
        table.add_row(str(q.id), q.describe(), f"{c:,}")
    console.print(table)
    console.print(f"schema and workload written to [bold]{out}/[/]")
