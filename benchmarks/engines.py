"""Data engines: the batch path against one SQL statement per query, and against Tumult Analytics.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/engines.py`` (add ``--quick`` for 1 million rows instead of
10 million). Prints one table; every baseline and peer is measured in the same run.

1. 10 000 random predicate queries on Adult (48 842 rows; ``../shared/data/adult/adult.csv``, else
   ``samples.synthetic_adult``): DuckDB batch path (target < 1 s) vs the same queries as one SQL
   statement each on the same data in DuckDB (a sample, extrapolated, when the full run is too slow).
2. 1 000 queries on 10 million synthetic rows with Adult's schema, generated in DuckDB: target < 10 s.
3. Tumult Analytics (tmlt.analytics on Spark local, in its own virtualenv ``venvs/tmlt`` beside the checkout because it
   pins its own pandas / numpy / pyspark; ``$TMLT_PYTHON`` overrides) against overlapdp on the same 100
   DP counts with accounting on both sides: the same noise (discrete Laplace, epsilon 1 per count) and
   the same total guarantee (100-DP, add/remove one row), Tumult in the faster of its two modes, start-up
   (JVM, Spark, data load, first job) printed apart and not in the ratio. Without the peer the row says
   "peer not installed".

4. Raw Adult (UCI's text labels, 32 561 rows; ``../shared/data/adult-raw/adult.csv``, else the labelled
   synthetic sample) at 1x and 10x, as a pandas DataFrame (Polars: the same rows converted before the
   clock starts): opening each engine on the frame (encoding its text columns) and two queries, the
   path a Python user takes. Target: every engine within 2x of Polars.

Run one group alone with ``--only adult|big|tumult|raw``; each group seeds its own workload.
The machine has 2 cores shared with other work: numbers are noisy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb
import pandas as pd

from overlapdp.engine import DuckDBEngine, PandasEngine, PolarsEngine
from overlapdp.engine.base import _BITMAP_MIN_QUERIES
from overlapdp.engine.inputs import open_data
from overlapdp.mechanisms.answering import answer_workload, plan_answers
from overlapdp.mechanisms.noisy_session import NoisyCounts
from overlapdp.overlap.atoms import compute_atoms
from overlapdp.privacy.definitions import PureDP
from overlapdp.query import parse_where
from overlapdp.samples import adult_raw_schema, adult_schema, synthetic_adult, synthetic_adult_labelled
from overlapdp.schema import Schema

REPO = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout, or beside the nearest ancestor for a git worktree (as tests/conftest).
ADULT = next(
    (p / "shared" / "data" / "adult" / "adult.csv" for p in REPO.parents if (p / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "adult" / "adult.csv",
)
# venvs/tmlt beside the checkout (or beside the nearest ancestor, for a worktree), as for the data.
TMLT_PYTHON = next(
    (p / "venvs" / "tmlt" / "bin" / "python" for p in REPO.parents if (p / "venvs" / "tmlt").is_dir()),
    REPO.parent / "venvs" / "tmlt" / "bin" / "python",
)
PEER_SCRIPT = Path(__file__).with_name("tmlt_peer.py")


Spec = list[tuple[str, str, object]]  # a conjunction of (column, op, args)


def condition_specs(schema: Schema, count: int, seed: int) -> list[Spec]:
    """Random conjunctions of 1..3 conditions (ranges, comparisons, IN, =, !=) on Adult's attributes, from
    a generator seeded by ``seed`` alone (each row draws its own workload)."""
    rng = random.Random(seed)
    out: list[Spec] = []
    for _ in range(count):
        parts: Spec = []
        for attr in rng.sample(list(schema.attributes), rng.randint(1, 3)):
            n = attr.size
            x, y = sorted((rng.randrange(n), rng.randrange(n)))
            op = rng.choice(["between", "<", ">=", "in", "=", "!="])
            if op == "between":
                parts.append((attr.name, op, [x, y]))
            elif op == "in":
                parts.append((attr.name, op, sorted(rng.sample(range(n), min(n, rng.randint(1, 4))))))
            elif op == "<":
                # "< 0" covers no value, which the parser refuses (as it should): "< 1" instead.
                parts.append((attr.name, op, max(y, 1)))
            else:
                parts.append((attr.name, op, x))
        out.append(parts)
    return out


def render(spec: Spec, quote: str = '"') -> str:
    """One conjunction as a SQL where-clause (``quote`` around column names: ``"`` or Spark's backtick)."""
    parts = []
    for name, op, args in spec:
        c = f"{quote}{name}{quote}"
        if op == "between":
            lo, hi = args  # type: ignore[misc]
            parts.append(f"{c} BETWEEN {lo} AND {hi}")
        elif op == "in":
            parts.append(f"{c} IN ({', '.join(map(str, args))})")  # type: ignore[call-overload]
        else:
            parts.append(f"{c} {op} {args}")
    return " AND ".join(parts)


def conditions(schema: Schema, count: int, seed: int, quote: str = '"') -> list[str]:
    """``condition_specs`` rendered as SQL text."""
    return [render(s, quote) for s in condition_specs(schema, count, seed)]


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


Row = tuple[str, str, str, str]  # (case, ours, baseline/peer, ratio)


def adult_rows(schema: Schema, frame: pd.DataFrame) -> list[Row]:
    """1. 10 000 queries on Adult: the batch path against one SQL statement per query (seed 1)."""
    rows: list[Row] = []
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

    engine.close()
    con.close()
    return rows


RAW_QUERIES = ("age BETWEEN 30 AND 39 AND sex = 'Female'", "race IN ('White', 'Other') AND income = '>50K'")


def raw_rows() -> list[Row]:
    """4. Raw Adult at 1x and 10x: open each engine on the DataFrame and answer two queries."""
    import polars as pl

    schema = adult_raw_schema()
    raw_path = ADULT.parents[1] / "adult-raw" / "adult.csv"
    raw = (
        pd.read_csv(raw_path, skipinitialspace=True)
        if raw_path.exists()
        else synthetic_adult_labelled(32_561)
    )
    queries = [parse_where(schema, t) for t in RAW_QUERIES]
    rows: list[Row] = []
    for scale in (1, 10):
        frame = pd.concat([raw] * scale, ignore_index=True)
        inputs = {"polars": pl.from_pandas(frame), "pandas": frame, "duckdb": frame}
        best: dict[str, float] = {}
        answers: dict[str, list[int]] = {}
        for _ in range(3):  # interleaved repeats, best of three
            for name, data in inputs.items():
                t = time.perf_counter()
                with open_data(data, schema, engine=name) as eng:
                    answers[name] = eng.counts(queries)
                best[name] = min(best.get(name, math.inf), time.perf_counter() - t)
        assert len({tuple(a) for a in answers.values()}) == 1, f"engines disagree: {answers}"
        for name in ("pandas", "duckdb"):
            rows.append(
                (
                    f"raw Adult {scale}x ({len(frame):,} rows): open + 2 queries, {name}",
                    f"{best[name]:.3f} s",
                    f"Polars {best['polars']:.3f} s",
                    f"{best[name] / best['polars']:.1f}x",
                )
            )
    return rows


def big_rows(schema: Schema, quick: bool) -> list[Row]:
    """2. 1 000 queries on 10 million synthetic rows (seed 2; DuckDB's generator seeded 0.42)."""
    rows: list[Row] = []
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

    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 million synthetic rows, shorter peer budgets")
    parser.add_argument("--only", choices=("adult", "big", "tumult", "raw"), help="run one row group alone")
    args = parser.parse_args()
    quick, only = args.quick, args.only
    schema = adult_schema()
    frame, source = adult_frame()
    rows: list[Row] = []
    # Each row group draws its own seeded workload, so a group run alone does the same work.
    if only in (None, "adult"):
        rows.extend(adult_rows(schema, frame))
    if only in (None, "big"):
        rows.extend(big_rows(schema, quick))
    if only in (None, "tumult"):
        rows.extend(tumult_rows(schema, frame, quick))
    if only in (None, "raw"):
        rows.extend(raw_rows())
    print(f"data: {source}; cores are shared, numbers are noisy")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("case", "overlapdp", "baseline / peer (same run)", "ratio")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


TUMULT_EPSILON = 1.0
TUMULT_QUERIES = 100


def laplace_mean_abs(scale: float) -> float:
    """``E|Y|`` of the discrete Laplace of scale ``t``: ``2q/(1-q^2)`` with ``q = e^{-1/t}``."""
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q * q)


