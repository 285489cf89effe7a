"""Reports: the heat map against a brute-force per-row load, plots are real PNGs, the HTML holds the
numbers, ledgers over time, and the CLI's bad-input errors."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.image import imread

from cli_helpers import run
from overlapdp.errors import WorkloadError
from overlapdp.overlap import max_overlap
from overlapdp.query import Workload, parse_where
from overlapdp.report import (
    ReportInputError,
    build_report,
    heat_map,
    parse_ledger,
    read_ledger,
)
from overlapdp.schema import Schema
from strategies import all_rows, schemas, where_clauses

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def brute_heat(schema: Schema, queries: list, weights: list[float], px: int, py: int) -> np.ndarray:
    """Per-row load by enumerating every row, projected onto (x, y) by max."""
    out = np.zeros((schema.attributes[px].size, schema.attributes[py].size))
    for row in all_rows(schema):
        load = sum(w for q, w in zip(queries, weights, strict=True) if q.covers(row))
        out[row[px], row[py]] = max(out[row[px], row[py]], load)
    return out


@st.composite
def heat_cases(draw: st.DrawFn) -> tuple[Schema, list, list[float], int, int]:
    schema = draw(schemas(max_attributes=3).filter(lambda s: len(s) >= 2))
    n = draw(st.integers(1, 6))
    queries = [parse_where(schema, draw(where_clauses(schema)), id=f"q{i}") for i in range(n)]
    weights = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25]), min_size=n, max_size=n))
    px, py = draw(st.permutations(range(len(schema))).map(lambda p: (p[0], p[1])))
    return schema, queries, weights, px, py


@given(heat_cases())
def test_heat_map_equals_brute_force(case: tuple[Schema, list, list[float], int, int]) -> None:
    schema, queries, weights, px, py = case
    truth = brute_heat(schema, queries, weights, px, py)
    x, y = schema.names[px], schema.names[py]
    for method in ("dense", "cells"):
        heat = heat_map(queries, x, y, weights=weights, schema=schema, method=method)
        assert heat.exact
        assert heat.values.shape == truth.shape
        np.testing.assert_allclose(heat.values, truth, rtol=1e-12, atol=1e-12, err_msg=method)
    res = max_overlap(queries, weights=weights, comp="sum", schema=schema)
    assert res.exact
    assert heat.maximum == pytest.approx(float(res.value), abs=1e-12)
    assert heat.maximum == pytest.approx(float(truth.max()), abs=1e-12)


def test_heat_map_bad_attributes() -> None:
    schema = Schema.from_json({"a": 4, "b": 3})
    qs = [parse_where(schema, "a < 2", id="q")]
    with pytest.raises(ReportInputError, match="'zz'"):
        heat_map(qs, "zz", "b")
    with pytest.raises(ReportInputError, match="two different"):
        heat_map(qs, "a", "a")
    with pytest.raises(ReportInputError, match="empty"):
        heat_map([], "a", "b", schema=schema)


# -- a workload whose numbers are known by hand ----------------------------------------------------------
SMALL = {"a": 10, "b": 3}
SMALL_WORKLOAD = [
    '{"id": "low", "where": "a < 5"}',
    '{"id": "high", "where": "a >= 3"}',
    '{"id": "mid", "where": "a BETWEEN 4 AND 6 AND b = 1"}',
    '{"id": "b2", "where": "b = 2"}',
]
# Worst rows: (a, b) = (4, 1) covered by low, high, mid; (3, 2) and (4, 2) by low, high, b2: gamma = 3 of
# t = 4, U = 25%.
SMALL_MAXIMA = [(3, 2), (4, 2), (4, 1)]
# l2 with unit weights: ||w|| = 2, gamma_l2 = sqrt 3.


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert float(pixels[..., :3].std()) > 0.01, f"{path} is uniform"


def test_workload_report_files_and_numbers(tmp_path: Path) -> None:
    schema = Schema.from_json(SMALL)
    wl = Workload.from_lines(schema, SMALL_WORKLOAD)
    summary = build_report(schema, wl, tmp_path / "out", budget=2.0, x="a", y="b")
    assert summary.html == tmp_path / "out" / "report.html"
    assert set(summary.plots) == {"spend", "utility", "heatmap"}
    for p in summary.plots.values():
        assert p.parent == tmp_path / "out"
        check_png(p)
    n = summary.numbers
    assert n["t"] == 4 and n["gamma"] == 3
    spend = {s["comp"]: s for s in n["spend"]}
    assert spend["l2"]["overlap"] == pytest.approx(3**0.5)
    assert spend["count"]["gain"] == pytest.approx(0.25)
    # pure DP: budget 2 over 4 queries sequentially is 0.5 each (Laplace scale 2), overlap-aware 2/3 each.
    pure = next(u for u in n["utility"] if u["definition"] == "pure")
    assert pure["sequential_noise"] == pytest.approx(2.0)
    assert pure["overlap_noise"] == pytest.approx(1.5)
    assert n["heat_map"]["maximum"] == 3
    assert tuple(int(v) for v in n["heat_map"]["argmax"]) in SMALL_MAXIMA
    assert (n["witness"]["a"], n["witness"]["b"]) in SMALL_MAXIMA
    assert summary.heat is not None
    peaks = {(int(i), int(j)) for i, j in np.argwhere(summary.heat.values == 3)}
    assert peaks == set(SMALL_MAXIMA)
    html = summary.html.read_text()
    for p in summary.plots.values():
        assert f'href="{p.name}"' in html
    assert html.count("data:image/png;base64,") == len(summary.plots)
    cells = re.findall(r"<td>([^<]*)</td>", html)
    assert "25.00%" in cells  # U
    assert "4" in cells and "3" in cells  # t and gamma in the spend table
    assert "γ = 3" in html and "t = 4" in html
    assert "1.73206" in cells  # gamma_l2 = sqrt(3) = 1.7320508..., rounded up
    # sharing the budget: even overlap shares 2/3 each, four discrete Laplace counts of variance
    # 2p/(1-p)^2, p = e^(-2/3) (closed form); sequential 1/2 each; the optimum is never worse than even
    alloc = {p["definition"]: p for p in n["allocation"]}
    assert set(alloc) == {"pure", "zcdp"}

    def laplace_var(eps: float) -> float:
        q = math.exp(-eps)
        return 2 * q / (1 - q) ** 2

    assert alloc["pure"]["even overlap"] == pytest.approx(4 * laplace_var(2 / 3), rel=1e-3)
    assert alloc["pure"]["sequential"] == pytest.approx(4 * laplace_var(1 / 2), rel=1e-3)
    for p in alloc.values():
        assert p["optimal overlap"] <= p["even overlap"] * (1 + 1e-9) < p["sequential"]
    assert "optimal overlap allocation" in html


def test_heat_map_dense_and_cells_agree_on_adult() -> None:
    from overlapdp.cli.demo import marginal_workload, range_workload
    from overlapdp.samples import adult_schema

    schema = adult_schema()
    wl = Workload.of(schema, range_workload(schema) + marginal_workload(schema))
    dense = heat_map(wl.queries, "age", "race", method="dense")
    cells = heat_map(wl.queries, "age", "race", method="cells")
    np.testing.assert_array_equal(dense.values, cells.values)
    assert dense.maximum == max_overlap(wl.queries, comp="sum").value


# -- ledgers -------------------------------------------------------------------------------------------
LEDGER = [
    # Out of time order on purpose; pure epsilons 0.1 (scale 10) and 0.2 (scale 5).
    {"id": "c3", "where": "a >= 5", "mechanism": "laplace", "scale": 10, "analyst": "bob", "time": 3},
    {"id": "c1", "where": "a < 5", "mechanism": "laplace", "scale": 10, "analyst": "ann", "time": 1},
    {
        "id": "c2",
        "where": "a < 3",
        "mechanism": {"mechanism": "laplace", "scale": 5},
        "analyst": "ann",
        "time": 2,
    },
    {"id": "c4", "where": "b = 2", "mechanism": "laplace", "scale": 10, "analyst": "bob", "time": 4},
]
# Worst row: a < 3 and b = 2: 0.1 + 0.2 + 0.1 = 0.4 (sequential 0.5).


def write_ledger(tmp_path: Path, lines: list[dict]) -> Path:
    p = tmp_path / "ledger.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_ledger_parsing_sorts_by_time(tmp_path: Path) -> None:
    schema = Schema.from_json(SMALL)
    entries = read_ledger(schema, write_ledger(tmp_path, LEDGER))
    assert [e.id for e in entries] == ["c1", "c2", "c3", "c4"]
    assert [e.analyst for e in entries] == ["ann", "ann", "bob", "bob"]
    with pytest.raises(WorkloadError, match=r"line 2.*'time'"):
        parse_ledger(schema, [json.dumps(LEDGER[0]), json.dumps({"where": "a < 2", "epsilon": 0.1})])
    iso = [dict(x, time=f"2025-01-0{x['time']}T00:00:00") for x in LEDGER]
    assert [e.id for e in parse_ledger(schema, [json.dumps(x) for x in iso])] == ["c1", "c2", "c3", "c4"]


def test_ledger_report(tmp_path: Path) -> None:
    schema = Schema.from_json(SMALL)
    entries = read_ledger(schema, write_ledger(tmp_path, LEDGER))
    summary = build_report(schema, entries, tmp_path / "out", budget=1.0, x="a", y="b")
    assert set(summary.plots) == {"budget", "heatmap"}
    for p in summary.plots.values():
        check_png(p)
    n = summary.numbers
    assert n["load"]["definition"] == "pure ε"
    assert n["load"]["overlap"] == pytest.approx(0.4)
    assert n["heat_map"]["maximum"] == pytest.approx(0.4)
    assert n["witness"]["a"] < 3 and n["witness"]["b"] == 2
    assert n["overlap_epsilon"] <= 0.4 + 1e-9
    assert n["sequential_epsilon"] <= 0.5 + 1e-9
    assert n["overlap_epsilon"] < n["sequential_epsilon"]
    assert n["within_budget"] is True
    assert set(n["analysts"]) == {"all analysts", "ann", "bob"}
    # ann: a < 5 and a < 3 overlap (0.3); bob: a >= 5 and b = 2 overlap (0.2).
    assert n["analysts"]["ann"]["overlap_epsilon"] <= 0.3 + 1e-9
    assert n["analysts"]["bob"]["overlap_epsilon"] <= 0.2 + 1e-9
    for c in n["curves"]:
        assert all(o <= s + 1e-9 for o, s in zip(c["overlap_epsilon"], c["sequential_epsilon"], strict=True))
        assert c["overlap_epsilon"] == sorted(c["overlap_epsilon"])  # cumulative spend never falls
    everyone = n["curves"][0]
    assert everyone["charges"] == [1, 2, 3, 4] and everyone["times"] == [1.0, 2.0, 3.0, 4.0]
    html = summary.html.read_text()
    assert "ann" in html and "bob" in html and 'href="budget.png"' in html


# -- the CLI -------------------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    schema = tmp_path / "schema.json"
    Schema.from_json(SMALL).save(schema)
    wl = tmp_path / "w.jsonl"
    wl.write_text("\n".join(SMALL_WORKLOAD) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    return {"schema": schema, "workload": wl, "empty": empty, "ledger": write_ledger(tmp_path, LEDGER)}


def test_cli_workload_and_ledger(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rep"
    code, stdout, _ = run(
        ["report", "--schema", str(files["schema"]), "--queries", str(files["workload"]), "--out", str(out)],
        capsys,
    )
    assert code == 0
    assert str(out / "report.html") in stdout.replace("\n", "")
    code, stdout, _ = run(
        [
            "report",
            "--schema",
            str(files["schema"]),
            "--ledger",
            str(files["ledger"]),
            "--out",
            str(out),
            "--json",
        ],
        capsys,
    )
    assert code == 0
    js = json.loads(stdout)
    assert js["html"] == str(out / "report.html") and js["charges"] == 4
    assert all(Path(p).stat().st_size > 0 for p in js["plots"].values())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--queries", "{workload}", "--x", "nope"], "--x 'nope': unknown attribute"),
        (["--queries", "{workload}", "--y", "zz"], "--y 'zz': unknown attribute"),
        (["--queries", "{workload}", "--x", "a", "--y", "a"], "two different"),
        (["--queries", "{empty}"], "empty"),
        (["--queries", "{tmp}/missing.jsonl"], "cannot read workload"),
        (["--ledger", "{tmp}/missing.jsonl"], "cannot read ledger"),
        (["--ledger", "{empty}"], "no charges"),
        (["--queries", "{workload}", "--ledger", "{ledger}"], "exactly one"),
        ([], "exactly one"),
        (["--queries", "{workload}", "--budget", "-1"], "--budget"),
    ],
)
def test_cli_bad_input(
    tmp_path: Path,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    subst = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path)}
    args = [
        "report",
        "--schema",
        str(files["schema"]),
        "--out",
        str(tmp_path / "o"),
        *(a.format(**subst) for a in extra),
    ]
    code, _, err = run(args, capsys)
    assert code == 2, err
    assert message in " ".join(err.split())
    assert "Traceback" not in err


def test_cli_missing_schema(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["report", "--schema", str(tmp_path / "none.json"), "--queries", str(files["workload"])], capsys
    )
    assert code == 2 and "cannot read schema file" in err


def test_all_pairs_of_small_schema_max_equals_overlap() -> None:
    """Every (x, y) choice has the same maximum: gamma_w does not depend on the projection."""
    schema = Schema.from_json({"a": 6, "b": 3, "c": 4})
    qs = [
        parse_where(schema, w, id=f"q{i}", weight=i + 1)
        for i, w in enumerate(["a < 3 AND c >= 2", "a >= 2 AND b = 1", "c IN (0, 3)", "b != 1 AND a = 2"])
    ]
    value = float(max_overlap(qs, comp="sum").value)
    for x, y in itertools.permutations(schema.names, 2):
        assert heat_map(qs, x, y).maximum == value


def test_printed_privacy_figures_round_up_and_shares_down() -> None:
    """Issue 24 item 3: a computed 1.0811707 was printed "1.08117" (``.6g``, below the truth) by the
    HTML report and ``overlapdp report``; every certified figure is rounded up, a share to use down."""
    from fractions import Fraction

    from overlapdp.cli.report_cmd import _f
    from overlapdp.display import remaining
    from overlapdp.report.html import fmt

    for x in (1.0811707, 1.0119130, 0.30000000000000004, 2.5e-7 + 1e-22):
        for shown in (fmt(x), _f(x)):
            assert Fraction(shown) >= Fraction(x)
            assert Fraction(shown) <= Fraction(x) * (1 + Fraction(1, 10**5))
    assert fmt(1.0811707) == "1.08118" and _f(1.0119130) == "1.01192"
    assert Fraction(remaining(0.49999999999998357)) <= Fraction(0.49999999999998357)


def test_plots_name_each_definitions_budget_and_heat_starts_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24.9: the utility plot put epsilon 1, rho 1 and mu 1 on one axis as "total budget 1"; each
    bar group now names its own budget. The heat map's colour scale started at the smallest load (a
    flat map of 2.0 and 2.1 looked like 0 and 1); it starts at 0."""
    import numpy as np
    from matplotlib.figure import Figure

    from overlapdp.privacy.utility import utility_gain
    from overlapdp.report import plots
    from overlapdp.report.loads import HeatMap
    from overlapdp.samples import adult_schema

    figures: list[Figure] = []
    real = plots._save

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    schema = adult_schema()
    qs = [parse_where(schema, "age BETWEEN 20 AND 29"), parse_where(schema, "age BETWEEN 25 AND 39")]
    gains = [utility_gain(qs, 1.0, definition=d) for d in ("pure", "zcdp", "gdp")]
    plots.plot_utility(gains, tmp_path / "u.png")
    ax = figures[-1].axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert [label.splitlines()[-1] for label in labels] == ["total ε = 1", "total ρ = 1", "total μ = 1"]
    assert "total budget 1" not in ax.get_title()
    heat = HeatMap("age", "sex", ("a", "b"), ("x", "y"), np.array([[2.0, 2.1], [2.05, 2.0]]), True, "dense")
    plots.plot_heat(heat, tmp_path / "h.png")
    image = figures[-1].axes[0].get_images()[0]
    assert image.get_clim() == (0.0, 2.1)


