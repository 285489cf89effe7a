"""`overlapdp demo` end to end: the story runs, and its numbers agree with the ledger and the budgets."""

from __future__ import annotations

import csv
import html
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from conftest import SHARED_DATA
from overlapdp.cli.demo import GLOBAL_BUDGET, DemoSummary, marginal_workload, range_workload, run_demo
from overlapdp.cli.main import main
from overlapdp.privacy.mechanisms import OpaqueApproxDP
from overlapdp.query.sql import parse_where
from overlapdp.report import build_report
from overlapdp.report.ledger import BudgetCurve, LedgerEntry, check_partitions
from overlapdp.report.plots import budget_figure
from overlapdp.samples import adult_raw_schema, decode_adult
from overlapdp.schema import Schema


@pytest.mark.slow
def test_demo_numbers_are_consistent(demo_run: tuple[Path, DemoSummary]) -> None:
    out, summary = demo_run
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
    # planned ahead at one quota: every row of a family of disjoint queries is in a distinct family, so
    # partitions >= gamma, and the optimal plan is never worse than even shares
    v = summary.planning["total_variance"]
    assert v["sequential"] > v["partitions"] >= v["even overlap"] >= v["optimal overlap"] > 0
    assert summary.planning["queries"] == len(range_workload(adult_raw_schema())) + len(
        marginal_workload(adult_raw_schema())
    )


@pytest.mark.slow
def test_demo_cli_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli-demo"
    with pytest.raises(SystemExit) as info:
        main(["demo", "--out", str(out), "--rows", "3000", "--json"])
    assert info.value.code in (0, None)
    data = json.loads(capsys.readouterr().out)
    assert data["global"]["overlap_spent"] <= data["global"]["sequential_spent"]
    assert (out / "report.html").exists()


# -- the demo's output: labels, one basis for its numbers, its ledger, plot and report -----------------------
SHARED = SHARED_DATA  # beside the checkout, or the nearest ancestor's for a worktree (conftest)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoSummary]:
    """One default (synthetic) run shared by the tests below: the demo takes seconds."""
    out = tmp_path_factory.mktemp("demo") / "out"
    return out, run_demo(out, rows=5_000, seed=1)


def test_decoding_matches_uci_labels() -> None:
    """The private-pgm codes decode to UCI's labels: decoding the coded Adult file gives the label
    frequencies of UCI's own raw file (a different file: the training part with its strings)."""
    coded_csv, raw_csv = SHARED / "adult" / "adult.csv", SHARED / "adult-raw" / "adult.csv"
    if not (coded_csv.exists() and raw_csv.exists()):
        pytest.skip(f"{SHARED} (coded and raw Adult) is absent: the shared data folder is not there")
    decoded = decode_adult(pd.read_csv(coded_csv))
    raw = pd.read_csv(raw_csv, skipinitialspace=True)
    assert list(decoded.columns) == list(adult_raw_schema().names)
    for col in ("workclass", "education", "marital_status", "occupation", "relationship", "race", "sex"):
        ours = decoded[col].value_counts(normalize=True, dropna=False)
        theirs = raw[col].value_counts(normalize=True, dropna=False)
        assert set(ours.index.dropna()) == set(theirs.index.dropna()), col
        for label, p in theirs.items():
            assert ours.get(label, 0.0) == pytest.approx(p, abs=0.006), (col, label)
    for col in ("native_country", "income"):
        ours = decoded[col].value_counts(normalize=True, dropna=False)
        theirs = raw[col].value_counts(normalize=True, dropna=False)
        for label in theirs.index[:3]:
            assert ours.get(label, 0.0) == pytest.approx(theirs[label], abs=0.006), (col, label)
    # Numbers: ages in years and hours per week as in UCI's file, every value in the raw schema.
    for col in ("age", "hours_per_week", "education_num"):
        assert decoded[col].mean() == pytest.approx(raw[col].mean(), abs=0.3), col
        assert decoded[col].min() == raw[col].min() and decoded[col].max() == raw[col].max(), col
    assert (
        decoded["education_num"].map(dict(zip(raw["education_num"], raw["education"], strict=True)))
    ).equals(decoded["education"])


