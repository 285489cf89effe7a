"""``overlapdp schema``: show a schema, infer one from a CSV with declared bounds, or check data against
one (``check``: exact figures, NOT private, for the data owner)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from overlapdp.cli.app import DataEncoding, Separator, app, console, emit_json, progress, warn
from overlapdp.cli.help_format import Typer
from overlapdp.errors import OverlapDPError, SchemaError

#: How ``schema infer``'s errors name what to declare: the command's flags (a Vocabulary built when the
#: command runs: the schema package imports numpy, which --help must not load).
CLI_FLAGS = {
    "bounds": "--bounds NAME=MIN:MAX",
    "edges": "--edges NAME=E0,E1,...",
    "categories": "--categories NAME=V1,V2,...",
    "categories_from_data": "--categories-from-data",
}

schema_app = Typer(help="Inspect or infer schemas.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")


@schema_app.command("show")
def show(
    schema: Annotated[Path, typer.Argument(help="Schema JSON file (full or compact form).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a schema's attributes and domain size."""
    from overlapdp.schema import Schema  # (numpy: imported when a command runs, not for --help)

    sch = Schema.load(schema)
    if as_json:
        emit_json(sch.to_json())
        return
    title = f"domain size {sch.domain_size:,}; rows outside the domain: {sch.outside}"
    table = Table("attribute", "type", "size", "values", "missing", title=title)
    for a in sch:
        first = ", ".join(str(a.value_at(i)) for i in range(min(a.value_count, 4)))
        more = ", ..." if a.value_count > 4 else ""
        table.add_row(a.name, a.kind, str(a.size), first + more, "allowed" if a.missing else "no")
    console.print(table)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise SchemaError(f"{what} {item!r}: expected NAME=VALUE")
        name, value = item.split("=", 1)
        out[name.strip()] = value.strip()
    return out


def _bound_items(items: list[str]) -> list[str]:
    """``--bounds`` given once per column or once for several, comma-separated
    (``age=17:90,hours_per_week=1:99``): a bound's MIN:MAX holds no comma, so each comma starts a column."""
    return [part for item in items for part in item.split(",") if part.strip()]


def _check_declared(frame: Any, declared: list[str], data: Path, sep: str | None) -> None:
    """A declared column that is not in the file, named with the columns found and, for a CSV, the
    separator it was read with (a wrong separator reads each line as one column)."""
    columns = [str(c) for c in frame.columns]
    absent = [n for n in declared if n not in columns]
    if not absent:
        return
    from overlapdp.files import SEPARATORS, separator_name

    shown = ", ".join(repr(c) for c in columns[:6]) + (", ..." if len(columns) > 6 else "")
    text = (
        f"declared column {absent[0]!r} (--bounds, --edges, --categories) is not in {str(data)!r}, "
        f"whose {len(columns)} column(s) are {shown}"
    )
    if sep is not None:
        text += f"; it was read with separator {separator_name(sep)}"
        other = [c for c in SEPARATORS if c != sep and any(c in col for col in columns)]
        if other:
            text += (
                f", but the header holds {separator_name(other[0])}: give --sep {separator_name(other[0])}"
            )
        else:
            text += " (give --sep if the file uses another)"
    raise SchemaError(text)


