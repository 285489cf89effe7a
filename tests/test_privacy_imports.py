"""The privacy package's modules import one another only at module level, downwards (DESIGN.md step 4).

An import inside a function hides a cycle (fdp and mechanisms used to import each other that way): the
cycle then fails only on the first call from an unusual import order. The structural check walks every
module's syntax tree; the import check loads each module first in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import overlapdp.privacy

PACKAGE = Path(overlapdp.privacy.__file__).parent
# dotted names below overlapdp.privacy: "odometer", "measures", "measures.gdp", ...
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")
    if p.relative_to(PACKAGE).as_posix() != "__init__.py"
)


def _function_level_imports(path: Path) -> list[str]:
    """``module:line name`` for each import of an ``overlapdp.privacy`` module inside a function body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level > 0:  # a relative import inside a function: a sibling by definition
                    names = [f"{'.' * node.level}{node.module or ''}"]
                elif node.module is not None:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            hits = [n for n in names if n.startswith(".") or n.startswith("overlapdp.privacy")]
            if hits:
                found.append(f"{path.name}:{node.lineno} {hits[0]}")
    return found


def test_no_privacy_module_imports_a_sibling_inside_a_function() -> None:
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) for hit in _function_level_imports(p)]
    assert found == []


def test_the_check_sees_a_function_level_import(tmp_path: Path) -> None:
    # the check itself can fail: the pattern the old fdp.py used
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from overlapdp.privacy.mechanisms import Gaussian\n    return Gaussian\n")
    assert _function_level_imports(probe) == ["probe.py:2 overlapdp.privacy.mechanisms"]


@pytest.mark.slow  # 1.9 s of CPU in fresh interpreters
def test_each_privacy_module_imports_first_in_a_fresh_interpreter() -> None:
    # One interpreter, one module at a time: every overlapdp module is dropped from sys.modules before
    # the next is imported first (numpy and scipy stay loaded, which keeps this fast).
    script = (
        "import importlib, sys\n"
        f"for name in {[f'overlapdp.privacy.{m}' for m in MODULES]!r}:\n"
        "    for k in [k for k in sys.modules if k == 'overlapdp' or k.startswith('overlapdp.')]:\n"
        "        del sys.modules[k]\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