@pytest.mark.slow  # 1.1 s of CPU
def test_the_report_command_and_its_html_print_certified_figures_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 3 on the surfaces people read: ``overlapdp report`` on the shipped example ledger prints each
    certified epsilon and the heat map's maximum rounded up (never below the figure its ``--json`` gives,
    within 1e-5 of it), and report.html says the same figures; ``.6g`` printed 1.60512 for 1.6051247."""
    from fractions import Fraction

    examples = Path(__file__).resolve().parents[1] / "examples"
    monkeypatch.setenv("COLUMNS", "200")
    args = ["report", "--schema", str(examples / "schema.json"), "--ledger", str(examples / "ledger.jsonl")]
    code, out, err = run([*args, "--out", str(tmp_path / "j"), "--json"], capsys)
    assert code == 0, err
    exact = json.loads(out)
    code, table, err = run([*args, "--out", str(tmp_path / "t")], capsys)
    assert code == 0, err
    html = (tmp_path / "t" / "report.html").read_text(encoding="utf-8")
    figures = [
        (
            exact["sequential_epsilon"],
            r"sequential ε \(δ=1e-06\)\s*│\s*([0-9.]+)",
            r"certifies ε = ([0-9.]+)",
        ),
        (
            exact["overlap_epsilon"],
            r"overlap-aware ε \(δ=1e-06\)\s*│\s*([0-9.]+)",
            r"accounting ε = ([0-9.]+)",
        ),
        (exact["heat_map"]["maximum"], r"heat map max\s*│\s*([0-9.]+)", None),
    ]
    for value, in_table, in_html in figures:
        texts = [re.search(in_table, table)] + ([re.search(in_html, html)] if in_html else [])
        for found in texts:
            assert found is not None, (in_table, table, in_html)
            shown = Fraction(found.group(1))
            assert Fraction(value) <= shown <= Fraction(value) * (1 + Fraction(1, 1000)), (found, value)
    assert not re.search(r"\d\.\d{8,}", table) and not re.search(r"\d\.\d{8,}", html)
