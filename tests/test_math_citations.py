"""Every "MATH.md N.M" citation names a point that exists in docs/MATH.md.

docs/MATH.md numbers its sections ``## N.`` and, inside each, its points ``- **N.M Title**``. Code,
tests, benchmarks and docs cite them as ``MATH.md N.M`` (a whole section as ``MATH.md N``; several as
``MATH.md N.M, N.K`` or a range ``MATH.md N-M``). The truth here is MATH.md's own headings, parsed
independently of the citing text; the scan must find at least ``_MIN_CITATIONS`` citations so that a
regex that stopped matching cannot pass vacuously.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATH = ROOT / "docs" / "MATH.md"
_MIN_CITATIONS = 100

_ID = r"\d+(?:\.\d+)?"
# "MATH.md 2.7", "MATH.md 1, 2, 7", "MATH.md 2.4, 5.9", "MATH.md 1-2", split over a docstring line or a
# comment line ("MATH.md\n    # 2.4").
CITATION = re.compile(r"MATH\.md(?:\s|#)+(?P<ids>" + _ID + r"(?:(?:\s*,\s*|\s+and\s+|\s*-\s*)" + _ID + r")*)")
_SECTION = re.compile(r"^## (\d+)\. ", re.M)
_POINT = re.compile(r"^- \*\*(\d+)\.(\d+) [^*]+\*\*", re.M)
# Cross-references inside MATH.md itself: "(section 5.9)", "as in section 2.7".
_INTERNAL = re.compile(r"\bsection (" + _ID + r")")


def math_ids(text: str) -> set[str]:
    """The section ids ("5") and point ids ("5.9") of MATH.md, checked to be numbered in order."""
    sections = [int(s) for s in _SECTION.findall(text)]
    assert sections == list(range(1, len(sections) + 1)), sections
    ids = {str(s) for s in sections}
    last: dict[int, int] = {}
    for sec, pt in ((int(a), int(b)) for a, b in _POINT.findall(text)):
        assert sec in sections, f"point {sec}.{pt} outside any section"
        assert pt == last.get(sec, 0) + 1, f"point {sec}.{pt} out of order"
        last[sec] = pt
        ids.add(f"{sec}.{pt}")
    assert set(last) == set(sections), "every section has numbered points"
    return ids


def cited_ids(group: str) -> list[str]:
    """The ids of one citation's number group; a range "N-M" (or "N.A-N.B") stands for every id in it."""
    out: list[str] = []
    for part in re.split(r"\s*,\s*|\s+and\s+", group):
        if "-" not in part:
            out.append(part.strip())
            continue
        lo, hi = (x.strip() for x in part.split("-"))
        if "." in lo and "." in hi and lo.split(".")[0] == hi.split(".")[0]:
            sec = lo.split(".")[0]
            out += [f"{sec}.{k}" for k in range(int(lo.split(".")[1]), int(hi.split(".")[1]) + 1)]
        elif "." not in lo and "." not in hi:
            out += [str(k) for k in range(int(lo), int(hi) + 1)]
        else:
            out.append(part)  # a mixed range ("2-3.1") is not a form we cite: reported as missing
    return out


def citing_files() -> list[Path]:
    files = [p for d in ("src", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    files += sorted((ROOT / "benchmarks").rglob("*.md")) + sorted((ROOT / "docs").glob("*.md"))
    files.append(ROOT / "README.md")
    return [p for p in files if p.is_file()]


def citations() -> list[tuple[str, int, str]]:
    """(file, line, id) for every id cited anywhere."""
    found = []
    for path in citing_files():
        text = path.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found += [(str(path.relative_to(ROOT)), line, i) for i in cited_ids(m.group("ids"))]
    return found


def test_the_regex_reads_every_citation_form() -> None:
    # Built by concatenation so that this file's own text holds no bogus citation.
    md = "MATH.md"
    cases = {
        f"({md} 7)": ["7"],
        f"({md} 5.9)": ["5.9"],
        f"{md} 2.4, 5.9, tCDP": ["2.4", "5.9"],
        f"({md} 1, 2, 7)": ["1", "2", "7"],
        f"({md} 2 and 5)": ["2", "5"],
        f"({md} 1-3)": ["1", "2", "3"],
        f"({md} 5.4-5.6)": ["5.4", "5.5", "5.6"],
        f"load, {md}\n    2.4)": ["2.4"],
        f"# the witness ({md}\n    # 7.8)": ["7.8"],
    }
    for text, want in cases.items():
        got = [i for m in CITATION.finditer(text) for i in cited_ids(m.group("ids"))]
        assert got == want, (text, got)


def test_every_cited_section_and_point_exists() -> None:
    ids = math_ids(MATH.read_text(encoding="utf-8"))
    found = citations()
    assert len(found) >= _MIN_CITATIONS, f"only {len(found)} citations found: is the regex still right?"
    missing = [f"{f}:{line}: MATH.md {i}" for f, line, i in found if i not in ids]
    assert not missing, "citations of points MATH.md does not have:\n" + "\n".join(missing)


def test_math_md_cross_references_exist() -> None:
    text = MATH.read_text(encoding="utf-8")
    ids = math_ids(text)
    refs = _INTERNAL.findall(text)
    assert refs, "MATH.md refers to its own sections"
    assert not [r for r in refs if r not in ids], [r for r in refs if r not in ids]


def test_citations_use_the_one_form() -> None:
    """``MATH.md N.M`` only: the older wordings ("section 2", "sections 2 and 5") are gone."""
    old = re.compile(r"MATH\.md(?:\s|#)+sections?\b")
    hits = [
        f"{p.relative_to(ROOT)}:{p.read_text(encoding='utf-8').count(chr(10), 0, m.start()) + 1}"
        for p in citing_files()
        for m in old.finditer(p.read_text(encoding="utf-8"))
    ]
    assert not hits, hits


def test_no_issue_numbers_in_the_source() -> None:
    """Issue and item numbers are not a stable reference: the code cites MATH.md or says what it does."""
    issue = re.compile(r"\bissues?\s+(?:\d+\s*,?\s*)?items?\b|\bissues?\s+\d+", re.I)
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in sorted((ROOT / "src").rglob("*.py"))
        for m in issue.finditer(p.read_text(encoding="utf-8"))
    ]
    assert not hits, hits
