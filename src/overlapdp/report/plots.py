"""PNG plots of a report, drawn with matplotlib's Agg canvas (no display, no pyplot global state, so
several reports may be drawn at once, e.g. by the service)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.typing import LineStyleType

from overlapdp.display import spent
from overlapdp.privacy.utility import UtilityGain
from overlapdp.report.ledger import BudgetCurve
from overlapdp.report.loads import HeatMap, Spend

SEQ_COLOUR = "#b0413e"
OVL_COLOUR = "#2f6f9f"
_COMP_LABELS = {
    "count": "count\n(t vs γ)",
    "sum": "sum of weights\n(pure DP, zCDP)",
    "l2": "l2 of weights\n(Gaussian DP)",
}
_DEF_LABELS = {"pure": "pure DP\n(Laplace)", "zcdp": "zCDP\n(Gaussian)", "gdp": "Gaussian DP"}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=100)
    return path


def plot_spend(spends: Sequence[Spend], path: Path) -> Path:
    """Grouped bars: what sequential and overlap-aware accounting charge, per comp family."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(spends))
    ax.bar(xs - 0.2, [s.sequential for s in spends], 0.4, label="sequential comp(Q)", color=SEQ_COLOUR)
    ax.bar(xs + 0.2, [s.overlap for s in spends], 0.4, label="overlap-aware γ_w(Q)", color=OVL_COLOUR)
    for x, s in zip(xs, spends, strict=True):
        ax.annotate(f"U = {s.gain:.0%}", (x, max(s.sequential, s.overlap)), ha="center", va="bottom")
    ax.set_xticks(xs, [_COMP_LABELS.get(s.comp, s.comp) for s in spends])
    ax.set_ylabel("composed weight")
    ax.set_title("Sequential vs overlap-aware spend")
    ax.margins(y=0.15)
    ax.legend()
    return _save(fig, path)


#: The symbol of each definition's budget.
_BUDGET_SYMBOL = {"pure": "ε", "zcdp": "ρ", "gdp": "μ"}


def utility_label(g: UtilityGain) -> str:
    """A bar group's label: the definition, its noise, and its total budget in its own unit
    (``pure DP (Laplace) / total ε = 1``), rounded up as every privacy figure is (overlapdp.display)."""
    symbol = _BUDGET_SYMBOL.get(g.definition, "budget")
    return f"{_DEF_LABELS.get(g.definition, g.definition)}\ntotal {symbol} = {spent(g.budget)}"


