"""`overlapdp demo` end to end: the story runs, and its numbers agree with the ledger and the budgets."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from overlapdp.cli.main import main
from overlapdp.demo import GLOBAL_BUDGET, run_demo


@pytest.mark.slow
def test_demo_numbers_are_consistent(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    summary = run_demo(out, rows=5_000, seed=1)
    # Read the ledger file directly (not through the service) as the independent record of charges.
    con = sqlite3.connect(out / "ledger.sqlite")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    charge_table = next(t for t in tables if "charge" in t)
    rows = con.execute(f"SELECT analyst, cost FROM {charge_table}").fetchall()
    assert rows, "the demo charged nothing"
    by_analyst: dict[str, float] = {}
    for analyst, cost in rows:
        recorded = json.loads(cost)
        eps = recorded.get("epsilon", recorded.get("load"))
        by_analyst[analyst] = by_analyst.get(analyst, 0.0) + float(eps)
    for a in summary.analysts:
        assert a.sequential_spent == pytest.approx(by_analyst.get(a.name, 0.0))
        # Overlap-aware spend never exceeds the sequential sum, nor the analyst's quota.
        assert a.overlap_spent <= a.sequential_spent + 1e-9
        assert a.overlap_spent <= a.quota + 1e-9
        assert a.answered >= a.sequential_would_answer
    assert summary.global_overlap_spent <= GLOBAL_BUDGET + 1e-9
    assert summary.global_overlap_spent <= summary.global_sequential_spent + 1e-9
    assert summary.global_sequential_spent == pytest.approx(sum(by_analyst.values()))
    # The worst row recomputed from the ledger's charges equals the service's own global filter.
    assert summary.worst_row_load == pytest.approx(summary.global_overlap_spent)
    # The story shows the point: overlap-aware accounting answered more than sequential would have.
    assert sum(a.answered for a in summary.analysts) > sum(
        a.sequential_would_answer for a in summary.analysts
    )
    html = (out / "summary.html").read_text()
    assert "alice" in html and "overlap-aware" in html
    assert (out / "report.html").stat().st_size > 0
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert json.loads((out / "summary.json").read_text())["global"]["budget"] == GLOBAL_BUDGET


@pytest.mark.slow
def test_demo_cli_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli-demo"
    with pytest.raises(SystemExit) as info:
        main(["demo", "--out", str(out), "--rows", "3000", "--json"])
    assert info.value.code in (0, None)
    data = json.loads(capsys.readouterr().out)
    assert data["global"]["overlap_spent"] <= data["global"]["sequential_spent"]
    assert (out / "report.html").exists()
