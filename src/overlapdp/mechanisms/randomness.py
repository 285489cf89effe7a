"""Where the noise's randomness comes from (MATH.md 6.3; DESIGN.md "Rules that keep it sound").

Every sampler draws uniform 64-bit words from a :class:`RandomSource`:

- :class:`SystemRandomSource` (the default) reads the operating system's CSPRNG (``os.urandom``, i.e.
  ``getrandom(2)``), the same source as :mod:`secrets`;
- :class:`SeededRandomSource` is a reproducible PCG64 stream for tests and simulations only.

:func:`resolve_source` turns what a caller passed into a source and REFUSES anything but the CSPRNG when
the caller declares a served (production) context, or when the environment variable
``OVERLAPDP_SERVED`` is set to ``1`` (so a deployment can forbid seeded generators globally).

Words (one at a time, in small arrays, and as pools of ready noise draws, :meth:`RandomSource.pooled`)
are buffered for speed; buffers are dropped in a forked child (``os.register_at_fork``) so two
processes never reuse the same random words or noise. A source may be shared by threads (a served
deployment shares one): each buffered word and each pooled draw is handed to exactly one caller, and an
empty buffer or pool is refilled instead of raising. Buffering changes only when words are read from the
generator, never their distribution: every word is still a fresh uniform 64-bit word used once (words
left in a buffer that is replaced are discarded unread, which is independent of their values).
"""

from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from overlapdp.mechanisms.errors import InsecureRandomnessError

_BUFFER_WORDS = 2048
# Small ``words(n)`` requests (the vectorised samplers' rejection and series tails) are served from a
# buffered array: one system call per 8192 words instead of one per request.
_ARRAY_BUFFER_WORDS = 8192
_SMALL_WORDS = 512
# A pool's first refill makes _POOL_SIZE draws (a cold distribution costs little); each later refill of
# the same pool doubles, up to _MAX_POOL_SIZE, so a hot distribution pays numpy's per-call cost rarely.
_POOL_SIZE = 512
_MAX_POOL_SIZE = 4096
_MAX_POOLS = 64
_MASK64 = (1 << 64) - 1