@schema_app.command("infer")
def infer(
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file.")],
    bounds: Annotated[
        list[str],
        typer.Option(
            "--bounds", help="Integer column: NAME=MIN:MAX (repeat, or NAME=MIN:MAX,NAME2=MIN:MAX)."
        ),
    ] = [],  # noqa: B006
    edges: Annotated[list[str], typer.Option("--edges", help="Binned column: NAME=E0,E1,...")] = [],  # noqa: B006
    categories: Annotated[
        list[str], typer.Option("--categories", help="Categorical column: NAME=V1,V2,...")
    ] = [],  # noqa: B006
    categories_from_data: Annotated[
        bool,
        typer.Option("--categories-from-data", help="Text columns' values present in the data are public."),
    ] = False,
    columns: Annotated[str | None, typer.Option("--columns", help="Comma-separated columns to keep.")] = None,
    missing: Annotated[
        str,
        typer.Option(
            "--missing",
            help="Missing cells: 'value' (columns with one allow a missing value, no row is dropped) "
            'or \'drop\' (the schema drops rows outside its domain: "outside": "drop").',
        ),
    ] = "value",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the schema here (default: stdout).")
    ] = None,
    encoding: DataEncoding = None,
    sep: Separator = None,
) -> None:
    """Infer a schema; numeric bounds must be declared (inferring them from data leaks)."""
    from overlapdp.files import csv_format, is_parquet

    if missing not in ("value", "drop"):
        raise SchemaError(f"--missing {missing!r}: use 'value' or 'drop'")
    from overlapdp.schema import infer_schema, read_table
    from overlapdp.schema.infer import Vocabulary

    if data.is_file() and not is_parquet(data):
        fmt = csv_format(data, encoding=encoding, sep=sep)
        encoding, sep = fmt.encoding, fmt.sep
    frame = read_table(data, encoding=encoding, sep=sep)
    parsed_bounds: dict[str, tuple[int, int]] = {}
    for name, spec in _pairs(_bound_items(bounds), "--bounds").items():
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
    _check_declared(frame, [*parsed_bounds, *parsed_edges, *parsed_cats], data, sep)
    sch = infer_schema(
        frame,
        bounds=parsed_bounds,
        edges=parsed_edges,
        categories=parsed_cats,
        categories_from_data=categories_from_data,
        columns=[c.strip() for c in columns.split(",")] if columns else None,
        missing="drop" if missing == "drop" else "value",
        vocabulary=Vocabulary(**CLI_FLAGS),
    )
    allowed = [a.name for a in sch if a.missing]
    if allowed:
        warn(
            f"{', '.join(allowed)}: the data has missing cells there, so the schema allows a missing value "
            "(visible to analysts; query it with IS NULL)"
        )
    elif missing == "drop":
        warn('the schema drops rows with a missing cell or a value outside its domain ("outside": "drop")')
    text = json.dumps(sch.to_json(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")


@schema_app.command("check")
def check(
    schema: Annotated[Path, typer.Argument(help="Schema JSON file.")],
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file with the rows.")],
    engine: Annotated[
        str, typer.Option("--engine", help="Where to read the data: duckdb | pandas | polars | spark.")
    ] = "duckdb",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    encoding: DataEncoding = None,
    sep: Separator = None,
) -> None:
    """NOT PRIVATE: exact counts of missing values and of values outside the schema's domain, per
    attribute, for the data owner (never for analysts). Exits 1 when rows do not fit the domain and
    the schema's policy is "outside": "error" (counting would then fail)."""
    # Imported here: the engines (DuckDB, Polars) are not needed by the other schema commands.
    from overlapdp.engine import ENGINES, open_engine
    from overlapdp.schema import Schema

    if engine not in ENGINES:
        raise OverlapDPError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    sch = Schema.load(schema)
    with (
        progress(f"reading {data.name} ({engine})"),
        open_engine(engine, sch, data, encoding=encoding, sep=sep) as eng,
    ):
        report = eng.report
    warn("NOT PRIVATE: exact figures about the data, for the data owner; do not release them")
    fails = bool(report.rows_outside) and sch.outside == "error"
    if as_json:
        emit_json({"private": False, "policy": sch.outside, "fits": not fails, **report.to_json()})
    else:
        title = f"schema check (NOT PRIVATE: for the data owner): {report.rows} rows, {engine}"
        table = Table("attribute", "missing", "missing allowed", "outside the domain", title=title)
        for a in sch:
            table.add_row(
                a.name,
                str(report.missing.get(a.name, 0)),
                "yes" if a.missing else "no",
                str(report.outside.get(a.name, 0)),
            )
        console.print(table)
        console.print(report.describe())
        if not report.rows_outside:
            verdict = "every row fits the domain; no row is dropped"
        elif sch.outside == "drop":
            verdict = f'{report.rows_outside} rows are dropped from every count, as the schema states ("outside": "drop")'
        else:
            verdict = (
                'counting fails: the schema\'s policy is "outside": "error"; allow missing values with '
                '"missing": true on the attribute, widen the domain, or state "outside": "drop"'
            )
        console.print(verdict)
    if fails:
        raise typer.Exit(1)
