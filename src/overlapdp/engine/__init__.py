"""Where the data lives and how counts are computed (DESIGN.md data flow, step 6).

:class:`Engine` is the interface; :class:`DuckDBEngine` (the embedded default), :class:`PandasEngine`,
:class:`PolarsEngine` and ``SparkEngine`` (:mod:`overlapdp.engine.spark_engine`, imported on demand)
implement it. :func:`open_engine` picks one by name.
"""

from overlapdp.engine.base import DomainReport, Engine
from overlapdp.engine.duckdb_engine import DuckDBEngine
from overlapdp.engine.encoding import EncodedTable, encode_frame
from overlapdp.engine.exact import exact_counts
from overlapdp.engine.pandas_engine import PandasEngine
from overlapdp.engine.polars_engine import PolarsEngine
from overlapdp.engine.registry import ENGINES, open_engine

__all__ = [
    "ENGINES",
    "DomainReport",
    "DuckDBEngine",
    "EncodedTable",
    "Engine",
    "PandasEngine",
    "PolarsEngine",
    "encode_frame",
    "exact_counts",
    "open_engine",
]
