"""``overlapdp account``: JSON keys, values checked against an independent per-row computation, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cli_helpers import run
from overlapdp.privacy import GDP, Gaussian, Laplace, compose_approx
from overlapdp.samples import adult_schema


@pytest.fixture()
def schema_file(tmp_path: Path) -> Path:
    p = tmp_path / "schema.json"
    adult_schema().save(p)
    return p


def write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "ledger.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_pure_ledger_json(tmp_path: Path, schema_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write(
        tmp_path,
        [
            '{"where": "age < 30", "mechanism": {"mechanism": "laplace", "scale": 10, "sensitivity": 1}}',
            '{"where": "age >= 30", "mechanism": "laplace", "scale": 10}',
            '{"conditions": {"sex": {"in": [1]}}, "mechanism": {"mechanism": "laplace", "scale": 5}}',
            '{"mechanism": {"mechanism": "laplace", "scale": 20}}',
        ],
    )
    code, out, _ = run(
        ["account", "--schema", str(schema_file), "--ledger", str(ledger), "--delta", "1e-6", "--json"],
        capsys,
    )
    assert code == 0
    js = json.loads(out)
    assert js["delta"] == 1e-6
    # pure: sequential 0.1 + 0.1 + 0.2 + 0.05; the worst row is in one age half, with sex = 1
    assert js["sequential"]["pure_epsilon"] == pytest.approx(0.45)
    assert js["overlap"]["pure_epsilon"] == pytest.approx(0.35)
    assert js["overlap"]["witness"]["sex"] == 1
    assert js["overlap"]["epsilon"] <= 0.35 + 1e-9
    worst_row = [Laplace(10), Laplace(5), Laplace(20)]
    assert js["overlap"]["epsilon"] == pytest.approx(compose_approx(worst_row).epsilon_at(1e-6), rel=1e-9)
    assert {"pure", "zcdp", "rdp", "approx"} <= set(js["definitions"])


def test_gaussian_ledger_uses_the_tightest_definition(
    tmp_path: Path, schema_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = write(
        tmp_path,
        ['{"where": "age < 30", "mechanism": "gaussian", "sigma": 4}'] * 1
        + [
            '{"id": "b", "where": "age < 40", "mechanism": "gaussian", "sigma": 4}',
            '{"id": "c", "where": "age >= 50", "mechanism": "gaussian", "sigma": 4}',
        ],
    )
    code, out, _ = run(["account", "--schema", str(schema_file), "--ledger", str(ledger), "--json"], capsys)
    assert code == 0, out
    js = json.loads(out)
    exact_overlap = GDP(math.sqrt(2) / 4).epsilon_at(1e-6)
    exact_seq = GDP(math.sqrt(3) / 4).epsilon_at(1e-6)
    assert js["overlap"]["epsilon"] == pytest.approx(exact_overlap, rel=1e-6)
    assert js["sequential"]["epsilon"] == pytest.approx(exact_seq, rel=1e-6)
    assert "pure_epsilon" not in js["sequential"]
    assert js["definitions"]["gdp"]["overlap"] == pytest.approx(math.sqrt(2) / 4)
    # the table form runs too
    code, out, _ = run(["account", "--schema", str(schema_file), "--ledger", str(ledger)], capsys)
    assert code == 0 and "GDP" in out
    assert Gaussian(4).gdp().mu == 0.25


@pytest.mark.parametrize(
    ("line", "extra"),
    [
        ('{"where": "age < 30", "mechanism": "cauchy", "scale": 1}', []),
        ('{"where": "age < 30", "mechanism": "laplace", "scale": 0}', []),
        ('{"where": "age < 30", "mechanism": "laplace", "scale": -3}', []),
        ('{"where": "age < 30", "mechanism": "gaussian"}', []),
        ('{"where": "age < 30", "epsilon": 1, "delta": 1.5}', []),
        ('{"where": "nope < 30", "mechanism": "laplace", "scale": 1}', []),
        ("not json", []),
        ('{"where": "age < 30", "mechanism": "laplace", "scale": 1}', ["--delta", "0"]),
        ('{"where": "age < 30", "mechanism": "laplace", "scale": 1}', ["--delta", "1"]),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, schema_file: Path, capsys: pytest.CaptureFixture[str], line: str, extra: list[str]
) -> None:
    ledger = write(tmp_path, ['{"where": "age > 50", "mechanism": "laplace", "scale": 1}', line])
    code, _, err = run(["account", "--schema", str(schema_file), "--ledger", str(ledger), *extra], capsys)
    assert code == 2
    assert "error" in err and "Traceback" not in err
    if not extra:
        assert "line 2" in err


def test_replace_neighbours_count_the_row_outside_a_drop_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, finding 2: ``--neighbouring replace`` on a schema that drops rows outside its domain: a
    row moving out of the domain changes the count of every row (loss 1.0 for Laplace(1), not 0.0)."""
    doc = {"attributes": [{"name": "a", "type": "int", "min": 0, "max": 1}], "outside": "drop"}
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(doc))
    ledger = write(tmp_path, ['{"where": "a >= 0", "mechanism": "laplace", "scale": 1}'])
    args = [
        "account",
        "--schema",
        str(schema),
        "--ledger",
        str(ledger),
        "--neighbouring",
        "replace",
        "--json",
    ]
    code, out, err = run(args, capsys)
    assert code == 0, err
    js = json.loads(out)
    assert js["overlap"]["pure_epsilon"] == 1.0
    assert js["definitions"]["pure"]["overlap"] == 1.0
