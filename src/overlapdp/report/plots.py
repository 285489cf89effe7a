"""PNG plots of a report, drawn with matplotlib's Agg canvas (no display, no pyplot global state, so
several reports may be drawn at once, e.g. by the service)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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
    ax.set_xticks(xs, [_DEF_LABELS.get(g.definition, g.definition) for g in gains])
    ax.set_ylabel("mean expected |noise| per query")
    ax.set_title(f"Utility gain at total budget {gains[0].budget:g}" if gains else "Utility gain")
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
    img = ax.imshow(heat.values.T, origin="lower", aspect="auto", cmap="viridis", interpolation="nearest")
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
    ax.set_title(f"Per-row load over {heat.x} × {heat.y}: maximum {heat.maximum:.4g}{note}")
    return _save(fig, path)


def plot_budget(curves: Sequence[BudgetCurve], delta: float, path: Path, budget: float | None = None) -> Path:
    """Cumulative tightest epsilon at delta, sequential (dashed) vs overlap-aware (solid), per curve."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(10)]
    use_time = all(c.times is not None for c in curves)
    for n, c in enumerate(curves):
        xs = c.times if use_time and c.times is not None else c.charges
        col = colours[n % len(colours)]
        ax.step(xs, c.sequential, where="post", linestyle="--", color=col, label=f"{c.analyst}: sequential")
        ax.step(xs, c.overlap, where="post", linestyle="-", color=col, label=f"{c.analyst}: overlap-aware")
    if budget is not None:
        ax.axhline(budget, color="black", linewidth=0.8, linestyle=":", label=f"budget {budget:g}")
    ax.set_xlabel("time" if use_time else "charges so far")
    ax.set_ylabel(f"ε at δ={delta:g}")
    ax.set_title("Budget spent over time")
    ax.legend(fontsize="small")
    return _save(fig, path)
