"""``overlapdp account``: the privacy guarantee of a ledger, sequential and overlap-aware (MATH.md 2, 5).

Each ledger line (JSON Lines) is a query (``where`` or ``conditions``; neither means the whole domain)
plus a mechanism, either nested (``"mechanism": {"mechanism": "laplace", "scale": 10}``) or flat
(``"mechanism": "gaussian", "sigma": 5``), or an opaque guarantee (``"epsilon": .., "delta": ..``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from overlapdp.cli.app import Encoding, NeighbouringOption, app, console, emit_json
from overlapdp.display import DEFINITION_NAMES, decimal, guarantee, spent

if TYPE_CHECKING:  # the command imports them when it runs, so that `overlapdp --help` stays fast
    from overlapdp.privacy.mechanisms import Mechanism
    from overlapdp.privacy.odometer import Odometer, OdometerReport
    from overlapdp.schema import Schema


def read_ledger(
    schema: Schema,
    path: Path,
    odometer: Odometer,
    *,
    encoding: str | None = None,
    dataset: str | None = None,
) -> None:
    """Parse every charge first (JSON Lines, or the service's SQLite or CSV ledger:
    :func:`overlapdp.report.ledger.read_ledger`), then charge them all (a bad line charges nothing)."""
    from overlapdp.report.ledger import read_ledger as read_entries

    for e in read_entries(schema, path, encoding=encoding, dataset=dataset):
        odometer.charge(e.mechanism, e.query, id=e.id)


@app.command()
def account(
    schema: Annotated[Path, typer.Option("--schema", help="Schema JSON file.")],
    ledger: Annotated[
        Path,
        typer.Option(
            "--ledger",
            help="Ledger: JSON Lines (query + mechanism), or the service's ledger.sqlite / ledger.csv.",
        ),
    ],
    delta: Annotated[float, typer.Option("--delta", help="Target delta for (epsilon, delta).")] = 1e-6,
    neighbouring: NeighbouringOption = "add_remove",
    effort: Annotated[
        float | None, typer.Option("--effort", help="Seconds per overlap search; past it a safe bound.")
    ] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="The data set, when the service's ledger holds several.")
    ] = None,
    encoding: Encoding = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Privacy guarantee of a ledger under every definition, sequential and overlap-aware."""
    from overlapdp.privacy.definitions import check_delta
    from overlapdp.privacy.odometer import Odometer
    from overlapdp.schema import Schema

    d = check_delta(delta)
    sch = Schema.load(schema)
    odo = Odometer(sch, neighbouring=neighbouring, effort=effort)
    read_ledger(sch, ledger, odo, encoding=encoding, dataset=dataset)
    report = odo.report(d)
    reasons = _why_infinite(odo, report, effort)
    if as_json:
        doc = report.to_json()
        for side, why in reasons.items():
            doc[side]["why_infinite"] = why
        emit_json(doc)
        return
    _print(report, reasons)


def _mass_at_infinity(m: Mechanism) -> float:
    """The delta a mechanism keeps at every epsilon (its privacy loss is infinite with this
    probability): an opaque (epsilon, delta) guarantee's delta, 0 for Laplace and Gaussian noise."""
    atoms = getattr(m, "atoms", None)
    return float(atoms()[2]) if callable(atoms) else 0.0


def _why_infinite(odo: Odometer, report: OdometerReport, effort: float | None) -> dict[str, str]:
    r"""Why the tightest epsilon is infinite, per side ("sequential", "overlap").

    A composition keeps, at every epsilon, at least the delta that its charges keep at every epsilon:
    $1-\prod_i(1-\delta_i)$ over the charges known only as (epsilon_i, delta_i) (the mass of the
    composed privacy-loss distribution at $+\infty$; MATH.md 5.4). When that is above
    the target delta, no epsilon holds. The overlap-aware side takes the worst row's charges: the
    maximum overlap of the weights $-\ln(1-\delta_i)$, whose sum is monotone in that product.
    """
    charges = odo.charges
    weights = [-math.log1p(-_mass_at_infinity(c.mechanism)) for c in charges]
    out: dict[str, str] = {}
    for side, eps in (("sequential", report.sequential_epsilon), ("overlap", report.overlap_epsilon)):
        if not math.isinf(eps):
            continue
        load: float | None = None
        if side == "sequential":
            load, where = math.fsum(weights), "the ledger's (ε, δ) charges"
        elif odo.neighbouring == "add_remove":
            from overlapdp.overlap import max_overlap

            res = max_overlap([c.query for c in charges], weights=weights, comp="sum", effort=effort)
            # a search that stopped early: its lower bound is a row that certainly carries that much
            load = float(res.value if res.exact else res.lower)
            where = "the (ε, δ) charges covering the worst row"
        else:  # replace-one-row: a pair of rows, not one row's charges (not computed here)
            where = "the charges a moved row changes"
        kept = None if load is None else -math.expm1(-load)
        if kept is not None and kept >= report.delta * (1 - 1e-9):
            summed = math.fsum(_mass_at_infinity(c.mechanism) for c in charges)
            text = (
                f"{where} keep δ = 1 − ∏(1 − δᵢ) = {spent(kept)} at every ε"
                + (f" (their δᵢ sum to {spent(summed)})" if side == "sequential" else "")
                + f", more than δ = {decimal(report.delta)}, so no ε holds; "
                f"a --delta above {spent(kept)} gives a finite ε"
            )
        else:
            text = (
                f"no definition certifies a finite ε at δ = {decimal(report.delta)} for {where} "
                "((ε, δ) guarantees have no Rényi or zCDP form, and their δ remains at every ε); "
                "a larger --delta may"
            )
        out[side] = text
    return out


_NAMES = DEFINITION_NAMES


def _fmt(x: Any) -> str:
    """A guarantee for people: rounded up (never shown below its value)."""
    return guarantee(x)


def _print(report: OdometerReport, reasons: dict[str, str]) -> None:
    from overlapdp.privacy.measures import measure_named  # (numpy: not at --help)

    out = Table(
        "definition",
        "sequential",
        "overlap",
        "ε seq.",
        "ε overlap",
        "exactness",
        title=f"privacy of {report.charges} charges ({report.neighbouring} neighbours), ε at δ = "
        f"{decimal(report.delta)}",
    )
    for key, g in report.definitions.items():
        if g.exact:
            exactness = "exact"
        elif g.bound == "sequential":
            exactness = "bound (sequential)"
        else:
            exactness = "upper bound"
        m = measure_named(key)
        approx = m.native_is_epsilon  # its native value is the epsilon at delta of the next columns
        out.add_row(
            _NAMES.get(key, key),
            "—" if approx else guarantee(g.sequential, pair=m.native_pair),
            "—" if approx else guarantee(g.overlap, pair=m.native_pair),
            _fmt(g.sequential_epsilon),
            _fmt(g.overlap_epsilon),
            exactness,
        )
    console.print(out)
    seq_name = _NAMES.get(report.sequential_method, report.sequential_method)
    ovl_name = _NAMES.get(report.overlap_method, report.overlap_method)
    console.print(
        f"tightest at δ = {decimal(report.delta)}: sequential ε = {_fmt(report.sequential_epsilon)} "
        f"(from {seq_name}), overlap-aware ε = {_fmt(report.overlap_epsilon)} (from {ovl_name})",
        highlight=False,
    )
    for side, why in reasons.items():
        console.print(
            f"{'sequential' if side == 'sequential' else 'overlap-aware'} ε = inf: {why}", highlight=False
        )
    if report.witness:
        console.print(f"worst row: {report.witness}")