@pytest.mark.slow
def test_default_run_reads_in_labels(demo_run: tuple[Path, DemoSummary]) -> None:
    out, summary = demo_run
    texts = {p.name: p.read_text(encoding="utf-8") for p in (out / "ledger.csv", out / "summary.json")}
    texts["summary.html"] = html.unescape((out / "summary.html").read_text(encoding="utf-8"))
    for name, text in texts.items():
        assert not re.search(r"sex = \d", text), name
    assert "age BETWEEN 20 AND 29 AND sex = 'Female'" in texts["ledger.csv"].replace('""', '"')
    assert "race = 'White'" in texts["ledger.csv"].replace('""', '"')
    # The worst row: labels and years, in the summary and on the page.
    row = summary.worst_row
    assert row["sex"] in ("Female", "Male") and 17 <= row["age"] <= 90
    assert f"sex = '{row['sex']}'" in texts["summary.html"]
    # The heat map's axes are the schema's labels (ages in years, sex by name).
    report = html.unescape((out / "report.html").read_text(encoding="utf-8"))
    assert re.search(r"at age = (\d+), sex = (Female|Male)", report)
    schema = json.loads((out / "schema.json").read_text())
    assert any(a.get("values") == ["Female", "Male"] for a in schema["attributes"])


def _independent_partition_charge(con: sqlite3.Connection, analyst: str | None = None) -> float:
    """Tumult-style parallel composition worked out from the workload's structure, not the demo's code:
    alice's age-band x sex cells and hours-band x income cells are two group-bys over disjoint bands,
    bob's one-way marginals one group-by per attribute; each group-by costs its largest charge and
    everything else (wide overlapping ranges, sessions) adds up."""
    groups: dict[str, float] = {}
    singles = 0.0
    cells: dict[str, set[tuple[int, int, str]]] = {}
    for who, kind, query, cost in con.execute("SELECT analyst, kind, query, cost FROM charges ORDER BY seq"):
        if analyst is not None and who != analyst:
            continue
        eps = float(json.loads(cost).get("epsilon", json.loads(cost).get("load", 0.0)))
        text = json.loads(query)["text"] if query else ""
        key = None
        if kind == "query" and who == "alice":
            m = re.fullmatch(r"(age|hours_per_week) BETWEEN (\d+) AND (\d+) AND (sex|income) = ('.*')", text)
            if m:
                key = f"alice {m[1]}"
                cells.setdefault(key, set()).add((int(m[2]), int(m[3]), m[5]))
        elif kind == "query" and who == "bob":
            m = re.fullmatch(r"(\w+) = .*", text)
            if m:
                key = f"bob {m[1]}"
        if key is None:
            singles += eps
        else:
            groups[key] = max(groups.get(key, 0.0), eps)
    # The bands of each grid really are disjoint: sorted, each starts after the previous one ends.
    for cs in cells.values():
        for value in {c[2] for c in cs}:
            bands = sorted((lo, hi) for lo, hi, v in cs if v == value)
            assert all(b[0] > a[1] for a, b in itertools.pairwise(bands))
    return singles + sum(groups.values())


@pytest.mark.slow
def test_three_numbers_on_one_basis(demo_run: tuple[Path, DemoSummary]) -> None:
    out, _ = demo_run
    data = json.loads((out / "summary.json").read_text())
    g = data["global"]
    assert data["basis"] == "pure ε"
    assert g["sequential_spent"] >= g["partition_spent"] >= g["overlap_spent"] > 0
    # Partition-based accounting is a real improvement on the sum here, and overlap-aware on it.
    assert g["sequential_spent"] > g["partition_spent"] > g["overlap_spent"]
    con = sqlite3.connect(out / "ledger.sqlite")
    assert g["partition_spent"] == pytest.approx(_independent_partition_charge(con), abs=1e-9)
    for a in data["analysts"]:
        expected = _independent_partition_charge(con, a["name"])
        assert a["partition_spent"] == pytest.approx(expected, abs=1e-9), a["name"]
        assert a["sequential_spent"] >= a["partition_spent"] >= a["overlap_spent"] - 1e-9
        assert a["sequential_would_answer"] <= a["partition_would_answer"] <= a["submitted"]
    # The report (its table and plot come from the same curves) states the same three numbers.
    report = html.unescape((out / "report.html").read_text(encoding="utf-8"))
    assert "all numbers pure ε" in report
    for key in ("sequential_spent", "partition_spent", "overlap_spent"):
        assert f"{g[key]:.6g}" in report, key
    assert "δ" not in report.split("Per-row load")[0]


