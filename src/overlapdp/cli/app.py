"""The ``overlapdp`` Typer application and the helpers every command shares."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console

from overlapdp.cli.help_format import Typer
from overlapdp.privacy.neighbouring import Neighbouring

app = Typer(
    name="overlapdp",
    help="Differentially private queries charged by maximum overlap, composed concurrently.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: ``--neighbouring``, the same on every command that states a guarantee (MATH.md 2.9)
NeighbouringOption = Annotated[
    Neighbouring,
    typer.Option(
        "--neighbouring",
        help="add_remove: a row added or removed; replace: one row moves (a pair of rows pays both "
        "rows' charges, MATH.md 2.9).",
    ),
]

#: ``--encoding`` and ``--sep``, the same on every command that reads files (:mod:`overlapdp.files`):
#: the data file's encoding where there is one (a workload beside it is always detected: the two
#: may differ), else the workload's or the ledger's.
DataEncoding = Annotated[
    str | None,
    typer.Option(
        "--encoding",
        help="Text encoding of the CSV data file, e.g. utf-8, latin-1, cp1252; detected when left out "
        "(UTF-8, else Windows-1252 / Latin-1), as the workload file's always is.",
    ),
]
Encoding = Annotated[
    str | None,
    typer.Option(
        "--encoding",
        help="Text encoding of the workload or ledger file, e.g. utf-8, latin-1; detected when left out "
        "(UTF-8, else Windows-1252 / Latin-1).",
    ),
]
Separator = Annotated[
    str | None,
    typer.Option(
        "--sep",
        help="Separator of a CSV data file: ',' ';' '|' or tab; detected when left out (.tsv: tab).",
    ),
]

console = Console()
err_console = Console(stderr=True)


def package_version() -> str:
    """The installed distribution's version (importlib.metadata); ``overlapdp.__version__`` from a bare
    source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("overlapdp")
    except PackageNotFoundError:
        from overlapdp import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"overlapdp {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Differentially private queries charged by maximum overlap, composed concurrently."""


def emit_json(obj: Any) -> None:
    """Machine-readable output on stdout (one JSON document)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_jsonable) + "\n")


def warn(message: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {message}", highlight=False)


#: An operation that takes longer than this (seconds) says so on stderr even when it is not a terminal.
LONG_SECONDS = 5.0


@contextmanager
def progress(
    what: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    out: Console | None = None,
    long: float = LONG_SECONDS,
) -> Iterator[None]:
    """Say on stderr what the command is doing while data is read, encoded and counted: a spinner when
    stderr is a terminal, and a closing line with the time taken when it took ``long`` seconds or more
    (also into a pipe or a log, where a spinner would only be noise). Standard output stays clean."""
    shown = out or err_console
    start = clock()
    if shown.is_terminal:
        with shown.status(f"{what} ...", spinner="dots"):
            yield
    else:
        yield
    took = clock() - start
    if took >= long:
        shown.print(f"{what}: done in {took:.1f} s", highlight=False)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
