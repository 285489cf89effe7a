"""A slim core (issue 24 item 7): the base install holds only what the library imports; the rest are
extras, each missing one reported in one line naming it."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from cli_helpers import run

REPO = Path(__file__).resolve().parents[1]
#: distribution -> the module the library imports
MODULE = {"pyarrow": "pyarrow", "highspy": "highspy"}


def _core() -> list[str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps]


def test_every_core_dependency_is_imported_by_the_library() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "src" / "overlapdp").rglob("*.py"))
    for dist in _core():
        module = MODULE.get(dist, dist.replace("-", "_"))
        assert re.search(rf"^\s*(import|from) {module}\b", source, re.M), f"{dist} is core but never imported"


def test_engines_and_references_beyond_the_core_are_extras() -> None:
    core = set(_core())
    assert not core & {"polars", "networkx", "fastapi", "matplotlib", "pyspark"}
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("polars") for d in extras["polars"])
    assert any(d.startswith("networkx") for d in extras["reference"])
    assert any(d.startswith("swagger-ui-bundle") for d in extras["service"])
    for name in ("polars", "reference"):
        assert name in extras["all"][0]


def test_polars_engine_without_its_extra_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "polars" else real(name, *a)
    )
    (tmp_path / "d.csv").write_text("age\n30\n", encoding="utf-8")
    (tmp_path / "s.json").write_text('{"attributes": [{"name": "age", "type": "int", "min": 0, "max": 99}]}')
    (tmp_path / "w.jsonl").write_text('{"where": "age < 40"}\n', encoding="utf-8")
    code, _, err = run(
        [
            "count",
            "--schema",
            str(tmp_path / "s.json"),
            "--data",
            str(tmp_path / "d.csv"),
            "--queries",
            str(tmp_path / "w.jsonl"),
            "--exact",
            "--engine",
            "polars",
        ],
        capsys,
    )
    assert code == 2
    assert "pip install 'overlapdp[polars]'" in " ".join(err.split())
