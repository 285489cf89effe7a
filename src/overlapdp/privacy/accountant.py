"""The overlap-aware accountant, kept as one import path (MATH.md sections 1, 2, 5).

The accountant is three modules: :mod:`overlapdp.privacy.measures` (each privacy definition as one
:class:`~overlapdp.privacy.measures.Measure`: per-row loads, native value, conversion to epsilon, the
filter's exact test), :mod:`overlapdp.privacy.odometer` (the ledger and its guarantee under every
definition) and :mod:`overlapdp.privacy.privacy_filter` (the adaptive per-row filter). This module
re-exports their public names for code that imports them from here.
"""

from overlapdp.privacy.measures import DEFINITIONS, AdaptivityError, DefinitionGuarantee
from overlapdp.privacy.odometer import Charge, Odometer, OdometerReport, whole_domain
from overlapdp.privacy.privacy_filter import Admission, PrivacyFilter

__all__ = [
    "DEFINITIONS",
    "AdaptivityError",
    "Admission",
    "Charge",
    "DefinitionGuarantee",
    "Odometer",
    "OdometerReport",
    "PrivacyFilter",
    "whole_domain",
]
