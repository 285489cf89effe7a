"""One self-contained HTML file: tables of the numbers and every PNG embedded (base64) and linked."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path

from overlapdp.display import spent

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 0.9em; }
"""


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fmt(x: object) -> str:
    """A cell: floats are privacy figures (losses, guarantees, loads, noise), shown rounded UP to six
    significant digits (``display.spent``: never less loss than there is); a room or a share to use is
    passed in already formatted (``display.remaining``, rounded down)."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return "inf" if x == float("inf") else spent(x)
    return str(x)


def image(path: Path, alt: str) -> str:
    """The PNG inline (so the file stands alone) inside a link to the file beside it."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return (
        f'<figure><a href="{name}"><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}"></a>'
        f'<figcaption class="note">{html.escape(alt)} ({name})</figcaption></figure>'
    )


def page(title: str, sections: Sequence[tuple[str, str]]) -> str:
    parts = [f"<h2>{html.escape(h)}</h2>\n{body}" for h, body in sections]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"