def plot_utility(gains: Sequence[UtilityGain], path: Path) -> Path:
    """Mean expected |noise| per query for the same total budget, sequential vs overlap-aware."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(gains))
    ax.bar(xs - 0.2, [g.sequential_noise for g in gains], 0.4, label="sequential", color=SEQ_COLOUR)
    ax.bar(xs + 0.2, [g.overlap_noise for g in gains], 0.4, label="overlap-aware", color=OVL_COLOUR)
    for x, g in zip(xs, gains, strict=True):
        ax.annotate(
            f"U = {g.gain:.0%}\nnoise −{g.noise_reduction:.0%}",
            (x, max(g.sequential_noise, g.overlap_noise)),
            ha="center",
            va="bottom",
        )
    ax.set_xticks(xs, [utility_label(g) for g in gains])
    ax.set_ylabel("mean expected |noise| per query")
    # Each definition's budget is in its own unit (epsilon 1, rho 1 and mu 1 are different budgets):
    # named under its bars, not as one "total budget" on the axis.
    ax.set_title("Utility gain at each definition's total budget")
    ax.margins(y=0.25)
    ax.legend()
    return _save(fig, path)


def _ticks(labels: Sequence[str], limit: int = 24) -> tuple[list[int], list[str]]:
    step = max(1, -(-len(labels) // limit))
    idx = list(range(0, len(labels), step))
    return idx, [labels[i] for i in idx]


def plot_heat(heat: HeatMap, path: Path, witness: tuple[str, str] | None = None) -> Path:
    """Heat map of the per-row load: max over the other attributes, per (x value, y value)."""
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.add_subplot()
    # The colour scale starts at 0 (no load), so equal colours mean equal loads across reports and a
    # nearly flat map does not look like a steep one.
    top = float(np.max(heat.values)) if heat.values.size else 0.0
    img = ax.imshow(
        heat.values.T,
        origin="lower",
        aspect="auto",
        cmap="viridis",
        interpolation="nearest",
        vmin=0.0,
        vmax=top if top > 0 else 1.0,
    )
    xi, xl = _ticks(heat.x_labels)
    yi, yl = _ticks(heat.y_labels)
    ax.set_xticks(xi, xl, rotation=90 if max((len(s) for s in xl), default=0) > 3 else 0)
    ax.set_yticks(yi, yl)
    ax.set_xlabel(heat.x)
    ax.set_ylabel(heat.y)
    if witness is not None:
        i, j = heat.x_labels.index(witness[0]), heat.y_labels.index(witness[1])
        ax.plot([i], [j], marker="x", color="red", markersize=10, label="worst row")
        ax.legend(loc="upper right")
    cbar = fig.colorbar(img, ax=ax)
    cbar.set_label(f"max per-row load ({heat.load})")
    note = "" if heat.exact else " (safe upper bounds)"
    ax.set_title(f"Per-row load over {heat.x} × {heat.y}: maximum {spent(heat.maximum, 4)}{note}")
    return _save(fig, path)


def budget_figure(curves: Sequence[BudgetCurve], ylabel: str, budget: float | None = None) -> Figure:
    """Cumulative spend per curve: sequential (dashed), partition-based parallel composition (dotted, when
    the curves carry it) and overlap-aware (solid); one colour per curve.

    With times the x axis is seconds since the ledger's first charge (each curve starts from zero spend
    at its own first charge) and steps are drawn at the end of each interval between checkpoints, so the
    line is never below the true spend in between. The legend sits outside the axes, right of them.
    """
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    use_time = bool(curves) and all(c.times is not None for c in curves)
    t0 = 0.0
    if use_time:
        t0 = min((c.start if c.start is not None else (c.times or (0.0,))[0]) for c in curves)
    handles: list[Line2D] = []
    for n, c in enumerate(curves):
        col = f"C{n % 10}"
        if use_time and c.times is not None:
            first = c.start if c.start is not None else c.times[0]
            xs = [first - t0, *(t - t0 for t in c.times)]
        else:
            xs = [0, *c.charges]
        # Dotted last and thicker: it often runs along the overlap-aware line.
        series = [(c.sequential, "--", 1.5), (c.overlap, "-", 1.5), (c.partition, ":", 2.5)]
        for ys, style, width in series:
            if ys is not None:
                ax.step(xs, [0.0, *ys], where="pre", linestyle=style, color=col, linewidth=width)
        handles.append(Line2D([], [], color=col, linewidth=4, label=c.analyst))
    styles: list[tuple[LineStyleType, str]] = [("--", "sequential (sum)")]
    if any(c.partition is not None for c in curves):
        styles.append((":", "parallel composition\nover declared partitions"))
    styles.append(("-", "overlap-aware (worst row)"))
    handles += [Line2D([], [], color="black", linestyle=ls, label=lab) for ls, lab in styles]
    if budget is not None:
        ax.axhline(budget, color="grey", linewidth=0.8, linestyle="-.")
        handles.append(
            Line2D([], [], color="grey", linewidth=0.8, linestyle="-.", label=f"budget {budget:g}")
        )
    ax.set_xlabel("seconds since the first charge" if use_time else "charges so far")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.set_title("Budget spent over time")
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize="small"
    )
    return fig


def plot_budget(
    curves: Sequence[BudgetCurve],
    delta: float | None,
    path: Path,
    budget: float | None = None,
) -> Path:
    """Save :func:`budget_figure`: epsilon at ``delta`` (the odometer's), or pure epsilon if ``delta`` is None."""
    ylabel = "pure ε" if delta is None else f"ε at δ={delta:g}"
    return _save(budget_figure(curves, ylabel, budget), path)
