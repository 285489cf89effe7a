"""``overlapdp schema``: show a schema, or infer one from a CSV with declared bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from overlapdp.cli.app import app, console, emit_json
from overlapdp.cli.help_format import Typer
from overlapdp.errors import SchemaError
from overlapdp.schema import Schema, infer_schema, read_table

schema_app = Typer(help="Inspect or infer schemas.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")


@schema_app.command("show")
def show(
    schema: Annotated[Path, typer.Argument(help="Schema JSON file (full or compact form).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a schema's attributes and domain size."""
    sch = Schema.load(schema)
    if as_json:
        emit_json(sch.to_json())
        return
    table = Table("attribute", "type", "size", "values", title=f"domain size {sch.domain_size:,}")
    for a in sch:
        first = ", ".join(str(a.value_at(i)) for i in range(min(a.size, 4)))
        table.add_row(a.name, a.kind, str(a.size), first + (", ..." if a.size > 4 else ""))
    console.print(table)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise SchemaError(f"{what} {item!r}: expected NAME=VALUE")
        name, value = item.split("=", 1)
        out[name.strip()] = value.strip()
    return out


@schema_app.command("infer")
def infer(
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file.")],
    bounds: Annotated[list[str], typer.Option("--bounds", help="Integer column: NAME=MIN:MAX.")] = [],  # noqa: B006
    edges: Annotated[list[str], typer.Option("--edges", help="Binned column: NAME=E0,E1,...")] = [],  # noqa: B006
    categories: Annotated[
        list[str], typer.Option("--categories", help="Categorical column: NAME=V1,V2,...")
    ] = [],  # noqa: B006
    categories_from_data: Annotated[
        bool,
        typer.Option("--categories-from-data", help="Text columns' values present in the data are public."),
    ] = False,
    columns: Annotated[str | None, typer.Option("--columns", help="Comma-separated columns to keep.")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the schema here (default: stdout).")
    ] = None,
) -> None:
    """Infer a schema; numeric bounds must be declared (inferring them from data leaks)."""
    frame = read_table(data)
    parsed_bounds: dict[str, tuple[int, int]] = {}
    for name, spec in _pairs(bounds, "--bounds").items():
        try:
            lo, hi = spec.split(":")
            parsed_bounds[name] = (int(lo), int(hi))
        except ValueError:
            raise SchemaError(f"--bounds {name}: expected MIN:MAX integers") from None
    parsed_edges: dict[str, list[float]] = {}
    for name, spec in _pairs(edges, "--edges").items():
        try:
            parsed_edges[name] = [float(e) for e in spec.split(",")]
        except ValueError:
            raise SchemaError(f"--edges {name}: expected comma-separated numbers") from None
    parsed_cats = {
        name: [v.strip() for v in spec.split(",")]
        for name, spec in _pairs(categories, "--categories").items()
    }
    sch = infer_schema(
        frame,
        bounds=parsed_bounds,
        edges=parsed_edges,
        categories=parsed_cats,
        categories_from_data=categories_from_data,
        columns=[c.strip() for c in columns.split(",")] if columns else None,
    )
    text = json.dumps(sch.to_json(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
