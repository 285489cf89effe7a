"""Entry point of the ``overlapdp`` command: registers every sub-command and turns errors into one line.

Start-up stays fast (``overlapdp --help`` in well under half a second): the command modules import
only Typer, Rich and small constants at the top, and their heavy modules (the overlap search, the
engines, the service, matplotlib) inside the command function (DESIGN.md, "heavy dependencies are
imported where used"; tests/test_startup.py checks it).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from rich.markup import escape

from overlapdp._optional import extra_for, missing_extra, require

# Each import registers its command on the app (one per line, so branches merge cleanly).
from overlapdp.cli import (
    account_cmd,  # noqa: F401
    answer_cmd,  # noqa: F401
    count_cmd,  # noqa: F401
    demo_cmd,  # noqa: F401
    overlap_cmd,  # noqa: F401
    plan_cmd,  # noqa: F401
    report_cmd,  # noqa: F401
    schema_cmd,  # noqa: F401
    serve_cmd,  # noqa: F401
)
from overlapdp.cli.app import app, err_console
from overlapdp.errors import MissingExtraError, OverlapDPError

#: The extras (pyproject.toml) a command needs, checked before it starts any work.
NEEDS: dict[str, tuple[str, ...]] = {
    "serve": ("service",),
    "demo": ("service", "plots"),
    "report": ("plots",),
}


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; bad input exits 2 with a one-line message, never a traceback."""
    args = sys.argv[1:] if argv is None else argv
    command = next((a for a in args if not a.startswith("-")), "")
    what = f"overlapdp {command}".rstrip()
    try:
        if command in NEEDS and not {"--help", "-h"} & set(args):
            require(NEEDS[command], what)
        app(args=argv, prog_name="overlapdp")
    except MissingExtraError as exc:
        # Raised deeper (a lazy package, the plots): say which command needs it.
        _fail(missing_extra(exc.extra, what, exc.module) if exc.extra and "," not in exc.extra else exc)
    except ModuleNotFoundError as exc:
        clear = extra_for(exc, what)
        if clear is not None:
            _fail(clear)
        _internal(exc)
    except OverlapDPError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        _internal(exc)


def _fail(exc: OverlapDPError) -> NoReturn:
    # escape: "pip install 'overlapdp[service]'" is not Rich markup.
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    sys.exit(2)


def _internal(exc: Exception) -> NoReturn:
    if os.environ.get("OVERLAPDP_DEBUG"):
        raise exc
    err_console.print(
        f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(exc))} (set OVERLAPDP_DEBUG=1 for details)",
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(1)


if __name__ == "__main__":
    main()
