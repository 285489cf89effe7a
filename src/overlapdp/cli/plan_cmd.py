"""``overlapdp plan``: each query's share of a budget, its noise and error bar, and what the same workload
would cost under every accounting, without reading any data (MATH.md 2.10)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from overlapdp.cli.app import NeighbouringOption, app, console, emit_json, err_console
from overlapdp.errors import OverlapDPError

_UNIT = {"pure": "ε", "zcdp": "ρ", "gdp": "μ"}


@app.command()
def plan(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    queries: Annotated[
        Path, typer.Option("--queries", help="Workload file, JSON Lines ('weight' = importance).")
    ],
    definition: Annotated[
        Literal["pure", "zcdp", "gdp"],
        typer.Option("--definition", help="Privacy definition: the budget is epsilon, rho or mu."),
    ],
    budget: Annotated[
        float | None, typer.Option("--budget", help="Total budget in the definition's unit.")
    ] = None,
    target_error: Annotated[
        int | None,
        typer.Option(
            "--target-error",
            help="Instead of --budget: the smallest budget that answers every query within +- this many "
            "rows at --level.",
        ),
    ] = None,
    allocation: Annotated[
        Literal["optimal", "even"],
        typer.Option("--allocation", help="optimal: shares where the rows can afford them; even: B / gamma."),
    ] = "optimal",
    objective: Annotated[
        Literal["variance", "relative"],
        typer.Option("--objective", help="variance: least weighted total; relative: least largest weighted."),
    ] = "variance",
    neighbouring: NeighbouringOption = "add_remove",
    level: Annotated[float, typer.Option("--level", help="Confidence level of the error bars.")] = 0.95,
    effort: Annotated[
        float, typer.Option("--effort", help="Seconds per overlap search (then a safe bound).")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Plan a release: per-query shares, noise and error bars, and the gain over other accountings."""
    from overlapdp.display import decimal, spent
    from overlapdp.mechanisms.planning import error_target, plan_release
    from overlapdp.query import Workload
    from overlapdp.schema import Schema

    if (budget is None) == (target_error is None):
        raise OverlapDPError("give either --budget or --target-error, not both and not neither")
    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries)
    qs = list(workload)
    if target_error is not None:
        target = error_target(
            qs, target_error, definition, level=level, effort=effort, neighbouring=neighbouring
        )
        if as_json:
            emit_json(target)
            return
        total, share, gamma = target["budget"], target["per_query"], target["gamma"]
        u = _UNIT[definition]
        console.print(
            f"every query within ±{target_error} at {level:.0%}: total {u} = {spent(total)} "
            f"({u} = {decimal(share, rounding='down')} per query, gamma {gamma})"
        )
        return
    assert budget is not None
    with err_console.status(f"planning {len(qs)} queries...", spinner="dots"):
        rp = plan_release(
            qs,
            budget,
            definition,
            allocation=allocation,
            objective=objective,
            level=level,
            effort=effort,
            neighbouring=neighbouring,
        )
    if as_json:
        emit_json(rp.to_json())
        return
    u = _UNIT[definition]
    t = Table(
        "id",
        f"share ({u})",
        "noise std",
        f"{rp.level:.0%} error bar",
        "condition",
        title=f"release plan ({allocation})",
    )
    for q, s, d, w in zip(qs, rp.shares, rp.stds, rp.half_widths, strict=True):
        t.add_row(
            escape(str(q.id)), decimal(s, rounding="down"), decimal(d, 4), f"±{w}", escape(q.describe())
        )
    console.print(t)
    cmp = Table(
        "accounting",
        "total noise variance",
        "vs this plan",
        title=f"the same guarantee ({u} = {spent(rp.budget)}), other accountings",
    )
    mine = rp.totals.get("optimal overlap", rp.totals["even overlap"])
    for name, v in rp.totals.items():
        ratio = "" if not math.isfinite(v) else f"{v / mine:.2f}x"
        cmp.add_row(
            name, "too small to calibrate" if not math.isfinite(v) else decimal(v, 6, rounding="up"), ratio
        )
    console.print(cmp)
    console.print(f"gamma (max overlap) {rp.gamma}; {rp.families} families of disjoint queries")
    if rp.allocation is not None:
        a = rp.allocation
        console.print(
            f"every row's charges within {u} = {spent(rp.budget)} (certified worst row ≤ {spent(a.worst_row)}, "
            f"{a.method}); within {a.gap:.2%} of the best possible total"
        )
