"""Start-up and packaging: what the command line and the library import,
the lazy package exports, the extras and their errors, ``--version`` and serve's ledger default.

Nothing here is timed (speed is measured in benchmarks/startup.py); the tests check structure: in a
fresh interpreter, ``overlapdp --help`` and ``import overlapdp.mechanisms`` load none of the heavy
dependencies, which used to cost 2.6 s and 6.4 s of CPU.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from cli_helpers import run

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

#: Imported only where used (DESIGN.md); none may be loaded by `--help` or by a bare package import.
#: (pydantic is not among them: Typer itself imports it to convert a command's options.)
HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "matplotlib",
    "polars",
    "pyspark",
    "pytoulbar2",
    "duckdb",
    "pandas",
    "pyarrow",
    "networkx",
    "psycopg",
    "sqlglot",
    "scipy.signal",
    "scipy.special",
    "scipy.optimize",
    "scipy.stats",
    "scipy.sparse",
)

#: Packages whose public names are lazy exports (overlapdp/_lazy.py).
LAZY_PACKAGES = (
    "overlapdp",
    "overlapdp.audit",
    "overlapdp.engine",
    "overlapdp.mechanisms",
    "overlapdp.overlap",
    "overlapdp.privacy",
    "overlapdp.query",
    "overlapdp.report",
    "overlapdp.service",
)


def python(code: str, *, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter on this checkout's sources; ``block`` modules look absent
    (``sys.modules[name] = None``: importing them raises ModuleNotFoundError, find_spec gives None)."""
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in block)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(REPO / "tests")])}
    env.pop("OVERLAPDP_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env, timeout=120
    )


