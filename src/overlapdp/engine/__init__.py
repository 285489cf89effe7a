"""Where the data lives and how counts are computed (DESIGN.md data flow, step 5).

:class:`Engine` is the interface; :class:`DuckDBEngine` (the embedded default), :class:`PandasEngine`,
:class:`PolarsEngine` and ``SparkEngine`` (:mod:`overlapdp.engine.spark_engine`, imported on demand)
implement it. :func:`open_engine` picks one by name.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.engine.base import DomainReport, Engine
    from overlapdp.engine.duckdb_engine import DuckDBEngine
    from overlapdp.engine.encoding import EncodedTable, encode_frame
    from overlapdp.engine.exact import exact_counts
    from overlapdp.engine.pandas_engine import PandasEngine
    from overlapdp.engine.polars_engine import PolarsEngine
    from overlapdp.engine.registry import ENGINES, open_engine

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "DomainReport": "base",
    "Engine": "base",
    "DuckDBEngine": "duckdb_engine",
    "EncodedTable": "encoding",
    "encode_frame": "encoding",
    "exact_counts": "exact",
    "PandasEngine": "pandas_engine",
    "PolarsEngine": "polars_engine",
    "ENGINES": "registry",
    "open_engine": "registry",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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
