"""Peer for benchmarks/engines.py: Tumult Analytics answering a workload of DP counts on Spark local.

Run by the benchmark with the interpreter of a separate virtualenv (tmlt-analytics pins its own pandas,
numpy and pyspark; see benchmarks/README.md for the one-line install), as
``python tmlt_peer.py DATA.csv WORKLOAD.json``. The workload file holds the conditions as Spark SQL
text and as specs ``[[column, op, args], ...]`` (conjunctions), the per-query epsilon, and a time budget
for the one-query-per-count mode. Prints one JSON line:

- ``import_s``, ``spark_s``, ``load_s``, ``warmup_s``: start-up, reported apart from the workload
  (importing pyspark and tmlt, starting the JVM and the Spark session, reading and caching the data,
  one warm-up query in a throw-away session so the first timed query does not pay Spark's first job);
- ``modes``: for each of Tumult's ways of answering the same workload under the same guarantee
  (pure DP, add/remove one row, total epsilon ``n * eps``, each count with discrete Laplace noise of
  scale ``1/eps``), the session set-up time, the answering time and the noisy answers:

  * ``per_query``: one ``filter(condition).count()`` evaluated per query at ``PureDPBudget(eps)``;
    when its time budget runs out, the remaining queries are not run (``done`` says how many were);
  * ``flat_map``: ONE query: each row is flat-mapped to the ids of the queries it satisfies
    (``max_rows = n``, so one person changes at most ``n`` group counts by one each: L1 sensitivity
    ``n``), then a group-by count over the key set ``0..n-1`` at ``PureDPBudget(n * eps)``: noise scale
    ``n / (n eps) = 1/eps`` on every count, the same answers' distribution and the same total guarantee
    as ``n`` separate queries.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def predicate(spec: list[list[Any]]) -> Callable[[dict[str, Any]], bool]:
    """The conjunction ``spec`` as a Python function of a row (mirrors engines.render)."""
    tests: list[Callable[[Any], bool]] = []
    cols: list[str] = []
    for col, op, args in spec:
        cols.append(col)
        if op == "between":
            lo, hi = args
            tests.append(lambda v, lo=lo, hi=hi: lo <= v <= hi)
        elif op == "in":
            vals = frozenset(args)
            tests.append(lambda v, vals=vals: v in vals)
        elif op == "<":
            tests.append(lambda v, x=args: v < x)
        elif op == ">=":
            tests.append(lambda v, x=args: v >= x)
        elif op == "=":
            tests.append(lambda v, x=args: v == x)
        elif op == "!=":
            tests.append(lambda v, x=args: v != x)
        else:
            raise ValueError(f"unknown op {op!r}")
    pairs = list(zip(cols, tests, strict=True))
    return lambda row: all(v is not None and t(v) for c, t in pairs for v in (row[c],))


def main() -> None:
    data, workload_file = sys.argv[1], sys.argv[2]
    with open(workload_file, encoding="utf-8") as fh:
        workload = json.load(fh)
    texts: list[str] = workload["conditions"]
    specs: list[list[list[Any]]] = workload["specs"]
    eps = float(workload["epsilon"])
    per_query_budget_s = float(workload["per_query_budget_s"])
    n = len(texts)

    t0 = time.perf_counter()
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

    t1 = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    t2 = time.perf_counter()
    frame = spark.read.csv(data, header=True, inferSchema=True).cache()
    frame.count()
    t3 = time.perf_counter()

    def session(total: float) -> Any:
        return Session.from_dataframe(
            privacy_budget=PureDPBudget(total),
            source_id="adult",
            dataframe=frame,
            protected_change=AddOneRow(),
        )

    warm = session(2 * eps)
    warm.evaluate(QueryBuilder("adult").filter(texts[0]).count(), PureDPBudget(eps)).collect()
    t4 = time.perf_counter()
    out: dict[str, Any] = {"import_s": t1 - t0, "spark_s": t2 - t1, "load_s": t3 - t2, "warmup_s": t4 - t3}
    modes: dict[str, Any] = {}

    # One query per count, as an analyst asks them interactively.
    start = time.perf_counter()
    sess = session(n * eps)
    setup = time.perf_counter() - start
    answers: list[int] = []
    start = time.perf_counter()
    for cond in texts:
        result = sess.evaluate(QueryBuilder("adult").filter(cond).count(), PureDPBudget(eps))
        answers.append(int(result.collect()[0][0]))
        if time.perf_counter() - start > per_query_budget_s:
            break
    modes["per_query"] = {
        "session_s": setup,
        "answer_s": time.perf_counter() - start,
        "done": len(answers),
        "answers": answers,
    }

    # The whole workload as one flat-map + group-by count.
    preds = [predicate(s) for s in specs]

    def ids(row: Any) -> list[dict[str, int]]:
        r = row.asDict() if hasattr(row, "asDict") else row
        return [{"qid": i} for i, p in enumerate(preds) if p(r)]

    start = time.perf_counter()
    sess = session(n * eps)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    query = (
        QueryBuilder("adult")
        .flat_map(ids, new_column_types={"qid": "INTEGER"}, max_rows=n)
        .groupby(KeySet.from_dict({"qid": list(range(n))}))
        .count()
    )
    rows = sess.evaluate(query, PureDPBudget(n * eps)).collect()
    by_id = {int(r["qid"]): int(r["count"]) for r in rows}
    modes["flat_map"] = {
        "session_s": setup,
        "answer_s": time.perf_counter() - start,
        "done": n,
        "answers": [by_id[i] for i in range(n)],
    }
    out["modes"] = modes
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main()
