"""The light options of the privacy layer, apart from its numpy modules. The neighbouring relation
(MATH.md 1.2) as a name alone: ``overlapdp account`` reads it for its
``--neighbouring`` option at start-up, and :mod:`overlapdp.privacy.definitions` imports numpy, which
``overlapdp --help`` must not load (tests/test_startup.py checks it)."""

from __future__ import annotations

from typing import Literal

# A row added or removed (the default), or one row replaced.
Neighbouring = Literal["add_remove", "replace"]

#: delta of the (epsilon, delta) statement of zCDP and GDP guarantees when none is given (the one
#: definition: the measures, the planner and the CLI's option read it from here).
DEFAULT_DELTA = 1e-6
