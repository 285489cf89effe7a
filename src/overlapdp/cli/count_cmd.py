"""``overlapdp count``: exact (non-private) counts of a workload, for the data owner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from overlapdp.cli.app import DataEncoding, Separator, app, console, emit_json, progress, warn
from overlapdp.engine.registry import EngineName
from overlapdp.errors import OverlapDPError


@app.command()
def count(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file with the rows.")],
    queries: Annotated[Path, typer.Option("--queries", help="Workload file, JSON Lines.")],
    exact: Annotated[bool, typer.Option("--exact", help="Required: exact counts are NOT private.")] = False,
    engine: Annotated[EngineName, typer.Option("--engine", help="Where to count.")] = "duckdb",
    encoding: DataEncoding = None,
    sep: Separator = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Exact counts of each query (for the data owner; not differentially private)."""
    from overlapdp.engine import open_engine
    from overlapdp.query import Workload
    from overlapdp.schema import Schema

    if not exact:
        raise OverlapDPError("count without noise needs --exact (exact counts are not private)")
    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries)
    for q, agg in zip(workload, workload.aggregates, strict=False):
        if agg.kind != "count":  # never print a count where a sum or mean was asked for
            raise OverlapDPError(f"query {q.id!r} asks for a {agg.kind}; 'count' gives exact counts only")
    with (
        progress(f"reading {data.name} and counting ({engine})"),
        open_engine(engine, sch, data, encoding=encoding, sep=sep) as eng,
    ):
        counts = eng.counts(list(workload))
        report = eng.report
    warn("exact counts are NOT differentially private; do not release them")
    if as_json:
        emit_json([{"id": q.id, "count": c} for q, c in zip(workload, counts, strict=True)])
        return
    out = Table("id", "count", "condition", title=f"exact counts ({report.rows} rows, {engine})")
    for q, c in zip(workload, counts, strict=True):
        out.add_row(escape(str(q.id)), str(c), escape(q.describe()))  # by_sex[sex=0] is not markup
    console.print(out)
