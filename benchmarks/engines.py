"""Data engines: the batch path against one SQL statement per query, and against Tumult Analytics.

Run: ``PYTHONPATH=src /work/main/.venv/bin/python benchmarks/engines.py`` (add ``--quick`` for 1 million rows instead of
10 million). Prints one table; every baseline and peer is measured in the same run.

1. 10 000 random predicate queries on Adult (48 842 rows; ``../shared/data/adult/adult.csv``, else
   ``samples.synthetic_adult``): DuckDB batch path (target < 1 s) vs the same queries as one SQL
   statement each on the same data in DuckDB (a sample, extrapolated, when the full run is too slow).
2. 1 000 queries on 10 million synthetic rows with Adult's schema, generated in DuckDB: target < 10 s.
3. Tumult Analytics (tmlt.analytics on Spark local, in its own virtualenv /work/venvs/tmlt because it
   pins its own pandas / numpy / pyspark) answering the same 100 counting queries: target >= 100x its
   throughput. Tumult adds noise, we do not: the peer is for throughput of the data path only.

The machine has 2 cores shared with other work: numbers are noisy.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pandas as pd

from overlapdp.engine import DuckDBEngine, PandasEngine, PolarsEngine
from overlapdp.engine.base import _BITMAP_MIN_QUERIES
from overlapdp.overlap.atoms import compute_atoms
from overlapdp.query import parse_where
from overlapdp.samples import adult_schema, synthetic_adult
from overlapdp.schema import Schema

REPO = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout, or beside the nearest ancestor for a git worktree (as tests/conftest).
ADULT = next(
    (p / "shared" / "data" / "adult" / "adult.csv" for p in REPO.parents if (p / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "adult" / "adult.csv",
)
TMLT_PYTHON = Path("/work/venvs/tmlt/bin/python")
PEER_SCRIPT = Path(__file__).with_name("tmlt_peer.py")


def conditions(schema: Schema, count: int, seed: int, quote: str = '"') -> list[str]:
    """Random conjunctions of 1..3 conditions (ranges, comparisons, IN, =, !=) on Adult's attributes."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for attr in rng.sample(list(schema.attributes), rng.randint(1, 3)):
            c = f"{quote}{attr.name}{quote}"
            n = attr.size
            x, y = sorted((rng.randrange(n), rng.randrange(n)))
            op = rng.choice(["between", "<", ">=", "in", "=", "!="])
            if op == "between":
                parts.append(f"{c} BETWEEN {x} AND {y}")
            elif op == "in":
                vals = sorted(rng.sample(range(n), min(n, rng.randint(1, 4))))
                parts.append(f"{c} IN ({', '.join(map(str, vals))})")
            else:
                parts.append(f"{c} {op} {x if op != '<' else y}")
        out.append(" AND ".join(parts))
    return out


def timed(fn, *args, **kw):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn(*args, **kw)
    return value, time.perf_counter() - start


def adult_frame() -> tuple[pd.DataFrame, str]:
    if ADULT.exists():
        return pd.read_csv(ADULT), str(ADULT)
    return synthetic_adult(48_842), "samples.synthetic_adult(48842) (shared Adult absent)"


def one_statement_each(
    con: duckdb.DuckDBPyConnection, table: str, texts: list[str], budget_s: float
) -> tuple[list[int], float, int]:
    """Run queries one SQL statement each until ``budget_s``; returns counts, seconds, number run."""
    counts: list[int] = []
    start = time.perf_counter()
    for t in texts:
        row = con.execute(f"SELECT count(*) FROM {table} WHERE {t}").fetchone()
        counts.append(int(row[0]) if row else 0)
        if time.perf_counter() - start > budget_s:
            break
    return counts, time.perf_counter() - start, len(counts)


