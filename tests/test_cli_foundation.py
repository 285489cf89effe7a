"""The CLI: exact counts as JSON, schema inference, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cli_helpers import run
from overlapdp.samples import adult_schema


@pytest.fixture()
def files(tmp_path: Path, adult_frame: pd.DataFrame) -> dict[str, Path]:
    schema = tmp_path / "schema.json"
    adult_schema().save(schema)
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": "a", "where": "age < 20 AND sex = 1"}\n'
        '{"id": "b", "conditions": {"race": {"in": [1, 2]}}}\n'
        '{"where": "\\"income>50K\\" = 1"}\n'
    )
    data = tmp_path / "adult.csv"
    adult_frame.to_csv(data, index=False)
    return {"schema": schema, "queries": queries, "data": data}


def test_count_exact_json(
    files: dict[str, Path], adult_frame: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        [
            "count",
            "--schema",
            str(files["schema"]),
            "--data",
            str(files["data"]),
            "--queries",
            str(files["queries"]),
            "--exact",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    d = adult_frame
    assert json.loads(out) == [
        {"id": "a", "count": int(((d["age"] < 20) & (d["sex"] == 1)).sum())},
        {"id": "b", "count": int(d["race"].isin([1, 2]).sum())},
        {"id": "line3", "count": int((d["income>50K"] == 1).sum())},
    ]
    assert "NOT differentially private" in err


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"where": "height > 3"}', "unknown attribute 'height'"),
        ('{"where": "age >"}', "cannot parse"),
        ('{"where": "age = 3 OR sex = 1"}', "OR across attributes"),
        ('{"where": "age < 3", "weight": -2}', "weight"),
    ],
)
def test_bad_queries_exit_2_with_one_line(
    files: dict[str, Path], line: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files["queries"].write_text(line + "\n")
    code, out, err = run(
        [
            "count",
            "--schema",
            str(files["schema"]),
            "--data",
            str(files["data"]),
            "--queries",
            str(files["queries"]),
            "--exact",
        ],
        capsys,
    )
    assert code == 2
    assert fragment in err
    assert "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1


def test_bad_schema_and_missing_exact_flag(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"attributes": [{"name": "a", "type": "int", "min": 4, "max": 1}]}')
    code, _, err = run(
        [
            "count",
            "--schema",
            str(bad),
            "--data",
            str(files["data"]),
            "--queries",
            str(files["queries"]),
            "--exact",
        ],
        capsys,
    )
    assert code == 2 and "min 4 > max 1" in err
    code, _, err = run(
        [
            "count",
            "--schema",
            str(files["schema"]),
            "--data",
            str(files["data"]),
            "--queries",
            str(files["queries"]),
        ],
        capsys,
    )
    assert code == 2 and "--exact" in err


def test_schema_infer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.csv"
    pd.DataFrame({"age": [20, 30], "race": ["W", "B"], "gain": [0, 7.5]}).to_csv(data, index=False)
    code, _, err = run(["schema", "infer", "--data", str(data)], capsys)
    # Both undeclared numeric columns are named in one run.
    assert code == 2 and "'age', 'gain' are numeric: declare their bounds" in err and "leaks" in err
    code, out, _ = run(
        [
            "schema",
            "infer",
            "--data",
            str(data),
            "--bounds",
            "age=0:99",
            "--edges",
            "gain=0,1,10",
            "--categories",
            "race=W,B,A",
        ],
        capsys,
    )
    assert code == 0
    assert json.loads(out)["attributes"][1] == {
        "name": "race",
        "type": "categorical",
        "values": ["W", "B", "A"],
    }


def test_console_script_runs() -> None:
    """The installed entry point (not only the function) starts and prints help."""
    proc = subprocess.run(
        [sys.executable, "-m", "overlapdp.cli.main", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "count" in proc.stdout


def test_reading_data_shows_progress_on_stderr_only_on_a_terminal_or_when_long() -> None:
    """Issue 24.9: nothing said what was happening while data was read or encoded (minutes at 10 M
    rows). A spinner on a terminal's stderr; into a pipe only a closing line, and only when long."""
    import io

    from rich.console import Console

    from overlapdp.cli.app import LONG_SECONDS, progress

    ticks = iter([0.0, LONG_SECONDS + 2.5])
    pipe = io.StringIO()
    with progress(
        "reading adult.csv and counting (duckdb)", clock=lambda: next(ticks), out=Console(file=pipe)
    ):
        pass
    assert pipe.getvalue() == f"reading adult.csv and counting (duckdb): done in {LONG_SECONDS + 2.5:.1f} s\n"
    quick = iter([0.0, 0.2])
    pipe = io.StringIO()
    with progress("reading", clock=lambda: next(quick), out=Console(file=pipe)):
        pass
    assert pipe.getvalue() == ""  # a script's stderr stays clean
    quick = iter([0.0, 0.2])
    tty = io.StringIO()
    with progress("reading adult.csv", clock=lambda: next(quick), out=Console(file=tty, force_terminal=True)):
        pass
    assert "reading adult.csv ..." in tty.getvalue()  # the spinner's line