def tumult_rows(schema: Schema, frame: pd.DataFrame, quick: bool) -> list[Row]:
    """3. The same 100 DP counts with accounting on both sides (seed 3), start-up reported apart.

    Same work and guarantee: pure DP under add/remove one row, every count with discrete Laplace noise
    of scale 1/epsilon (epsilon 1), the workload charged by the library's accountant to a total of
    100 epsilon (sequential composition on both sides, as Tumult accounts). overlapdp: ``plan_answers``
    (maximum overlap, budget share) + ``answer_workload`` (DuckDB batch counts, OS-CSPRNG noise), and the
    interactive ``NoisyCounts`` session one query at a time. Tumult: its fastest mode of the two it has
    for this (one ``filter().count()`` per query, or one flat-map + group-by count); the ratio is against
    the faster. Start-up (imports, JVM and Spark session, data load, first job; DuckDB load) is printed
    apart and is not in the ratio.
    """
    specs = condition_specs(schema, TUMULT_QUERIES, seed=3)
    texts = [render(s) for s in specs]
    queries = [parse_where(schema, t) for t in texts]
    n = len(queries)
    total = n * TUMULT_EPSILON
    con = duckdb.connect()
    t0 = time.perf_counter()
    con.register("adult_frame", frame)
    con.execute("CREATE TABLE adult AS SELECT * FROM adult_frame")
    engine = DuckDBEngine(schema, "adult", connection=con)
    exact = engine.counts(queries)  # also the warm-up
    ours_startup = time.perf_counter() - t0
    assert exact == exact_by_pandas(frame, specs), "DuckDB counts differ from pandas"

    def batch(accounting: str) -> list[int]:
        plan = plan_answers(queries, total, "pure", accounting)
        return [a.value for a in answer_workload(engine, queries, plan).answers]

    def interactive(overlap_aware: bool) -> list[int]:
        session = NoisyCounts(
            lambda q: engine.counts([q])[0],
            budget=PureDP(total),
            per_query=PureDP(TUMULT_EPSILON),
            schema=schema,
            overlap_aware=overlap_aware,
        )
        return [session.query(q).value for q in queries]

    plan = plan_answers(queries, total, "pure", "sequential")
    assert plan.per_query <= TUMULT_EPSILON and TUMULT_EPSILON - plan.per_query < 1e-9, plan.per_query
    ovl_plan = plan_answers(queries, total, "pure", "overlap")
    reps = 5
    seq_s = statistics.median(timed(batch, "sequential")[1] for _ in range(reps))
    ovl_s = statistics.median(timed(batch, "overlap")[1] for _ in range(reps))
    noisy_seq = batch("sequential")
    inter_s = statistics.median(timed(interactive, False)[1] for _ in range(reps))
    noisy_inter = interactive(False)
    # The overlap-aware filter re-solves the maximum overlap at every admission: slower, run it 3 times.
    inter_ovl_s = statistics.median(timed(interactive, True)[1] for _ in range(3))
    engine.close()
    con.close()
    expected = laplace_mean_abs(1 / TUMULT_EPSILON)

    def mae(answers: list[int]) -> str:
        return f"{statistics.fmean(abs(a - b) for a, b in zip(answers, exact, strict=False)):.2f}"

    batch_row: Row = (
        f"{n} DP counts, batch (eps {TUMULT_EPSILON:g} each, total {total:g}): overlapdp plan_answers + "
        "answer_workload, sequential",
        f"{seq_s * 1e3:.0f} ms (median of {reps})",
        "",
        "",
    )
    ovl_row: Row = (
        f"  overlapdp, same total {total:g}, overlap-aware (gamma {ovl_plan.gamma}: eps {ovl_plan.per_query:.3g} "
        "each, less noise)",
        f"{ovl_s * 1e3:.0f} ms",
        "",
        "",
    )
    inter_row: Row = (
        f"{n} DP counts, interactive one at a time: overlapdp NoisyCounts, sequential filter",
        f"{inter_s * 1e3:.0f} ms (median of {reps})",
        "",
        "",
    )
    inter_ovl_row: Row = (
        "  overlapdp NoisyCounts, overlap-aware filter (its default; same noise, charges less)",
        f"{inter_ovl_s * 1e3:.0f} ms (median of 3)",
        "",
        "",
    )
    startup = f"  start-up (not in any ratio): overlapdp DuckDB load + first batch {ours_startup:.2f} s"
    peer = run_tumult(frame, specs, 30.0 if quick else 120.0)
    if isinstance(peer, str):
        rows = [batch_row, ovl_row, inter_row, inter_ovl_row]
        rows.append(("  Tumult Analytics peer", "", peer, "n/a"))
        rows.append((startup, "", "", ""))
        return rows
    modes = peer["modes"]
    per = modes["per_query"]
    fm = modes["flat_map"]
    per_full = per["answer_s"] * n / per["done"]
    per_note = "" if per["done"] == n else f" ({per['done']} run, extrapolated)"
    per_total = per_full + per["session_s"]
    fm_s = fm["answer_s"] + fm["session_s"]
    best_name, best_s = (
        ("flat-map + group-by", fm_s) if fm_s <= per_total else ("one query per count", per_total)
    )
    batch_row = (
        *batch_row[:2],
        f"Tumult at its best ({best_name}): {best_s:.1f} s",
        f"{best_s / seq_s:.0f}x",
    )
    ovl_row = (*ovl_row[:2], "", f"({best_s / ovl_s:.0f}x)")
    inter_row = (
        *inter_row[:2],
        f"Tumult one query per count: {per_total:.1f} s",
        f"{per_total / inter_s:.0f}x",
    )
    inter_ovl_row = (*inter_ovl_row[:2], "", f"({per_total / inter_ovl_s:.0f}x)")
    return [
        batch_row,
        ovl_row,
        (
            "  Tumult one query per count: session + queries",
            "",
            f"{per['session_s']:.1f} s + {per_full:.1f} s{per_note}",
            "",
        ),
        (
            f"  Tumult flat-map to query ids + group-by count (one query, L1 sensitivity {n}, eps {total:g})",
            "",
            f"{fm['session_s']:.1f} s + {fm['answer_s']:.1f} s",
            "",
        ),
        inter_row,
        inter_ovl_row,
        (
            f"  mean |noisy - exact| (discrete Laplace scale 1 expects {expected:.2f})",
            f"batch {mae(noisy_seq)}, interactive {mae(noisy_inter)}",
            f"per query {mae(per['answers'])}, flat-map {mae(fm['answers'])}",
            "",
        ),
        (
            startup,
            "",
            f"Tumult: imports {peer['import_s']:.1f} s, JVM + Spark {peer['spark_s']:.1f} s, "
            f"load {peer['load_s']:.1f} s, first job {peer['warmup_s']:.1f} s",
            "",
        ),
    ]