def loaded_heavy(code: str) -> list[str]:
    done = python(code + f"\nimport json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


# -- item 11: what start-up imports --------------------------------------------------------------------


HELP_EVERYTHING = """
from overlapdp.cli.main import main
from overlapdp.cli.app import app

def helps(args):
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None), (args, exc.code)

helps(["--help"])
helps(["--version"])
for command in app.registered_commands:
    helps([command.name or command.callback.__name__, "--help"])
for group in app.registered_groups:
    helps([group.name, "--help"])
    for sub in group.typer_instance.registered_commands:
        helps([group.name, sub.name or sub.callback.__name__, "--help"])
"""


@pytest.fixture(scope="module")
def loaded_by_help() -> list[str]:
    """The modules of HEAVY, numpy and SciPy that ``--help`` of every command loads (one interpreter for
    both tests below: 0.8 s of CPU each)."""
    listed = json.dumps([*HEAVY, "numpy", "scipy"])
    done = python(
        HELP_EVERYTHING + f"\nimport json\nprint(json.dumps([m for m in {listed} if m in sys.modules]))"
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_help_of_every_command_imports_no_heavy_dependency(loaded_by_help: list[str]) -> None:
    assert [m for m in loaded_by_help if m in HEAVY] == []


def test_help_of_every_command_imports_no_numpy(loaded_by_help: list[str]) -> None:
    """Issue 23: two command modules imported a type alias and constants from modules that import numpy
    (``overlapdp --help`` took 3.3 times ``python -c "import numpy"``); a third imported the schema
    package at the top. The help path loads no numpy (nor SciPy, which needs it)."""
    assert [m for m in loaded_by_help if m in ("numpy", "scipy")] == []


def test_the_light_option_modules_hold_the_librarys_own_names() -> None:
    """The CLI's choices come from small modules the library re-exports (the same objects, one place)."""
    from overlapdp.mechanisms import answer_options, answering
    from overlapdp.privacy import definitions, neighbouring

    for name in ("Definition", "Accounting", "DEFAULT_DELTA", "DEFAULT_EFFORT"):
        assert getattr(answering, name) is getattr(answer_options, name), name
    assert definitions.Neighbouring is neighbouring.Neighbouring


def test_package_imports_load_no_heavy_dependency() -> None:
    assert loaded_heavy("import overlapdp, overlapdp.mechanisms, overlapdp.privacy, overlapdp.engine") == []


def test_library_imports_load_only_what_they_use() -> None:
    # The interactive mechanisms and the accountant: numpy, no pandas, SciPy's signal module or engines.
    code = (
        "from overlapdp.mechanisms import SparseVector, NoisyCounts, ConcurrentComposition\n"
        "from overlapdp.privacy.odometer import Odometer\n"
        "from overlapdp.overlap import max_overlap\n"
        "from overlapdp import Schema, PredicateQuery"
    )
    assert loaded_heavy(code) == []
    # Names still resolve to the modules that define them, and using them imports what they need.
    assert loaded_heavy("from overlapdp.engine import DuckDBEngine") == ["duckdb"]


#: What a user reaches for from the root package (issue 16 item 3), each the object its package defines.
ROOT_NAMES = {
    "max_overlap": "overlapdp.overlap",
    "OverlapIndex": "overlapdp.overlap",
    "PrivacyFilter": "overlapdp.privacy",
    "Odometer": "overlapdp.privacy",
    "PureDP": "overlapdp.privacy",
    "ZCDP": "overlapdp.privacy",
    "GDP": "overlapdp.privacy",
    "RDP": "overlapdp.privacy",
    "TCDP": "overlapdp.privacy",
    "ApproxDP": "overlapdp.privacy",
    "Laplace": "overlapdp.privacy",
    "Gaussian": "overlapdp.privacy",
    "noisy_counts": "overlapdp.mechanisms",
    "answer_workload": "overlapdp.mechanisms",
    "ConcurrentComposition": "overlapdp.mechanisms",
    "Workload": "overlapdp.query",
    "group_by": "overlapdp.query",
    "Schema": "overlapdp.schema",
}


def test_root_exports_what_a_user_reaches_for() -> None:
    # In a fresh interpreter: `import overlapdp` is light, lists the names, and each resolves (lazily) to
    # the object its package defines, not to a module (noisy_counts once resolved to its module).
    code = (
        "import importlib, json, sys, types\n"
        "import overlapdp\n"
        f"names = {ROOT_NAMES!r}\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "missing = sorted(set(names) - set(overlapdp.__all__))\n"
        "wrong = [n for n, pkg in names.items()\n"
        "         if getattr(overlapdp, n) is not getattr(importlib.import_module(pkg), n)\n"
        "         or isinstance(getattr(overlapdp, n), types.ModuleType)]\n"
        "print(json.dumps([heavy, missing, wrong]))\n"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[], [], []]
    # `from overlapdp import *` hands out exactly __all__, and each name there resolves.
    namespace: dict[str, object] = {}
    exec("from overlapdp import *", namespace)
    import overlapdp

    assert set(overlapdp.__all__) <= set(namespace)


def test_each_public_name_means_one_thing() -> None:
    """A name exported by two packages is the same object (issue 16 item 3: there were two
    ``DiscreteLaplace``, ``DiscreteGaussian`` and ``Mechanism``; the noise samplers are now
    ``DiscreteLaplaceNoise`` / ``DiscreteGaussianNoise``, the service's record ``ServedMechanism``)."""
    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    for name in LAZY_PACKAGES:
        package = importlib.import_module(name)
        for public, sub in package._EXPORTS.items():
            if sub.startswith(("errors", "result", "auth", "core", "ledger", "magnitude")):
                continue  # exception classes: being gathered in overlapdp.errors (branch errorsone)
            value = getattr(importlib.import_module(f"{name}.{sub}"), public)
            if public in seen and seen[public][1] is not value:
                clashes.append((public, seen[public][0], name))
            seen.setdefault(public, (name, value))
    assert clashes == []


def test_private_modules_are_marked() -> None:
    # Internal modules carry a leading underscore; the old public names are gone (no shims).
    for old in (
        "overlapdp.overlap.gridbranch",
        "overlapdp.overlap.compiled",
        "overlapdp.overlap.wcsp_worker",
        "overlapdp.service.runtime",
        "overlapdp.mechanisms.noisy_counts",
        "overlapdp.client",
        "overlapdp.answering",
    ):
        parent, _, leaf = old.rpartition(".")
        assert not (SRC / parent.replace(".", "/") / f"{leaf}.py").exists(), old
    from overlapdp.overlap import wcsp

    assert wcsp._WORKER.is_file()  # run as a script by path


def _type_checking_imports(init: Path) -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in a package's __init__."""
    out: dict[str, str] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                for alias in stmt.names:
                    out[alias.asname or alias.name] = stmt.module
    return out


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_lazy_exports_agree_with_the_typed_imports(name: str) -> None:
    package = importlib.import_module(name)
    exports: dict[str, str] = package._EXPORTS
    assert exports, name
    # What mypy sees (the TYPE_CHECKING imports) is what the package hands out at run time.
    typed = _type_checking_imports(Path(package.__file__ or ""))
    assert typed == {n: f"{name}.{sub}" for n, sub in exports.items()}
    assert set(exports) <= set(package.__all__)
    assert set(package.__all__) <= set(dir(package))
    # Importing a submodule binds its name on the package: a lazy name must not be a submodule's name.
    assert not {n for n, sub in exports.items() if n == sub}
    for sub in set(exports.values()):
        importlib.import_module(f"{name}.{sub}")
    for public, sub in exports.items():
        assert getattr(package, public) is getattr(importlib.import_module(f"{name}.{sub}"), public)
    assert not [n for n in package.__all__ if isinstance(getattr(package, n), types.ModuleType)]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


# -- extras: one clear error naming the extra -------------------------------------------------------------

CLI = "from overlapdp.cli.main import main\nmain({args!r})"


def test_serve_without_the_service_extra_names_it() -> None:
    done = python(CLI.format(args=["serve"]), block=("fastapi", "uvicorn"))
    assert done.returncode == 2, done.stderr
    assert "overlapdp serve needs the 'service' extra" in done.stderr
    assert "pip install 'overlapdp[service]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_demo_names_every_missing_extra_before_it_starts(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = python(CLI.format(args=["demo", "--out", str(out)]), block=("fastapi", "matplotlib"))
    assert done.returncode == 2, done.stderr
    assert "needs the 'service' and 'plots' extras: pip install 'overlapdp[service,plots]'" in done.stderr
    assert not out.exists()  # refused before any work


def test_report_without_matplotlib_names_the_plots_extra(tmp_path: Path) -> None:
    done = python(CLI.format(args=["report", "--schema", "s.json", "--queries", "q"]), block=("matplotlib",))
    assert done.returncode == 2, done.stderr
    assert "overlapdp report needs the 'plots' extra" in done.stderr


def test_library_names_the_extra_of_a_missing_dependency() -> None:
    code = (
        "from overlapdp.errors import MissingExtraError\n"
        "try:\n"
        "    from overlapdp.service import create_app\n"
        "except MissingExtraError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc.extra, '|', exc)\n"
    )
    done = python(code, block=("fastapi",))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("service | overlapdp.service.create_app needs the 'service' extra")
    done = python("import overlapdp.service.client", block=("httpx",))
    assert (
        "MissingExtraError: overlapdp.service.client needs the 'service' extra (httpx is not installed)"
        in done.stderr
    )
    # The report's plots say so too.
    code = (
        "from overlapdp.errors import MissingExtraError\n"
        "try:\n"
        "    from overlapdp.report import build_report\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.extra, '|', exc)\n"
    )
    done = python(code, block=("matplotlib",))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("plots | overlapdp.report.build_report needs the 'plots' extra")


def test_extras_cover_every_optional_module() -> None:
    """Each extra named by the code is declared in pyproject.toml with the package that provides it."""
    from overlapdp._optional import EXTRA_OF

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    base = " ".join(project["dependencies"])
    provides = {"fastapi", "uvicorn", "httpx", "pydantic", "matplotlib", "pyspark", "pytoulbar2", "psycopg"}
    for module, extra in EXTRA_OF.items():
        assert extra in extras, extra
        if module in provides:
            assert any(req.startswith(module) for req in extras[extra]), (module, extra)
            assert module not in base, module  # optional, not in the base install
    # `all` (and so `dev`, which ./scripts/test installs) holds every extra.
    (everything,) = extras["all"]
    assert everything.startswith("overlapdp[")
    assert set(everything.removeprefix("overlapdp[").removesuffix("]").split(",")) == set(EXTRA_OF.values())
    assert "overlapdp[all]" in extras["dev"]
    # ./scripts/demo installs what `overlapdp demo` needs.
    from overlapdp.cli.main import NEEDS

    demo = (REPO / "scripts" / "demo").read_text(encoding="utf-8")
    line = next(x for x in demo.splitlines() if x.startswith("OVERLAPDP_EXTRAS="))
    installed = set(line.split('"')[1].split(","))
    assert set(NEEDS["demo"]) <= installed


# -- item 10: --version ----------------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import overlapdp

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    code, out, err = run(["--version"], capsys)
    assert (code, err) == (0, "")
    assert out == f"overlapdp {declared}\n"
    assert overlapdp.__version__ == declared


# -- item 13: serve's ledger in the current directory ----------------------------------------------------


def test_serve_writes_its_ledger_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("uvicorn")
    import uvicorn

    from overlapdp.schema import IntAttribute, Schema

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "people.csv").write_text("age\n1\n2\n3\n", encoding="utf-8")
    (data_dir / "people.json").write_text(
        json.dumps(Schema((IntAttribute("age", 0, 9),)).to_json()), encoding="utf-8"
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    # serve sets OVERLAPDP_SERVED in os.environ; setting it here first makes monkeypatch restore the
    # original (absent) value afterwards, or every later test on a seeded source would be refused.
    monkeypatch.setenv("OVERLAPDP_SERVED", "0")
    monkeypatch.setenv("OVERLAPDP_ADMIN_TOKEN", "t" * 40)
    started: list[str] = []
    # serve binds its socket itself (a busy port is refused before the token is printed), then runs
    # uvicorn's server on it; --port 0: any free port, whatever else runs on the machine
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: started.append(self.config.host))
    code, _, err = run(
        [
            "serve",
            "--data",
            str(data_dir / "people.csv"),
            "--schema",
            str(data_dir / "people.json"),
            "--port",
            "0",
        ],
        capsys,
    )
    assert code == 0, err
    assert started == ["127.0.0.1"]
    assert (cwd / "overlapdp-ledger.sqlite").is_file()
    assert sorted(p.name for p in data_dir.iterdir()) == ["people.csv", "people.json"]
    assert "(ledger: overlapdp-ledger.sqlite)" in " ".join(err.split())
    # The default is stated in the command's help.
    code, out, _ = run(["serve", "--help"], capsys)
    assert "overlapdp-ledger.sqlite in the current directory" in " ".join(out.split())


def test_the_mechanisms_count_a_table_through_the_engine() -> None:
    """The engine (data) sits below the mechanisms (noise) in the package order (issue 23 item 3,
    tests/test_package_order.py): a mechanism opens a table with the engine's own opener, no registry."""
    done = python(
        "import overlapdp.mechanisms.counting as c, sys\n"
        "import pandas as pd\n"
        "from overlapdp import Schema, parse_where\n"
        "from overlapdp.schema import IntAttribute\n"
        "s = Schema((IntAttribute('a', 0, 9),))\n"
        "frame = pd.DataFrame({'a': [1, 2, 2, 7, 9]})\n"
        "print(c.Counter.of(frame).count_many([parse_where(s, 'a >= 2'), parse_where(s, 'a = 2')]))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[4, 2]"  # counted by hand from the five rows
