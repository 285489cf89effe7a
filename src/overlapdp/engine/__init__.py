"""Where the data lives and how counts are computed (DESIGN.md data flow, step 6)."""

from overlapdp.engine.encoding import EncodedTable, encode_frame
from overlapdp.engine.exact import exact_counts

__all__ = ["EncodedTable", "encode_frame", "exact_counts"]