class RandomSource(ABC):
    """A stream of independent uniform 64-bit words, drawn one at a time or as numpy arrays."""

    #: True only for the operating system's CSPRNG.
    secure: bool = False

    def __init__(self) -> None:
        self._buffer: list[int] = []
        self._pools: dict[Hashable, list[int]] = {}
        self._pool_sizes: dict[Hashable, int] = {}
        # Guards refilling and evicting pools (the slow path); taking a draw is a lock-free list.pop.
        self._pool_lock = threading.Lock()
        self._array: npt.NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
        self._array_pos = 0
        self._array_lock = threading.Lock()
        _LIVE_SOURCES.add(self)

    @abstractmethod
    def _fresh_words(self, n: int) -> npt.NDArray[np.uint64]:
        """``n`` fresh uniform words from the underlying generator."""

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        """``n`` uniform 64-bit words as a fresh, WRITABLE numpy array that the caller owns (the
        vectorised samplers overwrite rejected words in place)."""
        if n <= _SMALL_WORDS:
            with self._array_lock:  # each buffered word goes to exactly one caller
                pos = self._array_pos
                if pos + n > self._array.size:
                    self._array = self._fresh_words(_ARRAY_BUFFER_WORDS)
                    pos = 0
                self._array_pos = pos + n
                return self._array[pos : pos + n].copy()
        w = self._fresh_words(n)
        if not w.flags.writeable:  # e.g. a view of an immutable bytes object: never write into it
            w = w.copy()
        return w

    def word(self) -> int:
        """One uniform 64-bit word as a Python int."""
        buf = self._buffer
        while True:
            # list.pop is atomic: when another thread takes the last word between a check and the pop,
            # the pop fails and this thread refills rather than raising (words are never handed out twice).
            try:
                return buf.pop()
            except IndexError:
                buf.extend(self._fresh_words(_BUFFER_WORDS).tolist())

    def randbelow(self, m: int) -> int:
        """A uniform integer in ``[0, m)``, exactly (rejection, no modulo bias), for any ``m >= 1``."""
        if m <= 0:
            raise ValueError("randbelow needs m >= 1")
        if m <= _MASK64:
            # Accept w >= 2^64 mod m: the accepted range has a multiple of m values.
            floor = ((1 << 64) - m) % m
            while True:
                w = self.word()
                if w >= floor:
                    return w % m
        bits = m.bit_length()
        nwords = (bits + 63) // 64
        while True:
            v = 0
            for _ in range(nwords):
                v = (v << 64) | self.word()
            v >>= nwords * 64 - bits
            if v < m:
                return v

    def below(self, m: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """Independent uniform integers in ``[0, m_i)`` for each entry (every ``1 <= m_i < 2^64``), exactly."""
        m = np.asarray(m, dtype=np.uint64)
        out = np.empty(m.shape, dtype=np.uint64)
        floor = (np.uint64(0) - m) % m  # 2^64 mod m, in wrapping uint64 arithmetic
        todo = np.arange(m.size)
        while todo.size:
            w = self.words(todo.size)
            ok = w >= floor[todo]
            idx = todo[ok]
            out[idx] = w[ok] % m[idx]
            todo = todo[~ok]
        return out

    def pooled(self, key: Hashable, refill: Callable[[int], npt.NDArray[np.int64]]) -> int:
        """One draw of the distribution named ``key``, served from a pool of i.i.d. draws that
        ``refill(n)`` (an exact vectorised sampler using this source) fills: ``_POOL_SIZE`` draws at the
        first refill of ``key``, twice as many at each later one, at most ``_MAX_POOL_SIZE``.

        Draws from a pool are exactly as independent and as exactly distributed as direct draws; the
        pool only amortises numpy's per-call cost for mechanisms that need one draw at a time.
        Thread-safe: each draw goes to exactly one caller (``list.pop`` is atomic); a caller that finds
        the pool empty, or loses the race for its last draw, refills it under a lock and tries again.
        """
        while True:
            pool = self._pools.get(key)
            if pool:
                try:
                    return pool.pop()
                except IndexError:  # another thread took the last draw after the check
                    pass
            with self._pool_lock:
                if not self._pools.get(key):  # no other thread refilled it meanwhile
                    if key not in self._pools and len(self._pools) >= _MAX_POOLS:
                        evicted = next(iter(self._pools))
                        self._pools.pop(evicted)
                        self._pool_sizes.pop(evicted, None)
                    size = self._pool_sizes.get(key, _POOL_SIZE)
                    self._pool_sizes[key] = min(2 * size, _MAX_POOL_SIZE)
                    self._pools[key] = refill(size).tolist()

    def _drop_buffer(self) -> None:
        self._buffer.clear()
        self._pools.clear()
        self._pool_sizes.clear()
        self._array = np.empty(0, dtype=np.uint64)
        self._array_pos = 0
        # A lock held by another thread at fork time would stay locked forever in the child.
        self._pool_lock = threading.Lock()
        self._array_lock = threading.Lock()


class SystemRandomSource(RandomSource):
    """The operating system's CSPRNG (``os.urandom``): the default and the only source a served context
    accepts."""

    secure = True

    def _fresh_words(self, n: int) -> npt.NDArray[np.uint64]:
        # np.frombuffer over the immutable bytes from os.urandom is READ-ONLY; a bytearray makes the
        # array writable and owned by the caller, as RandomSource.words promises.
        return np.frombuffer(bytearray(os.urandom(8 * n)), dtype=np.uint64)

    def __repr__(self) -> str:
        return "SystemRandomSource()"


class SeededRandomSource(RandomSource):
    """A reproducible PCG64 stream: for tests and simulations ONLY (its output is predictable)."""

    secure = False

    def __init__(self, seed: int | None = None) -> None:
        super().__init__()
        self.seed = seed
        self._bits = np.random.PCG64(seed)

    def _fresh_words(self, n: int) -> npt.NDArray[np.uint64]:
        return np.asarray(self._bits.random_raw(n), dtype=np.uint64)

    def __repr__(self) -> str:
        return f"SeededRandomSource(seed={self.seed!r})"


_LIVE_SOURCES: weakref.WeakSet[RandomSource] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for source in list(_LIVE_SOURCES):
        source._drop_buffer()


os.register_at_fork(after_in_child=_after_fork_in_child)

#: What callers may pass as ``rng``: nothing (the CSPRNG), a source, a seed, or a numpy Generator
#: (seeded sources are for tests and simulations).
RngLike: TypeAlias = RandomSource | int | np.random.Generator | None

_SYSTEM = SystemRandomSource()


def served_by_environment() -> bool:
    """True when ``OVERLAPDP_SERVED=1`` declares this process a served deployment."""
    return os.environ.get("OVERLAPDP_SERVED", "").strip().lower() in {"1", "true", "yes"}


def resolve_source(rng: RngLike = None, *, served: bool = False) -> RandomSource:
    """The :class:`RandomSource` for ``rng``; the shared CSPRNG source when ``rng`` is None.

    Raises :class:`InsecureRandomnessError` when ``served`` is true (or ``OVERLAPDP_SERVED=1``) and
    ``rng`` is anything but the operating system's CSPRNG.
    """
    if rng is None:
        source: RandomSource = _SYSTEM
    elif isinstance(rng, RandomSource):
        source = rng
    elif isinstance(rng, np.random.Generator):
        source = SeededRandomSource(int(rng.integers(0, 2**63)))
    elif isinstance(rng, int) and not isinstance(rng, bool):
        source = SeededRandomSource(rng)
    else:
        raise InsecureRandomnessError(
            f"rng must be None (the OS CSPRNG), a RandomSource, a seed or a numpy Generator, got {type(rng).__name__}"
        )
    if (served or served_by_environment()) and not source.secure:
        raise InsecureRandomnessError(
            f"a served context only accepts the operating system's CSPRNG, not {source!r} "
            "(seeded generators are for tests and simulations)"
        )
    return source


def system_source() -> RandomSource:
    """The shared operating-system CSPRNG source."""
    return _SYSTEM
