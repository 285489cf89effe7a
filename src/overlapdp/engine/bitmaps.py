"""Exact counts of many queries over a large table by row bitmaps (the path when no histogram is small).

When the atom grid is too large for a histogram (every row its own cell), counting costs about one
predicate test per row and query whatever the method. This path makes each test a machine-word
operation on 64 rows at once. Per chunk of in-domain rows:

1. each constrained attribute's value indices are stored as bit planes (bit ``b`` of every row's code);
2. for every cut point ``c`` some query's interval starts or ends at, the bitmap ``[code < c]`` is built
   by the bit-sliced comparison (most significant bit first: ``lt |= eq & ~plane_b`` where ``c`` has a
   one, ``eq &= plane_b`` or ``eq &= ~plane_b``), a handful of word operations per bit;
3. a query's rows are the AND over its attributes of the OR over its intervals ``[lo, hi)`` of
   ``[code < hi] & ~[code < lo]``, counted with a popcount.

Only integer bit operations: the counts are exact (the engine tests compare them with pandas masks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from overlapdp.query import PredicateQuery

Words = npt.NDArray[np.uint64]
#: Rows per chunk engines hand over (one bitmap is 128 KiB).
CHUNK_ROWS = 1 << 20


def _pack(bits: npt.NDArray[np.bool_], words: int) -> Words:
    packed = np.packbits(bits, bitorder="little")
    out = np.zeros(words * 8, dtype=np.uint8)
    out[: packed.shape[0]] = packed
    return out.view(np.uint64)


def _less_than(planes: list[Words], c: int, valid: Words) -> Words:
    """Rows whose code is ``< c`` (bit-sliced comparison over the planes, least significant first)."""
    if c <= 0:
        return np.zeros_like(valid)
    if c >= 1 << len(planes):
        return valid
    lt = np.zeros_like(valid)
    eq = valid.copy()
    for b in range(len(planes) - 1, -1, -1):
        if (c >> b) & 1:
            lt |= eq & ~planes[b]
            eq &= planes[b]
        else:
            eq &= ~planes[b]
    return lt


def bitmap_counts(
    chunks: Iterable[Mapping[int, npt.NDArray[np.integer]]],
    queries: Sequence[PredicateQuery],
) -> list[int]:
    """Exact count of every query over the rows of ``chunks``.

    Each chunk maps attribute positions to code arrays of equal length, for in-domain rows only (every
    code ``>= 0``), holding at least :func:`needed_positions` (and at least one array). Contradictions
    count 0; a query without constraints counts every row.
    """
    cuts: dict[int, set[int]] = {}
    for q in queries:
        for pos, cov in q.constraints:
            s = cuts.setdefault(pos, set())
            for lo, hi in cov.intervals:
                s.add(lo)
                s.add(hi)
    out = np.zeros(len(queries), dtype=np.int64)
    for cols in chunks:
        n = int(next(iter(cols.values())).shape[0]) if cols else 0
        if n == 0:
            continue
        words = (n + 63) // 64
        valid = _pack(np.ones(n, dtype=bool), words)
        below: dict[tuple[int, int], Words] = {}
        for pos, points in cuts.items():
            codes = np.asarray(cols[pos], dtype=np.int64)
            top = int(codes.max()) if n else 0
            nbits = max(1, top.bit_length())
            planes = [_pack(((codes >> b) & 1).astype(bool), words) for b in range(nbits)]
            for c in points:
                below[(pos, c)] = _less_than(planes, c, valid)
        for i, q in enumerate(queries):
            if q.is_contradiction:
                continue
            acc: Words | None = None
            for pos, cov in q.constraints:
                bm: Words | None = None
                for lo, hi in cov.intervals:
                    piece = below[(pos, hi)] & ~below[(pos, lo)] if lo > 0 else below[(pos, hi)]
                    bm = piece if bm is None else bm | piece
                assert bm is not None
                acc = bm if acc is None else acc & bm
            out[i] += n if acc is None else int(np.bitwise_count(acc).sum())
    return [int(v) for v in out]


def needed_positions(queries: Sequence[PredicateQuery]) -> list[int]:
    """The attribute positions :func:`bitmap_counts` reads (at least one, for the row count)."""
    return sorted({pos for q in queries for pos, _ in q.constraints}) or [0]
