"""The files people have: text encodings and CSV dialects, detected or declared, one error line each.

Every file the package reads (data as CSV / TSV / Parquet, JSON Lines workloads and ledgers, the service's
SQLite and CSV ledgers) goes through these helpers, so a declared ``--encoding`` / ``--sep`` means the
same on every command and a file that cannot be read is one :class:`~overlapdp.errors.DataError` naming
it and the flag that fixes it, never a decoder's or a parser's trace.

Detection, when nothing is declared:

- encoding: a byte-order mark decides (UTF-8 with BOM, UTF-16); otherwise the whole file is checked as
  UTF-8 (in chunks, a fraction of the time of parsing it) and, when it is not, read as Windows-1252, the
  superset of Latin-1 that spreadsheets write on Windows (``é`` is byte 0xE9 in both), or Latin-1 itself
  when a byte is undefined in Windows-1252. Latin-1 decodes any byte, so a wrong guess gives odd letters,
  never a failure: declare ``--encoding`` to be sure.
- separator: ``.tsv`` / ``.tab`` files are tab-separated; otherwise the first lines are parsed with each of
  ``,``, ``;``, tab and ``|``, and the one giving the same number (at least two) of fields on every line,
  the most fields, wins (a comma when none does).

Only the standard library is imported here (pandas, DuckDB and Polars read the data, with the format
found here).
"""

from __future__ import annotations

import codecs
import csv
import io
from dataclasses import dataclass
from pathlib import Path

from overlapdp.errors import DataError, OverlapDPError

#: Separators tried, in order of preference on a tie.
SEPARATORS = (",", ";", "\t", "|")
_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_CHUNK = 1 << 20
_SNIFF_LINES = 50
PARQUET_SUFFIXES = frozenset({".parquet", ".pq"})
TAB_SUFFIXES = frozenset({".tsv", ".tab"})


@dataclass(frozen=True)
class CsvFormat:
    """How a delimited text file is written: its encoding (a Python codec name) and separator."""

    encoding: str
    sep: str

    @property
    def utf8(self) -> bool:
        """Whether engines reading UTF-8 only (DuckDB, Polars) can read the file's bytes as they are."""
        return self.encoding in ("utf-8", "utf-8-sig")


def separator_name(sep: str) -> str:
    """``';'``, ``tab``: a separator as messages show it."""
    return _NAMES.get(sep, repr(sep))


def check_encoding(encoding: str) -> str:
    """The codec's canonical name, or one error naming ``--encoding``."""
    try:
        name = codecs.lookup(encoding).name
    except (LookupError, TypeError):
        raise DataError(
            f"--encoding {encoding!r} is not a known text encoding (for example utf-8, latin-1)"
        ) from None
    return "utf-8" if name == "utf-8" else name


def check_separator(sep: str) -> str:
    """A one-character separator; ``tab``, ``\\t`` and ``\\\\t`` all mean a tab."""
    if sep in ("tab", "\\t", "TAB"):
        return "\t"
    if len(sep) != 1 or sep in ('"', "\n", "\r"):
        raise DataError(f"--sep {sep!r}: give one character, such as ',' ';' '|' or tab")
    return sep


def detect_encoding(path: Path) -> str:
    """The encoding of a text file (module docstring); reads the file, not more than once."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
            if head.startswith(codecs.BOM_UTF8):
                return "utf-8-sig"
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                return "utf-16"
            decoder = codecs.getincrementaldecoder("utf-8")()
            chunk = head
            try:
                while chunk:
                    decoder.decode(chunk)
                    chunk = f.read(_CHUNK)
                decoder.decode(b"", final=True)
                return "utf-8"
            except UnicodeDecodeError:
                pass
            f.seek(0)
            try:
                while chunk := f.read(_CHUNK):
                    chunk.decode("cp1252")
                return "cp1252"
            except UnicodeDecodeError:
                return "latin-1"
    except OSError as exc:
        raise DataError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def _first_lines(path: Path, encoding: str) -> list[str]:
    try:
        with path.open(encoding=encoding, newline="") as f:
            return [line for _, line in zip(range(_SNIFF_LINES), f, strict=False)]
    except UnicodeDecodeError:
        raise DataError(
            f"{str(path)!r} is not valid {encoding} text; give its --encoding (for example latin-1)"
        ) from None
    except OSError as exc:
        raise DataError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def sniff_separator(lines: list[str]) -> str:
    """The separator of a delimited file's first ``lines`` (module docstring); ``,`` when unsure."""
    # A last line cut short by the sample is left out of the vote (it may hold fewer fields).
    body = lines[:-1] if len(lines) == _SNIFF_LINES else lines
    body = [line for line in body if line.strip()]
    best, fields = ",", 1
    for sep in SEPARATORS:
        try:
            counts = {len(row) for row in csv.reader(io.StringIO("".join(body)), delimiter=sep)}
        except csv.Error:
            continue
        if len(counts) == 1 and (n := counts.pop()) > fields:
            best, fields = sep, n
    return best


def csv_format(path: str | Path, *, encoding: str | None = None, sep: str | None = None) -> CsvFormat:
    """The file's encoding and separator: as declared, else detected (module docstring)."""
    p = Path(path)
    enc = check_encoding(encoding) if encoding is not None else detect_encoding(p)
    if sep is not None:
        return CsvFormat(enc, check_separator(sep))
    if p.suffix.lower() in TAB_SUFFIXES:
        return CsvFormat(enc, "\t")
    return CsvFormat(enc, sniff_separator(_first_lines(p, enc)))


def is_parquet(path: str | Path) -> bool:
    """Parquet by suffix (``.parquet``, ``.pq``) or by its magic bytes ``PAR1``."""
    p = Path(path)
    if p.suffix.lower() in PARQUET_SUFFIXES:
        return True
    try:
        with p.open("rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def read_text(
    path: str | Path,
    *,
    what: str,
    encoding: str | None = None,
    error: type[OverlapDPError] = DataError,
) -> str:
    """A whole text file (a workload, a ledger), decoded as declared or detected; one ``error`` line
    naming ``what`` and the file when it cannot be read."""
    p = Path(path)
    if not p.exists():
        raise error(f"cannot read {what} {str(p)!r}: it does not exist")
    if p.is_dir():
        raise error(f"cannot read {what} {str(p)!r}: it is a directory")
    try:
        enc = check_encoding(encoding) if encoding is not None else detect_encoding(p)
        return p.read_text(encoding=enc)
    except DataError as exc:
        raise error(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {str(p)!r} is not valid {enc} text (byte {exc.start}); give its --encoding"
        ) from None
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from None
