"""The data flow is the package order (DESIGN.md, issue 23 item 3): every import inside the package goes
down this list, never up, so there is no cycle between packages.

Read from the source (ast), not by importing: module-level and function-level imports alike, since a
function-level import up the order is the same dependency, only later. Imports under ``if
TYPE_CHECKING:`` are left out (annotations only; nothing runs them). A new top-level module or package
must be placed in ORDER, so its place is a decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

import overlapdp

SRC = Path(overlapdp.__file__).parent

#: Bottom first. The leaves (errors, number checks, exact arithmetic, display, table kinds, the lazy
#: exports and the root package, whose exports are names imported on first use) import nothing above
#: them; then the data flow: schema, query, overlap, privacy, engine (data), mechanisms (noise), the
#: audits and reports of them, the service, the command line.
ORDER = (
    "errors",
    "validation",
    "exact",
    "display",
    "tables",
    "files",
    "_optional",
    "_lazy",
    "__init__",
    "_activeset",
    "schema",
    "samples",
    "query",
    "overlap",
    "privacy",
    "engine",
    "mechanisms",
    "audit",
    "report",
    "service",
    "cli",
    "__main__",
)


def _unit(module: str) -> str:
    """The top-level unit of ``overlapdp.a.b`` (``a``); the root package is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_up_the_order(src: Path) -> list[str]:
    """Every import of a unit above the importing module's unit (or of a unit not in ORDER)."""
    bad = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        here = (
            rel.parts[0].removesuffix(".py")
            if len(rel.parts) > 1 or rel.name != "__init__.py"
            else "__init__"
        )
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "overlapdp":  # `from overlapdp import validation` or `__version__`
                    subs = {p.stem for p in src.iterdir()}
                    targets = [f"overlapdp.{a.name}" if a.name in subs else "overlapdp" for a in node.names]
                elif node.module.startswith("overlapdp."):
                    targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "overlapdp"]
            for target in targets:
                there = _unit(target)
                if there == here:
                    continue
                if here not in ORDER or there not in ORDER or ORDER.index(there) > ORDER.index(here):
                    bad.append(f"{rel.as_posix()}:{node.lineno} ({here}) imports {target} ({there})")
    return bad


def test_every_import_goes_down_the_package_order() -> None:
    # on 7c61b1a: mechanisms/answering.py imported overlapdp.consistency, which imports the mechanisms,
    # and query/workload.py imported overlap/_compiled.py
    assert imports_up_the_order(SRC) == []


def test_an_import_up_the_order_is_found(tmp_path: Path) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "__init__.py").write_text("def f():\n    from overlapdp.engine import x\n")
    (tmp_path / "engine.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import overlapdp.cli\n"
    )
    assert imports_up_the_order(tmp_path) == [
        "schema/__init__.py:2 (schema) imports overlapdp.engine (engine)"
    ]
