"""Small things a user trips on (issue 24 item 10), each on the surface the user touches."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import run

REPO = Path(__file__).resolve().parents[1]


def _raw_csv(tmp: Path) -> Path:
    p = tmp / "people.csv"
    p.write_text("age,hours_per_week,sex\n25,40,Female\n38,50,Male\n61,10,Female\n", encoding="utf-8")
    return p


def test_bounds_in_one_flag_or_several(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(_raw_csv(tmp_path))
    tail = ["--categories", "sex=Female,Male"]
    code, combined, err = run(
        ["schema", "infer", "--data", data, "--bounds", "age=17:90,hours_per_week=1:99", *tail], capsys
    )
    assert code == 0, err
    code, repeated, err = run(
        [
            "schema",
            "infer",
            "--data",
            data,
            "--bounds",
            "age=17:90",
            "--bounds",
            "hours_per_week=1:99",
            *tail,
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(combined) == json.loads(repeated)
    attrs = {a["name"]: a for a in json.loads(combined)["attributes"]}
    assert (attrs["age"]["min"], attrs["age"]["max"]) == (17, 90)
    assert (attrs["hours_per_week"]["min"], attrs["hours_per_week"]["max"]) == (1, 99)


def test_python_dash_m() -> None:
    got = subprocess.run(
        [sys.executable, "-m", "overlapdp", "--version"], capture_output=True, text=True, cwd=REPO / "src"
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("overlapdp ")


@pytest.mark.slow  # 1.1 s of CPU (a serve process)
def test_serve_on_a_busy_port_prints_no_token(tmp_path: Path) -> None:
    exe = shutil.which("overlapdp", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the overlapdp console script is not installed beside this interpreter")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ledger = tmp_path / "ledger.sqlite"
        got = subprocess.run(
            [exe, "serve", "--port", str(port), "--ledger", str(ledger)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    assert got.returncode == 2
    assert "admin token" not in got.stderr
    assert got.stderr.strip().startswith("error:") and f"port {port}" in got.stderr and "--port" in got.stderr
    assert len(got.stderr.strip().splitlines()) <= 2
    assert not ledger.exists()  # nothing opened before the port was checked


def test_schema_infer_errors_name_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["schema", "infer", "--data", str(_raw_csv(tmp_path))], capsys)
    assert code == 2
    text = " ".join(err.split())
    assert "--categories-from-data" in text and "--bounds NAME=MIN:MAX" in text and "--edges" in text
    assert "categories_from_data" not in text.replace("--categories-from-data", "")


def _schema(tmp: Path) -> Path:
    p = tmp / "schema.json"
    p.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "age", "type": "int", "min": 17, "max": 90},
                    {"name": "sex", "type": "categorical", "values": ["Female", "Male"]},
                ]
            }
        ),
        encoding="utf-8",
    )
    return p


def test_syntax_error_without_parser_internals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "w.jsonl"
    work.write_text('{"where": "age BETWEN 20 AND 30"}\n', encoding="utf-8")
    code, _, err = run(["overlap", "--schema", str(_schema(tmp_path)), "--queries", str(work)], capsys)
    assert code == 2
    text = " ".join(err.split())
    assert "<class" not in text and "sqlglot" not in text
    assert "'BETWEN' at character 5" in text and "did you mean BETWEEN?" in text


def test_unknown_key_lists_every_accepted_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "w.jsonl"
    work.write_text('{"where": "age < 30", "aggregat": "sum"}\n', encoding="utf-8")
    code, _, err = run(["overlap", "--schema", str(_schema(tmp_path)), "--queries", str(work)], capsys)
    assert code == 2
    text = " ".join(err.split())
    assert "unknown key 'aggregat'" in text
    for key in (
        "where",
        "conditions",
        "id",
        "weight",
        "text",
        "group_by",
        "sql",
        "aggregate",
        "of",
        "bounds",
        "step",
    ):
        assert f"'{key}'" in text, key


def _readme_commands() -> list[list[str]]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith("overlapdp ") and " serve " not in ln]


def test_readme_command_lines_run_on_the_shipped_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path / "examples")
    commands = _readme_commands()
    assert {c[0] for c in commands} == {"schema", "overlap", "answer", "account", "report", "count"}
    for args in commands:
        code, _, err = run(args, capsys)
        assert code == 0, (args, err)
    assert json.loads(Path("inferred.json").read_text(encoding="utf-8"))["attributes"]
    assert Path("report/report.html").exists()


@pytest.mark.slow  # runs pytest in a process of its own, 1.8 s of CPU
def test_shared_data_skips_are_announced_once(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        textwrap.dedent(
            """
            import pytest
            @pytest.mark.parametrize("i", range(3))
            def test_a(i):
                pytest.skip("/x/shared/data/adult.csv is absent (the shared data folder sits beside ...)")
            def test_b():
                pytest.skip("something else")
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\nSHARED_DATA = '/x/shared/data'\n"
        "pytest_plugins = ['shared_data_summary']\n",
        encoding="utf-8",
    )
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert len(re.findall(r"SHARED DATA ABSENT", got.stdout)) == 1
    assert "3 test(s) SKIPPED because the shared data folder is absent" in " ".join(got.stdout.split())


def test_no_machine_paths_in_benchmarks() -> None:
    for p in [REPO / "benchmarks" / "README.md", *sorted((REPO / "benchmarks").glob("*.py"))]:
        text = p.read_text(encoding="utf-8")
        assert not re.search(r"/work/|/home/|/root/|/Users/", text), p
