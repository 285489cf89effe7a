"""``overlapdp answer``: spend a total budget on a workload and print noisy counts with error bars."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from overlapdp.cli.app import (
    DataEncoding,
    NeighbouringOption,
    Separator,
    app,
    console,
    emit_json,
    progress,
    warn,
)
from overlapdp.display import decimal, remaining, spent
from overlapdp.engine.registry import EngineName
from overlapdp.mechanisms.answer_options import DEFAULT_DELTA, DEFAULT_EFFORT, Accounting, Definition

if TYPE_CHECKING:  # the command imports them when it runs, so that `overlapdp --help` stays fast
    from collections.abc import Sequence

    from overlapdp.mechanisms import NoisyAnswer
    from overlapdp.mechanisms.answering import AnswerPlan
    from overlapdp.mechanisms.sums import NoisyMean, NoisySum
    from overlapdp.query import PredicateQuery
    from overlapdp.query.aggregate import Aggregate

_SYMBOL = {"epsilon": "ε", "rho": "ρ", "mu": "μ"}


@app.command()
def answer(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    data: Annotated[Path, typer.Option("--data", help="CSV or Parquet file with the rows.")],
    queries: Annotated[Path, typer.Option("--queries", help="Workload file, JSON Lines.")],
    definition: Annotated[
        Definition,
        typer.Option("--definition", help="Privacy definition: the budget is epsilon, rho or mu."),
    ],
    budget: Annotated[
        float | None,
        typer.Option("--budget", help="Total budget in the definition's unit (or give --epsilon)."),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            "--epsilon",
            help="Total budget as epsilon at --delta: the largest budget whose (epsilon, delta) is within it.",
        ),
    ] = None,
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help=f"delta of the (epsilon, delta) statement and of --epsilon (default {DEFAULT_DELTA:g}; "
            "pure DP needs none: it is (epsilon, 0)-DP).",
        ),
    ] = None,
    engine: Annotated[EngineName, typer.Option("--engine", help="Where to count.")] = "duckdb",
    accounting: Annotated[
        Accounting,
        typer.Option(
            "--accounting", help="How the budget is shared: by maximum overlap, or every query pays."
        ),
    ] = "overlap",
    allocation: Annotated[
        Literal["even", "optimal"],
        typer.Option(
            "--allocation",
            help="even: every query B / gamma; optimal: each query its own share where the rows can afford "
            "it (overlap accounting; 'weight' per line = importance; see overlapdp plan).",
        ),
    ] = "even",
    objective: Annotated[
        Literal["variance", "relative"],
        typer.Option(
            "--objective", help="For --allocation optimal: least weighted total or largest variance."
        ),
    ] = "variance",
    neighbouring: NeighbouringOption = "add_remove",
    level: Annotated[float, typer.Option("--level", help="Confidence level of the error bars.")] = 0.95,
    effort: Annotated[
        float, typer.Option("--effort", help="Seconds for the maximum-overlap search (then a safe bound).")
    ] = DEFAULT_EFFORT,
    consistent: Annotated[
        bool,
        typer.Option(
            "--consistent",
            help="Also print consistent answers: the noisy ones projected onto a non-negative table's "
            "answers (post-processing, no privacy cost; total squared error never increases; no error bars).",
        ),
    ] = False,
    encoding: DataEncoding = None,
    sep: Separator = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Noisy counts of every query, the budget spread evenly (overlap-aware by default), with error bars."""
    from overlapdp.engine import open_engine
    from overlapdp.mechanisms.answering import answer_workload, plan_answers
    from overlapdp.query import Workload
    from overlapdp.query.aggregate import load_declared_bounds
    from overlapdp.schema import Schema

    sch = Schema.load(schema)
    workload = Workload.read_jsonl(sch, queries, declared=load_declared_bounds(schema))
    # Every check (budget, definition, workload, data file, columns, values) happens before any noise.
    plan = plan_answers(
        list(workload),
        budget,
        definition,
        accounting,
        level=level,
        effort=effort,
        delta=delta,
        epsilon=epsilon,
        allocation=allocation,
        objective=objective,
        neighbouring=neighbouring,
    )
    with (
        progress(f"reading {data.name} and counting ({engine})"),
        open_engine(engine, sch, data, encoding=encoding, sep=sep) as eng,
    ):
        result = answer_workload(eng, workload, plan, consistent=consistent)
    if not plan.gamma_exact:
        warn(
            f"the maximum overlap search stopped early: using its safe upper bound {plan.gamma} "
            f"(at least {plan.gamma_lower})"
        )
    if as_json:
        emit_json(result.to_json())
        return
    fitted = result.consistent
    columns = ["id", "answer", f"{plan.level:.0%} error bar"] + (["consistent"] if fitted else [])
    out = Table(*columns, "condition", title=f"noisy answers ({engine})")
    aggregates: list[Aggregate | None] = [*workload.aggregates] or [None] * len(result.answers)
    for i, (q, a, agg) in enumerate(zip(workload, result.answers, aggregates, strict=True)):
        extra = [f"{fitted.values[i]:.1f}"] if fitted else []
        # A sum or mean is a real number: a short decimal, its bar widened outwards (never narrower).
        value = decimal(a.value) if isinstance(a.value, float) else str(a.value)
        low = decimal(a.low, rounding="down") if isinstance(a.low, float) else str(a.low)
        high = decimal(a.high, rounding="up") if isinstance(a.high, float) else str(a.high)
        what = q.describe()
        if agg is not None and agg.clipping is not None:
            what = f"{agg.kind} of {agg.clipping.column} over {what}"
        # Escaped: a GROUP BY cell's id, by_sex[sex=Female], would otherwise be read as rich markup.
        out.add_row(escape(str(q.id)), value, escape(f"[{low}, {high}]"), *extra, escape(what))
    console.print(out)
    if fitted:
        from overlapdp.mechanisms.consistency import NOTE

        console.print(f"consistent: {fitted.design.cells} cells, {fitted.solver}; {NOTE}")
    parallel = result.parallel_payers if result.groups else None
    console.print(_privacy_table(plan, parallel, list(workload), _noise_rows(result.answers)))


