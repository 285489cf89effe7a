"""The files people have: Latin-1, semicolons, tabs and Parquet on every engine, from the command line.

Each file holds the same small table, written here by the csv module (or pyarrow) in its own dialect;
the expected counts are computed by hand from the rows below, not by the package. Every failure is one
line on stderr and exit status 2 (no trace, no DuckDB dump).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_helpers import run
from overlapdp.files import csv_format, detect_encoding, sniff_separator

HEADER = ["age", "sex", "city", "hours"]
ROWS = [
    [25, "Female", "Bogotá", 40],
    [38, "Male", "Zürich", 50],
    [52, "Female", "Málaga", 20],
    [31, "Female", "Bogotá", 45],
    [44, "Male", "Köln", 60],
]
QUERIES = [
    ("bogota", "city = 'Bogotá'"),
    ("young_women", "sex = 'Female' AND age < 40"),
    ("umlaut", "city IN ('Zürich', 'Köln') AND hours >= 50"),
]
# by hand from ROWS
EXPECTED = {"bogota": 2, "young_women": 2, "umlaut": 2}
ENGINES = ["duckdb", "pandas", "polars"]


def _write(path: Path, *, encoding: str = "utf-8", sep: str = ",") -> Path:
    with path.open("w", encoding=encoding, newline="") as f:
        csv.writer(f, delimiter=sep).writerows([HEADER, *ROWS])
    return path


def _schema(tmp: Path) -> Path:
    p = tmp / "schema.json"
    p.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "age", "type": "int", "min": 17, "max": 90},
                    {"name": "sex", "type": "categorical", "values": ["Female", "Male"]},
                    {"name": "city", "type": "categorical", "values": ["Bogotá", "Köln", "Málaga", "Zürich"]},
                    {"name": "hours", "type": "int", "min": 1, "max": 99},
                ]
            }
        ),
        encoding="utf-8",
    )
    return p


def _workload(tmp: Path, encoding: str = "utf-8") -> Path:
    p = tmp / f"workload-{encoding}.jsonl"
    lines = [json.dumps({"id": i, "where": w}, ensure_ascii=False) for i, w in QUERIES]
    p.write_text("\n".join(lines) + "\n", encoding=encoding)
    return p


def _counts(out: str) -> dict[str, int]:
    return {r["id"]: r["count"] for r in json.loads(out)}


def _one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("warning")]
    text = " ".join(lines)
    assert text.startswith("error:"), err
    assert "Traceback" not in err and "Exception" not in err.split("(")[0] and "LINE" not in err
    # one message (rich may wrap it, but a dump or trace would add many)
    assert len(lines) <= 3, err
    return text


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "kind",
    ["latin-1", "cp1252", "utf-8-bom", "semicolon", "tsv", "pipe-latin-1", "parquet", "parquet-no-suffix"],
)
def test_every_dialect_on_every_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, kind: str
) -> None:
    """Detected, not declared: the same counts as by hand (the workload file in Latin-1 too)."""
    if kind == "latin-1":
        data = _write(tmp_path / "people.csv", encoding="latin-1")
    elif kind == "cp1252":
        data = _write(tmp_path / "people.csv", encoding="cp1252")
    elif kind == "utf-8-bom":
        data = _write(tmp_path / "people.csv", encoding="utf-8-sig")
    elif kind == "semicolon":
        data = _write(tmp_path / "people.csv", sep=";")
    elif kind == "tsv":
        data = _write(tmp_path / "people.tsv", sep="\t")
    elif kind == "pipe-latin-1":
        data = _write(tmp_path / "people.txt", sep="|", encoding="latin-1")
    else:
        data = tmp_path / ("people.parquet" if kind == "parquet" else "people.bin")
        pq.write_table(pa.Table.from_pylist([dict(zip(HEADER, r, strict=True)) for r in ROWS]), data)
    workload = _workload(tmp_path, "latin-1" if "latin" in kind else "utf-8")
    args = ["count", "--schema", str(_schema(tmp_path)), "--data", str(data), "--queries", str(workload)]
    code, out, err = run([*args, "--exact", "--json", "--engine", engine], capsys)
    assert code == 0, err
    assert _counts(out) == EXPECTED


@pytest.mark.parametrize("engine", ENGINES)
def test_declared_encoding_and_separator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    data = _write(tmp_path / "people.dat", encoding="latin-1", sep=";")
    args = ["count", "--schema", str(_schema(tmp_path)), "--data", str(data)]
    args += ["--queries", str(_workload(tmp_path)), "--exact", "--json", "--engine", engine]
    code, out, err = run([*args, "--encoding", "latin-1", "--sep", ";"], capsys)
    assert code == 0, err
    assert _counts(out) == EXPECTED


@pytest.mark.parametrize("engine", ENGINES)
def test_wrong_encoding_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """A Latin-1 file declared UTF-8 (separator declared too, so nothing is sniffed first): DuckDB's and
    Polars' own readers fail, one line naming the file and the flag, exit 2."""
    data = _write(tmp_path / "people.csv", encoding="latin-1")
    args = ["count", "--schema", str(_schema(tmp_path)), "--data", str(data), "--queries"]
    args += [str(_workload(tmp_path)), "--exact", "--engine", engine, "--encoding", "utf-8", "--sep", ","]
    code, _, err = run(args, capsys)
    text = _one_line_error(code, err)
    assert "people.csv" in text and "--encoding" in text


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--encoding", "klingon"], "--encoding 'klingon' is not a known text encoding"),
        (["--sep", ";;"], "--sep ';;'"),
    ],
)
def test_bad_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    data = _write(tmp_path / "people.csv")
    base = ["count", "--schema", str(_schema(tmp_path)), "--data", str(data)]
    code, _, err = run([*base, "--queries", str(_workload(tmp_path)), "--exact", *args], capsys)
    assert needle in _one_line_error(code, err)


