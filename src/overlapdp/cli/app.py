"""The ``overlapdp`` Typer application and the helpers every command shares."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from overlapdp.cli.help_format import Typer

app = Typer(
    name="overlapdp",
    help="Differentially private queries charged by maximum overlap, composed concurrently.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    """Machine-readable output on stdout (one JSON document)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_jsonable) + "\n")


def warn(message: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {message}", highlight=False)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