def _noise_rows(answers: Sequence[NoisyAnswer | NoisySum | NoisyMean]) -> dict[str, str]:
    """The noise of each kind of answer (counts, each sum, each mean's two halves), in order of first
    appearance: a mixed workload's sums are calibrated to their clipping's sensitivity, not a count's 1."""
    from overlapdp.mechanisms.sums import NoisyMean, NoisySum

    rows: dict[str, str] = {}
    for a in answers:
        if isinstance(a, NoisySum):
            key = f"noise, sum of {a.clipping.column}"
            text = f"{a.noise.describe()} in steps of {decimal(a.clipping.step)} (std {decimal(a.std, 4)})"
        elif isinstance(a, NoisyMean):
            key = f"noise, mean of {a.sum.clipping.column}"
            text = (
                f"sum: {a.sum.noise.describe()} in steps of {decimal(a.sum.clipping.step)}; "
                f"count: {a.count.noise.describe()} (half the budget each)"
            )
        else:
            key = "noise, counts"
            text = f"{a.noise.describe()} (std {decimal(a.std, 4)})"
        rows.setdefault(key, text)
    return rows


def _privacy_table(
    plan: AnswerPlan, parallel: int | None, queries: list[PredicateQuery], noise: dict[str, str]
) -> Table:
    """The privacy report: budget, shares and both guarantees in the definition's own unit (epsilon, rho,
    or mu with the zCDP rho it is declared as), each also as (epsilon, delta) at the plan's delta."""
    p = plan.to_json()
    rep = Table("privacy", "", title="privacy report", show_header=False)
    rep.add_row("definition", plan.definition)
    # The budget and the per-query share are amounts to type back in (a service's budget, quota and
    # per-query parameter): rounded DOWN, so that they stay within what was asked;
    # guarantees are rounded up.
    budget = _fmt(p["budget"], room=True)
    if plan.target_epsilon is not None:
        budget += f" (calibrated to ε ≤ {decimal(plan.target_epsilon)} at δ = {_delta(plan)})"
    rep.add_row("budget", budget)
    rep.add_row("accounting", plan.accounting)
    rep.add_row("queries (t)", str(plan.queries))
    rep.add_row("max overlap (gamma)", f"{plan.gamma} ({'exact' if plan.gamma_exact else 'upper bound'})")
    if plan.shares is None:
        rep.add_row("per-query budget", _fmt(p["per_query"], room=True))
        if set(noise) <= {"noise, counts"}:
            rep.add_row("noise", f"{p['noise']} (std {decimal(p['noise_std'], 4)})")
        else:  # a mixed workload: each kind's own noise (a sum's scale is not a count's)
            for key, text in noise.items():
                rep.add_row(key, text)
    else:
        sym = _SYMBOL.get(_unit(p), "")
        rep.add_row(
            "per-query budget",
            f"optimal allocation: {sym} from {decimal(min(plan.shares), rounding='down')} to "
            f"{decimal(max(plan.shares), rounding='down')} ({plan.allocation_method})",
        )
        rep.add_row("noise", f"per query, at its share (rms std {decimal(p['noise_std'], 4)})")
    ed = p["epsilon_delta"]
    for side, label in (("sequential", "sequential"), ("overlap", "overlap-aware")):
        rep.add_row(f"guarantee, {label}", _fmt(p["guarantee"][side]))
        rep.add_row(f"  as (ε, δ), {label}", f"ε = {spent(ed[side])}, δ = {_delta(plan)}")
    # A missing value (None) is shown as SQL writes it; an attribute no query constrains as "any value".
    from overlapdp.query.witness import shown_witness

    row = shown_witness(plan.witness or {}, queries).items()
    rep.add_row("witness row", ", ".join(f"{k} = {v}" for k, v in row))
    rep.add_row("noise reduction vs sequential", f"{plan.noise_reduction:.1%} ({plan.queries} charges)")
    if parallel is not None:  # a GROUP BY: the peers (Tumult Analytics, OpenDP) charge it once
        rep.add_row(
            "noise reduction vs parallel",
            f"{plan.noise_reduction_vs(parallel):.1%} ({parallel} charges, a GROUP BY once)",
        )
    if "note" in p:
        rep.add_row("note", str(p["note"]))
    return rep


def _unit(p: dict[str, object]) -> str:
    budget = p["budget"]
    assert isinstance(budget, dict)
    return str(next(iter(budget)))


def _delta(plan: AnswerPlan) -> str:
    return "0" if plan.delta is None else decimal(plan.delta)


def _fmt(d: dict[str, object], *, room: bool = False) -> str:
    """``ρ = 0.5``; a GDP guarantee as ``μ = 1 (declared as zCDP ρ = 0.5)``. Privacy parameters are
    rounded up (never shown below their value); with ``room``, a budget or share to use, the amount is
    rounded down (typed back in, it never exceeds the computed one) and the declared rho still up."""
    parts = {k: v for k, v in d.items() if k != "declared_zcdp_rho"}
    shown = remaining if room else spent
    text = ", ".join(
        f"{_SYMBOL.get(k, k)} = {shown(v) if isinstance(v, float | int) else v}" for k, v in parts.items()
    )
    rho = d.get("declared_zcdp_rho")
    if isinstance(rho, float):
        text += f" (declared as zCDP ρ = {spent(rho)})"
    return text
