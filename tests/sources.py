"""The randomness sources statistical tests run on: a seeded PCG64 stream (reproducible) and the
operating system's CSPRNG, the very source a served deployment uses (``system_source()``, which
``resolve_source(None, served=True)`` returns), so that a fault that only the OS source shows (such as a
read-only buffer) cannot hide behind seeded tests.

The OS source cannot be seeded, so a statistical assertion on it is a hypothesis test with a stated
false-alarm rate: use :func:`alpha_for`, which is 1e-4 on the seeded source (the outcome is fixed by the
seed anyway) and 1e-7 on the OS source (a spurious failure about once in ten million runs).
"""

from __future__ import annotations

import pytest

from overlapdp.mechanisms import RandomSource, SeededRandomSource, system_source

KINDS = ("seeded", "os")

#: Parametrise a test over both sources; the test takes ``kind`` and calls ``source(kind, seed)``.
on_both_sources = pytest.mark.parametrize("kind", KINDS)

ALPHA_SEEDED = 1e-4
ALPHA_OS = 1e-7


def source(kind: str, seed: int) -> RandomSource:
    """A fresh seeded source, or the shared OS CSPRNG source a served deployment uses."""
    if kind == "seeded":
        return SeededRandomSource(seed)
    if kind == "os":
        return system_source()
    raise ValueError(f"unknown source kind {kind!r}")


def alpha_for(kind: str) -> float:
    """The significance level of a statistical test on this source (its false-alarm rate on ``os``)."""
    return ALPHA_OS if kind == "os" else ALPHA_SEEDED


#: Audits: at 0.95 on the seeded source (the outcome is fixed by the seed) and at 1 - 1e-6 on the OS
#: source, where a mechanism that keeps its declaration is flagged with probability at most 1e-6
#: (the audit's held-out Clopper-Pearson guarantee, overlapdp.audit.empirical).
CONFIDENCE_SEEDED = 0.95
CONFIDENCE_OS = 1 - 1e-6

#: Parametrise a statistical test over both sources, the OS one marked slow: the quick run draws from
#: the seeded source only (its outcome fixed by the seed, a quarter to a half of the CPU), the whole
#: suite from the operating system's too.
on_both_sources_os_slow = pytest.mark.parametrize(
    "kind", ["seeded", pytest.param("os", marks=pytest.mark.slow)]
)


def confidence_for(kind: str) -> float:
    """The confidence an audit runs at on this source."""
    return CONFIDENCE_OS if kind == "os" else CONFIDENCE_SEEDED