@pytest.mark.slow
def test_ledger_csv_cells_are_json(demo_run: tuple[Path, DemoSummary]) -> None:
    out, _ = demo_run
    with (out / "ledger.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for r in rows:
        for col in ("mechanism", "cost", "answer"):
            assert isinstance(json.loads(r[col]), dict), (col, r[col])
        if r["query"]:
            assert isinstance(json.loads(r["query"])["text"], str)
        else:
            assert r["kind"] == "session"


@pytest.mark.parametrize("rows", ["0", "-3"])
def test_demo_refuses_no_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str) -> None:
    out = tmp_path / "none"
    with pytest.raises(SystemExit) as info:
        main(["demo", "--out", str(out), "--rows", rows])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--rows" in err and rows in err
    assert not out.exists()


def test_budget_plot_seconds_from_start_and_legend_outside() -> None:
    t0 = 1_796_036_900.25  # Unix time, as the service records it
    curves = [
        BudgetCurve("all analysts", (1, 2, 3), (t0, t0 + 1.5, t0 + 4.0), (1.0, 2.0, 3.0), (1.0, 1.0, 2.0),
                    partition=(1.0, 1.0, 2.5), start=t0),
        BudgetCurve("bob", (1, 2), (t0 + 1.5, t0 + 4.0), (1.0, 2.0), (1.0, 1.0), partition=(1.0, 1.0),
                    start=t0 + 1.5),
    ]  # fmt: skip
    fig = budget_figure(curves, "pure ε", budget=5.0)
    ax = fig.axes[0]
    xs = [x for line in ax.get_lines() for x in line.get_xdata()]
    assert min(xs) == 0.0 and max(xs) == pytest.approx(4.0)
    assert "seconds" in ax.get_xlabel()
    # Every charge's spend is drawn (three series per curve) and the bob curve starts at its own charge.
    bob = [line for line in ax.get_lines() if line.get_color() == "C1"]
    assert len(bob) == 3 and all(line.get_xdata()[0] == pytest.approx(1.5) for line in bob)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = ax.get_legend()
    assert legend is not None
    assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_pure_report_against_brute_force(tmp_path: Path) -> None:
    """Partition-based and overlap-aware totals of a small ledger against enumeration of every row."""
    schema = Schema.from_json({"a": 4, "b": 3})
    spec = [  # (where, epsilon, declared partition)
        *[(f"a = {i}", 0.1 * (i + 1), "marginal a") for i in range(4)],
        *[(f"a = {i} AND b = {j}", 0.2, "grid") for i in range(2) for j in range(3)],
        ("a BETWEEN 0 AND 2", 0.3, None),
        ("b BETWEEN 1 AND 2", 0.25, None),
        ("a <= 1", 0.5, "not disjoint"),
        ("a >= 1", 0.7, "not disjoint"),
    ]
    entries = [
        LedgerEntry(f"c{k}", OpaqueApproxDP(eps, 0.0), parse_where(schema, w, id=f"c{k}"), "x", 100.0 + k)
        for k, (w, eps, _) in enumerate(spec)
    ]
    declared = {f"c{k}": p for k, (_, _, p) in enumerate(spec) if p is not None}
    rep = build_report(schema, entries, tmp_path, basis="pure", partitions=declared, x="a", y="b")
    # By hand: marginal a max 0.4, grid max 0.2; the falsely declared pair is summed (1.2), so are the rest.
    assert rep.numbers["partition_epsilon"] == pytest.approx(0.4 + 0.2 + 0.3 + 0.25 + 0.5 + 0.7)
    assert rep.numbers["sequential_epsilon"] == pytest.approx(sum(e for _, e, _ in spec))
    rows = list(itertools.product(range(4), range(3)))
    worst = max(
        sum(e for (w, e, _), en in zip(spec, entries, strict=True) if en.query.covers(r)) for r in rows
    )
    assert rep.numbers["overlap_epsilon"] == pytest.approx(worst)
    assert rep.numbers["basis"] == "pure ε"
    assert check_partitions(entries, declared) == {k: v for k, v in declared.items() if v != "not disjoint"}


