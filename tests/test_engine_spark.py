"""The Spark engine in local mode: one small session for the module, checked against pandas masks.

Spark needs Java; the module is skipped with a reason when PySpark or Java is absent.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from overlapdp.errors import DataError
from overlapdp.query import parse_where
from overlapdp.samples import adult_raw_schema, adult_schema
from overlapdp.schema import CategoricalAttribute, IntAttribute, Schema
from support.engines import RAW_QUERIES, REPORT_FRAME, REPORT_SCHEMA, SECRET, parsed, random_workload, truth

pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java on the PATH", allow_module_level=True)

from overlapdp.engine.spark_engine import SparkEngine, spark_session

# Starting Spark (a JVM) alone takes several seconds and the Adult workload about 20 more: the whole
# module runs with the slow tests.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", app_name="overlapdp-tests")
    yield session
    session.stop()


def test_adult_coded_and_raw(
    spark: Any, adult_csv: Path, adult_frame: pd.DataFrame, adult_raw_csv: Path, adult_raw_frame: pd.DataFrame
) -> None:
    schema = adult_schema()
    work = random_workload(schema, 120, seed=21)
    expected = truth(schema, adult_frame, work)
    with SparkEngine.from_path(schema, adult_csv, spark=spark) as eng:
        assert eng.rows == len(adult_frame)
        assert eng.counts(parsed(schema, work)) == expected
        assert eng.counts(parsed(schema, work), method="conditional") == expected
    raw = adult_raw_schema()
    work = random_workload(raw, 120, seed=22)
    expected = truth(raw, adult_raw_frame, work)
    with SparkEngine.from_path(raw, adult_raw_csv, spark=spark) as eng:
        assert eng.report.missing["workclass"] == int(adult_raw_frame["workclass"].isna().sum())
        assert eng.report.rows_outside == 0  # missing values are allowed where the file has them
        assert eng.counts(parsed(raw, work)) == expected
        # The same raw-Adult queries as the other engines (tests/test_missing.py), pandas' truth.
        qs = [parse_where(raw, t) for t, _ in RAW_QUERIES]
        assert eng.counts(qs) == [int(mask(adult_raw_frame).sum()) for _, mask in RAW_QUERIES]


def test_frames_parquet_table_and_report(spark: Any, tmp_path: Path) -> None:
    parquet = tmp_path / "people.parquet"
    pq.write_table(pa.Table.from_pandas(REPORT_FRAME, preserve_index=False), parquet)
    spark.read.parquet(str(parquet)).createOrReplaceTempView("people")
    qs = [parse_where(REPORT_SCHEMA, t) for t in ("TRUE", "color = 'red'", "age >= 18", "pay < 10")]
    for eng in (
        SparkEngine.from_frame(REPORT_SCHEMA, REPORT_FRAME, spark=spark),
        SparkEngine.from_path(REPORT_SCHEMA, parquet, spark=spark),
        SparkEngine.from_table(REPORT_SCHEMA, "people", spark=spark),
    ):
        with eng:
            rep = eng.report
            assert (rep.rows, rep.rows_outside) == (7, 6)
            assert rep.missing == {"age": 1, "color": 1, "pay": 1}
            assert rep.outside == {"age": 2, "color": 1, "pay": 1}
            assert eng.counts(qs) == [1, 1, 1, 1]


def test_bad_input(spark: Any, tmp_path: Path) -> None:
    schema = Schema((IntAttribute("age", 0, 99), CategoricalAttribute("sex", ("F", "M"))))
    with pytest.raises(DataError, match=r"'sex'.*missing"):
        SparkEngine.from_frame(schema, pd.DataFrame({"age": [1, 2]}), spark=spark)
    with pytest.raises(DataError, match="column 'age': 1 value") as err:
        SparkEngine.from_frame(schema, pd.DataFrame({"age": ["3", SECRET], "sex": ["F", "M"]}), spark=spark)
    assert SECRET not in str(err.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        SparkEngine.from_path(schema, empty, spark=spark)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + SECRET.encode() * 10)
    with pytest.raises(DataError, match=r"broken.parquet") as err:
        SparkEngine.from_path(schema, broken, spark=spark)
    assert SECRET not in str(err.value)
    with pytest.raises(DataError, match="no table"):
        SparkEngine.from_table(schema, "no_such_table", spark=spark)


def test_cli_count_with_spark(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from overlapdp.cli.main import main

    schema_file = tmp_path / "s.json"
    REPORT_SCHEMA.save(schema_file)
    data = tmp_path / "people.csv"
    REPORT_FRAME.to_csv(data, index=False)
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "all", "where": "TRUE"}\n{"id": "red", "where": "color = \'red\'"}\n')
    args = [
        "count",
        "--schema",
        str(schema_file),
        "--data",
        str(data),
        "--queries",
        str(queries),
        "--exact",
        "--json",
    ]
    for engine in ("spark", "duckdb", "pandas", "polars"):
        with pytest.raises(SystemExit) as done:
            main([*args, "--engine", engine])
        assert done.value.code in (0, None)
        out, err = capsys.readouterr()
        assert json.loads(out) == [{"id": "all", "count": 1}, {"id": "red", "count": 1}]
        # The figures of rows outside the domain are for 'schema check' only.
        assert "6 of 7" not in err and "outside" not in err
        with pytest.raises(SystemExit) as done:
            main(["schema", "check", str(schema_file), "--data", str(data), "--engine", engine, "--json"])
        assert done.value.code in (0, None)  # the schema drops such rows ("outside": "drop")
        out, err = capsys.readouterr()
        doc = json.loads(out)
        assert (doc["rows"], doc["rows_outside"]) == (7, 6) and "NOT PRIVATE" in err
        assert doc["missing"] == {"age": 1, "color": 1, "pay": 1}
