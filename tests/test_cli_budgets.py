"""Budgets on the command line: each definition's guarantee in its own
unit plus (epsilon, delta) at ``--delta``; ``--epsilon`` calibration checked against dp_accounting and
the closed form of MATH.md 5.8; why ``account`` reports an infinite epsilon; decimals, not fractions or
float artefacts; ``--help`` lists choices and shows flags without a ``<bool>`` placeholder."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from cli_helpers import run
from overlapdp.display import decimal, remaining, spent
from overlapdp.mechanisms.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from overlapdp.privacy import GDP
from overlapdp.samples import adult_schema, synthetic_adult

# Dense Rényi orders: dp_accounting's minimum over them is within ~1e-8 of the infimum for these budgets.
ORDERS = np.concatenate([np.linspace(1.02, 4, 30_000), np.linspace(4, 400, 60_000)])


def peer_epsilon(rho: float, delta: float) -> float:
    """epsilon at delta of rho-zCDP by dp_accounting (the RDP curve alpha*rho, CKS 2020 Prop. 12)."""
    return float(compute_epsilon(ORDERS, ORDERS * rho, delta)[0])


def closed_form_epsilon(rho: float, delta: float) -> float:
    """The same conversion minimised over continuous alpha by scipy (MATH.md 5.8 with
    tau = alpha rho): at least the infimum, and within ~1e-12 of it."""

    def eps(a: float) -> float:
        return a * rho + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)

    return min(
        minimize_scalar(eps, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}).fun
        for lo, hi in ((1 + 1e-9, 2.0), (2.0, 50.0), (50.0, 5000.0))
    )


def closed_form_delta(rho: float, epsilon: float) -> float:
    """delta at epsilon of rho-zCDP, MATH.md 5.8: inf over alpha > 1 of
    exp((alpha-1)(alpha rho - epsilon)) / (alpha-1) * (1 - 1/alpha)^alpha (minimised here by scipy)."""

    def log_delta(a: float) -> float:
        return (a - 1) * (a * rho - epsilon) + a * math.log1p(-1 / a) - math.log(a - 1)

    best = min(
        minimize_scalar(log_delta, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10}).fun
        for lo, hi in ((1 + 1e-9, 2.0), (2.0, 50.0), (50.0, 5000.0))
    )
    return math.exp(best)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    schema = tmp_path / "schema.json"
    adult_schema().save(schema)
    queries = tmp_path / "q.jsonl"
    # a and b are disjoint, c overlaps each: gamma = 2 of t = 3.
    queries.write_text(
        '{"id": "a", "where": "age < 30"}\n{"id": "b", "where": "age >= 30"}\n{"id": "c", "where": "sex = 1"}\n'
    )
    data = tmp_path / "adult.csv"
    synthetic_adult(300, seed=1).to_csv(data, index=False)
    return {"schema": schema, "queries": queries, "data": data, "dir": tmp_path}


def answer(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "answer",
        "--schema",
        str(files["schema"]),
        "--data",
        str(files["data"]),
        "--queries",
        str(files["queries"]),
        *extra,
    ]


def privacy(files: dict[str, Path], capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code, out, err = run(answer(files, *extra, "--json"), capsys)
    assert code == 0, err
    return json.loads(out)["privacy"]


# -- item 4: the guarantee in the definition's unit and as (epsilon, delta) ------------------------------


def test_zcdp_budget_is_rho_with_an_epsilon_delta_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    p = privacy(files, capsys, "--definition", "zcdp", "--budget", "1")
    assert p["budget"] == {"rho": 1.0}
    assert p["guarantee"]["overlap"] == {"rho": pytest.approx(1.0)}
    assert p["guarantee"]["sequential"] == {"rho": pytest.approx(1.5)}
    ed = p["epsilon_delta"]
    assert ed["delta"] == 1e-6  # the default delta
    for side in ("overlap", "sequential"):
        rho = p["guarantee"][side]["rho"]
        truth = closed_form_epsilon(rho, 1e-6)
        assert truth * (1 - 1e-12) <= ed[side] <= truth * (1 + 1e-6)  # safe, as tight as the conversion
        assert ed[side] == pytest.approx(peer_epsilon(rho, 1e-6), rel=1e-7)
    code, out, err = run(answer(files, "--definition", "zcdp", "--budget", "1", "--delta", "1e-9"), capsys)
    assert code == 0, err
    assert "ρ = 1" in out
    line = next(ln for ln in out.splitlines() if "as (ε, δ), overlap-aware" in ln)
    assert "δ = 1e-09" in line
    shown = float(re.search(r"ε = ([0-9.e+-]+)", line).group(1))  # type: ignore[union-attr]
    assert shown >= closed_form_epsilon(1.0, 1e-9)  # the displayed figure is rounded up, never below


def test_gdp_is_reported_in_mu_and_converted_through_its_declared_zcdp(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    p = privacy(files, capsys, "--definition", "gdp", "--budget", "1")
    # overlap-aware: 2 queries of mu = 1/sqrt(2) compose in l2 to mu = 1; sequential: 3 to sqrt(3/2)
    assert p["guarantee"]["overlap"]["mu"] == pytest.approx(1.0, rel=1e-12)
    assert p["guarantee"]["sequential"]["mu"] == pytest.approx(math.sqrt(1.5), rel=1e-12)
    assert p["guarantee"]["overlap"]["declared_zcdp_rho"] == pytest.approx(0.5, rel=1e-12)
    eps = p["epsilon_delta"]["overlap"]
    # from the declared 0.5-zCDP (the discrete Gaussian is not known to be 1-GDP): never GDP's smaller one
    assert closed_form_epsilon(0.5, 1e-6) * (1 - 1e-12) <= eps <= closed_form_epsilon(0.5, 1e-6) * (1 + 1e-6)
    assert eps == pytest.approx(peer_epsilon(0.5, 1e-6), rel=1e-7)
    assert eps > GDP(1.0).epsilon_at(1e-6)
    code, out, err = run(answer(files, "--definition", "gdp", "--budget", "1"), capsys)
    assert code == 0, err
    assert "μ = 1 (declared as zCDP ρ = 0.5)" in out
    assert "μ = 1.22475" in out  # sqrt(1.5) rounded up to 6 digits


def test_pure_needs_no_delta(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    p = privacy(files, capsys, "--definition", "pure", "--budget", "1")
    assert p["epsilon_delta"] == {"delta": 0.0, "overlap": 1.0, "sequential": 1.5}
    p = privacy(files, capsys, "--definition", "pure", "--epsilon", "0.8", "--delta", "1e-5")
    assert p["budget"] == {"epsilon": 0.8}  # for pure DP --epsilon is the budget
    assert p["epsilon_delta"]["overlap"] <= 0.8


@pytest.mark.parametrize("definition", ["zcdp", "gdp"])
@pytest.mark.parametrize(
    ("target", "delta", "accounting"),
    [(1.0, 1e-6, "overlap"), (0.3, 1e-9, "sequential"), (4.0, 1e-5, "overlap"), (1.0, None, "sequential")],
)
def test_epsilon_calibration_is_safe_and_tight(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    definition: str,
    target: float,
    delta: float | None,
    accounting: str,
) -> None:
    extra = ["--delta", repr(delta)] if delta is not None else []
    p = privacy(
        files,
        capsys,
        "--definition",
        definition,
        "--epsilon",
        repr(target),
        *extra,
        "--accounting",
        accounting,
    )
    d = 1e-6 if delta is None else delta
    side = "overlap" if accounting == "overlap" else "sequential"
    assert p["target_epsilon"] == target and p["epsilon_delta"]["delta"] == d
    assert p["epsilon_delta"][side] <= target  # what the command states
    # The whole workload's guarantee, in zCDP rho (GDP: the declared mu^2/2), checked independently.
    g = p["guarantee"][side]
    rho = g["rho"] if definition == "zcdp" else g["declared_zcdp_rho"]
    if definition == "gdp":
        assert rho == pytest.approx(g["mu"] ** 2 / 2, rel=1e-9)
    # never above the target: scipy's minimum is at least the infimum, which is what the guarantee is
    assert closed_form_epsilon(rho, d) <= target * (1 + 1e-12)
    # and not wastefully below it: the calibrated budget is rounded down to 6 significant digits so that
    # it prints as it is and can be typed back in (issue 24.4), which costs at most 1e-5 of it
    assert closed_form_epsilon(rho, d) >= target * (1 - 2e-5)
    assert peer_epsilon(rho, d) == pytest.approx(target, rel=2e-5)  # dp_accounting agrees
    assert closed_form_delta(rho, target) <= d * (1 + 1e-6)
    assert closed_form_delta(rho, target * (1 - 1e-4)) > d  # a slightly smaller epsilon would not hold
    # Looser closed form (Bun-Steinke 2016): rho + 2 sqrt(rho ln(1/delta)) <= E gives less rho.
    bs = (math.sqrt(math.log(1 / d) + target) - math.sqrt(math.log(1 / d))) ** 2
    assert rho > bs


def test_budget_and_epsilon_are_exclusive(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--budget", "1", "--epsilon", "1"], []):
        code, out, err = run(answer(files, "--definition", "zcdp", *extra), capsys)
        assert code == 2 and out == ""
        assert "--budget" in err and "--epsilon" in err


# -- item 5: account says why epsilon is infinite; one exactness column ---------------------------------

LEDGER = [
    '{"where": "age < 30", "epsilon": 0.5, "delta": 1e-6}',
    '{"where": "age >= 30", "epsilon": 0.5, "delta": 5e-7}',
    '{"where": "sex = 1", "mechanism": "gaussian", "sigma": 5}',
    '{"epsilon": 0.1, "delta": 2e-7}',
]


def _kept(deltas: list[float]) -> Fraction:
    """1 - prod(1 - delta_i), exactly: the delta a composition keeps at every epsilon."""
    prod = Fraction(1)
    for d in deltas:
        prod *= 1 - Fraction(d)
    return 1 - prod


def test_account_says_why_epsilon_is_infinite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "schema.json"
    adult_schema().save(schema)
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("\n".join(LEDGER) + "\n")
    args = ["account", "--schema", str(schema), "--ledger", str(ledger), "--delta", "1e-6"]
    code, out, err = run([*args, "--json"], capsys)
    assert code == 0, err
    js = json.loads(out)
    assert js["sequential"]["epsilon"] is None and js["overlap"]["epsilon"] is None
    everything = _kept([1e-6, 5e-7, 2e-7])  # all charges: about 1.7e-6
    worst_row = _kept([1e-6, 2e-7])  # a row with age < 30 pays the first and the last
    assert spent(everything) in js["sequential"]["why_infinite"]
    assert "1.7e-06" in js["sequential"]["why_infinite"]  # the deltas' sum
    assert spent(worst_row) in js["overlap"]["why_infinite"] and spent(worst_row) == "1.2e-06"
    code, out, err = run(args, capsys)
    assert code == 0, err
    text = " ".join(out.split())  # undo the terminal's line wrapping
    assert "sequential ε = inf: the ledger's (ε, δ) charges keep δ" in text
    assert "more than δ = 1e-06" in text and "overlap-aware ε = inf" in text
    # With delta above the kept mass both sides are finite and nothing needs explaining.
    code, out, err = run([*args[:-1], "2e-6", "--json"], capsys)
    assert code == 0, err
    js = json.loads(out)
    assert js["sequential"]["epsilon"] is not None and "why_infinite" not in js["sequential"]


def test_account_has_one_exactness_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "schema.json"
    adult_schema().save(schema)
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(
        '{"where": "age < 30", "mechanism": "laplace", "scale": 10}\n'
        '{"where": "age >= 30", "epsilon": 0.3, "delta": 1e-8}\n'
    )
    code, out, err = run(["account", "--schema", str(schema), "--ledger", str(ledger)], capsys)
    assert code == 0, err
    header = next(ln for ln in out.splitlines() if "definition" in ln)
    assert header.count("exact") == 1
    assert "(approx)" not in out  # a definition's name, not a hint that the figure is approximate
    assert "(from (ε, δ) PLD)" in out
    assert not FRACTION.search(out) and not FLOAT_NOISE.search(out)


# -- item 5: decimals, not fractions or float artefacts ---------------------------------------------------

FRACTION = re.compile(r"\b\d+/\d+\b")
FLOAT_NOISE = re.compile(r"\d\.\d*(?:0{6,}|9{6,})\d")


def test_answer_output_has_no_fractions_or_float_noise(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for definition, budget in (("gdp", "1"), ("pure", "0.3"), ("zcdp", "0.7")):
        code, out, err = run(answer(files, "--definition", definition, "--budget", budget), capsys)
        assert code == 0, err
        assert not FRACTION.search(out), out
        assert not FLOAT_NOISE.search(out), out
    code, out, err = run(answer(files, "--definition", "gdp", "--budget", "1"), capsys)
    assert "sigma^2 2.000001" in out  # was 2000001/1000000


def test_noise_descriptions_are_decimals() -> None:
    assert (
        DiscreteGaussianNoise(Fraction(2000001, 1000000)).describe() == "discrete Gaussian, sigma^2 2.000001"
    )
    assert DiscreteLaplaceNoise(Fraction(5000001, 1000000)).describe() == "discrete Laplace, scale 5.000001"
    assert DiscreteLaplaceNoise(Fraction(1, 3)).describe() == "discrete Laplace, scale 0.3333333333"


def test_displayed_budgets_round_to_the_safe_side() -> None:
    assert remaining(0.5 - 0.30000000000000004) == "0.199999"  # not 0.19999999999999996, nor above it
    assert spent(Fraction(1, 3)) == "0.333334" and remaining(Fraction(1, 3)) == "0.333333"
    assert decimal(1e-6) == "1e-06" and decimal(1.7e-6) == "1.7e-06" and decimal(2.0) == "2"
    assert spent(math.inf) == "inf"


@settings(max_examples=100)
@given(
    st.one_of(
        st.fractions(min_value=Fraction(1, 10**30), max_value=10**30),
        st.floats(min_value=1e-300, max_value=1e300),
    ),
    st.integers(min_value=1, max_value=12),
)
def test_spent_never_below_and_remaining_never_above(value: Fraction | float, digits: int) -> None:
    up, down = Fraction(spent(value, digits)), Fraction(remaining(value, digits))
    if (
        isinstance(value, float)
        and len(repr(value).replace("-", "").split("e")[0].replace(".", "").strip("0")) <= digits
    ):
        # a float whose shortest form fits prints as that form, which reads back as the same float
        assert float(up) == value and float(down) == value
        return
    exact = Fraction(value)
    assert down <= exact <= up
    assert len(spent(value, digits)) <= digits + 7  # short: sign, point, exponent; never the expansion


# -- item 10: --help shows choices and no <bool> after flags ----------------------------------------------

HELP = [
    ([], []),
    (["answer"], ["[pure|zcdp|gdp]", "[overlap|sequential]", "[duckdb|pandas|polars|spark]"]),
    (["count"], ["[duckdb|pandas|polars|spark]"]),
    (["account"], ["[add_remove|replace]"]),
    (["overlap"], ["[count|sum|l2]"]),
    (
        ["serve"],
        [
            "[pure|zcdp|gdp|rdp|tcdp|approx]",
            "[duckdb|pandas|polars|spark]",
            "[critical|error|warning|info|debug|trace]",
        ],
    ),
    (["report"], []),
    (["demo"], []),
    (["schema"], []),
    (["schema", "show"], []),
    (["schema", "infer"], []),
]


@pytest.mark.parametrize(("command", "choices"), HELP, ids=[" ".join(c) or "overlapdp" for c, _ in HELP])
def test_help_shows_choices_and_bare_flags(
    command: list[str],
    choices: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run([*command, "--help"], capsys)
    assert code == 0, err
    assert "--help" in out
    assert "<bool>" not in out
    for choice in choices:
        assert choice in out
    if choices:
        assert "<str>" not in next(ln for ln in out.splitlines() if choices[0] in ln)


def test_a_bad_choice_names_the_option(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(answer(files, "--definition", "approx", "--budget", "1"), capsys)
    assert code == 2 and out == ""
    assert "--definition" in err and "pure" in err


# -- the same rule on the custodian's dashboard (it shows spent and remaining budgets) -------------------

NODE = shutil.which("node")
DASHBOARD_JS = (
    Path(__file__).resolve().parents[1] / "src" / "overlapdp" / "service" / "static" / "dashboard.js"
)


@pytest.mark.skipif(NODE is None, reason="no node to run the dashboard's formatting function")
def test_dashboard_rounds_remaining_down_and_spent_up() -> None:
    source = DASHBOARD_JS.read_text(encoding="utf-8")
    fmt = re.search(r"^function fmt\(.*?^}\n", source, re.S | re.M)
    assert fmt is not None
    values = [
        0.5 - 0.30000000000000004,
        0.30000000000000004,
        0.1996,
        1 / 3,
        2 / 3,
        0.99999999,
        1e-7,
        2.5,
        123456789.0,
        1.7e-6,
        0.0004,
        5e-324,
        1e300,
        0.0,
    ]
    script = fmt.group(0) + f"console.log(JSON.stringify({json.dumps(values)}.map((x) => "
    script += '[fmt(x, "up"), fmt(x, "down"), fmt(x)])));'
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    for x, (up, down, near) in zip(values, json.loads(out.stdout), strict=True):
        for text in (up, down, near):
            assert not FLOAT_NOISE.search(text) and len(text) <= 13, text
        if float(up) == x and float(down) == x:  # the shortest form fits: printed as is
            continue
        assert Fraction(down) <= Fraction(x) <= Fraction(up), (x, up, down)
    shown = dict(zip(values, json.loads(out.stdout), strict=True))
    assert shown[0.5 - 0.30000000000000004][1] == "0.199999"  # remaining: not 0.2, which is more
    assert shown[0.1996][1] == "0.1996"  # the old page rounded this remaining budget up to 0.2
    assert shown[0.30000000000000004][0] == "0.300001"


def test_tcdp_pair_is_shown_as_rho_and_omega_on_the_safe_sides() -> None:
    from overlapdp.display import guarantee

    # rho is a loss (rounded up), omega a lower limit on the orders (rounded down); RDP stays a curve.
    assert guarantee((0.30000000000000004, 3.0), pair=True) == "ρ = 0.300001, ω = 3"
    assert guarantee((0.125, math.inf), pair=True) == "ρ = 0.125, ω = inf"
    assert guarantee((0.1, 0.2, 0.3)) == "curve (3 orders)"
    assert guarantee(1 / 3) == "0.333334"
