"""``overlapdp answer``: spend a total budget on a workload and print noisy counts with error bars."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from overlapdp.answering import ACCOUNTINGS, DEFAULT_EFFORT, DEFINITIONS
from overlapdp.cli.app import app, console, emit_json, warn
from overlapdp.engine.registry import ENGINES
from overlapdp.errors import OverlapDPError


@app.command()
def answer(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file with the rows.")],
    queries: Annotated[Path, typer.Option("--queries", help="Workload file, JSON Lines.")],
    budget: Annotated[float, typer.Option("--budget", help="Total budget: epsilon, rho or mu.")],
    definition: Annotated[str, typer.Option("--definition", help=f"{' | '.join(DEFINITIONS)}.")],
    engine: Annotated[
        str, typer.Option("--engine", help=f"Where to count: {' | '.join(ENGINES)}.")
    ] = "duckdb",
    accounting: Annotated[
        str, typer.Option("--accounting", help=f"How the budget is shared: {' | '.join(ACCOUNTINGS)}.")
    ] = "overlap",
    level: Annotated[float, typer.Option("--level", help="Confidence level of the error bars.")] = 0.95,
    effort: Annotated[
        float, typer.Option("--effort", help="Seconds for the maximum-overlap search (then a safe bound).")
    ] = DEFAULT_EFFORT,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Noisy counts of every query, the budget spread evenly (overlap-aware by default), with error bars."""
    from overlapdp.answering import answer_workload, plan_answers
    from overlapdp.engine import open_engine
    from overlapdp.query import Workload
    from overlapdp.schema import Schema

    if engine not in ENGINES:
        raise OverlapDPError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries)
    # Every check (budget, definition, workload, data file, columns, values) happens before any noise.
    plan = plan_answers(list(workload), budget, definition, accounting, level=level, effort=effort)
    with open_engine(engine, sch, data) as eng:
        result = answer_workload(eng, list(workload), plan)
    if result.domain.rows_outside:
        warn(result.domain.describe())
    if not plan.gamma_exact:
        warn(
            f"the maximum overlap search stopped early: using its safe upper bound {plan.gamma} "
            f"(at least {plan.gamma_lower})"
        )
    if as_json:
        emit_json(result.to_json())
        return
    out = Table("id", "answer", f"{plan.level:.0%} error bar", "condition", title=f"noisy counts ({engine})")
    for q, a in zip(workload, result.answers, strict=True):
        out.add_row(str(q.id), str(a.value), f"[{a.low}, {a.high}]", q.describe())
    console.print(out)
    p = plan.to_json()
    rep = Table("privacy", "", title="privacy report", show_header=False)
    rep.add_row("definition", plan.definition)
    rep.add_row("budget", _fmt(p["budget"]))
    rep.add_row("accounting", plan.accounting)
    rep.add_row("queries (t)", str(plan.queries))
    rep.add_row("max overlap (gamma)", f"{plan.gamma} ({'exact' if plan.gamma_exact else 'upper bound'})")
    rep.add_row("per-query budget", _fmt(p["per_query"]))
    rep.add_row("noise", f"{p['noise']} (std {p['noise_std']:.4g})")
    rep.add_row("guarantee, sequential", _fmt(p["guarantee"]["sequential"]))
    rep.add_row("guarantee, overlap-aware", _fmt(p["guarantee"]["overlap"]))
    rep.add_row("witness row", _fmt(plan.witness or {}))
    rep.add_row("noise reduction vs sequential", f"{plan.noise_reduction:.1%}")
    if "note" in p:
        rep.add_row("note", str(p["note"]))
    console.print(rep)


def _fmt(d: dict[str, object]) -> str:
    return ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}" for k, v in d.items())
