"""``overlapdp overlap``: the maximum (weighted) overlap of a workload file and the row that attains it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from overlapdp.cli.app import Encoding, app, console, emit_json, err_console, warn
from overlapdp.display import decimal
from overlapdp.errors import OverlapDPError

# Witness rows of more attributes than this show only some of them (the text output; --json has all).
_WITNESS_ROWS = 40


@app.command()
def overlap(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    queries: Annotated[
        Path, typer.Option("--queries", help="Workload file, JSON Lines ('weight' per line).")
    ],
    comp: Annotated[
        Literal["count", "sum", "l2"],
        typer.Option("--comp", help="count (gamma), sum (pure DP, zCDP) or l2 (Gaussian DP mu)."),
    ] = "count",
    effort: Annotated[
        float | None,
        typer.Option("--effort", help="Time limit in seconds; past it a safe upper bound is reported."),
    ] = None,
    encoding: Encoding = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Maximum (weighted) overlap: the worst row, the composed weight there, the queries covering it."""
    from overlapdp.overlap import max_overlap
    from overlapdp.query import Workload
    from overlapdp.schema import Schema

    if effort is not None and not effort >= 0:
        raise OverlapDPError(f"--effort {effort!r}: give a non-negative number of seconds")
    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries, encoding=encoding)
    with err_console.status(f"maximum overlap of {len(workload)} queries...", spinner="dots"):
        result = max_overlap(workload.queries, comp=comp, effort=effort, schema=sch)
    if not result.exact:
        warn(
            f"the search stopped at the effort limit: {_shown(result.value, 'up')} is a safe upper bound, not exact"
        )
    if as_json:
        emit_json(result.to_json())
        return
    summary = Table(show_header=False, title=f"maximum overlap ({comp}) of {len(workload)} queries")
    summary.add_row("value", _shown(result.value, "up"))  # a loss: rounded up (overlapdp.display)
    summary.add_row("exact", "yes" if result.exact else "no (safe upper bound)")
    if not result.exact:
        summary.add_row(
            "bounds", f"{_shown(result.lower, 'down')} <= true value <= {_shown(result.upper, 'up')}"
        )
    summary.add_row("algorithm", result.algorithm)
    summary.add_row("covering queries", str(len(result.queries)))
    console.print(summary)
    if result.witness is not None:
        row = Table("attribute", "witness value", title="witness row")
        names = list(result.witness)
        note = ""
        if len(names) > _WITNESS_ROWS:
            # A wide schema: the attributes the covering queries constrain, the first few of them
            # (10 000 table rows took seconds to print and nobody reads them); --json has the row.
            held = workload.queries
            used = sorted({p for i in result.query_indices for p, _ in held[i].constraints})
            names = [sch.attributes[p].name for p in used[:_WITNESS_ROWS]]
            note = (
                f"{len(names)} of the {len(result.witness)} attributes shown: "
                f"{'the first of ' if len(used) > len(names) else ''}the {len(used)} the covering queries "
                "constrain (--json gives the whole row)"
            )
        from overlapdp.query.witness import shown_witness

        shown = shown_witness(result.witness, workload.queries)  # "any value" where nothing constrains
        for name in names:
            row.add_row(name, shown[name])
        console.print(row)
        if note:
            console.print(note, highlight=False)
        ids = ", ".join(result.queries[:20]) + (", ..." if len(result.queries) > 20 else "")
        # Escaped: a GROUP BY cell's id, by_sex[sex=0], would otherwise be read as rich markup.
        console.print(f"queries covering it: {escape(ids) or '(none)'}", highlight=False)


def _shown(value: Any, rounding: Literal["up", "down"]) -> str:
    """An overlap (a composed loss) for people, rounded to the safe side (overlapdp.display): a value or
    an upper bound up, a lower bound down; a vector (one value per order) in parentheses."""
    import numpy as np

    texts = [decimal(float(x), rounding=rounding) for x in np.atleast_1d(np.asarray(value, dtype=float))]
    return texts[0] if len(texts) == 1 else "(" + ", ".join(texts) + ")"
