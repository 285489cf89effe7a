"""``overlapdp count``: exact (non-private) counts of a workload, for the data owner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from overlapdp.cli.app import app, console, emit_json, warn
from overlapdp.engine import encode_frame, exact_counts
from overlapdp.errors import OverlapDPError
from overlapdp.query import Workload
from overlapdp.schema import Schema, read_table


@app.command()
def count(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file with the rows.")],
    queries: Annotated[Path, typer.Option("--queries", help="Workload file, JSON Lines.")],
    exact: Annotated[bool, typer.Option("--exact", help="Required: exact counts are NOT private.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Exact counts of each query (for the data owner; not differentially private)."""
    if not exact:
        raise OverlapDPError("count without noise needs --exact (exact counts are not private)")
    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries)
    table = encode_frame(sch, read_table(data))
    counts = exact_counts(workload, table)
    warn("exact counts are NOT differentially private; do not release them")
    if table.out_of_domain:
        warn(f"{table.out_of_domain} of {table.rows} rows lie outside the schema's domain and match no query")
    if as_json:
        emit_json([{"id": q.id, "count": c} for q, c in zip(workload, counts, strict=True)])
        return
    out = Table("id", "count", "condition", title=f"exact counts ({table.rows} rows)")
    for q, c in zip(workload, counts, strict=True):
        out.add_row(str(q.id), str(c), q.describe())
    console.print(out)
