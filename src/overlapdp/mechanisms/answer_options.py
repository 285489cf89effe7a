"""The choices and defaults of :func:`overlapdp.mechanisms.answering.plan_answers`, apart from it.

``overlapdp answer`` builds its options and ``--help`` from them at start-up; the answering module
imports numpy (through the privacy definitions), which ``overlapdp --help`` must not load (DESIGN.md,
heavy dependencies are imported where used; tests/test_startup.py checks it).
"""

from __future__ import annotations

from typing import Literal

from overlapdp.privacy.neighbouring import DEFAULT_DELTA as DEFAULT_DELTA  # a light module: no numpy

Definition = Literal["pure", "zcdp", "gdp"]
Accounting = Literal["overlap", "sequential"]
#: Default time limit (seconds) of the maximum-overlap search; past it its safe upper bound is used.
DEFAULT_EFFORT = 30.0