def main() -> None:
    quick = "--quick" in sys.argv
    schema = adult_schema()
    rows: list[tuple[str, str, str, str]] = []  # (case, ours, baseline/peer, ratio)

    # -- 1. 10 000 queries on Adult --------------------------------------------------------------------
    frame, source = adult_frame()
    texts = conditions(schema, 10_000, seed=1)
    queries, parse_s = timed(lambda: [parse_where(schema, t) for t in texts])
    con = duckdb.connect()
    con.register("adult_frame", frame)
    con.execute("CREATE TABLE adult AS SELECT * FROM adult_frame")
    engine, load_s = timed(DuckDBEngine, schema, "adult", connection=con)
    engine.counts(queries[:50])  # warm-up
    ours, batch_s = timed(engine.counts, queries)
    base, base_s, done = one_statement_each(con, "adult", texts, budget_s=30.0)
    assert base == ours[:done], "baseline and batch counts differ"
    full_base = base_s * len(texts) / done
    note = "" if done == len(texts) else f" ({done} run, extrapolated)"
    rows.append(
        (
            f"10 000 queries, Adult {len(frame)} rows, DuckDB batch",
            f"{batch_s:.3f} s",
            f"one statement each: {full_base:.2f} s{note}",
            f"{full_base / batch_s:.0f}x",
        )
    )
    for cls in (PandasEngine, PolarsEngine):
        other, other_load = timed(cls.from_frame, schema, frame)
        got, other_s = timed(other.counts, queries)
        assert got == ours, f"{cls.name} disagrees with DuckDB"
        rows.append((f"  same on {cls.name} (load {other_load:.2f} s)", f"{other_s:.3f} s", "", ""))
    rows.append(
        (
            f"  parse 10 000 where-clauses (not engine time); DuckDB load {load_s:.2f} s",
            f"{parse_s:.2f} s",
            "",
            "",
        )
    )

    # -- 2. 1 000 queries on 10 million rows ------------------------------------------------------------
    n_rows = 1_000_000 if quick else 10_000_000
    big = duckdb.connect()
    cols = ", ".join(f'CAST(floor({a.size} * pow(random(), 1.5)) AS INTEGER) AS "{a.name}"' for a in schema)
    big.execute("SELECT setseed(0.42)")
    _, gen_s = timed(big.execute, f"CREATE TABLE synth AS SELECT {cols} FROM range({n_rows})")
    big_texts = conditions(schema, 1_000, seed=2)
    big_queries = [parse_where(schema, t) for t in big_texts]
    big_engine, big_load_s = timed(DuckDBEngine, schema, "synth", connection=big)
    big_counts, big_s = timed(big_engine.counts, big_queries)
    if big_engine._histogram_fits(compute_atoms(big_queries, schema), big_queries):
        path = "histogram"
    else:
        path = "row bitmaps" if len(big_queries) >= _BITMAP_MIN_QUERIES else "conditional sums"
    b2, b2_s, b2_done = one_statement_each(big, "synth", big_texts, budget_s=20.0)
    assert b2 == big_counts[:b2_done], "baseline and engine counts differ on the synthetic table"
    b2_full = b2_s * len(big_texts) / b2_done
    rows.append(
        (
            f"1 000 queries, {n_rows:,} synthetic rows, DuckDB ({path})",
            f"{big_s:.2f} s (+ map/load {big_load_s:.2f} s)",
            f"one statement each: {b2_full:.1f} s ({b2_done} run, extrapolated)",
            f"{b2_full / big_s:.1f}x",
        )
    )
    rows.append(("  generating the table in DuckDB (not engine time)", f"{gen_s:.2f} s", "", ""))
    big.close()

    # -- 3. Tumult Analytics on the same 100 queries -----------------------------------------------------
    hundred = conditions(schema, 100, seed=3)
    hundred_spark = conditions(schema, 100, seed=3, quote="`")
    hq = [parse_where(schema, t) for t in hundred]
    mine, mine_s = timed(engine.counts, hq)
    with_load_s = mine_s + load_s
    peer = run_tumult(frame, hundred_spark)
    if peer is None:
        rows.append(
            (
                "100 queries, Tumult Analytics peer",
                f"{mine_s:.4f} s",
                "tmlt-analytics NOT available (see /work/venvs/tmlt)",
                "n/a",
            )
        )
    else:
        per_query = sum(peer["query_s"]) / len(peer["query_s"])
        ours_per_query = mine_s / len(hq)
        rows.append(
            (
                "100 queries on Adult: overlapdp DuckDB vs Tumult (Spark local)",
                f"{mine_s:.4f} s ({with_load_s:.2f} s with load)",
                f"Tumult {sum(peer['query_s']):.1f} s = {per_query:.2f} s/query (+ Spark start {peer['startup_s']:.0f} s)",
                f"{per_query / ours_per_query:.0f}x throughput ({sum(peer['query_s']) / with_load_s:.0f}x with our load)",
            )
        )
        # Tumult's answers are noisy (pure DP, epsilon 1 each); they must be near ours.
        worst = max(abs(a - b) for a, b in zip(peer["answers"], mine, strict=True))
        rows.append(("  largest |Tumult noisy - exact| (epsilon 1 per query)", str(worst), "", ""))
    engine.close()
    con.close()

    print(f"data: {source}; cores are shared, numbers are noisy")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("case", "overlapdp", "baseline / peer (same run)", "ratio")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def run_tumult(frame: pd.DataFrame, texts: list[str]) -> dict | None:  # type: ignore[type-arg]
    if not TMLT_PYTHON.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "adult.csv"
        frame.to_csv(data, index=False)
        conds = Path(tmp) / "conditions.json"
        conds.write_text(json.dumps(texts))
        # Spark's Python workers must run the peer's interpreter too, where tmlt is installed.
        env = {**os.environ, "PYSPARK_PYTHON": str(TMLT_PYTHON)}
        proc = subprocess.run(
            [str(TMLT_PYTHON), str(PEER_SCRIPT), str(data), str(conds)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
            env=env,
        )
    if proc.returncode != 0:
        print("tmlt peer failed:", proc.stderr.strip().splitlines()[-3:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
