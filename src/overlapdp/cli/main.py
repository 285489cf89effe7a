"""Entry point of the ``overlapdp`` command: registers every sub-command and turns errors into one line."""

from __future__ import annotations

import os
import sys

# Each import registers its command on the app (one per line, so branches merge cleanly).
from overlapdp.cli import (
    account_cmd,  # noqa: F401
    answer_cmd,  # noqa: F401
    count_cmd,  # noqa: F401
    demo_cmd,  # noqa: F401
    overlap_cmd,  # noqa: F401
    report_cmd,  # noqa: F401
    schema_cmd,  # noqa: F401
    serve_cmd,  # noqa: F401
)
from overlapdp.cli.app import app, err_console
from overlapdp.errors import OverlapDPError


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; bad input exits 2 with a one-line message, never a traceback."""
    try:
        app(args=argv, prog_name="overlapdp")
    except OverlapDPError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("OVERLAPDP_DEBUG"):
            raise
        err_console.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} (set OVERLAPDP_DEBUG=1 for details)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
