"""``overlapdp overlap``: JSON output checked against brute force, readable table, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_helpers import run
from overlapdp.overlap import brute_force_overlap
from overlapdp.query import Workload
from overlapdp.schema import Schema


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "age", "type": "int", "min": 0, "max": 9},
                    {"name": "race", "type": "categorical", "values": ["a", "b", "c"]},
                ]
            }
        )
    )
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "young", "where": "age < 5", "weight": 0.5}\n'
        '{"id": "ab", "where": "race IN (\'a\', \'b\')", "weight": 2}\n'
        '{"id": "bc", "where": "race IN (\'b\', \'c\') AND age >= 3"}\n'
        '{"id": "old", "where": "age > 6", "weight": 3}\n'
    )
    return {"schema": schema, "queries": queries}


@pytest.mark.parametrize("comp", ["count", "sum", "l2"])
def test_overlap_json_matches_brute_force(
    files: dict[str, Path], comp: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        [
            "overlap",
            "--schema",
            str(files["schema"]),
            "--queries",
            str(files["queries"]),
            "--comp",
            comp,
            "--json",
        ],
        capsys,
    )
    assert code == 0
    got = json.loads(out)
    assert set(got) >= {"value", "exact", "upper", "lower", "witness", "queries", "algorithm"}
    schema = Schema.load(files["schema"])
    workload = Workload.read_jsonl(schema, files["queries"])
    truth = brute_force_overlap(workload.queries, comp=comp)  # type: ignore[arg-type]
    assert got["exact"] is True
    assert got["value"] == pytest.approx(float(truth.value))
    row = tuple(schema.attribute(k).index_of(v) for k, v in got["witness"].items())
    assert sorted(got["queries"]) == sorted(q.id for q in workload if q.covers(row))  # type: ignore[arg-type]


def test_overlap_table(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["overlap", "--schema", str(files["schema"]), "--queries", str(files["queries"]), "--comp", "sum"],
        capsys,
    )
    assert code == 0
    assert "witness row" in out and "│ 6 " in out and "ab, bc, old" in out


def test_overlap_bad_input(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["overlap", "--schema", str(files["schema"]), "--queries", str(files["queries"]), "--comp", "max"],
        capsys,
    )
    assert code == 2 and "--comp" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "where": "age < 3", "weight": -1}\n')
    code, _, err = run(["overlap", "--schema", str(files["schema"]), "--queries", str(bad), "--json"], capsys)
    assert code == 2 and "weight" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, out, _ = run(
        ["overlap", "--schema", str(files["schema"]), "--queries", str(empty), "--json"], capsys
    )
    assert code == 0 and json.loads(out)["value"] == 0.0


def test_overlap_on_a_wide_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """10 000 attributes: the value equals the one from --json (checked against brute force on the
    queries' own attributes: the rows of a0..a3), the table lists only the covering queries'
    attributes (it printed all 10 000 rows) and says where the whole row is."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({f"a{i}": 5 for i in range(10_000)}))
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "x", "conditions": {"a0": {"range": [0, 2]}, "a1": {"range": [1, 3]}}}\n'
        '{"id": "y", "conditions": {"a1": {"range": [3, 4]}, "a2": {"eq": 0}}}\n'
        '{"id": "z", "conditions": {"a0": {"range": [1, 4]}, "a3": {"in": [1, 3]}}}\n'
    )
    code, out, _ = run(["overlap", "--schema", str(schema), "--queries", str(queries), "--json"], capsys)
    assert code == 0
    got = json.loads(out)
    assert len(got["witness"]) == 10_000
    small = Schema.from_json({f"a{i}": 5 for i in range(4)})
    truth = brute_force_overlap(Workload.read_jsonl(small, queries).queries)
    assert got["exact"] and got["value"] == float(truth.value) == 3.0
    code, out, _ = run(["overlap", "--schema", str(schema), "--queries", str(queries)], capsys)
    assert code == 0
    assert "a9999" not in out and "--json gives the whole row" in " ".join(out.split())
    assert len(re.findall(r"│ a\d+ ", out)) == 4


def test_overlap_values_are_rounded_up_not_to_nearest(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24.3: ``{value:g}`` printed a composed loss of 1.0811707 as 1.08117, below it; every
    printed privacy figure goes through overlapdp.display (losses up)."""
    from fractions import Fraction

    weighted = files["queries"].parent / "w.jsonl"
    weighted.write_text(
        '{"id": "a", "where": "age < 5", "weight": 0.54058535}\n{"id": "b", "where": "age < 7", "weight": 0.54058535}\n'
    )
    args = ["overlap", "--schema", str(files["schema"]), "--queries", str(weighted), "--comp", "sum"]
    code, out, _ = run(args, capsys)
    assert code == 0
    truth = Fraction(0.54058535) * 2  # brute force: ages 0-4 are in both
    assert truth > Fraction("1.08117")
    assert "│ 1.08118 " in out and "1.08117" not in out
