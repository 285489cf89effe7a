"""Every ```python block of docs/guide.md runs, in order, in one namespace (the guide's promise)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[str]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_has_examples() -> None:
    assert len(blocks()) >= 8


def test_guide_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": "guide"}
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
