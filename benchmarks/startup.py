"""Start-up time of the command line and of the library's imports (issue 14 item 11).

Run: ``.venv/bin/python benchmarks/startup.py`` (``--runs N``, default 7;
``--baseline REV`` also times the same rows on the sources of git revision REV, interleaved, and
prints the ratio; ``--only TEXT`` selects rows by name).

Each row starts a fresh interpreter (``sys.executable``) on this checkout's ``src/`` and reports the
median wall time and the median CPU time (user + system, of the child) over the runs; the first run of
each row is a warm-up that is not counted (it writes the byte-code caches, as an install does, even
when PYTHONDONTWRITEBYTECODE is set). The interpreter alone
(``python -c pass``) is shown for reference. Targets: ``overlapdp --help`` and each ``overlapdp CMD
--help`` under 0.5 s of wall time on an idle machine. The machine is shared: rerun the decisive rows.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CLI = "import sys; from overlapdp.cli.main import main; sys.argv[0] = 'overlapdp'; main()"
ROWS: list[tuple[str, list[str], float | None]] = [
    ("python -c pass (interpreter alone)", ["-c", "pass"], None),
    ("overlapdp --help", ["-c", CLI, "--help"], 0.5),
    ("overlapdp --version", ["-c", CLI, "--version"], 0.5),
    ("overlapdp answer --help", ["-c", CLI, "answer", "--help"], 0.5),
    ("overlapdp serve --help", ["-c", CLI, "serve", "--help"], 0.5),
    ("overlapdp report --help", ["-c", CLI, "report", "--help"], 0.5),
    ("import overlapdp", ["-c", "import overlapdp"], None),
    ("import overlapdp.mechanisms", ["-c", "import overlapdp.mechanisms"], None),
    (
        "from overlapdp.mechanisms import SparseVector, NoisyCounts",
        ["-c", "from overlapdp.mechanisms import SparseVector, NoisyCounts"],
        None,
    ),
    ("from overlapdp.privacy import PLD", ["-c", "from overlapdp.privacy import PLD"], None),
]


def timed(src: Path, args: list[str]) -> tuple[float, float] | None:
    """(wall seconds, child CPU seconds) of one run of the interpreter on ``src``; None if it fails
    (``--version`` on a baseline that predates it)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    # An installed package has its byte code cached; without this every run would compile the sources.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        return None
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def checkout(rev: str, into: Path) -> Path:
    """The ``src/`` tree of git revision ``rev``, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", help="git revision whose sources are timed as the baseline")
    parser.add_argument("--only", help="rows whose name contains this text")
    opts = parser.parse_args()
    rows = [r for r in ROWS if not opts.only or opts.only in r[0]]
    tmp = Path(tempfile.mkdtemp(prefix="overlapdp-startup-"))
    try:
        sides = {"this checkout": REPO / "src"}
        if opts.baseline:
            sides[opts.baseline] = checkout(opts.baseline, tmp)
        head = f"{'row':58} " + " ".join(f"{s[:18]:>18} wall / cpu" for s in sides)
        print(head + ("   ratio" if opts.baseline else "") + "   target")
        for name, args, target in rows:
            runs = {s: src for s, src in sides.items() if timed(src, args) is not None}  # warm-up
            samples: dict[str, list[tuple[float, float]]] = {s: [] for s in runs}
            for _ in range(opts.runs):  # interleaved, so load on the machine hits both sides alike
                for side, src in runs.items():
                    t = timed(src, args)
                    if t is not None:
                        samples[side].append(t)
            med = {
                s: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                for s, v in samples.items()
                if v
            }
            cells = " ".join(
                f"{med[s][0]:>11.3f} s / {med[s][1]:5.3f} s" if s in med else f"{'(fails)':>25}"
                for s in sides
            )
            ratio = ""
            if opts.baseline and opts.baseline in med and "this checkout" in med:
                ratio = f"   {med[opts.baseline][0] / med['this checkout'][0]:5.1f}x"
            elif opts.baseline:
                ratio = "       -"
            mark = ""
            if target is not None:
                ok = "this checkout" in med and med["this checkout"][0] < target
                mark = f"   < {target} s: {'yes' if ok else 'NO'}"
            print(f"{name[:58]:58} {cells}{ratio}{mark}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