def exact_by_pandas(frame: pd.DataFrame, specs: list[Spec]) -> list[int]:
    """Exact counts computed another way (pandas masks), to check the engine's."""
    out = []
    for spec in specs:
        mask = pd.Series(True, index=frame.index)
        for name, op, args in spec:
            col = frame[name]
            if op == "between":
                lo, hi = args  # type: ignore[misc]
                mask &= col.between(lo, hi)
            elif op == "in":
                mask &= col.isin(args)  # type: ignore[arg-type]
            elif op == "<":
                mask &= col < args
            elif op == ">=":
                mask &= col >= args
            elif op == "=":
                mask &= col == args
            else:
                mask &= col != args
        out.append(int(mask.sum()))
    return out


def tumult_python() -> Path | None:
    """The peer's interpreter: ``$TMLT_PYTHON``, else venvs/tmlt beside the checkout (benchmarks/README.md)."""
    path = Path(os.environ.get("TMLT_PYTHON", str(TMLT_PYTHON)))
    return path if path.exists() else None


def run_tumult(frame: pd.DataFrame, specs: list[Spec], per_query_budget_s: float) -> dict | str:  # type: ignore[type-arg]
    """The peer's JSON result, or why it did not run."""
    python = tumult_python()
    if python is None:
        where = os.environ.get("TMLT_PYTHON", str(TMLT_PYTHON))
        return f"peer not installed (no {where}; benchmarks/README.md says how to install it)"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "adult.csv"
        frame.to_csv(data, index=False)
        workload = Path(tmp) / "workload.json"
        workload.write_text(
            json.dumps(
                {
                    "conditions": [render(s, "`") for s in specs],
                    "specs": specs,
                    "epsilon": TUMULT_EPSILON,
                    "per_query_budget_s": per_query_budget_s,
                }
            )
        )
        # Spark's Python workers must run the peer's interpreter too, where tmlt is installed.
        env = {**os.environ, "PYSPARK_PYTHON": str(python)}
        proc = subprocess.run(
            [str(python), str(PEER_SCRIPT), str(data), str(workload)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
            env=env,
        )
    if proc.returncode != 0:
        tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
        return f"peer failed: {tail[:300]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
