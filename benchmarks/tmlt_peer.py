"""Peer for benchmarks/engines.py: Tumult Analytics counting queries on Spark local.

Run by the benchmark with the interpreter of a separate virtualenv (tmlt-analytics pins its own pandas,
numpy and pyspark), as ``python tmlt_peer.py DATA.csv CONDITIONS.json``; prints one JSON line with the
Spark start-up time, the session set-up time and the time of each query (filter + count, noisy).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    data, conditions_file = sys.argv[1], sys.argv[2]
    with open(conditions_file, encoding="utf-8") as fh:
        conditions = json.load(fh)
    t0 = time.perf_counter()
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, PureDPBudget, QueryBuilder, Session

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.read.csv(data, header=True, inferSchema=True).cache()
    frame.count()
    t1 = time.perf_counter()
    session = Session.from_dataframe(
        privacy_budget=PureDPBudget(float(len(conditions)) * 10),
        source_id="adult",
        dataframe=frame,
        protected_change=AddOneRow(),
    )
    t2 = time.perf_counter()
    answers = []
    times = []
    for cond in conditions:
        start = time.perf_counter()
        query = QueryBuilder("adult").filter(cond).count() if cond else QueryBuilder("adult").count()
        result = session.evaluate(query, PureDPBudget(1.0))
        answers.append(int(result.collect()[0][0]))
        times.append(time.perf_counter() - start)
    print(json.dumps({"startup_s": t1 - t0, "session_s": t2 - t1, "query_s": times, "answers": answers}))
    spark.stop()


if __name__ == "__main__":
    main()