def test_install_step_says_what_it_does(tmp_path: Path) -> None:
    """scripts/demo's install step prints a line per phase on stderr (stdout stays the demo's)."""
    root = Path(__file__).resolve().parents[1]
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    (tmp_path / "scripts").mkdir()
    for name in ("demo", "_venv.sh"):
        shutil.copy(root / "scripts" / name, tmp_path / "scripts" / name)
    fake = tmp_path / "fakepy"  # stands in for python: makes the venv, records pip, installs a stub CLI
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi\n'
        'if [ "$1" = "-c" ]; then exit 0; fi\n'
        'echo "pip $*"\n'
        'if [[ "$*" == *"-e ."* ]]; then printf \'#!/bin/sh\\necho demo-output "$@"\\n\' > .venv/bin/overlapdp;'
        " chmod +x .venv/bin/overlapdp; fi\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake)}
    first = subprocess.run(
        [bash, "scripts/demo", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "demo-output demo --json"
    assert "installing overlapdp and its dependencies into .venv (first run only" in first.stderr
    assert "creating the virtual environment" in first.stderr and "ready" in first.stderr
    assert "pip install --upgrade pip" in first.stderr
    # The second run installs nothing, so it needs no package index (issue 24 item 7): pip is not run.
    offline = {**env, "PIP_INDEX_URL": "http://127.0.0.1:9/"}
    second = subprocess.run([bash, "scripts/demo"], cwd=tmp_path, env=offline, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "nothing to install" in second.stderr and "pip " not in second.stderr
    assert second.stdout.strip() == "demo-output demo"
    # pyproject.toml changed since (the stamp's hash differs): pip runs again, without upgrading itself
    stamp = tmp_path / ".venv" / "overlapdp-installed"
    stamp.write_text("another-hash\nservice,plots,solvers\n", encoding="utf-8")
    third = subprocess.run([bash, "scripts/demo"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert third.returncode == 0, third.stderr
    assert (
        "updating .venv" in third.stderr and "pip install --quiet -e .[service,plots,solvers]" in third.stderr
    )
    assert "--upgrade pip" not in third.stderr


@pytest.mark.slow  # 3-5 s of CPU each (an odometer report on the demo ledger)
@pytest.mark.parametrize("name", ["ledger.sqlite", "ledger.csv"])
def test_account_and_report_read_the_demo_ledgers(
    demo_run: tuple[Path, DemoSummary], capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    """`overlapdp account` and `report` read the demo's own ledgers: the sequential pure epsilon is the
    sum of the costs read from the SQLite file directly, the overlap-aware one the service's own spend."""
    out, summary = demo_run
    con = sqlite3.connect(out / "ledger.sqlite")
    costs = [json.loads(c)["load"] for (c,) in con.execute("SELECT cost FROM charges")]
    charged = con.execute("SELECT count(*) FROM charges WHERE kind != 'session-query'").fetchone()[0]
    con.close()
    schema = str(out / "schema.json")
    try:
        main(["account", "--schema", schema, "--ledger", str(out / name), "--json"])
    except SystemExit as exc:
        assert exc.code == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert doc["charges"] == charged
    assert doc["sequential"]["pure_epsilon"] == pytest.approx(sum(costs), rel=1e-12)
    assert doc["overlap"]["pure_epsilon"] == pytest.approx(summary.global_overlap_spent, rel=1e-12)
    try:
        main(["account", "--schema", schema, "--ledger", str(out / name), "--dataset", "nope"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "has no charges on 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_report_reads_the_demo_ledger(
    demo_run: tuple[Path, DemoSummary], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`overlapdp report` on the demo's SQLite ledger (its budget curve recomputes the guarantee after
    each charge: minutes at full effort, so a short effort here; the figures are safe bounds then)."""
    out, _ = demo_run
    con = sqlite3.connect(out / "ledger.sqlite")
    charged = con.execute("SELECT count(*) FROM charges WHERE kind != 'session-query'").fetchone()[0]
    con.close()
    args = ["report", "--schema", str(out / "schema.json"), "--ledger", str(out / "ledger.sqlite")]
    try:
        main([*args, "--out", str(tmp_path), "--effort", "0.2", "--json"])
    except SystemExit as exc:
        assert exc.code == 0, capsys.readouterr().err
    rep = json.loads(capsys.readouterr().out)
    assert rep["charges"] == charged and rep["kind"] == "ledger"
    assert (tmp_path / "report.html").exists()
