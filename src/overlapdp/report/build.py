"""``build_report``: the HTML report and PNG plots of a workload or a ledger (DESIGN.md step 7).

Workload: sequential vs overlap-aware spend per comp family (t vs gamma, sum vs gamma_sum, l2 vs
gamma_l2), the utility gain $U=1-\\gamma_w(Q)/\\mathrm{comp}(Q)$ with per-query noise for a total budget
(MATH.md 2.6, :func:`overlapdp.privacy.utility_gain`), and the per-row load heat map.
Ledger: the odometer's tightest epsilon over time, sequential vs overlap-aware, per analyst and for all
(MATH.md 2, 3, 5), the per-definition guarantees of the whole ledger, the heat map and the worst row;
or, with ``basis="pure"``, all of it in pure epsilon with parallel composition over declared partitions.
Every gamma is max_overlap's value: exact, or its safe upper bound when an effort limit stopped it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from overlapdp.display import DEFINITION_NAMES, guarantee, remaining, spent
from overlapdp.overlap import max_overlap
from overlapdp.privacy.definitions import check_delta
from overlapdp.privacy.measures import measure_named
from overlapdp.privacy.utility import Definition, UtilityGain, utility_gain
from overlapdp.query import PredicateQuery, Workload
from overlapdp.report import html as H
from overlapdp.report.ledger import (
    ALL,
    BudgetCurve,
    LedgerEntry,
    analysts,
    budget_curve,
    check_partitions,
    entries_of,
    ledger_loads,
    pure_curve,
    pure_epsilons,
)
from overlapdp.report.loads import (
    HeatMap,
    ReportInputError,
    check_heat_against,
    choose_axes,
    heat_map,
    workload_spend,
)
from overlapdp.report.plots import plot_budget, plot_heat, plot_spend, plot_utility
from overlapdp.schema import Schema
from overlapdp.validation import check_positive


@dataclass(frozen=True)
class ReportSummary:
    """Where the report went and the numbers in it (``numbers`` is JSON-ready)."""

    kind: Literal["workload", "ledger"]
    out_dir: Path
    html: Path
    plots: dict[str, Path]
    numbers: dict[str, Any] = field(default_factory=dict)
    heat: HeatMap | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "html": str(self.html),
            "plots": {k: str(v) for k, v in self.plots.items()},
            **self.numbers,
        }


def build_report(
    schema: Schema,
    source: Workload | Sequence[PredicateQuery] | Sequence[LedgerEntry],
    out_dir: str | Path,
    *,
    budget: float | None = None,
    x: str | None = None,
    y: str | None = None,
    delta: float = 1e-6,
    effort: float | None = None,
    basis: Literal["delta", "pure"] = "delta",
    partitions: Mapping[str, str] | None = None,
) -> ReportSummary:
    """Write ``out_dir/report.html`` and its PNGs for a workload (queries) or a ledger (entries from
    :func:`overlapdp.report.read_ledger` / :func:`overlapdp.report.parse_ledger`); ``basis`` and
    ``partitions`` apply to a ledger (:func:`ledger_report`)."""
    items = list(source)
    if not items:
        raise ReportInputError("nothing to report: the workload or ledger is empty")
    if all(isinstance(i, LedgerEntry) for i in items):
        return ledger_report(
            schema,
            items,  # type: ignore[arg-type]
            out_dir,
            budget=budget,
            x=x,
            y=y,
            delta=delta,
            effort=effort,
            basis=basis,
            partitions=partitions,
        )
    if all(isinstance(i, PredicateQuery) for i in items):
        return workload_report(schema, items, out_dir, budget=budget, x=x, y=y, effort=effort)  # type: ignore[arg-type]
    raise ReportInputError("give either predicate queries (a workload) or ledger entries, not a mix")


def _out(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportInputError(
            f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}"
        ) from None
    return out


def _heat_marker(heat: HeatMap, schema: Schema, row: tuple[int, ...] | None) -> tuple[str, str] | None:
    if row is None:
        return None
    px, py = schema.position(heat.x), schema.position(heat.y)
    return heat.x_labels[row[px]], heat.y_labels[row[py]]


def _witness_table(witness: dict[str, Any] | None, queries: Sequence[PredicateQuery | None]) -> str:
    """The worst row; an attribute no query constrains shows "any value" (the search filled in the first
    value of its domain, which does not matter)."""
    if not witness:
        return H.paragraph("No witness row.")
    from overlapdp.query.witness import shown_witness

    return H.table(["attribute", "value"], [[k, v] for k, v in shown_witness(witness, queries).items()])


def _budget(budget: float | None, default: float | None) -> float | None:
    if budget is None:
        return default
    return check_positive(budget, "--budget", error=ReportInputError)


def workload_report(
    schema: Schema,
    queries: Sequence[PredicateQuery],
    out_dir: str | Path,
    *,
    budget: float | None = None,
    x: str | None = None,
    y: str | None = None,
    effort: float | None = None,
) -> ReportSummary:
    """The report of a fixed workload (module docstring). ``budget`` (default 1) is the total budget
    spread over the queries for the utility-gain table."""
    qs = list(queries)
    if not qs:
        raise ReportInputError("the workload is empty: nothing to report")
    b = _budget(budget, 1.0)
    assert b is not None
    heat_xy = choose_axes(schema, qs, x, y) if (x or y or len(schema) >= 2) else None
    out = _out(out_dir)
    spends = workload_spend(qs, schema=schema, effort=effort)
    definitions: tuple[Definition, ...] = ("pure", "zcdp", "gdp")
    gains: list[UtilityGain] = [utility_gain(qs, b, definition=d, effort=effort) for d in definitions]
    plots = {
        "spend": plot_spend(spends, out / "spend.png"),
        "utility": plot_utility(gains, out / "utility.png"),
    }
    by_comp = {s.comp: s for s in spends}
    heat = None
    if heat_xy is not None:
        heat = heat_map(qs, heat_xy[0], heat_xy[1], schema=schema, effort=effort)
        s = by_comp["sum"]
        check_heat_against(heat, s.overlap, s.exact, "max_overlap (comp sum)")
        plots["heatmap"] = plot_heat(heat, out / "heatmap.png", _heat_marker(heat, schema, s.witness_row))
    t, gamma = by_comp["count"].sequential, by_comp["count"].overlap
    numbers: dict[str, Any] = {
        "queries": len(qs),
        "t": t,
        "gamma": gamma,
        "budget": b,
        "spend": [
            {
                "comp": s.comp,
                "sequential": s.sequential,
                "overlap": s.overlap,
                "gain": s.gain,
                "exact": s.exact,
            }
            for s in spends
        ],
        "utility": [g.as_dict() for g in gains],
        "witness": by_comp["sum"].witness,
    }
    if heat is not None:
        numbers["heat_map"] = _heat_json(heat)
    sections = [
        (
            "Summary",
            H.paragraph(
                f"{len(qs)} queries over {len(schema)} attributes. Sequential accounting charges t = {t:g} "
                f"queries; the worst row is covered by only γ = {spent(gamma)} of them"
                + ("" if by_comp["count"].exact else " (a safe upper bound: the search stopped early)")
                + f", so overlap-aware accounting saves U = {by_comp['count'].gain:.1%} of the budget."
            ),
        ),
        (
            "Sequential vs overlap-aware spend",
            H.table(
                ["comp", "sequential comp(Q)", "overlap-aware γ_w(Q)", "U = 1 − γ_w/comp", "exact"],
                [[s.comp, s.sequential, s.overlap, f"{s.gain:.2%}", s.exact] for s in spends],
            )
            + H.image(plots["spend"], "sequential vs overlap-aware spend"),
        ),
        (
            f"Utility gain at total budget {b:g}",
            H.table(
                [
                    "definition",
                    "comp(Q)",
                    "γ_w(Q)",
                    "U",
                    "per-query budget (seq.)",
                    "per-query budget (overlap)",
                    "E|noise| (seq.)",
                    "E|noise| (overlap)",
                    "noise reduction",
                ],
                [
                    [
                        g.definition,
                        g.comp,
                        g.gamma,
                        f"{g.gain:.2%}",
                        remaining(g.sequential_budget),  # a share to use: rounded down
                        remaining(g.overlap_budget),
                        g.sequential_noise,
                        g.overlap_noise,
                        f"{g.noise_reduction:.2%}",
                    ]
                    for g in gains
                ],
            )
            + H.image(plots["utility"], "utility gain")
            + H.paragraph(
                "Budgets are epsilon (pure DP, Laplace), rho (zCDP, Gaussian) or mu (Gaussian DP), spread in "
                "proportion to the query weights; noise is the mean expected absolute noise per count."
            ),
        ),
    ]
    plans = _allocation_rows(qs, b, effort)
    numbers["allocation"] = plans
    sections.append(
        (
            f"Sharing the budget {b:g}: total noise variance at the same guarantee",
            H.table(
                [
                    "definition",
                    "sequential",
                    "parallel (partitions)",
                    "even overlap shares",
                    "optimal overlap allocation",
                    "optimal vs parallel",
                    "proven gap",
                ],
                [
                    [
                        p["definition"],
                        p["sequential"],
                        p["partitions"],
                        p["even overlap"],
                        p["optimal overlap"],
                        f"{p['partitions'] / p['optimal overlap']:.2f}x lower",
                        f"{p['gap']:.2%}",
                    ]
                    for p in plans
                ],
            )
            + H.paragraph(
                "Sum over the queries of each noisy count's variance when the total budget is spent: "
                "sequential composition (every query pays), partition-based parallel composition (each family "
                "of pairwise disjoint queries pays once: what Tumult Analytics or OpenDP charge), even "
                "overlap-aware shares B/γ, and the optimal allocation (MATH.md 2.10: every row within the "
                "budget; `overlapdp plan` prints each query's share). zCDP stands for GDP too (the same "
                "problem in ρ = μ²/2)."
            ),
        )
    )
    if heat is not None:
        sections.append(_heat_section(heat, plots["heatmap"]))
    sections.append(("Worst row (sum of weights)", _witness_table(by_comp["sum"].witness, qs)))
    page = H.page("overlapdp report: workload", sections)
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return ReportSummary("workload", out, html_path, plots, numbers, heat)


def _allocation_rows(
    qs: Sequence[PredicateQuery], budget: float, effort: float | None
) -> list[dict[str, Any]]:
    """Per definition (pure DP, zCDP), each accounting's total noise variance at ``budget``
    (:func:`overlapdp.mechanisms.planning.plan_release`, optimal allocation; 10 s each when no effort)."""
    from overlapdp.mechanisms.planning import plan_release

    out: list[dict[str, Any]] = []
    for definition in ("pure", "zcdp"):
        rp = plan_release(qs, budget, definition, effort=10.0 if effort is None else effort)
        assert rp.allocation is not None
        out.append({"definition": definition, **rp.totals, "gap": rp.allocation.gap})
    return out


def _heat_json(heat: HeatMap) -> dict[str, Any]:
    return {
        "x": heat.x,
        "y": heat.y,
        "load": heat.load,
        "maximum": heat.maximum,
        "argmax": list(heat.argmax()),
        "exact": heat.exact,
        "method": heat.method,
    }


def _heat_section(heat: HeatMap, png: Path) -> tuple[str, str]:
    ax, ay = heat.argmax()
    return (
        f"Per-row load over {heat.x} × {heat.y}",
        H.image(png, f"heat map of the per-row load over {heat.x} and {heat.y}")
        + H.paragraph(
            f"Each cell is the largest load ({heat.load}) of any row with those values of {heat.x} and "
            f"{heat.y}, the other attributes free. Maximum {spent(heat.maximum)} at {heat.x} = {ax}, "
            f"{heat.y} = {ay}" + ("." if heat.exact else " (cells are safe upper bounds).")
        ),
    )


def ledger_report(
    schema: Schema,
    entries: Sequence[LedgerEntry],
    out_dir: str | Path,
    *,
    budget: float | None = None,
    x: str | None = None,
    y: str | None = None,
    delta: float = 1e-6,
    effort: float | None = None,
    basis: Literal["delta", "pure"] = "delta",
    partitions: Mapping[str, str] | None = None,
) -> ReportSummary:
    """The report of a ledger (module docstring). ``budget``, when given, is an epsilon drawn on the
    budget plot and compared with the overlap-aware total.

    ``basis="pure"`` (every charge pure DP) reports pure epsilon throughout instead of epsilon at
    ``delta``: :func:`_pure_ledger_report`, with ``partitions`` (charge id -> declared partition).
    """
    es = list(entries)
    if not es:
        raise ReportInputError("the ledger is empty: nothing to report")
    b = _budget(budget, None)
    if basis == "pure":
        return _pure_ledger_report(schema, es, _out(out_dir), b, x, y, effort, partitions)
    if basis != "delta":
        raise ReportInputError(f"basis {basis!r}: give 'delta' or 'pure'")
    d = check_delta(delta)
    queries = [e.query for e in es]
    heat_xy = choose_axes(schema, queries, x, y) if (x or y or len(schema) >= 2) else None
    out = _out(out_dir)
    curve, final = budget_curve(schema, es, ALL, d, effort=effort)
    curves: list[BudgetCurve] = [curve]
    finals = {ALL: final}
    for name in analysts(es):
        c, r = budget_curve(schema, entries_of(es, name), name, d, effort=effort)
        curves.append(c)
        finals[name] = r
    plots = {"budget": plot_budget(curves, d, out / "budget.png", b)}
    label, loads = ledger_loads(es, d)
    res = max_overlap(queries, weights=loads, comp="sum", schema=schema, effort=effort)
    heat = None
    if heat_xy is not None:
        heat = heat_map(
            queries, heat_xy[0], heat_xy[1], weights=loads, schema=schema, effort=effort, load=label
        )
        check_heat_against(heat, float(res.value), bool(res.exact), "max_overlap of the charges")
        plots["heatmap"] = plot_heat(heat, out / "heatmap.png", _heat_marker(heat, schema, res.witness_row))
    numbers: dict[str, Any] = {
        "charges": len(es),
        "delta": d,
        "budget": b,
        "sequential_epsilon": _num(final.sequential_epsilon),
        "overlap_epsilon": _num(final.overlap_epsilon),
        "within_budget": None if b is None else final.overlap_epsilon <= b,
        "analysts": {
            name: {
                "charges": r.charges,
                "sequential_epsilon": _num(r.sequential_epsilon),
                "overlap_epsilon": _num(r.overlap_epsilon),
            }
            for name, r in finals.items()
        },
        "curves": [c.to_json() for c in curves],
        "witness": final.witness,
        "load": {"definition": label, "overlap": float(res.value), "exact": bool(res.exact)},
    }
    if heat is not None:
        numbers["heat_map"] = _heat_json(heat)
    names = DEFINITION_NAMES
    defs_rows = []
    for key, g in final.definitions.items():
        pair = measure_named(key).native_pair
        seq = g.sequential if isinstance(g.sequential, float) else guarantee(g.sequential, pair=pair)
        ovl = g.overlap if isinstance(g.overlap, float) else guarantee(g.overlap, pair=pair)
        defs_rows.append([names.get(key, key), seq, ovl, g.sequential_epsilon, g.overlap_epsilon, g.exact])
    sections = [
        (
            "Summary",
            H.paragraph(
                f"{len(es)} charges at δ = {d:g}: sequential accounting certifies ε = "
                f"{H.fmt(final.sequential_epsilon)} ({final.sequential_method}), overlap-aware accounting "
                f"ε = {H.fmt(final.overlap_epsilon)} ({final.overlap_method})"
                + ("" if b is None else f"; budget ε = {b:g}")
                + "."
            ),
        ),
        (
            "Budget spent over time",
            H.image(plots["budget"], "budget spent over time")
            + H.table(
                ["analyst", "charges", f"sequential ε at δ={d:g}", f"overlap-aware ε at δ={d:g}"],
                [[n, r.charges, r.sequential_epsilon, r.overlap_epsilon] for n, r in finals.items()],
            )
            + H.paragraph(
                "Each analyst's curve is the guarantee of that analyst's charges alone; the 'all analysts' "
                "curve bounds every analyst together, colluding or not."
            ),
        ),
        (
            "Guarantee of the whole ledger per definition",
            H.table(
                [
                    "definition",
                    "sequential",
                    "overlap-aware",
                    f"seq. ε at δ={d:g}",
                    f"overlap ε at δ={d:g}",
                    "exact",
                ],
                defs_rows,
            ),
        ),
    ]
    if heat is not None:
        sections.append(_heat_section(heat, plots["heatmap"]))
    sections.append(("Worst row", _witness_table(final.witness, queries)))
    page = H.page("overlapdp report: ledger", sections)
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return ReportSummary("ledger", out, html_path, plots, numbers, heat)


def _pure_ledger_report(
    schema: Schema,
    es: list[LedgerEntry],
    out: Path,
    b: float | None,
    x: str | None,
    y: str | None,
    effort: float | None,
    partitions: Mapping[str, str] | None,
) -> ReportSummary:
    """The ledger report on one basis, pure epsilon, for ledgers of pure-DP charges only: per curve the
    sequential sum, partition-based parallel composition over the declared ``partitions`` (as Tumult
    Analytics and OpenDP charge a partitioned query family; only partitions that
    :func:`~overlapdp.report.ledger.check_partitions` finds disjoint) and the overlap-aware worst-row
    load (MATH.md 2.4)."""
    eps = pure_epsilons(es)
    parts = check_partitions(es, partitions or {})
    queries = [e.query for e in es]
    heat_xy = choose_axes(schema, queries, x, y) if (x or y or len(schema) >= 2) else None
    curves = [pure_curve(es, ALL, partitions=parts, effort=effort)]
    curves += [pure_curve(entries_of(es, n), n, partitions=parts, effort=effort) for n in analysts(es)]
    plots = {"budget": plot_budget(curves, None, out / "budget.png", b)}
    res = max_overlap(queries, weights=eps, comp="sum", schema=schema, effort=effort)
    heat = None
    if heat_xy is not None:
        heat = heat_map(
            queries, heat_xy[0], heat_xy[1], weights=eps, schema=schema, effort=effort, load="pure ε"
        )
        check_heat_against(heat, float(res.value), bool(res.exact), "max_overlap of the charges")
        plots["heatmap"] = plot_heat(heat, out / "heatmap.png", _heat_marker(heat, schema, res.witness_row))
    finals = {c.analyst: c for c in curves}
    numbers: dict[str, Any] = {
        "charges": len(es),
        "basis": "pure ε",
        "budget": b,
        "sequential_epsilon": curves[0].sequential[-1],
        "partition_epsilon": (curves[0].partition or (math.nan,))[-1],
        "overlap_epsilon": curves[0].overlap[-1],
        "within_budget": None if b is None else curves[0].overlap[-1] <= b,
        "analysts": {
            n: {
                "charges": c.charges[-1],
                "sequential_epsilon": c.sequential[-1],
                "partition_epsilon": (c.partition or (math.nan,))[-1],
                "overlap_epsilon": c.overlap[-1],
            }
            for n, c in finals.items()
        },
        "curves": [c.to_json() for c in curves],
        "witness": res.witness,
        "load": {"definition": "pure ε", "overlap": float(res.value), "exact": bool(res.exact)},
    }
    if heat is not None:
        numbers["heat_map"] = _heat_json(heat)
    head = ["analyst", "charges", "sequential ε (sum)", "parallel composition ε", "overlap-aware ε"]
    rows = [
        [n, c.charges[-1], c.sequential[-1], (c.partition or (math.nan,))[-1], c.overlap[-1]]
        for n, c in finals.items()
    ]
    c0 = curves[0]
    sections = [
        (
            "Summary",
            H.paragraph(
                f"{len(es)} pure-DP charges, all numbers pure ε: sequential accounting (the sum) "
                f"{H.fmt(c0.sequential[-1])}, parallel composition over declared partitions "
                f"{H.fmt((c0.partition or (math.nan,))[-1])}, overlap-aware accounting (the worst row) "
                f"{H.fmt(c0.overlap[-1])}" + ("" if b is None else f"; budget ε = {b:g}") + "."
            ),
        ),
        (
            "Budget spent over time",
            H.image(plots["budget"], "budget spent over time")
            + H.table(head, rows)
            + H.paragraph(
                "Parallel composition charges each declared partition (a family of queries pairwise "
                "disjoint on the rows, such as a marginal: one group-by in Tumult Analytics or OpenDP) "
                "once, at its largest charge, and sums the partitions and every other charge. Each "
                "analyst's curve is the guarantee of that analyst's charges alone; the 'all analysts' "
                "curve bounds every analyst together, colluding or not."
            ),
        ),
    ]
    if heat is not None:
        sections.append(_heat_section(heat, plots["heatmap"]))
    sections.append(("Worst row", _witness_table(res.witness, queries)))
    page = H.page("overlapdp report: ledger", sections)
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return ReportSummary("ledger", out, html_path, plots, numbers, heat)


def _num(x: float) -> float | None:
    return None if math.isinf(x) else float(x)
