"""Statistical privacy audits: empirical lower bounds on a mechanism's epsilon (see
:mod:`overlapdp.audit.empirical`), and deliberately BROKEN sparse-vector variants that the audit must
flag (:mod:`overlapdp.audit.broken_svt`; never use them to release data), with the battery of attacks
that separates them from the correct mechanism (:mod:`overlapdp.audit.battery`)."""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.audit.empirical import AuditResult, Sampler, audit_epsilon, clopper_pearson, repeat

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "AuditResult": "empirical",
    "Sampler": "empirical",
    "audit_epsilon": "empirical",
    "clopper_pearson": "empirical",
    "repeat": "empirical",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["AuditResult", "Sampler", "audit_epsilon", "clopper_pearson", "repeat"]