def test_latin1_workload_declared_wrong_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = _workload(tmp_path, "latin-1")
    code, _, err = run(
        ["overlap", "--schema", str(_schema(tmp_path)), "--queries", str(workload), "--encoding", "utf-8"],
        capsys,
    )
    text = _one_line_error(code, err)
    assert "workload file" in text and "not valid utf-8" in text and "UnicodeDecodeError" not in err


def test_data_and_workload_in_different_encodings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--encoding declares the data file's; the workload beside it is detected (here UTF-8)."""
    data = _write(tmp_path / "people.csv", encoding="latin-1")
    args = ["count", "--schema", str(_schema(tmp_path)), "--data", str(data), "--queries"]
    code, out, err = run(
        [*args, str(_workload(tmp_path)), "--exact", "--json", "--encoding", "latin-1"], capsys
    )
    assert code == 0, err
    assert _counts(out) == EXPECTED


def test_schema_infer_names_the_separator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write(tmp_path / "people.csv", sep=";")
    code, out, err = run(
        [
            "schema",
            "infer",
            "--data",
            str(data),
            "--bounds",
            "age=17:90,hours=1:99",
            "--categories-from-data",
        ],
        capsys,
    )
    assert code == 0, err  # detected
    assert [a["name"] for a in json.loads(out)["attributes"]] == HEADER
    code, _, err = run(
        ["schema", "infer", "--data", str(data), "--sep", ",", "--bounds", "age=17:90"], capsys
    )
    text = _one_line_error(code, err)
    assert "'age'" in text and "separator ','" in text and "--sep ';'" in text


def test_schema_infer_reads_latin1_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write(tmp_path / "people.csv", encoding="latin-1")
    code, out, err = run(
        [
            "schema",
            "infer",
            "--data",
            str(data),
            "--bounds",
            "age=17:90",
            "--bounds",
            "hours=1:99",
            "--categories-from-data",
        ],
        capsys,
    )
    assert code == 0, err
    city = next(a for a in json.loads(out)["attributes"] if a["name"] == "city")
    assert city["values"] == sorted({r[2] for r in ROWS})


def test_detection_unit(tmp_path: Path) -> None:
    assert detect_encoding(_write(tmp_path / "a.csv", encoding="latin-1")) == "cp1252"
    assert detect_encoding(_write(tmp_path / "b.csv")) == "utf-8"
    assert detect_encoding(_write(tmp_path / "c.csv", encoding="utf-8-sig")) == "utf-8-sig"
    # byte 0x81 is undefined in Windows-1252: Latin-1 decodes it
    (tmp_path / "d.csv").write_bytes(b"a,b\n\x81,\xe9\n")
    assert detect_encoding(tmp_path / "d.csv") == "latin-1"
    # a quoted separator inside a field does not fool the sniffer
    assert sniff_separator(["a;b;c\n", '"x,y";2;3\n', '"u,v";5;6\n']) == ";"
    assert sniff_separator(["single\n", "column\n"]) == ","
    assert csv_format(_write(tmp_path / "e.tsv", sep="\t")).sep == "\t"
