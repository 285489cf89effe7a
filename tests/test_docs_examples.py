"""Every ```python block of docs/guide.md runs, in order, in one namespace (the guide's promise)."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[str]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_has_examples() -> None:
    assert len(blocks()) >= 8


@pytest.mark.slow
def test_guide_examples_run(capsys: pytest.CaptureFixture[str], adult_raw_csv: Path) -> None:
    """The guide's running example is UCI Adult's raw file (strings, empty cells for missing values);
    the test gives it the real file as ``ADULT_CSV`` (skipped, with the reason, where ../shared is
    absent), never a synthetic stand-in."""
    namespace: dict[str, object] = {"__name__": "guide", "ADULT_CSV": adult_raw_csv}
    for n, code in enumerate(blocks(), start=1):
        first = code.strip().splitlines()[0]
        try:
            exec(compile(code, f"{GUIDE.name} block {n} ({first})", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the message says which block failed
            raise AssertionError(
                f"docs/guide.md python block {n} failed: {type(exc).__name__}: {exc}"
            ) from exc
    out = capsys.readouterr().out
    assert "U = 60%" in out


def test_the_guide_lists_every_command() -> None:
    from overlapdp.cli import main  # noqa: F401  (registers the commands)
    from overlapdp.cli.app import app

    text = GUIDE.read_text(encoding="utf-8")
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    names += [g.name or "" for g in app.registered_groups]
    assert names
    for name in names:
        assert f"overlapdp {name}" in text, name


def test_the_guide_curl_conditions_are_valid_on_raw_adult() -> None:
    """Every condition a curl line of section 4 sends (``where``, ``conditions``, GROUP BY, a batch's
    queries) is valid on the raw Adult schema the examples register: labels and years, not codes."""
    from overlapdp.query import Workload
    from overlapdp.samples import adult_raw_schema

    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## 4. The HTTP API") : text.index("## 5.")]
    lines: list[dict[str, object]] = []
    for block in re.findall(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL):
        words = shlex.split(block.replace("\\\n", " "))  # the arguments the shell passes to curl
        for flag, value in itertools.pairwise(words):
            if flag != "-d":
                continue
            body = json.loads(value)
            items = [body, *body.get("queries", [])]
            for item in items:
                query = {"where": item} if isinstance(item, str) else item
                keys = ("where", "conditions", "group_by", "sql")
                line = {k: query[k] for k in keys if k in query}
                if line:
                    lines.append(line)
    assert len(lines) >= 8
    Workload.from_lines(adult_raw_schema(), [json.dumps(line) for line in lines])
    assert any("'Male'" in str(line.get("where", "")) for line in lines)
